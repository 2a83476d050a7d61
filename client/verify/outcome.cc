#include "client/verify/outcome.h"

#include <map>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace metaload {
namespace {

std::string Plural(int64_t n, const char* one, const char* many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

std::string Ranks(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", RankList(ranks));
}

}  // namespace

std::string RankList(const std::vector<int>& ranks) {
  if (ranks.size() > 2 && ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size())) {
    return absl::StrCat(ranks.front(), "-", ranks.back());
  }
  return absl::StrJoin(ranks, ", ");
}

int64_t VerifyOutcome::BadTensorsOnce() const {
  const int64_t per_rank = bad_tensor_count - mismatch_count;
  if (mismatch_count > 0 || !findings_cut.empty()) return per_rank;
  std::set<std::string> names;
  int64_t named = 0;
  for (const RankedFinding& f : findings) {
    if (f.finding.tensor.empty()) continue;
    names.insert(f.finding.tensor);
    ++named;
  }
  return named == per_rank ? static_cast<int64_t>(names.size()) : per_rank;
}

std::string VerifyOutcome::Summary(int world_size, ExchangeKind kind) const {
  std::vector<std::string> parts;
  if (bad_tensor_count > mismatch_count) {
    parts.push_back(absl::StrCat(
        Plural(BadTensorsOnce(), "tensor", "tensors"),
        kind == ExchangeKind::kRefusal ? " without a source or a place on " : " on meta or unfilled on ",
        Ranks(bad_ranks)));
  }
  if (mismatch_count > 0) {
    parts.push_back(absl::StrCat(
        Plural(stored_mismatch > 0 ? stored_mismatch : mismatch_count, "tensor", "tensors"),
        " whose bytes differ from the digests registered for them, held by ", Ranks(mismatch_ranks)));
  }
  if (!failed_ranks.empty()) parts.push_back(absl::StrCat(Ranks(failed_ranks), " could not load"));
  if (!never_joined.empty()) parts.push_back(absl::StrCat(Ranks(never_joined), " never joined"));
  if (!plan_mismatch.empty()) {
    parts.push_back(
        "the ranks did not load the same plan: every rank must ask for the same model, strategy, "
        "options and world size");
  }
  return absl::StrCat(absl::StrJoin(parts, "; "), " (", world_size, " ranks)");
}

std::vector<std::string> VerifyOutcome::Lines() const {
  std::vector<std::string> lines = notes;
  // Per rank, in rank order: its summary lines when it has them, else each finding.
  std::map<int, std::vector<std::string>> by_rank;
  std::map<int, bool> summarized;
  for (const auto& [rank, line] : summaries) {
    by_rank[rank].push_back(line);
    summarized[rank] = true;
  }
  for (const RankedFinding& f : findings) {
    if (!summarized[f.rank]) by_rank[f.rank].push_back(FindingLine(f.finding));
  }
  for (const auto& [rank, cut] : findings_cut) {
    by_rank[rank].push_back(absl::StrCat("... (", cut, " more findings cut)"));
  }
  // The same line from several ranks (a tensor every replica misses) is said once, naming the
  // ranks: in the order of its first rank, then of its place among that rank's lines.
  std::vector<std::pair<std::string, std::vector<int>>> said;
  absl::flat_hash_map<std::string, size_t> index_of;
  for (const auto& [rank, rank_lines] : by_rank) {
    for (const std::string& line : rank_lines) {
      auto [it, inserted] = index_of.try_emplace(line, said.size());
      if (inserted) said.emplace_back(line, std::vector<int>());
      std::vector<int>& ranks = said[it->second].second;
      if (ranks.empty() || ranks.back() != rank) ranks.push_back(rank);
    }
  }
  for (const auto& [line, ranks] : said) lines.push_back(absl::StrCat(Ranks(ranks), ": ", line));
  return lines;
}

std::string VerifyOutcome::Message(int world_size, ExchangeKind kind) const {
  std::string message = kind == ExchangeKind::kRefusal
                            ? "materialize refused, before anything was allocated or read: "
                            : absl::StrCat("verification failed",
                                           backend.empty() ? "" : absl::StrCat(" (", backend, ")"), ": ");
  absl::StrAppend(&message, Summary(world_size, kind), ":");
  for (const std::string& line : plan_mismatch) absl::StrAppend(&message, "\n  ", line);
  for (const std::string& line : Lines()) absl::StrAppend(&message, "\n  ", line);
  return message;
}

std::string VerifyOutcome::ContentLine() const {
  const int64_t stored = stored_checked + stored_no_digest + stored_unproven + stored_mismatch;
  // Stored tensors each once, whatever ranks held them (the proofs' table); the others as each
  // rank holding one counted it.
  std::vector<std::string> parts, per_rank;
  if (stored_checked > 0) {
    parts.push_back(absl::StrCat(Plural(stored_checked, "stored tensor", "stored tensors"),
                                 " checked against their registered ",
                                 digest_kind.empty() ? "" : absl::StrCat(digest_kind, " "), "digests"));
  }
  if (stored_mismatch > 0) {
    parts.push_back(absl::StrCat(stored_mismatch, " whose bytes differ from their digests"));
  }
  if (stored_unproven > 0) parts.push_back(absl::StrCat(stored_unproven, " unproven (named below)"));
  if (stored_no_digest > 0) {
    parts.push_back(absl::StrCat(stored_no_digest,
                                 " read without a digest (register the model with digests to check them)"));
  }
  if (computed_count > 0)
    per_rank.push_back(absl::StrCat(Plural(computed_count, "buffer", "buffers"), " computed"));
  if (initialized_count > 0) {
    per_rank.push_back(
        absl::StrCat(initialized_count, " initialized by policy (nothing proves their values)"));
  }
  if (unproven_count > 0)
    per_rank.push_back(absl::StrCat(unproven_count, " kept as they were (unread: unproven)"));
  std::string line = absl::StrJoin(parts, ", ");
  if (!per_rank.empty()) {
    absl::StrAppend(&line, line.empty() ? "" : "; ",
                    "counted on each rank holding one: ", absl::StrJoin(per_rank, ", "));
  }
  if (line.empty()) line = stored == 0 ? "no tensor to prove" : "";
  return absl::StrCat(proven() ? "content proven: " : "content not proven for every tensor: ", line);
}

std::vector<std::string> VerifyOutcome::UnprovenLines() const {
  std::vector<std::string> lines;
  for (const RankedFinding& f : unproven) {
    lines.push_back(absl::StrCat("rank ", f.rank, ": ", f.finding.tensor, ": unproven: ", f.finding.why));
  }
  return lines;
}

}  // namespace metaload
