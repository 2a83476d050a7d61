#include "proto/plan_wire.h"

#include <cstring>

namespace metaload {
namespace {

constexpr uint32_t kVarint = 0, kLengthDelimited = 2;
// ReadItem.size_bytes and ReadItem.slice; TensorSlice's fields.
constexpr uint32_t kItemSizeField = 4, kItemSliceField = 10;
constexpr uint32_t kSliceDimField = 1, kSliceStartField = 2, kSliceLengthField = 3;

size_t VarintSize(uint64_t value) {
  size_t n = 1;
  for (; value >= 0x80; value >>= 7) ++n;
  return n;
}

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

size_t LengthDelimitedFieldSize(uint32_t field, size_t n) {
  return VarintSize((static_cast<uint64_t>(field) << 3) | kLengthDelimited) + VarintSize(n) + n;
}

void AppendLengthDelimitedHeader(uint32_t field, size_t n, std::string* out) {
  AppendVarint((static_cast<uint64_t>(field) << 3) | kLengthDelimited, out);
  AppendVarint(n, out);
}

ItemTail SlicedItemTail(uint64_t size_bytes, int32_t slice_dim, int64_t slice_start, int64_t slice_length) {
  // At most 11 + 2 + (11 + 11 + 11 + 3) bytes: the fixed buffer always holds it.
  std::string tail;
  AppendVarintField(kItemSizeField, size_bytes, &tail);
  if (slice_dim >= 0) {
    // int32/int64 fields encode as their two's complement varint; these are never negative.
    std::string slice;
    AppendVarintField(kSliceDimField, static_cast<uint64_t>(slice_dim), &slice);
    AppendVarintField(kSliceStartField, static_cast<uint64_t>(slice_start), &slice);
    AppendVarintField(kSliceLengthField, static_cast<uint64_t>(slice_length), &slice);
    AppendLengthDelimitedField(kItemSliceField, slice, &tail);
  }
  ItemTail out;
  out.size = tail.size();
  std::memcpy(out.bytes, tail.data(), tail.size());
  return out;
}

void AppendSlicedItem(absl::string_view whole_item, const ItemTail& tail, std::string* out) {
  AppendLengthDelimitedHeader(kRankItemsField, whole_item.size() + tail.size, out);
  out->append(whole_item.data(), whole_item.size());
  out->append(tail.bytes, tail.size);
}

}  // namespace metaload
