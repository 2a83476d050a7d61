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
inline constexpr size_t kMaxRootsTotalBytes = 64 << 10;  // one member's roots together
inline constexpr int kMaxMembers = 4096;
// Every member's roots together, on one coordinator: 256 members at kMaxRootsTotalBytes, ~80k of
// a few roots each. Before, 4,000 made-up members held 256 MB of roots (issue 35).
inline constexpr uint64_t kMaxMemberRootsBytes = 16 << 20;
// A GetStatus answer lists at most this many members, and this many bytes of their names,
// addresses and roots (each of its two lists), then counts the rest: one reader costs the
// coordinator a bounded copy whatever the table holds (issue 35: 4,000 members with 64 KB of
// roots each made one answer of 514 MB, 6.6 s and 1.4 GiB).
inline constexpr size_t kMaxStatusMembers = 1024;
inline constexpr uint64_t kMaxStatusMemberBytes = 1 << 20;
// Node names one identity may hold on a coordinator by default (node config max_names_per_identity).
inline constexpr int kDefaultNamesPerIdentity = 4;
// Hard caps: the node config's max_models and max_tensors_per_model (default 256 and 1M) may
// lower them, never raise them.
inline constexpr int kMaxModels = 1024;
inline constexpr int64_t kMaxModelTensors = 4'000'000;
inline constexpr size_t kMaxSkeletonJsonBytes = 48 << 20;  // under the default max_request_size, 64 MiB
// A model's config.json as registered (ModelRecord.hf_config_json): the largest transformers
// configs are tens of KiB; a record stays well under etcd's 1 MiB default request size.
inline constexpr size_t kMaxHfConfigJsonBytes = 256 << 10;

// The largest message a daemon takes (gRPC's receive limit, whatever max_request_size says):
// every request but RegisterModel's and PublishModel's is kilobytes (the largest a Join with
// 64 KiB of roots); those two come as uploads of pieces under this (proto/upload.h).
inline constexpr size_t kMaxMessageBytes = 128 << 10;
// Every piece of an upload but the last carries at least this many bytes, so that a request of
// max_request_size is at most max_request_size / 4 KiB + 1 pieces (each piece is a reaction).
inline constexpr size_t kMinUploadPieceBytes = 4 << 10;
// What uploads in flight may hold together, in max_request_size: two of the largest at once, as
// many as the registration queue works on.
inline constexpr uint64_t kUploadBytesPerMaxRequest = 2;
// Uploads in flight at once, and from one client (its identity where it names one holder, else
// its host).
inline constexpr uint32_t kMaxUploads = 32;
inline constexpr uint32_t kMaxUploadsPerClient = 8;
// An upload must be whole within idle_stream_timeout and its declared length at this rate
// (before its first piece: max_request_size's), else it is cancelled (issue 35: uploads trickling
// a piece just under the idle timeout held every slot for good).
inline constexpr uint64_t kMinUploadBytesPerSecond = 1 << 20;

}  // namespace metaload

#endif  // METALOAD_DAEMON_REQUESTS_REQUEST_LIMITS_H_
