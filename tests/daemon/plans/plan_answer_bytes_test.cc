// Every byte a coordinator answers GetPlan and GetLayout with, pinned: the SHA-256 of each
// rank's answer, the whole plan and the layout of one model on three members, for four
// strategies. Computed before the coordinator's state (ClusterState) was split into
// membership, registry and plan cache (issue 20); a change here is a change of the wire. Changed
// on purpose since: tile digests (TensorDigest) replaced whole-tensor XXH3s and every item
// carries its tensor's index in the model, the slot verification sums its proofs in; and the
// layout names the registering node and its file stamps (issue 35), which its agent checks the
// files it serves against. Plans did not change with it.
#include <gtest/gtest.h>

#include <string>

#include "daemon/membership/membership.h"
#include "daemon/plans/plan_cache.h"
#include "daemon/registry/model_registry.h"
#include "daemon/requests/request_checks.h"
#include "proto/convert.h"
#include "proto/plan_answers.h"
#include "tests/daemon/model_records.h"
#include "util/hash/sha256.h"

namespace metaload {
namespace {

constexpr char kSkeleton[] = R"({"format": "metaload.skeleton/1", "model": "m", "tensors": [
  {"name": "embed.weight", "shape": [16, 8], "dtype": "BF16"},
  {"name": "layers.0.w", "shape": [8, 8], "dtype": "BF16"},
  {"name": "layers.0.b", "shape": [8], "dtype": "F32"},
  {"name": "layers.1.w", "shape": [8, 8], "dtype": "BF16"},
  {"name": "layers.1.b", "shape": [8], "dtype": "F32"},
  {"name": "norm.scale", "shape": [8], "dtype": "F32"}],
  "tied": [["embed.weight", "head.weight"]]})";

v1::ModelRecord Record() {
  v1::ModelRecord r;
  r.set_name("m");
  r.set_checkpoint_dir("/models/m");
  r.set_skeleton_json(kSkeleton);
  r.set_registered_on("a");
  r.set_init_missing("zeros");
  struct T {
    const char* name;
    const char* dtype;
    std::vector<int64_t> shape;
    int file;
  };
  const std::vector<T> tensors = {{"embed.weight", "BF16", {16, 8}, 0},
                                  {"layers.0.w", "BF16", {8, 8}, 0},
                                  {"layers.0.b", "F32", {8}, 1},
                                  {"layers.1.w", "BF16", {8, 8}, 1},
                                  {"layers.1.b", "F32", {8}, 2}};  // norm.scale: missing, zeros
  uint64_t offsets[3] = {64, 64, 64};
  for (size_t i = 0; i < tensors.size(); ++i) {
    const T& t = tensors[i];
    v1::TensorLocation* out = r.add_tensors();
    out->set_name(t.name);
    out->set_dtype(t.dtype);
    uint64_t bytes = std::string(t.dtype) == "F32" ? 4 : 2;
    for (int64_t d : t.shape) {
      out->add_shape(d);
      bytes *= static_cast<uint64_t>(d);
    }
    out->set_file(absl::StrCat("model-", t.file, ".safetensors"));
    out->set_begin_offset(offsets[t.file]);
    out->set_end_offset(offsets[t.file] + bytes);
    offsets[t.file] += bytes;
    if (i % 2 == 0) testing::SetFakeDigest(out, static_cast<uint16_t>(i));
  }
  for (int f = 0; f < 2; ++f) {
    v1::FileStat* stat = r.add_file_stats();
    stat->set_file(absl::StrCat("model-", f, ".safetensors"));
    stat->set_size_bytes(offsets[f]);
    stat->set_mtime_ns(1796054400000000000 + f);
  }
  EXPECT_TRUE(CheckModelRecord(r).ok()) << CheckModelRecord(r);
  return r;
}

NodeSpec Node(const std::string& name, int gpus, const std::string& root) {
  return NodeSpec{name, name + ":7070", gpus, 1ull << 30, {root}};
}

