#include "client/read/registered_file.h"

#include "util/fs/file_stamp.h"

namespace metaload {

absl::Status CheckDirectSource(const absl::StatusOr<const RandomAccessFile*>& opened, const FileRoute& route,
                               const std::string& model) {
  if (!opened.ok()) return opened.status();
  return CheckUnchangedSinceRegistration((*opened)->path(), StampOf(**opened), route.registered, model);
}

}  // namespace metaload
