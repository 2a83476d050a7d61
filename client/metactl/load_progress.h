// `metactl load`'s progress (docs/cli.md): one line for the rank, bytes of its total, rate, ETA
// and where the bytes came from, drawn from the load's progress records
// (include/metaload/progress.h) on stderr:
//
//   rank 0/2: 96.00 MiB of 256.00 MiB (37%), 412 MB/s, ETA 0.4 s; direct 64.00 MiB, streamed 32.00 MiB,
//   received 0 B; 9/24 tensors rank 0/2: 256.00 MiB of 256.00 MiB (100%), 398 MB/s, in 0.67 s; direct 160.00
//   MiB, streamed 96.00 MiB, received 0 B; 24/24 tensors
//
// On a terminal the line is redrawn in place every 200 ms and the last one stays; elsewhere
// (a log, a pipe) each record is a line of its own, once a second. Default: drawn when stderr is
// a terminal, by the first rank of the node only (LOCAL_RANK 0, or no LOCAL_RANK: a rank run by
// hand), as torchrun's ranks share one terminal; --progress draws on every rank, wherever
// stderr goes; --no-progress (or --quiet) never.
//
// Thread-safety: the callback writes whole lines with one write each.
#ifndef METALOAD_CLIENT_METACTL_LOAD_PROGRESS_H_
#define METALOAD_CLIENT_METACTL_LOAD_PROGRESS_H_

#include <optional>
#include <string>

#include "absl/time/time.h"
#include "metaload/progress.h"

namespace metaload {

enum class ProgressStyle {
  kOff,
  kTerminal,  // one line, redrawn in place
  kLines,     // a line per record
};

// What the flags ask for (--progress: true, --no-progress/--quiet: false, neither: nullopt), for
// a stderr that is a terminal or not, on a rank whose LOCAL_RANK is `local_rank` (nullopt: unset).
ProgressStyle ChooseProgressStyle(std::optional<bool> flag, bool stderr_is_terminal,
                                  std::optional<int> local_rank);

// How often a style draws.
absl::Duration ProgressInterval(ProgressStyle style);

// One record as the line above says it.
std::string ProgressLine(const LoadProgress& progress, int rank, int world_size);

// Draws `style` for rank `rank` of `world_size` on stderr; empty for kOff.
ProgressCallback StderrProgress(ProgressStyle style, int rank, int world_size);

}  // namespace metaload

#endif  // METALOAD_CLIENT_METACTL_LOAD_PROGRESS_H_
