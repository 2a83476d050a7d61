#include "client/load/fanout.h"

#include <signal.h>

#include <algorithm>
#include <map>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/verify/rendezvous.h"
#include "libtorch/torch_glue.h"
#include "util/hash/crc32c.h"
#include "util/log.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// Whether the plan's shape lets two ranks hold the same bytes: replicas, or a group whose
// members all hold a tensor whole (a tp group's norms). A plan of one replica whose rank holds
// only slices (fsdp) shares nothing, and the whole plan is not fetched for it.
bool MayShare(const Plan& plan, const RankPlan& mine) {
  if (plan.world_size < 2) return false;
  if (plan.replicas > 1) return true;
  if (plan.group_size < 2) return false;
  return std::any_of(mine.items.begin(), mine.items.end(),
                     [](const ReadItem& item) { return !item.file.empty() && !item.slice.has_value(); });
}

bool SameItems(const RankPlan& a, const RankPlan& b) {
  if (a.items.size() != b.items.size()) return false;
  for (size_t i = 0; i < a.items.size(); ++i) {
    if (a.items[i].tensor != b.items[i].tensor || a.items[i].size_bytes != b.items[i].size_bytes ||
        !(a.items[i].slice == b.items[i].slice)) {
      return false;
    }
  }
  return true;
}

// One piece's bytes on this rank: its tensor's memory, in chunks.
struct PieceBytes {
  at::Tensor tensor;
  uint64_t size_bytes = 0;
  uint64_t chunk_bytes = 0;
  size_t chunks() const { return size_bytes == 0 ? 0 : (size_bytes + chunk_bytes - 1) / chunk_bytes; }
  uint64_t ChunkSize(size_t c) const { return std::min(chunk_bytes, size_bytes - c * chunk_bytes); }
};

// Broadcasts over `group` from `root` (its index in the group); throws what c10d throws.
void Broadcast(const GlooGroup& group, at::Tensor tensor, int root, absl::Duration timeout) {
  std::vector<at::Tensor> tensors{std::move(tensor)};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  options.timeout = absl::ToChronoMilliseconds(timeout);
  group->broadcast(tensors, options)->wait();
}

at::Tensor ByteView(uint8_t* data, uint64_t size_bytes) {
  return torch::from_blob(data, {static_cast<int64_t>(size_bytes)},
                          torch::TensorOptions().dtype(torch::kByte));
}

// One group's exchange, as this rank takes part in it.
class GroupExchange {
 public:
  GroupExchange(const RankFanout& fan, const FanoutSettings& settings, const std::vector<at::Tensor>& tensors,
                std::vector<FillResult>& results, ExchangeOutcome& out, int64_t& chunks_sent)
      : fan_(fan),
        settings_(settings),
        tensors_(tensors),
        results_(results),
        out_(out),
        chunks_sent_(chunks_sent) {}

  // `pieces`: (piece, this rank's item), in piece order.
  void Run(int group_index, const std::vector<std::pair<int32_t, size_t>>& pieces) {
    const std::vector<int>& members = fan_.assignment.groups[static_cast<size_t>(group_index)];
    const int me =
        static_cast<int>(std::lower_bound(members.begin(), members.end(), fan_.rank) - members.begin());
    size_t done = 0;
    absl::Status status = [&]() -> absl::Status {
      ML_ASSIGN_OR_RETURN(RendezvousStore base, settings_.store());
      RendezvousStore store =
          c10::make_intrusive<c10d::PrefixStore>(absl::StrCat("group/", group_index), base);
      ML_ASSIGN_OR_RETURN(GlooGroup group,
                          NewGlooGroup(store, me, static_cast<int>(members.size()), settings_.timeout));
      for (; done < pieces.size(); ++done) {
        const FanoutPiece& piece = fan_.assignment.pieces[static_cast<size_t>(pieces[done].first)];
        const int root = static_cast<int>(std::lower_bound(members.begin(), members.end(), piece.reader) -
                                          members.begin());
        ML_RETURN_IF_ERROR(
            CallTorch(absl::StrCat("fan-out of piece ", pieces[done].first, " from rank ", piece.reader),
                      [&] { One(group, root, me, members.size(), piece, pieces[done].second); }));
      }
      return absl::OkStatus();
    }();
    if (status.ok()) return;
    size_t left = 0;
    for (size_t k = done; k < pieces.size(); ++k) {
      if (fan_.assignment.pieces[static_cast<size_t>(pieces[k].first)].reader == fan_.rank) continue;
      out_.read_yourself.push_back(pieces[k].second);
      ++left;
    }
    out_.notes.push_back(absl::StrCat("fan-out over ranks ", absl::StrJoin(members, ", "),
                                      " stopped at piece ", done + 1, " of ", pieces.size(), ": ",
                                      status.message(), "; ", left, left == 1 ? " piece" : " pieces",
                                      " read from storage instead"));
  }

