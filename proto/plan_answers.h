// What a coordinator answers GetPlan and GetLayout with, written from plain types (a plan, a
// model record, the members planned on). A job's 1,024 ranks ask for their parts of one plan:
// the pieces every answer repeats are serialized once per plan (PlanTables), and a rank's
// answer is concatenated from them (proto/plan_wire.h), so that answering one rank costs only
// that rank's items.
//
//   PlanTables tables = BuildPlanTables(plan, digest, record, skeleton, members, files);
//   ML_ASSIGN_OR_RETURN(std::string bytes, RankAnswerBytes(plan, tables, rank, loads, 8));
//
// Immutable once built; safe to share between threads.
#ifndef METALOAD_PROTO_PLAN_ANSWERS_H_
#define METALOAD_PROTO_PLAN_ANSWERS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/plan/cluster.h"
#include "planner/plan/plan.h"
#include "planner/skeleton/skeleton.h"
#include "proto/metaload.pb.h"
#include "proto/model_record.h"
#include "util/fs/file_stamp.h"

namespace metaload {

// A checkpoint file of a registered model, and which members can serve it.
struct PlanFile {
  std::string file;          // relative to the checkpoint folder
  std::string path;          // the checkpoint folder, "/", file
  uint64_t size_bytes = 0;   // the end of its last tensor
  FileStamp registered;      // as registered; zeros when the record has no stats for it
  std::vector<int> servers;  // indexes into the members whose roots hold `path`, in their order
};

// The pieces of one plan's answers, each serialized once.
struct PlanTables {
  std::string digest;                                 // the plan's (daemon/plans/plan_digest.h)
  std::string init_missing;                           // as ranks are told (InitMissingOf)
  std::vector<std::vector<std::string>> tied_groups;  // the skeleton's
  std::vector<std::string> member_names;              // of the members planned on, in order
  std::vector<v1::FileSource> files;                  // every file with every server
  std::vector<std::string> file_bytes;                // each file serialized without its servers
  std::vector<std::vector<int>> file_servers;         // each file's servers (PlanFile::servers)
  std::vector<std::string> member_bytes;              // each member serialized as an Endpoint
  std::vector<std::string> item_bytes;                // each whole item, serialized as sent
  std::vector<int> item_file;                         // index into `files`, -1 for none
  std::vector<int> item_tied_group;                   // index into `tied_groups`, -1 for none
  // A dequantized item's codes' and scales' files (indexes into `files`), empty for any other
  // item: a rank holding one is sent those files.
  std::vector<std::vector<int>> item_source_files;
  // A dequantizing plan's {"quantization_config": ...} (GetPlanResponse.quantization_config_json);
  // "" otherwise. Set by whoever planned (daemon/plans/planned_model.cc).
  std::string quantization_config_json;
};

// `files`: every file of `record` with its servers among `members` (daemon/plans/).
PlanTables BuildPlanTables(const CompactPlan& plan, std::string digest, const ModelRecord& record,
                           const Skeleton& skeleton, const std::vector<NodeSpec>& members,
                           const std::vector<PlanFile>& files);

// What GetPlan sends `rank`: its part of the plan, the files its items read (each with at most
// `servers_per_file` servers: the rank's own node first, then the others least loaded first by
// `loads`, one per member, ties rotated by rank) and the tied groups it holds; serialized.
// InvalidArgument for a rank outside the plan.
absl::StatusOr<std::string> RankAnswerBytes(const CompactPlan& plan, const PlanTables& tables, int rank,
                                            const std::vector<uint32_t>& loads, int servers_per_file);
// RankAnswerBytes, parsed (for callers that want the message).
absl::StatusOr<v1::GetPlanResponse> RankAnswer(const CompactPlan& plan, const PlanTables& tables, int rank,
                                               const std::vector<uint32_t>& loads, int servers_per_file);
// What GetPlan answers without a rank: the whole plan, every file with every server, and the
// skeleton.
v1::GetPlanResponse WholePlanAnswer(const CompactPlan& plan, const PlanTables& tables,
                                    const std::string& skeleton_json);

// What GetLayout answers: where every tensor of `record` is stored, and `files` with their
// servers among `members` least loaded first by `loads`, ties in member order.
v1::GetLayoutResponse LayoutAnswer(const ModelRecord& record, const std::vector<PlanFile>& files,
                                   const std::vector<NodeSpec>& members, const std::vector<uint32_t>& loads);

}  // namespace metaload

#endif  // METALOAD_PROTO_PLAN_ANSWERS_H_
