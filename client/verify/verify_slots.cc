#include "client/verify/verify_slots.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace metaload {
namespace {

constexpr size_t kCountAt = 0;
constexpr size_t kFlagsAt = 8;
constexpr size_t kMatchedAt = 16;
constexpr size_t kSlicedAt = 24;
constexpr size_t kOnDeviceAt = 32;
constexpr size_t kDigestAt = 40;
constexpr size_t kLabelAt = kDigestAt + kDigestBytes;
constexpr size_t kTextAt = kLabelAt + kLabelBytes;
constexpr uint64_t kCouldNotLoad = 1;
constexpr uint64_t kHasDigests = 2;

void PutU64(uint8_t* at, uint64_t value) {
  for (size_t i = 0; i < 8; ++i) at[i] = static_cast<uint8_t>(value >> (8 * i));
}
uint64_t GetU64(const uint8_t* at) {
  uint64_t value = 0;
  for (size_t i = 0; i < 8; ++i) value |= static_cast<uint64_t>(at[i]) << (8 * i);
  return value;
}
// Copies at most `room` bytes of `text`; the field stays NUL-terminated unless full.
void PutText(uint8_t* at, size_t room, const std::string& text) {
  std::memcpy(at, text.data(), std::min(room, text.size()));
}
std::string GetText(const uint8_t* at, size_t room) {
  const char* text = reinterpret_cast<const char*>(at);
  return std::string(text, strnlen(text, room));
}

}  // namespace

void EncodeSlot(const RankReport& report, absl::Span<uint8_t> slot) {
  uint8_t* s = slot.data();
  PutU64(s + kCountAt, static_cast<uint64_t>(report.bad_tensor_count));
  PutU64(s + kFlagsAt, (report.could_not_load ? kCouldNotLoad : 0) | (report.has_digests ? kHasDigests : 0));
  PutU64(s + kMatchedAt, static_cast<uint64_t>(report.digest_matched_count));
  PutU64(s + kSlicedAt, static_cast<uint64_t>(report.digest_sliced_count));
  PutU64(s + kOnDeviceAt, static_cast<uint64_t>(report.digest_on_device_count));
  PutText(s + kDigestAt, kDigestBytes, report.plan_digest);
  PutText(s + kLabelAt, kLabelBytes - 1, report.plan_label);
  const size_t room = kSlotBytes - kTextAt - 1;
  std::string text;
  size_t written = 0;
  for (; written < report.findings.size(); ++written) {
    const std::string line = absl::StrCat(report.findings[written], "\n");
    if (text.size() + line.size() > room - 48) break;
    text += line;
  }
  if (written < report.findings.size()) {
    absl::StrAppend(&text, "... (", report.findings.size() - written, " more findings cut)\n");
  }
  PutText(s + kTextAt, room, text);
}

RankReport DecodeSlot(absl::Span<const uint8_t> slot) {
  const uint8_t* s = slot.data();
  RankReport report;
  report.bad_tensor_count = static_cast<int64_t>(GetU64(s + kCountAt));
  report.could_not_load = (GetU64(s + kFlagsAt) & kCouldNotLoad) != 0;
  report.has_digests = (GetU64(s + kFlagsAt) & kHasDigests) != 0;
  report.digest_matched_count = static_cast<int64_t>(GetU64(s + kMatchedAt));
  report.digest_sliced_count = static_cast<int64_t>(GetU64(s + kSlicedAt));
  report.digest_on_device_count = static_cast<int64_t>(GetU64(s + kOnDeviceAt));
  report.plan_digest = GetText(s + kDigestAt, kDigestBytes);
  report.plan_label = GetText(s + kLabelAt, kLabelBytes);
  for (absl::string_view line :
       absl::StrSplit(GetText(s + kTextAt, kSlotBytes - kTextAt), '\n', absl::SkipEmpty())) {
    report.findings.emplace_back(line);
  }
  return report;
}

}  // namespace metaload
