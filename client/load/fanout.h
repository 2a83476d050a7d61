// Read once, fan out, in the plan-driven load (`metactl load`): where the plan has pieces that
// ranks on several nodes hold identically (planner/plan/fanout.h assigns each one reader; the
// reader's node-mates read it too, from their node's page cache), this rank reads only its own
// pieces from storage and receives the others over a Gloo group of the ranks that hold them
// (client/verify/rendezvous.h: the job's store and group set-up).
//
//   ML_ASSIGN_OR_RETURN(std::optional<RankFanout> fan, PlanRankFanout(..., &notes));
//   reader thread: read SendOrder(*fan) in that order, then the rest; say when each is read
//   ExchangeOutcome x = ExchangePieces(*fan, settings, tensors, await_read, received);
//   ... then read x.read_yourself
//
// The wire, per piece and in the assignment's order within each group: the reader broadcasts a
// header (whether it filled the piece, its registered-digest check, the CRC-32C of each chunk
// of at most `chunk_bytes`), then the chunks, each straight from and into the tensors' memory
// on CPU ranks (through a chunk-sized host buffer otherwise). Every member starts these
// collectives without waiting, at most `in_flight_chunks` ahead, so a reader sends a piece as
// soon as it is read while it reads the next. A receiver keeps a piece only when every chunk
// matches its CRC; a piece its reader failed, a chunk that does not match, and everything of a
// group after a collective that failed or timed out (a reader that died) are read from storage
// instead (ExchangeOutcome::read_yourself): no rank waits longer than `timeout` on any one
// collective, and none returns with a collective still in flight.
//
// Thread-safety: one exchange per rank at a time; `await_read` and `settings.store` are called
// on the exchange's threads (store once).
#ifndef METALOAD_CLIENT_LOAD_FANOUT_H_
#define METALOAD_CLIENT_LOAD_FANOUT_H_

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/read/daemon_client.h"
#include "client/read/fill.h"
#include "planner/plan/fanout.h"

namespace c10d {
class Store;
}  // namespace c10d

namespace metaload {

// The job's rendezvous store (client/verify/rendezvous.h, which this header leaves out: c10d's
// Gloo headers stay in the units that use them).
using RendezvousStore = c10::intrusive_ptr<c10d::Store>;

struct FanoutSettings {
  // The job's store, connected once by the caller (it serves verification afterwards) and
  // scoped for fan-out; called only when this rank has pieces to share.
  std::function<absl::StatusOr<RendezvousStore>()> store;
  absl::Duration timeout = absl::Seconds(60);  // the longest any one collective may wait
  uint64_t chunk_bytes = uint64_t{4} << 20;    // one collective's share of a piece
  int64_t in_flight_chunks = 4;                // chunks started before the oldest is waited for
  // Tests only (METALOAD_FANOUT_TEST_KILL_AFTER_CHUNKS): the reader SIGKILLs itself after
  // sending this many chunks, to prove that its group finishes from storage. 0: never.
  int64_t kill_after_chunks = 0;
};

// This rank's part of the whole plan's fan-out.
struct RankFanout {
  int rank = 0;
  FanoutAssignment assignment;         // the whole plan's
  std::vector<int32_t> piece_of_item;  // this rank's items: the piece each is, or -1

  // Whether item `i` of this rank comes from another rank.
  bool Receives(size_t i) const;
};

// The fan-out of the plan `own` is this rank's part of: nullopt when nothing is shared (then no
// whole plan is fetched when the plan's shape says so: one replica, no whole tensor in a group),
// or when the whole plan cannot be had or differs from this rank's part (a line in `notes`
// says why; the rank then reads everything itself).
std::optional<RankFanout> PlanRankFanout(const std::string& daemon, const std::string& model, int world_size,
                                         const StrategyOptions& strategy, const Assignment& own,
                                         std::vector<std::string>* notes);

struct ExchangeOutcome {
  std::vector<size_t> read_yourself;  // items this rank must still read from storage
  uint64_t received_bytes = 0;        // bytes that arrived intact from other ranks
  uint64_t sent_bytes = 0;            // bytes this rank sent (each piece once per receiver)
  std::vector<std::string> notes;     // "fan-out group 0-3 failed at piece 4 of 9 ...: read from storage"
};

// Blocks until item `i`, a piece this rank reads, has been read; its result (filled, digest).
using AwaitReadFn = std::function<FillResult(size_t item)>;

// The items this rank reads for others, in the plan's order (each group sends its own in it).
std::vector<size_t> SendOrder(const RankFanout& fan);

// Sends the pieces this rank reads and receives the others, its groups side by side (each on
// a thread of its own, at most 8 at once). `tensors[i]` is
// item i's destination (contiguous); `await_read` is asked for each piece this rank sends before
// it is sent; `received[i]` is written (filled, provenance "fanout:rank N", digest) for each
// piece that arrives intact, and nothing else of it.
ExchangeOutcome ExchangePieces(const RankFanout& fan, const FanoutSettings& settings,
                               const std::vector<at::Tensor>& tensors, const AwaitReadFn& await_read,
                               std::vector<FillResult>& received);

}  // namespace metaload

#endif  // METALOAD_CLIENT_LOAD_FANOUT_H_
