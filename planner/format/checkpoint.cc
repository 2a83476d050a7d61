#include "planner/format/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "planner/format/safetensors.h"
#include "util/fs/location.h"
#include "util/fs/storage.h"
#include "util/json/strict_json.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr char kSingleFileName[] = "model.safetensors";
constexpr char kSafetensorsIndexName[] = "model.safetensors.index.json";
constexpr char kBinIndexName[] = "pytorch_model.bin.index.json";
// Real indexes are well under 1 MB even for 400B-parameter models; the cap only keeps a
// wrong path (a weights file passed as the index) from being read into memory whole.
constexpr uint64_t kMaxIndexFileBytes = 64ull << 20;

bool IsRegularFile(const Storage& storage, const std::string& location) {
  return storage.KindOrMissing(location) == PathKind::kFile;
}

// A checkpoint file is looked for by its name: a symlink counts whatever it leads to, so that
// the opener decides (a daemon's refuses one that leads out of its roots). Following it here
// told a dangling link out of the roots ("no checkpoint found") from one to a file that exists
// there ("leads out of the roots"): whether a path outside exists (issue 23).
bool IsFileOrLink(const Storage& storage, const std::string& location) {
  const PathKind kind = storage.KindOrMissing(location, /*follow_links=*/false);
  return kind == PathKind::kFile || kind == PathKind::kLink;
}

// metadata.total_size is written as a JSON integer by transformers, but other tools write it
// as a string or an integral float ("16060522496.0"); all mean the same byte count.
absl::StatusOr<int64_t> ParseTotalSize(const Json& value, const std::string& path) {
  auto bad = [&]() {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": metadata.total_size must be a non-negative integer (or a string of one), got ",
                     JsonForMessage(value)));
  };
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (value.is_number_unsigned()) {
    if (value.get<uint64_t>() > kMax) return bad();
    return static_cast<int64_t>(value.get<uint64_t>());
  }
  if (value.is_number_float()) {
    const double d = value.get<double>();
    // 2^63 is exactly representable; anything at or above it does not fit.
    if (!std::isfinite(d) || d < 0 || d != std::floor(d) || d >= 9223372036854775808.0) return bad();
    return static_cast<int64_t>(d);
  }
  if (value.is_string()) {
    const std::string& text = value.get_ref<const std::string&>();
    int64_t parsed = 0;
    if (text.empty() ||
        !std::all_of(text.begin(), text.end(), [](char c) { return absl::ascii_isdigit(c); }) ||
        !absl::SimpleAtoi(text, &parsed)) {
      return bad();
    }
    return parsed;
  }
  return bad();
}

// A shard name comes from an untrusted index: keep it inside the checkpoint folder.
absl::Status CheckShardName(const std::string& shard, const std::string& tensor,
                            const std::string& index_path) {
  const fs::path shard_path(shard);
  bool escapes = shard.empty() || shard_path.is_absolute();
  for (const fs::path& part : shard_path) escapes = escapes || part == "..";
  if (escapes) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map[\"", tensor, "\"] = \"", shard,
                                                   "\" is not a file name inside the checkpoint folder"));
  }
  return absl::OkStatus();
}

void SortTensors(Checkpoint& checkpoint) {
  std::sort(checkpoint.tensors.begin(), checkpoint.tensors.end(),
            [](const TensorLayout& a, const TensorLayout& b) {
              return std::tie(a.file, a.begin_offset, a.end_offset, a.name) <
                     std::tie(b.file, b.begin_offset, b.end_offset, b.name);
            });
  checkpoint.BuildIndex();
}

absl::StatusOr<Checkpoint> OpenSingleFile(const std::string& file_path, const Storage& storage) {
  Checkpoint checkpoint;
  checkpoint.dir = NormalLocation(ParentOf(file_path));
  const std::string name = BaseNameOf(file_path);
  ML_ASSIGN_OR_RETURN(SafetensorsFile file,
                      ReadSafetensorsFile(JoinLocation(checkpoint.dir, name), name, storage));
  checkpoint.files = {name};
  checkpoint.stamps = {file.stamp};
  checkpoint.tensors = std::move(file.tensors);
  checkpoint.metadata = std::move(file.metadata);
  SortTensors(checkpoint);
  checkpoint.saved_ties = SavedTies({&checkpoint.metadata}, checkpoint);
  return checkpoint;
}

