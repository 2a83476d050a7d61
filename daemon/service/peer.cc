#include "daemon/service/peer.h"

#include "absl/strings/str_cat.h"
#include "daemon/requests/request_checks.h"
#include "proto/convert.h"
#include "util/identifiers.h"
#include "util/log.h"
#include "util/status_macros.h"

namespace metaload {

Peer::Peer(BackendContext context, SharedRecordStore* store, std::string describe)
    : Coordinator(std::move(context)), store_(store), describe_(std::move(describe)) {
  registry_.AttachStore(store_);
}

RoleStatus Peer::Status() const {
  RoleStatus status = Coordinator::Status();
  status.registry = describe_;
  return status;
}

absl::Status Peer::Takes(MemberCall) const {
  return absl::FailedPreconditionError(
      absl::StrCat(context_.config->node, " has no coordinator: its registry is ", describe_,
                   ", where every daemon is a peer; give the calling node `registry: ", describe_,
                   "` instead of `coordinator:`"));
}

absl::Status Peer::ApplyShared(const v1::ModelRecord& wire, const std::string& origin) {
  ML_RETURN_IF_ERROR(CheckModelRecord(wire));
  ML_ASSIGN_OR_RETURN(ModelRecord record, ModelRecordFromProto(wire));
  MetaModelSummary summary;
  const bool held_before = context_.meta->Summarize(record.name, &summary);
  ML_RETURN_IF_ERROR(registry_.Put(record, RecordOrigin::kSharedRegistry, true, nullptr, origin));
  if (absl::Status held = context_.meta->PutJson(record.name, record.skeleton_json); !held.ok()) {
    registry_.Drop(record.name);
    return held;
  }
  if (!held_before) {
    LogInfo(absl::StrCat("model ", record.name, " (registered on ", record.registered_on, ") read from ",
                         describe_));
  }
  return absl::OkStatus();
}

void Peer::DropShared(const std::string& name) {
  if (!registry_.Drop(name)) return;
  context_.meta->Remove(name);
  LogInfo(absl::StrCat("model ", name, " is gone from the registry: unregistered"));
}

void Peer::RefreshFromRegistry(const std::string& name) {
  absl::StatusOr<std::optional<StoredRecord>> stored = store_->GetForUpdate(name);
  if (!stored.ok()) {
    LogWarning(
        absl::StrCat("registry: reading model ", QuoteForMessage(name), ": ", stored.status().message()));
    return;
  }
  if (!stored->has_value()) {
    DropShared(name);
    return;
  }
  if (absl::Status applied = ApplyShared((*stored)->record, (*stored)->origin); !applied.ok()) {
    LogError(absl::StrCat("registry: skipped ", (*stored)->origin, ": ", applied.message()));
  }
}

}  // namespace metaload
