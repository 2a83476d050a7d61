// A registered model's record as plain types: what the wire's v1::ModelRecord carries, held by
// the daemon's model registry and plan cache (daemon/registry/, daemon/plans/) so that their
// logic never handles protobuf messages. proto/convert.h turns one into the other; a record
// converted to the wire and back is the same record, and serializes to the same bytes.
//
//   ML_RETURN_IF_ERROR(CheckModelRecord(wire));                 // daemon/requests/request_checks.h
//   ML_ASSIGN_OR_RETURN(ModelRecord record, ModelRecordFromProto(wire));
//
// Plain data; no thread-safety of its own.
#ifndef METALOAD_PROTO_MODEL_RECORD_H_
#define METALOAD_PROTO_MODEL_RECORD_H_

#include <string>
#include <vector>

#include "planner/format/checkpoint.h"
#include "util/fs/file_stamp.h"

namespace metaload {

// A checkpoint file as it was when the model was registered (docs/integrity.md).
struct RegisteredFile {
  std::string file;  // relative to the checkpoint folder
  FileStamp stamp;
};

struct ModelRecord {
  std::string name;
  // `dir`: the checkpoint folder as the registering node sees it; `tensors` in the order the
  // record lists them; `files` sorted.
  Checkpoint checkpoint;
  std::string skeleton_json;  // docs/skeleton-format.md
  std::string registered_on;  // node name
  // The --init-missing policy it was registered with; empty in records older than policies,
  // which mean "error" (InitMissingOf).
  std::string init_missing;
  // In the record's order; empty in records older than file stats (then unchecked).
  std::vector<RegisteredFile> file_stats;
  bool allow_unexpected = false;  // registered with --no-strict
  std::string hf_config_json;     // the folder's config.json as registered; "" without one
};

// What ranks are told of the record's policy: "error" when it names none.
inline std::string InitMissingOf(const ModelRecord& record) {
  return record.init_missing.empty() ? "error" : record.init_missing;
}

}  // namespace metaload

#endif  // METALOAD_PROTO_MODEL_RECORD_H_
