#include "client/load/fanout.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/load/fanout_chain.h"
#include "client/load/fanout_piece.h"
#include "client/verify/group_sum.h"
#include "client/verify/rendezvous.h"
#include "libtorch/torch_glue.h"
#include "util/fs/file_system.h"
#include "util/hash/xxh3.h"
#include "util/log.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// Starts a broadcast over `group` from `root` (its index in the group); throws what c10d throws.
c10::intrusive_ptr<c10d::Work> StartBroadcast(const ProcessGroupPtr& group, at::Tensor tensor, int root,
                                              absl::Duration timeout) {
  std::vector<at::Tensor> tensors{std::move(tensor)};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  options.timeout = absl::ToChronoMilliseconds(timeout);
  return group->broadcast(tensors, options);
}

// What the members of a group hold, in order, as one number: equal on every member that holds
// the same pieces (FanoutSettings::agree).
uint64_t Fingerprint(const RankFanout& fan, const std::vector<std::pair<int32_t, size_t>>& pieces) {
  std::string text;
  for (const auto& [p, item] : pieces) {
    const FanoutPiece& piece = fan.part.pieces[static_cast<size_t>(p)];
    absl::StrAppend(&text, piece.reader, ":", piece.size_bytes, ":",
                    item < fan.item_identity.size() ? fan.item_identity[item] : "", "\n");
  }
  return Xxh3(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

// `rank`'s index among a group's (ascending) members.
int IndexIn(const std::vector<int>& members, int rank) {
  return static_cast<int>(std::lower_bound(members.begin(), members.end(), rank) - members.begin());
}

// One piece of the group as this rank takes part in it.
struct PieceState {
  int32_t piece = 0;
  size_t item = 0;
  int reader = 0;
  bool reading = false;  // this rank is its reader
  PieceBytes bytes;
  at::Tensor header;       // int64: filled?, 0, one CRC-32C per chunk, the reader's proof (as sent)
  at::Tensor header_host;  // the same on the host, once it arrived
  size_t arrived = 0;      // chunks whose collective completed
  bool intact = true;
  bool finished = false;
};

// One collective in flight: a piece's header (chunk -1) or one of its chunks.
struct Op {
  size_t state = 0;
  int64_t chunk = -1;
  c10::intrusive_ptr<c10d::Work> work;
  at::Tensor staging;  // a piece off the collectives' device: the chunk's buffer there
};

// One group's exchange, as this rank takes part in it. Every member starts the group's
// collectives in the same order (each piece's header, then its chunks) without waiting for
// them, at most `in_flight_chunks` chunks ahead of the oldest, and waits for them in that order:
// the link stays busy, and a reader sends a piece as soon as it is read (AwaitReadFn) while it
// reads the next.
class GroupExchange {
 public:
  GroupExchange(const RankFanout& fan, const FanoutSettings& settings, const std::vector<at::Tensor>& tensors,
                const AwaitReadFn& await_read, std::vector<FillResult>& received, ExchangeOutcome& out,
                std::atomic<int64_t>& chunks_sent)
      : fan_(fan),
        settings_(settings),
        tensors_(tensors),
        await_read_(await_read),
        received_(received),
        out_(out),
        chunks_sent_(chunks_sent) {}

  // `pieces`: (piece, this rank's item), in piece order.
  void Run(int group_index, const std::vector<std::pair<int32_t, size_t>>& pieces,
           const absl::StatusOr<ProcessGroupPtr>& made) {
    const std::vector<int>& members = fan_.part.groups[static_cast<size_t>(group_index)];
    members_ = members.size();
    for (const auto& [p, item] : pieces) {
      PieceState s;
      s.piece = p;
      s.item = item;
      s.reader = fan_.part.pieces[static_cast<size_t>(p)].reader;
      s.reading = s.reader == fan_.rank;
      s.bytes =
          PieceBytes{tensors_[item], static_cast<uint64_t>(tensors_[item].nbytes()), settings_.chunk_bytes};
      states_.push_back(std::move(s));
    }
    size_t started = 0;
    absl::Status status = [&]() -> absl::Status {
      ML_RETURN_IF_ERROR(made.status());
      const ProcessGroupPtr& group = *made;
      if (settings_.agree) ML_RETURN_IF_ERROR(Agree(group, members, pieces));
      for (; started < states_.size(); ++started) {
        const PieceState& s = states_[started];
        ML_RETURN_IF_ERROR(CallTorch(absl::StrCat("fan-out of piece ", s.piece, " from rank ", s.reader),
                                     [&] { Start(group, started, IndexIn(members, s.reader)); }));
      }
      while (!ops_.empty()) {
        const PieceState& s = states_[ops_.front().state];
        ML_RETURN_IF_ERROR(CallTorch(absl::StrCat("fan-out of piece ", s.piece, " from rank ", s.reader),
                                     [&] { Complete(); }));
      }
      return absl::OkStatus();
    }();
    if (status.ok()) return;
    // What is still in flight is waited for (a member gone fails it at once), so that no late
    // chunk lands over bytes read from storage; then every piece not yet here is read.
    for (Op& op : ops_) {
      try {
        op.work->wait();
      } catch (const std::exception&) {
        // Its failure is the one already reported, or follows from it.
      }
    }
    ops_.clear();
    size_t left = 0, first_open = states_.size();
    for (size_t k = 0; k < states_.size(); ++k) {
      if (states_[k].finished) continue;
      first_open = std::min(first_open, k);
      if (states_[k].reading) continue;
      out_.read_yourself.push_back(states_[k].item);
      ++left;
    }
    out_.notes.push_back(absl::StrCat("fan-out over ranks ", absl::StrJoin(members, ", "),
                                      " stopped at piece ", std::min(first_open, started) + 1, " of ",
                                      states_.size(), ": ", status.message(), "; ", left,
                                      left == 1 ? " piece" : " pieces", " read from storage instead"));
  }

 private:
  // Every member's fingerprint of the group's pieces in its slot, summed: all equal, or the
  // group fans out nothing.
  absl::Status Agree(const ProcessGroupPtr& group, const std::vector<int>& members,
                     const std::vector<std::pair<int32_t, size_t>>& pieces) {
    std::vector<uint8_t> slots(members.size() * 8, 0);
    const uint64_t mine = Fingerprint(fan_, pieces);
    std::memcpy(slots.data() + 8 * static_cast<size_t>(IndexIn(members, fan_.rank)), &mine, 8);
    ML_RETURN_IF_ERROR(
        SumOverGroup(group, GroupSumOptions{.device = settings_.device, .timeout = settings_.timeout})(
            absl::MakeSpan(slots), "the fan-out group's check that its members hold the same tensors"));
    for (size_t k = 0; k < members.size(); ++k) {
      if (std::memcmp(slots.data() + 8 * k, &mine, 8) != 0) {
        return absl::FailedPreconditionError(absl::StrCat("rank ", members[k], " holds other tensors"));
      }
    }
    return absl::OkStatus();
  }

  // The buffer chunk `c` travels in: the tensor's own memory where the collectives take it,
  // else a buffer there (`fill`: with the chunk's bytes).
  at::Tensor Wire(const PieceBytes& bytes, size_t c, bool fill) const {
    const at::Tensor chunk = ChunkOf(bytes, c);
    if (chunk.device() == settings_.device) return chunk;
    at::Tensor staging =
        torch::empty({chunk.numel()}, torch::TensorOptions().dtype(torch::kByte).device(settings_.device));
    if (fill) staging.copy_(chunk);
    return staging;
  }

  // Starts piece `k`'s header and chunks; a reader first waits for the piece to be read.
  void Start(const ProcessGroupPtr& group, size_t k, int root) {
    PieceState& s = states_[k];
    const PieceBytes& bytes = s.bytes;
    const std::optional<TensorProof>& proof_template = received_[s.item].proof;
    const at::Tensor header = s.reading ? ReaderHeader(bytes, await_read_(s.item), proof_template)
                                        : torch::zeros({HeaderWords(bytes, proof_template)}, torch::kInt64);
    s.header = settings_.device.is_cpu() ? header : header.to(settings_.device);
    ops_.push_back(Op{k, -1, StartBroadcast(group, s.header, root, settings_.timeout), {}});
    // A piece its reader could not fill is sent anyway (every member's collectives are fixed
    // by the plan alone); its receivers drop it and read it themselves.
    for (size_t c = 0; c < bytes.chunks(); ++c) {
      while (in_flight_chunks_ >= std::max<int64_t>(1, settings_.in_flight_chunks)) Complete();
      at::Tensor chunk = Wire(bytes, c, s.reading);
      at::Tensor staging = chunk.device() == bytes.tensor.device() ? at::Tensor() : chunk;
      ops_.push_back(Op{k, static_cast<int64_t>(c), StartBroadcast(group, chunk, root, settings_.timeout),
                        std::move(staging)});
      ++in_flight_chunks_;
    }
    if (bytes.chunks() == 0) s.finished = true;  // never: shared pieces hold bytes
  }

  // Waits for the oldest collective in flight; throws what c10d throws.
  void Complete() {
    Op op = std::move(ops_.front());
    ops_.pop_front();
    op.work->wait();
    PieceState& s = states_[op.state];
    if (op.chunk < 0) {  // the header is in place
      s.header_host = s.header.is_cpu() ? s.header : s.header.cpu();
      return;
    }
    --in_flight_chunks_;
    const size_t c = static_cast<size_t>(op.chunk);
    const int64_t* h = s.header_host.data_ptr<int64_t>();
    if (s.reading) {
      if (settings_.kill_after_chunks > 0 && ++chunks_sent_ >= settings_.kill_after_chunks) {
        LogWarning(absl::StrCat("rank ", fan_.rank, ": killed after ", chunks_sent_.load(),
                                " fan-out chunks (METALOAD_FANOUT_TEST_KILL_AFTER_CHUNKS)"));
        ::raise(SIGKILL);
      }
    } else if (h[0] == 1) {
      const at::Tensor chunk = op.staging.defined() ? op.staging : ChunkOf(s.bytes, c);
      s.intact = s.intact && static_cast<int64_t>(CrcOf(chunk)) == h[2 + c];
      if (op.staging.defined()) ChunkOf(s.bytes, c).copy_(op.staging);
    }
    if (++s.arrived == s.bytes.chunks()) Finish(s);
  }

  void Finish(PieceState& s) {
    s.finished = true;
    if (s.reading) {
      out_.sent_bytes += s.bytes.size_bytes * (members_ - 1);
      return;
    }
    TakeReceivedPiece(s.bytes, s.header_host, s.intact, s.reader, s.item, received_[s.item], out_,
                      settings_.meter);
  }

  const RankFanout& fan_;
  const FanoutSettings& settings_;
  const std::vector<at::Tensor>& tensors_;
  const AwaitReadFn& await_read_;
  std::vector<FillResult>& received_;
  ExchangeOutcome& out_;
  std::atomic<int64_t>& chunks_sent_;
  size_t members_ = 0;
  std::vector<PieceState> states_;
  std::deque<Op> ops_;
  int64_t in_flight_chunks_ = 0;
};

// This rank's pieces by group, in piece order; groups in ascending order (fanout.h: no two
// ranks wait on each other in opposite orders).
std::map<int, std::vector<std::pair<int32_t, size_t>>> PiecesByGroup(const RankFanout& fan) {
  std::map<int, std::vector<std::pair<int32_t, size_t>>> by_group;
  for (size_t i = 0; i < fan.part.piece_of_item.size(); ++i) {
    const int32_t p = fan.part.piece_of_item[i];
    if (p >= 0) by_group[fan.part.pieces[static_cast<size_t>(p)].group].push_back({p, i});
  }
  for (auto& [group, pieces] : by_group) std::sort(pieces.begin(), pieces.end());
  return by_group;
}

}  // namespace

bool RankFanout::Receives(size_t i) const {
  const int32_t p = i < part.piece_of_item.size() ? part.piece_of_item[i] : -1;
  return p >= 0 && part.pieces[static_cast<size_t>(p)].reader != rank;
}

std::optional<RankFanout> PlanRankFanout(const Plan& own, std::optional<FanoutPart> part,
                                         std::vector<std::string>* notes) {
  const RankPlan& mine = own.ranks.front();
  if (!RankMayShare(own, mine.rank)) return std::nullopt;
  if (!part.has_value()) {
    notes->push_back(
        "no fan-out: the coordinator sent no part of it with this rank's plan; this rank reads all of its "
        "tensors");
    return std::nullopt;
  }
  if (part->empty()) return std::nullopt;
  RankFanout fan;
  fan.rank = mine.rank;
  fan.part = *std::move(part);  // up to a few MiB at 1,024 ranks: moved, not copied
  return fan;
}

absl::StatusOr<RankFanout> RankFanoutWithinGroups(int rank, const std::vector<std::vector<int>>& groups,
                                                  const std::vector<HeldPiece>& items) {
  ML_ASSIGN_OR_RETURN(const FanoutAssignment assignment, AssignWithinGroups(rank, groups, items));
  RankFanout fan;
  fan.rank = rank;
  fan.part = PartOf(assignment, rank);
  return fan;
}

FanoutJobFn GlooFanoutJob(std::function<absl::StatusOr<RendezvousStore>()> store, int rank, int world,
                          absl::Duration timeout) {
  auto made = std::make_shared<std::optional<absl::StatusOr<ProcessGroupPtr>>>();
  return [store = std::move(store), rank, world, timeout, made]() -> absl::StatusOr<ProcessGroupPtr> {
    if (!made->has_value()) {
      *made = [&]() -> absl::StatusOr<ProcessGroupPtr> {
        ML_ASSIGN_OR_RETURN(RendezvousStore base, store());
        RendezvousStore scoped = c10::make_intrusive<c10d::PrefixStore>("chains", base);
        ML_ASSIGN_OR_RETURN(GlooGroup gloo,
                            NewGlooGroup(scoped, rank, world, timeout, GlooConnect::kOnFirstUse));
        return AsProcessGroup(gloo, scoped, c10d::ProcessGroup::BackendType::GLOO);
      }();
    }
    return **made;
  };
}

std::vector<size_t> SendOrder(const RankFanout& fan) {
  // In the plan's order, whatever the group: every group's exchange, on its own thread, gets
  // its first piece early.
  std::vector<std::pair<int32_t, size_t>> mine;
  for (size_t i = 0; i < fan.part.piece_of_item.size(); ++i) {
    const int32_t p = fan.part.piece_of_item[i];
    if (p >= 0 && fan.part.pieces[static_cast<size_t>(p)].reader == fan.rank) mine.push_back({p, i});
  }
  std::sort(mine.begin(), mine.end());
  std::vector<size_t> order;
  for (const auto& [p, item] : mine) order.push_back(item);
  return order;
}

ExchangeOutcome ExchangePieces(const RankFanout& fan, const FanoutSettings& settings,
                               const std::vector<at::Tensor>& tensors, const AwaitReadFn& await_read,
                               std::vector<FillResult>& received) {
  if (settings.job) return ExchangeDownChains(fan, settings, tensors, await_read, received);
  const std::map<int, std::vector<std::pair<int32_t, size_t>>> by_group = PiecesByGroup(fan);
  std::vector<const std::pair<const int, std::vector<std::pair<int32_t, size_t>>>*> groups;
  for (const auto& entry : by_group) groups.push_back(&entry);
  std::vector<ExchangeOutcome> outs(groups.size());
  if (groups.empty()) return ExchangeOutcome{};
  // The groups are made one after another, in ascending order (each is a rendezvous of its
  // members over the job's store, whose client serves one request at a time: made side by
  // side, one thread's wait held up the others' keys); then they run side by side, up to
  // kMaxGroupThreads at once, each taken in ascending order: of the groups in progress
  // anywhere, the lowest has every member in it or about to take it (each rank takes its
  // groups in that order), so no two ranks wait on each other for ever.
  std::vector<absl::StatusOr<ProcessGroupPtr>> made;
  for (const auto* group : groups) {
    const size_t g = static_cast<size_t>(group->first);
    made.push_back(settings.groups(fan.part.group_ids[g], fan.part.groups[g]));
  }
  std::atomic<size_t> next{0};
  std::atomic<int64_t> chunks_sent{0};
  auto worker = [&] {
    for (size_t g = next++; g < groups.size(); g = next++) {
      GroupExchange(fan, settings, tensors, await_read, received, outs[g], chunks_sent)
          .Run(groups[g]->first, groups[g]->second, made[g]);
    }
  };
  std::vector<std::thread> threads;
  const size_t thread_count = std::min(std::max<size_t>(1, settings.max_group_threads), groups.size());
  for (size_t t = 0; t < thread_count; ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  ExchangeOutcome out;
  for (ExchangeOutcome& o : outs) {
    out.read_yourself.insert(out.read_yourself.end(), o.read_yourself.begin(), o.read_yourself.end());
    out.received_bytes += o.received_bytes;
    out.sent_bytes += o.sent_bytes;
    for (std::string& note : o.notes) out.notes.push_back(std::move(note));
  }
  return out;
}

}  // namespace metaload
