#include "client/resolve/resolver.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/resolve/buffer_init.h"
#include "client/resolve/dequantize_fill.h"
#include "client/resolve/missing_init.h"
#include "libtorch/torch_glue.h"
#include "planner/format/dtype.h"
#include "planner/format/dtype_conversion.h"
#include "planner/plan/quant_boxes.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::optional<std::string> BoxProblem(const MaterializeRequest& r) {
  if (!r.box.has_value()) return std::nullopt;
  const TensorBox& box = *r.box;
  if (box.start.size() != r.full_shape.size() || box.length.size() != r.full_shape.size()) {
    return absl::StrCat("its local part has ", box.start.size(), " dimensions, the tensor ",
                        r.full_shape.size());
  }
  for (size_t d = 0; d < box.start.size(); ++d) {
    if (box.start[d] < 0 || box.length[d] < 0 || box.start[d] > r.full_shape[d] ||
        box.length[d] > r.full_shape[d] - box.start[d]) {
      return absl::StrCat("its local part [", box.start[d], ", +", box.length[d], ") of dimension ", d,
                          " is outside the tensor's ", r.full_shape[d]);
    }
  }
  return std::nullopt;
}

Resolution Refused(std::string why) {
  return Resolution{Resolution::Kind::kRefused, nullptr, 0, std::move(why)};
}

// A computed buffer: the whole buffer from its rule, then the part held here.
absl::Status ComputeInto(const std::string& rule, MaterializeRequest& r) {
  if (!r.box.has_value()) return ComputeBuffer(rule, r.dest);
  at::Tensor whole;
  ML_RETURN_IF_ERROR(
      CallTorch("allocating a buffer", [&] { whole = torch::empty(r.full_shape, r.dest.options()); }));
  ML_RETURN_IF_ERROR(ComputeBuffer(rule, whole));
  return CallTorch(absl::StrCat("copying ", r.name), [&] {
    for (size_t d = 0; d < r.box->start.size(); ++d)
      whole = whole.narrow(d, r.box->start[d], r.box->length[d]);
    r.dest.copy_(whole);
  });
}

// Everything that is not read: computed buffers, initialized missing tensors, what the module
// computes, what was refused.
void FillComputed(const std::vector<Resolution>& plan, const InitPolicy& policy,
                  std::vector<MaterializeRequest>& requests, std::vector<FillResult>& results) {
  for (size_t i = 0; i < requests.size(); ++i) {
    MaterializeRequest& r = requests[i];
    FillResult& result = results[i];
    absl::Status status;
    switch (plan[i].kind) {
      case Resolution::Kind::kRead:
      case Resolution::Kind::kTied:
      case Resolution::Kind::kDequantize:
        continue;
      case Resolution::Kind::kModule:
        result.provenance.kind = Provenance::Kind::kModule;
        continue;
      case Resolution::Kind::kRefused:
        result.error = plan[i].detail;
        continue;
      case Resolution::Kind::kBuffer:
        status = ComputeInto(plan[i].detail, r);
        result.provenance = Provenance{.kind = Provenance::Kind::kBuffer, .rule = plan[i].detail};
        break;
      case Resolution::Kind::kInit:
        status = InitializeMissing(policy, r.name, r.full_shape, r.box, r.dest);
        result.provenance = Provenance{.kind = Provenance::Kind::kInit, .rule = policy.ToString()};
        break;
    }
    result.filled = status.ok();
    if (!status.ok()) result.error = std::string(status.message());
  }
}

// A request for a value the checkpoint stores quantized, held in a floating dtype: dequantized
// or refused. nullopt: not such a request (held in its codes' dtype: read as stored).
std::optional<Resolution> ResolveQuantized(const ModelView& view, const MaterializeRequest& r,
                                           bool dequantize) {
  if (!r.dest.defined()) return std::nullopt;
  const absl::StatusOr<DType> held = FromScalarType(r.dest.scalar_type());
  if (!held.ok() || !IsConvertibleFloat(*held)) return std::nullopt;
  const std::string how = view.quantization.has_value() ? view.quantization->Description() : "quantized";
  auto value = view.quantized.values.find(r.name);
  if (value == view.quantized.values.end()) {
    auto problem = view.quantized.problems.find(r.name);
    if (problem == view.quantized.problems.end()) return std::nullopt;
    auto stored = view.stored.find(r.name);
    if (stored != view.stored.end() && IsConvertibleFloat(stored->second.dtype)) return std::nullopt;
    return Refused(absl::StrCat("the checkpoint is ", how, ", but ", problem->second, ": not dequantized"));
  }
  const QuantizedValue& v = value->second;
  if (v.shape != r.full_shape) {
    return Refused(absl::StrCat("the module's shape ", ShapeText(r.full_shape),
                                " differs from the checkpoint's ", ShapeText(v.shape), " (", v.Rule(),
                                "; another size of this model?)"));
  }
  if (!dequantize) {
    return Refused(absl::StrCat("stored quantized (", how, "; ", v.Rule(),
                                "): pass dequantize=True (metactl load "
                                "--dequantize) to load its values as ",
                                DTypeCode(*held),
                                ", or build the module with its quantization to keep the codes as stored"));
  }
  if (r.box.has_value()) {
    if (std::string why = CutGroupProblem(v, *r.box); !why.empty()) return Refused(std::move(why));
  }
  Resolution out{Resolution::Kind::kDequantize, nullptr, 0, v.Rule()};
  out.quantized = &v;
  return out;
}

