// One allocation for all of a CPU rank's tensors, optionally advised for transparent huge
// pages.
//
// Reading a checkpoint that is already in the page cache into freshly allocated memory is
// bound by faulting the destination in, not by the copy. On bare metal, 2 MiB pages
// (MADV_HUGEPAGE) fault ~500x less often and reads into them run several times faster. On
// this project's Firecracker VMs the opposite was measured (issue 5's closing note): freed
// memory goes back to the host (free page reporting), and a fresh process's first touch of
// huge pages paid 0.46-0.78 GB/s against 1.3-1.6 GB/s for 4 KiB pages. So the advice is
// opt-in (`metactl load --huge-pages`). One 2 MiB-aligned mapping either way: the rank's
// resident memory grows by its shard's bytes and nothing else.
//
//   ML_ASSIGN_OR_RETURN(HostArena arena, HostArena::Create(total_bytes, /*huge_pages=*/false));
//   at::Tensor t = arena.Tensor(offset, {4096, 4096}, at::kBFloat16);  // shares the mapping
//
// The mapping lives while any tensor made from it does (each holds a reference), so a
// caller may drop the arena as soon as its tensors exist.
#ifndef METALOAD_CLIENT_LOAD_HOST_ARENA_H_
#define METALOAD_CLIENT_LOAD_HOST_ARENA_H_

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
  // `huge_pages`: advise MADV_HUGEPAGE (ignored where THP is disabled).
  static absl::StatusOr<HostArena> Create(uint64_t size_bytes, bool huge_pages);

  // Rounds `size_bytes` up to kAlignBytes: the arena bytes a tensor of that size takes.
  static uint64_t Padded(uint64_t size_bytes) {
    return (size_bytes + kAlignBytes - 1) / kAlignBytes * kAlignBytes;
  }

  // A CPU tensor of `shape` and `type` at `offset` (a multiple of kAlignBytes).
  // REQUIRES: offset + its bytes <= size_bytes().
  at::Tensor Tensor(uint64_t offset, const std::vector<int64_t>& shape, c10::ScalarType type) const;

  uint64_t size_bytes() const { return size_bytes_; }
  // Whether huge pages were asked for and the kernel accepted the advice.
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

#endif  // METALOAD_CLIENT_LOAD_HOST_ARENA_H_
