// Validation of the fields of every request the daemon accepts, once, at its edge: each
// handler calls these before anything else reads the request (docs/style.md habit 3). Errors are
// InvalidArgument naming the field, with echoed input cut short (util/identifiers.h).
//
// The limits bound what one request can make the daemon hold or compute: a member's roots,
// its GPU count (every plan multiplies it), a model's tensor count and a world size.
#ifndef METALOAD_DAEMON_REQUESTS_REQUEST_CHECKS_H_
#define METALOAD_DAEMON_REQUESTS_REQUEST_CHECKS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "daemon/requests/request_limits.h"
#include "planner/plan/cluster.h"  // kMaxWorldSize: a plan's ranks, also the cap on "all slots"
#include "proto/metaload.pb.h"

namespace metaload {

// A member as it joins: name, dialable address, GPU count and memory, roots (absolute, in
// normal form, at most kMaxRootsPerNode of them, kMaxRootsTotalBytes together).
absl::Status CheckNodeInfo(const v1::NodeInfo& node);

// A model as a node agent publishes it: names, an absolute normal checkpoint folder, a
// skeleton of bounded size, at most kMaxModelTensors locations each with a known dtype, a
// shape whose bytes fit 64 bits and equal its byte range, and a relative normal file name.
absl::Status CheckModelRecord(const v1::ModelRecord& record);

absl::Status CheckRegisterModelRequest(const v1::RegisterModelRequest& request);
// The world size, strategy fields and (when set) the rank; the strategy's own consistency
// (tp divides the world, ...) is the planner's to judge, on bounded numbers.
absl::Status CheckGetPlanRequest(const v1::GetPlanRequest& request);

}  // namespace metaload

#endif  // METALOAD_DAEMON_REQUESTS_REQUEST_CHECKS_H_
