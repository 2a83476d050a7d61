// Every request field the daemon accepts is checked once, at its edge: the worst values a
// client can send for Join, PublishModel, RegisterModel and GetPlan (issue 9).
#include "daemon/requests/request_checks.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

namespace metaload {
namespace {

v1::NodeInfo GoodNode() {
  v1::NodeInfo node;
  node.set_name("node-b");
  node.set_address("10.0.0.2:7070");
  node.set_gpu_count(8);
  node.set_gpu_memory_bytes(80ull << 30);
  node.add_roots("/mnt/models");
  return node;
}

void ExpectInvalid(const absl::Status& status, const std::string& part) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find(part), absl::string_view::npos) << status;
  EXPECT_LT(status.message().size(), 1024u) << "echoed input must be cut";
}

TEST(CheckNodeInfo, AcceptsAGoodMember) { EXPECT_TRUE(CheckNodeInfo(GoodNode()).ok()); }

TEST(CheckNodeInfo, RefusesTheWorstValues) {
  v1::NodeInfo n = GoodNode();
  n.set_gpu_count(-4);
  ExpectInvalid(CheckNodeInfo(n), "gpu_count -4 is outside 0..1024");
  n = GoodNode();
  n.set_gpu_count(std::numeric_limits<int32_t>::max() - 7);
  ExpectInvalid(CheckNodeInfo(n), "gpu_count 2147483640 is outside");
  n = GoodNode();
  n.set_name("evil\nmetad I 00:00:00.000 registered nothing");
  ExpectInvalid(CheckNodeInfo(n), "node name \"evil\\nmetad I");
  n = GoodNode();
  n.set_name(std::string(60 << 20, 'n'));
  ExpectInvalid(CheckNodeInfo(n), "must have 1 to 128 characters");
  n = GoodNode();
  n.set_address("0.0.0.0");
  ExpectInvalid(CheckNodeInfo(n), "is not host:port");
  n = GoodNode();
  n.set_gpu_memory_bytes(~0ull);
  ExpectInvalid(CheckNodeInfo(n), "above 1 PiB");
  n = GoodNode();
  n.add_roots("models");
  ExpectInvalid(CheckNodeInfo(n), "must be an absolute path");
  n = GoodNode();
  n.add_roots("/mnt/models/../../etc");
  ExpectInvalid(CheckNodeInfo(n), "has a '.' or '..' component");
  n = GoodNode();
  for (int i = 0; i < 65; ++i) n.add_roots("/r" + std::to_string(i));
  ExpectInvalid(CheckNodeInfo(n), "66 roots (at most 64)");
  n = GoodNode();
  n.clear_roots();
  for (int i = 0; i < 40; ++i) n.add_roots("/" + std::string(4000, 'a' + i % 26));
  ExpectInvalid(CheckNodeInfo(n), "roots hold more than 65536 bytes together");
}

v1::ModelRecord GoodRecord() {
  v1::ModelRecord r;
  r.set_name("tiny");
  r.set_checkpoint_dir("/mnt/models/tiny");
  r.set_skeleton_json("{}");
  r.set_registered_on("node-b");
  v1::TensorLocation* t = r.add_tensors();
  t->set_name("w");
  t->set_dtype("BF16");
  t->add_shape(4);
  t->add_shape(8);
  t->set_file("model.safetensors");
  t->set_begin_offset(100);
  t->set_end_offset(164);
  return r;
}

TEST(CheckModelRecord, AcceptsAGoodRecord) { EXPECT_TRUE(CheckModelRecord(GoodRecord()).ok()); }

// A digest from outside must fit its tensor: its kind, its lanes, the tile size its shape and
// dtype give (every rank cuts the bytes the registration cut), or the record is refused.
TEST(CheckModelRecord, RefusesDigestsThatDoNotFitTheirTensor) {
  v1::ModelRecord r = GoodRecord();
  v1::TensorDigest* d = r.mutable_tensors(0)->mutable_digest();
  d->set_kind("fast");
  d->set_tile_bytes(2);  // BF16 [4, 8]: 8 columns, too few for 64 tiles a row: one element a tile
  d->set_lanes(std::string(8, 'x'));
  EXPECT_TRUE(CheckModelRecord(r).ok()) << CheckModelRecord(r);
  d->set_tile_bytes(16);
  ExpectInvalid(CheckModelRecord(r),
                "(\"w\"): digest tiles of 16 bytes; a fast digest of BF16 [4, 8] has tiles of 2");
  d->set_tile_bytes(2);
  d->set_lanes(std::string(2048, 'x'));
  ExpectInvalid(CheckModelRecord(r), "a fast digest holds 8 bytes, not 2048");
  d->set_kind("md5");
  ExpectInvalid(CheckModelRecord(r), "digest kind \"md5\"");
}

