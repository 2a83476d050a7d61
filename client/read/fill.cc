#include "client/read/fill.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/read/pieces.h"
#include "client/read/registered_file.h"
#include "libtorch/torch_glue.h"
#include "util/fs/file_system.h"
#include "util/fs/storage.h"
#include "util/hash/tile_digest.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// Shared, lazily opened handles: one file per path, opened through `file_system` (or why it
// cannot be opened), one DaemonClient per address.
class Handles {
 public:
  explicit Handles(FileSystem* file_system) : file_system_(file_system) {}

  absl::StatusOr<const RandomAccessFile*> File(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = files_.find(path);
    if (it == files_.end()) {
      absl::StatusOr<std::unique_ptr<RandomAccessFile>> file = Storage::On(file_system_).Open(path);
      std::unique_ptr<RandomAccessFile> held;
      if (file.ok()) held = *std::move(file);
      it = files_.emplace(path, Opened{std::move(held), file.status()}).first;
    }
    if (it->second.file == nullptr) return it->second.status;
    return it->second.file.get();
  }
  DaemonClient* Client(const ReadSource& source) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& client = clients_[{source.address, source.certificate}];
    if (client == nullptr)
      client =
          std::make_unique<DaemonClient>(FileRoute::Server{source.node, source.address, source.certificate});
    return client.get();
  }

 private:
  struct Opened {
    std::unique_ptr<RandomAccessFile> file;
    absl::Status status;
  };
  FileSystem* const file_system_;
  std::mutex mu_;
  std::map<std::string, Opened> files_;
  std::map<std::pair<std::string, std::string>, std::unique_ptr<DaemonClient>>
      clients_;  // by address, certificate
};

// The sources of a file, in the order to try them: a direct read when `direct`, then the daemon
// this rank asked, then the other servers in the coordinator's order (least loaded first).
std::vector<ReadSource> SourcesOf(const FileRoute& r, bool direct, const FillSettings& settings) {
  std::vector<ReadSource> sources;
  if (direct) sources.push_back(ReadSource{"direct", ""});
  if (settings.read.source == Source::kDirect) return sources;  // the caller forbade streaming
  for (const FileRoute::Server& s : r.servers) {
    if (s.node == settings.own_node) sources.push_back(ReadSource{s.node, s.address, s.certificate});
  }
  for (const FileRoute::Server& s : r.servers) {
    if (s.node != settings.own_node) sources.push_back(ReadSource{s.node, s.address, s.certificate});
  }
  return sources;
}

// A read's provenance (provenance.h): its kind by the first of `sources`, then each in order.
void RecordSources(const std::vector<ReadSource>& sources, Provenance& provenance) {
  provenance.kind = sources.front().direct() ? Provenance::Kind::kDirect : Provenance::Kind::kStream;
  provenance.nodes.clear();
  for (const ReadSource& s : sources) provenance.nodes.push_back(s.direct() ? "" : s.node);
}

// The stored bytes `target` holds, as runs of its file (BoxRuns of its box, or of all of it).
absl::StatusOr<std::vector<StridedRuns>> HeldRuns(const FillTarget& target) {
  TensorBox whole{std::vector<int64_t>(target.stored.shape.size(), 0), target.stored.shape};
  return BoxRuns(target.box.value_or(whole), target.stored);
}

// `runs` of a file as offsets from the first byte of the tensor that starts at `begin`.
StridedRuns FromTensorStart(StridedRuns runs, uint64_t begin) {
  runs.first_offset -= begin;
  return runs;
}

// The proof of `target`'s bytes against its registered digest, for the runs it holds; null
// without a digest.
absl::StatusOr<std::unique_ptr<TileProof>> ProofFor(const FillTarget& target) {
  if (!target.stored.digest.has_value()) return nullptr;
  ML_ASSIGN_OR_RETURN(std::vector<StridedRuns> runs, HeldRuns(target));
  for (StridedRuns& r : runs) r = FromTensorStart(r, target.stored.begin_offset);
  const TensorDigest& digest = *target.stored.digest;
  return std::make_unique<TileProof>(
      digest.kind,
      TileGrid{digest.tile_bytes, target.stored.size_bytes() / std::max<uint64_t>(1, digest.tile_bytes)},
      runs);
}

