// metactl load: runs one rank — plan from a daemon, read or stream its shards onto its
// device, verify across all ranks, optionally write a report of what arrived.
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "client/load/rank_loader.h"
#include "client/metactl/commands.h"
#include "client/metactl/load_progress.h"
#include "client/verify/rank_report.h"
#include "client/verify/rendezvous.h"
#include "client/verify/verify.h"
#include "libtorch/torch_glue.h"
#include "planner/skeleton/init_policy.h"
#include "planner/strategy/strategy_flags.h"
#include "util/cli_args.h"
#include "util/hash/sha256.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace metaload {
namespace {

// Flag (none when ""), else environment variable, else fallback; InvalidArgument naming both if
// not a number.
absl::StatusOr<int64_t> IntFromFlagOrEnv(const CliArgs& args, const std::string& flag, const char* env,
                                         int64_t fallback, int64_t min, int64_t max) {
  if (args.Has(flag)) return args.GetInt(flag, fallback, min, max);
  const char* text = std::getenv(env);
  if (text == nullptr || *text == '\0') return fallback;
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < min || value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment ", env, "=\"", text, "\" must be an integer from ", min, " to ", max,
                     flag.empty() ? "" : absl::StrCat(" (or pass --", flag, ")")));
  }
  return value;
}

// "True", "true", "1" (torchrun writes "True").
bool TruthyEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return false;
  const std::string v(value);
  return v == "True" || v == "true" || v == "1";
}

// "model.layers.0.weight: from server a at byte 104857600: <error> -> server b".
std::string FailoverLine(const std::string& tensor, const FailoverEvent& e) {
  return absl::StrCat(tensor, ": from server ", e.from, " at byte ", e.at_byte, ": ", e.error, " -> server ",
                      e.to);
}

// "3 items failed over from a to b", one line per pair of servers, items counted once per pair.
std::vector<std::string> FailoverSummary(const RankLoad& load) {
  std::map<std::pair<std::string, std::string>, std::set<std::string>> items;
  for (const LoadedTensor& t : load.tensors) {
    for (const FailoverEvent& e : t.failovers) items[{e.from, e.to}].insert(t.name);
  }
  std::vector<std::string> lines;
  for (const auto& [pair, names] : items) {
    lines.push_back(absl::StrCat(names.size(), names.size() == 1 ? " item" : " items", " failed over from ",
                                 pair.first, " to ", pair.second));
  }
  return lines;
}

