#include "client/api/convert.h"

#include "absl/strings/str_cat.h"
#include "client/read/knobs.h"
#include "util/status_macros.h"

namespace metaload {

// The public enums mirror the library's in order, so that a cast converts them.
static_assert(static_cast<int>(ReadFrom::kStream) == static_cast<int>(Source::kStream) &&
              static_cast<int>(ReadFrom::kDirect) == static_cast<int>(Source::kDirect));
static_assert(static_cast<int>(ProvenanceKind::kNone) == static_cast<int>(Provenance::Kind::kNone) &&
              static_cast<int>(ProvenanceKind::kDirect) == static_cast<int>(Provenance::Kind::kDirect) &&
              static_cast<int>(ProvenanceKind::kStream) == static_cast<int>(Provenance::Kind::kStream) &&
              static_cast<int>(ProvenanceKind::kInit) == static_cast<int>(Provenance::Kind::kInit) &&
              static_cast<int>(ProvenanceKind::kBuffer) == static_cast<int>(Provenance::Kind::kBuffer) &&
              static_cast<int>(ProvenanceKind::kTied) == static_cast<int>(Provenance::Kind::kTied) &&
              static_cast<int>(ProvenanceKind::kModule) == static_cast<int>(Provenance::Kind::kModule) &&
              static_cast<int>(ProvenanceKind::kFanout) == static_cast<int>(Provenance::Kind::kFanout));

absl::StatusOr<ReadSettings> ToReadSettings(const ReadOptions& options) {
  ML_RETURN_IF_ERROR(CheckReadThreads(options.read_threads));
  ML_RETURN_IF_ERROR(CheckTimeout("timeout", options.timeout));
  ML_RETURN_IF_ERROR(CheckTimeout("stall_timeout", options.stall_timeout));
  ReadSettings settings;
  settings.source = static_cast<Source>(options.source);
  settings.read_threads = options.read_threads;
  settings.timeout = options.timeout;
  settings.stall_timeout = options.stall_timeout;
  settings.cancelled = options.cancelled;
  if (options.progress_interval < absl::Milliseconds(10) || options.progress_interval > absl::Minutes(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "progress_interval ", absl::FormatDuration(options.progress_interval), ": use 10ms to 1m"));
  }
  settings.progress = options.progress;
  settings.progress_interval = options.progress_interval;
  return settings;
}

absl::StatusOr<std::optional<InitPolicy>> ToInitPolicy(const std::optional<std::string>& text) {
  if (!text.has_value()) return std::optional<InitPolicy>();
  ML_ASSIGN_OR_RETURN(InitPolicy policy, ParseInitPolicy(*text));
  return std::optional<InitPolicy>(std::move(policy));
}

TensorResult ToTensorResult(const Provenance& provenance, bool filled, const std::string& error,
                            const std::vector<FailoverEvent>& failovers) {
  TensorResult result;
  result.filled = filled;
  result.provenance_kind = static_cast<ProvenanceKind>(provenance.kind);
  result.provenance = ProvenanceText(provenance);
  result.error = error;
  for (const FailoverEvent& e : failovers) result.failovers.push_back({e.from, e.to, e.at_byte, e.error});
  return result;
}

}  // namespace metaload
