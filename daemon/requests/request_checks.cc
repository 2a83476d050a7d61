#include "daemon/requests/request_checks.h"

#include "absl/strings/str_cat.h"
#include "planner/format/dtype.h"
#include "planner/format/tensor_layout.h"
#include "planner/skeleton/init_policy.h"
#include "util/fs/location.h"
#include "util/identifiers.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace metaload {
namespace {

absl::Status Invalid(absl::string_view what) { return absl::InvalidArgumentError(std::string(what)); }

absl::Status CheckLocation(const v1::TensorLocation& t, int index) {
  const std::string where = absl::StrCat("tensors[", index, "]");
  if (t.name().empty() || t.name().size() > kMaxPathBytes) {
    return Invalid(absl::StrCat(where, ": name ", QuoteForMessage(t.name()), " must have 1 to ",
                                kMaxPathBytes, " bytes"));
  }
  const std::string named = absl::StrCat(where, " (", QuoteForMessage(t.name()), ")");
  absl::StatusOr<DType> dtype = DTypeFromCode(t.dtype());
  if (!dtype.ok()) return Invalid(absl::StrCat(named, ": dtype ", QuoteForMessage(t.dtype()), " is unknown"));
  if (t.shape_size() > 64)
    return Invalid(absl::StrCat(named, ": ", t.shape_size(), " dimensions (at most 64)"));
  uint64_t bytes = 0;
  if (!TensorBytesFit(absl::MakeConstSpan(t.shape().data(), t.shape_size()), *dtype, &bytes)) {
    return Invalid(absl::StrCat(named, ": shape has a negative dimension or 2^63 bytes or more"));
  }
  if (t.end_offset() < t.begin_offset() || t.end_offset() - t.begin_offset() != bytes) {
    return Invalid(absl::StrCat(named, ": byte range [", t.begin_offset(), ", ", t.end_offset(),
                                ") does not hold ", bytes, " bytes"));
  }
  if (t.has_digest()) {
    absl::StatusOr<DigestKind> kind = ParseDigestKind(t.digest().kind());
    if (!kind.ok()) return Invalid(absl::StrCat(named, ": ", kind.status().message()));
    const TensorDigest digest{*kind, t.digest().tile_bytes(), t.digest().lanes()};
    if (absl::Status bad = CheckTensorDigest(digest, {t.shape().begin(), t.shape().end()}, *dtype);
        !bad.ok()) {
      return Invalid(absl::StrCat(named, ": ", bad.message()));
    }
  }
  return CheckNormalRelativePath(absl::StrCat(named, ": file"), t.file());
}

}  // namespace

absl::Status CheckNodeInfo(const v1::NodeInfo& node) {
  ML_RETURN_IF_ERROR(CheckName("node name", node.name()));
  const std::string who = absl::StrCat("node ", node.name());
  ML_RETURN_IF_ERROR(CheckAddress(absl::StrCat(who, ": address"), node.address()));
  if (node.gpu_count() < 0 || node.gpu_count() > kMaxGpusPerNode) {
    return Invalid(absl::StrCat(who, ": gpu_count ", node.gpu_count(), " is outside 0..", kMaxGpusPerNode));
  }
  if (node.gpu_memory_bytes() > kMaxGpuMemoryBytes) {
    return Invalid(absl::StrCat(who, ": gpu_memory_bytes ", node.gpu_memory_bytes(), " is above 1 PiB"));
  }
  if (node.roots_size() > kMaxRootsPerNode) {
    return Invalid(absl::StrCat(who, ": ", node.roots_size(), " roots (at most ", kMaxRootsPerNode, ")"));
  }
  size_t total = 0;
  for (const std::string& root : node.roots()) {
    total += root.size();
    if (total > kMaxRootsTotalBytes) {
      return Invalid(absl::StrCat(who, ": roots hold more than ", kMaxRootsTotalBytes, " bytes together"));
    }
    ML_RETURN_IF_ERROR(CheckNormalLocation(absl::StrCat(who, ": root"), root));
  }
  return absl::OkStatus();
}