absl::Status WriteReport(const RankLoad& load, const std::string& path) {
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  for (const LoadedTensor& t : load.tensors) {
    nlohmann::ordered_json entry;
    entry["name"] = t.name;
    std::string dtype = "?";
    std::vector<int64_t> shape;
    std::string digest;
    ML_RETURN_IF_ERROR(CallTorch(absl::StrCat("hashing ", t.name), [&] {
      if (!t.tensor.defined()) return;
      auto code = FromScalarType(t.tensor.scalar_type());
      if (code.ok()) dtype = std::string(DTypeCode(*code));
      shape.assign(t.tensor.sizes().begin(), t.tensor.sizes().end());
      if (!t.filled || t.tensor.is_meta()) return;
      at::Tensor host = t.tensor.contiguous().cpu();
      digest = Sha256Hex(absl::MakeConstSpan(static_cast<const uint8_t*>(host.data_ptr()), host.nbytes()));
    }));
    entry["dtype"] = dtype;
    entry["shape"] = shape;
    if (t.slice.has_value()) {
      entry["slice"] = {{"dim", t.slice->dim}, {"start", t.slice->start}, {"length", t.slice->length}};
      entry["full_shape"] = t.full_shape;
    }
    entry["sha256"] = digest.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(digest);
    entry["filled"] = t.filled;
    entry["source"] = ProvenanceText(t.provenance);
    if (!t.error.empty()) entry["error"] = t.error;  // why it is not filled
    if (!t.provenance.tied_to.empty()) entry["tied_to"] = t.provenance.tied_to;
    if (t.filled && t.proof.has_value()) {  // this rank's part: verification sums every rank's
      const TensorProof& p = *t.proof;
      entry["proof"] = {{"digest", p.digest.has_value() ? DigestKindName(p.digest->kind) : "none"},
                        {"tiles", p.tile_count},
                        {"tiles_hashed", p.sum.tiles_hashed},
                        {"tiles_cut", p.sum.tiles_cut}};
    }
    if (!t.failovers.empty()) {
      nlohmann::ordered_json events = nlohmann::ordered_json::array();
      for (const FailoverEvent& e : t.failovers) {
        events.push_back({{"from", e.from},
                          {"to", e.to},
                          {"at_byte", e.at_byte},
                          {"error", e.error},
                          {"after_s", absl::ToDoubleSeconds(e.when - load.started)}});
      }
      entry["failovers"] = std::move(events);
    }
    tensors.push_back(std::move(entry));
  }
  nlohmann::ordered_json failovers = nlohmann::ordered_json::array();
  for (const LoadedTensor& t : load.tensors) {
    for (const FailoverEvent& e : t.failovers) failovers.push_back(FailoverLine(t.name, e));
  }
  nlohmann::ordered_json by_node = nlohmann::ordered_json::object();
  for (const auto& [node, bytes] : load.streamed_bytes_by_node) by_node[node] = bytes;
  nlohmann::ordered_json report;
  report["rank"] = load.rank;
  report["world_size"] = load.world_size;
  report["node"] = load.node;
  report["device"] = load.device;
  report["bytes_read"] = load.direct_bytes + load.streamed_bytes;  // from storage, by this rank
  report["fanout_received_bytes"] = load.fanout_received_bytes;
  report["fanout_sent_bytes"] = load.fanout_sent_bytes;
  report["fanout_notes"] = load.fanout_notes;
  report["plan_digest"] = load.plan_digest;
  report["seconds"] = load.seconds;
  report["rss_before_bytes"] = load.rss_before_bytes;
  report["rss_peak_bytes"] = load.rss_peak_bytes;
  report["streamed_bytes_by_node"] = std::move(by_node);
  report["failovers"] = std::move(failovers);
  report["has_digests"] = load.has_digests;
  report["tensors"] = std::move(tensors);
  std::ofstream out(path, std::ios::trunc);
  out << report.dump(1) << "\n";
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write report ", path));
  return absl::OkStatus();
}

