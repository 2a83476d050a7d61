#include "planner/strategy/strategy_flags.h"

#include <cmath>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace metaload {
namespace {

// Far beyond any real node or cluster. Not small enough to multiply (2^16 x 2^16 is past an
// int): the tp strategy bounds both by the world size and multiplies in 64 bits (fit.h).
constexpr int64_t kMaxParallel = 1 << 16;

}  // namespace

void AddStrategyFlags(CliArgs* args) {
  args->Flag("strategy", "NAME",
             "how to split the model: layers (default: whole blocks in order,\n"
             "balanced by bytes), tp (tensor-parallel groups of --tp ranks, --pp\n"
             "pipeline stages, the rest data-parallel replicas), fsdp (every tensor\n"
             "split on dim 0 over all ranks, like FSDP2), replicate (every rank\n"
             "holds everything)");
  args->Flag("tp", "T", "with --strategy tp: ranks per tensor-parallel group, inside one\nnode (default 1)");
  args->Flag("pp", "P",
             "with --strategy tp: pipeline stages (default world / T: no\n"
             "data-parallel replicas; --pp 1 makes world / T replicas)");
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
  options.strategy = args.GetOr("strategy", "layers");
  for (const char* flag : {"tp", "pp"}) {
    if (args.Has(flag) && options.strategy != "tp") {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, " is for --strategy tp (the strategy is ", options.strategy, ")"));
    }
  }
  ML_ASSIGN_OR_RETURN(int64_t tp, args.GetInt("tp", 1, 1, kMaxParallel));
  ML_ASSIGN_OR_RETURN(int64_t pp, args.GetInt("pp", 0, 1, kMaxParallel));
  options.tp = static_cast<int>(tp);
  options.pp = static_cast<int>(pp);
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
