#include "client/verify/nccl_allreduce.h"

#include <cstring>

#include "absl/strings/str_cat.h"

#ifdef METALOAD_WITH_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace metaload {

#ifdef METALOAD_WITH_CUDA
namespace {

absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}
absl::Status NcclStatus(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(what, ": ", ncclGetErrorString(result)));
}

}  // namespace

absl::Status NcclCheckDevice(int device_index) {
  int devices = 0;
  // With no GPU (or no driver) this fails, and `devices` must not be read.
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    return absl::FailedPreconditionError("NCCL verification needs a CUDA device, and none is visible");
  }
  if (device_index < 0 || device_index >= devices) {
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL verification on CUDA device ", device_index, ", but ", devices, " are visible"));
  }
  return CudaStatus(cudaSetDevice(device_index), "cudaSetDevice");
}

namespace {

// `count` elements of `type` at `data` (`bytes` long) summed across ranks in place.
absl::Status NcclSumRaw(void* data, size_t bytes, size_t count, ncclDataType_t type, int rank, int world_size,
                        int device_index,
                        const std::function<absl::Status(const std::string&, const std::string&)>& publish,
                        const std::function<absl::StatusOr<std::string>(const std::string&)>& fetch) {
  absl::Status s = NcclCheckDevice(device_index);
  if (!s.ok()) return s;
  ncclUniqueId id;
  if (rank == 0) {
    s = NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId");
    if (!s.ok()) return s;
    s = publish("nccl_id", std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
    if (!s.ok()) return s;
  } else {
    absl::StatusOr<std::string> fetched = fetch("nccl_id");
    if (!fetched.ok()) return fetched.status();
    if (fetched->size() != sizeof(id))
      return absl::DataLossError("NCCL unique id from the store has the wrong size");
    std::memcpy(&id, fetched->data(), sizeof(id));
  }
  ncclComm_t comm = nullptr;
  s = NcclStatus(ncclCommInitRank(&comm, world_size, id, rank), "ncclCommInitRank");
  if (!s.ok()) return s;
  void* buffer = nullptr;
  s = CudaStatus(cudaMalloc(&buffer, bytes), "cudaMalloc");
  if (s.ok()) s = CudaStatus(cudaMemcpy(buffer, data, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  if (s.ok())
    s = NcclStatus(ncclAllReduce(buffer, buffer, count, type, ncclSum, comm, nullptr), "ncclAllReduce");
  if (s.ok()) s = CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  if (s.ok()) s = CudaStatus(cudaMemcpy(data, buffer, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (buffer != nullptr) cudaFree(buffer);
  ncclCommDestroy(comm);
  return s;
}

}  // namespace

absl::Status NcclSumBytes(absl::Span<uint8_t> data, int rank, int world_size, int device_index,
                          const std::function<absl::Status(const std::string&, const std::string&)>& publish,
                          const std::function<absl::StatusOr<std::string>(const std::string&)>& fetch) {
  return NcclSumRaw(data.data(), data.size(), data.size(), ncclUint8, rank, world_size, device_index, publish,
                    fetch);
}

absl::Status NcclSumInt64(absl::Span<int64_t> data, int rank, int world_size, int device_index,
                          const std::function<absl::Status(const std::string&, const std::string&)>& publish,
                          const std::function<absl::StatusOr<std::string>(const std::string&)>& fetch) {
  return NcclSumRaw(data.data(), data.size() * sizeof(int64_t), data.size(), ncclInt64, rank, world_size,
                    device_index, publish, fetch);
}

#else

absl::Status NcclCheckDevice(int) {
  return absl::UnimplementedError("metaload was built without the CUDA toolkit's NCCL");
}

absl::Status NcclSumBytes(absl::Span<uint8_t>, int, int, int,
                          const std::function<absl::Status(const std::string&, const std::string&)>&,
                          const std::function<absl::StatusOr<std::string>(const std::string&)>&) {
  return absl::UnimplementedError("metaload was built without the CUDA toolkit's NCCL");
}

absl::Status NcclSumInt64(absl::Span<int64_t>, int, int, int,
                          const std::function<absl::Status(const std::string&, const std::string&)>&,
                          const std::function<absl::StatusOr<std::string>(const std::string&)>&) {
  return absl::UnimplementedError("metaload was built without the CUDA toolkit's NCCL");
}

#endif

}  // namespace metaload
