// Between the public facade's types (include/metaload/) and the rank library's own: the
// conversions every facade file needs, in one place. Options are validated here, at the edge,
// as metactl's flags and the Python package's arguments are.
//
//   ML_ASSIGN_OR_RETURN(ReadSettings read, ToReadSettings(options.read));
//   TensorResult result = ToTensorResult(fill_result);
//
// Thread-safety: pure functions.
#ifndef METALOAD_CLIENT_API_CONVERT_H_
#define METALOAD_CLIENT_API_CONVERT_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "client/read/fill.h"
#include "metaload/materialize.h"
#include "planner/skeleton/init_policy.h"

namespace metaload {

// InvalidArgument for read_threads outside 1..64, a timeout not in (0, 7 days], or a
// progress_interval outside 10 ms..1 min.
absl::StatusOr<ReadSettings> ToReadSettings(const ReadOptions& options);

// Unset stays unset; InvalidArgument for a policy ParseInitPolicy does not read.
absl::StatusOr<std::optional<InitPolicy>> ToInitPolicy(const std::optional<std::string>& text);

TensorResult ToTensorResult(const Provenance& provenance, bool filled, const std::string& error,
                            const std::vector<FailoverEvent>& failovers);

}  // namespace metaload

#endif  // METALOAD_CLIENT_API_CONVERT_H_
