// Turns a RegisterModel request into a ModelRecord on the daemon that received it: the
// checkpoint must be under this daemon's roots; its safetensors headers are read (never the
// data); the skeleton is the one given, else the checkpoint's own (planner/skeleton/hf/checkpoint_skeleton.h:
// from the folder's config.json when it has a supported one, else derived); and a model in
// which some tensor would stay on meta is refused, naming every such tensor. With `digest`, every
// tensor's bytes are then read once and their XXH3-64 recorded (tensor_digests.h). The tensors'
// bytes are read through a FileSystem (util/fs/file_system.h: the daemon's, which tests
// replace); the safetensors headers through the planner's own reader
// (planner/format/checkpoint.h), whose stamps of the files, taken as each header was read, are
// the file stats recorded.
#ifndef METALOAD_DAEMON_REGISTRATION_REGISTRAR_H_
#define METALOAD_DAEMON_REGISTRATION_REGISTRAR_H_

#include <functional>

#include "absl/status/statusor.h"
#include "daemon/config/node_config.h"
#include "planner/format/checkpoint.h"
#include "planner/skeleton/skeleton.h"
#include "proto/metaload.grpc.pb.h"
#include "util/fs/file_system.h"
#include "util/hash/tile_digest.h"

namespace metaload {

struct Registration {
  v1::ModelRecord record;
  Skeleton skeleton;
  // --no-strict: the checkpoint tensors the skeleton has no place for (not loaded), in
  // checkpoint order.
  std::vector<std::string> not_loaded;
  // The checkpoint as its headers were read: what AddTensorDigests reads.
  Checkpoint checkpoint;
  // What AddTensorDigests records: the request's kind (fast unless it asked for strong).
  DigestKind digest_kind = DigestKind::kFast;
};

// InvalidArgument (bad name or skeleton, or a malformed config.json beside the checkpoint),
// NotFound (no checkpoint), PermissionDenied (outside the roots), FailedPrecondition (tensors
// would stay on meta, or — unless allow_unexpected — the checkpoint holds tensors the skeleton
// has no place for; planner/doctor/admission.h); with `digest`, Unavailable (a file changed meanwhile) and
// Cancelled
// (`should_stop`, which may be empty, turned true while reading).
absl::StatusOr<Registration> PrepareRegistration(const v1::RegisterModelRequest& request,
                                                 const NodeConfig& config, FileSystem* file_system,
                                                 const std::function<bool()>& should_stop = {});
// Its two steps, which a daemon runs on separate queues (a registration reading headers must
// not wait behind another hashing a whole checkpoint): the headers only, whatever `digest`
// says; then, for `digest`, every tensor's XXH3-64 into `registration`'s record.
// Every header, index and config.json through `file_system` (null: by the location's scheme),
// beneath the roots.
absl::StatusOr<Registration> ReadRegistrationHeaders(const v1::RegisterModelRequest& request,
                                                     const NodeConfig& config,
                                                     FileSystem* file_system = nullptr);
absl::Status AddTensorDigests(const NodeConfig& config, FileSystem* file_system,
                              const std::function<bool()>& should_stop, Registration& registration);

// The warning a refused registration of `name` leaves in the log, wherever it was refused (read
// here, or recorded by the coordinator).
void LogRegistrationRefused(const std::string& name, const absl::Status& refused);

// For a record read back from the registry at start and registered on this node: its files
// are still there, under this daemon's roots (which may have changed since), each at least as
// long as the tensors it holds. NotFound / PermissionDenied naming the file; DataLoss for a
// file now shorter than a tensor's end. (Records from other nodes name files this node may
// not see: the ranks find out, as for any registration.)
absl::Status CheckRecordFiles(const v1::ModelRecord& record, const NodeConfig& config,
                              FileSystem* file_system);

}  // namespace metaload

#endif  // METALOAD_DAEMON_REGISTRATION_REGISTRAR_H_
