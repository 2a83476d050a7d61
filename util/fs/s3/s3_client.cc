#include "util/fs/s3/s3_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "util/fs/s3/sigv4.h"

namespace metaload {

constexpr size_t kMaxErrorBodyBytes = 64 << 10;

struct S3Client::Request {
  const char* method = "GET";
  std::string bucket, key;  // key "" for the bucket itself
  std::vector<std::pair<std::string, std::string>> query;
  uint64_t offset = 0;      // ranged GET: the first byte still missing
  absl::Span<uint8_t> out;  // ranged GET: where the bytes go (advanced on resume)
  bool ranged = false;
  std::string if_match;
  std::string* body = nullptr;                   // list: where the whole (bounded) body goes
  const std::atomic<bool>* cancelled = nullptr;  // when true: abort, do not retry
};

struct S3Client::Response {
  CURLcode curl = CURLE_OK;
  long status = 0;
  std::string error_body;  // a non-2xx answer's body, bounded
  std::string etag, last_modified, content_range;
  uint64_t content_length = 0;
  bool has_content_length = false;
  size_t written = 0;     // bytes written into the request's out or body
  bool overflow = false;  // more bytes than asked for: the transfer was aborted
  int attempts = 1;       // how many tries this outcome took
};

namespace {

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Transfer {
  const S3Client::Request* request;
  S3Client::Response* response;
  CURL* curl;
};

bool Success(long status) { return status >= 200 && status < 300; }

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * count;
  absl::string_view line(data, n);
  const size_t colon = line.find(':');
  if (colon == absl::string_view::npos) return n;
  const std::string name = absl::AsciiStrToLower(absl::StripAsciiWhitespace(line.substr(0, colon)));
  const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
  if (value.size() > 256) return n;  // no header we read is this long: ignored, checked as absent
  if (name == "etag") t->response->etag = std::string(value);
  if (name == "last-modified") t->response->last_modified = std::string(value);
  if (name == "content-range") t->response->content_range = std::string(value);
  if (name == "content-length") {
    t->response->has_content_length = absl::SimpleAtoi(value, &t->response->content_length);
  }
  return n;
}

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * count;
  long status = 0;
  curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
  S3Client::Response& r = *t->response;
  if (!Success(status)) {
    const size_t keep = std::min(n, kMaxErrorBodyBytes - std::min(kMaxErrorBodyBytes, r.error_body.size()));
    r.error_body.append(data, keep);
    return n;
  }
  if (t->request->ranged) {
    // The bytes must start where they were asked for: a server that ignored the Range (200
    // for a range past 0) or answered another one is not written from.
    uint64_t first = 0;
    const bool where_asked =
        status == 206
            ? absl::StartsWith(r.content_range, "bytes ") &&
                  absl::SimpleAtoi(absl::string_view(r.content_range)
                                       .substr(6, r.content_range.find('-') -
                                                      std::min<size_t>(6, r.content_range.find('-'))),
                                   &first) &&
                  first == t->request->offset
            : t->request->offset == 0;
    if (!where_asked || r.written + n > t->request->out.size()) {
      r.overflow = true;
      return 0;  // aborts the transfer: CURLE_WRITE_ERROR
    }
    std::memcpy(t->request->out.data() + r.written, data, n);
    r.written += n;
    return n;
  }
  if (t->request->body != nullptr) {
    if (t->request->body->size() + n > kMaxS3XmlBytes) {
      r.overflow = true;
      return 0;
    }
    t->request->body->append(data, n);
    r.written += n;
  }
  return n;
}

// curl's progress callback, at least once a second while a transfer runs: non-zero aborts it
// (CURLE_ABORTED_BY_CALLBACK).
int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<const std::atomic<bool>*>(user)->load(std::memory_order_relaxed) ? 1 : 0;
}

// Whether another attempt may succeed where this one failed.
bool Transient(const S3Client::Response& r, const S3ErrorBody& error) {
  switch (r.curl) {
    case CURLE_OK:
      break;
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;  // a write error (overflow), a bad URL, TLS: not a transient fault
  }
  if (r.status == 429 || r.status == 500 || r.status == 502 || r.status == 503 || r.status == 504)
    return true;
  return error.code == "SlowDown" || error.code == "RequestTimeout" || error.code == "InternalError" ||
         error.code == "ThrottlingException";
}

