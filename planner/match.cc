#include "planner/match.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/tensor_layout.h"

namespace metaload {

MatchReport MatchSkeleton(const Skeleton& skeleton, const Checkpoint& checkpoint) {
  MatchReport report;
  absl::flat_hash_set<std::string> in_skeleton;
  for (const SkeletonTensor& t : skeleton.tensors) {
    in_skeleton.insert(t.name);
    if (!t.persistent) continue;
    const TensorLayout* stored = checkpoint.Find(t.name);
    if (stored == nullptr) {
      report.missing.push_back(t.name);
      continue;
    }
    TensorMismatch mismatch{t.name, t.shape, stored->shape, t.dtype, stored->dtype};
    if (stored->shape != t.shape) {
      report.shape_mismatches.push_back(std::move(mismatch));
    } else if (stored->dtype != t.dtype) {
      report.dtype_mismatches.push_back(std::move(mismatch));
    }
  }
  for (const TensorLayout& stored : checkpoint.tensors) {
    if (!in_skeleton.contains(stored.name)) report.unexpected.push_back(stored.name);
  }
  return report;
}

absl::Status MatchToStatus(const MatchReport& report, const std::string& model_name) {
  if (!report.WouldStayMeta()) return absl::OkStatus();
  constexpr size_t kMaxNamed = 20;
  std::vector<std::string> findings;
  for (const std::string& name : report.missing) {
    findings.push_back(absl::StrCat(name, " is in the skeleton but not in the checkpoint"));
  }
  for (const TensorMismatch& m : report.shape_mismatches) {
    findings.push_back(absl::StrCat(m.name, " has shape ", ShapeToString(m.skeleton_shape),
                                    " in the skeleton but ", ShapeToString(m.checkpoint_shape),
                                    " in the checkpoint"));
  }
  size_t total = findings.size();
  if (total > kMaxNamed) {
    findings.resize(kMaxNamed);
    findings.push_back(absl::StrCat("and ", total - kMaxNamed, " more"));
  }
  return absl::FailedPreconditionError(absl::StrCat("model ", model_name, ": ", total,
                                                    total == 1 ? " tensor" : " tensors",
                                                    " would stay on meta: ", absl::StrJoin(findings, "; ")));
}

}  // namespace metaload