TEST(CheckModelRecord, RefusesFilesOutsideTheCheckpointAndLayoutsThatDoNotAddUp) {
  v1::ModelRecord r = GoodRecord();
  r.mutable_tensors(0)->set_file("../../outside/x");
  ExpectInvalid(CheckModelRecord(r), "file \"../../outside/x\" has a '.' or '..' component");
  r = GoodRecord();
  r.mutable_tensors(0)->set_file("/etc/shadow");
  ExpectInvalid(CheckModelRecord(r), "must be relative to the checkpoint folder");
  r = GoodRecord();
  r.set_checkpoint_dir("/mnt/models/../../etc");
  ExpectInvalid(CheckModelRecord(r), "checkpoint_dir");
  r = GoodRecord();
  r.mutable_tensors(0)->set_end_offset(165);
  ExpectInvalid(CheckModelRecord(r), "does not hold 64 bytes");
  r = GoodRecord();
  r.mutable_tensors(0)->set_dtype("F128");
  ExpectInvalid(CheckModelRecord(r), "dtype \"F128\" is unknown");
  r = GoodRecord();
  r.mutable_tensors(0)->add_shape(1ll << 62);
  ExpectInvalid(CheckModelRecord(r), "2^63 bytes or more");
  r = GoodRecord();
  r.mutable_tensors(0)->set_shape(0, -1);
  ExpectInvalid(CheckModelRecord(r), "negative dimension");
  r = GoodRecord();
  r.set_init_missing("normal:-1");
  ExpectInvalid(CheckModelRecord(r), "--init-missing \"normal:-1\"");
  r = GoodRecord();
  r.set_registered_on("");
  ExpectInvalid(CheckModelRecord(r), "registered_on");
  // The config.json ranks build transformers' model from: 256 KiB, and one byte more.
  r = GoodRecord();
  r.set_hf_config_json(std::string(256 << 10, ' '));
  EXPECT_TRUE(CheckModelRecord(r).ok());
  r.set_hf_config_json(std::string((256 << 10) + 1, ' '));
  ExpectInvalid(CheckModelRecord(r), "config.json of 262145 bytes (at most 262144)");
}

TEST(CheckGetPlanRequest, BoundsEverySizeARequestControls) {
  v1::GetPlanRequest q;
  q.set_model("tiny");
  q.set_world_size(8);
  EXPECT_TRUE(CheckGetPlanRequest(q).ok());
  q.set_world_size(-1);
  ExpectInvalid(CheckGetPlanRequest(q), "world size -1 is outside 0..1048576");
  q.set_world_size(8);
  q.set_pp(1 << 30);
  ExpectInvalid(CheckGetPlanRequest(q), "pp 1073741824 must be in 0..1048576");
  q.set_pp(0);
  q.set_tp(-3);
  ExpectInvalid(CheckGetPlanRequest(q), "tp -3");
  q.set_tp(0);
  q.set_rank(-1);
  ExpectInvalid(CheckGetPlanRequest(q), "rank -1");
  q.clear_rank();
  q.set_model(std::string(60 << 20, 'm'));
  ExpectInvalid(CheckGetPlanRequest(q), "must have 1 to 128 characters");
}

TEST(CheckRegisterModelRequest, RefusesRelativeOrHugePaths) {
  v1::RegisterModelRequest q;
  q.set_name("tiny");
  q.set_checkpoint_dir("models/tiny");
  ExpectInvalid(CheckRegisterModelRequest(q), "must be an absolute path");
  q.set_checkpoint_dir("/" + std::string(60 << 20, 'p'));
  ExpectInvalid(CheckRegisterModelRequest(q), "bytes)");
  q.set_checkpoint_dir("mem://bucket/tiny");  // read by that scheme's back end, if the daemon has one
  EXPECT_TRUE(CheckRegisterModelRequest(q).ok());
  q.set_checkpoint_dir("/m");
  q.set_name("a b");
  ExpectInvalid(CheckRegisterModelRequest(q), "model name \"a b\"");
}

}  // namespace
}  // namespace metaload