// Codes kept as stored in a module that declares its granularity: the checkpoint's, and the
// checkpoint's codes. Refuses each request that is not (a tensor stored unquantized: whatever
// else refused it, this says why).
void CheckKeptGranularity(const ModelView& view, const std::vector<MaterializeRequest>& requests,
                          std::vector<Resolution>& out) {
  for (size_t i = 0; i < requests.size(); ++i) {
    const MaterializeRequest& r = requests[i];
    if (r.scale_block.empty()) continue;
    // The value whose codes it is (an FP8 value's codes go by its own name, MXFP4's by `x_blocks`).
    auto source = view.quantized.source_of.find(r.name);
    auto value = source == view.quantized.source_of.end() ? view.quantized.values.end()
                                                          : view.quantized.values.find(source->second);
    if (value == view.quantized.values.end() || value->second.codes.name != r.name) {
      auto stored = view.stored.find(r.name);
      if (stored == view.stored.end()) continue;  // missing: as any tensor the checkpoint lacks
      out[i] = Refused(absl::StrCat(
          "the module keeps it as FP8 codes with their scales, but the checkpoint "
          "stores it unquantized, as ",
          DTypeCode(stored->second.dtype), ": load it into an unquantized module and quantize it after"));
    } else if (out[i].kind == Resolution::Kind::kRead) {
      std::string why = KeptGranularityProblem(value->second, r.scale_block);
      if (why.empty()) continue;
      out[i] = Refused(std::move(why));
      // Its scales (of another shape where the granularity differs) go with it: one cause, said once.
      for (size_t j = 0; j < requests.size(); ++j) {
        if (requests[j].name != value->second.scales.name) continue;
        out[j] =
            Refused(absl::StrCat("the scales of ", r.name, ", refused with its codes (see ", r.name, ")"));
      }
    }
  }
}

// Codes kept as stored: this rank's scales must be exactly those of its codes. Refuses each
// codes request none of this rank's scale requests matches.
void CheckKeptScales(const ModelView& view, const std::vector<MaterializeRequest>& requests,
                     std::vector<Resolution>& out) {
  CheckKeptGranularity(view, requests, out);
  std::map<std::string, std::vector<size_t>> by_name;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (out[i].kind == Resolution::Kind::kRead) by_name[requests[i].name].push_back(i);
  }
  const auto whole = [](const std::vector<int64_t>& shape) {
    return TensorBox{std::vector<int64_t>(shape.size(), 0), shape};
  };
  for (const auto& [name, v] : view.quantized.values) {
    auto codes = by_name.find(v.codes.name);
    auto scales = by_name.find(v.scales.name);
    if (codes == by_name.end() || scales == by_name.end()) continue;
    for (size_t i : codes->second) {
      const TensorBox codes_box = requests[i].box.value_or(whole(v.codes.shape));
      std::string problem;
      for (size_t j : scales->second) {
        problem = KeptSplitProblem(v, codes_box, requests[j].box.value_or(whole(v.scales.shape)));
        if (problem.empty()) break;
      }
      if (!problem.empty()) out[i] = Refused(std::move(problem));
    }
  }
}

}  // namespace

