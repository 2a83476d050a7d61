#include "daemon/config/node_config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <functional>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "daemon/requests/request_limits.h"
#include "util/fs/location.h"
#include "util/fs/s3/s3_file_system.h"
#include "util/fs/storage.h"
#include "util/identifiers.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace metaload {
namespace {

// clang-format off
constexpr const char* kKnownKeys[] = {
    "node", "listen", "advertise", "coordinator", "gpus", "gpu_memory", "roots", "chunk_size",
    "member_timeout", "state_dir", "registry", "registry_prefix", "registry_max_record_size",
    "registry_tls", "registry_auth", "shutdown_grace",
    "max_streams", "max_streams_per_client", "max_connections", "max_connections_per_client",
    "preauth_timeout", "max_preauth_connections", "max_preauth_connections_per_client", "max_preauth_bytes",
    "max_request_size", "plan_cache_size", "idle_stream_timeout", "max_models", "max_tensors_per_model",
    "max_names_per_identity", "tls", "auth_token_file", "auth_tokens", "allow_insecure", "same_device",
    "require_digests", "max_registry_size", "metrics_listen", "log_format", "s3_credentials_file"};
// clang-format on
constexpr int kMaxRegistryEndpoints = 16;
constexpr size_t kMaxRegistryPrefixBytes = 256;
constexpr uint64_t kMinRegistryRecordBytes = 64 << 10;
constexpr uint64_t kMaxRegistryRecordBytes = 1 << 30;  // the record file format's own limit
constexpr uint32_t kMaxChunkBytes = 3u << 20;          // stays under gRPC's 4 MiB default receive limit
constexpr int64_t kMaxStreams = 65536;
constexpr int64_t kMaxConnections = 65536;
constexpr uint64_t kMinRequestBytes = 1 << 20;
// A client's first flight before its first call reaches the service is its headers, and at
// most one stream's HTTP/2 window (gRPC 1.51 grants ~4 MiB) of that call's message when the
// daemon is slow to take the call: the default is twice that; below it, for daemons whose
// clients are local and known, a busy daemon may cut a client (docs/node-config.md).
constexpr uint64_t kMinPreauthBytes = 1 << 20;
constexpr uint64_t kMaxPreauthBytes = 1 << 30;
constexpr uint64_t kMaxRequestBytes = 1 << 30;  // gRPC takes an int
constexpr uint64_t kMinPlanCacheBytes = 16 << 20;
constexpr uint64_t kMaxPlanCacheBytes = 64ull << 30;
constexpr uint64_t kMinRegistryBytes = 16 << 20;
constexpr uint64_t kMaxRegistryBytes = 1ull << 40;

absl::Status KeyError(const std::string& source, const std::string& key, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", key, ": ", why));
}

absl::StatusOr<std::string> ScalarString(const YAML::Node& n, const std::string& source,
                                         const std::string& key) {
  if (!n.IsScalar()) return KeyError(source, key, "must be a single value");
  return n.Scalar();
}

// "host:port" with a numeric port 0..65535; hosts may be names, IPv4 or [IPv6].
absl::Status CheckConfigAddress(const std::string& address, const std::string& source,
                                const std::string& key) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return KeyError(source, key, absl::StrCat("\"", address, "\" is not host:port"));
  }
  std::string port = address.substr(colon + 1);
  char* end = nullptr;
  long value = std::strtol(port.c_str(), &end, 10);
  if (*end != '\0' || value < 0 || value > 65535) {
    return KeyError(source, key, absl::StrCat("bad port \"", port, "\" in \"", address, "\""));
  }
  // The host's characters, as every daemon checks a member's address (util/identifiers.h).
  if (absl::Status host = CheckAddress("address", address, /*allow_port_zero=*/true); !host.ok()) {
    return KeyError(source, key, std::string(host.message()));
  }
  return absl::OkStatus();
}

// The YAML mapping of the file, with no key we do not know (a typo must not be ignored).
absl::StatusOr<YAML::Node> ParseMapping(const std::string& yaml_text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid YAML: ", e.what()));
  }
  if (!root.IsMap())
    return absl::InvalidArgumentError(absl::StrCat(source, ": must be a YAML mapping of keys"));
  for (const auto& entry : root) {
    // A complex key ("? [a, b]: x") is valid YAML but no key of ours; as<std::string>() on it
    // would throw past this function (found by fuzz/node_config_fuzz.cc).
    if (!entry.first.IsScalar()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": a key must be a plain name, not a list or mapping"));
    }
    const std::string& key = entry.first.Scalar();
    bool known = false;
    for (const char* k : kKnownKeys) known = known || key == k;
    if (!known) {
      return KeyError(source, key,
                      absl::StrCat("unknown key (known: ", absl::StrJoin(kKnownKeys, ", "), ")"));
    }
  }
  return root;
}