// Whether `location` lies in an object store (FileSystem::IsObjectStore): under auto, a daemon
// that serves it reads it for this rank (and the node's other ranks) instead of every rank
// fetching the bucket, so that it is not even opened here (an open is a request too).
bool ObjectStore(const std::string& location, const FillSettings& settings) {
  if (settings.read.file_system != nullptr) return settings.read.file_system->IsObjectStore();
  return IsObjectStoreLocation(location);
}

// Where target `t` is read from, and its pieces; its error when it cannot be read at all.
absl::Status CutTarget(size_t t, const FillTarget& target, const std::map<std::string, FileRoute>& routes,
                       const FillSettings& settings, Handles& handles, FillResult& result,
                       std::vector<ReadSource>& sources, std::vector<Piece>& pieces) {
  auto route = routes.find(target.stored.file);
  if (route == routes.end()) {
    return absl::NotFoundError(absl::StrCat("no route to its file ", target.stored.file));
  }
  const FileRoute& r = route->second;
  bool direct = settings.read.source == Source::kDirect;
  if (settings.read.source == Source::kAuto && !(ObjectStore(r.path, settings) && !r.servers.empty())) {
    absl::StatusOr<const RandomAccessFile*> file = handles.File(r.path);
    direct = file.ok() && (*file)->size_bytes() >= r.size_bytes;
  }
  // A copy of the file on this host that is not the one registered is not read; under auto the
  // daemons' copies may still be, and they check theirs themselves.
  absl::Status direct_refused;
  if (direct) {
    direct_refused = CheckDirectSource(handles.File(r.path), r, settings.model);
    if (!direct_refused.ok() && settings.read.source == Source::kDirect) return direct_refused;
    direct = direct_refused.ok();
  }
  sources = SourcesOf(r, direct, settings);
  if (sources.empty()) {
    if (!direct_refused.ok()) return direct_refused;
    return absl::NotFoundError(
        absl::StrCat("this host cannot read ", r.path, " and no daemon in the cluster serves it"));
  }
  ML_ASSIGN_OR_RETURN(std::vector<StridedRuns> runs, HeldRuns(target));
  const ReadSource& first = sources.front();
  RecordSources({first}, result.provenance);  // until bytes arrive: where it starts
  uint64_t dest_offset = 0;
  for (const StridedRuns& series : runs) {
    const size_t first_piece = pieces.size();
    CutPieces(t, r.path, first.address, first.direct() ? std::string() : first.node, series, &pieces);
    for (size_t p = first_piece; p < pieces.size(); ++p) {
      pieces[p].dest_offset += dest_offset;
      pieces[p].registered = r.registered;
    }
    dest_offset += series.total_bytes();
  }
  return absl::OkStatus();
}

// Reads one piece from its target's `sources`, failing over between them (failover_read.h).
absl::Status ReadPiece(const Piece& piece, const std::vector<ReadSource>& sources, absl::Span<uint8_t> dest,
                       Handles& handles, const FillSettings& settings, SourceHealth& health, PieceLog* log) {
  const ReadAttempt attempt = [&](const ReadSource& source, const StridedRuns& runs, absl::Span<uint8_t> into,
                                  uint64_t* received) -> absl::Status {
    *received = 0;
    if (!source.direct()) {
      return handles.Client(source)->ReadRuns(settings.model, piece.path, runs, 0, into,
                                              settings.read.timeout, settings.read.cancelled,
                                              piece.registered, received, settings.read.stall_timeout);
    }
    ML_ASSIGN_OR_RETURN(const RandomAccessFile* file, handles.File(piece.path));
    ML_RETURN_IF_ERROR(file->ReadRuns(runs, 0, into));
    *received = into.size();
    return absl::OkStatus();
  };
  return ReadWithFailover(sources, piece.runs, dest, attempt, settings.read.retry, &health, piece.path,
                          settings.read.cancelled, log);
}

