#include "util/fs/storage.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/identifiers.h"
#include "util/status_macros.h"

namespace metaload {

Storage Storage::UnderRoots(const std::vector<std::string>& roots, ConfineOptions options,
                            FileSystem* file_system) {
  Storage storage;
  storage.file_system_ = file_system;
  storage.roots_ = &roots;
  storage.options_ = options;
  return storage;
}

Storage Storage::On(FileSystem* file_system) {
  Storage storage;
  storage.file_system_ = file_system;
  return storage;
}

absl::StatusOr<FileSystem*> Storage::FileSystemOf(const std::string& location) const {
  if (file_system_ != nullptr) return file_system_;
  return FileSystemFor(location);
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> Storage::Open(const std::string& location) const {
  ML_ASSIGN_OR_RETURN(FileSystem * file_system, FileSystemOf(location));
  if (roots_ != nullptr) return file_system->OpenUnderRoots(location, *roots_, options_.same_device);
  return file_system->Open(location);
}

absl::StatusOr<PathKind> Storage::KindOf(const std::string& location, bool follow_links) const {
  ML_ASSIGN_OR_RETURN(FileSystem * file_system, FileSystemOf(location));
  return file_system->KindOf(location, follow_links);
}

PathKind Storage::KindOrMissing(const std::string& location, bool follow_links) const {
  absl::StatusOr<PathKind> kind = KindOf(location, follow_links);
  return kind.ok() ? *kind : PathKind::kMissing;
}

absl::StatusOr<std::vector<std::string>> Storage::List(const std::string& location) const {
  ML_ASSIGN_OR_RETURN(FileSystem * file_system, FileSystemOf(location));
  return file_system->List(location);
}

absl::StatusOr<std::string> Storage::Canonical(const std::string& location) const {
  if (location.empty() || location.size() > kMaxPathBytes || location.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("location ", QuoteForMessage(location), " must have 1 to ",
                                                   kMaxPathBytes, " bytes and no NUL"));
  }
  ML_ASSIGN_OR_RETURN(FileSystem * file_system, FileSystemOf(location));
  ML_ASSIGN_OR_RETURN(std::string canonical, file_system->Canonical(location));
  if (roots_ == nullptr) return canonical;
  for (const std::string& root : *roots_) {
    if (IsUnderRoot(canonical, root)) return canonical;
  }
  return absl::PermissionDeniedError(absl::StrCat(QuoteForMessage(location, 512),
                                                  " is not under this daemon's roots [",
                                                  absl::StrJoin(*roots_, ", "), "]"));
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& location, uint64_t max_size_bytes,
                                          absl::string_view what, const Storage& storage) {
  ML_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, storage.Open(location));
  if (file->size_bytes() > max_size_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(location, ": ", file->size_bytes(),
                                                   " bytes is too large for a ", what, " (limit ",
                                                   max_size_bytes, ")"));
  }
  std::string text(file->size_bytes(), '\0');
  ML_RETURN_IF_ERROR(file->ReadAt(0, absl::MakeSpan(reinterpret_cast<uint8_t*>(text.data()), text.size())));
  return text;
}

}  // namespace metaload
