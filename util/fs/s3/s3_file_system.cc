#include "util/fs/s3/s3_file_system.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "util/error_kind.h"
#include "util/fs/location.h"
#include "util/log.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace metaload {
namespace {

constexpr int kMaxListPages = 1000;  // a million names in one folder: past that, refused

// Runs read one by one, never their gaps: gaps larger than the runs (dense runs, a row-parallel
// slice, are read as their span: far fewer GETs for at most twice the bytes).
bool Sparse(const StridedRuns& runs) { return runs.run_bytes == 0 || runs.stride_bytes > 2 * runs.run_bytes; }

class S3File final : public RandomAccessFile {
 public:
  S3File(std::string location, S3Location where, S3ObjectInfo info, S3FileSystem* fs)
      : location_(std::move(location)),
        where_(std::move(where)),
        info_(std::move(info)),
        fs_(fs),
        budget_(fs->read_ahead_budget()) {}

  const std::string& path() const override { return location_; }
  uint64_t size_bytes() const override { return info_.size_bytes; }
  int64_t mtime_ns() const override { return info_.mtime_ns; }
  std::string version() const override { return info_.etag; }
  absl::Status ReadAt(uint64_t offset, absl::Span<uint8_t> out) const override {
    uint64_t end = 0;
    if (__builtin_add_overflow(offset, static_cast<uint64_t>(out.size()), &end) || end > size_bytes()) {
      return absl::OutOfRangeError(absl::StrCat("range [", offset, ", ", offset + out.size(), ") of ",
                                                location_, " passes its size ", size_bytes()));
    }
    std::shared_ptr<S3ReadAhead> ahead;
    {
      absl::MutexLock lock(&ahead_mu_);
      ahead = ahead_;
    }
    if (ahead != nullptr) {
      if (std::optional<absl::Status> read = ahead->Read(offset, out); read.has_value()) return *read;
    }
    if (cancelled_.load()) return absl::CancelledError(absl::StrCat(location_, ": the read was cancelled"));
    return fs_->ReadParts(where_.bucket, where_.key, info_.etag, offset, out, &cancelled_);
  }
  // Only the bytes [position, position + out.size()) of the runs map to are fetched: a caller
  // that reads a long run in chunks (a daemon's ReadRange: 1 MiB at a time) gets the ranged GETs
  // of each chunk, never the whole run again for each. Contiguous runs are one ReadAt, straight
  // into `out`. Dense runs (gaps no larger than the runs: a row-parallel slice) are read as
  // their span, in windows of `parallelism` parts (so that a window's GETs run at once) that
  // end where the bytes asked for end, and scattered: one GET per part, not one per row, memory
  // bounded by the window. Sparse runs: one ranged read each.
  absl::Status ReadRuns(const StridedRuns& runs, uint64_t position, absl::Span<uint8_t> out) const override {
    if (out.empty()) return absl::OkStatus();
    if (Sparse(runs)) return ReadRunsOneByOne(*this, runs, position, out);
    // The file offset of logical byte `at` of the runs laid end to end.
    auto file_offset = [&runs](uint64_t at) {
      return runs.first_offset + at / runs.run_bytes * runs.stride_bytes + at % runs.run_bytes;
    };
    if (runs.run_count <= 1 || runs.stride_bytes == runs.run_bytes) return ReadAt(file_offset(position), out);
    const S3FileSystemOptions options = fs_->options();
    const uint64_t part =
        std::max<uint64_t>(options.part_bytes * static_cast<uint64_t>(std::max(1, options.parallelism)), 1);
    const uint64_t span_end = file_offset(position + out.size() - 1) + 1;
    std::vector<uint8_t> window;
    size_t done = 0;
    while (done < out.size()) {
      const uint64_t window_start = file_offset(position + done);
      window.resize(static_cast<size_t>(std::min(span_end - window_start, part)));
      ML_RETURN_IF_ERROR(ReadAt(window_start, absl::MakeSpan(window)));
      const uint64_t window_end = window_start + window.size();
      while (done < out.size()) {
        const uint64_t logical = position + done;
        const uint64_t at = file_offset(logical);
        if (at >= window_end) break;
        const uint64_t n = std::min({runs.run_bytes - logical % runs.run_bytes,
                                     static_cast<uint64_t>(out.size() - done), window_end - at});
        std::copy_n(window.data() + (at - window_start), n, out.data() + done);
        done += static_cast<size_t>(n);
      }
    }
    return absl::OkStatus();
  }
  // A span to be read in order: fetched ahead in parts (s3_read_ahead.h), so that a reader's
  // small reads (a stream's 1 MiB chunks) are answered from GETs of whole parts.
  void WillNeed(uint64_t offset, uint64_t length) const override {
    if (offset >= size_bytes()) return;
    length = std::min(length, size_bytes() - offset);
    const S3FileSystemOptions options = fs_->options();
    std::shared_ptr<S3ReadAhead> ahead;
    if (length > 0) {
      const std::string bucket = where_.bucket, key = where_.key, etag = info_.etag;
      S3FileSystem* fs = fs_;
      ahead = std::make_shared<S3ReadAhead>(
          offset, offset + length, options.part_bytes, options.parallelism, budget_.get(),
          [fs, bucket, key, etag](uint64_t at, absl::Span<uint8_t> out, const std::atomic<bool>* cancelled) {
            return fs->ReadParts(bucket, key, etag, at, out, cancelled);
          });
    }
    absl::MutexLock lock(&ahead_mu_);
    if (cancelled_.load()) return;
    ahead_ = std::move(ahead);  // the last one, if any, stops when its last reader is done
  }
  void Cancel() const override {
    cancelled_ = true;
    absl::MutexLock lock(&ahead_mu_);
    if (ahead_ != nullptr) ahead_->Stop();
  }
  // Contiguous and dense runs (gaps no larger than a run) are read as their span by ReadRuns
  // anyway: fetched ahead. Sparse runs are read run by run, never the gaps: nothing to fetch.
  void WillRead(const StridedRuns& runs) const override {
    if (runs.run_count == 0 || runs.run_bytes == 0 || (runs.run_count > 1 && Sparse(runs))) return;
    WillNeed(runs.first_offset, runs.span_bytes());
  }
  absl::StatusOr<bool> Unchanged() const override {
    ML_ASSIGN_OR_RETURN(std::shared_ptr<S3Client> client, fs_->Client());
    absl::StatusOr<S3ObjectInfo> now = client->Head(where_.bucket, where_.key);
    if (absl::IsNotFound(now.status())) return false;
    if (!now.ok()) return now.status();
    return now->etag == info_.etag && now->size_bytes == info_.size_bytes;
  }