// node, listen, advertise, coordinator.
absl::Status ParseIdentity(const YAML::Node& root, const std::string& source, NodeConfig& config) {
  if (!root["node"]) return KeyError(source, "node", "required (a unique name for this host)");
  ML_ASSIGN_OR_RETURN(config.node, ScalarString(root["node"], source, "node"));
  if (config.node.empty()) return KeyError(source, "node", "must not be empty");
  if (absl::Status name = CheckName("the name", config.node); !name.ok()) {
    return KeyError(source, "node", std::string(name.message()));
  }
  if (root["listen"]) {
    ML_ASSIGN_OR_RETURN(config.listen, ScalarString(root["listen"], source, "listen"));
  }
  ML_RETURN_IF_ERROR(CheckConfigAddress(config.listen, source, "listen"));
  for (auto [key, field] :
       {std::pair{"advertise", &config.advertise}, std::pair{"coordinator", &config.coordinator}}) {
    if (!root[key]) continue;
    ML_ASSIGN_OR_RETURN(*field, ScalarString(root[key], source, key));
    if (!field->empty()) ML_RETURN_IF_ERROR(CheckConfigAddress(*field, source, key));
  }
  return absl::OkStatus();
}

// A duration key ("10s", "1m30s") from `min` to 1h, when present.
absl::Status ParseDurationKey(const YAML::Node& root, const std::string& source, const char* key,
                              absl::Duration min, absl::Duration& value) {
  if (!root[key]) return absl::OkStatus();
  ML_ASSIGN_OR_RETURN(std::string text, ScalarString(root[key], source, key));
  if (!absl::ParseDuration(text, &value) || value < min || value > absl::Hours(1)) {
    return KeyError(
        source, key,
        absl::StrCat("\"", text, "\" is not a duration from ", absl::FormatDuration(min), " to 1h"));
  }
  return absl::OkStatus();
}

// A count key (a decimal integer) from `min` to `max`, when present.
template <typename Int>
absl::Status ParseCountKey(const YAML::Node& root, const std::string& source, const char* key, int64_t min,
                           int64_t max, Int& value) {
  if (!root[key]) return absl::OkStatus();
  ML_ASSIGN_OR_RETURN(std::string text, ScalarString(root[key], source, key));
  char* end = nullptr;
  errno = 0;
  const long long parsed = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || parsed < min || parsed > max) {
    return KeyError(source, key, absl::StrCat("\"", text, "\" is not a count from ", min, " to ", max));
  }
  value = static_cast<Int>(parsed);
  return absl::OkStatus();
}

// A byte size (`1MiB`) from `min` to `max` (`range`, as the message says it), when `key` is set.
absl::Status ParseSizeKey(const YAML::Node& root, const std::string& source, const char* key, uint64_t min,
                          uint64_t max, absl::string_view range, uint64_t& value) {
  if (!root[key]) return absl::OkStatus();
  ML_ASSIGN_OR_RETURN(std::string text, ScalarString(root[key], source, key));
  auto size = ParseByteSize(text);
  if (!size.ok()) return KeyError(source, key, std::string(size.status().message()));
  if (*size < min || *size > max) return KeyError(source, key, absl::StrCat(text, " is outside ", range));
  value = *size;
  return absl::OkStatus();
}

// gpus, gpu_memory, chunk_size, member_timeout, shutdown_grace.
absl::Status ParseCapacities(const YAML::Node& root, const std::string& source, NodeConfig& config) {
  ML_RETURN_IF_ERROR(ParseCountKey(root, source, "gpus", 0, kMaxGpusPerNode, config.gpus));
  if (root["gpu_memory"]) {
    ML_ASSIGN_OR_RETURN(std::string text, ScalarString(root["gpu_memory"], source, "gpu_memory"));
    auto size = ParseByteSize(text);
    if (!size.ok()) return KeyError(source, "gpu_memory", std::string(size.status().message()));
    config.gpu_memory_bytes = *size;
  }
  if (root["chunk_size"]) {
    ML_ASSIGN_OR_RETURN(std::string text, ScalarString(root["chunk_size"], source, "chunk_size"));
    auto size = ParseByteSize(text);
    if (!size.ok()) return KeyError(source, "chunk_size", std::string(size.status().message()));
    if (*size < 4096 || *size > kMaxChunkBytes) {
      return KeyError(source, "chunk_size", absl::StrCat(text, " is outside 4KiB..3MiB"));
    }
    config.chunk_bytes = static_cast<uint32_t>(*size);
  }
  ML_RETURN_IF_ERROR(
      ParseDurationKey(root, source, "member_timeout", absl::Seconds(1), config.member_timeout));
  return ParseDurationKey(root, source, "shutdown_grace", absl::ZeroDuration(), config.shutdown_grace);
}

