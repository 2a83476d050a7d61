#include "client/rank_loader.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/buffer_init.h"
#include "client/daemon_client.h"
#include "client/host_arena.h"
#include "client/pieces.h"
#include "libtorch/torch_glue.h"
#include "util/file_io.h"
#include "util/log.h"
#include "util/proc_memory.h"
#include "planner/plan/slice.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// The shape a rank holds of an item: its slice's.
std::vector<int64_t> HeldShape(const ReadItem& item) {
  std::vector<int64_t> shape = item.shape;
  if (item.slice.has_value()) shape[item.slice->dim] = item.slice->length;
  return shape;
}

absl::StatusOr<torch::Device> ResolveDevice(const std::string& text, int rank) {
  if (text == "cpu") return torch::Device(torch::kCPU);
  if (text == "cuda" || absl::StartsWith(text, "cuda:")) {
    int count = static_cast<int>(torch::cuda::device_count());
    if (count == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--device ", text, ": no CUDA device is visible to this process"));
    }
    int index = 0;
    if (text == "cuda") {
      const char* local_rank = std::getenv("LOCAL_RANK");
      if (local_rank == nullptr || !absl::SimpleAtoi(local_rank, &index)) index = rank % count;
    } else if (!absl::SimpleAtoi(text.substr(5), &index)) {
      return absl::InvalidArgumentError(absl::StrCat("--device ", text, ": bad CUDA index"));
    }
    if (index < 0 || index >= count) {
      return absl::InvalidArgumentError(absl::StrCat("--device ", text, ": only ", count, " CUDA devices"));
    }
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  return absl::InvalidArgumentError(absl::StrCat("--device \"", text, "\": use cpu, cuda or cuda:N"));
}

// Shared, lazily opened handles: one ReadOnlyFile per path (or why it cannot be opened),
// one DaemonClient per address.
class Handles {
 public:
  absl::StatusOr<const ReadOnlyFile*> File(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = files_.find(path);
    if (it == files_.end()) {
      absl::StatusOr<ReadOnlyFile> file = ReadOnlyFile::Open(path);
      std::unique_ptr<ReadOnlyFile> held;
      if (file.ok()) held = std::make_unique<ReadOnlyFile>(std::move(*file));
      it = files_.emplace(path, Opened{std::move(held), file.status()}).first;
    }
    if (it->second.file == nullptr) return it->second.status;
    return it->second.file.get();
  }
  DaemonClient* Client(const std::string& address) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& client = clients_[address];
    if (client == nullptr) client = std::make_unique<DaemonClient>(address);
    return client.get();
  }

 private:
  struct Opened {
    std::unique_ptr<ReadOnlyFile> file;
    absl::Status status;
  };
  std::mutex mu_;
  std::map<std::string, Opened> files_;
  std::map<std::string, std::unique_ptr<DaemonClient>> clients_;
};

// This rank's part of the plan, checked against what it asked for.
absl::StatusOr<Assignment> FetchAssignment(const LoadOptions& options) {
  DaemonClient local(options.daemon);
  ML_ASSIGN_OR_RETURN(Assignment assignment, local.GetPlan(options.model, options.world_size, options.strategy,
                                                           options.rank, absl::Minutes(1)));
  if (assignment.plan.world_size != options.world_size || assignment.plan.ranks.size() != 1 ||
      assignment.plan.ranks.front().rank != options.rank) {
    return absl::InternalError(absl::StrCat("the plan from ", options.daemon, " is not rank ", options.rank,
                                            "'s part of a plan for ", options.world_size, " ranks"));
  }
  const RankPlan& mine = assignment.plan.ranks.front();
  if (mine.node != assignment.answered_by) {
    // Ranks are laid out node by node (node 0's GPUs, then node 1's, ...), as torchrun and
    // Slurm number them; a rank elsewhere still loads correctly, but against another
    // node's memory budget.
    LogWarning(absl::StrCat("rank ", options.rank, " is planned on node ", mine.node, " but its daemon ",
                            options.daemon, " is node ", assignment.answered_by,
                            ": check `gpus:` in the node configs against the ranks per node"));
  }
  return assignment;
}

