#include "client/resolve/dequantize_fill.h"

#include <map>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/resolve/dequantize.h"
#include "libtorch/torch_glue.h"
#include "planner/plan/quant_boxes.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// Codes read at once: small beside a rank's shard (the destinations are the memory a load
// needs), large enough that each batch's reads run in parallel. Two batches live at a time: one
// computed while the next is read.
constexpr uint64_t kBatchCodeBytes = uint64_t{32} << 20;

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

// One batch's reads: its codes and scales, in temporaries of their stored dtypes.
struct Batch {
  std::vector<Job> jobs;
  std::vector<FillTarget> targets;
  std::vector<const Job*> read;                   // the jobs that hold any of their value
  std::vector<size_t> code_target, scale_target;  // per read job; a value's jobs share one scales target
  FillOutcome filled;
  absl::Status status;
};

// Allocates and reads `batch`'s codes and scales (no destination is touched).
absl::Status ReadBatch(const ModelView& view, const FillSettings& settings, Batch& batch) {
  std::map<std::tuple<std::string, std::vector<int64_t>, std::vector<int64_t>>, size_t> scales_read;
  for (const Job& job : batch.jobs) {
    if (!job.code_box.has_value()) continue;  // holds none of it
    ML_ASSIGN_OR_RETURN(c10::ScalarType code_type, ToScalarType(job.value->codes.dtype));
    ML_ASSIGN_OR_RETURN(c10::ScalarType scale_type, ToScalarType(job.value->scales.dtype));
    at::Tensor codes;
    ML_RETURN_IF_ERROR(CallTorch(absl::StrCat("allocating the codes of ", job.value->name), [&] {
      codes = torch::empty(job.code_box->length, torch::dtype(code_type));
    }));
    batch.code_target.push_back(batch.targets.size());
    batch.targets.push_back(FillTarget{job.value->codes.name, job.value->codes, job.code_box, codes, false});
    // The parts of one value a rank holds (a _StridedShard's boxes) need the same scales: read
    // and proven once, or the sum over ranks would count this rank's copy twice.
    auto [shared, fresh] = scales_read.try_emplace(
        std::make_tuple(job.value->scales.name, job.scale_box->start, job.scale_box->length),
        batch.targets.size());
    if (fresh) {
      at::Tensor scales;
      ML_RETURN_IF_ERROR(CallTorch(absl::StrCat("allocating the scales of ", job.value->name), [&] {
        scales = torch::empty(job.scale_box->length, torch::dtype(scale_type));
      }));
      batch.targets.push_back(
          FillTarget{job.value->scales.name, job.value->scales, job.scale_box, scales, false});
    }
    batch.scale_target.push_back(shared->second);
    batch.read.push_back(&job);
  }
  if (batch.targets.empty()) return absl::OkStatus();
  ML_ASSIGN_OR_RETURN(batch.filled, FillTargets(batch.targets, view.files, settings));
  return absl::OkStatus();
}

// Computes each value of a batch that was read into its destination; sets its result.
void ComputeBatch(std::vector<MaterializeRequest>& requests, const FillSettings& settings, Batch& batch,
                  FillOutcome& outcome) {
  for (const Job& job : batch.jobs) {
    FillResult& result = outcome.results[job.request];
    result.provenance = Provenance{.kind = Provenance::Kind::kDequantized,
                                   .converted_to = *FromScalarType(requests[job.request].dest.scalar_type()),
                                   .rule = job.value->Rule()};
    result.filled = !job.code_box.has_value();  // holding none of it, it is done
    if (result.filled && settings.read.meter != nullptr) settings.read.meter->TensorDone();
  }
  outcome.direct_bytes += batch.filled.direct_bytes;
  outcome.streamed_bytes += batch.filled.streamed_bytes;
  for (const auto& [node, bytes] : batch.filled.streamed_bytes_by_node)
    outcome.streamed_bytes_by_node[node] += bytes;
  for (size_t k = 0; k < batch.read.size(); ++k) {
    const Job& job = *batch.read[k];
    FillResult& codes = batch.filled.results[batch.code_target[k]];
    FillResult& scales = batch.filled.results[batch.scale_target[k]];
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
    absl::Status computed =
        DequantizeInto(*job.value, job.box, batch.targets[batch.code_target[k]].dest,
                       batch.targets[batch.scale_target[k]].dest, requests[job.request].dest);
    result.filled = computed.ok();
    if (!computed.ok()) result.error = std::string(computed.message());
    if (computed.ok() && settings.read.meter != nullptr) settings.read.meter->TensorDone();
  }
}

// The stored bytes of `box` of `stored`.
uint64_t BoxBytes(const TensorLayout& stored, const std::optional<TensorBox>& box) {
  if (!box.has_value()) return 0;
  return static_cast<uint64_t>(NumElements(box->length)) *
         static_cast<uint64_t>(DTypeSizeBytes(stored.dtype));
}

}  // namespace

uint64_t DequantizedReadBytes(const std::vector<MaterializeRequest>& requests,
                              const std::vector<Resolution>& plan) {
  uint64_t bytes = 0;
  std::set<std::tuple<std::string, std::vector<int64_t>, std::vector<int64_t>>> scales_read;  // as ReadBatch
  for (size_t i = 0; i < requests.size(); ++i) {
    if (plan[i].kind != Resolution::Kind::kDequantize || plan[i].quantized == nullptr) continue;
    const QuantizedValue& value = *plan[i].quantized;
    const TensorBox box = requests[i].box.value_or(Whole(value.shape));
    const std::optional<TensorBox> codes = CodeBox(value, box);
    if (!codes.has_value()) continue;
    bytes += BoxBytes(value.codes, codes);
    const std::optional<TensorBox> scales = ScaleBox(value, box);
    if (scales.has_value() && scales_read.emplace(value.scales.name, scales->start, scales->length).second) {
      bytes += BoxBytes(value.scales, scales);
    }
  }
  return bytes;
}

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
  if (by_value.empty()) return absl::OkStatus();
  std::vector<Batch> batches(1);
  uint64_t batch_bytes = 0;
  for (auto& [value, jobs] : by_value) {
    uint64_t value_bytes = 0;
    for (const Job& job : jobs) value_bytes += CodeBytes(job);
    if (!batches.back().jobs.empty() && batch_bytes + value_bytes > kBatchCodeBytes) {
      batches.emplace_back();
      batch_bytes = 0;
    }
    batch_bytes += value_bytes;
    for (Job& job : jobs) batches.back().jobs.push_back(std::move(job));
  }
  // Batch k + 1 is read while batch k is computed: reading (I/O, copies) and dequantizing
  // (arithmetic) overlap. Each batch's temporaries go once it is computed.
  std::thread reader;
  const auto read = [&](size_t k) {
    reader = std::thread([&, k] { batches[k].status = ReadBatch(view, settings, batches[k]); });
  };
  read(0);
  absl::Status status;
  for (size_t k = 0; k < batches.size(); ++k) {
    reader.join();
    if (k + 1 < batches.size() && batches[k].status.ok()) read(k + 1);
    if (!batches[k].status.ok()) {
      status = batches[k].status;
      break;
    }
    ComputeBatch(requests, settings, batches[k], outcome);
    batches[k] = Batch{};
  }
  if (reader.joinable()) reader.join();
  return status;
}

}  // namespace metaload
