#include "proto/plan_wire.h"

namespace metaload {
namespace {

constexpr uint32_t kVarint = 0, kLengthDelimited = 2;
// ReadItem.size_bytes and ReadItem.slice; TensorSlice's fields.
constexpr uint32_t kItemSizeField = 4, kItemSliceField = 10;
constexpr uint32_t kSliceDimField = 1, kSliceStartField = 2, kSliceLengthField = 3;

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>(value | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

}  // namespace

void AppendVarintField(uint32_t field, uint64_t value, std::string* out) {
  AppendVarint((static_cast<uint64_t>(field) << 3) | kVarint, out);
  AppendVarint(value, out);
}

void AppendLengthDelimitedField(uint32_t field, absl::string_view bytes, std::string* out) {
  AppendVarint((static_cast<uint64_t>(field) << 3) | kLengthDelimited, out);
  AppendVarint(bytes.size(), out);
  out->append(bytes.data(), bytes.size());
}

void AppendSlicedItem(absl::string_view whole_item, uint64_t size_bytes, int32_t slice_dim, int64_t slice_start,
                      int64_t slice_length, std::string* out) {
  std::string extra;
  AppendVarintField(kItemSizeField, size_bytes, &extra);
  if (slice_dim >= 0) {
    // int32/int64 fields encode as their two's complement varint; these are never negative.
    std::string slice;
    AppendVarintField(kSliceDimField, static_cast<uint64_t>(slice_dim), &slice);
    AppendVarintField(kSliceStartField, static_cast<uint64_t>(slice_start), &slice);
    AppendVarintField(kSliceLengthField, static_cast<uint64_t>(slice_length), &slice);
    AppendLengthDelimitedField(kItemSliceField, slice, &extra);
  }
  AppendVarint((static_cast<uint64_t>(kRankItemsField) << 3) | kLengthDelimited, out);
  AppendVarint(whole_item.size() + extra.size(), out);
  out->append(whole_item.data(), whole_item.size());
  out->append(extra);
}

}  // namespace metaload