// Worker threads take pieces in order, from FirstPiece round to the one before it. CPU tensors are read
// straight into their storage; CUDA tensors go through one pinned staging buffer per worker. A converted
// tensor is converted by the worker that finishes its last piece, and its raw target freed then, so at most
// the tensors in flight are held twice. Only bytes that arrived are counted. A target's result is made
// by the worker that finishes its last piece, and told to `on_filled` then; a failed one's, at the end.
class PieceFiller {
 public:
  PieceFiller(const std::vector<Piece>& pieces, const std::vector<std::vector<ReadSource>>& sources,
              std::vector<FillTarget>& targets, std::vector<at::Tensor>& raw,
              std::vector<std::unique_ptr<TileProof>>& proofs, const FillSettings& settings, Handles& handles,
              FillOutcome& outcome, const FilledFn& on_filled)
      : pieces_(pieces),
        sources_(sources),
        targets_(targets),
        raw_(raw),
        proofs_(proofs),
        settings_(settings),
        handles_(handles),
        outcome_(outcome),
        errors_(targets.size()),
        delivered_(targets.size()),
        failovers_(targets.size()),
        on_filled_(on_filled),
        failed_(targets.size()),
        pieces_left_(targets.size()),
        first_piece_(FirstPiece(settings.read, pieces.size())) {
    for (const Piece& piece : pieces_) pieces_left_[piece.tensor_index].fetch_add(1);
  }

  // Runs read_threads workers (this thread one of them), then marks every read target filled
  // or failed with its first error.
  void Run() {
    const int thread_count =
        std::max(1, std::min<int>(settings_.read.read_threads, static_cast<int>(pieces_.size())));
    std::vector<std::thread> threads;
    threads.reserve(static_cast<size_t>(thread_count - 1));
    for (int t = 1; t < thread_count; ++t) {
      // A thread the system refuses (EAGAIN under a pids or memory limit) is one worker fewer,
      // not an exception unwinding past joinable threads (std::terminate): the workers that
      // started take every piece between them.
      try {
        threads.emplace_back([this] { Work(); });
      } catch (const std::system_error&) {
        break;
      }
    }
    Work();
    for (std::thread& t : threads) t.join();
    std::vector<bool> read(targets_.size(), false);
    for (const Piece& piece : pieces_) read[piece.tensor_index] = true;
    // Every other target read was finished by the worker that read its last piece.
    std::lock_guard<std::mutex> lock(errors_mu_);
    for (size_t i = 0; i < targets_.size(); ++i) {
      if (read[i] && failed_[i]) Finish(i);
    }
    outcome_.direct_bytes = direct_bytes_.load();
    outcome_.streamed_bytes = streamed_bytes_.load();
    outcome_.streamed_bytes_by_node = std::move(streamed_by_node_);
  }

 private:
  bool Cancelled() const { return settings_.read.cancelled != nullptr && settings_.read.cancelled->load(); }

  void Work() {
    at::Tensor staging;
    const bool on_cpu = targets_.empty() || targets_.front().dest.device().is_cpu();
    if (!on_cpu) {
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
      const Piece& piece = pieces_[(first_piece_ + i) % pieces_.size()];
      absl::Status status =
          Cancelled() ? absl::CancelledError("the load was cancelled") : Fill(piece, staging, on_cpu);
      if (status.ok()) status = CompleteAfterLastPiece(piece.tensor_index);
      if (!status.ok()) Fail(piece.tensor_index, status);
    }
  }

  // Reads one piece into its tensor (through `staging` for a CUDA tensor).
  absl::Status Fill(const Piece& piece, at::Tensor& staging, bool on_cpu) {
    const size_t t = piece.tensor_index;
    at::Tensor& dest = raw_[t].defined() ? raw_[t] : targets_[t].dest;
    const uint64_t length = piece.runs.total_bytes();
    if (on_cpu) {
      auto* base = static_cast<uint8_t*>(dest.data_ptr());
      ML_RETURN_IF_ERROR(Read(piece, absl::MakeSpan(base + piece.dest_offset, length)));
      Prove(piece, absl::MakeConstSpan(base + piece.dest_offset, length));
    } else {
      auto* stage = static_cast<uint8_t*>(staging.data_ptr());
      ML_RETURN_IF_ERROR(Read(piece, absl::MakeSpan(stage, length)));
      Prove(piece, absl::MakeConstSpan(stage, length));  // on the host, before it goes to the device
      ML_RETURN_IF_ERROR(CallTorch("copying to the device", [&] {
        dest.view({-1})
            .view(torch::kByte)
            .narrow(0, static_cast<int64_t>(piece.dest_offset), static_cast<int64_t>(length))
            .copy_(staging.narrow(0, 0, static_cast<int64_t>(length)));
      }));
    }
    return absl::OkStatus();
  }

