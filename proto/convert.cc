#include "proto/convert.h"

#include <google/protobuf/any.pb.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "security/client_credentials.h"
#include "security/handshake_errors.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace metaload {
void ItemToProto(const ReadItem& item, v1::ReadItem* out) {
  out->set_tensor(item.tensor);
  out->set_dtype(std::string(DTypeCode(item.dtype)));
  for (int64_t d : item.shape) out->add_shape(d);
  out->set_size_bytes(item.size_bytes);
  out->set_file(item.file);
  out->set_begin_offset(item.begin_offset);
  out->set_end_offset(item.end_offset);
  out->set_init(item.init);
  out->set_missing(item.missing);
  if (item.slice.has_value()) {
    out->mutable_slice()->set_dim(item.slice->dim);
    out->mutable_slice()->set_start(item.slice->start);
    out->mutable_slice()->set_length(item.slice->length);
  }
  if (item.to_dtype.has_value()) out->set_to_dtype(std::string(DTypeCode(*item.to_dtype)));
  if (item.stored_digest.has_value()) DigestToProto(*item.stored_digest, out->mutable_stored_digest());
  if (item.stored_index >= 0) out->set_stored_index(item.stored_index);
  if (item.dequantize.has_value()) {
    v1::DequantizeSource* source = out->mutable_dequantize();
    source->set_rule(item.dequantize->rule);
    LayoutToProto(item.dequantize->codes, source->mutable_codes());
    LayoutToProto(item.dequantize->scales, source->mutable_scales());
    if (item.dequantize->codes.index >= 0) source->set_codes_index(item.dequantize->codes.index);
    if (item.dequantize->scales.index >= 0) source->set_scales_index(item.dequantize->scales.index);
  }
}

void DigestToProto(const TensorDigest& digest, v1::TensorDigest* out) {
  out->set_kind(DigestKindName(digest.kind));
  out->set_tile_bytes(digest.tile_bytes);
  out->set_lanes(digest.lanes);
}

absl::StatusOr<std::optional<TensorDigest>> DigestFromProto(const v1::TensorDigest& proto,
                                                            const std::vector<int64_t>& shape, DType dtype) {
  if (proto.kind().empty() && proto.lanes().empty() && proto.tile_bytes() == 0) return std::nullopt;
  TensorDigest digest;
  ML_ASSIGN_OR_RETURN(digest.kind, ParseDigestKind(proto.kind()));
  digest.tile_bytes = proto.tile_bytes();
  digest.lanes = proto.lanes();
  ML_RETURN_IF_ERROR(CheckTensorDigest(digest, shape, dtype));
  return digest;
}

namespace {

// One of a dequantized item's stored tensors, from the wire: LayoutFromProto's checks (a known
// dtype, offsets in order, a digest that fits the tensor), then the ones a reader relies on before
// it allocates a buffer of the layout's shape or reads its offsets: a name and a file, a shape
// whose size fits (TensorBytesFit: no negative dimension, no overflow), offsets holding exactly
// those bytes, and an index of -1 (unknown) or more.
absl::StatusOr<TensorLayout> StoredSourceFromProto(const v1::TensorLocation& proto, bool has_index,
                                                   int64_t index, absl::string_view role) {
  ML_ASSIGN_OR_RETURN(TensorLayout layout, LayoutFromProto(proto));
  const std::string where = absl::StrCat("dequantize ", role, " ", layout.name);
  if (layout.name.empty() || layout.file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("dequantize ", role, ": no tensor name or file"));
  }
  uint64_t bytes = 0;
  if (!TensorBytesFit(layout.shape, layout.dtype, &bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": bad shape ", ShapeToString(layout.shape)));
  }
  if (layout.size_bytes() != bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": offsets [", layout.begin_offset, ", ", layout.end_offset, ") do not hold its ",
                     bytes, " bytes of ", DTypeCode(layout.dtype), " ", ShapeToString(layout.shape)));
  }
  if (has_index) {
    if (index < 0) return absl::InvalidArgumentError(absl::StrCat(where, ": negative index ", index));
    layout.index = index;
  }
  return layout;
}

