// Read once, fan out, in the plan-driven load (`metactl load`): where the plan has pieces that
// ranks on several nodes hold identically (planner/plan/fanout.h assigns each one reader; the
// reader's node-mates read it too, from their node's page cache, but for a model in an object
// store, where there is none, they receive it as well), this rank reads only its own
// pieces from storage and receives the others over a process group of the ranks that hold them:
// Gloo groups on the job's store for `metactl load` (client/verify/rendezvous.h), the user's own
// replica groups for the Python package (planner/plan/fanout.h AssignWithinGroups).
//
//   std::optional<RankFanout> fan = PlanRankFanout(a.plan, std::move(a.fanout), &notes);  // sent with it
//   reader thread: read SendOrder(*fan) in that order, then the rest; say when each is read
//   ExchangeOutcome x = ExchangePieces(*fan, settings, tensors, await_read, received);
//   ... then read x.read_yourself
//
// The wire, per piece and in the assignment's order within each group: the reader broadcasts a
// header (whether it filled the piece, the CRC-32C of each chunk of at most `chunk_bytes`, and
// what its bytes prove against the registered digest: client/verify/tensor_proof.h, taken by
// the receivers as theirs once every CRC matched), then the chunks, each straight from and into the tensors'
// memory where the group's collectives take them (through a chunk-sized buffer there otherwise). Every member
// starts these collectives without waiting, at most `in_flight_chunks` ahead, so a reader sends a piece as
// soon as it is read while it reads the next. A receiver keeps a piece only when every chunk matches its CRC;
// a piece its reader failed, a chunk that does not match, and everything of a group after a collective that
// failed or timed out (a reader that died) are read from storage instead (ExchangeOutcome::read_yourself): no
// rank waits longer than `timeout` on any one collective, and none returns with a collective still in flight.
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
#include "client/read/fill.h"
#include "planner/plan/fanout.h"
#include "planner/plan/plan.h"

namespace c10d {
class Store;
class ProcessGroup;
}  // namespace c10d

namespace metaload {

// The job's rendezvous store (client/verify/rendezvous.h, which this header leaves out: c10d's
// Gloo headers stay in the units that use them).
using RendezvousStore = c10::intrusive_ptr<c10d::Store>;

// The process group a fan-out group runs over: member k of `members` (ascending global ranks)
// is its rank k. Called for this rank's groups one after another, in ascending order.
using FanoutGroupFn = std::function<absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>>(
    int group, const std::vector<int>& members)>;

// The one group of the job the plan-driven fan-out runs down chains on
// (client/load/fanout_chain.h): member k is global rank k.
using FanoutJobFn = std::function<absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>>()>;

struct FanoutSettings {
  // The plan-driven load (`metactl load`, metaload.load()): one Gloo group of the job, its pairs
  // connected on first use (GlooFanoutJob), the pieces relayed down chains on it. Called once,
  // only when this rank has pieces to share. When set, `groups` is not used.
  FanoutJobFn job;
  // The Python package's materialize: the user's own replica groups, each piece broadcast over
  // the group of its holders. Called only when this rank has pieces to share.
  FanoutGroupFn groups;
  // Where the groups' collectives take their tensors: the CPU for Gloo, a GPU for NCCL. Pieces
  // elsewhere travel through a chunk-sized buffer there.
  at::Device device = at::kCPU;
  // How many groups run side by side (each on a thread of its own). The user's NCCL groups
  // take one at a time: their collectives on several threads could meet in different orders.
  size_t max_group_threads = 8;
  // Before any byte moves, the members of each group check (one all-reduce) that they hold the
  // same pieces in the same order (RankFanout::item_identity): a group that does not agree
  // fans out nothing, and its receivers read. The plan-driven load agrees by its plan digest.
  bool agree = false;
  absl::Duration timeout = absl::Seconds(60);  // the longest any one collective may wait
  uint64_t chunk_bytes = uint64_t{4} << 20;    // one collective's share of a piece
  int64_t in_flight_chunks = 4;                // chunks started before the oldest is waited for
  // Tests only (METALOAD_FANOUT_TEST_KILL_AFTER_CHUNKS): the reader SIGKILLs itself after
  // sending this many chunks, to prove that its group finishes from storage. 0: never.
  int64_t kill_after_chunks = 0;
  // Tests only (METALOAD_FANOUT_TEST_STALL_AFTER_CHUNKS; chains only): the reader stops for
  // 1.5 × `timeout` once after sending this many chunks, as a rank that hangs, then goes on.
  int64_t stall_after_chunks = 0;
  // What each piece that arrives intact is counted into (client/read/progress_meter.h); null:
  // nothing. FillWithFanout sets it from its ReadSettings.
  ProgressMeter* meter = nullptr;
};

// This rank's part of the plan's fan-out.
struct RankFanout {
  int rank = 0;
  FanoutPart part;  // piece_of_item: this rank's items, the piece each is (into part.pieces), or -1
  // What each item is, for FanoutSettings::agree ("model.norm.weight [64] bf16"); may be empty.
  std::vector<std::string> item_identity;