  // Adds the tiles of a piece's stored bytes, just read (still in cache), to its target's proof.
  void Prove(const Piece& piece, absl::Span<const uint8_t> bytes) {
    TileProof* proof = proofs_[piece.tensor_index].get();
    if (proof == nullptr) return;
    proof->AddRuns(FromTensorStart(piece.runs, targets_[piece.tensor_index].stored.begin_offset), bytes);
  }

  // Reads one piece from its sources and records who delivered what, and every failover.
  absl::Status Read(const Piece& piece, absl::Span<uint8_t> dest) {
    const size_t t = piece.tensor_index;
    PieceLog log;
    absl::Status status = ReadPiece(piece, sources_[t], dest, handles_, settings_, health_, &log);
    std::lock_guard<std::mutex> lock(errors_mu_);
    ProgressMeter* meter = settings_.read.meter;
    for (const auto& [source, bytes] : log.received) {
      (source.direct() ? direct_bytes_ : streamed_bytes_).fetch_add(bytes);
      if (meter != nullptr && source.direct()) meter->AddDirect(bytes);
      if (meter != nullptr && !source.direct()) meter->AddStreamed(bytes);
      if (!source.direct()) streamed_by_node_[source.node] += bytes;
      auto same = [&](const ReadSource& s) { return s.address == source.address; };
      if (std::none_of(delivered_[t].begin(), delivered_[t].end(), same)) delivered_[t].push_back(source);
    }
    for (FailoverEvent& event : log.failovers) {
      event.at_byte += piece.dest_offset;
      failovers_[t].push_back(std::move(event));
    }
    if (status.ok() || status.code() == absl::StatusCode::kCancelled) return status;
    // Verification names the tensor ("X: not filled: ..."); the file, unless the error does.
    if (absl::StrContains(status.message(), piece.path)) return status;
    return absl::Status(status.code(), absl::StrCat("reading ", piece.path, ": ", status.message()));
  }

  // After a target's last piece: converts it from its raw temporary and frees that.
  absl::Status CompleteAfterLastPiece(size_t t) {
    if (pieces_left_[t].fetch_sub(1) != 1 || failed_[t]) return absl::OkStatus();
    if (raw_[t].defined()) {
      ML_RETURN_IF_ERROR(CallTorch(absl::StrCat("converting ", targets_[t].name), [&] {
        targets_[t].dest.copy_(raw_[t]);
        raw_[t] = at::Tensor();
      }));
    }
    if (settings_.read.meter != nullptr && targets_[t].counts_as_tensor) settings_.read.meter->TensorDone();
    FillResult told;
    {
      std::lock_guard<std::mutex> lock(errors_mu_);
      Finish(t);
      if (on_filled_) told = outcome_.results[t];
    }
    if (on_filled_) on_filled_(t, told);
    return absl::OkStatus();
  }

  // Target `t`'s result, once every piece of it is done (filled, or failed with its first error).
  void Finish(size_t t) {
    FillResult& result = outcome_.results[t];
    if (!delivered_[t].empty()) RecordSources(delivered_[t], result.provenance);
    std::sort(failovers_[t].begin(), failovers_[t].end(),
              [](const FailoverEvent& x, const FailoverEvent& y) { return x.when < y.when; });
    result.failovers = std::move(failovers_[t]);
    if (failed_[t]) {
      result.error = errors_[t];
    } else {
      result.filled = true;
      result.proof = ProofTemplate(targets_[t].stored);
      if (proofs_[t] != nullptr) result.proof->sum = proofs_[t]->Finish();
    }
  }

  void Fail(size_t t, const absl::Status& status) {
    std::lock_guard<std::mutex> lock(errors_mu_);
    if (errors_[t].empty()) errors_[t] = std::string(status.message());
    failed_[t] = 1;
  }

