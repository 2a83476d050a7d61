#include "util/fs/s3/s3_xml.h"

#include <functional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace metaload {
namespace {

constexpr size_t kMaxDepth = 16;
constexpr size_t kMaxElements = 20000;
constexpr size_t kMaxTextBytes = 8192;

absl::Status Malformed(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("malformed S3 response: ", what));
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Text with its references replaced.
absl::Status Unescape(absl::string_view raw, std::string* out) {
  out->clear();
  while (!raw.empty()) {
    const size_t amp = raw.find('&');
    const absl::string_view plain = raw.substr(0, amp);
    out->append(plain.data(), plain.size());
    if (amp == absl::string_view::npos) break;
    raw.remove_prefix(amp + 1);
    const size_t semi = raw.find(';');
    if (semi == absl::string_view::npos || semi > 10) return Malformed("an unterminated reference");
    const absl::string_view name = raw.substr(0, semi);
    raw.remove_prefix(semi + 1);
    if (name == "amp") {
      out->push_back('&');
    } else if (name == "lt") {
      out->push_back('<');
    } else if (name == "gt") {
      out->push_back('>');
    } else if (name == "quot") {
      out->push_back('"');
    } else if (name == "apos") {
      out->push_back('\'');
    } else if (absl::StartsWith(name, "#")) {
      uint32_t cp = 0;
      const bool hex = absl::StartsWith(name, "#x");
      const absl::string_view digits = name.substr(hex ? 2 : 1);
      const bool parsed =
          !digits.empty() && (hex ? absl::SimpleHexAtoi(digits, &cp) : absl::SimpleAtoi(digits, &cp));
      if (!parsed || cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        return Malformed("a character reference out of range");
      }
      AppendUtf8(cp, out);
    } else {
      return Malformed("an unknown entity");
    }
  }
  return absl::OkStatus();
}

// Calls on_close(path, text) for every element as it closes; path is the names from the root
// joined by '/', text the element's own unescaped text (children's not included).
absl::Status Walk(
    absl::string_view body,
    const std::function<absl::Status(const std::string& path, const std::string& text)>& on_close) {
  if (body.size() > kMaxS3XmlBytes) return Malformed(absl::StrCat("more than ", kMaxS3XmlBytes, " bytes"));
  std::vector<std::string> names, texts;
  size_t elements = 0;
  bool root_closed = false;
  size_t at = 0;
  while (at < body.size()) {
    const size_t lt = body.find('<', at);
    const absl::string_view between =
        body.substr(at, lt == absl::string_view::npos ? body.size() - at : lt - at);
    if (!names.empty()) {
      if (texts.back().size() + between.size() > kMaxTextBytes)
        return Malformed("an element's text is too long");
      texts.back().append(between.data(), between.size());
    } else if (!absl::StripAsciiWhitespace(between).empty()) {
      return Malformed("text outside the root element");
    }
    if (lt == absl::string_view::npos) break;
    absl::string_view rest = body.substr(lt);
    if (absl::StartsWith(rest, "<?")) {
      const size_t end = rest.find("?>");
      if (end == absl::string_view::npos) return Malformed("an unterminated declaration");
      at = lt + end + 2;
      continue;
    }
    if (absl::StartsWith(rest, "<!--")) {
      const size_t end = rest.find("-->");
      if (end == absl::string_view::npos) return Malformed("an unterminated comment");
      at = lt + end + 3;
      continue;
    }
    if (absl::StartsWith(rest, "<!")) return Malformed("a DOCTYPE or CDATA section");
    const size_t gt = rest.find('>');
    if (gt == absl::string_view::npos || rest.substr(1, gt).find('<') != absl::string_view::npos) {
      return Malformed("an unterminated tag");
    }
    absl::string_view tag = rest.substr(1, gt - 1);
    at = lt + gt + 1;
    if (absl::ConsumePrefix(&tag, "/")) {
      tag = absl::StripTrailingAsciiWhitespace(tag);
      if (names.empty() || names.back() != tag) return Malformed("a closing tag that matches no open one");
      std::string text;
      if (absl::Status s = Unescape(texts.back(), &text); !s.ok()) return s;
      const std::string path = absl::StrJoin(names, "/");
      if (absl::Status s = on_close(path, text); !s.ok()) return s;
      names.pop_back();
      texts.pop_back();
      if (names.empty()) root_closed = true;
      continue;
    }
    const bool self_closing = absl::ConsumeSuffix(&tag, "/");
    const absl::string_view name = tag.substr(0, tag.find_first_of(" \t\r\n"));
    if (name.empty() || name.size() > 64) return Malformed("an element name that is empty or too long");
    if (root_closed || (names.empty() && elements > 0)) return Malformed("more than one root element");
    if (++elements > kMaxElements) return Malformed(absl::StrCat("more than ", kMaxElements, " elements"));
    if (names.size() >= kMaxDepth) return Malformed(absl::StrCat("deeper than ", kMaxDepth, " levels"));
    names.emplace_back(name);
    texts.emplace_back();
    if (self_closing) {
      if (absl::Status s = on_close(absl::StrJoin(names, "/"), ""); !s.ok()) return s;
      names.pop_back();
      texts.pop_back();
      if (names.empty()) root_closed = true;
    }
  }
  if (!names.empty() || !root_closed) return Malformed("the document ends inside an element, or has none");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<S3ListPage> ParseListObjectsV2(absl::string_view body, absl::string_view prefix) {
  S3ListPage page;
  S3ObjectEntry entry;
  bool has_key = false, has_size = false, saw_root = false;
  absl::Status walked = Walk(body, [&](const std::string& path, const std::string& text) -> absl::Status {
    if (path == "ListBucketResult") {
      saw_root = true;
    } else if (path == "ListBucketResult/Contents/Key") {
      entry.key = text, has_key = true;
    } else if (path == "ListBucketResult/Contents/Size") {
      if (!absl::SimpleAtoi(text, &entry.size_bytes) || text.empty() || !absl::ascii_isdigit(text[0])) {
        return Malformed("an object size that is no decimal 64-bit count");
      }
      has_size = true;
    } else if (path == "ListBucketResult/Contents") {
      if (!has_key || !has_size) return Malformed("an object without Key or Size");
      if (!absl::StartsWith(entry.key, prefix) || entry.key.size() > 1024) {
        return Malformed("an object key outside the prefix listed, or longer than 1024 bytes");
      }
      page.objects.push_back(std::move(entry));
      entry = S3ObjectEntry{};
      has_key = has_size = false;
    } else if (path == "ListBucketResult/CommonPrefixes/Prefix") {
      if (!absl::StartsWith(text, prefix) || text.size() > 1024) {
        return Malformed("a common prefix outside the prefix listed, or longer than 1024 bytes");
      }
      page.common_prefixes.push_back(text);
    } else if (path == "ListBucketResult/IsTruncated") {
      if (text != "true" && text != "false") return Malformed("IsTruncated neither true nor false");
      page.truncated = text == "true";
    } else if (path == "ListBucketResult/NextContinuationToken") {
      if (text.empty() || text.size() > 1024)
        return Malformed("a continuation token empty or over 1024 bytes");
      page.next_continuation_token = text;
    }
    if (page.objects.size() + page.common_prefixes.size() > kMaxS3ListEntries) {
      return Malformed(absl::StrCat("more than ", kMaxS3ListEntries, " entries in one page"));
    }
    return absl::OkStatus();
  });
  if (!walked.ok()) return walked;
  if (!saw_root) return Malformed("no <ListBucketResult>");
  if (page.truncated && page.next_continuation_token.empty()) {
    return Malformed("a truncated page without NextContinuationToken");
  }
  if (!page.truncated) page.next_continuation_token.clear();
  return page;
}

S3ErrorBody ParseS3Error(absl::string_view body) {
  S3ErrorBody error;
  auto printable = [](const std::string& text) {
    std::string out;
    for (char c : text.substr(0, 200)) out.push_back(c >= ' ' && c <= '~' ? c : '?');
    return out;
  };
  absl::Status walked = Walk(body, [&](const std::string& path, const std::string& text) -> absl::Status {
    if (path == "Error/Code") error.code = printable(text);
    if (path == "Error/Message") error.message = printable(text);
    return absl::OkStatus();
  });
  if (!walked.ok()) return S3ErrorBody{};
  return error;
}

}  // namespace metaload