std::string Hash(const std::string& bytes) {
  return Sha256Hex(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

TEST(PlanAnswerBytes, EveryAnswerIsByteForByteWhatItWas) {
  const absl::Time now = absl::FromUnixSeconds(1'000'000);
  Membership members(Membership::Options{absl::Seconds(10)}, [&] { return now; });
  ModelRegistry registry(ModelRegistry::Options{});
  PlanCache plans(PlanCache::Options{});
  members.SetSelf(Node("a", 2, "/models"));
  members.SetSelfLoad([] { return 2u; });
  ASSERT_TRUE(members.Join(Node("b", 1, "/models/m"), 1).ok());
  ASSERT_TRUE(members.Join(Node("c", 1, "/other"), 0).ok());
  absl::StatusOr<ModelRecord> record = ModelRecordFromProto(Record());
  ASSERT_TRUE(record.ok()) << record.status();
  ASSERT_TRUE(registry.Put(*record, RecordOrigin::kRegister).ok());
  absl::StatusOr<std::shared_ptr<const RegisteredModel>> model = registry.Find("m");
  ASSERT_TRUE(model.ok()) << model.status();
  std::string all;
  for (const char* strategy : {"layers", "fsdp", "replicate", "fsdp-f32"}) {
    StrategyOptions options;
    options.strategy = std::string(strategy).substr(0, std::string(strategy).find('-'));
    if (std::string(strategy) == "fsdp-f32") options.load_dtype = DType::kF32;
    auto planned = plans.Get(*model, members.Live(), 4, options);
    ASSERT_TRUE(planned.ok()) << strategy << ": " << planned.status();
    absl::StrAppend(&all, strategy, " digest ", (*planned)->digest, "\n");
    for (int rank = 0; rank < 4; ++rank) {
      auto bytes =
          RankAnswerBytes((*planned)->plan, (*planned)->tables, rank, members.LoadsOf((*planned)->members),
                          /*servers_per_file=*/2);
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      absl::StrAppend(&all, strategy, " rank ", rank, " ", Hash(*bytes), "\n");
    }
    const v1::GetPlanResponse whole =
        WholePlanAnswer((*planned)->plan, (*planned)->tables, record->skeleton_json);
    absl::StrAppend(&all, strategy, " whole ", Hash(whole.SerializeAsString()), "\n");
  }
  const std::vector<NodeSpec> live = members.Live();
  const v1::GetLayoutResponse layout =
      LayoutAnswer(*record, PlanFilesOf(*record, live), live, members.LoadsOf(live));
  absl::StrAppend(&all, "layout ", Hash(layout.SerializeAsString()), "\n");
  EXPECT_EQ(all,
            "layers digest 7bbbbfd13b37406b2c4a809042a7fe0f74b90dea205e93309de1596afe108cac\n"
            "layers rank 0 7324b9ca0433a17cf3cdd224a904d548af3e1e966818eae0e06aa01fc72defe5\n"
            "layers rank 1 bdbdecb7547a1b22212d2667103ec94532197865aedf89f16573cec194b95efe\n"
            "layers rank 2 aab8af93cae4de038ca2ca4df00c462bedd65e917e574a2bc39037f2b77ca303\n"
            "layers rank 3 8e6162dd6089d8612a2a27ae5071d460fb6ae7f94291900164b18f059df494e8\n"
            "layers whole 5bf432f5ca05a0f42871aae249668285c52ba8367c9d3e4e578b9c3e2844aaa0\n"
            "fsdp digest c4903e9c821b083b315a9f9e93d424e504c8a28a5aa5bc3958feb4047cc9da50\n"
            "fsdp rank 0 9b5dcb2b556d09cd53e528485b03e6b1ef63e1d5bbb9425b3796d1224b85b5d2\n"
            "fsdp rank 1 5bf41049ca40a6d47615633e0844aed27e89b43825ef416a6a2ab4410c769ed1\n"
            "fsdp rank 2 3a7c6c7e86eaa7aaf954a4f8f762d1f5ceb3fe3f8cdd89592f41b3e69e626cfe\n"
            "fsdp rank 3 28745b54e0776f6929d5b25cb6545efb05f15d9e93d00f331eeecb0d60d854ca\n"
            "fsdp whole e6c02604ca97a6b86a7a18ead6dab7c26ed7786872a173413b400a84ccdcb642\n"
            "replicate digest 6aae0989a4d028df25558a651d4c3fd21de929110622afda019e7aa5b706f76a\n"
            "replicate rank 0 512b2b96c8bf28f5ad6c4f47144ec3b4b80ac5db8f2c8199220d21c340c9f45a\n"
            "replicate rank 1 184c55bb20645552631931f9b5cb4a7b2fede45b88614fea39b75f43aab18ad4\n"
            "replicate rank 2 f83dc533a42dc630a798637ce76da1f7e0b21b6723e3757c2ae3c0abe3cd4acf\n"
            "replicate rank 3 c7bc231277c98bfa872bc55726f1c5c1e5876badacd608c8118a54bac7619357\n"
            "replicate whole 2621edf7a12118f3f3cf3904f45b4cb712847b2fd5b338fb001df3bbb38acf2f\n"
            "fsdp-f32 digest 0d125712a67cf90c9f136ded5568b5273dab26680f35495a4609f3d17e60b055\n"
            "fsdp-f32 rank 0 eb2f075854069f0544e2161f39c222bc831a0da3e948d95c53d1200e8dcaf432\n"
            "fsdp-f32 rank 1 4eb4c2a3a7f38b5e3589ba847c22f6239b9a21dba4f85a36d556a6837b03a091\n"
            "fsdp-f32 rank 2 e8bfdc349375e87658737ba5f285deb2db10221e419239b63a12399206c7f2b8\n"
            "fsdp-f32 rank 3 5813ad41f8738b480cdeec87517608175b6e0be97d793d9b60f3d7b6b64676cc\n"
            "fsdp-f32 whole 52e888682f6571c06c7acf4e70564f4dbba54919ce632418ebfad4e8bd360f26\n"
            "layout b15c0b9bc64e22d27ac87cfd59f236b33dee9423ed799b3f5d7f8102125881ed\n");
}

}  // namespace
}  // namespace metaload
