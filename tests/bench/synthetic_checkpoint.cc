#include "tests/bench/synthetic_checkpoint.h"

#include <utility>

#include "absl/strings/str_format.h"

namespace metaload::bench {

Checkpoint SyntheticCheckpoint(const Skeleton& skeleton, const std::string& dir, int shards) {
  const uint64_t per_shard = skeleton.total_size_bytes() / static_cast<uint64_t>(shards) + 1;
  Checkpoint checkpoint;
  checkpoint.dir = dir;
  int shard = 1;
  uint64_t offset = 0, in_shard = 0;
  for (const SkeletonTensor& t : skeleton.tensors) {
    if (!t.persistent) continue;
    if (in_shard >= per_shard && shard < shards) {
      ++shard;
      in_shard = 0;
      offset = 0;
    }
    TensorLayout layout;
    layout.name = t.name;
    layout.dtype = t.dtype;
    layout.shape = t.shape;
    layout.file = absl::StrFormat("model-%05d-of-%05d.safetensors", shard, shards);
    layout.begin_offset = 8 + 65536 + offset;  // the 8-byte length and a header
    layout.end_offset = layout.begin_offset + t.size_bytes();
    offset += t.size_bytes();
    in_shard += t.size_bytes();
    if (checkpoint.files.empty() || checkpoint.files.back() != layout.file)
      checkpoint.files.push_back(layout.file);
    checkpoint.tensors.push_back(std::move(layout));
  }
  checkpoint.BuildIndex();
  return checkpoint;
}

}  // namespace metaload::bench
