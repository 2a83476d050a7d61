#include "daemon/membership/joiner.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "util/log.h"

namespace metaload {
namespace {

constexpr absl::Duration kRejoinInterval = absl::Seconds(2);

}  // namespace

Joiner::Joiner(Join join) : join_(std::move(join)), thread_([this] { Run(); }) {}

Joiner::~Joiner() { Stop(); }

void Joiner::Leave() {
  Stop();
  absl::Status left = join_(absl::Seconds(2), /*leaving=*/true);
  if (left.ok()) {
    LogInfo("left the cluster: new plans no longer list this node");
  } else {
    LogWarning(absl::StrCat("could not tell the coordinator that this node is leaving (", left.message(),
                            "); it expires after member_timeout"));
  }
}

void Joiner::Run() {
  bool joined = false;
  std::string last_error;
  while (true) {
    absl::Status status = join_(absl::Seconds(2), /*leaving=*/false);
    if (status.ok() && !joined) LogInfo("joined the coordinator");
    if (!status.ok() && std::string(status.message()) != last_error) {
      LogWarning(absl::StrCat(status.message(), " (retrying)"));
      last_error = std::string(status.message());
    }
    if (status.ok()) last_error.clear();
    joined = status.ok();
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, absl::ToChronoNanoseconds(joined ? kRejoinInterval : absl::Seconds(1)),
                     [this] { return stop_; })) {
      return;
    }
  }
}

void Joiner::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

}  // namespace metaload