CliArgs LoadFlags() {
  CliArgs args("metactl load", "NAME --daemon ADDR [--rank R --world W] [flags]",
               "Runs one rank: asks the daemon for this rank's part of the plan of model NAME,\n"
               "allocates this rank's tensors directly on its device, fills them by reading the\n"
               "checkpoint files directly whenever this host can open them, or else by streaming byte\n"
               "ranges from a daemon that can, then verifies with one all-reduce across all ranks that\n"
               "no rank holds a tensor on meta or unfilled and that all loaded the same plan.");
  args.Flag("daemon", "ADDR", "this node's metad (default $METAD_ADDRESS, else 127.0.0.1:7070)");
  AddCredentialFlags(args);
  args.Flag("rank", "R", "this rank (default $RANK, else 0)");
  args.Flag("world", "W", "number of ranks (default $WORLD_SIZE, else 1)");
  args.Flag("device", "DEV", "cpu | cuda | cuda:N (default cpu; cuda uses $LOCAL_RANK)");
  args.Flag("source", "SRC",
            "auto | direct | stream (default auto: direct whenever this host can open a file)");
  AddStrategyFlags(&args);
  args.Flag(
      "report", "FILE",
      "write a JSON report here; {rank} in FILE becomes this rank (torchrun gives every rank the\n"
      "same arguments): {\"rank\",\"bytes_read\",\"seconds\",\"rss_before_bytes\",\"rss_peak_bytes\",\n"
      "\"plan_digest\",\"fanout_received_bytes\",\"fanout_sent_bytes\",\"fanout_notes\",\"tensors\":[{"
      "\"name\",\"dtype\",\"shape\",\"slice\",\"full_shape\",\"sha256\",\n"
      "\"filled\",\"source\",\"error\",\"failovers\"}],\"failovers\":[\"TENSOR: from server A at byte N:\n"
      "ERROR -> server B\"],\"streamed_bytes_by_node\"} (shape and sha256 are of the slice as loaded; error: "
      "why\n"
      "it is not filled; a tensor's \"failovers\": [{\"from\",\"to\",\"at_byte\",\"error\",\"after_s\"}])");
  args.Flag("master-addr", "HOST", "rendezvous host for verification (default $MASTER_ADDR, else 127.0.0.1)");
  args.Flag("master-port", "PORT", "rendezvous port (default $MASTER_PORT, else 29500)");
  args.Flag("read-threads", "N", "parallel reads or streams (default 2)");
  args.Switch("no-fan-out",
              "every rank reads all of its tensors itself. Default (fan-out): a piece the plan gives\n"
              "ranks on several nodes (replicas, `replicate`, tensors every rank of a tp group holds) is\n"
              "read from storage by one of them, balanced by bytes, and by its node-mates from their page\n"
              "cache; the other nodes' ranks receive it down a chain (reader, then each holder in rank\n"
              "order passing it on: it enters each node once) on one Gloo group of the job, each chunk\n"
              "checked by CRC-32C, while the reader reads on. What does not arrive (its reader failed, a\n"
              "rank on the way died: no rank waits longer than --timeout) is read from storage. The\n"
              "report's \"source\" says \"fanout:rank N\" (N: the reader)");
  args.Switch(
      "dequantize",
      "a quantized checkpoint (its config.json's quantization_config: fp8 blocks, compressed-tensors\n"
      "FP8, mxfp4; docs/quantization.md): fill each value stored as codes and scales in the\n"
      "module's float dtype (or --dtype), each rank reading only the codes of its part and the\n"
      "scales alike, both proven by verification. Without it such a model is refused, naming it");
  args.Switch("require-proof",
              "exit 3 unless every tensor's content is proven: every stored tensor checked against the\n"
              "digest registered for it (whatever part of it each rank holds), every buffer computed by\n"
              "its rule; a tensor read without a digest, unproven, or initialized by --init-missing fails\n"
              "(docs/integrity.md)");
  args.Switch("huge-pages",
              "CPU ranks: advise transparent huge pages for the tensors' memory (faster on bare\n"
              "metal; slower on VMs that return freed memory to the host, see docs/cli.md)");
  args.Flag("init-missing", "POLICY",
            "tensors the checkpoint lacks: error, zeros, or normal:STD (seeded by tensor name: the same\n"
            "values on every rank and run). Default: the policy the model was registered with; another\n"
            "value is refused (register again with --replace to change it)");
  args.Switch("progress",
              "draw this rank's progress on stderr, on every rank and wherever stderr goes: bytes of its\n"
              "total, rate, ETA, and how many were read directly, streamed and received by fan-out. On a\n"
              "terminal one line redrawn every 200 ms, the last one kept; elsewhere a line a second.\n"
              "Default: drawn when stderr is a terminal, by the node's first rank (LOCAL_RANK 0 or unset)");
  args.Switch("no-progress", "draw no progress (the result lines still print)");
  args.Switch("quiet", "the same as --no-progress");
  args.Flag("timeout", "SECONDS", "for reads, rendezvous and verification (default 300)");
  args.Flag("stall-timeout", "SECONDS",
            "a stream that delivers no byte for this long fails over to the file's next server\n"
            "(default 30)");
  args.Epilog(
      "examples:\n"
      "  metactl load llama --daemon 127.0.0.1:7070 --rank 0 --world 4\n"
      "  torchrun --nproc-per-node 8 ... (sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)\n\n"
      "exit codes: 0 loaded (\"verified\" when every tensor's content is proven, else the line says\n"
      "what was not); 2 bad input; 3 verification failed: a tensor is on meta or unfilled, its bytes\n"
      "differ from its registered digest, a rank could not load or never joined, ranks loaded\n"
      "different plans (the message names each tensor and rank), or, with --require-proof, some\n"
      "tensor's content is not proven; 1 anything else.");
  return args;
}