absl::Status CheckModelRecord(const v1::ModelRecord& record) {
  ML_RETURN_IF_ERROR(CheckName("model name", record.name()));
  const std::string who = absl::StrCat("model ", record.name());
  ML_RETURN_IF_ERROR(CheckNormalLocation(absl::StrCat(who, ": checkpoint_dir"), record.checkpoint_dir()));
  if (record.skeleton_json().size() > kMaxSkeletonJsonBytes) {
    return Invalid(absl::StrCat(who, ": skeleton of ", record.skeleton_json().size(), " bytes (at most ",
                                kMaxSkeletonJsonBytes, ")"));
  }
  if (record.hf_config_json().size() > kMaxHfConfigJsonBytes) {
    return Invalid(absl::StrCat(who, ": config.json of ", record.hf_config_json().size(), " bytes (at most ",
                                kMaxHfConfigJsonBytes, ")"));
  }
  if (record.tensors_size() > kMaxModelTensors) {
    return Invalid(
        absl::StrCat(who, ": ", record.tensors_size(), " tensors (at most ", kMaxModelTensors, ")"));
  }
  for (int i = 0; i < record.tensors_size(); ++i) {
    ML_RETURN_IF_ERROR(Annotate(CheckLocation(record.tensors(i), i), who));
  }
  ML_RETURN_IF_ERROR(CheckName(absl::StrCat(who, ": registered_on"), record.registered_on()));
  absl::StatusOr<InitPolicy> policy = ParseInitPolicy(record.init_missing());
  if (!policy.ok()) return Annotate(policy.status(), who);
  return absl::OkStatus();
}

absl::Status CheckRegisterModelRequest(const v1::RegisterModelRequest& request) {
  ML_RETURN_IF_ERROR(CheckName("model name", request.name()));
  // A relative path would mean the daemon's working folder, not the sender's; a location of
  // another scheme is read by that scheme's storage back end (util/fs/location.h).
  if (request.checkpoint_dir().empty() || request.checkpoint_dir().size() > kMaxPathBytes ||
      !IsAbsoluteLocation(request.checkpoint_dir())) {
    return Invalid(absl::StrCat("checkpoint ", QuoteForMessage(request.checkpoint_dir()),
                                " must be an absolute path or a scheme://location of at most ", kMaxPathBytes,
                                " bytes"));
  }
  if (request.skeleton_json().size() > kMaxSkeletonJsonBytes) {
    return Invalid(absl::StrCat("skeleton of ", request.skeleton_json().size(), " bytes (at most ",
                                kMaxSkeletonJsonBytes, ")"));
  }
  if (!request.digest_kind().empty()) ML_RETURN_IF_ERROR(ParseDigestKind(request.digest_kind()).status());
  return ParseInitPolicy(request.init_missing()).status();
}

absl::Status CheckGetPlanRequest(const v1::GetPlanRequest& request) {
  if (request.model().empty() || request.model().size() > kMaxNameBytes) {
    return Invalid(absl::StrCat("model name ", QuoteForMessage(request.model()), " must have 1 to ",
                                kMaxNameBytes, " characters"));
  }
  if (request.world_size() < 0 || request.world_size() > kMaxWorldSize) {
    return Invalid(absl::StrCat("world size ", request.world_size(), " is outside 0..", kMaxWorldSize,
                                " (0: every GPU slot of the cluster)"));
  }
  if (request.tp() < 0 || request.tp() > kMaxWorldSize || request.pp() < 0 || request.pp() > kMaxWorldSize) {
    return Invalid(
        absl::StrCat("tp ", request.tp(), " and pp ", request.pp(), " must be in 0..", kMaxWorldSize));
  }
  if (request.strategy().size() > kMaxNameBytes || request.dtype().size() > kMaxNameBytes) {
    return Invalid(absl::StrCat("strategy ", QuoteForMessage(request.strategy()), " or dtype ",
                                QuoteForMessage(request.dtype()), " is unknown"));
  }
  if (request.has_rank() && (request.rank() < 0 || request.rank() >= kMaxWorldSize)) {
    return Invalid(absl::StrCat("rank ", request.rank(), " is outside 0..", kMaxWorldSize - 1));
  }
  return absl::OkStatus();
}

}  // namespace metaload
