// Conversions between the wire contract (metaload.v1) and plain planner types, and between
// absl::Status and grpc::Status. The only place both worlds meet; torch-free by design.
#ifndef METALOAD_PROTO_CONVERT_H_
#define METALOAD_PROTO_CONVERT_H_

#include <grpcpp/grpcpp.h>

#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "planner/format/checkpoint.h"
#include "planner/plan/cluster.h"
#include "planner/plan/plan.h"
#include "planner/strategy/strategy.h"
#include "proto/metaload.grpc.pb.h"
#include "proto/model_record.h"
#include "security/client_credentials.h"

namespace metaload {

void PlanToProto(const Plan& plan, v1::Plan* out);
void ItemToProto(const ReadItem& item, v1::ReadItem* out);
// InvalidArgument for unknown dtypes or sizes that do not add up (the wire is untrusted).
absl::StatusOr<Plan> PlanFromProto(const v1::Plan& proto);

// The strategy fields of a GetPlanRequest (model and world size are the caller's).
void StrategyOptionsToProto(const StrategyOptions& options, v1::GetPlanRequest* out);
// InvalidArgument for negative tp/pp, a reserve outside [0, 1), or an unknown dtype.
absl::StatusOr<StrategyOptions> StrategyOptionsFromProto(const v1::GetPlanRequest& proto);

void LayoutToProto(const TensorLayout& layout, v1::TensorLocation* out);
void DigestToProto(const TensorDigest& digest, v1::TensorDigest* out);
// nullopt for an empty message; InvalidArgument for one CheckTensorDigest refuses.
absl::StatusOr<std::optional<TensorDigest>> DigestFromProto(const v1::TensorDigest& proto,
                                                            const std::vector<int64_t>& shape, DType dtype);
absl::StatusOr<TensorLayout> LayoutFromProto(const v1::TensorLocation& proto);
// Rebuilds the Checkpoint a ModelRecord describes (no file is opened).
absl::StatusOr<Checkpoint> CheckpointFromRecord(const v1::ModelRecord& record);

// A record as plain types (proto/model_record.h) and back; REQUIRES for FromProto that
// CheckModelRecord (daemon/requests/request_checks.h) passed, else InvalidArgument for a
// dtype or byte range that does not parse. ToProto(FromProto(r)) serializes as r does.
// A registered file's stamp as the wire carries it, every field (FileStat's).
FileStamp FileStampFromProto(const v1::FileStat& proto);
void FileStampToProto(const FileStamp& stamp, v1::FileStat* proto);
// Each registered file with its stamp, appended to `out` (a record's, or a layout's).
void FileStatsToProto(const std::vector<RegisteredFile>& files,
                      google::protobuf::RepeatedPtrField<v1::FileStat>* out);

absl::StatusOr<ModelRecord> ModelRecordFromProto(const v1::ModelRecord& proto);
v1::ModelRecord ModelRecordToProto(const ModelRecord& record);

// A member (planner/plan/cluster.h) and back; REQUIRES for FromProto that CheckNodeInfo passed.
NodeSpec NodeSpecFromProto(const v1::NodeInfo& proto);
v1::NodeInfo NodeSpecToProto(const NodeSpec& node);

// Messages longer than 8 KiB are cut (and say so). The status's payloads (its ErrorKind,
// util/error_kind.h) travel in error_details, as google.rpc.Status's details; none, none sent.
grpc::Status ToGrpcStatus(const absl::Status& status);
// `context` is prepended to the message ("GetPlan from 127.0.0.1:7070: ..."); the payloads
// ToGrpcStatus sent are set again (details that do not parse are ignored).
absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view context);

// FromGrpcStatus for a call this process made to the metad at `address` over `channel`: every
// client of a daemon (metactl register/status/plan --daemon/load, the rank library) turns its
// statuses into messages here. A call that never reached a daemon (UNAVAILABLE while `channel`
// cannot connect: connection refused, unknown host, no route) ends "is metad running at
// ADDRESS?"; an UNAVAILABLE the daemon itself answered (its coordinator is down) keeps the
// daemon's words, which name the unreachable one. The code is kept (UNAVAILABLE: try again).
// A connection refused during TLS setup says what to fix (security/handshake_errors.h), from
// the credentials the channel was made with: `used`, else this process's (ProcessCredentials).
// The status's payloads are kept.
absl::Status FromDaemonCallStatus(const grpc::Status& status, grpc::ChannelInterface& channel,
                                  absl::string_view address, absl::string_view context,
                                  const ClientCredentials* used = nullptr);

}  // namespace metaload

#endif  // METALOAD_PROTO_CONVERT_H_
