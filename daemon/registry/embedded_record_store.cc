#include "daemon/registry/embedded_record_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "util/fs/file_io.h"
#include "util/hash/sha256.h"
#include "util/identifiers.h"
#include "util/log.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

constexpr char kRecordSuffix[] = ".pb";
constexpr char kTempSuffix[] = ".tmp";

std::string Digest(absl::string_view bytes) {
  return Sha256Hex(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

// `dir`, created with mode 0700 when missing. A folder others may write to is logged: anyone
// who can write there can plant records (validated, but still models nobody registered).
absl::Status EnsureDirectory(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return ErrnoStatus(errno, absl::StrCat("creating ", dir));
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("cannot stat ", dir));
  if (!S_ISDIR(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat(dir, " is not a folder"));
  if ((st.st_mode & 022) != 0) {
    LogWarning(absl::StrCat(dir, " is writable by other users (mode ", absl::Hex(st.st_mode & 0777),
                            "); state_dir should be 0700"));
  }
  return absl::OkStatus();
}

// fsync of a folder: makes a rename or unlink in it durable.
absl::Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("opening ", dir));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  return rc == 0 ? absl::OkStatus() : ErrnoStatus(err, absl::StrCat("fsync ", dir));
}

// Writes all of `bytes` to a new `path` (mode 0600) and fsyncs it.
absl::Status WriteAndSync(const std::string& path, absl::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("creating ", path));
  absl::Status status = absl::OkStatus();
  size_t done = 0;
  while (status.ok() && done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) status = ErrnoStatus(errno, absl::StrCat("writing ", path));
    if (n > 0) done += static_cast<size_t>(n);
  }
  if (status.ok() && ::fsync(fd) != 0) status = ErrnoStatus(errno, absl::StrCat("fsync ", path));
  if (::close(fd) != 0 && status.ok()) status = ErrnoStatus(errno, absl::StrCat("closing ", path));
  return status;
}

uint64_t ReadLittleEndian64(absl::string_view bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(bytes[i]);
  return value;
}

void AppendLittleEndian64(uint64_t value, std::string* out) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

std::string EncodeModelFile(const v1::ModelRecord& record) {
  const std::string payload = record.SerializeAsString();
  std::string out(kModelFileMagic, 8);
  AppendLittleEndian64(payload.size(), &out);
  absl::StrAppend(&out, Digest(payload), payload);
  return out;
}

absl::StatusOr<v1::ModelRecord> DecodeModelFile(const std::string& bytes, const std::string& origin) {
  auto corrupt = [&](absl::string_view why) { return absl::DataLossError(absl::StrCat(origin, ": ", why)); };
  if (bytes.size() < kModelFileHeaderBytes) {
    return corrupt(
        absl::StrCat(bytes.size(), " bytes, shorter than the ", kModelFileHeaderBytes, "-byte header"));
  }
  const absl::string_view view(bytes);
  if (view.substr(0, 8) != absl::string_view(kModelFileMagic, 8)) {
    return corrupt(absl::StrCat("not a model record (magic ", QuoteForMessage(view.substr(0, 8)),
                                ", expected ", kModelFileMagic, ")"));
  }
  // Compared without adding to it: a hostile size near 2^64 must not wrap around.
  const uint64_t payload_bytes = ReadLittleEndian64(view.substr(8, 8));
  const uint64_t present_bytes = bytes.size() - kModelFileHeaderBytes;
  if (payload_bytes > kMaxModelFileBytes - kModelFileHeaderBytes) {
    return corrupt(
        absl::StrCat("payload size ", payload_bytes, " exceeds the limit of ", kMaxModelFileBytes));
  }
  if (payload_bytes != present_bytes) {
    return corrupt(absl::StrCat("header says ", payload_bytes, " payload bytes, the file holds ",
                                present_bytes,
                                payload_bytes > present_bytes ? " (truncated)" : " (trailing bytes)"));
  }
  const absl::string_view payload = view.substr(kModelFileHeaderBytes);
  if (Digest(payload) != view.substr(16, 64))
    return corrupt("SHA-256 of the payload does not match its header");
  v1::ModelRecord record;
  if (!record.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return corrupt("payload is not a ModelRecord");
  }
  return record;
}

