#include "client/load/fanout_chain.h"

#include <signal.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/load/fanout_piece.h"
#include "client/verify/group_sum.h"
#include "libtorch/torch_glue.h"
#include "util/log.h"

namespace metaload {
namespace {

// The tag of the greeting each rank sends its chain neighbours first; pieces take the tags
// below it, counted per pair.
constexpr int kHelloTag = std::numeric_limits<int32_t>::max();

// A piece as this rank takes part in it.
struct ChainPiece {
  size_t item = 0;
  int reader = 0;
  int prev = -1;  // who sends it here (-1: this rank reads it)
  int next = -1;  // who this rank sends it on to (-1: the chain ends here)
  int tag_from_prev = 0;
  int tag_to_next = 0;
  PieceBytes bytes;
  at::Tensor header;  // int64 on the host: as sent (reader) or as arrived
  bool header_ok = false;
  size_t settled = 0;  // chunks received (and passed on): all of them settle the piece
  bool intact = true;  // every chunk so far that arrived matched its CRC-32C
  bool lost = false;   // a receive from `prev` failed: the piece is read from storage

  bool reading() const { return prev < 0; }
};

enum class OpKind { kHello, kRecvHeader, kSendHeader, kRecvChunk, kSendChunk };

// A send or receive this rank posted and has yet to wait for.
struct ChainOp {
  OpKind kind = OpKind::kHello;
  size_t piece = 0;
  size_t chunk = 0;
  int peer = 0;
  c10::intrusive_ptr<c10d::Work> work;  // null: it failed to start, with `failed`
  absl::Status failed;
  at::Tensor buffer;  // what travels
  at::Tensor pooled;  // the pool buffer `buffer` is a view of, if any
};

// c10d's message for a lost pair without its source location and advice: "a receive:
// Connection closed by peer [10.0.0.2]:12682".
std::string FirstSentence(absl::string_view message) {
  std::string out(message);
  if (const size_t at = out.find("] "); at != std::string::npos && out.find('[') < at) {
    const size_t open = out.find('[');
    out.erase(open, at + 2 - open);
  }
  if (const size_t end = out.find(". "); end != std::string::npos) out.resize(end);
  return out;
}

bool IsSend(OpKind kind) { return kind == OpKind::kSendHeader || kind == OpKind::kSendChunk; }

class ChainExchange {
 public:
  ChainExchange(const RankFanout& fan, const FanoutSettings& settings, const std::vector<at::Tensor>& tensors,
                const AwaitReadFn& await_read, std::vector<FillResult>& received)
      : fan_(fan), settings_(settings), tensors_(tensors), await_read_(await_read), received_(received) {}

  ExchangeOutcome Run() {
    LayOut();
    if (pieces_.empty()) return std::move(out_);
    absl::StatusOr<ProcessGroupPtr> group = settings_.job();
    if (!group.ok()) {
      for (const ChainPiece& p : pieces_) {
        if (!p.reading()) out_.read_yourself.push_back(p.item);
      }
      out_.notes.push_back(absl::StrCat("no fan-out (", group.status().message(), "): ",
                                        out_.read_yourself.size(), " pieces read from storage instead"));
      return std::move(out_);
    }
    group_ = *std::move(group);
    Greet();
    const size_t window = static_cast<size_t>(std::max<int64_t>(1, settings_.in_flight_chunks));
    for (size_t k = 0; k < pieces_.size(); ++k) {
      ChainPiece& p = pieces_[k];
      if (p.reading()) {
        p.header = ReaderHeader(p.bytes, await_read_(p.item), received_[p.item].proof);
        p.header_ok = true;
        Post(ChainOp{.kind = OpKind::kSendHeader, .piece = k, .peer = p.next, .buffer = p.header});
      } else {
        p.header = torch::zeros({HeaderWords(p.bytes, received_[p.item].proof)}, torch::kInt64);
        Post(ChainOp{.kind = OpKind::kRecvHeader, .piece = k, .peer = p.prev, .buffer = p.header});
      }
      for (size_t c = 0; c < p.bytes.chunks(); ++c) {
        while (chunks_in_flight_ >= window && !ops_.empty()) CompleteOldest();
        ++chunks_in_flight_;
        ChainOp op{.kind = p.reading() ? OpKind::kSendChunk : OpKind::kRecvChunk,
                   .piece = k,
                   .chunk = c,
                   .peer = p.reading() ? p.next : p.prev};
        const at::Tensor chunk = ChunkOf(p.bytes, c);
        if (p.reading() && chunk.is_cpu()) {
          op.buffer = chunk;
        } else {
          op.pooled = TakeBuffer();
          op.buffer = op.pooled.narrow(0, 0, chunk.numel());
          if (p.reading()) op.buffer.copy_(chunk);
        }
        Post(std::move(op));
      }
    }
    while (!ops_.empty()) CompleteOldest();
    Summarize();
    return std::move(out_);
  }