std::vector<Resolution> Resolve(const ModelView& view, const std::vector<MaterializeRequest>& requests,
                                const InitPolicy& policy, const std::string& missing_fix, bool dequantize) {
  std::map<std::string, size_t> first_of;  // a name's first request
  for (size_t i = 0; i < requests.size(); ++i) first_of.emplace(requests[i].name, i);
  std::vector<Resolution> out(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const MaterializeRequest& r = requests[i];
    if (std::optional<std::string> problem = BoxProblem(r)) {
      out[i] = Refused(*std::move(problem));
      continue;
    }
    auto alias = view.tied_to.find(r.name);
    if (alias != view.tied_to.end()) {
      // The alias is the very tensor a request of its stored name fills (the plan's ties):
      // it shares that request's outcome instead of being read again.
      auto holder = first_of.find(alias->second);
      if (holder != first_of.end() && r.dest.defined() && r.dest.is_same(requests[holder->second].dest)) {
        out[i] = Resolution{Resolution::Kind::kTied, nullptr, holder->second, ""};
        continue;
      }
    }
    if (std::optional<Resolution> quantized = ResolveQuantized(view, r, dequantize)) {
      out[i] = *std::move(quantized);
      continue;
    }
    // An alias the checkpoint stores too holds values of its own (a config that ties what the
    // checkpoint keeps apart): read from its own bytes, as transformers loads it.
    auto stored = view.stored.find(r.name);
    if (stored == view.stored.end() && alias != view.tied_to.end()) stored = view.stored.find(alias->second);
    if (stored != view.stored.end()) {
      if (stored->second.shape != r.full_shape) {
        out[i] = Refused(absl::StrCat("the module's shape ", ShapeText(r.full_shape),
                                      " differs from the checkpoint's ", ShapeText(stored->second.shape),
                                      " (another size of this model?)"));
      } else if (r.dest.defined() && !FromScalarType(r.dest.scalar_type()).ok()) {
        // Known from the meta tensor already: refused before anything is allocated or read.
        out[i] = Refused(absl::StrCat("the module holds it as torch ", c10::toString(r.dest.scalar_type()),
                                      ", which no checkpoint bytes convert to (the checkpoint's is ",
                                      DTypeCode(stored->second.dtype), "): build the module in that dtype"));
      } else if (std::string why = r.dest.defined()
                                       ? ConversionRefusal(stored->second.name, stored->second.dtype,
                                                           *FromScalarType(r.dest.scalar_type()),
                                                           [&view](const std::string& name) {
                                                             return view.stored.count(name) > 0;
                                                           })
                                       : std::string();
                 !why.empty()) {
        out[i] = Refused(std::move(why));  // codes read as values: refused before anything is read
      } else {
        out[i].stored = &stored->second;
      }
      continue;
    }
    auto rule = view.buffer_rules.find(r.name);
    if (r.is_buffer && rule != view.buffer_rules.end()) {
      out[i] = Resolution{Resolution::Kind::kBuffer, nullptr, 0, rule->second};
    } else if (r.is_buffer) {
      out[i].kind = Resolution::Kind::kModule;
    } else if (policy.initializes()) {
      out[i].kind = Resolution::Kind::kInit;
    } else {
      out[i] = Refused(MissingTensorReason(missing_fix));
    }
  }
  CheckKeptScales(view, requests, out);
  return out;
}

uint64_t HeldStoredBytes(const MaterializeRequest& r, const TensorLayout& stored) {
  if (!r.dest.defined()) return 0;
  return static_cast<uint64_t>(r.dest.numel()) * static_cast<uint64_t>(DTypeSizeBytes(stored.dtype));
}

ProgressTotals PlannedTotals(const std::vector<MaterializeRequest>& requests,
                             const std::vector<Resolution>& plan) {
  ProgressTotals totals{.bytes = DequantizedReadBytes(requests, plan)};
  for (size_t i = 0; i < requests.size(); ++i) {
    if (plan[i].kind == Resolution::Kind::kRead && plan[i].stored != nullptr) {
      totals.bytes += HeldStoredBytes(requests[i], *plan[i].stored);
      ++totals.tensors;
    } else if (plan[i].kind == Resolution::Kind::kDequantize) {
      ++totals.tensors;
    }
  }
  return totals;
}

absl::StatusOr<FillOutcome> FillResolved(const ModelView& view, std::vector<MaterializeRequest>& requests,
                                         const std::vector<Resolution>& plan, const InitPolicy& policy,
                                         const ReadSettings& read, const FilledFn& on_filled) {
  FillOutcome outcome;
  outcome.results.resize(requests.size());
  FillComputed(plan, policy, requests, outcome.results);

  std::vector<FillTarget> targets;
  std::vector<size_t> request_of;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (plan[i].kind != Resolution::Kind::kRead) continue;
    targets.push_back(FillTarget{requests[i].name, *plan[i].stored, requests[i].box, requests[i].dest, true});
    request_of.push_back(i);
  }
  // A request read under its tied group's stored name says so.
  const auto as_requested = [&](size_t j, FillResult& result) {
    const std::string& stored_name = plan[request_of[j]].stored->name;
    if (stored_name != requests[request_of[j]].name) result.provenance.tied_to = stored_name;
  };
  FilledFn told;
  if (on_filled) {
    told = [&](size_t j, const FillResult& filled) {
      FillResult result = filled;
      as_requested(j, result);
      on_filled(request_of[j], result);
    };
  }
  const FillSettings settings{.model = view.model, .own_node = view.answered_by, .read = read};
  ML_ASSIGN_OR_RETURN(FillOutcome filled, FillTargets(targets, view.files, settings, told));
  ML_RETURN_IF_ERROR(FillDequantized(view, requests, plan, settings, outcome));
  for (size_t j = 0; j < targets.size(); ++j) {
    FillResult& result = outcome.results[request_of[j]];
    result = std::move(filled.results[j]);
    as_requested(j, result);
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    if (plan[i].kind != Resolution::Kind::kTied) continue;
    const FillResult& holder = outcome.results[plan[i].same_as];
    FillResult& alias = outcome.results[i];
    alias.filled = holder.filled;
    alias.error = holder.error;
    alias.provenance = Provenance{.kind = Provenance::Kind::kTied, .tied_to = requests[plan[i].same_as].name};
  }
  outcome.direct_bytes += filled.direct_bytes;
  outcome.streamed_bytes += filled.streamed_bytes;
  for (const auto& [node, bytes] : filled.streamed_bytes_by_node)
    outcome.streamed_bytes_by_node[node] += bytes;
  return outcome;
}

}  // namespace metaload