// What one `metactl load` was asked to do, every flag and variable read once.
struct LoadRequest {
  LoadOptions load;
  VerifyOptions verify;
  std::optional<std::string> report_path;  // {rank} already replaced
  bool fan_out = true;
  // Tests only: METALOAD_FANOUT_TEST_KILL_AFTER_CHUNKS, METALOAD_FANOUT_TEST_STALL_AFTER_CHUNKS,
  // METALOAD_FANOUT_TEST_CHUNK_BYTES (fanout.h).
  int64_t fanout_kill_after_chunks = 0;
  int64_t fanout_stall_after_chunks = 0;
  int64_t fanout_chunk_bytes = 0;  // 0: FanoutSettings' default
};

// --progress / --no-progress / --quiet, stderr and LOCAL_RANK as load_progress.h reads them.
absl::StatusOr<ProgressStyle> ProgressStyleOf(const CliArgs& args) {
  const bool off = args.Has("no-progress") || args.Has("quiet");
  if (off && args.Has("progress")) {
    return absl::InvalidArgumentError("--progress conflicts with --no-progress and --quiet: pass one");
  }
  std::optional<bool> flag;
  if (off || args.Has("progress")) flag = !off;
  ML_ASSIGN_OR_RETURN(int64_t local_rank, IntFromFlagOrEnv(args, "", "LOCAL_RANK", -1, 0, 1 << 20));
  return ChooseProgressStyle(
      flag, ::isatty(STDERR_FILENO) == 1,
      local_rank < 0 ? std::nullopt : std::optional<int>(static_cast<int>(local_rank)));
}

absl::StatusOr<LoadRequest> ParseLoadRequest(const CliArgs& args) {
  ML_RETURN_IF_ERROR(args.ExpectPositionals(1, 1, "one model NAME"));
  LoadRequest request;
  LoadOptions& options = request.load;
  options.model = args.positionals()[0];
  options.daemon = DaemonAddress(args);
  options.device = args.GetOr("device", "cpu");
  ML_ASSIGN_OR_RETURN(options.strategy, ParseStrategyFlags(args));
  options.strategy.dequantize = args.Has("dequantize");
  ML_ASSIGN_OR_RETURN(int64_t rank, IntFromFlagOrEnv(args, "rank", "RANK", 0, 0, 1 << 20));
  ML_ASSIGN_OR_RETURN(int64_t world, IntFromFlagOrEnv(args, "world", "WORLD_SIZE", 1, 1, 1 << 20));
  ML_ASSIGN_OR_RETURN(int64_t port, IntFromFlagOrEnv(args, "master-port", "MASTER_PORT", 29500, 1, 65535));
  ML_ASSIGN_OR_RETURN(int64_t threads, args.GetInt("read-threads", 2, 1, 64));
  ML_ASSIGN_OR_RETURN(int64_t timeout_s, args.GetInt("timeout", 300, 1, 86400));
  ML_ASSIGN_OR_RETURN(int64_t stall_s, args.GetInt("stall-timeout", 30, 1, 86400));
  ML_ASSIGN_OR_RETURN(options.read.source, ParseSource(args.GetOr("source", "auto")));
  if (args.Has("init-missing")) {
    ML_ASSIGN_OR_RETURN(options.init_missing, ParseInitPolicy(*args.Get("init-missing")));
  }
  if (rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " must be below the world size ", world));
  }
  options.rank = static_cast<int>(rank);
  options.world_size = static_cast<int>(world);
  options.read.read_threads = static_cast<int>(threads);
  options.huge_pages = args.Has("huge-pages");
  options.read.timeout = absl::Seconds(timeout_s);
  options.read.stall_timeout = absl::Seconds(stall_s);
  ML_ASSIGN_OR_RETURN(const ProgressStyle progress, ProgressStyleOf(args));
  options.read.progress = StderrProgress(progress, options.rank, options.world_size);
  options.read.progress_interval = ProgressInterval(progress);

  VerifyOptions& verify = request.verify;
  const char* env_master = std::getenv("MASTER_ADDR");
  verify.master_addr =
      args.GetOr("master-addr", env_master != nullptr && *env_master ? env_master : "127.0.0.1");
  verify.master_port = static_cast<int>(port);
  verify.timeout = options.read.timeout;
  verify.device = options.device;
  verify.require_proof = args.Has("require-proof");
  // Under torchrun the agent already serves a store at MASTER_ADDR:MASTER_PORT: use it instead
  // of binding a second one there; keys are per restart, as torch.distributed keys them.
  verify.host_store = !TruthyEnv("TORCHELASTIC_USE_AGENT_STORE");
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  verify.key_prefix = absl::StrCat("metaload/", options.model, "/attempt_",
                                   restart != nullptr && *restart != '\0' ? restart : "0");
  request.fan_out = !args.Has("no-fan-out");
  ML_ASSIGN_OR_RETURN(
      request.fanout_kill_after_chunks,
      IntFromFlagOrEnv(args, "", "METALOAD_FANOUT_TEST_KILL_AFTER_CHUNKS", 0, 0, int64_t{1} << 40));
  ML_ASSIGN_OR_RETURN(
      request.fanout_stall_after_chunks,
      IntFromFlagOrEnv(args, "", "METALOAD_FANOUT_TEST_STALL_AFTER_CHUNKS", 0, 0, int64_t{1} << 40));
  ML_ASSIGN_OR_RETURN(request.fanout_chunk_bytes,
                      IntFromFlagOrEnv(args, "", "METALOAD_FANOUT_TEST_CHUNK_BYTES", 0, 0, int64_t{1} << 30));
  if (args.Has("report")) {
    request.report_path = absl::StrReplaceAll(*args.Get("report"), {{"{rank}", absl::StrCat(options.rank)}});
  }
  return request;
}