 private:
  // This rank's pieces in the assignment's order, each with its place in its chain.
  void LayOut() {
    std::vector<std::pair<int32_t, size_t>> mine;  // (piece, item)
    for (size_t i = 0; i < fan_.part.piece_of_item.size(); ++i) {
      if (fan_.part.piece_of_item[i] >= 0) mine.push_back({fan_.part.piece_of_item[i], i});
    }
    std::sort(mine.begin(), mine.end());
    std::map<int, int> sent_to, received_from;  // pieces so far per pair: each one's tag
    for (const auto& [index, item] : mine) {
      const FanoutPiece& piece = fan_.part.pieces[static_cast<size_t>(index)];
      const ChainPlace place =
          PlaceInChain(fan_.part.groups[static_cast<size_t>(piece.group)], piece.reader, fan_.rank);
      ChainPiece p;
      p.item = item;
      p.reader = piece.reader;
      p.prev = place.prev;
      p.next = place.next;
      if (p.prev >= 0) p.tag_from_prev = received_from[p.prev]++;
      if (p.next >= 0) p.tag_to_next = sent_to[p.next]++;
      p.bytes =
          PieceBytes{tensors_[item], static_cast<uint64_t>(tensors_[item].nbytes()), settings_.chunk_bytes};
      pieces_.push_back(std::move(p));
    }
  }

  // One greeting to and from each neighbour before any piece: their pairs connect now, so that
  // a neighbour lost later fails its pair at once instead of a connection that never comes.
  void Greet() {
    std::set<int> to, from;
    for (const ChainPiece& p : pieces_) {
      if (p.next >= 0) to.insert(p.next);
      if (p.prev >= 0) from.insert(p.prev);
    }
    for (const int peer : from) {
      Post(ChainOp{.kind = OpKind::kHello, .peer = peer, .buffer = torch::zeros({1}, torch::kInt64)}, false);
    }
    for (const int peer : to) {
      Post(
          ChainOp{.kind = OpKind::kHello, .peer = peer, .buffer = torch::full({1}, fan_.rank, torch::kInt64)},
          true);
    }
    while (!ops_.empty()) CompleteOldest();
  }

  at::Tensor TakeBuffer() {
    if (pool_.empty()) {
      return torch::empty({static_cast<int64_t>(settings_.chunk_bytes)}, torch::kByte);
    }
    at::Tensor buffer = std::move(pool_.back());
    pool_.pop_back();
    return buffer;
  }