// A limit in all (`total_key`) and its share for one client host (`per_client_key`), each
// 1..`max`. Unset, the per-client default follows a smaller total.
absl::Status ParseTotalAndPerClient(const YAML::Node& root, const std::string& source, const char* total_key,
                                    const char* per_client_key, int64_t max, uint32_t& total,
                                    uint32_t& per_client) {
  ML_RETURN_IF_ERROR(ParseCountKey(root, source, total_key, 1, max, total));
  ML_RETURN_IF_ERROR(ParseCountKey(root, source, per_client_key, 1, max, per_client));
  if (!root[per_client_key]) per_client = std::min(per_client, total);
  if (per_client > total) {
    return KeyError(source, per_client_key,
                    absl::StrCat(per_client, " is more than ", total_key, " (", total, ")"));
  }
  return absl::OkStatus();
}

// max_streams, max_streams_per_client, max_connections, max_connections_per_client,
// max_preauth_connections, max_preauth_connections_per_client, preauth_timeout, max_preauth_bytes,
// max_request_size,
// plan_cache_size, max_registry_size, idle_stream_timeout, max_models, max_tensors_per_model,
// max_names_per_identity: what clients can make this daemon hold (docs/node-config.md, "Limits and
// memory"). The hard caps of request_limits.h bound what the keys may raise.
absl::Status ParseLimits(const YAML::Node& root, const std::string& source, NodeConfig& config) {
  ML_RETURN_IF_ERROR(ParseTotalAndPerClient(root, source, "max_streams", "max_streams_per_client",
                                            kMaxStreams, config.max_streams, config.max_streams_per_client));
  ML_RETURN_IF_ERROR(ParseTotalAndPerClient(root, source, "max_connections", "max_connections_per_client",
                                            kMaxConnections, config.max_connections,
                                            config.max_connections_per_client));
  ML_RETURN_IF_ERROR(ParseTotalAndPerClient(
      root, source, "max_preauth_connections", "max_preauth_connections_per_client", kMaxConnections,
      config.max_preauth_connections, config.max_preauth_connections_per_client));
  ML_RETURN_IF_ERROR(
      ParseDurationKey(root, source, "preauth_timeout", absl::Seconds(1), config.preauth_timeout));
  ML_RETURN_IF_ERROR(ParseSizeKey(root, source, "max_preauth_bytes", kMinPreauthBytes, kMaxPreauthBytes,
                                  "1MiB..1GiB", config.max_preauth_bytes));
  ML_RETURN_IF_ERROR(ParseSizeKey(root, source, "max_request_size", kMinRequestBytes, kMaxRequestBytes,
                                  "1MiB..1GiB", config.max_request_bytes));
  ML_RETURN_IF_ERROR(ParseSizeKey(root, source, "plan_cache_size", kMinPlanCacheBytes, kMaxPlanCacheBytes,
                                  "16MiB..64GiB", config.plan_cache_bytes));
  ML_RETURN_IF_ERROR(ParseSizeKey(root, source, "max_registry_size", kMinRegistryBytes, kMaxRegistryBytes,
                                  "16MiB..1TiB", config.max_registry_bytes));
  ML_RETURN_IF_ERROR(
      ParseDurationKey(root, source, "idle_stream_timeout", absl::Seconds(1), config.idle_stream_timeout));
  ML_RETURN_IF_ERROR(ParseCountKey(root, source, "max_models", 1, kMaxModels, config.max_models));
  ML_RETURN_IF_ERROR(
      ParseCountKey(root, source, "max_names_per_identity", 1, kMaxMembers, config.max_names_per_identity));
  return ParseCountKey(root, source, "max_tensors_per_model", 1, kMaxModelTensors,
                       config.max_tensors_per_model);
}

// `key: true` or `key: false`; `out` unchanged when the key is absent.
// log_format: text (the default) or json (one object per line, for log shippers; util/log.h).
absl::Status ParseLogFormat(const YAML::Node& root, const std::string& source, NodeConfig& config) {
  if (!root["log_format"]) return absl::OkStatus();
  ML_ASSIGN_OR_RETURN(std::string format, ScalarString(root["log_format"], source, "log_format"));
  if (format == "text") {
    config.log_format = LogFormat::kText;
  } else if (format == "json") {
    config.log_format = LogFormat::kJson;
  } else {
    return KeyError(source, "log_format", absl::StrCat(QuoteForMessage(format), " is neither text nor json"));
  }
  return absl::OkStatus();
}

absl::Status ParseBoolKey(const YAML::Node& root, const std::string& source, const char* key, bool& out) {
  if (!root[key]) return absl::OkStatus();
  ML_ASSIGN_OR_RETURN(std::string text, ScalarString(root[key], source, key));
  if (text != "true" && text != "false") {
    return KeyError(source, key, absl::StrCat(QuoteForMessage(text), " is not true or false"));
  }
  out = text == "true";
  return absl::OkStatus();
}

