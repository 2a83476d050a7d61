// Reads one object whole through the S3 back end (util/fs/s3/s3_file_system.h), the way a rank's
// direct read does — one ReadAt into one buffer — and prints what it took:
// "<bytes> bytes in <seconds> s: <MB/s> MB/s, sha256 <hex>". Part size and parallelism are the
// process's (METALOAD_S3_PART_SIZE, METALOAD_S3_PARALLELISM); a part size as large as the object
// with parallelism 1 is one GET, as `aws s3 cp` of one stream is. bench/s3_read.py runs it.
//
//   build/tests/s3_read_probe s3://bucket/key
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "util/fs/file_system.h"
#include "util/hash/sha256.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: s3_read_probe s3://bucket/key\n");
    return 2;
  }
  absl::StatusOr<metaload::FileSystem*> fs = metaload::FileSystemFor(argv[1]);
  absl::StatusOr<std::unique_ptr<metaload::RandomAccessFile>> file =
      fs.ok() ? (*fs)->Open(argv[1])
              : absl::StatusOr<std::unique_ptr<metaload::RandomAccessFile>>(fs.status());
  if (!file.ok()) {
    std::fprintf(stderr, "%s\n", std::string(file.status().message()).c_str());
    return 1;
  }
  std::vector<uint8_t> bytes((*file)->size_bytes());
  const auto start = std::chrono::steady_clock::now();
  absl::Status read = (*file)->ReadAt(0, absl::MakeSpan(bytes));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!read.ok()) {
    std::fprintf(stderr, "%s\n", std::string(read.message()).c_str());
    return 1;
  }
  std::printf("%zu bytes in %.3f s: %.0f MB/s, sha256 %s\n", bytes.size(), seconds,
              bytes.size() / seconds / 1e6, metaload::Sha256Hex(bytes).c_str());
  return 0;
}
