// Every tensor's tile digest (util/hash/tile_digest.h) from one sequential read of a
// checkpoint's files: what a daemon records at registration and what `metactl digest` writes
// beside a folder (digest_manifest.h). One pass a file, in large blocks, each tensor's bytes
// hashed as they go by.
//
//   ML_ASSIGN_OR_RETURN(std::vector<TensorDigest> digests,
//                       DigestCheckpoint(checkpoint, DigestKind::kFast, Storage(), {}));
//
// Thread-safety: reentrant.
#ifndef METALOAD_PLANNER_FORMAT_CHECKPOINT_DIGESTS_H_
#define METALOAD_PLANNER_FORMAT_CHECKPOINT_DIGESTS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/format/checkpoint.h"
#include "util/fs/file_stamp.h"
#include "util/fs/storage.h"
#include "util/hash/tile_digest.h"

namespace metaload {

struct DigestPassOptions {
  // Asked between blocks; true: Cancelled (the caller gave up, a daemon is stopping). May be empty.
  std::function<bool()> should_stop;
  // Told after each block: its bytes and the file it came from (a daemon logs progress). May be empty.
  std::function<void(uint64_t bytes, const std::string& file)> on_bytes;
  // Files as they must still be (by relative name): a file opened with another stamp (size and
  // mtime; device, inode and ctime where recorded: the same host stamped them), or that has one
  // after the pass, is Unavailable ("changed while its digests were computed").
  std::map<std::string, FileStamp> expected;
};

// One digest per checkpoint.tensors, in order. Errors name the tensor and the file.
absl::StatusOr<std::vector<TensorDigest>> DigestCheckpoint(const Checkpoint& checkpoint, DigestKind kind,
                                                           const Storage& storage,
                                                           const DigestPassOptions& options);

}  // namespace metaload

#endif  // METALOAD_PLANNER_FORMAT_CHECKPOINT_DIGESTS_H_
