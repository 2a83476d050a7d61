// The FileSystem for "s3://bucket/key..." locations (util/fs/file_system.h), over S3Client
// (s3_client.h): an object is a file, a prefix with objects under it a folder; List lists one
// level (ListObjectsV2 with delimiter '/', every page); Open HEADs the object for its size,
// ETag and Last-Modified; ReadAt splits a large read into ranged GETs of `part_bytes`, up to
// `parallelism` at once, every part from the ETag opened (If-Match), and a daemon's stream
// (WillRead) fetches ahead of its chunks in those parts (s3_read_ahead.h); Unchanged HEADs it again
// (same ETag and size). A file's version() is its ETag, which the registration's stamp keeps
// (util/fs/file_stamp.h): an object replaced after registration is refused as a rewritten file
// is. Registered for "s3" by RegisterBuiltIns (util/fs/file_system.cc) in every process.
//
// The client is made on first use from the standard AWS chain (s3_credentials.h); a daemon
// names its credentials file first with ConfigureS3 (node config `s3_credentials_file`).
//
// Thread-safety: every method may be called from several threads at once.
#ifndef METALOAD_UTIL_FS_S3_S3_FILE_SYSTEM_H_
#define METALOAD_UTIL_FS_S3_S3_FILE_SYSTEM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "util/fs/file_system.h"
#include "util/fs/s3/s3_client.h"
#include "util/fs/s3/s3_credentials.h"
#include "util/fs/s3/s3_read_ahead.h"

namespace metaload {

struct S3FileSystemOptions {
  // Measured against moto on loopback (docs/object-storage.md): 8 MiB parts, 8 at once.
  uint64_t part_bytes = uint64_t{8} << 20;
  int parallelism = 8;
  // Requests in flight at once across every read of the process (each a connection).
  int max_connections = 64;
  // Bytes every read-ahead of the process may hold ahead of its readers (s3_read_ahead.h): a
  // daemon's streams fetch parts ahead of their 1 MiB chunks within this, plus at most one part
  // per stream a reader waits for.
  uint64_t read_ahead_bytes = uint64_t{256} << 20;
  std::string credentials_file;  // the node config's s3_credentials_file; "": the AWS chain
  S3ClientOptions client;
};

// bucket and key of "s3://bucket/key" (normalized; key "" for the bucket). InvalidArgument
// for a bucket name S3 would refuse (3-63 of a-z 0-9 . -) or a key over 1024 bytes.
struct S3Location {
  std::string bucket, key;
};
absl::StatusOr<S3Location> ParseS3Location(const std::string& location);

// Parts of [offset, offset + length) read at once: [start, size) pairs of at most part_bytes,
// in order, covering it exactly.
std::vector<std::pair<uint64_t, uint64_t>> SplitRange(uint64_t offset, uint64_t length, uint64_t part_bytes);

class S3FileSystem final : public FileSystem {
 public:
  explicit S3FileSystem(S3FileSystemOptions options = {});

  // Replaces the options; the client is made again on next use. For a daemon's start.
  void Configure(S3FileSystemOptions options);

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenUnderRoots(const std::string& path,
                                                                   const std::vector<std::string>& roots,
                                                                   bool same_device) override;
  absl::StatusOr<PathKind> KindOf(const std::string& path, bool follow_links) override;
  absl::StatusOr<std::vector<std::string>> List(const std::string& path) override;
  // The normal form; NotFound when no object is, or lies under, it.
  absl::StatusOr<std::string> Canonical(const std::string& path) override;
  // Every read a request to the bucket: ranks leave it to their node's daemon (client/read/fill.h).
  bool IsObjectStore() const override { return true; }

  // Reads [offset, offset + out.size()) of `bucket/key` at `etag` in parts, in parallel;
  // Cancelled soon after `*cancelled` turns true.
  absl::Status ReadParts(const std::string& bucket, const std::string& key, const std::string& etag,
                         uint64_t offset, absl::Span<uint8_t> out,
                         const std::atomic<bool>* cancelled = nullptr);
  S3FileSystemOptions options() const;
  // What the read-aheads of files opened from now on share.
  std::shared_ptr<ReadAheadBudget> read_ahead_budget() const;
  absl::StatusOr<std::shared_ptr<S3Client>> Client();

 private:
  mutable absl::Mutex mu_;
  S3FileSystemOptions options_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<S3Client> client_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<ReadAheadBudget> budget_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

// The one S3FileSystem of this process, serving "s3://" (registered by RegisterBuiltIns).
S3FileSystem& TheS3FileSystem();

}  // namespace metaload

#endif  // METALOAD_UTIL_FS_S3_S3_FILE_SYSTEM_H_
