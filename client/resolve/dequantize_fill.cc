#include "client/resolve/dequantize_fill.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/resolve/dequantize.h"
#include "libtorch/torch_glue.h"
#include "planner/plan/quant_boxes.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

constexpr uint64_t kBatchCodeBytes = uint64_t{256} << 20;

struct Job {
  size_t request = 0;
  const QuantizedValue* value = nullptr;
  TensorBox box;  // of the value
  std::optional<TensorBox> code_box, scale_box;
};

TensorBox Whole(const std::vector<int64_t>& shape) {
  return TensorBox{std::vector<int64_t>(shape.size(), 0), shape};
}

uint64_t CodeBytes(const Job& job) {
  if (!job.code_box.has_value()) return 0;
  return static_cast<uint64_t>(NumElements(job.code_box->length)) *
         static_cast<uint64_t>(DTypeSizeBytes(job.value->codes.dtype));
}

// Reads one batch's codes and scales and computes each of its values.
absl::Status FillBatch(const ModelView& view, std::vector<MaterializeRequest>& requests,
                       const std::vector<Job>& jobs, const FillSettings& settings, FillOutcome& outcome) {
  std::vector<FillTarget> targets;
  std::vector<const Job*> read;
  for (const Job& job : jobs) {
    MaterializeRequest& r = requests[job.request];
    FillResult& result = outcome.results[job.request];
    result.provenance = Provenance{.kind = Provenance::Kind::kDequantized,
                                   .converted_to = *FromScalarType(r.dest.scalar_type()),
                                   .rule = job.value->Rule()};
    if (!job.code_box.has_value()) {  // holds none of it
      result.filled = true;
      continue;
    }
    ML_ASSIGN_OR_RETURN(c10::ScalarType code_type, ToScalarType(job.value->codes.dtype));
    ML_ASSIGN_OR_RETURN(c10::ScalarType scale_type, ToScalarType(job.value->scales.dtype));
    at::Tensor codes, scales;
    ML_RETURN_IF_ERROR(CallTorch(absl::StrCat("allocating the codes and scales of ", r.name), [&] {
      codes = torch::empty(job.code_box->length, torch::dtype(code_type));
      scales = torch::empty(job.scale_box->length, torch::dtype(scale_type));
    }));
    targets.push_back(FillTarget{job.value->codes.name, job.value->codes, job.code_box, codes});
    targets.push_back(FillTarget{job.value->scales.name, job.value->scales, job.scale_box, scales});
    read.push_back(&job);
  }
  if (targets.empty()) return absl::OkStatus();
  ML_ASSIGN_OR_RETURN(FillOutcome filled, FillTargets(targets, view.files, settings));
  outcome.direct_bytes += filled.direct_bytes;
  outcome.streamed_bytes += filled.streamed_bytes;
  for (const auto& [node, bytes] : filled.streamed_bytes_by_node)
    outcome.streamed_bytes_by_node[node] += bytes;
  for (size_t k = 0; k < read.size(); ++k) {
    const Job& job = *read[k];
    FillResult& codes = filled.results[2 * k];
    FillResult& scales = filled.results[2 * k + 1];
    FillResult& result = outcome.results[job.request];
    result.provenance.nodes = codes.provenance.nodes;
    result.failovers = std::move(codes.failovers);
    result.failovers.insert(result.failovers.end(), scales.failovers.begin(), scales.failovers.end());
    result.proof = std::move(codes.proof);
    if (scales.proof.has_value()) result.more_proofs.push_back(*std::move(scales.proof));
    if (!codes.filled || !scales.filled) {
      result.error = !codes.filled ? codes.error : scales.error;
      continue;
    }
    absl::Status computed = DequantizeInto(*job.value, job.box, targets[2 * k].dest, targets[2 * k + 1].dest,
                                           requests[job.request].dest);
    result.filled = computed.ok();
    if (!computed.ok()) result.error = std::string(computed.message());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FillDequantized(const ModelView& view, std::vector<MaterializeRequest>& requests,
                             const std::vector<Resolution>& plan, const FillSettings& settings,
                             FillOutcome& outcome) {
  std::vector<Job> batch;
  uint64_t batch_bytes = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (plan[i].kind != Resolution::Kind::kDequantize || plan[i].quantized == nullptr) continue;
    Job job{i, plan[i].quantized, requests[i].box.value_or(Whole(plan[i].quantized->shape))};
    job.code_box = CodeBox(*job.value, job.box);
    job.scale_box = ScaleBox(*job.value, job.box);
    if (!batch.empty() && batch_bytes + CodeBytes(job) > kBatchCodeBytes) {
      ML_RETURN_IF_ERROR(FillBatch(view, requests, batch, settings, outcome));
      batch.clear();
      batch_bytes = 0;
    }
    batch_bytes += CodeBytes(job);
    batch.push_back(std::move(job));
  }
  if (batch.empty()) return absl::OkStatus();
  return FillBatch(view, requests, batch, settings, outcome);
}

}  // namespace metaload
