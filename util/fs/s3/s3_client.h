// An S3 client over libcurl, for reading: HEAD, a ranged GET streamed into the caller's buffer
// (never a whole object held), and ListObjectsV2 pages; path-style requests
// (ENDPOINT/bucket/key) to the endpoint of its settings (s3_credentials.h), each signed with
// Signature V4 (sigv4.h). Why libcurl and our own signing: docs/object-storage.md.
//
//   S3Client client(*LoadS3Settings({}), S3ClientOptions{});
//   ML_ASSIGN_OR_RETURN(S3ObjectInfo info, client.Head("models", "llama/model.safetensors"));
//   ML_RETURN_IF_ERROR(client.GetRange("models", "llama/model.safetensors", 0, span, info.etag));
//
// Retries: a dropped or refused connection, a stalled or short body, 5xx, 429 and S3's
// SlowDown/RequestTimeout are retried up to `max_attempts` with exponential backoff and full
// jitter (AWS's "exponential backoff and jitter"); a ranged GET resumes at its first missing
// byte with If-Match on the ETag it was opened at, so a retried range ends bit-exact from that
// one version of the object, or with an error — never a partial fill reported as done.
//
// Secrets: the secret key is used to sign and for nothing else; no message carries it, a
// signature, or a session token; an S3 error body gives only its Code and Message (s3_xml.h).
//
// Thread-safety: every method may be called from several threads at once; each request takes
// a connection (a curl handle, kept alive for the next) from a pool.
#ifndef METALOAD_UTIL_FS_S3_S3_CLIENT_H_
#define METALOAD_UTIL_FS_S3_S3_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "util/fs/s3/s3_credentials.h"
#include "util/fs/s3/s3_xml.h"

namespace metaload {

struct S3ClientOptions {
  int64_t connect_timeout_ms = 5000;
  // A transfer that moves no byte for this long is dropped (and retried): a stalled server,
  // not a slow one, since a large range at any speed keeps moving.
  int64_t stall_timeout_s = 20;
  int max_attempts = 6;
  int64_t backoff_base_ms = 50;
  int64_t backoff_cap_ms = 5000;
  // Told of each retry, before its backoff: "GET s3://b/k bytes 0-1048575: 503 SlowDown: ...;
  // retry 1 of 5 in 43 ms". The client logs nothing itself (it stays free of util/log.h); the
  // file system logs these as warnings, so that a throttled bucket shows in the daemon's log.
  std::function<void(const std::string&)> on_retry;
};

struct S3ObjectInfo {
  uint64_t size_bytes = 0;
  std::string etag;      // as the server sent it, quotes included: "\"5d41...\"", "\"...-3\""
  int64_t mtime_ns = 0;  // Last-Modified, whole seconds
};

class S3Client {
 public:
  S3Client(S3Settings settings, S3ClientOptions options);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  // The object's size, ETag and Last-Modified. NotFound "cannot open s3://b/k: no such object"
  // or "s3://b/k: no such bucket b at ENDPOINT"; PermissionDenied naming the S3 error code,
  // the endpoint and where the keys came from; Unavailable once retries are spent.
  absl::StatusOr<S3ObjectInfo> Head(const std::string& bucket, const std::string& key);
  // Fills all of `out` with bytes [offset, offset + out.size()) of the object as it was at
  // `etag` (If-Match). DataLoss "s3://b/k changed since it was opened" when it is no longer
  // that version; Head's errors otherwise. Cancelled "… cancelled" within about a second of
  // `*cancelled` turning true (a transfer in flight is aborted, no retry is started).
  absl::Status GetRange(const std::string& bucket, const std::string& key, uint64_t offset,
                        absl::Span<uint8_t> out, const std::string& etag,
                        const std::atomic<bool>* cancelled = nullptr);
  // One ListObjectsV2 page of keys under `prefix`, grouped at `delimiter` ("" for none), from
  // `continuation_token` ("" for the first page); at most kMaxS3ListEntries entries.
  absl::StatusOr<S3ListPage> ListPage(const std::string& bucket, const std::string& prefix,
                                      const std::string& delimiter, const std::string& continuation_token,
                                      int max_keys = 1000);

  const std::string& endpoint() const { return settings_.endpoint; }
  // How many requests were retried, for tests and metrics.
  uint64_t retries() const;

  // One request and one attempt's outcome (s3_client.cc).
  struct Request;
  struct Response;

 private:
  Response Perform(const Request& request);
  // Perform, retried as the class comment says; `out` advances past what arrived.
  Response PerformWithRetries(Request& request);
  absl::Status ErrorOf(const Request& request, const Response& response);
  // The object a request is for and, for a ranged GET, the bytes still missing (inclusive, as
  // a Range header spells them): what an error or a retry names.
  static std::string Named(const Request& request);
  void* Acquire();
  void Release(void* handle);

  const S3Settings settings_;
  const S3ClientOptions options_;
  mutable absl::Mutex mu_;
  std::vector<void*> idle_handles_ ABSL_GUARDED_BY(mu_);  // CURL*, each with its live connection
  uint64_t retries_ ABSL_GUARDED_BY(mu_) = 0;
};

// "s3://bucket/key" as messages spell an object.
std::string S3Url(const std::string& bucket, const std::string& key);

}  // namespace metaload

#endif  // METALOAD_UTIL_FS_S3_S3_CLIENT_H_
