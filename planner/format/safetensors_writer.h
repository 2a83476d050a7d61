// Writing safetensors files and sharded checkpoints (for tests, the demo, `metactl synth`).
// Output is byte-compatible with the safetensors library: header keys sorted, header padded
// with spaces to a multiple of 8 bytes, data in header order.
#ifndef METALOAD_PLANNER_FORMAT_SAFETENSORS_WRITER_H_
#define METALOAD_PLANNER_FORMAT_SAFETENSORS_WRITER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "planner/format/dtype.h"

namespace metaload {

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  // Fills `out` (exactly the tensor's byte size) with the tensor's bytes. Called once,
  // while writing, so a multi-GB checkpoint never needs to be held in memory.
  std::function<void(absl::Span<uint8_t> out)> fill;
};

// Writes one file atomically (temporary name, then rename).
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// Writes tensors, in the given order, into shards of at most `max_shard_bytes` of data each
// (a tensor larger than that gets a shard of its own), named like Hugging Face's
// "model-00001-of-00003.safetensors", plus model.safetensors.index.json with
// metadata.total_size and weight_map. With one shard, writes model.safetensors and no index.
absl::Status WriteShardedCheckpoint(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                                    uint64_t max_shard_bytes);

}  // namespace metaload

#endif  // METALOAD_PLANNER_FORMAT_SAFETENSORS_WRITER_H_
