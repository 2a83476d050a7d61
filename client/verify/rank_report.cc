#include "client/verify/rank_report.h"

#include <algorithm>
#include <cstring>

namespace metaload {
namespace {

constexpr size_t kCountAt = 0;
constexpr size_t kFlagsAt = 8;
constexpr size_t kCheckedAt = 16;
constexpr size_t kUnprovenAt = 24;
constexpr size_t kTableSlotsAt = 32;
constexpr size_t kTableKindAt = 40;
constexpr size_t kInitializedAt = 48;
constexpr size_t kDetailsAt = 56;
constexpr size_t kCutAt = 64;
constexpr size_t kDigestAt = 72;
constexpr size_t kLabelAt = kDigestAt + kDigestBytes;
constexpr size_t kComputedAt = kLabelAt + kLabelBytes;
constexpr size_t kMismatchAt = kComputedAt + 8;
static_assert(kMismatchAt + 8 <= kHeaderBytes);
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

// Details: records of a kind byte ('F' a finding: tensor then why; 'U' an unproven tensor, the
// same; 'S' a summary line), each string a 4-byte little-endian length and its bytes.
void PutString(std::string* out, const std::string& s) {
  const uint32_t n = static_cast<uint32_t>(std::min<size_t>(s.size(), UINT32_MAX));
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(n >> (8 * i)));
  out->append(s.data(), n);
}

class Reader {
 public:
  explicit Reader(absl::Span<const uint8_t> bytes) : bytes_(bytes) {}
  bool More() const { return at_ < bytes_.size(); }
  bool Byte(uint8_t* b) {
    if (at_ >= bytes_.size()) return false;
    *b = bytes_[at_++];
    return true;
  }
  bool String(std::string* s) {
    if (bytes_.size() - at_ < 4) return false;
    uint64_t n = 0;
    for (int i = 0; i < 4; ++i) n |= static_cast<uint64_t>(bytes_[at_ + i]) << (8 * i);
    at_ += 4;
    if (n > bytes_.size() - at_) return false;  // a length past the end: the rest is dropped
    s->assign(reinterpret_cast<const char*>(bytes_.data() + at_), n);
    at_ += n;
    return true;
  }

 private:
  absl::Span<const uint8_t> bytes_;
  size_t at_ = 0;
};

}  // namespace

void SetTableOf(RankReport& report) {
  report.table_slots = 0;
  report.table_kind = 0;
  report.has_digests = false;
  for (const TensorProof& p : report.proofs) {
    if (p.index < 0) continue;
    report.table_slots = std::max(report.table_slots, p.index + 1);
    if (!p.digest.has_value()) continue;
    report.has_digests = true;
    const int64_t kind = static_cast<int64_t>(p.digest->kind);
    if (report.table_kind == 0) report.table_kind = kind;
    if (report.table_kind != kind) report.table_kind = kMixedKinds;
  }
}

std::string EncodeDetails(const RankReport& report, uint64_t limit, int64_t* cut) {
  std::string out;
  for (const std::string& line : report.summary) {
    if (out.size() + 5 + line.size() > limit) break;
    out.push_back('S');
    PutString(&out, line);
  }
  *cut = 0;
  for (const auto& [kind, list] : {std::pair<char, const std::vector<Finding>*>{'F', &report.findings},
                                   std::pair<char, const std::vector<Finding>*>{'U', &report.unproven}}) {
    for (const Finding& f : *list) {
      if (out.size() + 9 + f.tensor.size() + f.why.size() > limit) {
        ++*cut;
        continue;
      }
      out.push_back(kind);
      PutString(&out, f.tensor);
      PutString(&out, f.why);
    }
  }
  return out;
}

void DecodeDetails(absl::Span<const uint8_t> details, RankReport* report) {
  Reader in(details);
  uint8_t kind = 0;
  while (in.More() && in.Byte(&kind)) {
    if (kind == 'S') {
      std::string line;
      if (!in.String(&line)) return;
      report->summary.push_back(std::move(line));
    } else if (kind == 'F' || kind == 'U') {
      Finding f;
      if (!in.String(&f.tensor) || !in.String(&f.why)) return;
      (kind == 'F' ? report->findings : report->unproven).push_back(std::move(f));
    } else {
      return;  // not something a rank writes: the rest is not trusted either
    }
  }
}

void EncodeHeader(const RankReport& report, uint64_t details_bytes, absl::Span<uint8_t> header) {
  uint8_t* s = header.data();
  PutU64(s + kCountAt, static_cast<uint64_t>(report.bad_tensor_count));
  PutU64(s + kFlagsAt, (report.could_not_load ? kCouldNotLoad : 0) | (report.has_digests ? kHasDigests : 0));
  PutU64(s + kCheckedAt, static_cast<uint64_t>(report.checked_count));
  PutU64(s + kUnprovenAt, static_cast<uint64_t>(report.unproven_count));
  PutU64(s + kTableSlotsAt, static_cast<uint64_t>(report.table_slots));
  PutU64(s + kTableKindAt, static_cast<uint64_t>(report.table_kind));
  PutU64(s + kInitializedAt, static_cast<uint64_t>(report.initialized_count));
  PutU64(s + kComputedAt, static_cast<uint64_t>(report.computed_count));
  PutU64(s + kMismatchAt, static_cast<uint64_t>(report.mismatch_count));
  PutU64(s + kDetailsAt, details_bytes);
  PutU64(s + kCutAt, static_cast<uint64_t>(report.findings_cut));
  PutText(s + kDigestAt, kDigestBytes, report.plan_digest);
  PutText(s + kLabelAt, kLabelBytes - 1, report.plan_label);
}

RankReport DecodeHeader(absl::Span<const uint8_t> header, uint64_t* details_bytes) {
  const uint8_t* s = header.data();
  RankReport report;
  report.bad_tensor_count = static_cast<int64_t>(GetU64(s + kCountAt));
  report.could_not_load = (GetU64(s + kFlagsAt) & kCouldNotLoad) != 0;
  report.has_digests = (GetU64(s + kFlagsAt) & kHasDigests) != 0;
  report.checked_count = static_cast<int64_t>(GetU64(s + kCheckedAt));
  report.unproven_count = static_cast<int64_t>(GetU64(s + kUnprovenAt));
  report.table_slots = static_cast<int64_t>(GetU64(s + kTableSlotsAt));
  report.table_kind = static_cast<int64_t>(GetU64(s + kTableKindAt));
  report.initialized_count = static_cast<int64_t>(GetU64(s + kInitializedAt));
  report.computed_count = static_cast<int64_t>(GetU64(s + kComputedAt));
  report.mismatch_count = static_cast<int64_t>(GetU64(s + kMismatchAt));
  *details_bytes = GetU64(s + kDetailsAt);
  report.findings_cut = static_cast<int64_t>(GetU64(s + kCutAt));
  report.plan_digest = GetText(s + kDigestAt, kDigestBytes);
  report.plan_label = GetText(s + kLabelAt, kLabelBytes);
  return report;
}

}  // namespace metaload
