#include "tests/faults/kill_fault.h"

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "util/log.h"

namespace metaload {
namespace {

constexpr char kVariable[] = "METALOAD_TEST_KILL_AFTER_BYTES";
constexpr char kSignalVariable[] = "METALOAD_TEST_KILL_SIGNAL";

}  // namespace

bool KillFault::ArmFromEnvironment() {
  const char* text = std::getenv(kVariable);
  if (text == nullptr || *text == '\0') return true;
  uint64_t bytes = 0;
  if (!absl::SimpleAtoi(text, &bytes) || bytes == 0) {
    LogError(absl::StrCat(kVariable, "=\"", text, "\" must be a positive number of bytes"));
    return false;
  }
  const char* signal_name = std::getenv(kSignalVariable);
  const std::string how = signal_name == nullptr || *signal_name == '\0' ? "SIGKILL" : signal_name;
  if (how != "SIGKILL" && how != "SIGSTOP" && how != "SIGTERM") {
    LogError(absl::StrCat(kSignalVariable, "=\"", how, "\" must be SIGKILL, SIGSTOP or SIGTERM"));
    return false;
  }
  signal_.store(how == "SIGSTOP" ? SIGSTOP : how == "SIGTERM" ? SIGTERM : SIGKILL);
  LogWarning(absl::StrCat("TEST FAULT ARMED: ", kVariable, "=", bytes, ": this daemon will ", how,
                          " itself once it has served ", bytes,
                          " bytes of ReadRange. For tests only; unset it in production."));
  kill_after_bytes_.store(bytes);
  return true;
}

void KillFault::BytesServed(uint64_t served_bytes) {
  const uint64_t threshold = kill_after_bytes_.load(std::memory_order_relaxed);
  if (threshold == 0 || served_bytes < threshold) return;
  if (kill_after_bytes_.exchange(0) == 0) return;  // another thread fired it (a SIGSTOP fires once)
  const int signal_number = signal_.load();
  // Raw write(2): this runs on a gRPC thread, and nothing may be flushed or unwound, as in a crash.
  const std::string line = absl::StrCat("metad: ", kVariable, ": ", served_bytes, " bytes served; ",
                                        signal_number == SIGSTOP   ? "SIGSTOP"
                                        : signal_number == SIGTERM ? "SIGTERM"
                                                                   : "SIGKILL",
                                        "\n");
  [[maybe_unused]] ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  // To the process, not this thread: SIGTERM is blocked in every thread and taken by the main
  // thread's sigtimedwait, which sees only signals sent to the process or to itself.
  kill(getpid(), signal_number);
}

}  // namespace metaload
