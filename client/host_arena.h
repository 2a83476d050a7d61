// One allocation for all of a CPU rank's tensors, advised for transparent huge pages.
//
// Reading a checkpoint that is already in the page cache into freshly allocated memory is
// bound by faulting the destination in 4 KiB at a time, not by the copy: on this project's
// 2-core VMs pread into new memory runs at 1-2 GB/s, into MADV_HUGEPAGE memory at ~7 GB/s
// (issue 5). LibTorch's CPU allocator gives neither the alignment nor the advice, so a
// rank carves its tensors out of one 2 MiB-aligned mapping instead.
//
//   ML_ASSIGN_OR_RETURN(HostArena arena, HostArena::Create(total_bytes));
//   at::Tensor t = arena.Tensor(offset, {4096, 4096}, at::kBFloat16);  // shares the mapping
//
// The mapping lives while any tensor made from it does (each holds a reference), so a
// caller may drop the arena as soon as its tensors exist.
#ifndef METALOAD_CLIENT_HOST_ARENA_H_
#define METALOAD_CLIENT_HOST_ARENA_H_

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

namespace metaload {

class HostArena {
 public:
  // Each tensor starts on this boundary (LibTorch's own CPU alignment is 64 bytes).
  static constexpr uint64_t kAlignBytes = 64;

  // ResourceExhausted naming the size when the mapping fails. A size of 0 is valid.
  static absl::StatusOr<HostArena> Create(uint64_t size_bytes);

  // Rounds `size_bytes` up to kAlignBytes: the arena bytes a tensor of that size takes.
  static uint64_t Padded(uint64_t size_bytes) { return (size_bytes + kAlignBytes - 1) / kAlignBytes * kAlignBytes; }

  // A CPU tensor of `shape` and `type` at `offset` (a multiple of kAlignBytes).
  // REQUIRES: offset + its bytes <= size_bytes().
  at::Tensor Tensor(uint64_t offset, const std::vector<int64_t>& shape, c10::ScalarType type) const;

  uint64_t size_bytes() const { return size_bytes_; }
  // Whether the kernel accepted the huge-page advice (false: THP disabled; still correct).
  bool huge_pages() const { return huge_pages_; }

 private:
  struct Mapping;
  HostArena(std::shared_ptr<Mapping> mapping, uint64_t size_bytes, bool huge_pages)
      : mapping_(std::move(mapping)), size_bytes_(size_bytes), huge_pages_(huge_pages) {}
  std::shared_ptr<Mapping> mapping_;
  uint64_t size_bytes_ = 0;
  bool huge_pages_ = false;
};

}  // namespace metaload

#endif  // METALOAD_CLIENT_HOST_ARENA_H_