std::string AmzDate() { return absl::FormatTime("%Y%m%dT%H%M%SZ", absl::Now(), absl::UTCTimeZone()); }

int64_t BackoffMs(int attempt, const S3ClientOptions& options) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const int64_t ceiling =
      std::min<int64_t>(options.backoff_cap_ms, options.backoff_base_ms << std::min(attempt, 16));
  return std::uniform_int_distribution<int64_t>(0, std::max<int64_t>(ceiling, 1))(rng);
}

}  // namespace

std::string S3Url(const std::string& bucket, const std::string& key) {
  return key.empty() ? absl::StrCat("s3://", bucket) : absl::StrCat("s3://", bucket, "/", key);
}

S3Client::S3Client(S3Settings settings, S3ClientOptions options)
    : settings_(std::move(settings)), options_(options) {
  GlobalInit();
}

S3Client::~S3Client() {
  absl::MutexLock lock(&mu_);
  for (void* handle : idle_handles_) curl_easy_cleanup(static_cast<CURL*>(handle));
}

uint64_t S3Client::retries() const {
  absl::MutexLock lock(&mu_);
  return retries_;
}

void* S3Client::Acquire() {
  {
    absl::MutexLock lock(&mu_);
    if (!idle_handles_.empty()) {
      void* handle = idle_handles_.back();
      idle_handles_.pop_back();
      return handle;
    }
  }
  return curl_easy_init();
}

void S3Client::Release(void* handle) {
  absl::MutexLock lock(&mu_);
  idle_handles_.push_back(handle);
}

S3Client::Response S3Client::Perform(const Request& request) {
  Response response;
  CURL* curl = static_cast<CURL*>(Acquire());
  if (curl == nullptr) {
    response.curl = CURLE_OUT_OF_MEMORY;
    return response;
  }
  curl_easy_reset(curl);  // keeps the live connection
  const std::string path = request.key.empty() ? absl::StrCat("/", request.bucket)
                                               : absl::StrCat("/", request.bucket, "/", request.key);
  const std::string query = CanonicalQuery(request.query);
  const std::string url =
      absl::StrCat(settings_.endpoint, UriEncode(path, true), query.empty() ? "" : "?", query);
  const std::string host(absl::StripPrefix(absl::StripPrefix(settings_.endpoint, "https://"), "http://"));

  SigV4Request signed_request{
      request.method,
      path,
      request.query,
      {{"host", host}, {"x-amz-content-sha256", std::string(kEmptyPayloadSha256)}, {"x-amz-date", AmzDate()}},
      std::string(kEmptyPayloadSha256)};
  if (!settings_.session_token.empty())
    signed_request.headers.emplace_back("x-amz-security-token", settings_.session_token);
  curl_slist* headers = nullptr;
  std::string authorization = absl::StrCat(
      "Authorization: ", Authorization(signed_request, {settings_.access_key_id, settings_.secret_access_key},
                                       settings_.region, "s3"));
  headers = curl_slist_append(headers, authorization.c_str());
  std::fill(authorization.begin(), authorization.end(), '\0');
  for (const auto& [name, value] : signed_request.headers) {
    if (name != "host") headers = curl_slist_append(headers, absl::StrCat(name, ": ", value).c_str());
  }
  if (request.ranged) {
    headers = curl_slist_append(
        headers,
        absl::StrCat("Range: bytes=", request.offset, "-", request.offset + request.out.size() - 1).c_str());
  }
  if (!request.if_match.empty())
    headers = curl_slist_append(headers, absl::StrCat("If-Match: ", request.if_match).c_str());
  headers = curl_slist_append(headers, "Expect:");

  Transfer transfer{&request, &response, curl};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout_ms));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, static_cast<long>(options_.stall_timeout_s));
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &transfer);
  if (request.cancelled != nullptr) {
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, OnProgress);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, const_cast<std::atomic<bool>*>(request.cancelled));
  }
  if (std::strcmp(request.method, "HEAD") == 0) curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  response.curl = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  curl_slist_free_all(headers);
  if (response.curl == CURLE_OK) {
    Release(curl);
  } else {
    curl_easy_cleanup(curl);  // a connection in an unknown state is not reused
  }
  return response;
}

