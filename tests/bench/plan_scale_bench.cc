// Benchmark, not a test (issue 39): the real planner and read-once fan-out at cluster scale, for
// bench/simulate.py's --planner mode. For each model (a Llama-3.1-405B-shaped and a
// DeepSeek-V3-671B-shaped checkpoint, laid out in shards with no bytes on disk), node count (8
// GPUs each) and strategy it runs what a coordinator runs, and prints one JSON object a line per
// point:
//   the plan: MakeCompactPlan, and every rank's GetPlan answer (RankAnswerBytes);
//   the fan-out ("fanout"): the coordinator's PlanFanout (daemon/plans/plan_fanout.h), which
//     assigns once per plan with AssignFanout on the CompactPlan (shared storage: every node
//     serves every file, so FanoutScope::kAcrossNodes), timed, with what it holds and the peak
//     RSS it adds; then every rank's part (PartOf) and its bytes on the wire
//     (FanoutPartToProto) and in memory, one rank at a time, as ranks ask. It is skipped, saying
//     why, where the assignment's estimated peak exceeds --max-assign-gib;
//   "before": what the design before this one cost each rank whose plan may share bytes: it
//     fetched the whole plan (about the sum of every rank's answer on the wire; expanded, about
//     rank 0's expansion per item) and assigned all of it itself.
// Each point runs in a child process of its own, so that its peak RSS is its own.
//
//   build/tests/bench_plan_scale                                   # 405b,671b x 8,32,128 x fsdp,tp,replicate
//   build/tests/bench_plan_scale --models 405b --nodes 8 --strategies tp
//
// Strategies: fsdp (every tensor split over all ranks), tp (--tp 8 inside a node x --pp P
// stages, replicas of P nodes: HSDP-like replicas of a model-parallel group), replicate (every
// rank the whole model; the GPUs are given 4 TiB so that it plans at all: no GPU holds it).
#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "daemon/plans/plan_fanout.h"
#include "daemon/plans/planned_model.h"
#include "planner/plan/fanout.h"
#include "planner/strategy/strategy.h"
#include "proto/plan_answers.h"
#include "tests/bench/deepseek_v3.h"
#include "tests/bench/fanout_cost.h"
#include "tests/bench/llama_405b.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

constexpr uint64_t kGpuMemoryBytes = uint64_t{80} << 30;
constexpr uint64_t kReplicateGpuMemoryBytes = uint64_t{4} << 40;
constexpr int kServersPerFile = 8;                               // the coordinator's (coordinator.h)
constexpr uint64_t kRankFanoutStateTarget = uint64_t{64} << 20;  // no rank's fan-out state above it

struct Flags {
  std::vector<std::string> models = {"405b", "671b"};
  std::vector<int> nodes = {8, 32, 128};
  std::vector<std::string> strategies = {"fsdp", "tp", "replicate"};
  int gpus_per_node = 8;
  int pp = 4;
  bool fp8 = false;           // 671b as released (FP8 codes and scales), not BF16
  double max_assign_gib = 8;  // no AssignFanout whose estimated peak is above (the VM has 24 GiB, shared)
};

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Bytes malloc has handed out and not taken back (one thread: the main arena, and mmap'd blocks).
uint64_t HeapBytes() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

// /proc/self/status's `key` (VmRSS, VmHWM) in bytes, or 0.
uint64_t StatusBytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    uint64_t kib = 0;
    if (absl::StartsWith(line, key + ":") &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::StripSuffix(line.substr(key.size() + 1), "kB")),
                         &kib)) {
      return kib * 1024;
    }
  }
  return 0;
}

// Sets the peak RSS (VmHWM) to the current RSS, after handing free heap back: what a step adds to
// the peak is then VmHWM after it less VmRSS before it (Linux 4.0 and later).
uint64_t ResetPeakRss() {
  malloc_trim(0);
  std::ofstream("/proc/self/clear_refs") << "5";
  return StatusBytes("VmRSS");
}

