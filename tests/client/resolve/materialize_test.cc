// Materialize takes every read setting the plan-driven load takes (client/read/fill.h
// ReadSettings): a stream from a daemon that never answers is given up after the caller's
// stall timeout, as often as the caller's retry policy says — not after the defaults.
#include "client/resolve/materialize.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace metaload {
namespace {

// A TCP listener that accepts connections (the kernel does) and never says a word: a daemon
// that hangs. Its port, or 0 when none could be made.
class SilentListener {
 public:
  SilentListener() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof(address);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&address), size) != 0 || listen(fd_, 16) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
      return;
    }
    port_ = ntohs(address.sin_port);
  }
  ~SilentListener() {
    if (fd_ >= 0) close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// One 16-byte tensor in a file this host cannot open, served only by `address`.
ModelView ViewServedBy(const std::string& address) {
  ModelView view;
  view.model = "m";
  view.answered_by = "hung";
  view.stored["w"] = TensorLayout{"w", DType::kU8, {16}, "model.safetensors", 8, 24, std::nullopt};
  view.files["model.safetensors"] =
      FileRoute{"model.safetensors", "/nonexistent/model.safetensors", 24, {{"hung", address}}, {}};
  return view;
}

TEST(Materialize, AStreamThatStallsIsGivenUpAfterTheCallersStallTimeoutAndRetryPolicy) {
  SilentListener hung;
  ASSERT_NE(hung.port(), 0);
  const ModelView view = ViewServedBy(absl::StrCat("127.0.0.1:", hung.port()));
  std::vector<MaterializeRequest> requests{
      {"w", {16}, std::nullopt, false, torch::zeros({16}, torch::kUInt8)}};
  MaterializeSettings settings;
  settings.read.source = Source::kStream;
  settings.read.timeout = absl::Seconds(5);  // each attempt's deadline, were the stall timeout ignored
  settings.read.stall_timeout = absl::Milliseconds(300);
  settings.read.retry = RetryPolicy{.rounds = 1, .min_attempts = 1};  // one attempt, no backoff
  const absl::Time start = absl::Now();
  absl::StatusOr<MaterializeOutcome> outcome = Materialize(view, requests, settings);
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ASSERT_EQ(outcome->results.size(), 1u);
  EXPECT_FALSE(outcome->results[0].filled);
  // The defaults (30 s stall timeout, six attempts with backoff) would take six deadlines.
  EXPECT_NE(outcome->results[0].error.find("no byte for 300ms"), std::string::npos)
      << outcome->results[0].error;
  EXPECT_LT(took, absl::Seconds(4)) << "one attempt, given up after its 300 ms stall";
}

}  // namespace
}  // namespace metaload
