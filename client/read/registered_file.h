// The check a rank makes before reading a checkpoint file directly: the file it opened is the
// one that was registered (same size and mtime), else the read would take tensors from the
// registered offsets of other bytes (docs/integrity.md). Streams are checked by the daemon.
#ifndef METALOAD_CLIENT_READ_REGISTERED_FILE_H_
#define METALOAD_CLIENT_READ_REGISTERED_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "client/read/daemon_client.h"
#include "util/fs/file_system.h"

namespace metaload {

// `opened`'s error as it is; FailedPrecondition "<path> changed since it was registered: ..."
// when the file differs from `route.registered` (the fix names `model`); OK when it matches or
// nothing was recorded.
absl::Status CheckDirectSource(const absl::StatusOr<const RandomAccessFile*>& opened, const FileRoute& route,
                               const std::string& model);

}  // namespace metaload

#endif  // METALOAD_CLIENT_READ_REGISTERED_FILE_H_
