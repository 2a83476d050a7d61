#include "client/read/provenance.h"

#include <iterator>

#include "absl/strings/str_cat.h"

namespace metaload {
namespace {

// "stream:a", "stream:a+b", "direct+stream:b": the sources, "stream:" once per run of daemons.
std::string SourcesText(const std::vector<std::string>& nodes) {
  std::string text;
  bool streaming = false;
  for (const std::string& node : nodes) {
    if (!text.empty()) text += "+";
    if (node.empty()) {
      text += "direct";
      streaming = false;
    } else {
      absl::StrAppend(&text, streaming ? "" : "stream:", node);
      streaming = true;
    }
  }
  return text;
}

}  // namespace

const char* ProvenanceKindName(Provenance::Kind kind) {
  static constexpr const char* kNames[] = {"none", "direct", "stream", "init",       "buffer",
                                           "tied", "module", "fanout", "dequantized"};
  static_assert(std::size(kNames) == static_cast<size_t>(Provenance::Kind::kDequantized) + 1,
                "in Kind's order");
  return kNames[static_cast<size_t>(kind)];
}

std::string ProvenanceText(const Provenance& p) {
  switch (p.kind) {
    case Provenance::Kind::kInit:
    case Provenance::Kind::kBuffer:  // "init:zeros", "buffer:rope_inv_freq(...)", "fanout:rank 2"
    case Provenance::Kind::kFanout:
      return absl::StrCat(ProvenanceKindName(p.kind), ":", p.rule);
    case Provenance::Kind::kTied:  // the stored name is a field of its own at the edges
    case Provenance::Kind::kModule:
      return ProvenanceKindName(p.kind);
    case Provenance::Kind::kDequantized:  // "dequantized:direct>BF16 (fp8-block 128x128: w F8_E4M3 x ...)"
      return absl::StrCat(ProvenanceKindName(p.kind), ":", SourcesText(p.nodes), ">",
                          p.converted_to.has_value() ? DTypeCode(*p.converted_to) : "?", " (", p.rule, ")");
    case Provenance::Kind::kNone:
    case Provenance::Kind::kDirect:
    case Provenance::Kind::kStream:
      break;
  }
  std::string text = SourcesText(p.nodes);
  if (p.converted_to.has_value()) absl::StrAppend(&text, ">", DTypeCode(*p.converted_to));
  if (!p.tied_to.empty()) absl::StrAppend(&text, " (tied:", p.tied_to, ")");
  return text;
}

}  // namespace metaload
