#include "client/verify/exchange.h"

#include <algorithm>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

constexpr int kMaxWorld = 1 << 20;

// Reads every rank's header, and then its details, into the outcome.
void Tally(const std::vector<RankReport>& reports, VerifyOutcome* outcome) {
  std::map<std::string, std::vector<int>> ranks_by_plan;
  std::map<std::string, std::string> label_of;
  for (int r = 0; r < static_cast<int>(reports.size()); ++r) {
    const RankReport& report = reports[r];
    // Counts from other processes: summed saturating, so that a wrong one cannot wrap to "fine".
    const auto add = [](int64_t& total, int64_t n) {
      total = n < 0 || total > INT64_MAX - n ? INT64_MAX : total + n;
    };
    add(outcome->bad_tensor_count, report.bad_tensor_count);
    add(outcome->checked_count, report.checked_count);
    add(outcome->unproven_count, report.unproven_count);
    add(outcome->digest_matched_count, report.digest_matched_count);
    add(outcome->digest_sliced_count, report.digest_sliced_count);
    add(outcome->digest_on_device_count, report.digest_on_device_count);
    outcome->has_digests = outcome->has_digests || report.has_digests;
    if (report.bad_tensor_count != 0) outcome->bad_ranks.push_back(r);
    if (report.could_not_load) outcome->failed_ranks.push_back(r);
    if (!report.plan_digest.empty()) {
      ranks_by_plan[report.plan_digest].push_back(r);
      label_of[report.plan_digest] = report.plan_label;
    }
    for (const Finding& f : report.findings) outcome->findings.push_back(RankedFinding{r, f});
    for (const std::string& line : report.summary) outcome->summaries.emplace_back(r, line);
    if (report.findings_cut > 0) outcome->findings_cut.emplace_back(r, report.findings_cut);
  }
  if (ranks_by_plan.size() > 1) {
    for (const auto& [digest, ranks] : ranks_by_plan) {
      outcome->plan_mismatch.push_back(absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", RankList(ranks),
                                                    " loaded plan ", digest.substr(0, 12), " (",
                                                    label_of[digest], ")"));
    }
  }
}

}  // namespace

absl::StatusOr<VerifyOutcome> ExchangeReports(RankReport mine, int rank, int world, const SumBytesFn& sum) {
  if (world < 1 || world > kMaxWorld || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is outside world size ", world));
  }
  const size_t ranks = static_cast<size_t>(world);
  // Every rank computes the same limit, so that all agree on where each rank's details go.
  const uint64_t limit = std::min(kRankDetailsBytes, kAllDetailsBytes / ranks);
  int64_t cut = 0;
  const std::string details = EncodeDetails(mine, limit, &cut);
  mine.findings_cut += cut;

  std::vector<uint8_t> headers(ranks * kHeaderBytes, 0);
  EncodeHeader(mine, details.size(), absl::MakeSpan(headers).subspan(rank * kHeaderBytes, kHeaderBytes));
  if (world > 1) ML_RETURN_IF_ERROR(sum(absl::MakeSpan(headers), "verification's all-reduce"));

  VerifyOutcome outcome;
  std::vector<RankReport> reports(ranks);
  std::vector<uint64_t> offset(ranks, 0), length(ranks, 0);
  uint64_t total = 0;
  for (size_t r = 0; r < ranks; ++r) {
    reports[r] =
        DecodeHeader(absl::MakeConstSpan(headers).subspan(r * kHeaderBytes, kHeaderBytes), &length[r]);
    if (length[r] > limit) {  // not what a rank of this protocol writes: its details are not read
      outcome.notes.push_back(absl::StrCat("rank ", r, " sent a report with ", length[r],
                                           " bytes of details, over the limit of ", limit,
                                           ": its findings are not named"));
      length[r] = 0;
    }
    offset[r] = total;
    total += length[r];  // at most kAllDetailsBytes: no overflow
  }
  if (total > 0) {
    std::vector<uint8_t> all(total, 0);
    if (length[rank] == details.size()) std::copy(details.begin(), details.end(), all.begin() + offset[rank]);
    if (world > 1) {
      ML_RETURN_IF_ERROR(sum(absl::MakeSpan(all), "the all-reduce of findings"));
      // Every rank has every rank's details before any returns (and may tear its group down).
      std::vector<uint8_t> done(8, 0);
      ML_RETURN_IF_ERROR(sum(absl::MakeSpan(done), "the last all-reduce of verification"));
    }
    for (size_t r = 0; r < ranks; ++r) {
      DecodeDetails(absl::MakeConstSpan(all).subspan(offset[r], length[r]), &reports[r]);
    }
  }
  Tally(reports, &outcome);
  return outcome;
}

}  // namespace metaload
