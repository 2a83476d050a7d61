#include "util/fs/s3/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace metaload {
namespace {

std::string Hex(const uint8_t* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return out;
}

std::array<uint8_t, 32> Hmac(absl::string_view key, absl::string_view data) {
  std::array<uint8_t, 32> out{};
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const uint8_t*>(data.data()),
       data.size(), out.data(), &n);
  return out;
}

absl::string_view AsView(const std::array<uint8_t, 32>& bytes) {
  return absl::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// A header value as SigV4 canonicalizes it: trimmed, each run of spaces one space.
std::string TrimAll(absl::string_view value) {
  std::string out;
  for (char c : absl::StripAsciiWhitespace(value)) {
    if (c == ' ' && !out.empty() && out.back() == ' ') continue;
    out.push_back(c);
  }
  return out;
}

// (lower-case name, canonical value), sorted by name, several values of a name joined by ','.
std::vector<std::pair<std::string, std::string>> CanonicalHeaders(
    const std::vector<std::pair<std::string, std::string>>& headers) {
  std::vector<std::pair<std::string, std::string>> lowered;
  for (const auto& [name, value] : headers) lowered.emplace_back(absl::AsciiStrToLower(name), TrimAll(value));
  std::stable_sort(lowered.begin(), lowered.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<std::string, std::string>> merged;
  for (auto& [name, value] : lowered) {
    if (!merged.empty() && merged.back().first == name) {
      absl::StrAppend(&merged.back().second, ",", value);
    } else {
      merged.emplace_back(std::move(name), std::move(value));
    }
  }
  return merged;
}

}  // namespace

std::string UriEncode(absl::string_view bytes, bool keep_slash) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(bytes.size());
  for (char c : bytes) {
    const auto byte = static_cast<unsigned char>(c);
    if (absl::ascii_isalnum(byte) || c == '-' || c == '.' || c == '_' || c == '~' ||
        (keep_slash && c == '/')) {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kDigits[byte >> 4]);
      out.push_back(kDigits[byte & 15]);
    }
  }
  return out;
}

std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  for (const auto& [key, value] : query) encoded.emplace_back(UriEncode(key, false), UriEncode(value, false));
  std::sort(encoded.begin(), encoded.end());
  return absl::StrJoin(
      encoded, "&", [](std::string* out, const auto& kv) { absl::StrAppend(out, kv.first, "=", kv.second); });
}

std::string SignedHeaders(const std::vector<std::pair<std::string, std::string>>& headers) {
  return absl::StrJoin(CanonicalHeaders(headers), ";",
                       [](std::string* out, const auto& kv) { out->append(kv.first); });
}

std::string CanonicalRequest(const SigV4Request& request) {
  std::string out = absl::StrCat(request.method, "\n", UriEncode(request.path, true), "\n",
                                 CanonicalQuery(request.query), "\n");
  for (const auto& [name, value] : CanonicalHeaders(request.headers))
    absl::StrAppend(&out, name, ":", value, "\n");
  absl::StrAppend(&out, "\n", SignedHeaders(request.headers), "\n", request.payload_sha256_hex);
  return out;
}

std::string CredentialScope(absl::string_view amz_date, absl::string_view region, absl::string_view service) {
  return absl::StrCat(amz_date.substr(0, 8), "/", region, "/", service, "/aws4_request");
}

std::string StringToSign(absl::string_view amz_date, absl::string_view scope,
                         absl::string_view canonical_request) {
  return absl::StrCat("AWS4-HMAC-SHA256\n", amz_date, "\n", scope, "\n", Sha256HexOf(canonical_request));
}

std::array<uint8_t, 32> SigningKey(absl::string_view secret_access_key, absl::string_view date,
                                   absl::string_view region, absl::string_view service) {
  std::string first = absl::StrCat("AWS4", secret_access_key);
  const std::array<uint8_t, 32> date_key = Hmac(first, date);
  std::fill(first.begin(), first.end(), '\0');  // the secret lives no longer than it must
  return Hmac(AsView(Hmac(AsView(Hmac(AsView(date_key), region)), service)), "aws4_request");
}

std::string Signature(const std::array<uint8_t, 32>& signing_key, absl::string_view string_to_sign) {
  const std::array<uint8_t, 32> mac = Hmac(AsView(signing_key), string_to_sign);
  return Hex(mac.data(), mac.size());
}

std::string Authorization(const SigV4Request& request, const SigV4Keys& keys, absl::string_view region,
                          absl::string_view service) {
  std::string amz_date;
  for (const auto& [name, value] : request.headers) {
    if (absl::EqualsIgnoreCase(name, "x-amz-date")) amz_date = value;
  }
  const std::string scope = CredentialScope(amz_date, region, service);
  const std::string to_sign = StringToSign(amz_date, scope, CanonicalRequest(request));
  const std::string signature =
      Signature(SigningKey(keys.secret_access_key, amz_date.substr(0, 8), region, service), to_sign);
  return absl::StrCat("AWS4-HMAC-SHA256 Credential=", keys.access_key_id, "/", scope,
                      ", SignedHeaders=", SignedHeaders(request.headers), ", Signature=", signature);
}

std::string Sha256HexOf(absl::string_view bytes) {
  uint8_t digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), digest);
  return Hex(digest, sizeof(digest));
}

}  // namespace metaload
