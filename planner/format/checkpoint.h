// A checkpoint: one safetensors file, or shards named by model.safetensors.index.json.
//
//   ML_ASSIGN_OR_RETURN(Checkpoint ckpt, OpenCheckpoint("/models/llama-8b"));
//   const TensorLayout* t = ckpt.Find("model.embed_tokens.weight");
//
// OpenCheckpoint accepts a `.safetensors` file, a folder with `model.safetensors`, or a
// folder with `model.safetensors.index.json` (then every shard it names must exist and
// hold exactly the tensors the index maps to it: a tensor the index names but its shard
// lacks, or a tensor in two shards, is an error naming both). Every file (header, index) is
// read through the `storage` given: a daemon passes one that keeps to its roots
// (util/fs/storage.h), so that a symlink out of them is refused, not read.
#ifndef METALOAD_PLANNER_FORMAT_CHECKPOINT_H_
#define METALOAD_PLANNER_FORMAT_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/format/tensor_layout.h"
#include "util/fs/file_stamp.h"
#include "util/fs/storage.h"

namespace metaload {

struct Checkpoint {
  std::string dir;                 // absolute folder holding the files
  std::vector<std::string> files;  // names relative to `dir`, sorted
  // stamps[i]: files[i] as it was when its header was read (SafetensorsFile::stamp).
  std::vector<FileStamp> stamps;
  // Every tensor, sorted by (file, begin_offset): the order a sequential reader wants.
  std::vector<TensorLayout> tensors;
  std::map<std::string, std::string> metadata;  // first file's __metadata__, if any
  // The names the files record as duplicates of a stored tensor (SavedTies): alias -> stored.
  std::map<std::string, std::string> saved_ties;

  // nullptr when absent. Built by OpenCheckpoint (or call BuildIndex after editing, which also
  // numbers the tensors: TensorLayout::index).
  const TensorLayout* Find(const std::string& name) const;
  void BuildIndex();
  uint64_t total_size_bytes() const;

  absl::flat_hash_map<std::string, size_t> by_name;
};

// `path` a folder, a .safetensors file or an index, at any location `storage` reaches (a POSIX
// path, "mem://..."), every header read through it.
absl::StatusOr<Checkpoint> OpenCheckpoint(const std::string& path, const Storage& storage = {});

// The ties a checkpoint records itself. safetensors' save_model (and huggingface_hub's
// save_torch_state_dict) store one name of the tensors that share storage and record each
// name it dropped as {dropped: kept} in the file's __metadata__ (in the index's "metadata" when
// sharded). That text is untrusted: an entry is a tie only when its value names a stored tensor
// and its key names none, so that a chain or a cycle cannot occur and no stored tensor is
// redirected; any other entry ("format": "pt", a user's note, a "dropped" name that is stored)
// is not a tie, and a name that two sources map to different tensors is none either.
// `checkpoint` must be indexed (BuildIndex). Whether the module holds the two names as one
// tensor of the same shape is for its loader to check: this says only what the files claim.
std::map<std::string, std::string> SavedTies(
    const std::vector<const std::map<std::string, std::string>*>& sources, const Checkpoint& checkpoint);

// The index file alone (weights perhaps not downloaded yet): tensor name -> shard file,
// plus metadata.total_size when present (-1 otherwise). Accepts the index file itself or
// the folder holding model.safetensors.index.json (or pytorch_model.bin.index.json).
struct CheckpointIndex {
  std::string path;
  std::map<std::string, std::string> weight_map;
  int64_t total_size_bytes = -1;
  std::map<std::string, std::string> metadata;  // the string entries of "metadata" (SavedTies)
};
absl::StatusOr<CheckpointIndex> ReadCheckpointIndex(const std::string& path, const Storage& storage = {});
// The index's text, already read (the fuzz target's entry point; ReadCheckpointIndex reads the
// file and calls this). `path` is stored in CheckpointIndex::path and starts every error.
absl::StatusOr<CheckpointIndex> ParseCheckpointIndex(absl::string_view text, const std::string& path);

}  // namespace metaload

#endif  // METALOAD_PLANNER_FORMAT_CHECKPOINT_H_
