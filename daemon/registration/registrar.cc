#include "daemon/registration/registrar.h"

#include <algorithm>
#include <map>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "daemon/registration/tensor_digests.h"
#include "daemon/requests/request_limits.h"
#include "planner/doctor/admission.h"
#include "planner/doctor/match.h"
#include "planner/doctor/quantized_match.h"
#include "planner/format/checkpoint.h"
#include "planner/format/quantization.h"
#include "planner/skeleton/hf/checkpoint_skeleton.h"
#include "planner/skeleton/init_policy.h"
#include "proto/convert.h"
#include "util/fs/location.h"
#include "util/fs/storage.h"
#include "util/json/strict_json.h"
#include "util/log.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

absl::Status CheckModelName(const std::string& name) {
  if (name.empty() || name.size() > 128) {
    return absl::InvalidArgumentError("model name must have 1 to 128 characters");
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return absl::InvalidArgumentError(
          absl::StrCat("model name \"", name, "\" may hold only letters, digits, '-', '_' and '.'"));
    }
  }
  return absl::OkStatus();
}

// Each file's size and mtime, so that readers can tell a file rewritten after this
// registration, and its device, inode and ctime, so that this daemon can tell another file
// renamed over it (util/fs/file_stamp.h): the stamps fstat gave on the descriptor each header was
// read from, unchanged across the read (planner/format/safetensors.h), so each recorded stamp is
// that of the layout recorded, and any later rewrite changes it. (Stating the files afterwards
// would need every header read again, to refuse a file rewritten in between.)
absl::Status RecordFileStats(const Checkpoint& checkpoint, v1::ModelRecord* record) {
  if (checkpoint.stamps.size() != checkpoint.files.size()) {
    return absl::InternalError(
        absl::StrCat("the checkpoint in ", checkpoint.dir, " was read without its files' stamps"));
  }
  for (size_t i = 0; i < checkpoint.files.size(); ++i) {
    v1::FileStat* stat = record->add_file_stats();
    stat->set_file(checkpoint.files[i]);
    FileStampToProto(checkpoint.stamps[i], stat);
  }
  return absl::OkStatus();
}

// The folder's config.json as it is, for ranks that build transformers' model without seeing
// the folder (ModelRecord.hf_config_json); "" when there is none. Opened beneath the roots as
// every registration file is. One that is too large or not a JSON object is not needed to
// register (the skeleton may come from elsewhere): it is left out with a warning that says what
// is wrong with it, never what it holds, and ranks asking for it are told it is missing.
std::string ReadHfConfigJson(const std::string& model, const std::string& dir, const Storage& storage) {
  const std::string path = JoinLocation(dir, "config.json");
  // A link is opened (and refused if it leaves the roots), not passed over.
  absl::StatusOr<PathKind> kind = storage.KindOf(path, /*follow_links=*/false);
  if (kind.ok() && *kind == PathKind::kMissing) return std::string();
  absl::StatusOr<std::string> text = ReadSmallFile(path, kMaxHfConfigJsonBytes, "config.json", storage);
  absl::Status wrong = text.status();
  if (text.ok()) {
    absl::StatusOr<nlohmann::json> parsed = ParseJsonRejectingDuplicateKeys(*text);
    if (parsed.ok() && parsed->is_object()) return *std::move(text);
    wrong = absl::InvalidArgumentError(absl::StrCat(path, " is not a JSON object"));
  }
  LogWarning(absl::StrCat("RegisterModel ", model,
                          ": config.json not recorded (ranks that cannot see the folder ",
                          "must pass a config): ", wrong.message()));
  return std::string();
}

}  // namespace

absl::StatusOr<Registration> PrepareRegistration(const v1::RegisterModelRequest& request,
                                                 const NodeConfig& config, FileSystem* file_system,
                                                 const std::function<bool()>& should_stop) {
  ML_ASSIGN_OR_RETURN(Registration out, ReadRegistrationHeaders(request, config, file_system));
  if (request.digest()) ML_RETURN_IF_ERROR(AddTensorDigests(config, file_system, should_stop, out));
  return out;
}

absl::Status AddTensorDigests(const NodeConfig& config, FileSystem* file_system,
                              const std::function<bool()>& should_stop, Registration& registration) {
  return RecordTensorDigests(registration.checkpoint, registration.record.name(), registration.digest_kind,
                             {file_system, &config.roots, config.same_device}, should_stop,
                             &registration.record);
}