// The registered policy, unless the rank was told one: then they must agree, or ranks of
// one job could treat the same missing tensor differently.
absl::StatusOr<InitPolicy> EffectiveInitPolicy(const LoadOptions& options, const Assignment& assignment) {
  ML_ASSIGN_OR_RETURN(InitPolicy registered, ParseInitPolicy(assignment.init_missing));
  if (!options.init_missing.has_value() || options.init_missing->ToString() == registered.ToString()) {
    return registered;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--init-missing ", options.init_missing->ToString(), " conflicts with the policy ", options.model,
      " was registered with (", registered.ToString(), "); drop the flag, or register the model again with ",
      "--replace --init-missing ", options.init_missing->ToString()));
}

// Fills a tensor the checkpoint lacks, as the policy asks. `item` says which slice of the
// whole tensor this rank holds.
void InitializeMissing(const InitPolicy& policy, const ReadItem& item, LoadedTensor& loaded) {
  if (!policy.initializes()) {
    loaded.error =
        "it is not in the checkpoint; initialize it explicitly with --init-missing zeros|normal:STD, or load "
        "a checkpoint that has it";
    return;
  }
  absl::Status status = CallTorch(absl::StrCat("initializing ", loaded.name), [&] {
    if (policy.kind == InitPolicy::Kind::kZeros) {
      loaded.tensor.zero_();
      return;
    }
    // Drawn on the CPU for the whole tensor from a generator seeded by the name: every rank
    // holding it (replicas, slices) and every run gets the same values, so slices of it on
    // different ranks are parts of one tensor.
    at::Tensor values = torch::empty(item.shape, torch::TensorOptions().dtype(torch::kFloat));
    auto generator = at::make_generator<at::CPUGeneratorImpl>(InitSeedFor(loaded.name));
    values.normal_(0.0, policy.std, generator);
    if (item.slice.has_value()) values = values.narrow(item.slice->dim, item.slice->start, item.slice->length);
    loaded.tensor.copy_(values);
  });
  if (!status.ok()) {
    loaded.error = std::string(status.message());
    return;
  }
  loaded.filled = true;
  loaded.source = absl::StrCat("init:", policy.ToString());
}

// Aliases of tied groups whose stored tensor this rank holds: the same tensor object, so
// the same storage, read once.
void AddTiedAliases(const std::vector<std::vector<std::string>>& groups, RankLoad& load) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < load.tensors.size(); ++i) index[load.tensors[i].name] = i;
  for (const std::vector<std::string>& group : groups) {
    if (group.empty()) continue;
    auto stored = index.find(group.front());
    if (stored == index.end()) continue;
    for (size_t a = 1; a < group.size(); ++a) {
      const LoadedTensor& source = load.tensors[stored->second];
      LoadedTensor alias;
      alias.name = group[a];
      alias.tensor = source.tensor;
      alias.slice = source.slice;
      alias.full_shape = source.full_shape;
      alias.filled = source.filled;
      alias.error = source.error;
      alias.source = "tied";
      alias.tied_to = source.name;
      load.tensors.push_back(std::move(alias));
    }
  }
}

// Every tensor of the rank allocated directly on its device (CPU tensors from one arena,
// client/host_arena.h: faulting fresh pages in, not copying, is what limits reads from the
// page cache). `raw[i]` is where tensor i's bytes are read to when it is converted on load
// (--dtype), allocated later, only for tensors that are read.
struct Targets {
  std::vector<at::Tensor> raw;
};

