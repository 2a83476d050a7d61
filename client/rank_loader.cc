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
#include "client/torch_glue.h"
#include "planner/file_io.h"
#include "planner/log.h"
#include "planner/proc_memory.h"
#include "planner/skeleton.h"
#include "planner/slice.h"
#include "planner/status_macros.h"

namespace metaload {
namespace {

// Pieces are small enough to spread one big tensor over every reader thread and to bound
// the pinned staging buffer a CUDA rank needs, large enough that per-call cost vanishes.
constexpr uint64_t kPieceBytes = 16ull << 20;

// One read: `runs` (a contiguous range, or whole runs of a strided slice) end to end into
// bytes [dest_offset, dest_offset + runs.total_bytes()) of the tensor's read target.
struct Piece {
  size_t tensor_index;
  std::string path;      // absolute file path
  std::string server;    // empty: read directly; else the daemon to stream from
  StridedRuns runs;
  uint64_t dest_offset;
};

// Cuts an item's runs into pieces of at most kPieceBytes: a contiguous range by bytes; a
// strided slice by whole runs (so the daemon gathers each piece in one call), or, when one
// run is larger than a piece, each run by bytes.
void CutPieces(size_t tensor_index, const std::string& path, const std::string& server, const StridedRuns& runs,
               std::vector<Piece>* pieces) {
  auto contiguous = [&](uint64_t offset, uint64_t bytes, uint64_t dest_offset) {
    for (uint64_t done = 0; done < bytes; done += kPieceBytes) {
      const uint64_t n = std::min(kPieceBytes, bytes - done);
      pieces->push_back(Piece{tensor_index, path, server, StridedRuns{offset + done, n, n, 1}, dest_offset + done});
    }
  };
  if (runs.run_count == 1 || runs.run_bytes >= kPieceBytes / 2) {
    for (uint64_t r = 0; r < runs.run_count; ++r) {
      contiguous(runs.first_offset + r * runs.stride_bytes, runs.run_bytes, r * runs.run_bytes);
    }
    return;
  }
  const uint64_t runs_per_piece = kPieceBytes / runs.run_bytes;
  for (uint64_t r = 0; r < runs.run_count; r += runs_per_piece) {
    const uint64_t count = std::min(runs_per_piece, runs.run_count - r);
    pieces->push_back(Piece{tensor_index, path, server,
                            StridedRuns{runs.first_offset + r * runs.stride_bytes, runs.run_bytes,
                                        runs.stride_bytes, count},
                            r * runs.run_bytes});
  }
}

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

bool Serves(const FileRoute& route, const std::string& node) {
  for (const FileRoute::Server& s : route.servers) {
    if (s.node == node) return true;
  }
  return false;
}

// Shared, lazily opened handles: one ReadOnlyFile per path, one DaemonClient per address.
class Handles {
 public:
  absl::StatusOr<const ReadOnlyFile*> File(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = files_.find(path);
    if (it == files_.end()) {
      ML_ASSIGN_OR_RETURN(ReadOnlyFile file, ReadOnlyFile::Open(path));
      it = files_.emplace(path, std::make_unique<ReadOnlyFile>(std::move(file))).first;
    }
    return it->second.get();
  }
  DaemonClient* Client(const std::string& address) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& client = clients_[address];
    if (client == nullptr) client = std::make_unique<DaemonClient>(address);
    return client.get();
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<ReadOnlyFile>> files_;
  std::map<std::string, std::unique_ptr<DaemonClient>> clients_;
};

// Fills a tensor the checkpoint lacks, as the user's --init-missing asks. `item` says which
// slice of the whole tensor this rank holds.
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
absl::Status AddTiedAliases(const std::string& skeleton_json, RankLoad& load) {
  if (skeleton_json.empty()) return absl::OkStatus();
  ML_ASSIGN_OR_RETURN(Skeleton skeleton, ParseSkeletonJson(skeleton_json, "the plan's skeleton"));
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < load.tensors.size(); ++i) index[load.tensors[i].name] = i;
  for (const std::vector<std::string>& group : skeleton.tied_groups) {
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
  return absl::OkStatus();
}

absl::Status ReadPiece(const Piece& piece, absl::Span<uint8_t> dest, Handles& handles, absl::Duration timeout) {
  if (piece.server.empty()) {
    ML_ASSIGN_OR_RETURN(const ReadOnlyFile* file, handles.File(piece.path));
    return file->ReadRuns(piece.runs, 0, dest);
  }
  return handles.Client(piece.server)->ReadRuns(piece.path, piece.runs, 0, dest, timeout);
}

}  // namespace

absl::StatusOr<Source> ParseSource(const std::string& text) {
  if (text == "auto") return Source::kAuto;
  if (text == "direct") return Source::kDirect;
  if (text == "stream") return Source::kStream;
  return absl::InvalidArgumentError(absl::StrCat("--source \"", text, "\": use auto, direct or stream"));
}

absl::StatusOr<RankLoad> LoadRank(const LoadOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is outside world size ", options.world_size));
  }
  ML_ASSIGN_OR_RETURN(torch::Device device, ResolveDevice(options.device, options.rank));
  DaemonClient local(options.daemon);
  ML_ASSIGN_OR_RETURN(Assignment assignment,
                      local.GetPlan(options.model, options.world_size, options.strategy, absl::Minutes(1)));
  if (assignment.plan.world_size != options.world_size) {
    return absl::InternalError(absl::StrCat("the plan from ", options.daemon, " is for ",
                                            assignment.plan.world_size, " ranks, not ", options.world_size));
  }
  const RankPlan* mine = nullptr;
  for (const RankPlan& r : assignment.plan.ranks) {
    if (r.rank == options.rank) mine = &r;
  }
  if (mine == nullptr) {
    return absl::InternalError(absl::StrCat("the plan from ", options.daemon, " has no rank ", options.rank));
  }

