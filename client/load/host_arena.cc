#include "client/load/host_arena.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "util/error_kind.h"
#include "util/units.h"

namespace metaload {
namespace {

constexpr uint64_t kHugePageBytes = 2ull << 20;

}  // namespace

struct HostArena::Mapping {
  void* base = nullptr;
  uint64_t length = 0;
  ~Mapping() {
    if (base != nullptr) ::munmap(base, length);
  }
};

absl::StatusOr<HostArena> HostArena::Create(uint64_t size_bytes, bool huge_pages) {
  auto mapping = std::make_shared<Mapping>();
  if (size_bytes == 0) return HostArena(std::move(mapping), 0, false);
  // Whole huge pages, so the last one is not left to 4 KiB faults.
  uint64_t length = 0;
  if (AddOverflows(size_bytes, kHugePageBytes - 1, &length)) {
    return WithErrorKind(
        absl::ResourceExhaustedError(absl::StrCat("cannot map ", size_bytes, " bytes for tensors")),
        ErrorKind::kFailure);
  }
  length = length / kHugePageBytes * kHugePageBytes;
  // Over-map by one huge page and trim, so the start is 2 MiB aligned (mmap only promises 4 KiB).
  void* raw =
      ::mmap(nullptr, length + kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    return WithErrorKind(absl::ResourceExhaustedError(
                             absl::StrCat("cannot map ", FormatBytes(size_bytes),
                                          " of host memory for this rank's tensors: ", std::strerror(errno))),
                         ErrorKind::kFailure);
  }
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (aligned > start) ::munmap(raw, aligned - start);
  const uintptr_t end = start + length + kHugePageBytes;
  if (end > aligned + length) ::munmap(reinterpret_cast<void*>(aligned + length), end - (aligned + length));
  mapping->base = reinterpret_cast<void*>(aligned);
  mapping->length = length;
  const bool huge = huge_pages && ::madvise(mapping->base, length, MADV_HUGEPAGE) == 0;
  return HostArena(std::move(mapping), size_bytes, huge);
}

at::Tensor HostArena::Tensor(uint64_t offset, const std::vector<int64_t>& shape, c10::ScalarType type) const {
  auto* data = static_cast<uint8_t*>(mapping_->base) + offset;
  // The deleter holds the mapping: the arena's memory lives as long as its last tensor.
  std::shared_ptr<Mapping> keep = mapping_;
  return torch::from_blob(
      data, shape, [keep](void*) mutable { keep.reset(); },
      torch::TensorOptions().dtype(type).device(torch::kCPU));
}

}  // namespace metaload