absl::StatusOr<Targets> AllocateTensors(const RankPlan& mine, const torch::Device& device, bool huge_pages,
                                        RankLoad* load) {
  std::optional<HostArena> arena;
  uint64_t arena_offset = 0;
  if (device.is_cpu()) {
    uint64_t total = 0;
    for (const ReadItem& item : mine.items) total += HostArena::Padded(item.size_bytes);
    ML_ASSIGN_OR_RETURN(arena, HostArena::Create(total, huge_pages));
  }
  Targets targets;
  targets.raw.resize(mine.items.size());
  for (const ReadItem& item : mine.items) {
    LoadedTensor loaded;
    loaded.name = item.tensor;
    loaded.slice = item.slice;
    loaded.full_shape = item.shape;
    ML_ASSIGN_OR_RETURN(c10::ScalarType type, ToScalarType(LoadDType(item)));
    ML_RETURN_IF_ERROR(CallTorch(absl::StrCat("allocating ", item.tensor, " on ", device.str()), [&] {
      if (arena.has_value()) {
        loaded.tensor = arena->Tensor(arena_offset, HeldShape(item), type);
        arena_offset += HostArena::Padded(item.size_bytes);
      } else {
        loaded.tensor = torch::empty(HeldShape(item), torch::TensorOptions().dtype(type).device(device));
      }
    }));
    load->tensors.push_back(std::move(loaded));
  }
  return targets;
}

// Decides, per item, how tensor i gets its values: computed here (missing tensors, buffers)
// or read; returns the reads, cut into pieces. Files this host can open at their full size
// are read directly (Source::kAuto), whatever the plan's server list says.
absl::StatusOr<std::vector<Piece>> PlanReads(const RankPlan& mine, const Assignment& assignment,
                                             const LoadOptions& options, const InitPolicy& init,
                                             const torch::Device& device, Handles& handles, Targets* targets,
                                             RankLoad* load) {
  std::vector<Piece> pieces;
  for (size_t index = 0; index < mine.items.size(); ++index) {
    const ReadItem& item = mine.items[index];
    LoadedTensor& loaded = load->tensors[index];
    if (item.missing) {
      InitializeMissing(init, item, loaded);
      continue;
    }
    if (item.file.empty()) {
      if (item.init.empty()) {
        loaded.error = "the plan gives no checkpoint data and no rule to compute it";
        continue;
      }
      absl::Status computed = ComputeBuffer(item.init, loaded.tensor);
      loaded.filled = computed.ok();
      if (computed.ok()) loaded.source = absl::StrCat("buffer:", item.init);
      if (!computed.ok()) loaded.error = std::string(computed.message());
      continue;
    }
    if (item.size_bytes == 0) {
      loaded.filled = true;
      continue;
    }
    auto route = assignment.files.find(item.file);
    absl::StatusOr<StridedRuns> runs = ItemRuns(item);
    if (route == assignment.files.end()) {
      loaded.error = absl::StrCat("the plan names file ", item.file, " but gives no route to it");
      continue;
    }
    if (!runs.ok()) {
      loaded.error = std::string(runs.status().message());
      continue;
    }
    const FileRoute& r = route->second;
    bool direct = options.source == Source::kDirect;
    if (options.source == Source::kAuto) {
      absl::StatusOr<const ReadOnlyFile*> file = handles.File(r.path);
      direct = file.ok() && (*file)->size_bytes() >= r.size_bytes;
    }
    const FileRoute::Server* server = nullptr;
    if (!direct) {
      if (r.servers.empty()) {
        loaded.error = absl::StrCat("this host cannot read ", r.path, " and no daemon in the cluster serves it");
        continue;
      }
      // The coordinator lists the rank's own node first and spreads the others over ranks;
      // the daemon this rank asked is preferred when it serves the file.
      server = &r.servers.front();
      for (const FileRoute::Server& s : r.servers) {
        if (s.node == assignment.answered_by) server = &s;
      }
    }
    loaded.source = direct ? "direct" : absl::StrCat("stream:", server->node);
    if (item.to_dtype.has_value()) {
      ML_ASSIGN_OR_RETURN(c10::ScalarType stored, ToScalarType(item.dtype));
      ML_RETURN_IF_ERROR(CallTorch(absl::StrCat("allocating ", item.tensor, " to convert on ", device.str()), [&] {
        targets->raw[index] = torch::empty(HeldShape(item), torch::TensorOptions().dtype(stored).device(device));
      }));
      loaded.source = absl::StrCat(loaded.source, ">", DTypeCode(*item.to_dtype));
    }
    CutPieces(index, r.path, direct ? std::string() : server->address, direct ? std::string() : server->node, *runs,
              &pieces);
  }
  return pieces;
}

