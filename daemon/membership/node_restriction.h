// What a member may publish (issue 35), as Kubernetes' Node authorizer limits a kubelet to its
// own Node and Pods: a daemon's member credential publishes only models registered on its own
// node — the name bound to that credential (membership.h) — from folders under the roots that
// node joined with. Whether it may change a model already held is the registry's rule
// (RecordOrigin::kMemberPublish, model_registry.h): only one registered on the same node.
// An admin's PublishModel (a node agent forwarding `--replace`) is not restricted; neither is
// a caller on a daemon without credentials, which holds every role.
//
//   ML_RETURN_IF_ERROR(CheckMemberPublication(record, caller.identity, members.Bound(record.registered_on)));
//
// Pure functions; no state.
#ifndef METALOAD_DAEMON_MEMBERSHIP_NODE_RESTRICTION_H_
#define METALOAD_DAEMON_MEMBERSHIP_NODE_RESTRICTION_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "planner/plan/cluster.h"
#include "proto/model_record.h"

namespace metaload {

// A member name and whose it is: the identity that joined under it and the node it announced.
struct BoundMember {
  std::string identity;
  NodeSpec node;
};

// OK when `record` may be published by `identity` holding the member role: `bound` (what the
// membership says of record.registered_on; nullopt when no member has the name, or it is the
// coordinator's own) was joined by `identity`, and the record's folder lies under one of that
// node's roots. PermissionDenied naming the model, the node and what is wrong otherwise.
absl::Status CheckMemberPublication(const ModelRecord& record, absl::string_view identity,
                                    const std::optional<BoundMember>& bound);

}  // namespace metaload

#endif  // METALOAD_DAEMON_MEMBERSHIP_NODE_RESTRICTION_H_
