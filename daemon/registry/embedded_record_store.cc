#include "daemon/registry/embedded_record_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "util/fs/file_io.h"
#include "util/fs/storage.h"
#include "util/hash/sha256.h"
#include "util/identifiers.h"
#include "util/log.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

constexpr char kRecordSuffix[] = ".pb";
constexpr char kIdentitySuffix[] = ".id";
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

// `bytes` as the file `path` in `dir`, whole or not at all, durably: written to a temporary file
// beside it, fsynced, renamed over it, the folder fsynced.
absl::Status WriteDurably(const std::string& dir, const std::string& path, absl::string_view bytes) {
  const std::string temp = absl::StrCat(path, kTempSuffix);
  if (absl::Status written = WriteAndSync(temp, bytes); !written.ok()) {
    ::unlink(temp.c_str());
    return written;
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    absl::Status renamed = ErrnoStatus(errno, absl::StrCat("renaming ", temp, " to ", path));
    ::unlink(temp.c_str());
    return renamed;
  }
  return SyncDirectory(dir);
}

// Removes `path` in `dir` durably; OK when there was none.
absl::Status RemoveDurably(const std::string& dir, const std::string& path) {
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus(errno, absl::StrCat("removing ", path));
  }
  return SyncDirectory(dir);
}

// The entries of `dir`, sorted, without the temporary files an interrupted write left (removed:
// the previous file stands).
absl::StatusOr<std::vector<std::string>> ListEntries(const std::string& dir) {
  std::vector<std::string> entries;
  DIR* listing = ::opendir(dir.c_str());
  if (listing == nullptr) return ErrnoStatus(errno, absl::StrCat("listing ", dir));
  while (const dirent* entry = ::readdir(listing)) {
    if (entry->d_name[0] != '.') entries.emplace_back(entry->d_name);
  }
  ::closedir(listing);
  std::sort(entries.begin(), entries.end());
  std::vector<std::string> out;
  for (std::string& entry : entries) {
    if (!absl::EndsWith(entry, kTempSuffix)) {
      out.push_back(std::move(entry));
      continue;
    }
    const std::string path = absl::StrCat(dir, "/", entry);
    LogWarning(absl::StrCat("removing ", path, ", left by an interrupted write"));
    if (::unlink(path.c_str()) != 0)
      LogWarning(ErrnoStatus(errno, absl::StrCat("removing ", path)).message());
  }
  return out;
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
  ML_RETURN_IF_ERROR(EnsureDirectory(absl::StrCat(state_dir, "/members")));
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
    : state_dir_(std::move(state_dir)),
      models_dir_(absl::StrCat(state_dir_, "/models")),
      members_dir_(absl::StrCat(state_dir_, "/members")),
      lock_fd_(lock_fd) {}

EmbeddedRecordStore::~EmbeddedRecordStore() { ::close(lock_fd_); }

std::string EmbeddedRecordStore::Describe() const { return absl::StrCat("state_dir ", state_dir_); }

std::string EmbeddedRecordStore::PathOf(const std::string& name) const {
  return absl::StrCat(models_dir_, "/", name, kRecordSuffix);
}

std::string EmbeddedRecordStore::BindingPathOf(const std::string& name) const {
  return absl::StrCat(members_dir_, "/", name, kIdentitySuffix);
}

absl::StatusOr<StoredModels> EmbeddedRecordStore::Load() {
  ML_ASSIGN_OR_RETURN(const std::vector<std::string> entries, ListEntries(models_dir_));
  StoredModels out;
  for (const std::string& entry : entries) {
    const std::string path = absl::StrCat(models_dir_, "/", entry);
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
  return WriteDurably(models_dir_, PathOf(record.name()), EncodeModelFile(record));
}

absl::Status EmbeddedRecordStore::Remove(const std::string& name) {
  ML_RETURN_IF_ERROR(CheckName("model name", name));
  return RemoveDurably(models_dir_, PathOf(name));
}

absl::StatusOr<StoredBindings> EmbeddedRecordStore::LoadBindings() {
  ML_ASSIGN_OR_RETURN(const std::vector<std::string> entries, ListEntries(members_dir_));
  StoredBindings out;
  for (const std::string& entry : entries) {
    const std::string path = absl::StrCat(members_dir_, "/", entry);
    absl::string_view name = entry;
    if (!absl::ConsumeSuffix(&name, kIdentitySuffix) || !CheckName("node name", name).ok()) {
      out.skipped.push_back(absl::DataLossError(
          absl::StrCat(path, ": not a member binding (<node name>", kIdentitySuffix, ")")));
      continue;
    }
    absl::StatusOr<std::string> bytes = ReadSmallFile(path, kMaxIdentityFileBytes, "member binding");
    if (!bytes.ok()) {
      out.skipped.push_back(bytes.status());
      continue;
    }
    // One line, an identity as PutBinding wrote it: what Authenticate names a caller with.
    absl::string_view identity(*bytes);
    if (!absl::ConsumeSuffix(&identity, "\n") || !CheckIdentity("identity", identity).ok()) {
      out.skipped.push_back(absl::DataLossError(
          absl::StrCat(path, ": not one line of printable ASCII (an identity, util/identifiers.h)")));
      continue;
    }
    out.bindings.push_back(MemberBinding{std::string(name), std::string(identity)});
  }
  return out;
}

absl::Status EmbeddedRecordStore::PutBinding(const MemberBinding& binding) {
  ML_RETURN_IF_ERROR(CheckName("node name", binding.name));  // it becomes a file name
  // What LoadBindings would not read back is not written (issue 35: "token:member:node b.token").
  ML_RETURN_IF_ERROR(CheckIdentity(absl::StrCat("the identity of node ", binding.name), binding.identity));
  return WriteDurably(members_dir_, BindingPathOf(binding.name), absl::StrCat(binding.identity, "\n"));
}

absl::Status EmbeddedRecordStore::RemoveBinding(const std::string& name) {
  ML_RETURN_IF_ERROR(CheckName("node name", name));
  return RemoveDurably(members_dir_, BindingPathOf(name));
}

}  // namespace metaload
