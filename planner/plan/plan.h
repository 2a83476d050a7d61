// A plan: for every rank, the read items it owns. Plain immutable data, like
// torch.distributed.checkpoint's ReadItem; planning is separate from reading.
// JSON form (a stable contract, docs/cli.md):
//   {"model":..,"strategy":..,"world_size":..,
//    "ranks":[{"rank","node","gpu","bytes","budget","units":[..],
//              "items":[{"tensor","dtype","shape","bytes","file","offsets":[b,e],
//                        "slice":{"dim","start","length"},"to_dtype","init","missing"}]}]}
// "file"/"offsets" are absent when the plan was made without a checkpoint or the tensor has no
// checkpoint data; "init" (a buffer's rule) and "missing": true appear only when set. "budget" is the
// rank's budget_bytes (0: unknown). PlanFromJson is strict: unknown keys are errors.
// "slice" appears only for part of a tensor, possibly empty (length 0: a rank past the end of an
// uneven split); "shape" stays the whole tensor's and "bytes" is the slice's. "offsets" is always
// the whole stored tensor's byte range: readers derive the slice's runs from it (SliceRuns,
// planner/plan/slice.h) — one range for a dim-0 slice, equal strided runs for dim >= 1 — so a
// plan never lists one range per row. "dtype" is the stored type; "to_dtype"
// (only when it differs) is the type the rank holds after converting on load (`--dtype`), and
// "bytes" counts the held type.
// "dequantize" (only with `metactl plan --dequantize`): the item is a quantized value the rank
// computes from codes and scales (planner/format/quantization.h): "dtype" is then the type it is
// held in, there is no "file"/"offsets" of its own, and {"rule","codes":{"tensor","file","offsets"},
// "scales":{...}} names the stored tensors read for it (docs/quantization.md).
// Root keys "group_size" and "replicas" (absent when 1) say how ranks share tensors, for
// ValidatePlan: ranks form `replicas` consecutive replicas, each of groups of `group_size`
// consecutive ranks that split (or all hold) a tensor.
#ifndef METALOAD_PLANNER_PLAN_PLAN_H_
#define METALOAD_PLANNER_PLAN_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "planner/format/dtype.h"
#include "planner/format/tensor_layout.h"

namespace metaload {

// Part of a tensor: indexes [start, start + length) along dimension `dim`, all of the others.
struct TensorSlice {
  int dim = 0;
  int64_t start = 0;
  int64_t length = 0;

