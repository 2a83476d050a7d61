// Materialize: fill tensors that a caller's own module holds — the tensors it names, in the
// parts it holds (a DTensor's local shard is a box of the whole tensor) — from a model
// registered with a daemon, or from a checkpoint folder this host can read. The engine
// under the Python package's `metaload.materialize` (client/python/); the module, not a
// plan, decides what this rank reads.
//
//   ML_ASSIGN_OR_RETURN(ModelView view, OpenModel({.model = "llama", .daemon = "127.0.0.1:7070"}));
//   std::vector<MaterializeRequest> requests = ...;  // names, boxes, allocated destinations
//   ML_ASSIGN_OR_RETURN(MaterializeOutcome out, Materialize(view, requests, settings));
//   if (!out.refused.empty()) ...nothing was read: raise naming out.refused...
//
// Every name is resolved before any byte is read (resolver.h, the same decisions as the
// plan-driven load): a tensor the checkpoint stores, an alias of a tied group (filled from the
// stored tensor), a non-persistent buffer with a rule to compute it, or missing. Missing
// tensors (unless the init policy fills them) and shape mismatches refuse the whole request,
// so a module is never left half-read with a meta tensor inside.
//
// Thread-safety: reentrant; Materialize writes the requests' destinations.
#ifndef METALOAD_CLIENT_RESOLVE_MATERIALIZE_H_
#define METALOAD_CLIENT_RESOLVE_MATERIALIZE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/read/fill.h"
#include "client/resolve/model_view.h"
#include "client/resolve/resolver.h"
#include "client/verify/finding.h"
#include "planner/skeleton/init_policy.h"

namespace metaload {

// One per request, as FillResult says it; its provenance (client/read/provenance.h) a read
// (converted_to when converted on load; tied_to: the stored name an alias was read as),
// kBuffer, kInit, or kModule when the caller must compute it (a buffer with no rule: the
// module's own init).
using MaterializeResult = FillResult;

// How Materialize fills what it resolved: FillResolved's signature (client/resolve/resolver.h),
// for a caller that fills another way (the Python package's fan-out: client/load/fanout_fill.h).
using MaterializeFillFn = std::function<absl::StatusOr<FillOutcome>(
    const ModelView& view, std::vector<MaterializeRequest>& requests, const std::vector<Resolution>& plan,
    const InitPolicy& policy, const ReadSettings& read)>;

struct MaterializeSettings {
  ReadSettings read;  // where from, how many threads, timeouts, retries
  // Values the checkpoint stores quantized, held in a floating dtype, are dequantized
  // (client/resolve/dequantize.h); unset, they are refused naming the quantization.
  bool dequantize = false;
  std::optional<InitPolicy> init_missing;  // unset: the policy the model was registered with
  // Resolve only (destinations untouched, may be meta): whether the request would be refused,
  // before the caller allocates anything; results then mark only the kModule requests.
  bool check_only = false;
  MaterializeFillFn fill;  // empty: FillResolved
};

struct MaterializeOutcome {
  // Non-empty: nothing was read or written; each names a tensor and why it would stay on meta.
  std::vector<Finding> refused;
  // The same findings grouped for people (runs of missing layers as one line, tying
  // mismatches named): the message to show.
  std::vector<std::string> summary;
  std::vector<MaterializeResult> results;  // one per request, in order
  uint64_t direct_bytes = 0;
  uint64_t streamed_bytes = 0;
  // Set by a fill that fans out (client/load/fanout_fill.h): bytes other ranks sent here, bytes
  // this rank sent (per receiver), and what went wrong on the way.
  uint64_t fanout_received_bytes = 0;
  uint64_t fanout_sent_bytes = 0;
  std::vector<std::string> fanout_notes;
};

// Errors only for what no tensor could survive (a bad policy, a conversion buffer that cannot
// be allocated); a tensor whose bytes could not be read is reported in its result.
absl::StatusOr<MaterializeOutcome> Materialize(const ModelView& view,
                                               std::vector<MaterializeRequest>& requests,
                                               const MaterializeSettings& settings);

}  // namespace metaload

#endif  // METALOAD_CLIENT_RESOLVE_MATERIALIZE_H_