uint64_t Median(std::vector<uint64_t> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

uint64_t Sum(const std::vector<uint64_t>& v) {
  uint64_t total = 0;
  for (uint64_t x : v) total += x;
  return total;
}

std::string Json(const std::vector<uint64_t>& v) { return absl::StrCat("[", absl::StrJoin(v, ","), "]"); }

uint64_t Max(const std::vector<uint64_t>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

// {"max": .., "median": ..}
std::string Spread(const std::vector<uint64_t>& v) {
  return absl::StrCat("{\"max\": ", Max(v), ", \"median\": ", Median(v), "}");
}

// Per node: the sum over its ranks.
std::vector<uint64_t> PerNode(const std::vector<uint64_t>& per_rank, const std::vector<int>& node_of_rank,
                              int nodes) {
  std::vector<uint64_t> out(static_cast<size_t>(nodes), 0);
  for (size_t r = 0; r < per_rank.size(); ++r) out[static_cast<size_t>(node_of_rank[r])] += per_rank[r];
  return out;
}

// Which ranks ask the coordinator for their fan-out part: MayShare's rule (client/load/fanout.cc):
// replicas, or a group whose ranks hold some tensor whole. A plan of one replica whose ranks hold
// only slices (fsdp) shares nothing; no rank asks, and the coordinator assigns nothing. Before,
// the same ranks fetched the whole plan instead.
std::vector<bool> RanksAsking(const CompactPlan& plan) {
  std::vector<bool> asks(plan.ranks.size(), false);
  if (plan.world_size < 2 || (plan.replicas < 2 && plan.group_size < 2)) return asks;
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    asks[r] = plan.replicas > 1 ||
              std::any_of(plan.ranks[r].refs.begin(), plan.ranks[r].refs.end(), [&](const ItemRef& ref) {
                return ref.slice_dim < 0 && !plan.items[ref.item].file.empty();
              });
  }
  return asks;
}

struct Model {
  Skeleton skeleton;
  Checkpoint checkpoint;
  std::string form;
};

Model MakeModel(const std::string& name, bool fp8) {
  Model m;
  if (name == "405b") {
    m.skeleton = bench::Llama405BSkeleton();
    m.checkpoint = bench::Llama405BCheckpoint(m.skeleton, "/models/llama-3.1-405b");
    m.form = "bf16";
  } else {
    m.skeleton = bench::DeepseekV3Skeleton(fp8 ? bench::DeepseekForm::kFp8 : bench::DeepseekForm::kBf16);
    m.checkpoint = bench::DeepseekV3Checkpoint(m.skeleton, "/models/" + m.skeleton.model);
    m.form =
        fp8 ? "fp8 (codes + weight_scale_inv 128x128, as released)" : "bf16 (the release is FP8 with scales)";
  }
  return m;
}

// The tables the coordinator answers every rank from (proto/plan_answers.h); shared storage:
// every node serves every file.
PlanTables Tables(const CompactPlan& plan, const Model& m, const Cluster& cluster) {
  ModelRecord record;
  record.name = m.skeleton.model;
  record.checkpoint = m.checkpoint;
  record.skeleton_json = SkeletonToJson(m.skeleton);
  std::vector<PlanFile> files;
  for (const std::string& file : m.checkpoint.files) {
    PlanFile f;
    f.file = file;
    f.path = m.checkpoint.dir + "/" + file;
    for (size_t n = 0; n < cluster.nodes.size(); ++n) f.servers.push_back(static_cast<int>(n));
    files.push_back(std::move(f));
  }
  std::map<std::string, size_t> file_index;
  for (size_t f = 0; f < files.size(); ++f) file_index[files[f].file] = f;
  for (const TensorLayout& t : m.checkpoint.tensors) {
    PlanFile& f = files[file_index.at(t.file)];
    f.size_bytes = std::max(f.size_bytes, t.end_offset);
  }
  return BuildPlanTables(plan, std::string(64, 'd'), record, m.skeleton, cluster.nodes, files);  // a SHA-256
}

// Every rank's GetPlan answer, serialized as the coordinator serializes it.
std::vector<uint64_t> AnswerBytes(const CompactPlan& plan, const PlanTables& tables, size_t nodes) {
  const std::vector<uint32_t> loads(nodes, 0);
  std::vector<uint64_t> bytes;
  for (int r = 0; r < plan.world_size; ++r) {
    absl::StatusOr<std::string> answer = RankAnswerBytes(plan, tables, r, loads, kServersPerFile);
    bytes.push_back(answer.ok() ? answer->size() : 0);
  }
  return bytes;
}

// The coordinator's fan-out of `planned`: "fanout"'s JSON; *parts_sent: its parts' bytes to the
// ranks that ask.
absl::StatusOr<std::string> CoordinatorFanout(const Flags& flags, const PlannedModel& planned,
                                              uint64_t checkpoint_bytes, const std::vector<int>& node_of_rank,
                                              int nodes, const std::vector<bool>& asks,
                                              uint64_t* parts_sent) {
  *parts_sent = 0;
  const uint64_t estimate = bench::EstimateAssignPeak(planned.plan);
  if (static_cast<double>(estimate) > flags.max_assign_gib * static_cast<double>(uint64_t{1} << 30)) {
    return absl::StrCat("{\"run\": false, \"assign_peak_estimate_bytes\": ", estimate,
                        ", \"skipped\": \"not run: AssignFanout's peak on the compact plan is estimated at ",
                        estimate >> 20, " MiB, over --max-assign-gib ", flags.max_assign_gib, "\"}");
  }
  const uint64_t rss_before = ResetPeakRss();
  const auto start = Clock::now();
  const absl::StatusOr<FanoutAssignment>& fan = planned.fanout->Get(planned);
  const double assign_ms = MsSince(start);
  const uint64_t rss_peak = StatusBytes("VmHWM");
  ML_RETURN_IF_ERROR(fan.status());
  const bench::FanoutCost cost = bench::CostOfAssignment(*fan, node_of_rank, nodes);
  const bench::PartsCost parts = bench::CostOfParts(*fan);
  for (size_t r = 0; r < asks.size(); ++r) *parts_sent += asks[r] ? parts.wire_bytes[r] : 0;
  const uint64_t state = Max(parts.memory_bytes);
  const uint64_t storage = Sum(cost.storage_bytes);
  return absl::StrCat(
      // The scope PlanFanout chose: the checkpoint lies in a file system, whose page cache serves a
      // reader's node-mates.
      "{\"run\": true, \"scope\": \"across-nodes\", \"assign_ms\": ", assign_ms,
      ", \"held_bytes\": ", planned.fanout->HeldBytes(),
      ", \"bound_bytes\": ", FanoutBoundBytes(planned.plan),
      ", \"assign_peak_rss_bytes\": ", rss_peak - std::min(rss_peak, rss_before),
      ", \"assign_peak_estimate_bytes\": ", estimate, ", \"storage_bytes\": ", storage,
      ", \"storage_over_checkpoint\": ", static_cast<double>(storage) / static_cast<double>(checkpoint_bytes),
      ", \"storage_bytes_per_rank\": ", Spread(cost.storage_bytes),
      ", \"storage_bytes_per_node\": ", Json(PerNode(cost.storage_bytes, node_of_rank, nodes)),
      ", \"recv_bytes_per_node\": ", Json(cost.recv_bytes),
      ", \"send_bytes_per_node\": ", Json(cost.send_bytes),
      ", \"recv_bytes_node\": ", Spread(cost.recv_bytes), ", \"send_bytes_node\": ", Spread(cost.send_bytes),
      ", \"groups\": ", cost.groups, ", \"pieces\": ", cost.pieces,
      ", \"part\": {\"wire_bytes\": ", Spread(parts.wire_bytes),
      ", \"memory_bytes\": ", Spread(parts.memory_bytes), ", \"groups\": ", Spread(parts.groups),
      ", \"neighbours\": ", Spread(parts.neighbours), ", \"pieces\": ", Spread(parts.pieces),
      ", \"ms_all_ranks\": ", parts.ms, ", \"ms_max\": ", parts.max_ms,
      ", \"wire_bytes_to_ranks_asking\": ", *parts_sent, "}, \"max_rank_fanout_state_bytes\": ", state,
      ", \"rank_fanout_state_target_bytes\": ", kRankFanoutStateTarget,
      ", \"rank_fanout_state_ok\": ", state <= kRankFanoutStateTarget ? "true" : "false", "}");
}

// What the design before cost each rank that asks now: the whole plan it fetched (on the wire
// about every rank's answer; expanded, estimated from rank 0's expansion).
std::string Before(const CompactPlan& plan, uint64_t answers_total, const std::vector<bool>& asks) {
  uint64_t refs = 0;
  for (const CompactRank& r : plan.ranks) refs += r.refs.size();
  const uint64_t before = HeapBytes();
  const RankPlan sample = plan.ExpandRank(0);
  const double per_ref = static_cast<double>(HeapBytes() - before) /
                         static_cast<double>(std::max<size_t>(1, sample.items.size()));
  return absl::StrCat("{\"ranks_fetching_whole_plan\": ", std::count(asks.begin(), asks.end(), true),
                      ", \"whole_plan_wire_bytes\": ", answers_total, ", \"expanded_plan_bytes_estimate\": ",
                      static_cast<uint64_t>(per_ref * static_cast<double>(refs)), "}");
}

absl::StatusOr<std::string> RunPoint(const Flags& flags, const std::string& model_name, int nodes,
                                     const std::string& strategy) {
  const auto start = Clock::now();
  const Model m = MakeModel(model_name, flags.fp8);
  uint64_t checkpoint_bytes = 0, params = 0;
  for (const TensorLayout& t : m.checkpoint.tensors) checkpoint_bytes += t.end_offset - t.begin_offset;
  for (const SkeletonTensor& t : m.skeleton.tensors) {
    if (!t.persistent || absl::EndsWith(t.name, "_scale_inv")) continue;
    uint64_t elements = 1;
    for (int64_t d : t.shape) elements *= static_cast<uint64_t>(d);
    params += elements;
  }
  const int world = nodes * flags.gpus_per_node;
  const uint64_t gpu_memory = strategy == "replicate" ? kReplicateGpuMemoryBytes : kGpuMemoryBytes;
  ML_ASSIGN_OR_RETURN(Cluster cluster, MakeUniformCluster(world, nodes, gpu_memory));
  for (size_t n = 0; n < cluster.nodes.size(); ++n) {
    cluster.nodes[n].address = absl::StrCat("10.0.", n / 256, ".", n % 256, ":7070");
  }
  PlanRequest request;
  request.skeleton = &m.skeleton;
  request.checkpoint = &m.checkpoint;
  request.cluster = &cluster;
  request.options.strategy = strategy;
  if (strategy == "tp") {
    request.options.tp = flags.gpus_per_node;
    request.options.pp = flags.pp;
  }
  PlannedModel planned;  // what the coordinator keeps of a plan (daemon/plans/planned_model.h)
  const uint64_t heap_before = HeapBytes();
  const auto plan_start = Clock::now();
  ML_ASSIGN_OR_RETURN(planned.plan, MakeCompactPlan(request));
  const double plan_ms = MsSince(plan_start);
  const uint64_t compact_bytes = HeapBytes() - heap_before;
  const CompactPlan& plan = planned.plan;
  planned.members = cluster.nodes;
  std::vector<uint64_t> held, refs;
  std::vector<int> node_of_rank;
  std::vector<std::string> node_names;
  for (const NodeSpec& n : cluster.nodes) node_names.push_back(n.name);
  for (const CompactRank& r : plan.ranks) {
    held.push_back(r.size_bytes);
    refs.push_back(r.refs.size());
    node_of_rank.push_back(
        static_cast<int>(std::find(node_names.begin(), node_names.end(), r.node) - node_names.begin()));
  }
  const auto answers_start = Clock::now();
  planned.tables = Tables(plan, m, cluster);
  const std::vector<uint64_t> answers = AnswerBytes(plan, planned.tables, cluster.nodes.size());
  const double answers_ms = MsSince(answers_start);
  const uint64_t answers_total = Sum(answers);
  const std::vector<bool> asks = RanksAsking(plan);
  uint64_t parts_sent = 0;
  ML_ASSIGN_OR_RETURN(const std::string fanout, CoordinatorFanout(flags, planned, checkpoint_bytes,
                                                                  node_of_rank, nodes, asks, &parts_sent));
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);  // ru_maxrss: KiB on Linux
  return absl::StrCat(
      "{\"model\": \"", m.skeleton.model, "\", \"form\": \"", m.form, "\", \"params\": ", params,
      ", \"tensors\": ", m.checkpoint.tensors.size(), ", \"files\": ", m.checkpoint.files.size(),
      ", \"checkpoint_bytes\": ", checkpoint_bytes, ", \"nodes\": ", nodes,
      ", \"gpus_per_node\": ", flags.gpus_per_node, ", \"world\": ", world, ", \"strategy\": \"", strategy,
      "\", \"label\": \"", StrategyLabel(request.options), "\", \"replicas\": ", plan.replicas,
      ", \"group_size\": ", plan.group_size, ", \"gpu_memory_bytes\": ", gpu_memory,
      ", \"plan\": {\"wall_ms\": ", plan_ms, ", \"refs\": ", Sum(refs), ", \"refs_per_rank\": ", Spread(refs),
      ", \"compact_bytes\": ", compact_bytes, "}, \"held_bytes_per_rank\": ", Spread(held),
      ", \"held_bytes_per_node\": ", Json(PerNode(held, node_of_rank, nodes)),
      ", \"answer_bytes_per_rank\": ", Spread(answers), ", \"answer_bytes_all_ranks\": ", answers_total,
      ", \"answers_ms\": ", answers_ms, ", \"skeleton_json_bytes\": ", SkeletonToJson(m.skeleton).size(),
      ", \"ranks_asking_fanout\": ", std::count(asks.begin(), asks.end(), true), ", \"fanout\": ", fanout,
      ", \"sent_bytes_all_ranks\": ", answers_total + parts_sent,
      ", \"before\": ", Before(plan, answers_total, asks), ", \"wall_s\": ", MsSince(start) / 1000,
      ", \"peak_rss_bytes\": ", static_cast<uint64_t>(usage.ru_maxrss) * 1024, "}");
}
[[noreturn]] void Usage(const std::string& problem) {
  std::fprintf(
      stderr,
      "bench_plan_scale: %s\n"
      "usage: bench_plan_scale [--models 405b,671b] [--nodes 8,32,128] [--strategies fsdp,tp,replicate]\n"
      "       [--gpus-per-node 8] [--pp 4] [--fp8] [--max-assign-gib 8]\n",
      problem.c_str());
  std::exit(2);
}

Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--fp8") {
      flags.fp8 = true;
      continue;
    }
    if (i + 1 >= argc) Usage(flag + " needs a value");
    const std::string value = argv[++i];
    const std::vector<std::string> list = absl::StrSplit(value, ',');
    if (flag == "--models") {
      flags.models = list;
      for (const std::string& m : list) {
        if (m != "405b" && m != "671b") Usage("unknown model " + m + " (405b, 671b)");
      }
    } else if (flag == "--strategies") {
      flags.strategies = list;
      for (const std::string& s : list) {
        if (s != "fsdp" && s != "tp" && s != "replicate")
          Usage("unknown strategy " + s + " (fsdp, tp, replicate)");
      }
    } else if (flag == "--nodes") {
      flags.nodes.clear();
      for (const std::string& n : list) {
        int nodes = 0;
        if (!absl::SimpleAtoi(n, &nodes) || nodes < 1) Usage("--nodes " + value + ": not positive integers");
        flags.nodes.push_back(nodes);
      }
    } else if (flag == "--gpus-per-node" || flag == "--pp") {
      int n = 0;
      if (!absl::SimpleAtoi(value, &n) || n < 1) Usage(flag + " " + value + ": not a positive integer");
      (flag == "--pp" ? flags.pp : flags.gpus_per_node) = n;
    } else if (flag == "--max-assign-gib") {
      if (!absl::SimpleAtod(value, &flags.max_assign_gib) || flags.max_assign_gib < 0)
        Usage("--max-assign-gib " + value);
    } else {
      Usage("unknown flag " + flag);
    }
  }
  return flags;
}

int Run(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  int failed = 0;
  for (const std::string& model : flags.models) {
    for (int nodes : flags.nodes) {
      for (const std::string& strategy : flags.strategies) {
        std::fflush(stdout);
        const pid_t child = ::fork();
        if (child == 0) {
          absl::StatusOr<std::string> line = RunPoint(flags, model, nodes, strategy);
          if (!line.ok()) {
            std::fprintf(stderr, "bench_plan_scale: %s on %d nodes, %s: %s\n", model.c_str(), nodes,
                         strategy.c_str(), std::string(line.status().message()).c_str());
            std::fflush(stderr);
            ::_exit(1);
          }
          std::printf("%s\n", line->c_str());
          std::fflush(stdout);
          ::_exit(0);
        }
        int status = 0;
        ::waitpid(child, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
          if (WIFSIGNALED(status)) {
            std::fprintf(stderr, "bench_plan_scale: %s on %d nodes, %s: killed by signal %d\n", model.c_str(),
                         nodes, strategy.c_str(), WTERMSIG(status));
          }
          ++failed;
        }
      }
    }
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace metaload

int main(int argc, char** argv) { return metaload::Run(argc, argv); }
