#include "client/read/knobs.h"

#include "absl/strings/str_cat.h"

namespace metaload {

absl::Status CheckReadThreads(int read_threads) {
  if (read_threads < 1 || read_threads > kMaxReadThreads) {
    return absl::InvalidArgumentError(
        absl::StrCat("read_threads ", read_threads, " is outside 1..", kMaxReadThreads));
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Duration> TimeoutFromSeconds(absl::string_view name, double seconds) {
  const double limit = absl::ToDoubleSeconds(kMaxTimeout);
  if (!(seconds > 0) || seconds > limit) {  // NaN fails both comparisons: refused too
    return absl::InvalidArgumentError(absl::StrCat(name, " ", seconds, " is not in (0, ", limit, "]"));
  }
  return absl::Seconds(seconds);
}

absl::Status CheckTimeout(absl::string_view name, absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration() || timeout > kMaxTimeout) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " ", absl::FormatDuration(timeout), " is not in (0, ", absl::FormatDuration(kMaxTimeout), "]"));
  }
  return absl::OkStatus();
}

}  // namespace metaload
