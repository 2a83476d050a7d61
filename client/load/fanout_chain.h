// Fan-out down chains on one process group of the job (`metactl load` and metaload.load(): the
// plan-driven load). Each shared piece travels from its reader through its other holders one
// after another, chunk by chunk: the chain is the piece's group in ascending rank order, begun
// at the reader and wrapped around, so that it enters each node once (a node's ranks are
// consecutive) and a node's link carries each piece once in and at most once out, however many
// nodes hold it. Every hop is a point-to-point send on the one group, whose pairs connect on
// first use: a rank talks to its chain neighbours only (its node-mates and the first rank of
// the next node), never to the whole job, and no group is made per set of holders.
//
//   ExchangeOutcome x = ExchangeDownChains(fan, settings, tensors, await_read, received);
//
// Each rank posts its receives (and, as reader, its sends) in the assignment's piece order, at
// most settings.in_flight_chunks chunks ahead, into buffers of its own (never into a tensor it
// may later read from storage), and waits for them in that order; a chunk that arrived is checked
// against its CRC-32C, copied into its tensor and sent on to the next holder. A neighbour gone
// (its pair closed) ends the pieces that pass it: they are read from storage; what a rank still
// forwards after its upstream failed carries a header that says so, or chunks that do not match
// it, so no one downstream waits for it. A wait that times out closes every pair of the group
// (Gloo's TCP transport does so): the rank's fan-out ends, and the rest is read from storage.
//
// Thread-safety: one exchange per rank at a time, on the calling thread.
#ifndef METALOAD_CLIENT_LOAD_FANOUT_CHAIN_H_
#define METALOAD_CLIENT_LOAD_FANOUT_CHAIN_H_

#include <torch/types.h>

#include <vector>

#include "client/load/fanout.h"

namespace metaload {

// ExchangePieces (client/load/fanout.h) when settings.job is set.
ExchangeOutcome ExchangeDownChains(const RankFanout& fan, const FanoutSettings& settings,
                                   const std::vector<at::Tensor>& tensors, const AwaitReadFn& await_read,
                                   std::vector<FillResult>& received);

}  // namespace metaload

#endif  // METALOAD_CLIENT_LOAD_FANOUT_CHAIN_H_
