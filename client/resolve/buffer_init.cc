// Evaluates init rules with the same LibTorch operations, in the same order and dtype, as
// transformers' modeling_rope_utils, so computed buffers equal the ones transformers makes
// bit for bit on CPU (tests/integration/load/test_buffers.py checks this against transformers).
#include "client/resolve/buffer_init.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "libtorch/torch_glue.h"
#include "planner/skeleton/init_rule.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

constexpr double kPi = 3.14159265358979323846;

// base ** (arange(0, dim, 2).float() / dim), float32, as transformers writes it.
at::Tensor PosFreqs(double base, int64_t dim) {
  at::Tensor exponents =
      torch::arange(0, dim, 2, torch::TensorOptions().dtype(torch::kInt64)).to(torch::kFloat) /
      static_cast<double>(dim);
  return torch::pow(base, exponents);
}

absl::StatusOr<at::Tensor> RopeInvFreq(const InitRule& rule) {
  ML_ASSIGN_OR_RETURN(double base, rule.Number("base"));
  ML_ASSIGN_OR_RETURN(double dim_value, rule.Number("dim"));
  if (!(base > 0) || !(dim_value >= 1) || dim_value != std::floor(dim_value) || dim_value > (1 << 24)) {
    return absl::InvalidArgumentError(absl::StrCat("rope_inv_freq: bad base ", base, " or dim ", dim_value));
  }
  const int64_t dim = static_cast<int64_t>(dim_value);
  const InitRuleValue* scaling = rule.Find("scaling");
  if (scaling == nullptr) return 1.0 / PosFreqs(base, dim);
  if (scaling->kind != InitRuleValue::Kind::kRule) {
    return absl::InvalidArgumentError("rope_inv_freq: scaling must be a rule");
  }
  const InitRule& s = *scaling->rule;
  if (s.name == "dynamic") return 1.0 / PosFreqs(base, dim);
  if (s.name == "linear") {
    ML_ASSIGN_OR_RETURN(double factor, s.Number("factor"));
    return 1.0 / PosFreqs(base, dim) / factor;
  }
  if (s.name == "llama3") {
    ML_ASSIGN_OR_RETURN(double factor, s.Number("factor"));
    ML_ASSIGN_OR_RETURN(double low, s.Number("low_freq_factor"));
    ML_ASSIGN_OR_RETURN(double high, s.Number("high_freq_factor"));
    ML_ASSIGN_OR_RETURN(double old_context, s.Number("original_max_position_embeddings"));
    at::Tensor inv_freq = 1.0 / PosFreqs(base, dim);
    const double low_wavelen = old_context / low;
    const double high_wavelen = old_context / high;
    at::Tensor wavelen = 2 * kPi / inv_freq;
    at::Tensor scaled = torch::where(wavelen > low_wavelen, inv_freq / factor, inv_freq);
    at::Tensor smooth = (old_context / wavelen - low) / (high - low);
    at::Tensor smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
    at::Tensor medium =
        torch::logical_not(wavelen < high_wavelen) * torch::logical_not(wavelen > low_wavelen);
    return torch::where(medium, smoothed, scaled);
  }
  if (s.name == "yarn") {
    ML_ASSIGN_OR_RETURN(double factor, s.Number("factor"));
    ML_ASSIGN_OR_RETURN(double original, s.Number("original_max_position_embeddings"));
    ML_ASSIGN_OR_RETURN(double beta_fast, s.Number("beta_fast"));
    ML_ASSIGN_OR_RETURN(double beta_slow, s.Number("beta_slow"));
    ML_ASSIGN_OR_RETURN(bool truncate, s.Bool("truncate"));
    auto correction_dim = [&](double rotations) {
      return (static_cast<double>(dim) * std::log(original / (rotations * 2 * kPi))) / (2 * std::log(base));
    };
    double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
    if (truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;
    at::Tensor pos_freqs = PosFreqs(base, dim);
    at::Tensor extrapolation = 1.0 / pos_freqs;
    at::Tensor interpolation = 1.0 / (factor * pos_freqs);
    at::Tensor ramp = torch::clamp(
        (torch::arange(dim / 2, torch::TensorOptions().dtype(torch::kFloat)) - low) / (high - low), 0, 1);
    at::Tensor extrapolation_factor = 1 - ramp;
    return interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  if (s.name == "longrope") {
    const InitRuleValue* factors = s.Find("short_factor");
    if (factors == nullptr || factors->kind != InitRuleValue::Kind::kList ||
        static_cast<int64_t>(factors->list.size()) != (dim + 1) / 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("longrope: short_factor needs ", (dim + 1) / 2, " numbers"));
    }
    std::vector<float> values(factors->list.begin(), factors->list.end());
    at::Tensor ext = torch::tensor(values, torch::TensorOptions().dtype(torch::kFloat));
    at::Tensor exponents =
        torch::arange(0, dim, 2, torch::TensorOptions().dtype(torch::kInt64)).to(torch::kFloat) /
        static_cast<double>(dim);
    return 1.0 / (ext * torch::pow(base, exponents));
  }
  return absl::InvalidArgumentError(absl::StrCat("rope_inv_freq: unknown scaling \"", s.name, "\""));
}

}  // namespace

absl::Status ComputeBuffer(const std::string& rule_text, at::Tensor& out) {
  ML_ASSIGN_OR_RETURN(InitRule rule, ParseInitRule(rule_text));
  at::Tensor values;
  if (rule.name == "constant") {
    ML_ASSIGN_OR_RETURN(double value, rule.Number("value"));
    // torch.tensor(python_float) is float32, then converted to the buffer's dtype.
    ML_RETURN_IF_ERROR(
        CallTorch("constant buffer", [&] { values = torch::tensor(static_cast<float>(value)); }));
  } else if (rule.name == "rope_inv_freq") {
    absl::Status status;
    ML_RETURN_IF_ERROR(CallTorch("rope_inv_freq", [&] {
      auto computed = RopeInvFreq(rule);
      if (computed.ok()) values = *computed;
      status = computed.status();
    }));
    ML_RETURN_IF_ERROR(status);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown init rule \"", rule.name, "\" in \"", rule_text, "\""));
  }
  return CallTorch(absl::StrCat("filling a buffer from ", rule_text), [&] {
    if (values.numel() != out.numel()) {
      throw std::runtime_error(
          absl::StrCat("the rule gives ", values.numel(), " values but the buffer holds ", out.numel()));
    }
    out.copy_(values.reshape(out.sizes()));
  });
}

}  // namespace metaload
