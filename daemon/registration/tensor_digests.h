// Per-tensor digests at registration (`metactl register`, docs/integrity.md): every stored
// tensor's bytes read once and its tile digest recorded (planner/format/checkpoint_digests.h),
// so that ranks holding any part of it can prove the bytes they load are the ones registered,
// whatever happened to the file's mtime.
//
//   ML_RETURN_IF_ERROR(RecordTensorDigests(checkpoint, "llama", DigestKind::kFast,
//                                          {FileSystem::ByScheme(), &config.roots}, should_stop, &record));
//
// Runs on the daemon's io queue (never on a gRPC thread): it reads the whole checkpoint.
#ifndef METALOAD_DAEMON_REGISTRATION_TENSOR_DIGESTS_H_
#define METALOAD_DAEMON_REGISTRATION_TENSOR_DIGESTS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "planner/format/checkpoint.h"
#include "proto/metaload.pb.h"
#include "util/fs/file_system.h"
#include "util/hash/tile_digest.h"

namespace metaload {

// Where the digests' reads go: `file_system`, only files under `roots` (canonical), opened as
// ReadRange opens them (FileSystem::OpenUnderRoots), so a digest is never of a file outside them.
struct DigestFiles {
  FileSystem* file_system;
  const std::vector<std::string>* roots;
  bool same_device = false;
};

// Reads each file of `checkpoint` (through `files`) sequentially, once, in large blocks, and sets
// `digest` of every tensor of `record` (REQUIRES: record->tensors() are checkpoint.tensors, in order, and
// record->file_stats() were taken before). Logs progress for large models, under
// `model_name`. Then the files are stated again: one changed while it was read is refused
// with Unavailable (try again), as a layout that moved is. Cancelled when `should_stop`
// (may be empty) turns true: the caller gave up, or the daemon is stopping.
absl::Status RecordTensorDigests(const Checkpoint& checkpoint, absl::string_view model_name, DigestKind kind,
                                 const DigestFiles& files, const std::function<bool()>& should_stop,
                                 v1::ModelRecord* record);

}  // namespace metaload

#endif  // METALOAD_DAEMON_REGISTRATION_TENSOR_DIGESTS_H_
