// Where an S3 client's keys, region and endpoint come from: the chain every S3 tool reads (the
// AWS CLI, boto3, the SDKs), so that a user's existing set-up works as it is.
//
//   keys     AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN), else the profile's
//            aws_access_key_id / aws_secret_access_key (/ aws_session_token) in the shared
//            credentials file (AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials; `[name]`),
//            else in the config file (AWS_CONFIG_FILE, else ~/.aws/config; `[profile name]`,
//            `[default]`). A node config's `s3_credentials_file` replaces the whole chain of keys:
//            only that file (its profile), never the daemon's environment.
//   profile  AWS_PROFILE, else "default".
//   region   AWS_REGION, else AWS_DEFAULT_REGION, else the profile's `region`, else us-east-1.
//   endpoint AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else the profile's `endpoint_url`, else
//            https://s3.<region>.amazonaws.com. Requests are path-style (endpoint/bucket/key).
//
// Files are read whole up to 1 MiB and parsed as the INI the AWS CLI writes; a line it cannot
// parse is an error naming the file and line, never its text (it may hold a secret). Keys are
// checked (printable ASCII, bounded) and never appear in any message: S3Credentials' `source`
// says where they came from ("AWS_ACCESS_KEY_ID", "/root/.aws/credentials [default]").
//
// Thread-safety: pure functions of what they are given.
#ifndef METALOAD_UTIL_FS_S3_S3_CREDENTIALS_H_
#define METALOAD_UTIL_FS_S3_S3_CREDENTIALS_H_

#include <functional>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace metaload {

inline constexpr size_t kMaxAwsFileBytes = size_t{1} << 20;

struct S3Settings {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // "" unless temporary credentials
  std::string region;
  std::string endpoint;  // "http(s)://host[:port]", no trailing '/'
  std::string source;    // where the keys came from, for messages
};

// What the chain reads: the environment and files, injectable for tests.
struct S3SettingsSources {
  std::function<const char*(const char*)> getenv;  // null: ::getenv
  std::string home;                                // "": $HOME
  std::string credentials_file;                    // the node config's s3_credentials_file, or ""
};

// The settings as the chain above gives them. FailedPrecondition "no S3 credentials: set
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or ..." when no keys are found; InvalidArgument
// naming the file and line, or the variable, for malformed input.
absl::StatusOr<S3Settings> LoadS3Settings(const S3SettingsSources& sources);

// An AWS INI file: section -> key -> value (keys lower case; section names as written, e.g.
// "default", "profile x"). InvalidArgument "<origin>:<line>: ..." naming neither key nor value.
absl::StatusOr<std::map<std::string, std::map<std::string, std::string>>> ParseAwsIni(
    absl::string_view text, absl::string_view origin);

// "http://host:port" from an endpoint URL a user gave: scheme http or https, a host, an optional
// port, no path, query, user or password. InvalidArgument naming `origin` otherwise.
absl::StatusOr<std::string> NormalEndpoint(absl::string_view url, absl::string_view origin);

}  // namespace metaload

#endif  // METALOAD_UTIL_FS_S3_S3_CREDENTIALS_H_