 private:
  void One(const GlooGroup& group, int root, int me, size_t members, const FanoutPiece& piece, size_t item) {
    const at::Tensor& dest = tensors_[item];
    PieceBytes bytes{dest, static_cast<uint64_t>(dest.nbytes()), settings_.chunk_bytes};
    const bool reading = root == me;
    const bool on_cpu = dest.device().is_cpu();
    // The header: filled?, the digest check, one CRC-32C per chunk.
    at::Tensor header = torch::zeros({static_cast<int64_t>(2 + bytes.chunks())}, torch::kInt64);
    int64_t* h = header.data_ptr<int64_t>();
    at::Tensor staging;
    if (!on_cpu)
      staging =
          torch::empty({static_cast<int64_t>(std::min(bytes.size_bytes, bytes.chunk_bytes))}, torch::kByte);
    auto chunk_of = [&](size_t c) -> at::Tensor {
      if (on_cpu)
        return ByteView(static_cast<uint8_t*>(dest.data_ptr()) + c * bytes.chunk_bytes, bytes.ChunkSize(c));
      return staging.narrow(0, 0, static_cast<int64_t>(bytes.ChunkSize(c)));
    };
    auto device_chunk = [&](size_t c) {
      return dest.view({-1})
          .view(torch::kByte)
          .narrow(0, static_cast<int64_t>(c * bytes.chunk_bytes), static_cast<int64_t>(bytes.ChunkSize(c)));
    };
    if (reading) {
      const FillResult& mine = results_[item];
      h[0] = mine.filled ? 1 : 0;
      h[1] = static_cast<int64_t>(mine.digest);
      for (size_t c = 0; mine.filled && c < bytes.chunks(); ++c) {
        if (!on_cpu) chunk_of(c).copy_(device_chunk(c));
        at::Tensor chunk = chunk_of(c);
        h[2 + c] =
            Crc32c(absl::MakeConstSpan(static_cast<const uint8_t*>(chunk.data_ptr()), bytes.ChunkSize(c)));
      }
    }
    Broadcast(group, header, root, settings_.timeout);
    if (h[0] == 0) {  // its reader could not read it: every holder reads it itself
      if (!reading) out_.read_yourself.push_back(item);
      return;
    }
    bool intact = true;
    for (size_t c = 0; c < bytes.chunks(); ++c) {
      at::Tensor chunk = chunk_of(c);
      if (reading && !on_cpu) chunk.copy_(device_chunk(c));
      Broadcast(group, chunk, root, settings_.timeout);
      if (reading) {
        if (settings_.kill_after_chunks > 0 && ++chunks_sent_ >= settings_.kill_after_chunks) {
          LogWarning(absl::StrCat("rank ", fan_.rank, ": killed after ", chunks_sent_,
                                  " fan-out chunks (METALOAD_FANOUT_TEST_KILL_AFTER_CHUNKS)"));
          ::raise(SIGKILL);
        }
        continue;
      }
      const uint32_t crc =
          Crc32c(absl::MakeConstSpan(static_cast<const uint8_t*>(chunk.data_ptr()), bytes.ChunkSize(c)));
      intact = intact && static_cast<int64_t>(crc) == h[2 + c];
      if (!on_cpu) device_chunk(c).copy_(chunk);
    }
    if (reading) {
      out_.sent_bytes += bytes.size_bytes * (members - 1);
      return;
    }
    if (!intact) {
      out_.notes.push_back(absl::StrCat("a fan-out chunk from rank ", piece.reader,
                                        " did not match its CRC-32C: read from storage instead"));
      out_.read_yourself.push_back(item);
      return;
    }
    FillResult& result = results_[item];
    result.filled = true;
    result.error.clear();
    result.provenance =
        Provenance{.kind = Provenance::Kind::kFanout, .rule = absl::StrCat("rank ", piece.reader)};
    result.digest = static_cast<DigestCheck>(h[1]);
    out_.received_bytes += bytes.size_bytes;
  }