  bool operator==(const TensorSlice& other) const {
    return dim == other.dim && start == other.start && length == other.length;
  }
};

// Where a dequantized value comes from: read `codes` and `scales`, apply `rule`. Each is the
// whole stored tensor as registered (name, dtype, shape, file, offsets, digest, index): what a rank
// reads its part of and proves, and what it pairs again with FindQuantized
// (planner/format/quantization.h) to rebuild the value's rule. The plan JSON carries only their
// names, files and offsets; the wire (proto/metaload.proto DequantizeSource) carries all of it.
struct DequantizedFrom {
  std::string rule;  // QuantizedValue::Rule(): "fp8-block 128x128: x.weight F8_E4M3 x x.weight_scale_inv F32"
  TensorLayout codes;
  TensorLayout scales;
};

struct ReadItem {
  std::string tensor;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t size_bytes = 0;    // bytes the rank holds for this item (the slice's, when sliced)
  std::string file;           // relative to the checkpoint folder; empty: no checkpoint known
  uint64_t begin_offset = 0;  // absolute in `file`
  uint64_t end_offset = 0;
  // Filled without checkpoint data (then `file` is empty): a non-persistent buffer's rule
  // ("rope_inv_freq(...)", docs/skeleton-format.md), computed on the rank.
  std::string init;
  // In the skeleton but not in the checkpoint, planned only because the model was registered
  // with an init policy (`--init-missing`); the rank initializes it explicitly or fails.
  bool missing = false;
  // Absent: the whole tensor. Last, so aggregate initializers written before slices still read.
  std::optional<TensorSlice> slice;
  // The type the rank holds when it differs from the stored `dtype` (converted on load).
  std::optional<DType> to_dtype;
  // The whole stored tensor's registered digest (TensorLayout::digest) and its place in the
  // checkpoint's tensor list (TensorLayout::index): every rank holding any part of it adds the
  // terms of the tiles it holds, and verification sums them across ranks (docs/integrity.md).
  std::optional<TensorDigest> stored_digest;
  int64_t stored_index = -1;
  // Set when the rank computes the value from codes and scales (dequantizing, `--dequantize`):
  // `dtype` is the held type, and `file` is empty.
  std::optional<DequantizedFrom> dequantize;
};

// The dtype the rank holds: to_dtype when set, else the stored dtype.
inline DType LoadDType(const ReadItem& item) { return item.to_dtype.value_or(item.dtype); }

// The checks every reader of a plan from outside the process relies on (JSON file, gRPC):
// a shape without negative dims or overflow, a slice inside it, "bytes" equal to the slice in
// the held dtype, and offsets holding exactly the whole tensor in the stored dtype. `where`
// prefixes errors ("plan: ranks[3].items[7]").
absl::Status ValidateReadItem(const ReadItem& item, absl::string_view where);

struct RankPlan {
  int rank = 0;
  std::string node;
  int gpu = 0;
  uint64_t size_bytes = 0;         // sum of items' size_bytes
  uint64_t budget_bytes = 0;       // memory available to this rank
  std::vector<std::string> units;  // placement units (module paths), in order
  std::vector<ReadItem> items;     // in model order
};

struct Plan {
  std::string model;
  std::string strategy;
  int world_size = 0;
  // How ranks share tensors (see the JSON notes above): 1 and 1 for `layers`.
  int group_size = 1;
  int replicas = 1;
  std::vector<RankPlan> ranks;
};

// The memory-lean form strategies build: every tensor's whole item once, and per rank only
// references into them (which item, which slice). A 405B-shaped model at fsdp on 1,024 ranks
// is 1.17 M references (32 bytes each, 37 MB) instead of 1.17 M ReadItems (~390 MB), so a
// coordinator can hold the plans its ranks ask for. ExpandRank gives one rank's RankPlan,
// Expand the whole Plan (what MakePlan returns).
struct ItemRef {
  uint32_t item = 0;       // index into CompactPlan::items
  int32_t slice_dim = -1;  // -1: the whole tensor
  int64_t slice_start = 0;
  int64_t slice_length = 0;
  uint64_t size_bytes = 0;  // the slice's, in the held dtype
};

struct CompactRank {
  int rank = 0;
  std::string node;
  int gpu = 0;
  uint64_t size_bytes = 0;
  uint64_t budget_bytes = 0;
  std::vector<std::string> units;
  std::vector<ItemRef> refs;  // in model order
};

struct CompactPlan {
  std::string model;
  std::string strategy;
  int world_size = 0;
  int group_size = 1;
  int replicas = 1;
  std::vector<ReadItem> items;  // whole tensors, in skeleton order
  std::vector<CompactRank> ranks;

  // Appends the whole item `index` (or its slice) to `rank`, adding to its bytes.
  // REQUIRES: the slice lies inside the item's shape.
  void Add(CompactRank& rank, size_t index, std::optional<TensorSlice> slice = std::nullopt) const;
  ReadItem ExpandItem(const ItemRef& ref) const;
  RankPlan ExpandRank(int rank) const;
  Plan Expand() const;
};

// Deterministic: equal plans give byte-identical JSON.
std::string PlanToJson(const Plan& plan);
absl::StatusOr<Plan> PlanFromJson(const std::string& text);
// The human-readable form is PlanToTable (planner/strategy/plan_table.h): its words are the
// strategies'.

}  // namespace metaload

#endif  // METALOAD_PLANNER_PLAN_PLAN_H_
