// PlanToTable: the generic table, with the words each strategy's record gives.
#include "planner/strategy/plan_table.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "planner/strategy/strategy_registry.h"
#include "util/units.h"

namespace metaload {
namespace {

// "model.layers.0 … model.layers.7 (8 units)"; a unit "" is the root module.
std::string UnitsSummary(const std::vector<std::string>& units) {
  auto name = [](const std::string& unit) { return unit.empty() ? std::string("(root)") : unit; };
  if (units.empty()) return "-";
  if (units.size() == 1) return absl::StrCat(name(units.front()), " (1 unit)");
  return absl::StrCat(name(units.front()), " \xE2\x80\xA6 ", name(units.back()), " (", units.size(),
                      " units)");
}

std::string Holds(const Plan& plan, const RankPlan& rank) {
  size_t sliced = 0;
  for (const ReadItem& item : rank.items) sliced += item.slice.has_value() ? 1 : 0;
  const size_t whole = rank.items.size() - sliced;
  const Strategy* strategy = FindStrategy(plan.strategy);
  if (strategy != nullptr && strategy->holds != nullptr) return strategy->holds(plan, rank, sliced, whole);
  return DefaultHolds(sliced, whole);
}

std::string TableTitle(const Plan& plan) {
  const Strategy* strategy = FindStrategy(plan.strategy);
  return strategy != nullptr && strategy->table_title != nullptr ? strategy->table_title(plan)
                                                                 : plan.strategy;
}

// ", converted to BF16 on load" when items change type.
std::string ConversionSummary(const Plan& plan) {
  std::vector<DType> to_dtypes;
  for (const RankPlan& rank : plan.ranks) {
    for (const ReadItem& item : rank.items) {
      if (item.to_dtype.has_value() &&
          std::find(to_dtypes.begin(), to_dtypes.end(), *item.to_dtype) == to_dtypes.end()) {
        to_dtypes.push_back(*item.to_dtype);
      }
    }
  }
  if (to_dtypes.empty()) return "";
  std::string out = ", converted to ";
  for (size_t i = 0; i < to_dtypes.size(); ++i)
    absl::StrAppend(&out, i > 0 ? "/" : "", DTypeCode(to_dtypes[i]));
  return absl::StrCat(out, " on load");
}

}  // namespace

std::string DefaultHolds(size_t sliced, size_t whole) {
  if (sliced > 0) return absl::StrCat(sliced, " sliced, ", whole, " whole");
  return absl::StrCat(whole, whole == 1 ? " tensor" : " tensors");
}

std::string PlanToTable(const Plan& plan) {
  std::vector<std::vector<std::string>> rows = {
      {"rank", "node", "gpu", "bytes", "% budget", "holds", "units"}};
  uint64_t total_bytes = 0;
  for (const RankPlan& rank : plan.ranks) {
    std::string percent = "-";
    if (rank.budget_bytes > 0) {
      percent = absl::StrFormat(
          "%.1f%%", 100.0 * static_cast<double>(rank.size_bytes) / static_cast<double>(rank.budget_bytes));
    }
    rows.push_back({absl::StrCat(rank.rank), rank.node, absl::StrCat(rank.gpu), FormatBytes(rank.size_bytes),
                    percent, Holds(plan, rank), UnitsSummary(rank.units)});
    total_bytes += rank.size_bytes;
  }
  // Every column but the last is padded to its widest cell; numbers are right-aligned.
  const size_t columns = rows.front().size();
  std::vector<size_t> widths(columns, 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c + 1 < columns; ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  const std::vector<bool> right_aligned = {true, false, true, true, true, false, false};
  std::string out = absl::StrCat("plan for ", plan.model.empty() ? "(unnamed model)" : plan.model, ": ",
                                 absl::StrCat("strategy ", TableTitle(plan)), ", ", plan.world_size,
                                 " ranks, ", FormatBytes(total_bytes), ConversionSummary(plan), "\n");
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < columns; ++c) {
      if (c > 0) line.append("  ");
      if (c + 1 == columns) {
        line.append(row[c]);
      } else {
        std::string pad(widths[c] - row[c].size(), ' ');
        absl::StrAppend(&line, right_aligned[c] ? pad : "", row[c], right_aligned[c] ? "" : pad);
      }
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

}  // namespace metaload