  // Starts `op` (kHello: a send when `hello_send`). One whose peer is gone, or that c10d
  // refuses, is queued as failed all the same: every op is done in the order it was posted, so a
  // piece's header always goes on before its chunks.
  void Post(ChainOp op, bool hello_send = false) {
    if (op.peer < 0) {  // never: a reader always has a next, every other holder a prev
      op.failed = absl::InternalError("a fan-out chain with no one there");
    } else if (const auto it = gone_.find(op.peer); it != gone_.end()) {
      op.failed = absl::UnavailableError(it->second);
    } else {
      const bool send = op.kind == OpKind::kHello ? hello_send : IsSend(op.kind);
      const ChainPiece* p = op.kind == OpKind::kHello ? nullptr : &pieces_[op.piece];
      const int tag = p == nullptr ? kHelloTag : send ? p->tag_to_next : p->tag_from_prev;
      op.failed = CallTorch(absl::StrCat(send ? "sending to rank " : "receiving from rank ", op.peer), [&] {
        std::vector<at::Tensor> tensors{op.buffer};
        op.work = send ? group_->send(tensors, op.peer, tag) : group_->recv(tensors, op.peer, tag);
      });
    }
    ops_.push_back(std::move(op));
  }

  void CompleteOldest() {
    ChainOp op = std::move(ops_.front());
    ops_.pop_front();
    const absl::Status status =
        !op.failed.ok() ? op.failed
                        : CallTorch(op.kind == OpKind::kHello ? "a greeting"
                                    : IsSend(op.kind)         ? "a send"
                                                              : "a receive",
                                    [&] { op.work->wait(absl::ToChronoMilliseconds(settings_.timeout)); });
    Done(op, status);
  }

  void Done(ChainOp& op, const absl::Status& status) {
    if (!status.ok() && gone_.find(op.peer) == gone_.end()) {
      // Its pair is closed (Gloo closes every pair of the group when a wait times out): what
      // is posted to or from it fails at once, and nothing more lands in its buffers (which
      // its pair holds by weak reference), so they may be freed.
      gone_[op.peer] = FirstSentence(status.message());
    }
    if (op.kind == OpKind::kHello) return;
    ChainPiece& p = pieces_[op.piece];
    switch (op.kind) {
      case OpKind::kRecvHeader:
        if (status.ok()) {
          p.header_ok = true;
        } else {
          // Say so downstream: not filled, and where the chain broke.
          p.header = torch::zeros({p.header.numel()}, torch::kInt64);
          p.header.data_ptr<int64_t>()[1] = int64_t{op.peer} + 1;
          p.lost = true;
        }
        if (p.next >= 0)
          Post(ChainOp{.kind = OpKind::kSendHeader, .piece = op.piece, .peer = p.next, .buffer = p.header});
        break;
      case OpKind::kRecvChunk: {
        const int64_t* h = p.header.data_ptr<int64_t>();
        if (!status.ok()) {
          p.lost = true;
        } else if (p.intact && p.header_ok && h[0] == 1) {
          if (static_cast<int64_t>(CrcOf(op.buffer)) != h[2 + op.chunk]) {
            p.intact = false;
          } else if (!CallTorch("copying a fan-out chunk into its tensor", [&] {
                        ChunkOf(p.bytes, op.chunk).copy_(op.buffer);
                      }).ok()) {
            p.lost = true;
          }
        }
        // Passed on whatever came: downstream checks it against the header as this rank did.
        if (p.next >= 0 && status.ok()) {
          Post(ChainOp{.kind = OpKind::kSendChunk,
                       .piece = op.piece,
                       .chunk = op.chunk,
                       .peer = p.next,
                       .buffer = op.buffer,
                       .pooled = std::move(op.pooled)});
        } else if (p.next >= 0) {
          // A buffer whose receive failed is not reused; what goes on is a fresh one that
          // cannot match the chunk's CRC-32C unless it holds the chunk.
          at::Tensor fresh = torch::zeros({op.buffer.numel()}, torch::kByte);
          Post(ChainOp{.kind = OpKind::kSendChunk,
                       .piece = op.piece,
                       .chunk = op.chunk,
                       .peer = p.next,
                       .buffer = fresh});
        } else {
          --chunks_in_flight_;
          if (status.ok() && op.pooled.defined()) pool_.push_back(std::move(op.pooled));
        }
        if (++p.settled == p.bytes.chunks()) Settle(p);
        break;
      }
      case OpKind::kSendChunk:
        --chunks_in_flight_;
        if (status.ok()) {
          out_.sent_bytes += static_cast<uint64_t>(op.buffer.numel());
          if (op.pooled.defined()) pool_.push_back(std::move(op.pooled));
        }
        if (p.reading()) {
          ++chunks_sent_;
          if (settings_.kill_after_chunks > 0 && chunks_sent_ >= settings_.kill_after_chunks) {
            LogWarning(absl::StrCat("rank ", fan_.rank, ": killed after ", chunks_sent_,
                                    " fan-out chunks (METALOAD_FANOUT_TEST_KILL_AFTER_CHUNKS)"));
            ::raise(SIGKILL);
          }
          if (settings_.stall_after_chunks > 0 && chunks_sent_ == settings_.stall_after_chunks) {
            LogWarning(absl::StrCat("rank ", fan_.rank, ": stalls after ", chunks_sent_,
                                    " fan-out chunks (METALOAD_FANOUT_TEST_STALL_AFTER_CHUNKS)"));
            absl::SleepFor(settings_.timeout * 1.5);
          }
        }
        break;
      case OpKind::kSendHeader:
      case OpKind::kHello:
        break;
    }
  }