absl::StatusOr<std::string> ParsePathKey(const YAML::Node& n, const std::string& source,
                                         const std::string& key);

// s3_credentials_file: the AWS-format credentials file (profile AWS_PROFILE, else default)
// this daemon signs S3 requests with, instead of its environment's (docs/object-storage.md).
// Handed to the process's S3 back end here, before the roots, which may be s3:// locations
// that are checked now.
absl::Status ParseS3(const YAML::Node& root, const std::string& source, NodeConfig& config) {
  if (!root["s3_credentials_file"]) return absl::OkStatus();
  ML_ASSIGN_OR_RETURN(config.s3_credentials_file,
                      ParsePathKey(root["s3_credentials_file"], source, "s3_credentials_file"));
  // Read now, so that a missing file or profile stops the start, not the first read of a bucket.
  if (absl::StatusOr<S3Settings> keys = LoadS3Settings({nullptr, "", config.s3_credentials_file});
      !keys.ok()) {
    return KeyError(source, "s3_credentials_file", std::string(keys.status().message()));
  }
  S3FileSystemOptions options = TheS3FileSystem().options();
  options.credentials_file = config.s3_credentials_file;
  TheS3FileSystem().Configure(std::move(options));
  return absl::OkStatus();
}

// roots: absolute folders that exist, resolved (symlinks followed) once, here; same_device.
absl::Status ParseRoots(const YAML::Node& root, const std::string& source, NodeConfig& config) {
  ML_RETURN_IF_ERROR(ParseBoolKey(root, source, "same_device", config.same_device));
  if (!root["roots"]) return absl::OkStatus();
  const YAML::Node& roots = root["roots"];
  if (!roots.IsSequence()) return KeyError(source, "roots", "must be a list of folders");
  if (roots.size() > static_cast<size_t>(kMaxRootsPerNode)) {
    return KeyError(source, "roots", absl::StrCat(roots.size(), " folders; at most ", kMaxRootsPerNode));
  }
  for (const auto& r : roots) {
    ML_ASSIGN_OR_RETURN(std::string path, ScalarString(r, source, "roots"));
    if (!IsAbsoluteLocation(path)) {
      return KeyError(
          source, "roots",
          absl::StrCat(QuoteForMessage(path), " must be an absolute path or a scheme://location"));
    }
    // Through the storage seam: "mem://..." where this build serves it, a POSIX folder with its
    // symbolic links resolved, so that every later comparison with a root is exact.
    absl::StatusOr<std::string> canonical = Storage().Canonical(path);
    if (!canonical.ok()) {
      if (canonical.status().code() != absl::StatusCode::kNotFound) {
        return KeyError(source, "roots", std::string(canonical.status().message()));
      }
      return absl::NotFoundError(absl::StrCat(source, ": roots: ", QuoteForMessage(path), " does not exist"));
    }
    if (Storage().KindOrMissing(*canonical) != PathKind::kFolder) {
      return KeyError(source, "roots", absl::StrCat(QuoteForMessage(path), " is not a folder"));
    }
    config.roots.push_back(*std::move(canonical));
  }
  return absl::OkStatus();
}