  if (mine->node != assignment.answered_by) {
    // Ranks are laid out node by node (node 0's GPUs, then node 1's, ...), as torchrun and
    // Slurm number them; a rank elsewhere still loads correctly, but against another
    // node's memory budget and with direct reads judged by the daemon it asked.
    LogWarning(absl::StrCat("rank ", options.rank, " is planned on node ", mine->node, " but its daemon ",
                            options.daemon, " is node ", assignment.answered_by,
                            ": check `gpus:` in the node configs against the ranks per node"));
  }
  absl::Time start = absl::Now();
  RankLoad load;
  load.rank = options.rank;
  load.world_size = options.world_size;
  load.node = mine->node;
  load.answered_by = assignment.answered_by;
  load.device = device.str();

  load.rss_before_bytes = ResidentBytes();
  // Allocate every tensor of this rank directly on its device, and cut the reads. A tensor
  // converted on load (--dtype) is read into a `raw` tensor of its stored type first.
  std::vector<Piece> pieces;
  std::vector<at::Tensor> raw;
  // CPU tensors come from one arena (client/host_arena.h): faulting fresh pages in, not
  // copying, is what limits reads from the page cache.
  std::optional<HostArena> arena;
  uint64_t arena_offset = 0;
  if (device.is_cpu()) {
    uint64_t total = 0;
    for (const ReadItem& item : mine->items) total += HostArena::Padded(item.size_bytes);
    ML_ASSIGN_OR_RETURN(arena, HostArena::Create(total, options.huge_pages));
  }
  for (const ReadItem& item : mine->items) {
    LoadedTensor loaded;
    loaded.name = item.tensor;
    loaded.slice = item.slice;
    loaded.full_shape = item.shape;
    const std::vector<int64_t> shape = HeldShape(item);
    ML_ASSIGN_OR_RETURN(c10::ScalarType type, ToScalarType(LoadDType(item)));
    ML_RETURN_IF_ERROR(CallTorch(absl::StrCat("allocating ", item.tensor, " on ", device.str()), [&] {
      if (arena.has_value()) {
        loaded.tensor = arena->Tensor(arena_offset, shape, type);
        arena_offset += HostArena::Padded(item.size_bytes);
      } else {
        loaded.tensor = torch::empty(shape, torch::TensorOptions().dtype(type).device(device));
      }
    }));
    size_t index = load.tensors.size();
    raw.emplace_back();
    if (item.missing) {
      InitializeMissing(options.init_missing, item, loaded);
    } else if (item.file.empty() && !item.init.empty()) {
      absl::Status computed = ComputeBuffer(item.init, loaded.tensor);
      if (computed.ok()) {
        loaded.filled = true;
        loaded.source = absl::StrCat("buffer:", item.init);
      } else {
        loaded.error = std::string(computed.message());
      }
    } else if (item.file.empty()) {
      loaded.error = "the plan gives no checkpoint data and no rule to compute it";
    } else if (item.size_bytes == 0) {
      loaded.filled = true;
    } else {
      auto route = assignment.files.find(item.file);
      absl::StatusOr<StridedRuns> runs = ItemRuns(item);
      if (route == assignment.files.end()) {
        loaded.error = absl::StrCat("the plan names file ", item.file, " but gives no route to it");
      } else if (!runs.ok()) {
        loaded.error = std::string(runs.status().message());
      } else {
        const FileRoute& r = route->second;
        bool local_file = Serves(r, assignment.answered_by);
        bool direct = options.source == Source::kDirect || (options.source == Source::kAuto && local_file);
        std::string server, server_node;
        if (!direct) {
          if (r.servers.empty()) {
            loaded.error = absl::StrCat("no daemon in the cluster can read ", r.path);
          } else {
            // Prefer our own daemon; otherwise spread ranks over the daemons that have it.
            size_t pick = static_cast<size_t>(options.rank) % r.servers.size();
            for (size_t i = 0; i < r.servers.size(); ++i) {
              if (r.servers[i].node == assignment.answered_by) pick = i;
            }
            server = r.servers[pick].address;
            server_node = r.servers[pick].node;
          }
        }
        loaded.source = direct ? "direct" : absl::StrCat("stream:", server_node);
        if (loaded.error.empty() && item.to_dtype.has_value()) {
          ML_ASSIGN_OR_RETURN(c10::ScalarType stored, ToScalarType(item.dtype));
          ML_RETURN_IF_ERROR(CallTorch(absl::StrCat("allocating ", item.tensor, " to convert on ", device.str()), [&] {
            raw.back() = torch::empty(shape, torch::TensorOptions().dtype(stored).device(device));
          }));
          loaded.source = absl::StrCat(loaded.source, ">", DTypeCode(*item.to_dtype));
        }
        if (loaded.error.empty()) {
          CutPieces(index, r.path, server, *runs, &pieces);
          (direct ? load.direct_bytes : load.streamed_bytes) += runs->total_bytes();
        }
      }
    }
    load.tensors.push_back(std::move(loaded));
  }

