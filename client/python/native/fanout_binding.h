// metaload._native's fan-out: materialize's `fan_out=` spec (the user's replica process groups
// and which of them holds each request) turned into the core's fan-out (client/load/fanout.h,
// planner/plan/fanout.h AssignWithinGroups), which Materialize then fills with
// (client/load/fanout_fill.h). Parsed with the GIL held; runs without it.
#ifndef METALOAD_CLIENT_PYTHON_NATIVE_FANOUT_BINDING_H_
#define METALOAD_CLIENT_PYTHON_NATIVE_FANOUT_BINDING_H_

#include <pybind11/pybind11.h>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "client/load/fanout.h"
#include "client/resolve/materialize.h"

namespace metaload {

struct PythonFanout {
  RankFanout fan;
  FanoutSettings settings;
  std::shared_ptr<ExchangeOutcome> exchanged = std::make_shared<ExchangeOutcome>();

  // The fill Materialize runs: reads and exchanges; what was exchanged lands in `exchanged`.
  MaterializeFillFn Fill() const;
};

// `spec`: {"rank": global rank, "groups": [ProcessGroup], "members": [[global ranks, in group
// rank order]], "group_of_request": [index or -1], "entry_of_request": [the tensor each
// fills: a tensor's requests share one reader], "identity": [str], "device": str,
// "timeout_s": float}. InvalidArgument for a spec that does not describe this rank's groups.
absl::StatusOr<PythonFanout> ParseFanout(const pybind11::dict& spec,
                                         const std::vector<MaterializeRequest>& requests);

}  // namespace metaload

#endif  // METALOAD_CLIENT_PYTHON_NATIVE_FANOUT_BINDING_H_