absl::StatusOr<DequantizedFrom> DequantizeFromProto(const v1::DequantizeSource& proto) {
  DequantizedFrom from;
  from.rule = proto.rule();
  if (from.rule.empty()) return absl::InvalidArgumentError("dequantize: no rule");
  ML_ASSIGN_OR_RETURN(from.codes, StoredSourceFromProto(proto.codes(), proto.has_codes_index(),
                                                        proto.codes_index(), "codes"));
  ML_ASSIGN_OR_RETURN(from.scales, StoredSourceFromProto(proto.scales(), proto.has_scales_index(),
                                                         proto.scales_index(), "scales"));
  return from;
}

absl::StatusOr<ReadItem> ItemFromProto(const v1::ReadItem& proto) {
  ReadItem item;
  item.tensor = proto.tensor();
  ML_ASSIGN_OR_RETURN(item.dtype, DTypeFromCode(proto.dtype()));
  item.shape.assign(proto.shape().begin(), proto.shape().end());
  item.size_bytes = proto.size_bytes();
  item.file = proto.file();
  item.begin_offset = proto.begin_offset();
  item.end_offset = proto.end_offset();
  item.init = proto.init();
  item.missing = proto.missing();
  if (proto.has_slice())
    item.slice = TensorSlice{proto.slice().dim(), proto.slice().start(), proto.slice().length()};
  if (!proto.to_dtype().empty()) {
    ML_ASSIGN_OR_RETURN(DType to_dtype, DTypeFromCode(proto.to_dtype()));
    item.to_dtype = to_dtype;
  }
  if (proto.has_stored_digest()) {
    absl::StatusOr<std::optional<TensorDigest>> digest =
        DigestFromProto(proto.stored_digest(), item.shape, item.dtype);
    if (!digest.ok()) return Annotate(digest.status(), absl::StrCat("plan item (", item.tensor, ")"));
    item.stored_digest = *std::move(digest);
  }
  if (proto.has_stored_index()) item.stored_index = proto.stored_index();
  if (proto.has_dequantize()) {
    absl::StatusOr<DequantizedFrom> from = DequantizeFromProto(proto.dequantize());
    if (!from.ok()) return Annotate(from.status(), absl::StrCat("plan item (", item.tensor, ")"));
    item.dequantize = *std::move(from);
  }
  ML_RETURN_IF_ERROR(ValidateReadItem(item, "plan item"));
  return item;
}

}  // namespace

void PlanToProto(const Plan& plan, v1::Plan* out) {
  out->set_model(plan.model);
  out->set_strategy(plan.strategy);
  out->set_world_size(plan.world_size);
  out->set_group_size(plan.group_size);
  out->set_replicas(plan.replicas);
  for (const RankPlan& rank : plan.ranks) {
    v1::RankPlan* r = out->add_ranks();
    r->set_rank(rank.rank);
    r->set_node(rank.node);
    r->set_gpu(rank.gpu);
    r->set_size_bytes(rank.size_bytes);
    r->set_budget_bytes(rank.budget_bytes);
    for (const std::string& unit : rank.units) r->add_units(unit);
    for (const ReadItem& item : rank.items) ItemToProto(item, r->add_items());
  }
}

absl::StatusOr<Plan> PlanFromProto(const v1::Plan& proto) {
  Plan plan;
  plan.model = proto.model();
  plan.strategy = proto.strategy();
  plan.world_size = proto.world_size();
  plan.group_size = proto.group_size() == 0 ? 1 : proto.group_size();
  plan.replicas = proto.replicas() == 0 ? 1 : proto.replicas();
  if (plan.group_size < 0 || plan.replicas < 0)
    return absl::InvalidArgumentError("plan: negative group_size or replicas");
  for (const v1::RankPlan& r : proto.ranks()) {
    RankPlan rank;
    rank.rank = r.rank();
    rank.node = r.node();
    rank.gpu = r.gpu();
    rank.size_bytes = r.size_bytes();
    rank.budget_bytes = r.budget_bytes();
    rank.units.assign(r.units().begin(), r.units().end());
    for (const v1::ReadItem& i : r.items()) {
      ML_ASSIGN_OR_RETURN(ReadItem item, ItemFromProto(i));
      rank.items.push_back(std::move(item));
    }
    plan.ranks.push_back(std::move(rank));
  }
  return plan;
}