absl::Status ReadPiece(const Piece& piece, absl::Span<uint8_t> dest, Handles& handles, absl::Duration timeout) {
  if (piece.server.empty()) {
    ML_ASSIGN_OR_RETURN(const ReadOnlyFile* file, handles.File(piece.path));
    return file->ReadRuns(piece.runs, 0, dest);
  }
  return handles.Client(piece.server)->ReadRuns(piece.path, piece.runs, 0, dest, timeout);
}

// Worker threads take pieces in order. CPU tensors are read straight into their storage;
// CUDA tensors go through one pinned staging buffer per worker. A converted tensor is
// converted by the worker that finishes its last piece, and its raw target freed then, so at
// most the tensors in flight are held twice. Only bytes that arrived are counted.
class PieceFiller {
 public:
  PieceFiller(const std::vector<Piece>& pieces, const torch::Device& device, const LoadOptions& options,
              Handles& handles, Targets& targets, RankLoad& load)
      : pieces_(pieces), on_cpu_(device.is_cpu()), options_(options), handles_(handles), targets_(targets),
        load_(load), errors_(load.tensors.size()), failed_(load.tensors.size()), pieces_left_(load.tensors.size()) {
    for (const Piece& piece : pieces_) pieces_left_[piece.tensor_index].fetch_add(1);
  }

  // Runs --read-threads workers (this thread one of them), then marks every read tensor
  // filled or failed with its first error.
  void Run() {
    const int thread_count = std::max(1, std::min<int>(options_.read_threads, static_cast<int>(pieces_.size())));
    std::vector<std::thread> threads;
    for (int t = 1; t < thread_count; ++t) threads.emplace_back([this] { Work(); });
    Work();
    for (std::thread& t : threads) t.join();
    std::vector<bool> read(load_.tensors.size(), false);
    for (const Piece& piece : pieces_) read[piece.tensor_index] = true;
    for (size_t i = 0; i < load_.tensors.size(); ++i) {
      if (!read[i]) continue;  // computed, initialized, empty, or refused in PlanReads
      if (failed_[i]) {
        load_.tensors[i].error = errors_[i];
      } else {
        load_.tensors[i].filled = true;
      }
    }
    load_.direct_bytes = direct_bytes_.load();
    load_.streamed_bytes = streamed_bytes_.load();
  }

 private:
  void Work() {
    at::Tensor staging;
    if (!on_cpu_) {
      absl::Status pinned = CallTorch("allocating pinned staging memory", [&] {
        staging = torch::empty({static_cast<int64_t>(kPieceBytes)},
                               torch::TensorOptions().dtype(torch::kByte).pinned_memory(true));
      });
      if (!pinned.ok()) {
        // Every piece this worker would take fails with the same reason.
        for (size_t i; (i = next_.fetch_add(1)) < pieces_.size();) Fail(pieces_[i].tensor_index, pinned);
        return;
      }
    }
    for (size_t i; (i = next_.fetch_add(1)) < pieces_.size();) {
      const Piece& piece = pieces_[i];
      absl::Status status = Fill(piece, staging);
      if (status.ok()) status = ConvertWhenComplete(piece.tensor_index);
      if (!status.ok()) Fail(piece.tensor_index, status);
    }
  }

  // Reads one piece into its tensor (through `staging` for a CUDA tensor).
  absl::Status Fill(const Piece& piece, at::Tensor& staging) {
    const size_t t = piece.tensor_index;
    at::Tensor& dest = targets_.raw[t].defined() ? targets_.raw[t] : load_.tensors[t].tensor;
    const uint64_t length = piece.runs.total_bytes();
    if (on_cpu_) {
      auto* base = static_cast<uint8_t*>(dest.data_ptr());
      ML_RETURN_IF_ERROR(ReadPiece(piece, absl::MakeSpan(base + piece.dest_offset, length), handles_, options_.timeout));
    } else {
      auto* stage = static_cast<uint8_t*>(staging.data_ptr());
      ML_RETURN_IF_ERROR(ReadPiece(piece, absl::MakeSpan(stage, length), handles_, options_.timeout));
      ML_RETURN_IF_ERROR(CallTorch("copying to the device", [&] {
        dest.view({-1}).view(torch::kByte)
            .narrow(0, static_cast<int64_t>(piece.dest_offset), static_cast<int64_t>(length))
            .copy_(staging.narrow(0, 0, static_cast<int64_t>(length)));
      }));
    }
    (piece.server.empty() ? direct_bytes_ : streamed_bytes_).fetch_add(length);
    return absl::OkStatus();
  }

