#include "client/resolve/dequantize_fill.h"

#include <map>
#include <optional>
#include <tuple>
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
  std::vector<size_t> code_target, scale_target;  // per read job; a scales target shared by a value's jobs
  std::map<std::tuple<std::string, std::vector<int64_t>, std::vector<int64_t>>, size_t> scales_read;
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
    at::Tensor codes;
    ML_RETURN_IF_ERROR(CallTorch(absl::StrCat("allocating the codes of ", r.name),
                                 [&] { codes = torch::empty(job.code_box->length, torch::dtype(code_type)); }));
    code_target.push_back(targets.size());
    targets.push_back(FillTarget{job.value->codes.name, job.value->codes, job.code_box, codes});
    // The parts of one value a rank holds (a _StridedShard's boxes) need the same scales: read
    // and proven once, or the sum over ranks would count this rank's copy twice.
    auto [shared, fresh] = scales_read.try_emplace(
        std::make_tuple(job.value->scales.name, job.scale_box->start, job.scale_box->length), targets.size());
    if (fresh) {
      at::Tensor scales;
      ML_RETURN_IF_ERROR(CallTorch(absl::StrCat("allocating the scales of ", r.name),
                                   [&] { scales = torch::empty(job.scale_box->length, torch::dtype(scale_type)); }));
      targets.push_back(FillTarget{job.value->scales.name, job.value->scales, job.scale_box, scales});
    }
    scale_target.push_back(shared->second);
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
    FillResult& codes = filled.results[code_target[k]];
    FillResult& scales = filled.results[scale_target[k]];
    FillResult& result = outcome.results[job.request];
    result.provenance.nodes = codes.provenance.nodes;
    result.failovers = std::move(codes.failovers);
    result.failovers.insert(result.failovers.end(), scales.failovers.begin(), scales.failovers.end());
    scales.failovers.clear();
    result.proof = std::move(codes.proof);
    if (scales.proof.has_value()) result.more_proofs.push_back(*std::move(scales.proof));  // its first user's
    scales.proof.reset();
    if (!codes.filled || !scales.filled) {
      result.error = !codes.filled ? codes.error : scales.error;
      continue;
    }
    absl::Status computed = DequantizeInto(*job.value, job.box, targets[code_target[k]].dest,
                                           targets[scale_target[k]].dest, requests[job.request].dest);
    result.filled = computed.ok();
    if (!computed.ok()) result.error = std::string(computed.message());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FillDequantized(const ModelView& view, std::vector<MaterializeRequest>& requests,
                             const std::vector<Resolution>& plan, const FillSettings& settings,
                             FillOutcome& outcome) {
  // The jobs of one value stay in one batch (their scales are read once).
  std::map<std::string, std::vector<Job>> by_value;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (plan[i].kind != Resolution::Kind::kDequantize || plan[i].quantized == nullptr) continue;
    Job job{i, plan[i].quantized, requests[i].box.value_or(Whole(plan[i].quantized->shape))};
    job.code_box = CodeBox(*job.value, job.box);
    job.scale_box = ScaleBox(*job.value, job.box);
    by_value[job.value->name].push_back(std::move(job));
  }
  std::vector<Job> batch;
  uint64_t batch_bytes = 0;
  for (auto& [value, jobs] : by_value) {
    uint64_t value_bytes = 0;
    for (const Job& job : jobs) value_bytes += CodeBytes(job);
    if (!batch.empty() && batch_bytes + value_bytes > kBatchCodeBytes) {
      ML_RETURN_IF_ERROR(FillBatch(view, requests, batch, settings, outcome));
      batch.clear();
      batch_bytes = 0;
    }
    batch_bytes += value_bytes;
    for (Job& job : jobs) batch.push_back(std::move(job));
  }
  if (batch.empty()) return absl::OkStatus();
  return FillBatch(view, requests, batch, settings, outcome);
}

}  // namespace metaload
