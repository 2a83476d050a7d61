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
// when some rank read stored tensors (RankReport::proofs), the proofs' table (one slot a stored
// tensor: every rank adds its tiles' terms, tensor_proof.h) and the headers again, with what
// the table showed each rank; then, only when some rank has findings or unproven tensors, the
// details and a last sum every rank waits for before it returns (so that none tears its group
// down while another still reads).
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
// Sums `data` element-wise as 64-bit integers (the proofs' table: its lanes are summed exactly,
// then taken mod 2^16).
using SumInt64Fn = std::function<absl::Status(absl::Span<int64_t> data, const std::string& what)>;

struct ExchangeSums {
  SumBytesFn bytes;
  SumInt64Fn int64;
};

// The most the proofs' table may take (slots x lanes x 8 bytes): past it, no stored tensor's
// content is checked, and the outcome says so. 8,192 stored tensors with strong digests, 2.4
// million with fast ones.
inline constexpr uint64_t kMaxProofTableBytes = uint64_t{128} << 20;

// InvalidArgument for a rank outside [0, world) or a world outside [1, 2^20]; a failed or
// timed-out sum's error as it is. One process alone (world 1) needs no sums.
absl::StatusOr<VerifyOutcome> ExchangeReports(RankReport mine, int rank, int world, const ExchangeSums& sums);

}  // namespace metaload

#endif  // METALOAD_CLIENT_VERIFY_EXCHANGE_H_