// The rank's load; a failure that may be this rank's alone (its daemon is down) becomes a
// RankLoad that says so, which still joins verification, so that the other ranks learn why
// instead of waiting for a rank that never comes. A failure every rank shares (bad input, an
// unknown model) is returned as it is.
absl::StatusOr<RankLoad> LoadOrReportFailure(const LoadOptions& options) {
  absl::StatusOr<RankLoad> load = LoadRank(options);
  if (load.ok()) return load;
  const absl::StatusCode c = load.status().code();
  const bool rank_local = c == absl::StatusCode::kUnavailable || c == absl::StatusCode::kDeadlineExceeded ||
                          c == absl::StatusCode::kInternal || c == absl::StatusCode::kUnknown;
  if (!rank_local || options.world_size == 1) return load.status();
  ReportAndExitCode("load", load.status());  // this rank's own reason, on its stderr now
  RankLoad failed;
  failed.rank = options.rank;
  failed.world_size = options.world_size;
  failed.device = options.device;  // its peers' backend, whatever went wrong
  failed.failures.push_back(absl::StrCat("could not load: ", load.status().message()));
  return failed;
}

void PrintLoaded(const RankLoad& load) {
  if (!load.failures.empty()) return;
  // Every byte this rank holds, however it came: a replica that received all of its tensors from
  // the rank of its group that read them is not a rank that loaded nothing.
  const uint64_t total = load.direct_bytes + load.streamed_bytes + load.fanout_received_bytes;
  const std::string received =
      load.fanout_received_bytes == 0
          ? ""
          : absl::StrCat(", received by fan-out ", FormatBytes(load.fanout_received_bytes));
  std::cout << absl::StrFormat(
      "rank %d/%d node %s (asked %s) %s: %d tensors, %s (direct %s, streamed %s%s) in %.2f s = %.0f MB/s\n",
      load.rank, load.world_size, load.node, load.answered_by, load.device, load.tensors.size(),
      FormatBytes(total), FormatBytes(load.direct_bytes), FormatBytes(load.streamed_bytes), received,
      load.seconds, load.seconds > 0 ? static_cast<double>(total) / load.seconds / 1e6 : 0.0);
  if (load.fanout_sent_bytes > 0) {
    std::cout << absl::StrFormat("rank %d: fan-out sent %s to its replica group\n", load.rank,
                                 FormatBytes(load.fanout_sent_bytes));
  }
  for (const std::string& note : load.fanout_notes)
    std::cout << absl::StrFormat("rank %d: %s\n", load.rank, note);
  // --dequantize: how many values were computed from codes and scales, and one rule as an example.
  size_t dequantized = 0;
  const LoadedTensor* example = nullptr;
  for (const LoadedTensor& t : load.tensors) {
    if (t.provenance.kind != Provenance::Kind::kDequantized) continue;
    ++dequantized;
    if (example == nullptr) example = &t;
  }
  if (example != nullptr) {
    std::cout << absl::StrFormat("rank %d: %d tensors dequantized on load (first %s: %s)\n", load.rank,
                                 dequantized, example->name, ProvenanceText(example->provenance));
  }
  for (const std::string& line : FailoverSummary(load)) {
    std::cout << absl::StrFormat("rank %d: %s\n", load.rank, line);
  }
}