 private:
  const std::string location_;
  const S3Location where_;
  const S3ObjectInfo info_;
  S3FileSystem* const fs_;
  const std::shared_ptr<ReadAheadBudget> budget_;
  mutable absl::Mutex ahead_mu_;
  mutable std::shared_ptr<S3ReadAhead> ahead_ ABSL_GUARDED_BY(ahead_mu_);
  mutable std::atomic<bool> cancelled_{false};
};

bool ValidBucket(absl::string_view bucket) {
  if (bucket.size() < 3 || bucket.size() > 63) return false;
  for (char c : bucket) {
    if (!absl::ascii_islower(static_cast<unsigned char>(c)) &&
        !absl::ascii_isdigit(static_cast<unsigned char>(c)) && c != '.' && c != '-') {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<S3Location> ParseS3Location(const std::string& location) {
  const std::string normal = NormalLocation(location);
  absl::string_view rest = normal;
  if (!absl::ConsumePrefix(&rest, "s3://")) {
    return absl::InvalidArgumentError(absl::StrCat(location.substr(0, 256), ": not an s3:// location"));
  }
  const size_t slash = rest.find('/');
  S3Location where{std::string(rest.substr(0, slash)),
                   slash == absl::string_view::npos ? std::string() : std::string(rest.substr(slash + 1))};
  if (!ValidBucket(where.bucket)) {
    return WithErrorKind(
        absl::InvalidArgumentError(
            absl::StrCat(location.substr(0, 256), ": an S3 bucket name is 3 to 63 of a-z, 0-9, '.' and '-'")),
        ErrorKind::kBadInput);
  }
  if (where.key.size() > 1024) {
    return WithErrorKind(absl::InvalidArgumentError(
                             absl::StrCat(location.substr(0, 256), "...: an S3 key is at most 1024 bytes")),
                         ErrorKind::kBadInput);
  }
  return where;
}

std::vector<std::pair<uint64_t, uint64_t>> SplitRange(uint64_t offset, uint64_t length, uint64_t part_bytes) {
  std::vector<std::pair<uint64_t, uint64_t>> parts;
  if (part_bytes == 0) part_bytes = 1;
  for (uint64_t done = 0; done < length;) {
    const uint64_t n = std::min(part_bytes, length - done);
    parts.emplace_back(offset + done, n);
    done += n;
  }
  return parts;
}

S3FileSystem::S3FileSystem(S3FileSystemOptions options)
    : options_(std::move(options)), budget_(std::make_shared<ReadAheadBudget>(options_.read_ahead_bytes)) {}

void S3FileSystem::Configure(S3FileSystemOptions options) {
  absl::MutexLock lock(&mu_);
  options_ = std::move(options);
  client_.reset();
  budget_ = std::make_shared<ReadAheadBudget>(options_.read_ahead_bytes);
}

std::shared_ptr<ReadAheadBudget> S3FileSystem::read_ahead_budget() const {
  absl::MutexLock lock(&mu_);
  return budget_;
}

S3FileSystemOptions S3FileSystem::options() const {
  absl::MutexLock lock(&mu_);
  return options_;
}

absl::StatusOr<std::shared_ptr<S3Client>> S3FileSystem::Client() {
  absl::MutexLock lock(&mu_);
  if (client_ == nullptr) {
    ML_ASSIGN_OR_RETURN(S3Settings settings, LoadS3Settings({nullptr, "", options_.credentials_file}));
    S3ClientOptions client = options_.client;
    if (!client.on_retry)
      client.on_retry = [](const std::string& retry) { LogWarning(absl::StrCat("s3: ", retry)); };
    client_ = std::make_shared<S3Client>(std::move(settings), client);
  }
  return client_;
}

absl::Status S3FileSystem::ReadParts(const std::string& bucket, const std::string& key,
                                     const std::string& etag, uint64_t offset, absl::Span<uint8_t> out,
                                     const std::atomic<bool>* cancelled) {
  ML_ASSIGN_OR_RETURN(std::shared_ptr<S3Client> client, Client());
  const S3FileSystemOptions options = this->options();
  const std::vector<std::pair<uint64_t, uint64_t>> parts = SplitRange(offset, out.size(), options.part_bytes);
  std::atomic<size_t> next{0};
  absl::Mutex error_mu;
  absl::Status first_error;
  auto work = [&] {
    for (size_t i = next++; i < parts.size(); i = next++) {
      {
        absl::MutexLock lock(&error_mu);
        if (!first_error.ok()) return;
      }
      {
        absl::MutexLock lock(&mu_);
        // A cancelled read waits for no connection; checked at least every 100 ms.
        while (!mu_.AwaitWithTimeout(absl::Condition(
                                         +[](S3FileSystem* fs) ABSL_EXCLUSIVE_LOCKS_REQUIRED(fs->mu_) {
                                           return fs->in_flight_ < std::max(1, fs->options_.max_connections);
                                         },
                                         this),
                                     absl::Milliseconds(100))) {
          if (cancelled != nullptr && cancelled->load()) break;
        }
        if (cancelled != nullptr && cancelled->load()) {
          absl::MutexLock error_lock(&error_mu);
          if (first_error.ok())
            first_error = absl::CancelledError(absl::StrCat(S3Url(bucket, key), ": cancelled"));
          return;
        }
        ++in_flight_;
      }
      const auto [start, size] = parts[i];
      absl::Status read =
          client->GetRange(bucket, key, start, out.subspan(start - offset, size), etag, cancelled);
      {
        absl::MutexLock lock(&mu_);
        --in_flight_;
      }
      if (!read.ok()) {
        absl::MutexLock lock(&error_mu);
        if (first_error.ok()) first_error = std::move(read);
        return;
      }
    }
  };
  const size_t helpers =
      std::min<size_t>(parts.size(), static_cast<size_t>(std::max(1, options.parallelism))) - 1;
  std::vector<std::thread> threads;
  threads.reserve(helpers);
  for (size_t i = 0; i < helpers; ++i) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  return first_error;
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> S3FileSystem::Open(const std::string& path) {
  ML_ASSIGN_OR_RETURN(S3Location where, ParseS3Location(path));
  const std::string location = NormalLocation(path);
  if (where.key.empty()) {
    return WithErrorKind(absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file")),
                         ErrorKind::kBadInput);
  }
  ML_ASSIGN_OR_RETURN(std::shared_ptr<S3Client> client, Client());
  absl::StatusOr<S3ObjectInfo> info = client->Head(where.bucket, where.key);
  if (absl::IsNotFound(info.status())) {
    absl::StatusOr<PathKind> kind = KindOf(location, true);
    if (!kind.ok()) return kind.status();  // the bucket is missing: say so
    if (*kind == PathKind::kFolder) {
      return WithErrorKind(absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file")),
                           ErrorKind::kBadInput);
    }
  }
  if (!info.ok()) return info.status();
  return std::unique_ptr<RandomAccessFile>(
      std::make_unique<S3File>(location, std::move(where), *std::move(info), this));
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> S3FileSystem::OpenUnderRoots(
    const std::string& path, const std::vector<std::string>& roots, bool /*same_device*/) {
  return OpenUnderRootsByName(*this, path, roots);
}

absl::StatusOr<PathKind> S3FileSystem::KindOf(const std::string& path, bool /*follow_links*/) {
  ML_ASSIGN_OR_RETURN(S3Location where, ParseS3Location(path));
  ML_ASSIGN_OR_RETURN(std::shared_ptr<S3Client> client, Client());
  if (!where.key.empty()) {
    absl::StatusOr<S3ObjectInfo> info = client->Head(where.bucket, where.key);
    if (info.ok()) return PathKind::kFile;
    if (!absl::IsNotFound(info.status())) return info.status();
  }
  // A folder is a prefix with an object under it; the list says NoSuchBucket for a bucket that
  // is not there, which is returned, not taken for "absent".
  ML_ASSIGN_OR_RETURN(S3ListPage page,
                      client->ListPage(where.bucket, where.key.empty() ? "" : where.key + "/", "/", "", 1));
  if (!page.objects.empty() || !page.common_prefixes.empty() || where.key.empty()) return PathKind::kFolder;
  return PathKind::kMissing;
}

absl::StatusOr<std::vector<std::string>> S3FileSystem::List(const std::string& path) {
  ML_ASSIGN_OR_RETURN(S3Location where, ParseS3Location(path));
  ML_ASSIGN_OR_RETURN(std::shared_ptr<S3Client> client, Client());
  const std::string prefix = where.key.empty() ? "" : where.key + "/";
  std::vector<std::string> names;
  std::string token;
  for (int page_number = 0;; ++page_number) {
    if (page_number == kMaxListPages) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot list ", path, ": more than ", kMaxListPages,
                                                       " pages of ", kMaxS3ListEntries, " names"));
    }
    ML_ASSIGN_OR_RETURN(S3ListPage page, client->ListPage(where.bucket, prefix, "/", token));
    for (const S3ObjectEntry& object : page.objects) {
      std::string name = object.key.substr(prefix.size());
      if (!name.empty()) names.push_back(std::move(name));  // "prefix/" itself: a folder marker
    }
    for (const std::string& common : page.common_prefixes) {
      std::string name = common.substr(prefix.size());
      if (absl::EndsWith(name, "/")) name.pop_back();
      if (!name.empty()) names.push_back(std::move(name));
    }
    if (!page.truncated) break;
    token = page.next_continuation_token;
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  if (names.empty()) return absl::NotFoundError(absl::StrCat("cannot list ", path, ": no such folder"));
  return names;
}

absl::StatusOr<std::string> S3FileSystem::Canonical(const std::string& path) {
  const std::string location = NormalLocation(path);
  ML_ASSIGN_OR_RETURN(PathKind kind, KindOf(location, true));
  if (kind == PathKind::kMissing) {
    return absl::NotFoundError(absl::StrCat("cannot resolve ", path, ": no such object or folder"));
  }
  return location;
}

namespace {

// The defaults, or METALOAD_S3_PART_SIZE (bytes, "8MiB"), METALOAD_S3_PARALLELISM (1-64) and
// METALOAD_S3_READ_AHEAD (bytes, 0 to 64 GiB) where set: for every process that reads s3://, ranks and
// metactl as much as metad. A value out of bounds is a message on stderr and the default, not a failed read
// much later.
S3FileSystemOptions OptionsFromEnvironment() {
  S3FileSystemOptions options;
  if (const char* part = std::getenv("METALOAD_S3_PART_SIZE"); part != nullptr) {
    absl::StatusOr<uint64_t> bytes = ParseByteSize(part);
    if (bytes.ok() && *bytes >= (64u << 10) && *bytes <= (uint64_t{1} << 30)) {
      options.part_bytes = *bytes;
    } else {
      std::fprintf(stderr, "METALOAD_S3_PART_SIZE: not a size from 64KiB to 1GiB; 8MiB is used\n");
    }
  }
  if (const char* parallelism = std::getenv("METALOAD_S3_PARALLELISM"); parallelism != nullptr) {
    int n = 0;
    if (absl::SimpleAtoi(parallelism, &n) && n >= 1 && n <= 64) {
      options.parallelism = n;
    } else {
      std::fprintf(stderr, "METALOAD_S3_PARALLELISM: not a count from 1 to 64; 8 is used\n");
    }
  }
  if (const char* ahead = std::getenv("METALOAD_S3_READ_AHEAD"); ahead != nullptr) {
    absl::StatusOr<uint64_t> bytes = ParseByteSize(ahead);
    if (bytes.ok() && *bytes <= (uint64_t{64} << 30)) {
      options.read_ahead_bytes = *bytes;
    } else {
      std::fprintf(stderr, "METALOAD_S3_READ_AHEAD: not a size from 0 to 64GiB; 256MiB is used\n");
    }
  }
  return options;
}

}  // namespace

S3FileSystem& TheS3FileSystem() {
  static S3FileSystem* const s3 = new S3FileSystem(OptionsFromEnvironment());  // lives until exit
  return *s3;
}

}  // namespace metaload
