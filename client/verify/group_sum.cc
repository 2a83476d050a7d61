#include "client/verify/group_sum.h"

#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "libtorch/torch_glue.h"
#include "util/status_macros.h"

namespace metaload {

namespace {

// All-reduces `data` (element type T, torch dtype `dtype`) as the header says.
template <typename T>
absl::Status SumOver(const ProcessGroupPtr& group, const GroupSumOptions& options, at::ScalarType dtype,
                     absl::Span<T> data, const std::string& what) {
  // Tensors of its own (see the header): the caller's buffer is copied in and out.
  at::Tensor summed;
  c10::intrusive_ptr<c10d::Work> work;
  ML_RETURN_IF_ERROR(CallTorch(what, [&] {
    at::Tensor host = at::empty({static_cast<int64_t>(data.size())}, at::TensorOptions().dtype(dtype));
    std::memcpy(host.data_ptr(), data.data(), data.size() * sizeof(T));
    summed = options.device.is_cpu() ? host : host.to(options.device);
    std::vector<at::Tensor> tensors{summed};
    c10d::AllreduceOptions reduce;
    reduce.reduceOp = c10d::ReduceOp::SUM;
    reduce.timeout = absl::ToChronoMilliseconds(options.timeout);
    work = group->allreduce(tensors, reduce);
  }));
  const absl::Time deadline = absl::Now() + options.timeout;
  absl::Duration pause = absl::Microseconds(200);
  while (true) {
    bool completed = false;
    ML_RETURN_IF_ERROR(CallTorch(what, [&] { completed = work->isCompleted(); }));
    if (completed) break;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          what, ": not every rank of the group answered within ", absl::ToDoubleSeconds(options.timeout),
          " s", " (a rank that died or is stuck elsewhere; wait longer with a longer timeout)"));
    }
    if (options.interrupted && options.interrupted())
      return absl::CancelledError(absl::StrCat(what, ": interrupted"));
    absl::SleepFor(pause);
    pause = std::min(2 * pause, absl::Milliseconds(10));
  }
  return CallTorch(what, [&] {
    work->wait();  // raises what the collective raised
    at::Tensor back = summed.is_cpu() ? summed : summed.cpu();
    std::memcpy(data.data(), back.data_ptr(), data.size() * sizeof(T));
  });
}

}  // namespace

SumBytesFn SumOverGroup(ProcessGroupPtr group, GroupSumOptions options) {
  return [group = std::move(group), options = std::move(options)](absl::Span<uint8_t> data,
                                                                  const std::string& what) -> absl::Status {
    return SumOver<uint8_t>(group, options, at::kByte, data, what);
  };
}

SumInt64Fn SumInt64OverGroup(ProcessGroupPtr group, GroupSumOptions options) {
  return [group = std::move(group), options = std::move(options)](absl::Span<int64_t> data,
                                                                  const std::string& what) -> absl::Status {
    return SumOver<int64_t>(group, options, at::kLong, data, what);
  };
}

ExchangeSums SumsOverGroup(const ProcessGroupPtr& group, const GroupSumOptions& options) {
  return ExchangeSums{SumOverGroup(group, options), SumInt64OverGroup(group, options)};
}

ProcessGroupPtr AsProcessGroup(const c10::intrusive_ptr<c10d::Backend>& backend,
                               const c10::intrusive_ptr<c10d::Store>& store,
                               c10d::ProcessGroup::BackendType type) {
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, backend->getRank(), backend->getSize());
  group->setBackend(c10::DeviceType::CPU, type, backend);
  group->setDefaultBackend(type);
  return group;
}

}  // namespace metaload
