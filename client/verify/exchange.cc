#include "client/verify/exchange.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

constexpr int kMaxWorld = 1 << 20;
constexpr size_t kHeaderWords = kHeaderBytes / 8;
// A slot's votes after the table: the holders that found its content checked, read without a
// digest, unproven, or differing (every holder judges a slot alike).
constexpr size_t kVotes = 4;

// Counts from other processes: summed saturating, so that a wrong one cannot wrap to "fine".
void Add(int64_t& total, int64_t n) { total = n < 0 || total > INT64_MAX - n ? INT64_MAX : total + n; }

// Reads every rank's header, and then its details, into the outcome.
void Tally(const std::vector<RankReport>& reports, VerifyOutcome* outcome) {
  std::map<std::string, std::vector<int>> ranks_by_plan;
  std::map<std::string, std::string> label_of;
  std::set<std::string> unproven_named;
  for (int r = 0; r < static_cast<int>(reports.size()); ++r) {
    const RankReport& report = reports[r];
    Add(outcome->bad_tensor_count, report.bad_tensor_count);
    Add(outcome->mismatch_count, report.mismatch_count);
    Add(outcome->checked_count, report.checked_count);
    Add(outcome->unproven_count, report.unproven_count);
    Add(outcome->initialized_count, report.initialized_count);
    Add(outcome->computed_count, report.computed_count);
    outcome->has_digests = outcome->has_digests || report.has_digests;
    if (report.bad_tensor_count != report.mismatch_count) outcome->bad_ranks.push_back(r);
    if (report.mismatch_count != 0) outcome->mismatch_ranks.push_back(r);
    if (report.could_not_load) outcome->failed_ranks.push_back(r);
    if (!report.plan_digest.empty()) {
      ranks_by_plan[report.plan_digest].push_back(r);
      label_of[report.plan_digest] = report.plan_label;
    }
    for (const Finding& f : report.findings) outcome->findings.push_back(RankedFinding{r, f});
    for (const Finding& f : report.unproven) {
      if (unproven_named.insert(f.tensor).second) outcome->unproven.push_back(RankedFinding{r, f});
    }
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

// The proofs' table as every rank agrees on it from the headers: its slots and lanes, or why
// there is none (then every digest stays unproven).
struct TableShape {
  int64_t slots = 0;
  DigestKind kind = DigestKind::kNone;
  std::string none_because;  // set: no table, though some rank has digests
  size_t width() const { return 3 + LaneCount(kind); }
};

TableShape ShapeOf(const std::vector<RankReport>& headers) {
  TableShape shape;
  int64_t kind = 0;
  for (const RankReport& h : headers) {
    // A slot count no registration has (request_limits.h: 4,000,000 tensors at most) comes from
    // no rank of this protocol: no table, rather than an allocation it asks for.
    if (h.table_slots < 0 || h.table_slots > 4'000'000) {
      shape.none_because = absl::StrCat("a rank sent a table of ", h.table_slots, " slots");
      return {0, DigestKind::kNone, shape.none_because};
    }
    shape.slots = std::max(shape.slots, h.table_slots);
    if (h.table_kind == 0) continue;
    if (kind != 0 && kind != h.table_kind) kind = kMixedKinds;
    if (kind == 0) kind = h.table_kind;
  }
  if (kind == kMixedKinds || (kind != 0 && kind != static_cast<int64_t>(DigestKind::kFast) &&
                              kind != static_cast<int64_t>(DigestKind::kStrong))) {
    return {0, DigestKind::kNone, "the ranks' stored tensors carry digests of different kinds"};
  }
  shape.kind = static_cast<DigestKind>(kind);
  if (static_cast<uint64_t>(shape.slots) * shape.width() * 8 > kMaxProofTableBytes) {
    return {0, DigestKind::kNone,
            absl::StrCat(shape.slots, " stored tensors with ", DigestKindName(shape.kind),
                         " digests take more than ", kMaxProofTableBytes >> 20,
                         " MiB to check in one verification")};
  }
  return shape;
}

// Adds this rank's proofs into its table: per slot tiles hashed, tiles cut, contributions, lanes.
void AddProofs(const std::vector<TensorProof>& proofs, const TableShape& shape, std::vector<int64_t>& table) {
  const size_t width = shape.width();
  for (const TensorProof& p : proofs) {
    if (p.index < 0 || p.index >= shape.slots) continue;
    int64_t* slot = table.data() + static_cast<size_t>(p.index) * width;
    slot[0] += static_cast<int64_t>(std::min<uint64_t>(p.sum.tiles_hashed, INT64_MAX / 2));
    slot[1] += static_cast<int64_t>(std::min<uint64_t>(p.sum.tiles_cut, INT64_MAX / 2));
    slot[2] += 1;
    if (p.sum.kind != shape.kind || p.sum.lanes.size() != LaneCount(shape.kind)) continue;
    for (size_t l = 0; l < p.sum.lanes.size(); ++l) slot[3 + l] += p.sum.lanes[l];
  }
}

SlotSum SlotAt(const std::vector<int64_t>& table, const TableShape& shape, int64_t index) {
  const size_t width = shape.width();
  const int64_t* slot = table.data() + static_cast<size_t>(index) * width;
  SlotSum sum;
  sum.hashed = static_cast<uint64_t>(std::max<int64_t>(0, slot[0]));
  sum.cut = static_cast<uint64_t>(std::max<int64_t>(0, slot[1]));
  sum.holders = static_cast<uint64_t>(std::max<int64_t>(0, slot[2]));
  sum.lanes.resize(LaneCount(shape.kind));
  for (size_t l = 0; l < sum.lanes.size(); ++l) sum.lanes[l] = static_cast<uint16_t>(slot[3 + l] & 0xffff);
  return sum;
}

// Judges every slot this rank holds: a mismatch becomes a finding, an unproven tensor a named
// one; the votes say, per slot, how this rank judged it.
void Judge(const std::vector<int64_t>& table, const TableShape& shape, RankReport& mine,
           std::vector<int64_t>& votes) {
  std::set<int64_t> judged;
  for (const TensorProof& p : mine.proofs) {
    if (p.index < 0 || p.index >= shape.slots || !judged.insert(p.index).second) continue;
    ContentVerdict verdict;
    if (!p.digest.has_value()) {
      verdict.state = ContentState::kNoDigest;
    } else if (shape.kind == DigestKind::kNone) {
      verdict = {ContentState::kUnproven, "its digest could not be checked: no table of digests was summed"};
    } else {
      verdict = JudgeSlot(p, SlotAt(table, shape, p.index));
    }
    votes[static_cast<size_t>(p.index) * kVotes + static_cast<size_t>(verdict.state)] += 1;
    if (verdict.state == ContentState::kMismatch) {
      mine.findings.push_back(Finding{p.stored, verdict.why});
      ++mine.bad_tensor_count;
      ++mine.mismatch_count;
    } else if (verdict.state == ContentState::kUnproven) {
      mine.unproven.push_back(Finding{p.stored, verdict.why});
    }
  }
}

void CountVotes(const std::vector<int64_t>& votes, VerifyOutcome* outcome) {
  for (size_t s = 0; s + kVotes <= votes.size(); s += kVotes) {
    // Every holder judges a slot alike; should they differ, the worst judgement counts.
    if (votes[s + static_cast<size_t>(ContentState::kMismatch)] > 0) {
      ++outcome->stored_mismatch;
    } else if (votes[s + static_cast<size_t>(ContentState::kUnproven)] > 0) {
      ++outcome->stored_unproven;
    } else if (votes[s + static_cast<size_t>(ContentState::kNoDigest)] > 0) {
      ++outcome->stored_no_digest;
    } else if (votes[s + static_cast<size_t>(ContentState::kChecked)] > 0) {
      ++outcome->stored_checked;
    }
  }
}

// Every rank's header at its place in `all` (kHeaderBytes each), `mine` written at `rank`'s.
void DecodeHeaders(absl::Span<const uint8_t> all, size_t ranks, std::vector<RankReport>& reports,
                   std::vector<uint64_t>& length) {
  for (size_t r = 0; r < ranks; ++r) {
    reports[r] = DecodeHeader(all.subspan(r * kHeaderBytes, kHeaderBytes), &length[r]);
  }
}

}  // namespace

absl::StatusOr<VerifyOutcome> ExchangeReports(RankReport mine, int rank, int world,
                                              const ExchangeSums& sums) {
  if (world < 1 || world > kMaxWorld || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is outside world size ", world));
  }
  const size_t ranks = static_cast<size_t>(world);
  // Every rank computes the same limit, so that all agree on where each rank's details go.
  const uint64_t limit = std::min(kRankDetailsBytes, kAllDetailsBytes / ranks);
  SetTableOf(mine);
  int64_t cut = 0;
  std::string details = EncodeDetails(mine, limit, &cut);

  std::vector<uint8_t> headers(ranks * kHeaderBytes, 0);
  mine.findings_cut += cut;
  EncodeHeader(mine, details.size(), absl::MakeSpan(headers).subspan(rank * kHeaderBytes, kHeaderBytes));
  mine.findings_cut -= cut;
  if (world > 1) ML_RETURN_IF_ERROR(sums.bytes(absl::MakeSpan(headers), "verification's all-reduce"));

  VerifyOutcome outcome;
  std::vector<RankReport> reports(ranks);
  std::vector<uint64_t> length(ranks, 0);
  DecodeHeaders(headers, ranks, reports, length);

  // The proofs' table, when some rank read a stored tensor: summed, judged by each holder, and
  // the headers sent again with what it showed (findings, unproven tensors) and every slot's votes.
  const TableShape shape = ShapeOf(reports);
  const bool has_table = shape.slots > 0 && shape.none_because.empty();
  if ((has_table || !shape.none_because.empty()) && world > 1 && !sums.int64) {
    return absl::InternalError("verification: the proofs' table needs a 64-bit sum, and none was given");
  }
  if (has_table || !shape.none_because.empty()) {
    std::vector<int64_t> votes;
    if (has_table) {
      std::vector<int64_t> table(static_cast<size_t>(shape.slots) * shape.width(), 0);
      if (shape.kind != DigestKind::kNone) {
        AddProofs(mine.proofs, shape, table);
        if (world > 1) ML_RETURN_IF_ERROR(sums.int64(absl::MakeSpan(table), "verification's sum of digests"));
      }
      votes.assign(static_cast<size_t>(shape.slots) * kVotes, 0);
      Judge(table, shape, mine, votes);
    } else {
      // No table every rank agrees on: nothing is summed, and every proof stays unproven, named.
      outcome.notes.push_back(absl::StrCat("no stored tensor's content was checked: ", shape.none_because));
      std::set<std::string> named;
      for (const TensorProof& p : mine.proofs) {
        if (named.insert(p.stored).second) mine.unproven.push_back(Finding{p.stored, shape.none_because});
      }
    }
    cut = 0;
    details = EncodeDetails(mine, limit, &cut);
    // Round two: every rank's header again, with what the table showed it (its own words, zeros
    // elsewhere), and every slot's votes.
    std::vector<int64_t> second(ranks * kHeaderWords + votes.size(), 0);
    std::vector<uint8_t> header(kHeaderBytes, 0);
    mine.findings_cut += cut;
    EncodeHeader(mine, details.size(), absl::MakeSpan(header));
    std::memcpy(second.data() + static_cast<size_t>(rank) * kHeaderWords, header.data(), kHeaderBytes);
    std::copy(votes.begin(), votes.end(), second.begin() + ranks * kHeaderWords);
    if (world > 1) ML_RETURN_IF_ERROR(sums.int64(absl::MakeSpan(second), "verification's second all-reduce"));
    std::memcpy(headers.data(), second.data(), ranks * kHeaderBytes);
    DecodeHeaders(headers, ranks, reports, length);
    CountVotes(std::vector<int64_t>(second.begin() + ranks * kHeaderWords, second.end()), &outcome);
    if (has_table && shape.kind != DigestKind::kNone) outcome.digest_kind = DigestKindName(shape.kind);
  }

  std::vector<uint64_t> offset(ranks, 0);
  uint64_t total = 0;
  for (size_t r = 0; r < ranks; ++r) {
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
      ML_RETURN_IF_ERROR(sums.bytes(absl::MakeSpan(all), "the all-reduce of findings"));
      // Every rank has every rank's details before any returns (and may tear its group down).
      std::vector<uint8_t> done(8, 0);
      ML_RETURN_IF_ERROR(sums.bytes(absl::MakeSpan(done), "the last all-reduce of verification"));
    }
    for (size_t r = 0; r < ranks; ++r) {
      DecodeDetails(absl::MakeConstSpan(all).subspan(offset[r], length[r]), &reports[r]);
    }
  }
  Tally(reports, &outcome);
  if (!shape.none_because.empty()) outcome.stored_unproven = static_cast<int64_t>(outcome.unproven.size());
  return outcome;
}

}  // namespace metaload