  const std::vector<Piece>& pieces_;
  const std::vector<std::vector<ReadSource>>& sources_;  // each target's, in order
  std::vector<FillTarget>& targets_;
  std::vector<at::Tensor>& raw_;
  std::vector<std::unique_ptr<TileProof>>& proofs_;  // per target; null without a registered digest
  const FillSettings& settings_;
  Handles& handles_;
  FillOutcome& outcome_;
  std::mutex errors_mu_;
  std::vector<std::string> errors_;                    // guarded by errors_mu_
  std::vector<std::vector<ReadSource>> delivered_;     // guarded by errors_mu_: who sent bytes, in order
  std::vector<std::vector<FailoverEvent>> failovers_;  // guarded by errors_mu_
  const FilledFn& on_filled_;
  std::map<std::string, uint64_t> streamed_by_node_;  // guarded by errors_mu_
  SourceHealth health_;
  std::vector<std::atomic<int>> failed_;
  std::vector<std::atomic<int>> pieces_left_;
  const size_t first_piece_;
  std::atomic<size_t> next_{0};  // pieces taken, counted from first_piece_
  std::atomic<uint64_t> direct_bytes_{0}, streamed_bytes_{0};
};

}  // namespace

absl::StatusOr<Source> ParseSource(const std::string& text) {
  if (text == "auto") return Source::kAuto;
  if (text == "direct") return Source::kDirect;
  if (text == "stream") return Source::kStream;
  return absl::InvalidArgumentError(absl::StrCat("--source \"", text, "\": use auto, direct or stream"));
}

size_t FirstPiece(const ReadSettings& read, size_t pieces) {
  if (read.stagger_count < 2 || read.stagger_index < 1 || read.stagger_index >= read.stagger_count) return 0;
  const unsigned __int128 scaled =
      static_cast<unsigned __int128>(pieces) * static_cast<uint32_t>(read.stagger_index);
  return static_cast<size_t>(scaled / static_cast<uint32_t>(read.stagger_count));
}

absl::StatusOr<FillOutcome> FillTargets(std::vector<FillTarget>& targets,
                                        const std::map<std::string, FileRoute>& routes,
                                        const FillSettings& settings, const FilledFn& on_filled) {
  FillOutcome outcome;
  outcome.results.resize(targets.size());
  Handles handles(settings.read.file_system);
  std::vector<Piece> pieces;
  std::vector<std::vector<ReadSource>> sources(targets.size());
  std::vector<at::Tensor> raw(targets.size());
  std::vector<std::unique_ptr<TileProof>> proofs(targets.size());
  for (size_t t = 0; t < targets.size(); ++t) {
    FillTarget& target = targets[t];
    FillResult& result = outcome.results[t];
    absl::StatusOr<std::unique_ptr<TileProof>> proof = ProofFor(target);
    if (!proof.ok()) {
      result.error = std::string(proof.status().message());
      continue;
    }
    proofs[t] = *std::move(proof);
    if (target.dest.numel() == 0) {  // an empty shard (uneven splits) holds nothing to read
      result.filled = true;
      result.proof = ProofTemplate(target.stored);
      if (proofs[t] != nullptr) result.proof->sum = proofs[t]->Finish();  // no tile: nothing to prove here
      if (settings.read.meter != nullptr && target.counts_as_tensor) settings.read.meter->TensorDone();
      continue;
    }
    if (absl::Status cut = CutTarget(t, target, routes, settings, handles, result, sources[t], pieces);
        !cut.ok()) {
      result.error = std::string(cut.message());
      continue;
    }
    ML_ASSIGN_OR_RETURN(c10::ScalarType stored, ToScalarType(target.stored.dtype));
    if (target.dest.scalar_type() != stored) {
      ML_RETURN_IF_ERROR(CallTorch(absl::StrCat("allocating ", target.name, " to convert it"), [&] {
        raw[t] = torch::empty(target.dest.sizes(),
                              torch::TensorOptions().dtype(stored).device(target.dest.device()));
      }));
      ML_ASSIGN_OR_RETURN(result.provenance.converted_to, FromScalarType(target.dest.scalar_type()));
    }
  }
  PieceFiller(pieces, sources, targets, raw, proofs, settings, handles, outcome, on_filled).Run();
  return outcome;
}

}  // namespace metaload
