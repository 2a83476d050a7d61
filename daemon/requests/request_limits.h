// The limits on what one request (or a node's config) can make the daemon hold or compute,
// apart from request_checks.h so that code without protobuf (node_config.cc, its fuzz target)
// can use them.
#ifndef METALOAD_DAEMON_REQUESTS_REQUEST_LIMITS_H_
#define METALOAD_DAEMON_REQUESTS_REQUEST_LIMITS_H_

#include <cstddef>
#include <cstdint>

namespace metaload {

inline constexpr int kMaxGpusPerNode = 1024;
inline constexpr uint64_t kMaxGpuMemoryBytes = uint64_t{1} << 50;  // 1 PiB per GPU
inline constexpr int kMaxRootsPerNode = 64;
inline constexpr size_t kMaxRootsTotalBytes = 64 << 10;
inline constexpr int kMaxMembers = 4096;
// Hard caps: the node config's max_models and max_tensors_per_model (default 256 and 1M) may
// lower them, never raise them.
inline constexpr int kMaxModels = 1024;
inline constexpr int64_t kMaxModelTensors = 4'000'000;
inline constexpr size_t kMaxSkeletonJsonBytes = 48 << 20;  // under the default max_request_size, 64 MiB
// A model's config.json as registered (ModelRecord.hf_config_json): the largest transformers
// configs are tens of KiB; a record stays well under etcd's 1 MiB default request size.
inline constexpr size_t kMaxHfConfigJsonBytes = 256 << 10;

}  // namespace metaload

#endif  // METALOAD_DAEMON_REQUESTS_REQUEST_LIMITS_H_
