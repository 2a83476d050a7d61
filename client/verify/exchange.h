// The exchange of rank reports: after a load (or before one, when materialize refuses), every
// rank hands in its RankReport (client/verify/rank_report.h) and every rank gets back the same
// VerifyOutcome (client/verify/outcome.h), naming the same tensors and ranks. metactl load,
// the library's VerifyAcrossRanks and the Python package's verify() all run this one protocol,
// over whatever carries their bytes: a c10d process group (client/verify/group_sum.h: the
// user's own, or the Gloo group metactl makes), or NCCL directly.
//
//   ML_ASSIGN_OR_RETURN(VerifyOutcome outcome, ExchangeReports(mine, rank, world, sum));
//   if (!outcome.ok()) return MetaTensorError(outcome.Message(world));
//
// Collective: every rank of the group calls it, with the same world size. Rounds: the headers;
// then, only when some rank has findings, the details and a last sum every rank waits for
// before it returns (so that none tears its group down while another still reads).
//
// Thread-safety: a plain function; `sum` is called on the calling thread.
#ifndef METALOAD_CLIENT_VERIFY_EXCHANGE_H_
#define METALOAD_CLIENT_VERIFY_EXCHANGE_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/verify/outcome.h"
#include "client/verify/rank_report.h"

namespace metaload {

// Sums `data` byte-wise over every rank of the group, in place; `what` names the collective in
// errors ("verification's all-reduce"). Every rank passes the same length.
using SumBytesFn = std::function<absl::Status(absl::Span<uint8_t> data, const std::string& what)>;

// InvalidArgument for a rank outside [0, world) or a world outside [1, 2^20]; a failed or
// timed-out sum's error as it is. One process alone (world 1) needs no `sum`.
absl::StatusOr<VerifyOutcome> ExchangeReports(RankReport mine, int rank, int world, const SumBytesFn& sum);

}  // namespace metaload

#endif  // METALOAD_CLIENT_VERIFY_EXCHANGE_H_
