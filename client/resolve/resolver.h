// One rank's per-tensor decisions, made in one place for both pipelines: the plan-driven
// LoadRank (client/load/rank_loader.h) and the module-driven Materialize (materialize.h). For
// every request, before any byte is read, Resolve says how its values come: read (stored
// under its name, or under the stored name of its tied group), shared (a tied alias holding
// the very tensor another request fills), computed (a non-persistent buffer's rule), left to
// the caller's module (a buffer with no rule), initialized (the init policy), or refused (and
// why). FillResolved then computes, reads (client/read/fill.h) and ties as resolved.
//
//   std::vector<Resolution> plan = Resolve(view, requests, policy, "--init-missing zeros|normal:STD");
//   ML_ASSIGN_OR_RETURN(FillOutcome filled, FillResolved(view, requests, plan, policy, read_settings));
//
// Thread-safety: the functions are reentrant; FillResolved writes the requests' destinations.
#ifndef METALOAD_CLIENT_RESOLVE_RESOLVER_H_
#define METALOAD_CLIENT_RESOLVE_RESOLVER_H_

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/read/fill.h"
#include "client/resolve/model_view.h"
#include "planner/format/tensor_layout.h"
#include "planner/plan/slice.h"
#include "planner/skeleton/init_policy.h"

namespace metaload {

// One tensor (or the part of it held here) to fill.
struct MaterializeRequest {
  std::string name;                 // the tensor's name in the checkpoint
  std::vector<int64_t> full_shape;  // the whole tensor's shape, as the module declares it
  std::optional<TensorBox> box;     // the part held here; absent: all of it
  bool is_buffer = false;           // a buffer (its module may compute it), not a parameter
  at::Tensor dest;                  // allocated: the box's shape, the held dtype and device
  // Codes kept as stored in a module that declares its granularity (torchao's Float8Tensor
  // block_size): grid elements per scale, per dimension; empty: none declared. It must be the
  // checkpoint's (KeptGranularityProblem, planner/plan/quant_boxes.h).
  std::vector<int64_t> scale_block;
};

// How one request gets its values.
struct Resolution {
  enum class Kind {
    kRead,        // from `stored`
    kTied,        // the same tensor as request `same_as` (a tied alias): filled with it, read once
    kBuffer,      // computed by the rule `detail`
    kModule,      // the caller's module must compute it (a buffer with no rule)
    kInit,        // initialized by the init policy
    kRefused,     // it would stay on meta: `detail` says why
    kDequantize,  // computed from the codes and scales of `quantized` (client/resolve/dequantize.h)
  };
  Kind kind = Kind::kRead;
  const TensorLayout* stored = nullptr;       // kRead: in the view, which must outlive this
  size_t same_as = 0;                         // kTied
  std::string detail;                         // kBuffer: the rule; kRefused: why
  const QuantizedValue* quantized = nullptr;  // kDequantize: in the view
};

// Resolves every request against `view`. A tensor the checkpoint lacks is initialized when
// `policy` initializes, else refused with MissingTensorReason(`missing_fix`) (missing_init.h);
// a box outside its tensor, or a shape other than the checkpoint's, is refused. A value the
// checkpoint stores quantized (view.quantized) held in a floating dtype is dequantized when
// `dequantize`, else refused naming the quantization; held in its codes' dtype it is read as
// stored, and refused when this rank's scales are not exactly those of its codes (a split
// through a scale block: KeptSplitProblem, planner/plan/quant_boxes.h) or when the request
// declares a granularity (`scale_block`) other than the checkpoint's, or declares one for a
// tensor the checkpoint does not store quantized.
std::vector<Resolution> Resolve(const ModelView& view, const std::vector<MaterializeRequest>& requests,
                                const InitPolicy& policy, const std::string& missing_fix,
                                bool dequantize = false);

// Fills every request as `plan` (Resolve's, for the same requests) says: buffers and
// initialized tensors first, then one FillTargets over all reads, then tied aliases take their
// tensor's outcome. One result per request, in order: kModule requests are left for the
// caller (Provenance kModule, not filled), kRefused ones are not filled, with the reason;
// kDequantize ones read their codes and scales and compute (dequantize_fill.h).
// `on_filled`, when set, is told of each request read from a file as soon as it is filled, with
// its request index and final result (FillTargets'; computed, tied and dequantized requests are
// only in the outcome). Errors only for what no tensor could survive (fill.h).
absl::StatusOr<FillOutcome> FillResolved(const ModelView& view, std::vector<MaterializeRequest>& requests,
                                         const std::vector<Resolution>& plan, const InitPolicy& policy,
                                         const ReadSettings& read, const FilledFn& on_filled = {});

// The stored bytes request `r` reads when resolved kRead from `stored`: its held part's.
uint64_t HeldStoredBytes(const MaterializeRequest& r, const TensorLayout& stored);

// What filling `plan` reads, for the load's progress (client/read/progress_meter.h): the stored
// bytes of every read's held part and of the codes and scales every dequantized value needs,
// and how many tensors those are.
ProgressTotals PlannedTotals(const std::vector<MaterializeRequest>& requests,
                             const std::vector<Resolution>& plan);

}  // namespace metaload

#endif  // METALOAD_CLIENT_RESOLVE_RESOLVER_H_
