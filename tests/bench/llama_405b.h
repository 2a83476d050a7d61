// A Llama-3.1-405B-shaped model for benchmarks, with no bytes on disk: the skeleton
// transformers builds from the model's config.json (126 layers, hidden 16384, 128 heads, 8
// key/value heads, intermediate 53248, vocab 128256, bf16), and a checkpoint layout of 191
// shards as the published checkpoint has, tensors in model order, each shard about 4.3 GB.
#ifndef METALOAD_TESTS_BENCH_LLAMA_405B_H_
#define METALOAD_TESTS_BENCH_LLAMA_405B_H_

#include <string>

#include "planner/format/checkpoint.h"
#include "planner/skeleton/skeleton.h"

namespace metaload::bench {

Skeleton Llama405BSkeleton();
// Every persistent tensor of `skeleton` laid out in 191 shards under `dir` (not created).
Checkpoint Llama405BCheckpoint(const Skeleton& skeleton, const std::string& dir);

}  // namespace metaload::bench

#endif  // METALOAD_TESTS_BENCH_LLAMA_405B_H_
