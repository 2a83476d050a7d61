// Turns a RegisterModel request into a ModelRecord on the daemon that received it: the
// checkpoint must be under this daemon's roots; its safetensors headers are read (never the
// data); the skeleton is the one given, or derived from the checkpoint; and a model in
// which some tensor would stay on meta is refused, naming every such tensor.
#ifndef METALOAD_DAEMON_REGISTRAR_H_
#define METALOAD_DAEMON_REGISTRAR_H_

#include "absl/status/statusor.h"
#include "daemon/node_config.h"
#include "planner/skeleton.h"
#include "proto/metaload.grpc.pb.h"

namespace metaload {

struct Registration {
  v1::ModelRecord record;
  Skeleton skeleton;
};

// InvalidArgument (bad name or skeleton), NotFound (no checkpoint), PermissionDenied (outside
// the roots), FailedPrecondition (tensors would stay on meta).
absl::StatusOr<Registration> PrepareRegistration(const v1::RegisterModelRequest& request, const NodeConfig& config);

}  // namespace metaload

#endif  // METALOAD_DAEMON_REGISTRAR_H_
