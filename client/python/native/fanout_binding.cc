#include "client/python/native/fanout_binding.h"

#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>  // c10::intrusive_ptr holders: torch's ProcessGroup objects

#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/load/fanout_fill.h"
#include "client/read/knobs.h"
#include "client/verify/group_sum.h"
#include "libtorch/torch_glue.h"
#include "planner/plan/fanout.h"
#include "util/status_macros.h"

namespace py = pybind11;

namespace metaload {
namespace {

// Tests only, as `metactl load` reads them: a reader that kills itself after N chunks, and
// smaller chunks (so that a small model has many).
int64_t TestKnob(const char* name, int64_t low, int64_t high) {
  const char* text = std::getenv(name);
  int64_t value = 0;
  if (text == nullptr || !absl::SimpleAtoi(text, &value) || value < low || value > high) return 0;
  return value;
}

}  // namespace

MaterializeFillFn PythonFanout::Fill() const {
  return [this](const ModelView& view, std::vector<MaterializeRequest>& requests,
                const std::vector<Resolution>& plan, const InitPolicy& policy, const ReadSettings& read) {
    return FillWithFanout(fan, settings, view, requests, plan, policy, read, exchanged.get());
  };
}

absl::StatusOr<PythonFanout> ParseFanout(const py::dict& spec,
                                         const std::vector<MaterializeRequest>& requests) {
  PythonFanout out;
  const int rank = spec["rank"].cast<int>();
  const auto groups = spec["groups"].cast<std::vector<py::object>>();
  const auto members = spec["members"].cast<std::vector<std::vector<int>>>();
  const auto group_of = spec["group_of_request"].cast<std::vector<int>>();
  const auto entry_of = spec["entry_of_request"].cast<std::vector<int>>();
  out.fan.item_identity = spec["identity"].cast<std::vector<std::string>>();
  const double timeout_s = spec["timeout_s"].cast<double>();
  if (groups.size() != members.size() || group_of.size() != requests.size() ||
      entry_of.size() != requests.size() || out.fan.item_identity.size() != requests.size()) {
    return absl::InvalidArgumentError(absl::StrCat("fan-out: ", groups.size(), " groups, ", members.size(),
                                                   " member lists, ", group_of.size(), " group indices and ",
                                                   out.fan.item_identity.size(), " identities for ",
                                                   requests.size(), " requests"));
  }
  ML_ASSIGN_OR_RETURN(const absl::Duration timeout, TimeoutFromSeconds("fan-out timeout_s", timeout_s));
  std::vector<ProcessGroupPtr> pgs;
  for (size_t g = 0; g < groups.size(); ++g) {
    ProcessGroupPtr pg = py::cast<ProcessGroupPtr>(groups[g]);
    const std::vector<int>& m = members[g];
    if (pg->getSize() != static_cast<int>(m.size()) || pg->getRank() < 0 || pg->getRank() >= pg->getSize() ||
        m[static_cast<size_t>(pg->getRank())] != rank) {
      return absl::InvalidArgumentError(absl::StrCat("fan-out: group ", g, " is not the ", m.size(),
                                                     " ranks it is said to be, with rank ", rank, " in it"));
    }
    pgs.push_back(std::move(pg));
  }
  std::vector<HeldPiece> items(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const at::Tensor& dest = requests[i].dest;
    // Only whole contiguous destinations travel (a chunk is a view of their memory).
    if (group_of[i] >= 0 && dest.defined() && dest.is_contiguous()) {
      items[i] = HeldPiece{group_of[i], static_cast<uint64_t>(dest.nbytes()),
                           i > 0 && entry_of[i] == entry_of[i - 1]};
    }
  }
  std::vector<std::string> identity = std::move(out.fan.item_identity);
  ML_ASSIGN_OR_RETURN(out.fan, RankFanoutWithinGroups(rank, members, items));  // group ids index `pgs`
  out.fan.item_identity = std::move(identity);
  ML_RETURN_IF_ERROR(CallTorch(
      "the fan-out's device", [&] { out.settings.device = at::Device(spec["device"].cast<std::string>()); }));
  out.settings.groups = [pgs](int group, const std::vector<int>&) -> absl::StatusOr<ProcessGroupPtr> {
    return pgs[static_cast<size_t>(group)];
  };
  out.settings.max_group_threads = 1;  // the user's groups, one at a time (fanout.h)
  out.settings.agree = true;
  out.settings.timeout = timeout;
  out.settings.kill_after_chunks = TestKnob("METALOAD_FANOUT_TEST_KILL_AFTER_CHUNKS", 1, int64_t{1} << 40);
  if (const int64_t chunk = TestKnob("METALOAD_FANOUT_TEST_CHUNK_BYTES", 1, int64_t{1} << 30); chunk > 0) {
    out.settings.chunk_bytes = static_cast<uint64_t>(chunk);
  }
  return out;
}

}  // namespace metaload
