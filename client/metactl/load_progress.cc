#include "client/metactl/load_progress.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/units.h"

namespace metaload {

ProgressStyle ChooseProgressStyle(std::optional<bool> flag, bool stderr_is_terminal,
                                  std::optional<int> local_rank) {
  if (flag.has_value() && !*flag) return ProgressStyle::kOff;
  const ProgressStyle drawn = stderr_is_terminal ? ProgressStyle::kTerminal : ProgressStyle::kLines;
  if (flag.has_value()) return drawn;
  // Unasked: only on a terminal, and there by one rank of the node (its ranks share it).
  if (!stderr_is_terminal || local_rank.value_or(0) != 0) return ProgressStyle::kOff;
  return drawn;
}

absl::Duration ProgressInterval(ProgressStyle style) {
  return style == ProgressStyle::kTerminal ? absl::Milliseconds(200) : absl::Seconds(1);
}

std::string ProgressLine(const LoadProgress& p, int rank, int world_size) {
  const uint64_t done = p.done_bytes();
  const uint64_t total = std::max(p.total_bytes, done);  // a fall-back read of a fanned-out tensor
  const int percent = total == 0 ? 100 : static_cast<int>(done * 100 / total);
  const double rate = p.seconds > 0 ? static_cast<double>(done) / p.seconds : 0.0;  // bytes/s
  std::string when;
  if (p.finished) {
    when = absl::StrFormat("in %.2f s", p.seconds);
  } else if (rate > 0) {
    when = absl::StrFormat("ETA %.1f s", static_cast<double>(total - done) / rate);
  } else {
    when = "ETA ?";
  }
  return absl::StrFormat(
      "rank %d/%d: %s of %s (%d%%), %.0f MB/s, %s; direct %s, streamed %s, received %s; %d/%d tensors", rank,
      world_size, FormatBytes(done), FormatBytes(total), percent, rate / 1e6, when,
      FormatBytes(p.direct_bytes), FormatBytes(p.streamed_bytes), FormatBytes(p.received_bytes),
      p.tensors_done, p.tensors_total);
}

ProgressCallback StderrProgress(ProgressStyle style, int rank, int world_size) {
  if (style == ProgressStyle::kOff) return ProgressCallback();
  const bool terminal = style == ProgressStyle::kTerminal;
  return [terminal, rank, world_size](const LoadProgress& p) {
    // One write per record, so that a warning logged meanwhile never lands inside a line.
    std::string text = ProgressLine(p, rank, world_size);
    if (terminal) text = absl::StrCat("\r", text, "\x1b[K");  // redrawn in place, the rest erased
    if (!terminal || p.finished) text += "\n";
    ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());  // a closed stderr stops no load
    (void)ignored;
  };
}

}  // namespace metaload