  // After a tensor's last piece: converts it from its raw target (--dtype) and frees that.
  absl::Status ConvertWhenComplete(size_t t) {
    if (pieces_left_[t].fetch_sub(1) != 1 || !targets_.raw[t].defined() || failed_[t]) return absl::OkStatus();
    return CallTorch(absl::StrCat("converting ", load_.tensors[t].name), [&] {
      load_.tensors[t].tensor.copy_(targets_.raw[t]);
      targets_.raw[t] = at::Tensor();
    });
  }

  void Fail(size_t t, const absl::Status& status) {
    std::lock_guard<std::mutex> lock(errors_mu_);
    if (errors_[t].empty()) errors_[t] = std::string(status.message());
    failed_[t] = 1;
  }

  const std::vector<Piece>& pieces_;
  const bool on_cpu_;
  const LoadOptions& options_;
  Handles& handles_;
  Targets& targets_;
  RankLoad& load_;
  std::mutex errors_mu_;
  std::vector<std::string> errors_;  // guarded by errors_mu_
  std::vector<std::atomic<int>> failed_;
  std::vector<std::atomic<int>> pieces_left_;
  std::atomic<size_t> next_{0};
  std::atomic<uint64_t> direct_bytes_{0}, streamed_bytes_{0};
};

}  // namespace

absl::StatusOr<Source> ParseSource(const std::string& text) {
  if (text == "auto") return Source::kAuto;
  if (text == "direct") return Source::kDirect;
  if (text == "stream") return Source::kStream;
  return absl::InvalidArgumentError(absl::StrCat("--source \"", text, "\": use auto, direct or stream"));
}

std::string PlanLabel(const StrategyOptions& options, int world_size) {
  std::string label = options.strategy;
  if (options.strategy == "tp") {
    absl::StrAppend(&label, " ", options.tp, options.pp > 0 ? absl::StrCat(" x pp ", options.pp) : "");
  }
  absl::StrAppend(&label, ", ", world_size, " ranks");
  if (options.load_dtype.has_value()) absl::StrAppend(&label, ", to ", DTypeCode(*options.load_dtype));
  return label;
}

absl::StatusOr<RankLoad> LoadRank(const LoadOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is outside world size ", options.world_size));
  }
  ML_ASSIGN_OR_RETURN(torch::Device device, ResolveDevice(options.device, options.rank));
  ML_ASSIGN_OR_RETURN(Assignment assignment, FetchAssignment(options));
  ML_ASSIGN_OR_RETURN(InitPolicy init, EffectiveInitPolicy(options, assignment));
  const RankPlan& mine = assignment.plan.ranks.front();

  const absl::Time start = absl::Now();
  RankLoad load;
  load.rank = options.rank;
  load.world_size = options.world_size;
  load.node = mine.node;
  load.answered_by = assignment.answered_by;
  load.device = device.str();
  load.plan_digest = assignment.plan_digest;
  load.plan_label = PlanLabel(options.strategy, options.world_size);
  load.rss_before_bytes = ResidentBytes();

  Handles handles;
  ML_ASSIGN_OR_RETURN(Targets targets, AllocateTensors(mine, device, options.huge_pages, &load));
  ML_ASSIGN_OR_RETURN(std::vector<Piece> pieces,
                      PlanReads(mine, assignment, options, init, device, handles, &targets, &load));
  PieceFiller(pieces, device, options, handles, targets, load).Run();
  AddTiedAliases(assignment.tied_groups, load);
  load.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  load.rss_peak_bytes = PeakResidentBytes();
  return load;
}

}  // namespace metaload