void StrategyOptionsToProto(const StrategyOptions& options, v1::GetPlanRequest* out) {
  out->set_strategy(options.strategy);
  out->set_tp(options.tp);
  out->set_pp(options.pp);
  out->set_reserve_fraction(options.reserve_fraction);
  out->set_reserve_bytes(options.reserve_bytes);
  if (options.load_dtype.has_value()) out->set_dtype(std::string(DTypeCode(*options.load_dtype)));
  out->set_dequantize(options.dequantize);
}

absl::StatusOr<StrategyOptions> StrategyOptionsFromProto(const v1::GetPlanRequest& proto) {
  StrategyOptions options;
  if (!proto.strategy().empty()) options.strategy = proto.strategy();
  if (proto.tp() < 0 || proto.pp() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tp ", proto.tp(), " and pp ", proto.pp(), " must not be negative"));
  }
  options.tp = proto.tp() == 0 ? 1 : proto.tp();
  options.pp = proto.pp();
  if (proto.has_reserve_fraction()) {
    if (!(proto.reserve_fraction() >= 0.0 && proto.reserve_fraction() < 1.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("reserve fraction ", proto.reserve_fraction(), " is outside [0, 1)"));
    }
    options.reserve_fraction = proto.reserve_fraction();
  }
  options.reserve_bytes = proto.reserve_bytes();
  if (!proto.dtype().empty()) {
    ML_ASSIGN_OR_RETURN(DType dtype, DTypeFromCode(proto.dtype()));
    if (!IsConvertibleFloat(dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("dtype ", proto.dtype(), ": loads convert to F16, BF16 or F32"));
    }
    options.load_dtype = dtype;
  }
  options.dequantize = proto.dequantize();
  return options;
}

void LayoutToProto(const TensorLayout& layout, v1::TensorLocation* out) {
  out->set_name(layout.name);
  out->set_dtype(std::string(DTypeCode(layout.dtype)));
  for (int64_t d : layout.shape) out->add_shape(d);
  out->set_file(layout.file);
  out->set_begin_offset(layout.begin_offset);
  out->set_end_offset(layout.end_offset);
  if (layout.digest.has_value()) DigestToProto(*layout.digest, out->mutable_digest());
}

absl::StatusOr<TensorLayout> LayoutFromProto(const v1::TensorLocation& proto) {
  TensorLayout layout;
  layout.name = proto.name();
  ML_ASSIGN_OR_RETURN(layout.dtype, DTypeFromCode(proto.dtype()));
  layout.shape.assign(proto.shape().begin(), proto.shape().end());
  layout.file = proto.file();
  layout.begin_offset = proto.begin_offset();
  layout.end_offset = proto.end_offset();
  if (layout.end_offset < layout.begin_offset) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", layout.name, ": end offset before begin"));
  }
  if (proto.has_digest()) {
    uint64_t bytes = 0;
    if (!TensorBytesFit(layout.shape, layout.dtype, &bytes)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", layout.name, ": bad shape"));
    }
    absl::StatusOr<std::optional<TensorDigest>> digest =
        DigestFromProto(proto.digest(), layout.shape, layout.dtype);
    if (!digest.ok()) return Annotate(digest.status(), absl::StrCat("tensor ", layout.name));
    layout.digest = *std::move(digest);
  }
  return layout;
}

absl::StatusOr<Checkpoint> CheckpointFromRecord(const v1::ModelRecord& record) {
  Checkpoint checkpoint;
  checkpoint.dir = record.checkpoint_dir();
  for (const v1::TensorLocation& t : record.tensors()) {
    ML_ASSIGN_OR_RETURN(TensorLayout layout, LayoutFromProto(t));
    if (checkpoint.files.empty() || checkpoint.files.back() != layout.file)
      checkpoint.files.push_back(layout.file);
    checkpoint.tensors.push_back(std::move(layout));
  }
  std::sort(checkpoint.files.begin(), checkpoint.files.end());
  checkpoint.files.erase(std::unique(checkpoint.files.begin(), checkpoint.files.end()),
                         checkpoint.files.end());
  checkpoint.BuildIndex();
  return checkpoint;
}

