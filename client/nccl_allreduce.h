// One NCCL all-reduce (sum of bytes) among CUDA ranks, for verification. Compiled against
// the CUDA toolkit's NCCL when it is found; otherwise every call returns Unimplemented.
// Kept apart from verify.cc so NCCL/CUDA headers stay out of the LibTorch translation units.
#ifndef METALOAD_CLIENT_NCCL_ALLREDUCE_H_
#define METALOAD_CLIENT_NCCL_ALLREDUCE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace metaload {

// `publish`/`fetch` exchange the NCCL unique id through the rendezvous store (fetch
// blocks until the key exists). `data` is summed in place across ranks on `device_index`.
absl::Status NcclSumBytes(absl::Span<uint8_t> data, int rank, int world_size, int device_index,
                          const std::function<void(const std::string&, const std::string&)>& publish,
                          const std::function<std::string(const std::string&)>& fetch);

}  // namespace metaload

#endif  // METALOAD_CLIENT_NCCL_ALLREDUCE_H_