absl::StatusOr<Registration> ReadRegistrationHeaders(const v1::RegisterModelRequest& request,
                                                     const NodeConfig& config, FileSystem* file_system) {
  ML_RETURN_IF_ERROR(CheckModelName(request.name()));
  // Every file is opened beneath a root, as ReadRange opens it: a header, index or config.json
  // that is a symlink out of the roots (or sits in a folder that is one) is refused, not read.
  const Storage storage = Storage::UnderRoots(config.roots, {config.same_device}, file_system);
  ML_ASSIGN_OR_RETURN(std::string dir, storage.Canonical(request.checkpoint_dir()));
  ML_ASSIGN_OR_RETURN(Checkpoint checkpoint, OpenCheckpoint(dir, storage));

  Registration out;
  if (!request.digest_kind().empty()) {
    ML_ASSIGN_OR_RETURN(out.digest_kind, ParseDigestKind(request.digest_kind()));
  }
  if (request.skeleton_json().empty()) {
    ML_ASSIGN_OR_RETURN(CheckpointSkeleton own, SkeletonForCheckpoint(checkpoint, request.name(), storage));
    if (!own.notice.empty()) LogWarning(absl::StrCat("RegisterModel ", request.name(), ": ", own.notice));
    out.skeleton = std::move(own.skeleton);
  } else {
    ML_ASSIGN_OR_RETURN(out.skeleton, ParseSkeletonJson(request.skeleton_json(), "skeleton"));
  }
  ML_ASSIGN_OR_RETURN(InitPolicy policy, ParseInitPolicy(request.init_missing()));
  const std::string hf_config_json = ReadHfConfigJson(request.name(), checkpoint.dir, storage);
  MatchReport report = MatchSkeleton(out.skeleton, checkpoint);
  // A quantized checkpoint (its config.json's quantization_config, one metaload reads) is admitted
  // as a dequantizing load would judge it: its scales are a value's sources, not tensors the
  // skeleton has no place for. Loads that would read codes as values are refused when planned,
  // naming the quantization (daemon/plans/quantized_plan.h), not here: with --dequantize they load.
  if (!hf_config_json.empty()) {
    absl::StatusOr<std::optional<Quantization>> declared = ParseQuantization(hf_config_json, "config.json");
    if (declared.ok() && declared->has_value() && (*declared)->scheme.has_value()) {
      MatchQuantization(out.skeleton, &checkpoint.tensors, *declared,
                        JoinLocation(checkpoint.dir, "config.json"),
                        /*dequantize=*/true, &report);
    }
  }
  ML_RETURN_IF_ERROR(AdmitLoad(report, {!request.allow_unexpected(), policy}, request.name()));
  // Recorded only where it made a difference, so that the same registration with and without
  // --no-strict of a checkpoint that fits is the same record.
  if (request.allow_unexpected()) out.not_loaded = RefusedExtras(report);
  const bool allowed = !out.not_loaded.empty();

  out.record.set_name(request.name());
  out.record.set_checkpoint_dir(checkpoint.dir);
  out.record.set_skeleton_json(SkeletonToJson(out.skeleton));
  out.record.set_registered_on(config.node);
  out.record.set_init_missing(policy.ToString());
  out.record.set_allow_unexpected(allowed);
  out.record.set_hf_config_json(hf_config_json);
  for (const TensorLayout& t : checkpoint.tensors) LayoutToProto(t, out.record.add_tensors());
  ML_RETURN_IF_ERROR(RecordFileStats(checkpoint, &out.record));
  out.checkpoint = std::move(checkpoint);
  return out;
}

void LogRegistrationRefused(const std::string& name, const absl::Status& refused) {
  Log(LogLevel::kWarning, absl::StrCat("RegisterModel ", name, " refused: ", refused.message()),
      {{"event", "refused"},
       {"call", "RegisterModel"},
       {"model", name},
       {"code", absl::StatusCodeToString(refused.code())},
       {"reason", refused.message()}});
}

absl::Status CheckRecordFiles(const v1::ModelRecord& record, const NodeConfig& config,
                              FileSystem* file_system) {
  const Storage storage = Storage::UnderRoots(config.roots, {config.same_device}, file_system);
  ML_ASSIGN_OR_RETURN(std::string dir, storage.Canonical(record.checkpoint_dir()));
  std::map<std::string, uint64_t> end_by_file;  // the furthest byte each file must hold
  for (const v1::TensorLocation& t : record.tensors()) {
    uint64_t& end = end_by_file[t.file()];
    end = std::max(end, t.end_offset());
  }
  for (const auto& [file, end_offset] : end_by_file) {
    ML_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> opened, storage.Open(absl::StrCat(dir, "/", file)));
    const std::string& path = opened->path();
    if (opened->size_bytes() < end_offset) {
      return absl::DataLossError(absl::StrCat(path, " has ", opened->size_bytes(),
                                              " bytes; its tensors end at ", end_offset,
                                              " (the file changed since it was registered)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace metaload