FileStamp FileStampFromProto(const v1::FileStat& proto) {
  return FileStamp{proto.size_bytes(), proto.mtime_ns(), proto.device(),
                   proto.inode(),      proto.ctime_ns(), proto.version()};
}

void FileStampToProto(const FileStamp& stamp, v1::FileStat* proto) {
  proto->set_size_bytes(stamp.size_bytes);
  proto->set_mtime_ns(stamp.mtime_ns);
  proto->set_device(stamp.device);
  proto->set_inode(stamp.inode);
  proto->set_ctime_ns(stamp.ctime_ns);
  proto->set_version(stamp.version);
}

absl::StatusOr<ModelRecord> ModelRecordFromProto(const v1::ModelRecord& proto) {
  ModelRecord record;
  record.name = proto.name();
  ML_ASSIGN_OR_RETURN(record.checkpoint, CheckpointFromRecord(proto));
  record.skeleton_json = proto.skeleton_json();
  record.registered_on = proto.registered_on();
  record.init_missing = proto.init_missing();
  record.allow_unexpected = proto.allow_unexpected();
  record.hf_config_json = proto.hf_config_json();
  for (const v1::FileStat& stat : proto.file_stats()) {
    // An ETag is at most 128 printable bytes (util/fs/s3/s3_client.cc checks what servers send):
    // a record's version is echoed in "changed since it was registered", so it is held to that.
    if (stat.version().size() > 128 || std::any_of(stat.version().begin(), stat.version().end(),
                                                   [](char c) { return c < ' ' || c > '~'; })) {
      return absl::InvalidArgumentError(absl::StrCat("model record ", proto.name().substr(0, 128), ": file ",
                                                     stat.file().substr(0, 256),
                                                     ": a version of more than 128 printable bytes"));
    }
    record.file_stats.push_back(RegisteredFile{stat.file(), FileStampFromProto(stat)});
  }
  return record;
}

v1::ModelRecord ModelRecordToProto(const ModelRecord& record) {
  v1::ModelRecord proto;
  proto.set_name(record.name);
  proto.set_checkpoint_dir(record.checkpoint.dir);
  proto.set_skeleton_json(record.skeleton_json);
  for (const TensorLayout& t : record.checkpoint.tensors) LayoutToProto(t, proto.add_tensors());
  proto.set_registered_on(record.registered_on);
  proto.set_init_missing(record.init_missing);
  proto.set_allow_unexpected(record.allow_unexpected);
  proto.set_hf_config_json(record.hf_config_json);
  FileStatsToProto(record.file_stats, proto.mutable_file_stats());
  return proto;
}

void FileStatsToProto(const std::vector<RegisteredFile>& files,
                      google::protobuf::RepeatedPtrField<v1::FileStat>* out) {
  for (const RegisteredFile& registered : files) {
    v1::FileStat* stat = out->Add();
    stat->set_file(registered.file);
    FileStampToProto(registered.stamp, stat);
  }
}

NodeSpec NodeSpecFromProto(const v1::NodeInfo& proto) {
  return NodeSpec{proto.name(),
                  proto.address(),
                  proto.gpu_count(),
                  proto.gpu_memory_bytes(),
                  {proto.roots().begin(), proto.roots().end()}};
}

v1::NodeInfo NodeSpecToProto(const NodeSpec& node) {
  v1::NodeInfo proto;
  proto.set_name(node.name);
  proto.set_address(node.address);
  proto.set_gpu_count(node.gpu_count);
  proto.set_gpu_memory_bytes(node.gpu_memory_bytes);
  for (const std::string& root : node.roots) proto.add_roots(root);
  return proto;
}