std::string S3Client::Named(const Request& request) {
  std::string named = S3Url(request.bucket, request.key);
  if (request.ranged && !request.out.empty()) {
    absl::StrAppend(&named, " bytes ", request.offset, "-", request.offset + request.out.size() - 1);
  }
  return named;
}

S3Client::Response S3Client::PerformWithRetries(Request& request) {
  Response response;
  for (int attempt = 1;; ++attempt) {
    response = Perform(request);
    if (request.ranged && Success(response.status) && response.written > 0) {
      // What arrived stays: the next attempt asks for the rest only.
      request.offset += response.written;
      request.out = request.out.subspan(response.written);
    }
    const bool short_body =
        request.ranged && Success(response.status) && response.curl == CURLE_OK && !request.out.empty();
    const S3ErrorBody error = ParseS3Error(response.error_body);
    const bool cancelled = request.cancelled != nullptr && request.cancelled->load();
    const bool again = !cancelled && (short_body || Transient(response, error));
    if (!again || attempt >= options_.max_attempts) {
      response.written = 0;
      response.attempts = attempt;
      if (short_body) response.curl = CURLE_PARTIAL_FILE;
      return response;
    }
    {
      absl::MutexLock lock(&mu_);
      ++retries_;
    }
    const int64_t backoff_ms = BackoffMs(attempt, options_);
    if (options_.on_retry) {
      const std::string why = short_body ? "the body ended early"
                              : response.curl != CURLE_OK
                                  ? curl_easy_strerror(response.curl)
                                  : absl::StrCat(response.status, error.code.empty() ? "" : " ", error.code,
                                                 error.message.empty() ? "" : ": ", error.message);
      options_.on_retry(absl::StrCat(request.method, " ", Named(request), ": ", why, "; retry ", attempt,
                                     " of ", options_.max_attempts - 1, " in ", backoff_ms, " ms"));
    }
    // In slices, so that a cancelled read does not sleep out its backoff (up to 5 s).
    for (int64_t slept_ms = 0; slept_ms < backoff_ms; slept_ms += 50) {
      if (request.cancelled != nullptr && request.cancelled->load()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(50, backoff_ms - slept_ms)));
    }
  }
}

absl::Status S3Client::ErrorOf(const Request& request, const Response& response) {
  const int attempts = response.attempts;
  const std::string what = Named(request);
  if (response.curl == CURLE_ABORTED_BY_CALLBACK ||
      (request.cancelled != nullptr && request.cancelled->load() && response.curl != CURLE_OK)) {
    return absl::CancelledError(absl::StrCat(what, ": cancelled"));
  }
  if (response.curl != CURLE_OK && !response.overflow) {
    return absl::UnavailableError(absl::StrCat(what, ": ", settings_.endpoint, ": ",
                                               curl_easy_strerror(response.curl), " (after ", attempts,
                                               " attempts)"));
  }
  if (response.overflow) {
    return absl::DataLossError(
        absl::StrCat(what, ": ", settings_.endpoint, " sent more bytes than were asked for"));
  }
  S3ErrorBody error = ParseS3Error(response.error_body);
  const std::string said = absl::StrCat(response.status, error.code.empty() ? "" : " ", error.code,
                                        error.message.empty() ? "" : ": ", error.message);
  if (error.code == "NoSuchBucket") {
    return absl::NotFoundError(
        absl::StrCat(what, ": no such bucket ", request.bucket, " at ", settings_.endpoint));
  }
  if (response.status == 404) {
    return absl::NotFoundError(absl::StrCat("cannot open ", what, ": no such object"));
  }
  if (response.status == 412) {
    return absl::DataLossError(
        absl::StrCat(what, " changed since it was opened (no longer ETag ", request.if_match, ")"));
  }
  if (response.status == 401 || response.status == 403) {
    return absl::PermissionDeniedError(absl::StrCat(what, ": ", settings_.endpoint, " refused the request (",
                                                    said, "); access key ", settings_.access_key_id, " from ",
                                                    settings_.source));
  }
  if (Success(response.status)) {
    return absl::DataLossError(absl::StrCat(what, ": ", settings_.endpoint, " answered ", response.status,
                                            " without the bytes asked for"));
  }
  return absl::UnavailableError(
      absl::StrCat(what, ": ", settings_.endpoint, " answered ", said, " (after ", attempts, " attempts)"));
}