// Verifies across ranks and prints the verdict; the exit code.
int VerifyAndReport(const RankLoad& load, const VerifyOptions& verify,
                    const std::optional<RendezvousStore>& connected) {
  absl::StatusOr<VerifyOutcome> outcome = VerifyAcrossRanks(load, verify, connected);
  if (!outcome.ok()) return ReportAndExitCode("load", outcome.status());
  if (!outcome->ok()) {
    std::cerr << "metactl load: " << outcome->Message(load.world_size) << "\n";
    return kExitVerifyFailed;
  }
  // "verified" only when every tensor's content is proven; otherwise what was and was not.
  if (outcome->proven()) {
    std::cout << absl::StrFormat("rank %d verified (%s): 0 tensors on meta or unfilled across %d ranks; %s\n",
                                 load.rank, outcome->backend, load.world_size, outcome->ContentLine());
    return kExitOk;
  }
  // The flag, or the cluster's own rule (require_digests in the coordinator's node config).
  const bool required = verify.require_proof || load.proof_required;
  std::ostream& out = required ? std::cerr : std::cout;
  out << absl::StrFormat(
      "%srank %d loaded, not verified (%s): 0 tensors on meta or unfilled across %d ranks; %s%s\n",
      required ? "metactl load: " : "", load.rank, outcome->backend, load.world_size, outcome->ContentLine(),
      verify.require_proof ? " (--require-proof)"
      : required           ? " (the coordinator requires proof: require_digests)"
                           : "");
  for (const std::string& line : outcome->UnprovenLines()) out << "  " << line << "\n";
  for (const std::string& line : outcome->notes) out << "  " << line << "\n";
  return required ? kExitVerifyFailed : kExitOk;
}

}  // namespace

int RunLoad(int argc, char** argv) {
  CliArgs args = LoadFlags();
  if (std::optional<int> exit_code = ParseArgsOrExitCode("load", args, argc, argv)) return *exit_code;
  absl::StatusOr<LoadRequest> request = ParseLoadRequest(args);
  if (!request.ok()) return ReportAndExitCode("load", request.status());
  // One connection to the job's store, made when fan-out first needs it and kept for
  // verification (rank 0 hosts it once).
  std::optional<absl::StatusOr<RendezvousStore>> rendezvous;
  const VerifyOptions& verify = request->verify;
  if (request->fan_out && request->load.world_size > 1) {
    request->load.fan_out = FanoutSettings{
        .job = GlooFanoutJob(
            [&rendezvous, &verify, &request]() -> absl::StatusOr<RendezvousStore> {
              if (!rendezvous.has_value()) {
                rendezvous = ConnectRendezvous(request->load.rank, request->load.world_size, verify);
              }
              if (!rendezvous->ok()) return rendezvous->status();
              return Scoped(**rendezvous, verify, "fanout");
            },
            request->load.rank, request->load.world_size, verify.timeout),
        .timeout = verify.timeout,
        .kill_after_chunks = request->fanout_kill_after_chunks,
        .stall_after_chunks = request->fanout_stall_after_chunks};
    if (request->fanout_chunk_bytes > 0) {
      request->load.fan_out->chunk_bytes = static_cast<uint64_t>(request->fanout_chunk_bytes);
    }
  }
  absl::StatusOr<RankLoad> load = LoadOrReportFailure(request->load);
  if (!load.ok()) return ReportAndExitCode("load", load.status());
  PrintLoaded(*load);
  if (request->report_path.has_value()) {
    if (absl::Status s = WriteReport(*load, *request->report_path); !s.ok())
      return ReportAndExitCode("load", s);
  }
  std::optional<RendezvousStore> connected;
  if (rendezvous.has_value() && rendezvous->ok()) connected = **rendezvous;
  return VerifyAndReport(*load, verify, connected);
}

}  // namespace metaload
