#include "daemon/membership/node_restriction.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/identifiers.h"

namespace metaload {

absl::Status CheckMemberPublication(const ModelRecord& record, absl::string_view identity,
                                    const std::optional<BoundMember>& bound) {
  const std::string what = absl::StrCat("PublishModel of model ", QuoteForMessage(record.name),
                                        " registered on node ", QuoteForMessage(record.registered_on), ": ");
  if (!bound.has_value()) {
    return absl::PermissionDeniedError(
        absl::StrCat(what, "no member has that name; a member publishes only what is registered on its ",
                     "own node, once it joined"));
  }
  if (bound->identity != identity) {
    return absl::PermissionDeniedError(absl::StrCat(what, "that node joined as ", bound->identity,
                                                    "; this caller (", identity,
                                                    ") publishes only what is registered on its own node"));
  }
  // Both in normal form: CheckModelRecord and CheckNodeInfo checked them at the edge.
  for (const std::string& root : bound->node.roots) {
    if (IsUnderRoot(record.checkpoint.dir, root)) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      what, "its folder ", QuoteForMessage(record.checkpoint.dir, 512), " is not under the node's roots (",
      bound->node.roots.empty() ? "none" : absl::StrJoin(bound->node.roots, ", "),
      "); a member publishes only folders it serves"));
}

}  // namespace metaload