absl::StatusOr<S3ObjectInfo> S3Client::Head(const std::string& bucket, const std::string& key) {
  Request request;
  request.method = "HEAD";
  request.bucket = bucket;
  request.key = key;
  Response response = PerformWithRetries(request);
  if (!Success(response.status) || response.curl != CURLE_OK) {
    if (response.curl == CURLE_OK && response.status >= 400) {
      // A HEAD answer has no body to say why: the same request as a one-byte GET says it.
      Request why = request;
      why.method = "GET";
      uint8_t first_byte = 0;
      why.ranged = true;
      why.out = absl::MakeSpan(&first_byte, 1);
      Response said = Perform(why);
      // Named as the HEAD was: the probe's one byte is no range the caller asked for.
      if (!Success(said.status) && said.curl == CURLE_OK) return ErrorOf(request, said);
    }
    return ErrorOf(request, response);
  }
  S3ObjectInfo info;
  if (!response.has_content_length || response.etag.empty() || response.etag.size() > 128) {
    return absl::DataLossError(absl::StrCat(S3Url(bucket, key), ": ", settings_.endpoint,
                                            " answered HEAD without Content-Length or ETag"));
  }
  for (char c : response.etag) {
    if (c < ' ' || c > '~') {
      return absl::DataLossError(absl::StrCat(S3Url(bucket, key), ": an ETag with unprintable bytes"));
    }
  }
  info.size_bytes = response.content_length;
  info.etag = response.etag;
  const time_t seconds = curl_getdate(response.last_modified.c_str(), nullptr);
  info.mtime_ns = seconds > 0 ? static_cast<int64_t>(seconds) * 1000000000 : 0;
  return info;
}

absl::Status S3Client::GetRange(const std::string& bucket, const std::string& key, uint64_t offset,
                                absl::Span<uint8_t> out, const std::string& etag,
                                const std::atomic<bool>* cancelled) {
  if (out.empty()) return absl::OkStatus();
  Request request;
  request.bucket = bucket;
  request.key = key;
  request.offset = offset;
  request.out = out;
  request.ranged = true;
  request.if_match = etag;
  request.cancelled = cancelled;
  Response response = PerformWithRetries(request);
  if (response.curl == CURLE_OK && (response.status == 206 || response.status == 200) &&
      request.out.empty()) {
    return absl::OkStatus();
  }
  return ErrorOf(request, response);
}

absl::StatusOr<S3ListPage> S3Client::ListPage(const std::string& bucket, const std::string& prefix,
                                              const std::string& delimiter,
                                              const std::string& continuation_token, int max_keys) {
  Request request;
  request.bucket = bucket;
  request.query = {{"list-type", "2"}, {"max-keys", absl::StrCat(max_keys)}, {"prefix", prefix}};
  if (!delimiter.empty()) request.query.emplace_back("delimiter", delimiter);
  if (!continuation_token.empty()) request.query.emplace_back("continuation-token", continuation_token);
  std::string body;
  request.body = &body;
  Response response;
  for (int attempt = 1;; ++attempt) {  // a page is read whole or again from its start
    body.clear();
    response = Perform(request);
    response.attempts = attempt;
    if (!Transient(response, ParseS3Error(response.error_body)) || attempt >= options_.max_attempts) break;
    {
      absl::MutexLock lock(&mu_);
      ++retries_;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(BackoffMs(attempt, options_)));
  }
  if (response.curl != CURLE_OK || !Success(response.status)) {
    Request named = request;  // the message names the folder listed, not its "/"
    named.key = std::string(absl::StripSuffix(prefix, "/"));
    return ErrorOf(named, response);
  }
  return ParseListObjectsV2(body, prefix);
}

}  // namespace metaload
