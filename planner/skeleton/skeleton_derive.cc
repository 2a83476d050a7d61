// DeriveSkeleton: a skeleton from a checkpoint's own tensors, for models with no skeleton
// file. A checkpoint stores tensors in file order (often sorted by name, so "layers.10"
// before "layers.2"); placement wants model order, which we recover from the names.
#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "planner/skeleton/skeleton.h"

namespace metaload {
namespace {

// Where a tensor goes in model order; sections sort in this order.
enum class Section { kEmbedding = 0, kBlock = 1, kRest = 2, kHead = 3 };

struct Ordered {
  Section section = Section::kRest;
  int stage = 0;             // blocks: encoders before other stacks before decoders
  std::string block_prefix;  // "model.layers"
  uint64_t block_index = 0;
  std::string block_path;  // "model.layers.7", spelled as in the name
  const TensorLayout* layout = nullptr;

  auto Key() const { return std::tie(section, stage, block_prefix, block_index, layout->name); }
};

bool IsBlockContainer(absl::string_view part) {
  return part == "layers" || part == "h" || part == "layer" || part == "blocks" || part == "block";
}

bool IsAllDigits(absl::string_view part) {
  return !part.empty() &&
         std::all_of(part.begin(), part.end(), [](char c) { return absl::ascii_isdigit(c); });
}

// The first "<container>.<N>" among the module components (the last component is the
// tensor's own name, never a block).
bool FindBlock(const std::vector<absl::string_view>& parts, size_t* number_part, uint64_t* index) {
  for (size_t i = 1; i + 1 < parts.size(); ++i) {
    if (IsBlockContainer(parts[i - 1]) && IsAllDigits(parts[i]) && absl::SimpleAtoi(parts[i], index)) {
      *number_part = i;
      return true;
    }
  }
  return false;
}

// Encoder-decoder models ("encoder.block.N", "decoder.block.N") and vision-language models
// ("vision_model.encoder.layers.N", "model.layers.N") have several numbered stacks: the
// encoder side runs first, the decoder last.
int StageOf(absl::string_view block_prefix) {
  if (absl::StrContains(block_prefix, "encoder")) return 0;
  if (absl::StrContains(block_prefix, "decoder")) return 2;
  return 1;
}

bool IsEmbeddingModule(const std::vector<absl::string_view>& parts) {
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (absl::StrContains(parts[i], "embed") || parts[i] == "wte" || parts[i] == "wpe") return true;
  }
  return false;
}

// Output heads: "lm_head.weight", Meta's "output.weight", "head.weight" (ViT), "classifier",
// "score" (sequence classification), "cls.predictions" (BERT pre-training).
bool IsHeadModule(const std::vector<absl::string_view>& parts) {
  if (parts.size() < 2) return false;
  const absl::string_view first = parts[0];
  if (first == "lm_head" || first == "output" || first == "head" || first == "classifier" ||
      first == "score" || first == "cls") {
    return true;
  }
  return std::find(parts.begin(), parts.end() - 1, "lm_head") != parts.end() - 1;
}

Ordered Classify(const TensorLayout& layout) {
  Ordered ordered;
  ordered.layout = &layout;
  std::vector<absl::string_view> parts = absl::StrSplit(layout.name, '.');
  size_t number_part = 0;
  if (FindBlock(parts, &number_part, &ordered.block_index)) {
    ordered.section = Section::kBlock;
    ordered.block_prefix = absl::StrJoin(parts.begin(), parts.begin() + number_part, ".");
    ordered.block_path = absl::StrJoin(parts.begin(), parts.begin() + number_part + 1, ".");
    ordered.stage = StageOf(ordered.block_prefix);
  } else if (IsEmbeddingModule(parts)) {
    ordered.section = Section::kEmbedding;
  } else if (IsHeadModule(parts)) {
    ordered.section = Section::kHead;
  }
  return ordered;
}

}  // namespace

Skeleton DeriveSkeleton(const Checkpoint& checkpoint, absl::string_view model_name) {
  std::vector<Ordered> order;
  order.reserve(checkpoint.tensors.size());
  for (const TensorLayout& layout : checkpoint.tensors) order.push_back(Classify(layout));
  std::sort(order.begin(), order.end(), [](const Ordered& a, const Ordered& b) { return a.Key() < b.Key(); });

  Skeleton skeleton;
  skeleton.model = std::string(model_name);
  skeleton.tensors.reserve(order.size());
  absl::flat_hash_set<std::string> block_paths;
  for (const Ordered& ordered : order) {
    SkeletonTensor tensor;
    tensor.name = ordered.layout->name;
    tensor.shape = ordered.layout->shape;
    tensor.dtype = ordered.layout->dtype;
    skeleton.tensors.push_back(std::move(tensor));
    if (ordered.section != Section::kBlock) continue;
    if (block_paths.insert(ordered.block_path).second) {
      skeleton.modules.push_back(SkeletonModule{ordered.block_path, /*type=*/"", /*no_split=*/true});
    }
  }
  // The ties the files record (save_model drops the duplicates and names them).
  std::map<std::string, std::vector<std::string>> aliases_of;
  for (const auto& [alias, stored] : checkpoint.saved_ties) aliases_of[stored].push_back(alias);
  for (auto& [stored, aliases] : aliases_of) {
    std::vector<std::string> group = {stored};
    group.insert(group.end(), aliases.begin(), aliases.end());
    skeleton.tied_groups.push_back(std::move(group));
  }
  return skeleton;
}

}  // namespace metaload
