// One mapping for all of a CPU rank's tensors (client/load/host_arena.h): aligned tensors that
// share it, keep it alive, and take exactly their bytes.
#include "client/load/host_arena.h"

#include <gtest/gtest.h>

namespace metaload {
namespace {

TEST(HostArena, PaddedRoundsUpToTheAlignment) {
  EXPECT_EQ(HostArena::Padded(0), 0u);
  EXPECT_EQ(HostArena::Padded(1), 64u);
  EXPECT_EQ(HostArena::Padded(64), 64u);
  EXPECT_EQ(HostArena::Padded(65), 128u);
}

TEST(HostArena, TensorsAreAlignedViewsOfOneMapping) {
  auto arena = HostArena::Create(3 * 4096, /*huge_pages=*/false);
  ASSERT_TRUE(arena.ok()) << arena.status();
  at::Tensor a = arena->Tensor(0, {16, 16}, at::kFloat);    // 1024 bytes
  at::Tensor b = arena->Tensor(1024, {10}, at::kBFloat16);  // 20 bytes
  EXPECT_TRUE(a.device().is_cpu());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data_ptr()) % HostArena::kAlignBytes, 0u);
  EXPECT_EQ(static_cast<uint8_t*>(b.data_ptr()) - static_cast<uint8_t*>(a.data_ptr()), 1024);
  a.fill_(1.5);
  b.fill_(2.0);
  EXPECT_EQ(a.sum().item<float>(), 1.5f * 256);
  EXPECT_EQ(b.sum().item<float>(), 20.0f) << "neighbours do not overlap";
}

TEST(HostArena, TensorsKeepTheMappingAliveAfterTheArenaIsGone) {
  at::Tensor t;
  {
    auto arena = HostArena::Create(4096, false);
    ASSERT_TRUE(arena.ok());
    t = arena->Tensor(0, {1024}, at::kFloat);
  }
  t.fill_(3.0);  // would fault if the mapping were unmapped with the arena
  EXPECT_EQ(t.sum().item<float>(), 3072.0f);
}

TEST(HostArena, AnEmptyArenaIsValid) {
  auto arena = HostArena::Create(0, false);
  ASSERT_TRUE(arena.ok());
  EXPECT_EQ(arena->size_bytes(), 0u);
}

TEST(HostArena, AnImpossibleSizeIsResourceExhausted) {
  auto arena = HostArena::Create(1ull << 62, false);
  EXPECT_EQ(arena.status().code(), absl::StatusCode::kResourceExhausted) << arena.status();
}

}  // namespace
}  // namespace metaload