  // A receiver's piece all of whose chunks came in (or failed to).
  void Settle(ChainPiece& p) {
    if (p.lost) {
      ++lost_from_[p.prev];
      out_.read_yourself.push_back(p.item);
      return;
    }
    const int64_t* h = p.header.data_ptr<int64_t>();
    if (h[0] != 1 && h[1] > 0) ++broke_upstream_[{p.reader, h[1] - 1}];
    TakeReceivedPiece(p.bytes, p.header, p.intact, p.reader, p.item, received_[p.item], out_,
                      settings_.meter);
  }

  // One line per neighbour lost and per break further up a chain.
  void Summarize() {
    for (const auto& [peer, why] : gone_) {
      const auto lost = lost_from_.find(peer);
      out_.notes.push_back(
          absl::StrCat("fan-out with rank ", peer, " stopped (", why, ")",
                       lost == lost_from_.end()
                           ? ""
                           : absl::StrCat("; ", lost->second, " pieces from it read from storage instead")));
    }
    for (const auto& [at, count] : broke_upstream_) {
      out_.notes.push_back(absl::StrCat(count, " pieces read by rank ", at.first,
                                        " did not come through (the chain broke after rank ", at.second,
                                        "): read from storage instead"));
    }
  }

  const RankFanout& fan_;
  const FanoutSettings& settings_;
  const std::vector<at::Tensor>& tensors_;
  const AwaitReadFn& await_read_;
  std::vector<FillResult>& received_;
  ExchangeOutcome out_;
  ProcessGroupPtr group_;
  std::vector<ChainPiece> pieces_;
  std::deque<ChainOp> ops_;
  std::vector<at::Tensor> pool_;  // chunk buffers whose transfers completed
  size_t chunks_in_flight_ = 0;
  int64_t chunks_sent_ = 0;
  std::map<int, std::string> gone_;                            // neighbours whose pair failed, and why
  std::map<int, int64_t> lost_from_;                           // pieces lost on the way from a neighbour
  std::map<std::pair<int, int64_t>, int64_t> broke_upstream_;  // (reader, where it broke): pieces
};

}  // namespace

ExchangeOutcome ExchangeDownChains(const RankFanout& fan, const FanoutSettings& settings,
                                   const std::vector<at::Tensor>& tensors, const AwaitReadFn& await_read,
                                   std::vector<FillResult>& received) {
  return ChainExchange(fan, settings, tensors, await_read, received).Run();
}

}  // namespace metaload