absl::StatusOr<std::unique_ptr<EmbeddedRecordStore>> EmbeddedRecordStore::Open(const std::string& state_dir) {
  ML_RETURN_IF_ERROR(EnsureDirectory(state_dir));
  ML_RETURN_IF_ERROR(EnsureDirectory(absl::StrCat(state_dir, "/models")));
  const std::string lock_path = absl::StrCat(state_dir, "/LOCK");
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("opening ", lock_path));
  // Released by the kernel when the process dies, kill -9 included: no stale lock to clear.
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat(lock_path, " is held by another process: another metad uses state_dir ", state_dir));
    }
    return ErrnoStatus(err, absl::StrCat("locking ", lock_path));
  }
  return std::unique_ptr<EmbeddedRecordStore>(new EmbeddedRecordStore(state_dir, fd));
}

EmbeddedRecordStore::EmbeddedRecordStore(std::string state_dir, int lock_fd)
    : state_dir_(std::move(state_dir)), models_dir_(absl::StrCat(state_dir_, "/models")), lock_fd_(lock_fd) {}

EmbeddedRecordStore::~EmbeddedRecordStore() { ::close(lock_fd_); }

std::string EmbeddedRecordStore::Describe() const { return absl::StrCat("state_dir ", state_dir_); }

std::string EmbeddedRecordStore::PathOf(const std::string& name) const {
  return absl::StrCat(models_dir_, "/", name, kRecordSuffix);
}

absl::StatusOr<StoredModels> EmbeddedRecordStore::Load() {
  std::vector<std::string> entries;
  {
    DIR* dir = ::opendir(models_dir_.c_str());
    if (dir == nullptr) return ErrnoStatus(errno, absl::StrCat("listing ", models_dir_));
    while (const dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] != '.') entries.emplace_back(entry->d_name);
    }
    ::closedir(dir);
  }
  std::sort(entries.begin(), entries.end());
  StoredModels out;
  for (const std::string& entry : entries) {
    const std::string path = absl::StrCat(models_dir_, "/", entry);
    if (absl::EndsWith(entry, kTempSuffix)) {
      // A write that a crash interrupted before its rename: the model's previous file stands.
      LogWarning(absl::StrCat("removing ", path, ", left by an interrupted write"));
      if (::unlink(path.c_str()) != 0)
        LogWarning(ErrnoStatus(errno, absl::StrCat("removing ", path)).message());
      continue;
    }
    if (!absl::EndsWith(entry, kRecordSuffix)) {
      out.skipped.push_back(absl::DataLossError(
          absl::StrCat(path, ": not a model record file (no ", kRecordSuffix, " suffix)")));
      continue;
    }
    absl::StatusOr<std::string> bytes = ReadSmallFile(path, kMaxModelFileBytes, "model record");
    if (!bytes.ok()) {
      out.skipped.push_back(bytes.status());
      continue;
    }
    absl::StatusOr<v1::ModelRecord> record = DecodeModelFile(*bytes, path);
    if (!record.ok()) {
      out.skipped.push_back(record.status());
      continue;
    }
    // The file's name is what Remove deletes: a record under another name could never be removed.
    const std::string stem = entry.substr(0, entry.size() - std::strlen(kRecordSuffix));
    if (record->name() != stem) {
      out.skipped.push_back(absl::DataLossError(absl::StrCat(
          path, ": holds model ", QuoteForMessage(record->name()), ", not ", QuoteForMessage(stem))));
      continue;
    }
    out.records.push_back(StoredRecord{path, *std::move(record)});
  }
  return out;
}

absl::Status EmbeddedRecordStore::Put(const v1::ModelRecord& record) {
  ML_RETURN_IF_ERROR(CheckName("model name", record.name()));  // it becomes a file name
  const std::string path = PathOf(record.name());
  const std::string temp = absl::StrCat(path, kTempSuffix);
  if (absl::Status written = WriteAndSync(temp, EncodeModelFile(record)); !written.ok()) {
    ::unlink(temp.c_str());
    return written;
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    absl::Status renamed = ErrnoStatus(errno, absl::StrCat("renaming ", temp, " to ", path));
    ::unlink(temp.c_str());
    return renamed;
  }
  return SyncDirectory(models_dir_);
}

absl::Status EmbeddedRecordStore::Remove(const std::string& name) {
  ML_RETURN_IF_ERROR(CheckName("model name", name));
  const std::string path = PathOf(name);
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus(errno, absl::StrCat("removing ", path));
  }
  return SyncDirectory(models_dir_);
}

}  // namespace metaload
