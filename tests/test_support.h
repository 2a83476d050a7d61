// Helpers shared by the GoogleTest binaries.
#ifndef METALOAD_TESTS_TEST_SUPPORT_H_
#define METALOAD_TESTS_TEST_SUPPORT_H_

#include <cstdint>
#include <string>

#include "absl/types/span.h"

namespace metaload::testing {

// The fixtures folder: $METALOAD_FIXTURES, else the repository's tests/fixtures.
// Returns "" when it does not exist (callers GTEST_SKIP with a message saying so; under CI=true
// the skip fails the binary, tests/test_main.cc).
std::string FixturesDir();
inline constexpr char kNoFixtures[] = "fixtures folder not found (tests/fixtures, or set METALOAD_FIXTURES)";

// A fresh empty folder under $TMPDIR, removed by the caller's TempDir destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string ReadFileOrDie(const std::string& path);
// A TCP port on 127.0.0.1 that was free a moment ago (for a server a test starts).
int FreeLoopbackPort();
void WriteFileOrDie(const std::string& path, const std::string& contents);
// The bytes of `text`, as the hashing functions take them.
inline absl::Span<const uint8_t> Bytes(const std::string& text) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

}  // namespace metaload::testing

#define METALOAD_REQUIRE_FIXTURES(dir_var)                  \
  std::string dir_var = ::metaload::testing::FixturesDir(); \
  if (dir_var.empty()) GTEST_SKIP() << ::metaload::testing::kNoFixtures

#endif  // METALOAD_TESTS_TEST_SUPPORT_H_
