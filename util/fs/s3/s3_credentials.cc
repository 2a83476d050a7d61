#include "util/fs/s3/s3_credentials.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace metaload {
namespace {

constexpr size_t kMaxKeyBytes = 4096;  // session tokens run to ~2 KB; keys to 128

using Ini = std::map<std::string, std::map<std::string, std::string>>;

// The file's text; "" with found false when it does not exist. Bounded: a device or a huge
// file named by mistake is refused, not read.
absl::StatusOr<std::string> ReadBounded(const std::string& path, bool* found) {
  *found = false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return std::string();
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) > kMaxAwsFileBytes) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file of at most ", kMaxAwsFileBytes, " bytes"));
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(done);
  *found = true;
  return text;
}

// A key, secret or token: printable ASCII without spaces, 1..kMaxKeyBytes.
bool ValidKey(absl::string_view value) {
  if (value.empty() || value.size() > kMaxKeyBytes) return false;
  for (char c : value) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

// A region: letters, digits, '-', at most 64.
bool ValidRegion(absl::string_view value) {
  if (value.empty() || value.size() > 64) return false;
  for (char c : value) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
  }
  return true;
}

struct Keys {
  std::string id, secret, token, source;
};

// The keys in `section` of `ini`; none (empty id) when it has neither key. InvalidArgument when
// only one of them is there or either is malformed, naming the file and section only.
absl::StatusOr<Keys> KeysIn(const Ini& ini, const std::string& section, const std::string& origin) {
  auto it = ini.find(section);
  if (it == ini.end()) return Keys{};
  const auto& values = it->second;
  auto get = [&](const char* key) {
    auto v = values.find(key);
    return v == values.end() ? std::string() : v->second;
  };
  Keys keys{get("aws_access_key_id"), get("aws_secret_access_key"), get("aws_session_token"),
            absl::StrCat(origin, " [", section, "]")};
  if (keys.id.empty() && keys.secret.empty()) return Keys{};
  if (!ValidKey(keys.id) || !ValidKey(keys.secret) || (!keys.token.empty() && !ValidKey(keys.token))) {
    return absl::InvalidArgumentError(
        absl::StrCat(keys.source,
                     ": aws_access_key_id and aws_secret_access_key must both be set, printable ASCII "
                     "without spaces, at most ",
                     kMaxKeyBytes, " bytes (and aws_session_token, if set)"));
  }
  return keys;
}

}  // namespace

absl::StatusOr<Ini> ParseAwsIni(absl::string_view text, absl::string_view origin) {
  Ini ini;
  std::string section;
  bool in_section = false;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    for (char c : line) {
      if (c == '\0')
        return absl::InvalidArgumentError(absl::StrCat(origin, ":", line_number, ": a NUL byte"));
    }
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      if (line.back() != ']' || line.size() < 3) {
        return absl::InvalidArgumentError(
            absl::StrCat(origin, ":", line_number, ": a section header without ']'"));
      }
      section = std::string(absl::StripAsciiWhitespace(line.substr(1, line.size() - 2)));
      in_section = true;
      ini[section];
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) {
      // The CLI's nested settings ("s3 =" then indented lines) are values of a key: skip them.
      continue;
    }
    if (!in_section) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ":", line_number, ": a setting before any [section]"));
    }
    const std::string key = absl::AsciiStrToLower(absl::StripAsciiWhitespace(line.substr(0, eq)));
    ini[section][key] = std::string(absl::StripAsciiWhitespace(line.substr(eq + 1)));
  }
  return ini;
}

absl::StatusOr<std::string> NormalEndpoint(absl::string_view url, absl::string_view origin) {
  absl::string_view rest = url;
  std::string scheme;
  if (absl::ConsumePrefix(&rest, "http://")) {
    scheme = "http";
  } else if (absl::ConsumePrefix(&rest, "https://")) {
    scheme = "https";
  }
  absl::ConsumeSuffix(&rest, "/");
  const absl::string_view host =
      rest.substr(0, rest.rfind(':') == absl::string_view::npos ? rest.size() : rest.rfind(':'));
  bool valid = !scheme.empty() && !host.empty() && rest.size() <= 255;
  for (char c : rest) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != ':' && c != '[' &&
        c != ']') {
      valid = false;
    }
  }
  if (valid && host.size() < rest.size()) {
    uint32_t port = 0;
    valid = absl::SimpleAtoi(rest.substr(host.size() + 1), &port) && port > 0 && port < 65536;
  }
  if (!valid) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin,
        ": an S3 endpoint is http(s)://host[:port] with no path, user or query (at most 255 characters)"));
  }
  return absl::StrCat(scheme, "://", rest);
}

