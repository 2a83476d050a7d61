// The exchange's one collective (client/verify/exchange.h SumBytesFn) over a c10d process
// group: the user's own torch.distributed group handed over from Python (Gloo on CPU, NCCL on
// GPU, as their job runs), or the Gloo group `metactl load` makes (AsProcessGroup).
//
// Bounded and interruptible: it waits for the all-reduce at most `timeout`, polling, and asks
// `interrupted` (Python: a pending Ctrl-C) between polls. A sum it gives up on is left in
// flight holding tensors of its own (never the caller's memory); they are freed with the work,
// on whatever thread that happens, without Python: nothing there needs the interpreter.
//
// Thread-safety: c10d groups may be used from several threads; one sum per group at a time.
#ifndef METALOAD_CLIENT_VERIFY_GROUP_SUM_H_
#define METALOAD_CLIENT_VERIFY_GROUP_SUM_H_

#include <functional>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "absl/time/time.h"
#include "client/verify/exchange.h"

namespace metaload {

using ProcessGroupPtr = c10::intrusive_ptr<c10d::ProcessGroup>;

struct GroupSumOptions {
  at::Device device = at::kCPU;  // where the group's collectives take their tensors (NCCL: a GPU)
  absl::Duration timeout = absl::Minutes(5);
  std::function<bool()> interrupted;  // true: stop waiting (Cancelled); may be empty
};

SumBytesFn SumOverGroup(ProcessGroupPtr group, GroupSumOptions options);
SumInt64Fn SumInt64OverGroup(ProcessGroupPtr group, GroupSumOptions options);
// Both, for ExchangeReports.
ExchangeSums SumsOverGroup(const ProcessGroupPtr& group, const GroupSumOptions& options);

// A process group whose only backend is `backend` (a Gloo group made from a store), for the
// code that takes process groups.
ProcessGroupPtr AsProcessGroup(const c10::intrusive_ptr<c10d::Backend>& backend,
                               const c10::intrusive_ptr<c10d::Store>& store,
                               c10d::ProcessGroup::BackendType type);

}  // namespace metaload

#endif  // METALOAD_CLIENT_VERIFY_GROUP_SUM_H_
