// Typed reading of a Hugging Face config.json, for SkeletonFromHfConfig and its architecture
// builders (internal to planner/).
//
//   HfConfigReader config(root, "llama/config.json");
//   ML_ASSIGN_OR_RETURN(int64_t hidden, config.Dim({"hidden_size", "n_embd"}));
//   ML_ASSIGN_OR_RETURN(bool tied, config.BoolOr("tie_word_embeddings", false));
//
// A key is looked up in the nested "text_config" object first, then at the top level: models
// saved from multimodal wrappers keep their language model's sizes there. A key whose value is
// JSON null counts as absent, as transformers treats `"head_dim": null` like a missing head_dim.
// Errors are InvalidArgument and name the file and the key: `config.json: "hidden_size": ...`.
//
// Dimensions are integers in [1, kMaxHfDim] (layer counts may be 0): bounded so that a product
// of two of them, a tensor dimension, stays far below 2^63; element counts and the model's
// total are checked separately (see CheckSkeletonSize).
#ifndef METALOAD_PLANNER_SKELETON_HF_HF_CONFIG_READER_H_
#define METALOAD_PLANNER_SKELETON_HF_HF_CONFIG_READER_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "planner/format/dtype.h"
#include "planner/skeleton/skeleton.h"

namespace metaload {

inline constexpr int64_t kMaxHfDim = int64_t{1} << 24;

class HfConfigReader {
 public:
  // REQUIRES: `root` is a JSON object and outlives the reader.
  HfConfigReader(const nlohmann::json& root, std::string source_name);

  const std::string& source_name() const { return source_name_; }

  // The value of the first of `keys` that is present and not null, or nullptr.
  const nlohmann::json* Find(std::initializer_list<absl::string_view> keys) const;
  // The top level first: for what describes the whole model ("architectures", "model_type",
  // the dtype), which a wrapper's text_config must not override.
  const nlohmann::json* FindTopLevelFirst(absl::string_view key) const;
  bool Has(absl::string_view key) const { return Find({key}) != nullptr; }

  // A dimension under the first present alias of `keys`; missing is an error naming keys[0].
  absl::StatusOr<int64_t> Dim(std::initializer_list<absl::string_view> keys) const;
  absl::StatusOr<int64_t> DimOr(std::initializer_list<absl::string_view> keys, int64_t fallback) const;
  // A count that may be 0 (layers), in [0, max].
  absl::StatusOr<int64_t> Count(std::initializer_list<absl::string_view> keys, int64_t max) const;
  absl::StatusOr<int64_t> CountOr(std::initializer_list<absl::string_view> keys, int64_t fallback,
                                  int64_t max) const;
  absl::StatusOr<bool> BoolOr(absl::string_view key, bool fallback) const;
  absl::StatusOr<std::string> StringOr(absl::string_view key, std::string fallback) const;
  absl::StatusOr<std::string> TopLevelStringOr(absl::string_view key, std::string fallback) const;
  // A finite number, integer or not.
  absl::StatusOr<double> NumberOr(absl::string_view key, double fallback) const;

  // The parameters' dtype: "dtype" (transformers >= 4.56 writes it) or "torch_dtype"; F32, as
  // transformers builds a model, when neither is given.
  absl::StatusOr<DType> ParamDType() const;

  // `config.json: "key": what`, for errors about one key.
  absl::Status KeyError(absl::string_view key, absl::string_view what) const;
  // `config.json: what`.
  absl::Status Error(absl::string_view what) const;
  // Where `key` was found, for messages: "text_config.hidden_size" or "hidden_size".
  std::string QualifiedKey(absl::string_view key) const;

 private:
  absl::Status MissingKeyError(std::initializer_list<absl::string_view> keys) const;
  absl::StatusOr<int64_t> IntInRange(std::initializer_list<absl::string_view> keys, int64_t fallback,
                                     int64_t min, int64_t max) const;

  const nlohmann::json& root_;
  const nlohmann::json* text_config_ = nullptr;  // null when absent or not an object
  std::string source_name_;
};

// Every tensor's byte size and the model's total must fit in 64 bits (the skeleton format's
// rule); InvalidArgument naming the config and the first tensor that does not.
absl::Status CheckSkeletonSize(const Skeleton& skeleton, absl::string_view source_name);

// Shortest decimal that reads back as `value`: integers without a fraction ("500000"), others
// as %.17g would, but no longer than needed ("0.1", "1e-05"). For the buffers' init rules.
std::string FormatRuleNumber(double value);

}  // namespace metaload

#endif  // METALOAD_PLANNER_SKELETON_HF_HF_CONFIG_READER_H_