// state_dir: an absolute path; it need not exist yet (the coordinator creates it).
absl::Status ParseStateDir(const YAML::Node& root, const std::string& source, NodeConfig& config) {
  if (!root["state_dir"]) return absl::OkStatus();
  ML_ASSIGN_OR_RETURN(config.state_dir, ScalarString(root["state_dir"], source, "state_dir"));
  if (config.state_dir.empty() || config.state_dir[0] != '/' || config.state_dir.size() > kMaxPathBytes ||
      config.state_dir.find('\0') != std::string::npos) {
    return KeyError(source, "state_dir",
                    absl::StrCat(QuoteForMessage(config.state_dir), " must be an absolute path of at most ",
                                 kMaxPathBytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ParsePathKey(const YAML::Node& n, const std::string& source,
                                         const std::string& key);

// registry_tls: {ca, cert, key}: TLS to etcd, its server certificate checked against `ca`, and
// with cert and key a client certificate (etcd's --client-cert-auth).
absl::Status ParseRegistryTls(const YAML::Node& root, const std::string& source, NodeConfig& config) {
  if (!root["registry_tls"]) return absl::OkStatus();
  const YAML::Node& tls = root["registry_tls"];
  if (!tls.IsMap())
    return KeyError(source, "registry_tls", "must be a mapping: {ca: FILE, cert: FILE, key: FILE}");
  for (const auto& entry : tls) {
    const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : "";
    std::string* field = key == "ca"     ? &config.registry_tls_ca
                         : key == "cert" ? &config.registry_tls_cert
                         : key == "key"  ? &config.registry_tls_key
                                         : nullptr;
    if (field == nullptr) {
      return KeyError(source, "registry_tls",
                      absl::StrCat(QuoteForMessage(key), ": unknown key (known: ca, cert, key)"));
    }
    ML_ASSIGN_OR_RETURN(*field, ParsePathKey(entry.second, source, absl::StrCat("registry_tls.", key)));
  }
  if (config.registry_tls_ca.empty()) {
    return KeyError(source, "registry_tls", "needs ca (the CA that signed etcd's certificate)");
  }
  if (config.registry_tls_cert.empty() != config.registry_tls_key.empty()) {
    return KeyError(source, "registry_tls", "needs both cert and key, or neither");
  }
  return absl::OkStatus();
}

// registry_auth: {user, password_file}: an etcd user (etcd's auth) and where its password is.
absl::Status ParseRegistryAuth(const YAML::Node& root, const std::string& source, NodeConfig& config) {
  if (!root["registry_auth"]) return absl::OkStatus();
  const YAML::Node& auth = root["registry_auth"];
  if (!auth.IsMap() || auth.size() != 2 || !auth["user"] || !auth["password_file"]) {
    return KeyError(source, "registry_auth", "must be a mapping: {user: NAME, password_file: FILE}");
  }
  ML_ASSIGN_OR_RETURN(config.registry_auth_user, ScalarString(auth["user"], source, "registry_auth.user"));
  if (config.registry_auth_user.empty() || config.registry_auth_user.size() > kMaxRegistryPrefixBytes ||
      config.registry_auth_user.find('\0') != std::string::npos) {
    return KeyError(source, "registry_auth.user",
                    absl::StrCat("must be an etcd user name of 1 to ", kMaxRegistryPrefixBytes, " bytes"));
  }
  ML_ASSIGN_OR_RETURN(config.registry_auth_password_file,
                      ParsePathKey(auth["password_file"], source, "registry_auth.password_file"));
  return absl::OkStatus();
}

// registry: etcd://host:port[,host:port...]; registry_prefix. With a registry every daemon is
// a peer: there is no coordinator to name, and no state_dir (etcd holds the models).
absl::Status ParseRegistry(const YAML::Node& root, const std::string& source, NodeConfig& config) {
  if (!root["registry"]) {
    for (const char* key : {"registry_prefix", "registry_max_record_size", "registry_tls", "registry_auth"}) {
      if (root[key]) return KeyError(source, key, "needs `registry: etcd://host:port`");
    }
    return absl::OkStatus();
  }
  ML_RETURN_IF_ERROR(ParseSizeKey(root, source, "registry_max_record_size", kMinRegistryRecordBytes,
                                  kMaxRegistryRecordBytes, "64KiB..1GiB", config.registry_max_record_bytes));
  ML_ASSIGN_OR_RETURN(std::string url, ScalarString(root["registry"], source, "registry"));
  constexpr absl::string_view kScheme = "etcd://";
  if (!absl::StartsWith(url, kScheme) || url.size() == kScheme.size()) {
    return KeyError(
        source, "registry",
        absl::StrCat(QuoteForMessage(url), " is not etcd://host:port[,host:port...] (the only registry ",
                     "besides the coordinator's own, which needs no key)"));
  }
  for (absl::string_view endpoint : absl::StrSplit(url.substr(kScheme.size()), ',')) {
    const std::string address(endpoint);
    if (address.empty())
      return KeyError(source, "registry", absl::StrCat("an empty endpoint in ", QuoteForMessage(url)));
    ML_RETURN_IF_ERROR(CheckConfigAddress(address, source, "registry"));
    if (absl::EndsWith(address, ":0")) {
      return KeyError(source, "registry", absl::StrCat("port 0 in \"", address, "\" is not etcd's port"));
    }
    config.registry_endpoints.push_back(address);
  }
  if (config.registry_endpoints.size() > static_cast<size_t>(kMaxRegistryEndpoints)) {
    return KeyError(
        source, "registry",
        absl::StrCat(config.registry_endpoints.size(), " endpoints; at most ", kMaxRegistryEndpoints));
  }
  if (root["registry_prefix"]) {
    ML_ASSIGN_OR_RETURN(config.registry_prefix,
                        ScalarString(root["registry_prefix"], source, "registry_prefix"));
    const std::string& prefix = config.registry_prefix;
    const bool printable =
        std::all_of(prefix.begin(), prefix.end(), [](char c) { return c > ' ' && c < 0x7f; });
    if (prefix.size() < 2 || prefix.front() != '/' || prefix.back() != '/' || !printable ||
        prefix.size() > kMaxRegistryPrefixBytes) {
      return KeyError(source, "registry_prefix",
                      absl::StrCat(QuoteForMessage(prefix), " must start and end with '/' and have at most ",
                                   kMaxRegistryPrefixBytes, " printable characters, no spaces"));
    }
  }
  ML_RETURN_IF_ERROR(ParseRegistryTls(root, source, config));
  ML_RETURN_IF_ERROR(ParseRegistryAuth(root, source, config));
  if (!config.coordinator.empty()) {
    return KeyError(
        source, "coordinator",
        "not with `registry`: with etcd every daemon is a peer and answers itself; remove `coordinator`");
  }
  if (!config.state_dir.empty()) {
    return KeyError(source, "state_dir",
                    "not with `registry`: etcd holds the registered models; remove `state_dir`");
  }
  return absl::OkStatus();
}

// An absolute path of at most kMaxPathBytes, for a file read at start.
absl::StatusOr<std::string> ParsePathKey(const YAML::Node& n, const std::string& source,
                                         const std::string& key) {
  ML_ASSIGN_OR_RETURN(std::string path, ScalarString(n, source, key));
  if (path.empty() || path[0] != '/' || path.size() > kMaxPathBytes || path.find('\0') != std::string::npos) {
    return KeyError(source, key,
                    absl::StrCat(QuoteForMessage(path), " must be an absolute path of at most ",
                                 kMaxPathBytes, " bytes"));
  }
  return path;
}

constexpr size_t kMaxPerRole = 1024;  // token files or certificate patterns of one role
constexpr size_t kMaxPatternBytes = 256;

// {reader: X, member: X, admin: X} where X is one value or a list of them, each checked by
// `parse`; appends (role, value) in the file's order.
absl::Status ParseRoleMap(
    const YAML::Node& map, const std::string& source, const std::string& key,
    const std::function<absl::StatusOr<std::string>(const YAML::Node&, const std::string&)>& parse,
    std::vector<std::pair<std::string, std::string>>& out) {
  if (!map.IsMap()) return KeyError(source, key, "must be a mapping: {reader: ..., member: ..., admin: ...}");
  for (const auto& entry : map) {
    const std::string role = entry.first.IsScalar() ? entry.first.Scalar() : "";
    if (role != "reader" && role != "member" && role != "admin") {
      return KeyError(source, key,
                      absl::StrCat(QuoteForMessage(role), ": unknown role (known: reader, member, admin)"));
    }
    const std::string role_key = absl::StrCat(key, ".", role);
    if (entry.second.IsSequence() && entry.second.size() > kMaxPerRole) {
      return KeyError(source, role_key, absl::StrCat("lists more than ", kMaxPerRole, " entries"));
    }
    std::vector<YAML::Node> values;
    if (entry.second.IsSequence()) {
      for (const YAML::Node& value : entry.second) values.push_back(value);
    } else {
      values.push_back(entry.second);
    }
    for (const YAML::Node& value : values) {
      ML_ASSIGN_OR_RETURN(std::string parsed, parse(value, role_key));
      out.emplace_back(role, std::move(parsed));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ParsePattern(const YAML::Node& n, const std::string& source,
                                         const std::string& key) {
  ML_ASSIGN_OR_RETURN(std::string pattern, ScalarString(n, source, key));
  if (pattern.empty() || pattern.size() > kMaxPatternBytes || pattern.find('\0') != std::string::npos) {
    return KeyError(source, key,
                    absl::StrCat(QuoteForMessage(pattern), " must be a certificate name pattern of 1 to ",
                                 kMaxPatternBytes, " bytes"));
  }
  return pattern;
}

// A file of auth_tokens: an absolute path whose file name names its holder, as
// "token:<role>:<file name>" in logs and in state_dir/members (security/server_security.h), so
// an identity (issue 35: "node b.token" made a binding that was not read back at restart).
std::function<absl::StatusOr<std::string>(const YAML::Node&, const std::string&)> ParseTokenFileKey(
    const std::string& source) {
  return [source](const YAML::Node& n, const std::string& key) -> absl::StatusOr<std::string> {
    ML_ASSIGN_OR_RETURN(std::string path, ParsePathKey(n, source, key));
    const std::string name = path.substr(path.rfind('/') + 1);
    if (absl::Status usable = CheckIdentityName("its file name", name); !usable.ok()) {
      return KeyError(source, key,
                      absl::StrCat(QuoteForMessage(path), ": ", usable.message(),
                                   " (it names the token's holder, token:<role>:<file name>, in logs and in "
                                   "state_dir): rename the file"));
    }
    return path;
  };
}

// tls: {cert, key, client_ca, ca, roles}, auth_token_file or auth_tokens, allow_insecure; and
// the rule that plaintext goes only over loopback unless allow_insecure says otherwise.
absl::Status ParseSecurity(const YAML::Node& root, const std::string& source, NodeConfig& config) {
  if (root["tls"]) {
    const YAML::Node& tls = root["tls"];
    if (!tls.IsMap())
      return KeyError(source, "tls", "must be a mapping: {cert: FILE, key: FILE, client_ca: FILE}");
    for (const auto& entry : tls) {
      const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : "";
      if (key == "roles") {
        config.tls_roles_set = true;
        ML_RETURN_IF_ERROR(ParseRoleMap(
            entry.second, source, "tls.roles",
            [&](const YAML::Node& n, const std::string& k) { return ParsePattern(n, source, k); },
            config.tls_roles));
        continue;
      }
      if (key == "node_certificate") {
        ML_ASSIGN_OR_RETURN(config.tls_node_certificate,
                            ParsePattern(entry.second, source, "tls.node_certificate"));
        const size_t at = config.tls_node_certificate.find("{node}");
        if (at == std::string::npos ||
            config.tls_node_certificate.find("{node}", at + 1) != std::string::npos) {
          return KeyError(
              source, "tls.node_certificate",
              absl::StrCat(QuoteForMessage(config.tls_node_certificate),
                           " must contain {node} once (\"{node}\", \"metad-{node}.example.com\")"));
        }
        // The name it makes is a member's identity, "cert:<name>", kept in state_dir.
        if (absl::Status usable = CheckIdentityName("the pattern", config.tls_node_certificate);
            !usable.ok()) {
          return KeyError(source, "tls.node_certificate", std::string(usable.message()));
        }
        continue;
      }
      std::string* field = key == "cert"        ? &config.tls_cert
                           : key == "key"       ? &config.tls_key
                           : key == "client_ca" ? &config.tls_client_ca
                           : key == "ca"        ? &config.tls_ca
                                                : nullptr;
      if (field == nullptr) {
        return KeyError(
            source, "tls",
            absl::StrCat(QuoteForMessage(key),
                         ": unknown key (known: cert, key, client_ca, ca, roles, node_certificate)"));
      }
      ML_ASSIGN_OR_RETURN(*field, ParsePathKey(entry.second, source, absl::StrCat("tls.", key)));
    }
    if (config.tls_cert.empty() || config.tls_key.empty()) {
      return KeyError(source, "tls",
                      "needs both cert and key (this daemon's certificate and its private key)");
    }
  }
  if (root["auth_token_file"]) {
    ML_ASSIGN_OR_RETURN(config.auth_token_file,
                        ParsePathKey(root["auth_token_file"], source, "auth_token_file"));
  }
  if (root["auth_tokens"]) {
    if (!config.auth_token_file.empty()) {
      return KeyError(source, "auth_tokens",
                      "excludes auth_token_file (one token with every role): keep one of them");
    }
    ML_RETURN_IF_ERROR(ParseRoleMap(root["auth_tokens"], source, "auth_tokens", ParseTokenFileKey(source),
                                    config.auth_tokens));
    if (config.auth_tokens.empty()) return KeyError(source, "auth_tokens", "names no token file");
  }
  if (config.tls_roles_set && config.tls_client_ca.empty()) {
    return KeyError(source, "tls.roles", "needs tls.client_ca: roles are read from client certificates");
  }
  ML_RETURN_IF_ERROR(ParseBoolKey(root, source, "allow_insecure", config.allow_insecure));
  ML_RETURN_IF_ERROR(ParseBoolKey(root, source, "require_digests", config.require_digests));
  const bool tokens = !config.auth_token_file.empty() || !config.auth_tokens.empty();
  // TLS encrypts, it does not say who the client is: off loopback, a daemon that neither asks
  // for client certificates nor for a token serves anyone who can reach it (issue 23: anonymous
  // clients joined with roots `/`, published and read).
  if (!config.tls_cert.empty() && config.tls_client_ca.empty() && !tokens && !config.allow_insecure &&
      !IsLoopbackAddress(config.listen)) {
    return KeyError(
        source, "tls",
        absl::StrCat("listen: ", config.listen,
                     " is not a loopback address, and `tls` has no client_ca and there is no "
                     "auth_token_file: anyone who can reach it could read the weights and join the "
                     "cluster. Set tls.client_ca (client certificates) or auth_token_file, or "
                     "allow_insecure: true on a network you trust (docs/security.md)"));
  }
  // etcd is dialed with registry_tls, not with `tls`.
  const bool plaintext_etcd = config.registry_tls_ca.empty();
  if (!config.tls_cert.empty() || config.allow_insecure) {
    for (const std::string& endpoint : config.registry_endpoints) {
      if (!config.allow_insecure && plaintext_etcd && !IsLoopbackAddress(endpoint)) {
        return KeyError(source, "registry",
                        absl::StrCat(endpoint,
                                     " is not a loopback address, and there is no `registry_tls`: set "
                                     "registry_tls: {ca, cert, key}, or allow_insecure: true on a trusted "
                                     "network (docs/security.md)"));
      }
    }
    return absl::OkStatus();
  }
  std::vector<std::pair<std::string, std::string>> dialed = {{"listen", config.listen}};
  if (!config.coordinator.empty()) dialed.push_back({"coordinator", config.coordinator});
  if (plaintext_etcd) {
    for (const std::string& endpoint : config.registry_endpoints) dialed.push_back({"registry", endpoint});
  }
  for (const auto& [key, address] : dialed) {
    if (!IsLoopbackAddress(address)) {
      return KeyError(
          source, key,
          absl::StrCat(address,
                       " is not a loopback address, and there is no `tls`: others on the network "
                       "could read the weights and forge calls. Set tls: {cert, key, client_ca} (and "
                       "auth_token_file), or allow_insecure: true on a network you trust "
                       "(docs/security.md)"));
    }
  }
  return absl::OkStatus();
}

// metrics_listen: host:port or `off`. The metrics port is plain HTTP (TLS on it is not
// implemented), so off loopback it needs allow_insecure, the rule `listen` follows without `tls`;
// a scrape then needs the daemon's token when it has tokens (daemon/metad_main.cc).
absl::Status ParseMetricsListen(const YAML::Node& root, const std::string& source, NodeConfig& config) {
  if (!root["metrics_listen"]) return absl::OkStatus();
  ML_ASSIGN_OR_RETURN(std::string address, ScalarString(root["metrics_listen"], source, "metrics_listen"));
  config.metrics_listen_set = true;
  if (address == "off") {
    config.metrics_listen.clear();
    return absl::OkStatus();
  }
  ML_RETURN_IF_ERROR(CheckConfigAddress(address, source, "metrics_listen"));
  if (address == config.listen && !absl::EndsWith(address, ":0")) {
    return KeyError(
        source, "metrics_listen",
        absl::StrCat(address, " is `listen`'s address too: the metrics need a port of their own"));
  }
  if (!IsLoopbackAddress(address) && !config.allow_insecure) {
    return KeyError(
        source, "metrics_listen",
        absl::StrCat(
            address,
            " is not a loopback address, and the metrics port is plain HTTP (no TLS): set "
            "allow_insecure: true on a network you trust (a scrape then needs the daemon's token when "
            "it has tokens), keep it on loopback, or set metrics_listen: off (docs/security.md)"));
  }
  config.metrics_listen = std::move(address);
  return absl::OkStatus();
}

}  // namespace

bool IsLoopbackAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  const std::string host = address.substr(0, colon == std::string::npos ? address.size() : colon);
  in_addr ipv4{};
  if (::inet_pton(AF_INET, host.c_str(), &ipv4) == 1) return (ntohl(ipv4.s_addr) >> 24) == 127;
  return host == "localhost" || host == "[::1]" || host == "::1";
}

absl::StatusOr<NodeConfig> ParseNodeConfig(const std::string& yaml_text, const std::string& source) {
  ML_ASSIGN_OR_RETURN(YAML::Node root, ParseMapping(yaml_text, source));
  NodeConfig config;
  config.source = source;
  ML_RETURN_IF_ERROR(ParseIdentity(root, source, config));
  ML_RETURN_IF_ERROR(ParseCapacities(root, source, config));
  ML_RETURN_IF_ERROR(ParseLimits(root, source, config));
  ML_RETURN_IF_ERROR(ParseS3(root, source, config));
  ML_RETURN_IF_ERROR(ParseRoots(root, source, config));
  ML_RETURN_IF_ERROR(ParseStateDir(root, source, config));
  ML_RETURN_IF_ERROR(ParseRegistry(root, source, config));
  ML_RETURN_IF_ERROR(ParseSecurity(root, source, config));
  ML_RETURN_IF_ERROR(ParseMetricsListen(root, source, config));
  ML_RETURN_IF_ERROR(ParseLogFormat(root, source, config));
  return config;
}

std::string AdvertisedAddress(const NodeConfig& config, int bound_port, const std::string& hostname) {
  if (!config.advertise.empty()) return config.advertise;
  std::string host = config.listen.substr(0, config.listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") host = hostname;
  return absl::StrCat(host, ":", bound_port);
}

absl::StatusOr<NodeConfig> LoadNodeConfig(const std::string& path) {
  // A node config is a few KiB: the cap keeps a wrong path (a weights file) from being read whole.
  constexpr uint64_t kMaxNodeConfigBytes = 1 << 20;
  absl::StatusOr<std::string> text = ReadSmallFile(path, kMaxNodeConfigBytes, "node config");
  // The reason (errno's text: "No such file or directory", "Permission denied") is in the message.
  if (!text.ok()) return Annotate(text.status(), "node config");
  return ParseNodeConfig(*text, path);
}

}  // namespace metaload