// Checks that the shards hold exactly what the index maps to them, in an order that makes
// the most specific message win: a tensor in two shards before a tensor the index misplaces.
absl::Status CrossCheckShards(const CheckpointIndex& index, const std::vector<TensorLayout>& shard_tensors) {
  absl::flat_hash_map<std::string, const std::string*> shard_of;  // tensor -> shard holding it
  for (const TensorLayout& t : shard_tensors) {
    auto [it, inserted] = shard_of.emplace(t.name, &t.file);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", t.name,
                                                     "\" is in two shards: ", *it->second, " and ", t.file,
                                                     " (index ", index.path, ")"));
    }
  }
  for (const TensorLayout& t : shard_tensors) {
    auto mapped = index.weight_map.find(t.name);
    if (mapped == index.weight_map.end()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", t.name, "\" is in shard ", t.file,
                                                     " but not in the weight_map of ", index.path));
    }
    if (mapped->second != t.file) {
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", t.name, "\" is in shard ", t.file, " but ",
                                                     index.path, " maps it to ", mapped->second));
    }
  }
  for (const auto& [tensor, shard] : index.weight_map) {
    if (!shard_of.contains(tensor)) {
      return absl::InvalidArgumentError(absl::StrCat(index.path, " maps tensor \"", tensor, "\" to ", shard,
                                                     ", but that shard does not contain it"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Checkpoint> OpenSharded(const std::string& index_path, const Storage& storage) {
  ML_ASSIGN_OR_RETURN(CheckpointIndex index, ReadCheckpointIndex(index_path, storage));
  Checkpoint checkpoint;
  checkpoint.dir = NormalLocation(ParentOf(index.path));
  std::map<std::string, std::vector<std::string>> tensors_by_shard;
  std::vector<std::map<std::string, std::string>> shard_metadata;
  for (const auto& [tensor, shard] : index.weight_map) {
    ML_RETURN_IF_ERROR(CheckShardName(shard, tensor, index.path));
    tensors_by_shard[shard].push_back(tensor);
  }
  for (const auto& [shard, tensors] : tensors_by_shard) {
    const std::string shard_path = JoinLocation(checkpoint.dir, shard);
    absl::StatusOr<SafetensorsFile> file = ReadSafetensorsFile(shard_path, shard, storage);
    if (absl::IsNotFound(file.status())) {
      return absl::NotFoundError(absl::StrCat(index.path, " names shard ", shard, " (for \"", tensors.front(),
                                              "\" and ", tensors.size() - 1, " more tensors), but ",
                                              shard_path, " does not exist"));
    }
    if (!file.ok()) return Annotate(file.status(), absl::StrCat("reading shard named by ", index.path));
    checkpoint.files.push_back(shard);
    checkpoint.stamps.push_back(file->stamp);
    if (checkpoint.files.size() == 1) checkpoint.metadata = file->metadata;
    shard_metadata.push_back(std::move(file->metadata));
    for (TensorLayout& t : file->tensors) checkpoint.tensors.push_back(std::move(t));
  }
  // Shards were read in name order, each offset-sorted, so the first mismatch reported is the
  // same on every run.
  ML_RETURN_IF_ERROR(CrossCheckShards(index, checkpoint.tensors));
  SortTensors(checkpoint);
  std::vector<const std::map<std::string, std::string>*> sources = {&index.metadata};
  for (const auto& metadata : shard_metadata) sources.push_back(&metadata);
  checkpoint.saved_ties = SavedTies(sources, checkpoint);
  return checkpoint;
}

std::string DescribeMissingCheckpoint(const Storage& storage, const std::string& dir) {
  std::string message = absl::StrCat(dir, ": no safetensors checkpoint found (looked for ", kSingleFileName,
                                     " and ", kSafetensorsIndexName, ")");
  if (IsRegularFile(storage, JoinLocation(dir, kBinIndexName)) ||
      IsRegularFile(storage, JoinLocation(dir, "pytorch_model.bin"))) {
    absl::StrAppend(&message,
                    "; the folder holds a PyTorch .bin checkpoint, which metaload does not read: convert it "
                    "to safetensors (e.g. model.save_pretrained(dir, safe_serialization=True))");
  }
  return message;
}

}  // namespace

const TensorLayout* Checkpoint::Find(const std::string& name) const {
  auto it = by_name.find(name);
  if (it == by_name.end() || it->second >= tensors.size()) return nullptr;
  return &tensors[it->second];
}

void Checkpoint::BuildIndex() {
  by_name.clear();
  by_name.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    by_name[tensors[i].name] = i;
    tensors[i].index = static_cast<int64_t>(i);
  }
}

std::map<std::string, std::string> SavedTies(
    const std::vector<const std::map<std::string, std::string>*>& sources, const Checkpoint& checkpoint) {
  std::map<std::string, std::string> ties;
  std::set<std::string> conflicting;
  for (const std::map<std::string, std::string>* metadata : sources) {
    for (const auto& [alias, stored] : *metadata) {
      if (checkpoint.Find(alias) != nullptr || checkpoint.Find(stored) == nullptr) continue;
      auto [it, inserted] = ties.emplace(alias, stored);
      if (!inserted && it->second != stored) conflicting.insert(alias);
    }
  }
  for (const std::string& alias : conflicting) ties.erase(alias);
  return ties;
}

uint64_t Checkpoint::total_size_bytes() const {
  uint64_t total_bytes = 0;
  for (const TensorLayout& t : tensors) total_bytes += t.size_bytes();
  return total_bytes;
}

absl::StatusOr<Checkpoint> OpenCheckpoint(const std::string& path, const Storage& storage) {
  ML_ASSIGN_OR_RETURN(const PathKind kind, storage.KindOf(path));
  if (kind == PathKind::kMissing) return absl::NotFoundError(absl::StrCat(path, ": no such file or folder"));
  if (kind == PathKind::kFolder) {
    // transformers prefers the single file when both are present; so do we.
    const std::string single = JoinLocation(path, kSingleFileName);
    if (IsFileOrLink(storage, single)) return OpenSingleFile(single, storage);
    const std::string index = JoinLocation(path, kSafetensorsIndexName);
    if (IsFileOrLink(storage, index)) return OpenSharded(index, storage);
    return absl::NotFoundError(DescribeMissingCheckpoint(storage, path));
  }
  if (absl::EndsWith(path, ".safetensors")) return OpenSingleFile(path, storage);
  if (absl::EndsWith(path, ".safetensors.index.json")) return OpenSharded(path, storage);
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": not a checkpoint (expected a .safetensors file, a .safetensors.index.json, or a folder)"));
}