absl::StatusOr<S3Settings> LoadS3Settings(const S3SettingsSources& sources) {
  auto env = [&](const char* name) -> std::string {
    const char* value = sources.getenv ? sources.getenv(name) : std::getenv(name);
    return value == nullptr ? std::string() : std::string(value);
  };
  const std::string home = sources.home.empty() ? env("HOME") : sources.home;
  std::string profile = env("AWS_PROFILE");
  if (profile.empty()) profile = "default";
  if (profile.size() > 128) return absl::InvalidArgumentError("AWS_PROFILE: at most 128 characters");

  auto load = [&](const std::string& path, Ini* ini, bool* found) -> absl::Status {
    absl::StatusOr<std::string> text = ReadBounded(path, found);
    if (!text.ok()) return text.status();
    if (!*found) return absl::OkStatus();
    absl::StatusOr<Ini> parsed = ParseAwsIni(*text, path);
    if (!parsed.ok()) return parsed.status();
    *ini = *std::move(parsed);
    return absl::OkStatus();
  };

  std::string config_path = env("AWS_CONFIG_FILE");
  if (config_path.empty() && !home.empty()) config_path = absl::StrCat(home, "/.aws/config");
  Ini config;
  bool config_found = false;
  if (!config_path.empty()) {
    if (absl::Status s = load(config_path, &config, &config_found); !s.ok()) return s;
  }
  const std::string config_section = profile == "default" ? "default" : absl::StrCat("profile ", profile);
  auto config_value = [&](const char* key) {
    auto section = config.find(config_section);
    if (section == config.end()) return std::string();
    auto v = section->second.find(key);
    return v == section->second.end() ? std::string() : v->second;
  };

  S3Settings settings;
  Keys keys;
  if (!sources.credentials_file.empty()) {
    Ini credentials;
    bool found = false;
    if (absl::Status s = load(sources.credentials_file, &credentials, &found); !s.ok()) return s;
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat(sources.credentials_file, ": no such file"));
    }
    absl::StatusOr<Keys> in = KeysIn(credentials, profile, sources.credentials_file);
    if (!in.ok()) return in.status();
    if (in->id.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(sources.credentials_file, ": no aws_access_key_id in [", profile, "]"));
    }
    keys = *std::move(in);
  } else if (!env("AWS_ACCESS_KEY_ID").empty() || !env("AWS_SECRET_ACCESS_KEY").empty()) {
    keys = Keys{env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY"), env("AWS_SESSION_TOKEN"),
                "AWS_ACCESS_KEY_ID"};
    if (!ValidKey(keys.id) || !ValidKey(keys.secret) || (!keys.token.empty() && !ValidKey(keys.token))) {
      return absl::InvalidArgumentError(
          absl::StrCat("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must both be set, printable ASCII "
                       "without spaces, at most ",
                       kMaxKeyBytes, " bytes (and AWS_SESSION_TOKEN, if set)"));
    }
  } else {
    std::string shared = env("AWS_SHARED_CREDENTIALS_FILE");
    if (shared.empty() && !home.empty()) shared = absl::StrCat(home, "/.aws/credentials");
    if (!shared.empty()) {
      Ini credentials;
      bool found = false;
      if (absl::Status s = load(shared, &credentials, &found); !s.ok()) return s;
      absl::StatusOr<Keys> in = KeysIn(credentials, profile, shared);
      if (!in.ok()) return in.status();
      keys = *std::move(in);
    }
    if (keys.id.empty() && config_found) {
      absl::StatusOr<Keys> in = KeysIn(config, config_section, config_path);
      if (!in.ok()) return in.status();
      keys = *std::move(in);
    }
  }
  if (keys.id.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or aws_access_key_id and "
        "aws_secret_access_key in profile ",
        profile, " of ~/.aws/credentials (AWS_SHARED_CREDENTIALS_FILE)"));
  }
  settings.access_key_id = std::move(keys.id);
  settings.secret_access_key = std::move(keys.secret);
  settings.session_token = std::move(keys.token);
  settings.source = std::move(keys.source);

  std::string region_origin = "AWS_REGION";
  settings.region = env("AWS_REGION");
  if (settings.region.empty())
    settings.region = env("AWS_DEFAULT_REGION"), region_origin = "AWS_DEFAULT_REGION";
  if (settings.region.empty()) {
    settings.region = config_value("region"),
    region_origin = absl::StrCat(config_path, " [", config_section, "]");
  }
  if (settings.region.empty()) settings.region = "us-east-1";
  if (!ValidRegion(settings.region)) {
    return absl::InvalidArgumentError(
        absl::StrCat(region_origin, ": a region is letters, digits and '-', at most 64 characters"));
  }

  std::string endpoint = env("AWS_ENDPOINT_URL_S3"), endpoint_origin = "AWS_ENDPOINT_URL_S3";
  if (endpoint.empty()) endpoint = env("AWS_ENDPOINT_URL"), endpoint_origin = "AWS_ENDPOINT_URL";
  if (endpoint.empty()) {
    endpoint = config_value("endpoint_url"),
    endpoint_origin = absl::StrCat(config_path, " [", config_section, "]");
  }
  if (endpoint.empty()) endpoint = absl::StrCat("https://s3.", settings.region, ".amazonaws.com");
  absl::StatusOr<std::string> normal = NormalEndpoint(endpoint, endpoint_origin);
  if (!normal.ok()) return normal.status();
  settings.endpoint = *std::move(normal);
  return settings;
}

}  // namespace metaload
