// Grouping missing tensors into runs of layers and tying mismatches (missing_groups.h).
#include "planner/doctor/missing_groups.h"

#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "planner/doctor/report_text.h"

namespace metaload {
namespace {

using report_text::kEmDash;

constexpr char kEnDash[] = "\xE2\x80\x93";
constexpr char kEllipsis[] = "\xE2\x80\xA6";

using NameSet = absl::flat_hash_set<absl::string_view>;

struct Block {
  size_t tensors = 0;
  size_t missing = 0;
  bool gone() const { return missing == tensors; }
};

// Numbered blocks by container, containers in skeleton order, blocks by index.
struct Containers {
  std::vector<std::string> order;
  absl::flat_hash_map<std::string, std::map<int64_t, Block>> blocks;
};

Containers CountBlocks(const Skeleton& skeleton, const NameSet& missing) {
  Containers out;
  for (const SkeletonTensor& t : skeleton.tensors) {
    if (!t.persistent) continue;
    BlockOf at = NumberedBlock(t.name);
    if (at.index < 0) continue;
    auto [it, inserted] = out.blocks.try_emplace(at.container);
    if (inserted) out.order.push_back(at.container);
    Block& block = it->second[at.index];
    ++block.tensors;
    block.missing += missing.contains(t.name) ? 1 : 0;
  }
  return out;
}

// The words of a run: a tail run after every block the checkpoint holds is another size of
// the model (Llama 3 8B has 32 layers, 70B 80); any other run is a hole in the checkpoint.
void DescribeLayerRun(MissingGroup& run, bool name_container, bool tail) {
  const std::string where = name_container ? absl::StrCat(" in ", run.container) : "";
  const std::string which =
      run.first_layer == run.last_layer
          ? absl::StrCat("layer ", run.first_layer, " of ", run.layer_count, where, " is missing")
          : absl::StrCat("layers ", run.first_layer, kEnDash, run.last_layer, " of ", run.layer_count, where,
                         " are missing");
  if (tail) {
    run.message = absl::StrCat(which, ": the checkpoint has ", run.present_layer_count, " ", kEmDash,
                               " is it another size of this model?");
    run.fix = absl::StrCat(
        "check against the skeleton of the checkpoint's own model (metactl skeleton "
        "CHECKPOINT reads its config.json), or use the checkpoint of the model with ",
        run.layer_count, " layers");
  } else {
    run.message =
        absl::StrCat(which, ": the checkpoint has ", run.present_layer_count, " of the ", run.layer_count);
    run.fix = "load the missing weights (is every shard downloaded? is this the checkpoint of this model?)";
  }
}

// One kLayers group per run of consecutive blocks whose every tensor is missing, in containers
// that keep at least one block.
std::vector<MissingGroup> LayerRuns(const Containers& containers) {
  std::vector<MissingGroup> runs;
  for (const std::string& container : containers.order) {
    const std::map<int64_t, Block>& blocks = containers.blocks.at(container);
    int64_t gone = 0;
    for (const auto& [index, block] : blocks) gone += block.gone() ? 1 : 0;
    const int64_t count = static_cast<int64_t>(blocks.size());
    if (gone == 0 || gone == count) continue;
    const size_t first_run = runs.size();
    int64_t previous = -2;
    for (const auto& [index, block] : blocks) {
      if (!block.gone()) continue;
      if (runs.size() == first_run || previous + 1 != index) {
        MissingGroup& run = runs.emplace_back();
        run.kind = MissingKind::kLayers;
        run.container = container;
        run.first_layer = index;
        run.layer_count = count;
        run.present_layer_count = count - gone;
      }
      runs.back().last_layer = previous = index;
    }
    // A tail: the container's only run, up to its last block, so every block before it is held.
    const bool tail = runs.size() == first_run + 1 && runs.back().last_layer == blocks.rbegin()->first;
    for (size_t r = first_run; r < runs.size(); ++r) {
      DescribeLayerRun(runs[r], containers.order.size() > 1, tail && r + 1 == runs.size());
    }
  }
  return runs;
}

// Module names of input and output embeddings that Hugging Face models tie
// (`_tied_weights_keys`, `tie_word_embeddings`).
bool IsInputEmbedding(absl::string_view module) {
  return module == "embed_tokens" || module == "wte" || module == "word_embeddings" || module == "embed_in" ||
         module == "tok_embeddings" || module == "shared";
}
bool IsOutputEmbedding(absl::string_view module) {
  return module == "lm_head" || module == "embed_out" || module == "output";
}

// "lm_head" for "lm_head.weight", "embed_tokens" for "model.embed_tokens.weight"; "" for a
// tensor that is not a module's weight, or one inside a numbered block (a layer's "output"
// is no embedding).
absl::string_view EmbeddingModule(absl::string_view name) {
  constexpr absl::string_view kWeight = ".weight";
  if (!absl::EndsWith(name, kWeight) || NumberedBlock(name).index >= 0) return "";
  absl::string_view module = name.substr(0, name.size() - kWeight.size());
  const size_t dot = module.rfind('.');
  return dot == absl::string_view::npos ? module : module.substr(dot + 1);
}

// The stored tensor that `tensor`, an input or output embedding, would be tied to: the other
// kind of embedding, of the same shape, untied and loadable; nullptr when there is none.
const SkeletonTensor* StoredTiedPartner(const SkeletonTensor& tensor, const Skeleton& skeleton,
                                        const NameSet& not_loadable, const NameSet& tied) {
  const absl::string_view module = EmbeddingModule(tensor.name);
  const bool output = IsOutputEmbedding(module);
  if (!output && !IsInputEmbedding(module)) return nullptr;
  for (const SkeletonTensor& other : skeleton.tensors) {
    const absl::string_view other_module = EmbeddingModule(other.name);
    if (other.persistent && other.shape == tensor.shape && !not_loadable.contains(other.name) &&
        !tied.contains(other.name) &&
        (output ? IsInputEmbedding(other_module) : IsOutputEmbedding(other_module))) {
      return &other;
    }
  }
  return nullptr;
}

MissingGroup TyingMismatch(const SkeletonTensor& missing, const SkeletonTensor& partner) {
  const bool output_missing = IsOutputEmbedding(EmbeddingModule(missing.name));
  const std::string& input = output_missing ? partner.name : missing.name;
  const std::string& output = output_missing ? missing.name : partner.name;
  MissingGroup group;
  group.kind = MissingKind::kTyingMismatch;
  group.tensors = {missing.name};
  group.partner = partner.name;
  group.message =
      absl::StrCat(missing.name, " is missing but the checkpoint has ", partner.name,
                   " of the same shape: a tying mismatch (the checkpoint was saved with tied "
                   "embeddings; the skeleton does not tie them, as with tie_word_embeddings false)");
  group.fix =
      absl::StrCat("if the model ties them, set \"tie_word_embeddings\": true in config.json, or add [\"",
                   input, "\", \"", output,
                   "\"] to the skeleton's \"tied\"; if it does not, this "
                   "checkpoint lacks the trained ",
                   missing.name, ": use the model's own checkpoint");
  return group;
}

}  // namespace

BlockOf NumberedBlock(absl::string_view name) {
  const std::vector<absl::string_view> parts = absl::StrSplit(name, '.');
  for (size_t i = 1; i + 1 < parts.size(); ++i) {
    const absl::string_view part = parts[i];
    // At most 9 digits: the index fits, and "model.layers.99999999999" is no layer.
    if (part.empty() || part.size() > 9) continue;
    bool digits = true;
    for (char c : part) digits = digits && absl::ascii_isdigit(static_cast<unsigned char>(c));
    int64_t index = 0;
    if (!digits || !absl::SimpleAtoi(part, &index)) continue;
    return BlockOf{std::string(name.substr(0, part.data() - name.data() - 1)), index};
  }
  return BlockOf{};
}

std::vector<MissingGroup> GroupMissing(const std::vector<std::string>& missing, const Skeleton& skeleton,
                                       const std::vector<std::string>& unusable) {
  const NameSet missing_set(missing.begin(), missing.end());
  const Containers containers = CountBlocks(skeleton, missing_set);
  std::vector<MissingGroup> groups = LayerRuns(containers);
  // Which run holds each block, to hand out tensors in skeleton order.
  std::map<std::pair<std::string, int64_t>, size_t> run_of_block;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int64_t i = groups[g].first_layer; i <= groups[g].last_layer; ++i) {
      run_of_block[{groups[g].container, i}] = g;
    }
  }
  NameSet grouped;
  for (const SkeletonTensor& t : skeleton.tensors) {
    if (!t.persistent || !missing_set.contains(t.name)) continue;
    const BlockOf at = NumberedBlock(t.name);
    const auto run = run_of_block.find({at.container, at.index});
    if (at.index < 0 || run == run_of_block.end()) continue;
    groups[run->second].tensors.push_back(t.name);
    grouped.insert(t.name);
  }

  NameSet not_loadable = missing_set;
  not_loadable.insert(unusable.begin(), unusable.end());
  NameSet tied;
  for (const std::vector<std::string>& group : skeleton.tied_groups) tied.insert(group.begin(), group.end());
  for (const SkeletonTensor& t : skeleton.tensors) {
    if (!t.persistent || !missing_set.contains(t.name) || grouped.contains(t.name) || tied.contains(t.name)) {
      continue;
    }
    if (const SkeletonTensor* partner = StoredTiedPartner(t, skeleton, not_loadable, tied)) {
      groups.push_back(TyingMismatch(t, *partner));
      grouped.insert(t.name);
    }
  }

  for (const std::string& name : missing) {
    if (grouped.contains(name)) continue;
    MissingGroup& single = groups.emplace_back();
    single.kind = MissingKind::kTensor;
    single.message = absl::StrCat(name, " is in the skeleton but not in the checkpoint");
    single.tensors = {name};
  }
  return groups;
}

std::vector<std::string> MissingLines(const std::vector<MissingGroup>& groups, size_t max_tensor_lines) {
  std::vector<std::string> lines;
  size_t tensor_lines = 0, unnamed = 0;
  for (const MissingGroup& group : groups) {
    if (group.kind == MissingKind::kTensor && tensor_lines++ >= max_tensor_lines) {
      unnamed += group.tensors.size();
      continue;
    }
    lines.push_back(group.message);
  }
  if (unnamed > 0) lines.push_back(absl::StrCat(kEllipsis, " and ", unnamed, " more"));
  return lines;
}

}  // namespace metaload
