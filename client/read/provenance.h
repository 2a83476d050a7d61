// Where a tensor's values came from, as data: the rank pipeline records it (fill.h for reads,
// client/resolve/resolver.h for everything else) and carries it through FillResult,
// MaterializeResult and LoadedTensor. Text is made only at the edges — `metactl load`'s output
// and --report JSON (ProvenanceText), and the Python package, from the fields the native
// module hands it — so that nothing parses a source back out of a string.
//
//   Provenance p{.kind = Provenance::Kind::kStream, .nodes = {"a", "b"}, .converted_to = DType::kBF16};
//   ProvenanceText(p) == "stream:a+b>BF16"
//
// Thread-safety: a plain value.
#ifndef METALOAD_CLIENT_READ_PROVENANCE_H_
#define METALOAD_CLIENT_READ_PROVENANCE_H_

#include <optional>
#include <string>
#include <vector>

#include "planner/format/dtype.h"

namespace metaload {

struct Provenance {
  // In the order of ProvenanceKindName's table (provenance.cc).
  enum class Kind {
    kNone,    // nothing delivered it: an empty shard (nothing to read), or a read that could not start
    kDirect,  // read from a file this host opened (its first source)
    kStream,  // streamed from a daemon (its first source)
    kInit,    // initialized as the init policy `rule` says ("zeros", "normal:0.02")
    kBuffer,  // a non-persistent buffer computed by its `rule` ("rope_inv_freq(...)")
    kTied,    // an alias: the same tensor as the stored `tied_to`, read once
    kModule,  // left to the caller's module to compute (a buffer with no rule)
    kFanout,  // checkpoint bytes another rank read and sent (`rule`: "rank N"; client/load/fanout.h)
    // computed from checkpoint bytes: a quantized value's codes and scales (`rule`: the
    // quantization and both stored names; `nodes`: the codes' sources; client/resolve/dequantize.h)
    kDequantized,
  };
  Kind kind = Kind::kNone;
  // kDirect / kStream: every source that delivered bytes, in order: "" for a direct read, else
  // the daemon's node. Before any byte arrived (a read that failed), the source it started on.
  std::vector<std::string> nodes;
  std::optional<DType> converted_to;  // read in the stored dtype, converted to this on load
  std::string rule;  // kInit: the policy; kBuffer: the rule; kFanout: "rank N"; kDequantized: the rule
  // kTied: the stored tensor it shares; on a read: the stored tensor it was read as (an alias).
  std::string tied_to;
};

// The text users see: "" (kNone), "direct", "stream:a", "stream:a+b", "direct+stream:b" (every
// source that delivered, in order), then ">BF16" when converted and " (tied:<stored>)" for a
// read through an alias; "init:<policy>", "buffer:<rule>", "tied", "module", "fanout:rank N",
// "dequantized:direct>BF16 (<rule>)".
std::string ProvenanceText(const Provenance& provenance);

// The kind's name at the Python boundary: "none", "direct", "stream", "init", "buffer", "tied",
// "module", "fanout", "dequantized".
const char* ProvenanceKindName(Provenance::Kind kind);

}  // namespace metaload

#endif  // METALOAD_CLIENT_READ_PROVENANCE_H_
