// The one device rule (client/load/device.h) under metactl load --device, the Python package's
// device= and verification. These cases hold on any machine; CUDA ones check what they can.
#include "client/load/device.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace metaload {
namespace {

TEST(ResolveDevice, CpuIsTheCpuAndNothingChoosesCudaWhereNoneIsVisible) {
  absl::StatusOr<torch::Device> cpu = ResolveDevice("cpu", 3);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_TRUE(cpu->is_cpu());
  absl::StatusOr<torch::Device> chosen = ResolveDevice("", 3);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(chosen->is_cuda(), torch::cuda::device_count() > 0);
}

TEST(ResolveDevice, AnythingElseIsBadInputNamingTheText) {
  for (const char* text : {"tpu", "cpu:0", "CUDA", "cuda0"}) {
    absl::StatusOr<torch::Device> device = ResolveDevice(text, 0);
    EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(device.status().message(), absl::StrCat("--device \"", text, "\": use cpu, cuda or cuda:N"));
  }
}

TEST(ResolveDevice, CudaNamesAVisibleDevice) {
  const int count = static_cast<int>(torch::cuda::device_count());
  if (count == 0) {
    EXPECT_EQ(ResolveDevice("cuda", 0).status().message(),
              "--device cuda: no CUDA device is visible to this process");
    EXPECT_EQ(ResolveDevice("cuda:1", 0).status().message(),
              "--device cuda:1: no CUDA device is visible to this process");
    return;
  }
  EXPECT_EQ(ResolveDevice("cuda:x", 0).status().message(), "--device cuda:x: bad CUDA index");
  EXPECT_EQ(ResolveDevice(absl::StrCat("cuda:", count), 0).status().message(),
            absl::StrCat("--device cuda:", count, ": only ", count, " CUDA devices"));
  absl::StatusOr<torch::Device> last = ResolveDevice(absl::StrCat("cuda:", count - 1), 0);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->index(), count - 1);
  // "cuda": LOCAL_RANK when set (torchrun), else the rank modulo the visible devices.
  setenv("LOCAL_RANK", std::to_string(count - 1).c_str(), 1);
  EXPECT_EQ(ResolveDevice("cuda", 0)->index(), count - 1);
  unsetenv("LOCAL_RANK");
  EXPECT_EQ(ResolveDevice("cuda", count + 1)->index(), 1 % count);
  EXPECT_EQ(ResolveDevice("", count + 1)->index(), 1 % count);
}

TEST(NamesCuda, WhatAsksForCudaWhetherOrNotOneIsVisible) {
  const std::pair<const char*, bool> cases[] = {
      {"cuda", true}, {"cuda:3", true}, {"cpu", false}, {"", false}, {"cudax", false}};
  for (const auto& [text, cuda] : cases) EXPECT_EQ(NamesCuda(text), cuda) << text;
}

}  // namespace
}  // namespace metaload