  // Fill: worker threads take pieces in order. CPU tensors are read straight into their
  // storage; CUDA tensors go through one pinned staging buffer per worker.
  std::vector<std::string> errors(load.tensors.size());
  std::vector<std::atomic<int>> failed(load.tensors.size());
  // A converted tensor is converted by the worker that finishes its last piece, and its raw
  // read target freed then, so at most the tensors in flight are held twice.
  std::vector<std::atomic<int>> pieces_left(load.tensors.size());
  for (const Piece& piece : pieces) pieces_left[piece.tensor_index].fetch_add(1);
  std::mutex errors_mu;
  Handles handles;
  std::atomic<size_t> next{0};
  const bool on_cpu = device.is_cpu();
  auto worker = [&] {
    at::Tensor staging;
    if (!on_cpu) {
      absl::Status pinned = CallTorch("allocating pinned staging memory", [&] {
        staging = torch::empty({static_cast<int64_t>(kPieceBytes)},
                               torch::TensorOptions().dtype(torch::kByte).pinned_memory(true));
      });
      if (!pinned.ok()) {
        // Every piece this worker would take fails with the same reason.
        for (size_t i; (i = next.fetch_add(1)) < pieces.size();) {
          std::lock_guard<std::mutex> lock(errors_mu);
          errors[pieces[i].tensor_index] = std::string(pinned.message());
          failed[pieces[i].tensor_index] = 1;
        }
        return;
      }
    }
    for (size_t i; (i = next.fetch_add(1)) < pieces.size();) {
      const Piece& piece = pieces[i];
      const size_t t = piece.tensor_index;
      at::Tensor& dest = raw[t].defined() ? raw[t] : load.tensors[t].tensor;
      const uint64_t length = piece.runs.total_bytes();
      absl::Status status;
      if (on_cpu) {
        auto* base = static_cast<uint8_t*>(dest.data_ptr());
        status = ReadPiece(piece, absl::MakeSpan(base + piece.dest_offset, length), handles, options.timeout);
      } else {
        auto* stage = static_cast<uint8_t*>(staging.data_ptr());
        status = ReadPiece(piece, absl::MakeSpan(stage, length), handles, options.timeout);
        if (status.ok()) {
          status = CallTorch("copying to the device", [&] {
            dest.view({-1}).view(torch::kByte)
                .narrow(0, static_cast<int64_t>(piece.dest_offset), static_cast<int64_t>(length))
                .copy_(staging.narrow(0, 0, static_cast<int64_t>(length)));
          });
        }
      }
      if (status.ok() && pieces_left[t].fetch_sub(1) == 1 && raw[t].defined() && !failed[t]) {
        status = CallTorch(absl::StrCat("converting ", load.tensors[t].name), [&] {
          load.tensors[t].tensor.copy_(raw[t]);
          raw[t] = at::Tensor();
        });
      }
      if (!status.ok()) {
        std::lock_guard<std::mutex> lock(errors_mu);
        if (errors[t].empty()) errors[t] = std::string(status.message());
        failed[t] = 1;
      }
    }
  };
  int thread_count = std::max(1, std::min<int>(options.read_threads, static_cast<int>(pieces.size())));
  std::vector<std::thread> threads;
  for (int t = 1; t < thread_count; ++t) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();

  for (size_t i = 0; i < load.tensors.size(); ++i) {
    LoadedTensor& t = load.tensors[i];
    if (!t.error.empty()) continue;
    if (failed[i]) {
      t.error = errors[i];
    } else {
      t.filled = true;
    }
  }
  ML_RETURN_IF_ERROR(AddTiedAliases(assignment.skeleton_json, load));
  load.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  load.rss_peak_bytes = PeakResidentBytes();
  return load;
}

}  // namespace metaload
