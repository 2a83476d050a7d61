// Filling with fan-out: what `metactl load` and the Python package's materialize both run when
// ranks hold the same bytes (client/load/fanout.h). The exchange runs on a thread of its own
// while this one reads, in batches: first what this rank sends, in the order it sends it, in
// parts of a sixteenth of those bytes (at least 64 MiB), each piece sent as soon as it is read;
// then everything this rank reads for itself alone; then what did not arrive intact.
// Tied aliases take their tensor's final outcome.
//
// Thread-safety: one call per rank at a time.
#ifndef METALOAD_CLIENT_LOAD_FANOUT_FILL_H_
#define METALOAD_CLIENT_LOAD_FANOUT_FILL_H_

#include <vector>

#include "absl/status/statusor.h"
#include "client/load/fanout.h"
#include "client/read/fill.h"
#include "client/resolve/materialize.h"
#include "client/resolve/resolver.h"

namespace metaload {

// FillResolved's result for every request, with what arrived by fan-out in place of a read;
// *exchanged: the bytes received and sent and the notes (its read_yourself already read).
absl::StatusOr<FillOutcome> FillWithFanout(const RankFanout& fan, const FanoutSettings& settings,
                                           const ModelView& view, std::vector<MaterializeRequest>& requests,
                                           const std::vector<Resolution>& plan, const InitPolicy& init,
                                           const ReadSettings& read, ExchangeOutcome* exchanged);

}  // namespace metaload

#endif  // METALOAD_CLIENT_LOAD_FANOUT_FILL_H_
