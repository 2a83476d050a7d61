// The daemon's skeletons as LibTorch meta tensors: shapes and dtypes, no storage. A
// 405B-parameter model costs the store kilobytes per tensor of bookkeeping, not 810 GB.
// This header is torch-free so gRPC code can use the store without LibTorch's headers.
//
// Thread-safety: all methods may be called concurrently.
#ifndef METALOAD_DAEMON_REGISTRATION_META_TENSOR_STORE_H_
#define METALOAD_DAEMON_REGISTRATION_META_TENSOR_STORE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "planner/skeleton/skeleton.h"

namespace metaload {

struct MetaModelSummary {
  int64_t tensor_count = 0;       // tensors held
  int64_t meta_tensor_count = 0;  // of which on the meta device (all of them)
  uint64_t nominal_bytes = 0;     // what they would take with data (sum of nbytes())
};

class MetaTensorStore {
 public:
  MetaTensorStore();
  ~MetaTensorStore();
  // Builds (or replaces) the model's meta tensors. Internal if LibTorch refuses a dtype.
  absl::Status Put(const std::string& model, const Skeleton& skeleton);
  // Put of the skeleton `skeleton_json` holds (a record's): ParseSkeletonJson's errors, naming
  // `model`, too.
  absl::Status PutJson(const std::string& model, const std::string& skeleton_json);
  void Remove(const std::string& model);  // nothing when unknown
  // false when the model is unknown. Cheap: the summary is computed by Put.
  bool Summarize(const std::string& model, MetaModelSummary* out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_REGISTRATION_META_TENSOR_STORE_H_