namespace {

using google::protobuf::internal::WireFormatLite;

// grpc::Status's error_details is, by gRPC's convention, a serialized google.rpc.Status
// {int32 code = 1; string message = 2; repeated google.protobuf.Any details = 3}: each payload
// of the status (its ErrorKind, util/error_kind.h) travels as one Any, so that a daemon's
// refusal keeps its kind on the client. No message (grpc-message carries it; trailers are
// bounded), and nothing at all for a status without payloads: the wire is as it was.
std::string DetailsOf(const absl::Status& status) {
  std::vector<std::string> details;
  status.ForEachPayload([&](absl::string_view type_url, const absl::Cord& payload) {
    google::protobuf::Any any;
    any.set_type_url(std::string(type_url));
    any.set_value(std::string(payload));
    details.push_back(any.SerializeAsString());
  });
  if (details.empty()) return "";
  std::string out;
  {
    google::protobuf::io::StringOutputStream raw(&out);
    google::protobuf::io::CodedOutputStream coded(&raw);
    WireFormatLite::WriteInt32(1, static_cast<int32_t>(status.code()), &coded);
    for (const std::string& detail : details) WireFormatLite::WriteBytes(3, detail, &coded);
  }
  return out;
}

// Sets on `status` the payloads DetailsOf wrote. Untrusted bytes: what does not parse is ignored.
void SetPayloadsFrom(const std::string& details, absl::Status& status) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(details.data()),
                                            static_cast<int>(details.size()));
  while (const uint32_t tag = in.ReadTag()) {
    if (WireFormatLite::GetTagFieldNumber(tag) != 3 ||
        WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      if (!WireFormatLite::SkipField(&in, tag)) return;
      continue;
    }
    std::string bytes;
    if (!WireFormatLite::ReadBytes(&in, &bytes)) return;
    google::protobuf::Any any;
    if (any.ParseFromString(bytes)) status.SetPayload(any.type_url(), absl::Cord(any.value()));
  }
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // The last line of defence against echoed input: every edge quotes what it echoes
  // (util/identifiers.h), and no message leaves the daemon longer than this.
  constexpr size_t kMaxMessageBytes = 8 << 10;
  std::string message(status.message().substr(0, kMaxMessageBytes));
  if (status.message().size() > kMaxMessageBytes) {
    absl::StrAppend(&message, "… (message cut at ", kMaxMessageBytes, " of ", status.message().size(),
                    " bytes)");
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), message, DetailsOf(status));
}

absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view context) {
  if (status.ok()) return absl::OkStatus();
  absl::Status converted(static_cast<absl::StatusCode>(status.error_code()),
                         absl::StrCat(context, ": ", status.error_message()));
  SetPayloadsFrom(status.error_details(), converted);
  return converted;
}

absl::Status FromDaemonCallStatus(const grpc::Status& status, grpc::ChannelInterface& channel,
                                  absl::string_view address, absl::string_view context,
                                  const ClientCredentials* used) {
  absl::Status converted = FromGrpcStatus(status, context);
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return converted;
  // A fail-fast call fails UNAVAILABLE when no connection can be made, and the channel stays in
  // TRANSIENT_FAILURE until one is; a daemon's own UNAVAILABLE came over a connection that works.
  if (channel.GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_TRANSIENT_FAILURE) return converted;
  // A TLS handshake that failed is a configuration to fix (exit 2), not a daemon to wait for;
  // a connection closed at once most likely is, but keeps its code.
  bool client_tls = false, client_cert = false;
  absl::StatusOr<std::shared_ptr<const ClientCredentials>> own;
  if (used == nullptr && (own = ProcessCredentials()).ok()) used = own->get();
  if (used != nullptr) {
    client_tls = used->tls;
    client_cert = !used->cert_pem.empty();
  }
  if (HandshakeFailure tls = ExplainHandshakeFailure(status.error_message(), client_tls, client_cert);
      !tls.explanation.empty()) {
    return Restated(converted, tls.certain ? absl::StatusCode::kUnauthenticated : converted.code(),
                    absl::StrCat(context, ": ", tls.explanation, " (connecting to ", address, ": ",
                                 status.error_message(), ")"));
  }
  return Restated(converted, converted.code(),
                  absl::StrCat(converted.message(), "; is metad running at ", address, "?"));
}

}  // namespace metaload