absl::StatusOr<CheckpointIndex> ReadCheckpointIndex(const std::string& path, const Storage& storage) {
  CheckpointIndex index;
  if (storage.KindOrMissing(path) == PathKind::kFolder) {
    const std::string safetensors_index = JoinLocation(path, kSafetensorsIndexName);
    const std::string bin_index = JoinLocation(path, kBinIndexName);
    if (IsRegularFile(storage, safetensors_index)) {
      index.path = safetensors_index;
    } else if (IsRegularFile(storage, bin_index)) {
      index.path = bin_index;
    } else {
      return absl::NotFoundError(absl::StrCat(path, ": no checkpoint index found (looked for ",
                                              kSafetensorsIndexName, " and ", kBinIndexName, ")"));
    }
  } else {
    index.path = path;
  }
  ML_ASSIGN_OR_RETURN(std::string text,
                      ReadSmallFile(index.path, kMaxIndexFileBytes, "checkpoint index", storage));
  return ParseCheckpointIndex(text, index.path);
}

absl::StatusOr<CheckpointIndex> ParseCheckpointIndex(absl::string_view text, const std::string& path) {
  CheckpointIndex index;
  index.path = path;
  absl::StatusOr<Json> parsed = ParseJsonRejectingDuplicateKeys(text);
  if (!parsed.ok()) return Annotate(parsed.status(), index.path);
  const Json& root = *parsed;
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(index.path, ": ", what));
  };
  if (!root.is_object()) return bad(absl::StrCat("index must be a JSON object, got ", root.type_name()));

  auto weight_map = root.find("weight_map");
  if (weight_map == root.end()) return bad("missing \"weight_map\"");
  if (!weight_map->is_object()) {
    return bad(absl::StrCat("\"weight_map\" must be an object, got ", weight_map->type_name()));
  }
  for (const auto& [tensor, shard] : weight_map->items()) {
    if (!shard.is_string()) {
      return bad(absl::StrCat("weight_map[\"", tensor, "\"] must be a file name string, got ",
                              JsonForMessage(shard)));
    }
    index.weight_map[tensor] = shard.get<std::string>();
  }

  auto metadata = root.find("metadata");
  if (metadata != root.end()) {
    if (!metadata->is_object()) {
      return bad(absl::StrCat("\"metadata\" must be an object, got ", metadata->type_name()));
    }
    auto total_size = metadata->find("total_size");
    if (total_size != metadata->end()) {
      ML_ASSIGN_OR_RETURN(index.total_size_bytes, ParseTotalSize(*total_size, index.path));
    }
    for (const auto& [key, value] : metadata->items()) {
      if (key != "total_size" && value.is_string()) index.metadata[key] = value.get<std::string>();
    }
  }
  return index;
}

}  // namespace metaload
