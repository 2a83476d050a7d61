// The bounds every entry point holds its read and wait options to — metactl's flags, the C++
// facade's options and the Python package's keywords alike — and the one message for each.
// Pure, torch-free.
#ifndef METALOAD_CLIENT_READ_KNOBS_H_
#define METALOAD_CLIENT_READ_KNOBS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace metaload {

inline constexpr int kMaxReadThreads = 64;
inline constexpr absl::Duration kMaxTimeout = absl::Hours(7 * 24);

// InvalidArgument "read_threads 65 is outside 1..64".
absl::Status CheckReadThreads(int read_threads);

// A wait given in seconds (Python's timeout_s=, verify_timeout_s=): in (0, 604800], else
// InvalidArgument "timeout_s nan is not in (0, 604800]" (`name` as the caller spells it).
absl::StatusOr<absl::Duration> TimeoutFromSeconds(absl::string_view name, double seconds);

// The same bound for a duration (the C++ facade's options): "timeout 0 is not in (0, 168h]".
absl::Status CheckTimeout(absl::string_view name, absl::Duration timeout);

}  // namespace metaload

#endif  // METALOAD_CLIENT_READ_KNOBS_H_
