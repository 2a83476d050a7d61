#include "planner/strategy/strategy_flags.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "planner/strategy/strategy_registry.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace metaload {
namespace {

// --strategy's help lines are at most this wide, as the other flags' help is written.
constexpr size_t kHelpWidth = 69;

// "how to split the model: layers (default: whole blocks ...), tp (...), ...", from the records.
std::string StrategyHelp() {
  const std::string default_name = StrategyOptions{}.strategy;
  std::string help = "how to split the model:";
  const std::vector<const Strategy*> strategies = Strategies();
  for (size_t i = 0; i < strategies.size(); ++i) {
    absl::StrAppend(&help, i == 0 ? " " : ", ", strategies[i]->name, " (",
                    strategies[i]->name == default_name ? "default: " : "", strategies[i]->summary, ")");
  }
  return WrapWords(help, kHelpWidth);
}

}  // namespace

void AddStrategyFlags(CliArgs* args) {
  args->Flag("strategy", "NAME", StrategyHelp());
  for (const Strategy* strategy : Strategies()) {
    for (const StrategyFlag& flag : strategy->flags) {
      args->Flag(std::string(flag.name), std::string(flag.value_name), std::string(flag.help));
    }
  }
  args->Flag("reserve", "R",
             "GPU memory kept free for activations and workspace: a fraction\n"
             "(0.1), a percentage (10%) or a size (8GiB); each GPU's budget is\n"
             "--gpu-memory minus this (default 10%)");
  args->Flag("dtype", "TYPE",
             "convert floating-point tensors on load: bf16, fp16 or fp32\n"
             "(default: as stored); the plan's bytes are in this type");
}

absl::Status ParseReserve(const std::string& text, StrategyOptions* options) {
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("--reserve \"", text,
                     "\": use a fraction below 1 (0.1), a percentage below 100 (10%) or a size (8GiB)"));
  };
  std::string value(absl::StripAsciiWhitespace(text));
  double fraction = 0;
  if (absl::EndsWith(value, "%")) {
    if (!absl::SimpleAtod(value.substr(0, value.size() - 1), &fraction)) return bad();
    fraction /= 100.0;
  } else if (absl::SimpleAtod(value, &fraction)) {
    // A bare number is a fraction; "8" alone would be ambiguous, so it is refused below.
  } else {
    absl::StatusOr<uint64_t> bytes = ParseByteSize(value);
    if (!bytes.ok()) return bad();
    options->reserve_bytes = *bytes;
    options->reserve_fraction = 0;
    return absl::OkStatus();
  }
  if (!std::isfinite(fraction) || fraction < 0.0 || fraction >= 1.0) return bad();
  options->reserve_fraction = fraction;
  options->reserve_bytes = 0;
  return absl::OkStatus();
}

absl::StatusOr<StrategyOptions> ParseStrategyFlags(const CliArgs& args) {
  StrategyOptions options;
  options.strategy = args.GetOr("strategy", options.strategy);
  // Every flag a strategy owns is refused with another before any value is read.
  const std::vector<const Strategy*> strategies = Strategies();
  for (const Strategy* owner : strategies) {
    for (const StrategyFlag& flag : owner->flags) {
      if (args.Has(std::string(flag.name)) && options.strategy != owner->name) {
        return absl::InvalidArgumentError(absl::StrCat("--", flag.name, " is for --strategy ", owner->name,
                                                       " (the strategy is ", options.strategy, ")"));
      }
    }
  }
  for (const Strategy* owner : strategies) {
    for (const StrategyFlag& flag : owner->flags) {
      ML_ASSIGN_OR_RETURN(int64_t value,
                          args.GetInt(std::string(flag.name), options.*flag.field, flag.min, flag.max));
      options.*flag.field = static_cast<int>(value);
    }
  }
  if (std::optional<std::string> reserve = args.Get("reserve")) {
    ML_RETURN_IF_ERROR(ParseReserve(*reserve, &options));
  }
  if (std::optional<std::string> dtype = args.Get("dtype")) {
    absl::StatusOr<DType> parsed = DTypeFromAnyName(*dtype);
    if (!parsed.ok() || !IsConvertibleFloat(*parsed) || *parsed == DType::kF64) {
      return absl::InvalidArgumentError(absl::StrCat("--dtype \"", *dtype, "\": use bf16, fp16 or fp32"));
    }
    options.load_dtype = *parsed;
  }
  return options;
}

}  // namespace metaload
