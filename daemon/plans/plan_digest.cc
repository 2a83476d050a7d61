#include "daemon/plans/plan_digest.h"

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "planner/format/dtype.h"
#include "util/hash/sha256.h"

namespace metaload {
namespace {

// Fields fed to the digest are length-prefixed, so that no two different plans feed the same
// bytes ("ab","c" vs "a","bc").
class DigestWriter {
 public:
  void Add(absl::string_view text) {
    Int(text.size());
    sha_.Update(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  }
  void Int(uint64_t value) {
    uint8_t bytes[8];
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(value >> (8 * i));
    sha_.Update(absl::MakeConstSpan(bytes, 8));
  }
  std::string Hex() { return sha_.HexDigest(); }

 private:
  Sha256 sha_;
};

}  // namespace

// The planner's key: every strategy's options, in the bytes plans have always been digested by.
std::string OptionsKey(const StrategyOptions& o) { return StrategyOptionsKey(o); }

std::string MembersKey(const std::vector<NodeSpec>& members) {
  std::string key;
  for (const NodeSpec& m : members) {
    absl::StrAppend(&key, m.name, "@", m.address, "#", m.gpu_count, "x", m.gpu_memory_bytes);
    for (const std::string& root : m.roots) absl::StrAppend(&key, ":", root);
    key += '\n';
  }
  return key;
}

std::string PlanDigest(const CompactPlan& plan, const StrategyOptions& options) {
  DigestWriter d;
  d.Add("metaload.plan/1");
  d.Add(OptionsKey(options));
  d.Add(plan.model);
  d.Add(plan.strategy);
  d.Int(static_cast<uint64_t>(plan.world_size));
  d.Int(static_cast<uint64_t>(plan.group_size));
  d.Int(static_cast<uint64_t>(plan.replicas));
  for (const CompactRank& rank : plan.ranks) {
    d.Int(static_cast<uint64_t>(rank.rank));
    d.Add(rank.node);
    d.Int(static_cast<uint64_t>(rank.gpu));
    d.Int(rank.size_bytes);
    d.Int(rank.budget_bytes);
    d.Int(rank.refs.size());
    for (const ItemRef& ref : rank.refs) {
      const ReadItem& item = plan.items[ref.item];
      d.Add(item.tensor);
      d.Int(static_cast<uint64_t>(item.dtype));
      d.Int(item.shape.size());
      for (int64_t dim : item.shape) d.Int(static_cast<uint64_t>(dim));
      d.Int(ref.size_bytes);
      d.Add(item.file);
      d.Int(item.begin_offset);
      d.Int(item.end_offset);
      d.Add(item.init);
      d.Int(item.missing ? 1 : 0);
      d.Int(ref.slice_dim >= 0 ? 1 : 0);
      if (ref.slice_dim >= 0) {
        d.Int(static_cast<uint64_t>(ref.slice_dim));
        d.Int(static_cast<uint64_t>(ref.slice_start));
        d.Int(static_cast<uint64_t>(ref.slice_length));
      }
      d.Int(item.to_dtype.has_value() ? 1 + static_cast<uint64_t>(*item.to_dtype) : 0);
      // Only when present, so that plans without digests keep the digest they always had.
      if (item.stored_digest.has_value()) {
        d.Add("tile-digest");
        d.Add(DigestKindName(item.stored_digest->kind));
        d.Int(item.stored_digest->tile_bytes);
        d.Add(item.stored_digest->lanes);
        d.Int(static_cast<uint64_t>(item.stored_index));
      }
      // Only when present, as above: what a dequantized value is computed from.
      if (item.dequantize.has_value()) {
        d.Add("dequantize");
        d.Add(item.dequantize->rule);
        for (const TensorLayout* stored : {&item.dequantize->codes, &item.dequantize->scales}) {
          d.Add(stored->name);
          d.Add(stored->file);
          d.Int(stored->begin_offset);
          d.Int(stored->end_offset);
        }
      }
    }
  }
  return d.Hex();
}

}  // namespace metaload
