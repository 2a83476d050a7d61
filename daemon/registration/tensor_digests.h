// Per-tensor digests at registration (`metactl register --digest`, docs/integrity.md): every
// stored tensor's bytes read once and hashed with XXH3-64 (util/hash/xxh3.h), so that ranks can
// prove the bytes they load are the ones registered, whatever happened to the file's mtime.
//
//   ML_RETURN_IF_ERROR(RecordTensorDigests(checkpoint, "llama", {FileSystem::Default(), &config.roots},
//                                          should_stop, &record));
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

namespace metaload {

// Where the digests' reads go: `file_system`, only files under `roots` (canonical), opened as
// ReadRange opens them (FileSystem::OpenUnderRoots), so a digest is never of a file outside them.
struct DigestFiles {
  FileSystem* file_system;
  const std::vector<std::string>* roots;
  bool same_device = false;
};

// Reads each file of `checkpoint` (through `files`) sequentially, once, in large blocks, and sets
// `xxh3` of every tensor of `record` (REQUIRES: record->tensors() are checkpoint.tensors, in order, and
// record->file_stats() were taken before). Logs progress for large models, under
// `model_name`. Then the files are stated again: one changed while it was read is refused
// with Unavailable (try again), as a layout that moved is. Cancelled when `should_stop`
// (may be empty) turns true: the caller gave up, or the daemon is stopping.
absl::Status RecordTensorDigests(const Checkpoint& checkpoint, absl::string_view model_name,
                                 const DigestFiles& files, const std::function<bool()>& should_stop,
                                 v1::ModelRecord* record);

}  // namespace metaload

#endif  // METALOAD_DAEMON_REGISTRATION_TENSOR_DIGESTS_H_