  // Whether item `i` of this rank comes from another rank.
  bool Receives(size_t i) const;
};

// The fan-out of this rank's plan `own` (one rank's part of a plan), from `part`: what the
// coordinator assigned once for the whole plan and sent with the rank's plan (GetPlan with
// fanout, Assignment::fanout: daemon/plans/plan_fanout.h; each rank is sent only its part),
// taken over, not copied. nullopt when nothing is shared (RankMayShare: the plan's
// shape says so, one replica and no whole tensor in a group), or when no part came with the
// plan (a line in `notes` says so; the rank then reads everything itself).
std::optional<RankFanout> PlanRankFanout(const Plan& own, std::optional<FanoutPart> part,
                                         std::vector<std::string>* notes);

// The fan-out of a rank that knows only what it holds and its groups (the Python package: the
// user's replica groups), by AssignWithinGroups' rule (planner/plan/fanout.h); the part's group
// ids index `groups`.
absl::StatusOr<RankFanout> RankFanoutWithinGroups(int rank, const std::vector<std::vector<int>>& groups,
                                                  const std::vector<HeldPiece>& items);

struct ExchangeOutcome {
  std::vector<size_t> read_yourself;  // items this rank must still read from storage
  uint64_t received_bytes = 0;        // bytes that arrived intact from other ranks
  uint64_t sent_bytes = 0;            // bytes this rank sent (each piece once per receiver)
  std::vector<std::string> notes;     // "fan-out group 0-3 failed at piece 4 of 9 ...: read from storage"
};

// Blocks until item `i`, a piece this rank reads, has been read; its result (filled, digest).
using AwaitReadFn = std::function<FillResult(size_t item)>;

// The fan-out group of the plan-driven load: one Gloo group of the job's `world` ranks on the
// job's store (connected when first asked for; its pairs when first used, so that a rank
// connects to its chain neighbours only), kept for the settings' life.
FanoutJobFn GlooFanoutJob(std::function<absl::StatusOr<RendezvousStore>()> store, int rank, int world,
                          absl::Duration timeout);

// The items this rank reads for others, in the plan's order (each group sends its own in it).
std::vector<size_t> SendOrder(const RankFanout& fan);

// Sends the pieces this rank reads and receives the others: down chains on settings.job when set
// (client/load/fanout_chain.h), else by broadcast over settings.groups, its groups side by side
// (each on a thread of its own, at most settings.max_group_threads at once). `tensors[i]` is
// item i's destination (contiguous); `await_read` is asked for each piece this rank sends before
// it is sent; `received[i]` is written (filled, provenance "fanout:rank N", digest) for each
// piece that arrives intact, and nothing else of it.
// `received`: one per item, each with its proof as every member makes it alike
// (ProofTemplate of its stored tensor, or none): what sizes the pieces' headers.
ExchangeOutcome ExchangePieces(const RankFanout& fan, const FanoutSettings& settings,
                               const std::vector<at::Tensor>& tensors, const AwaitReadFn& await_read,
                               std::vector<FillResult>& received);

}  // namespace metaload

#endif  // METALOAD_CLIENT_LOAD_FANOUT_H_
