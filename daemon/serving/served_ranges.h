// The bytes a daemon may serve of one registered model (issue 13 §2): per checkpoint file, by
// its absolute path, the byte ranges of the model's tensors, neighbours and overlaps merged (a
// rank coalesces adjacent tensors into one read). A ReadRange is served only when every byte it
// asks for lies inside them: not a `.env` beside the weights, not a safetensors header.
//
//   ServedRanges served("llama", checkpoint);
//   ML_RETURN_IF_ERROR(served.Check("/models/llama/model.safetensors", runs));
//
// Immutable once built; safe to share between threads.
#ifndef METALOAD_DAEMON_SERVING_SERVED_RANGES_H_
#define METALOAD_DAEMON_SERVING_SERVED_RANGES_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "planner/format/checkpoint.h"
#include "util/strided_runs.h"

namespace metaload {

class ServedRanges {
 public:
  ServedRanges() = default;  // serves nothing
  // Every tensor of `checkpoint`, by checkpoint.dir + "/" + its file. `model` names it in errors.
  ServedRanges(std::string model, const Checkpoint& checkpoint);

  // OK when `path` is a file of the model and every byte of `runs` lies inside its tensors
  // (no runs: the file alone is asked about). PermissionDenied naming the path otherwise: a file
  // the model does not hold, or the first run with a byte outside its tensors, or one that ends
  // past 2^64 (the runs come from a request: every sum and product is checked).
  absl::Status Check(const std::string& path, const StridedRuns& runs) const;

  const std::string& model() const { return model_; }

 private:
  std::string model_;
  // Per path, disjoint [begin, end) byte ranges, sorted, none touching the next.
  std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> files_;
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_SERVING_SERVED_RANGES_H_