  const RankFanout& fan_;
  const FanoutSettings& settings_;
  const std::vector<at::Tensor>& tensors_;
  std::vector<FillResult>& results_;
  ExchangeOutcome& out_;
  int64_t& chunks_sent_;
};

}  // namespace

bool RankFanout::Receives(size_t i) const {
  const int32_t p = i < piece_of_item.size() ? piece_of_item[i] : -1;
  return p >= 0 && assignment.pieces[static_cast<size_t>(p)].reader != rank;
}

std::optional<RankFanout> PlanRankFanout(const std::string& daemon, const std::string& model, int world_size,
                                         const StrategyOptions& strategy, const Assignment& own,
                                         std::vector<std::string>* notes) {
  const RankPlan& mine = own.plan.ranks.front();
  if (!MayShare(own.plan, mine)) return std::nullopt;
  absl::StatusOr<Assignment> whole =
      DaemonClient(daemon).GetPlan(model, world_size, strategy, std::nullopt, absl::Minutes(1));
  if (!whole.ok() || whole->plan_digest != own.plan_digest ||
      whole->plan.ranks.size() <= static_cast<size_t>(mine.rank) ||
      !SameItems(whole->plan.ranks[static_cast<size_t>(mine.rank)], mine)) {
    notes->push_back(absl::StrCat("no fan-out: ",
                                  whole.ok() ? "the whole plan differs from this rank's part"
                                             : absl::StrCat("the whole plan: ", whole.status().message()),
                                  "; this rank reads all of its tensors"));
    return std::nullopt;
  }
  // A holder whose node serves the piece's file reads it (it may read it directly).
  const std::map<std::string, FileRoute>& files = whole->files;
  CanReadFn can_read = [&files](const RankPlan& rank, const ReadItem& item) {
    auto route = files.find(item.file);
    if (route == files.end()) return false;
    return std::any_of(route->second.servers.begin(), route->second.servers.end(),
                       [&](const FileRoute::Server& s) { return s.node == rank.node; });
  };
  absl::StatusOr<FanoutAssignment> assignment = AssignFanout(whole->plan, can_read);
  if (!assignment.ok()) {
    notes->push_back(absl::StrCat("no fan-out: ", assignment.status().message()));
    return std::nullopt;
  }
  if (assignment->empty()) return std::nullopt;
  RankFanout fan;
  fan.rank = mine.rank;
  fan.piece_of_item = assignment->piece_of_item[static_cast<size_t>(mine.rank)];
  fan.assignment = std::move(*assignment);
  return fan;
}

ExchangeOutcome ExchangePieces(const RankFanout& fan, const FanoutSettings& settings,
                               const std::vector<at::Tensor>& tensors, std::vector<FillResult>& results) {
  // This rank's pieces by group, in piece order; groups in ascending order (fanout.h: no two
  // ranks wait on each other in opposite orders).
  std::map<int, std::vector<std::pair<int32_t, size_t>>> by_group;
  for (size_t i = 0; i < fan.piece_of_item.size(); ++i) {
    const int32_t p = fan.piece_of_item[i];
    if (p >= 0) by_group[fan.assignment.pieces[static_cast<size_t>(p)].group].push_back({p, i});
  }
  ExchangeOutcome out;
  int64_t chunks_sent = 0;
  for (auto& [group, pieces] : by_group) {
    std::sort(pieces.begin(), pieces.end());
    GroupExchange(fan, settings, tensors, results, out, chunks_sent).Run(group, pieces);
  }
  return out;
}

}  // namespace metaload
