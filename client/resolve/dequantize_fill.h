// Filling the requests a resolution dequantizes (client/resolve/resolver.h, Kind::kDequantize):
// each reads the codes and scales its box needs (planner/plan/quant_boxes.h) through the reading
// engine (client/read/fill.h), so they are streamed, failed over and proven like any read, then
// computed into its destination (dequantize.h). Reads go in batches of at most 256 MiB of codes,
// so the temporaries beside the destinations stay small whatever the model's size.
//
// Thread-safety: reentrant; writes the requests' destinations and `outcome`.
#ifndef METALOAD_CLIENT_RESOLVE_DEQUANTIZE_FILL_H_
#define METALOAD_CLIENT_RESOLVE_DEQUANTIZE_FILL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "client/read/fill.h"
#include "client/resolve/model_view.h"
#include "client/resolve/resolver.h"

namespace metaload {

// Sets outcome.results[i] for every kDequantize request i of `plan` (provenance kDequantized,
// `proof` of its codes and `more_proofs` of its scales) and adds the bytes read. Errors only for
// what no tensor could survive (a temporary that cannot be allocated).
absl::Status FillDequantized(const ModelView& view, std::vector<MaterializeRequest>& requests,
                             const std::vector<Resolution>& plan, const FillSettings& settings,
                             FillOutcome& outcome);

// The codes and scales FillDequantized reads for `plan`'s kDequantize requests, in bytes: what
// the progress of a load counts them as (client/read/progress_meter.h).
uint64_t DequantizedReadBytes(const std::vector<MaterializeRequest>& requests,
                              const std::vector<Resolution>& plan);

}  // namespace metaload

#endif  // METALOAD_CLIENT_RESOLVE_DEQUANTIZE_FILL_H_
