#include "client/load/device.h"

#include <torch/cuda.h>

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace metaload {

bool NamesCuda(const std::string& text) { return text == "cuda" || absl::StartsWith(text, "cuda:"); }

absl::StatusOr<torch::Device> ResolveDevice(const std::string& text, int rank) {
  if (text == "cpu") return torch::Device(torch::kCPU);
  if (!text.empty() && !NamesCuda(text)) {
    return absl::InvalidArgumentError(absl::StrCat("--device \"", text, "\": use cpu, cuda or cuda:N"));
  }
  const int count = static_cast<int>(torch::cuda::device_count());
  if (text.empty()) return count > 0 ? ResolveDevice("cuda", rank) : torch::Device(torch::kCPU);
  if (count == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device ", text, ": no CUDA device is visible to this process"));
  }
  int index = 0;
  if (text == "cuda") {
    const char* local_rank = std::getenv("LOCAL_RANK");
    if (local_rank == nullptr || !absl::SimpleAtoi(local_rank, &index)) index = rank % count;
  } else if (!absl::SimpleAtoi(text.substr(5), &index)) {
    return absl::InvalidArgumentError(absl::StrCat("--device ", text, ": bad CUDA index"));
  }
  if (index < 0 || index >= count) {
    return absl::InvalidArgumentError(absl::StrCat("--device ", text, ": only ", count, " CUDA devices"));
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

}  // namespace metaload
