// A checkpoint layout with no bytes on disk, for benchmarks: every persistent tensor of a
// skeleton in model order, packed into consecutive shards of about equal size, as Hugging Face
// releases are split ("model-00001-of-00191.safetensors"), each tensor after an 8-byte length
// and a 64 KiB header.
#ifndef METALOAD_TESTS_BENCH_SYNTHETIC_CHECKPOINT_H_
#define METALOAD_TESTS_BENCH_SYNTHETIC_CHECKPOINT_H_

#include <string>

#include "planner/format/checkpoint.h"
#include "planner/skeleton/skeleton.h"

namespace metaload::bench {

// `shards` files under `dir` (not created); a shard closes once it holds total / shards bytes.
// REQUIRES: shards >= 1.
Checkpoint SyntheticCheckpoint(const Skeleton& skeleton, const std::string& dir, int shards);

}  // namespace metaload::bench

#endif  // METALOAD_TESTS_BENCH_SYNTHETIC_CHECKPOINT_H_
