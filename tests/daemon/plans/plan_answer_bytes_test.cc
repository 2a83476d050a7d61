// Every byte a coordinator answers GetPlan and GetLayout with, pinned: the SHA-256 of each
// rank's answer, the whole plan and the layout of one model on three members, for four
// strategies. Computed before the coordinator's state (ClusterState) was split into
// membership, registry and plan cache (issue 20); a change here is a change of the wire.
#include <gtest/gtest.h>

#include <string>

#include "daemon/membership/membership.h"
#include "daemon/plans/plan_cache.h"
#include "daemon/registry/model_registry.h"
#include "daemon/requests/request_checks.h"
#include "proto/convert.h"
#include "proto/plan_answers.h"
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
    if (i % 2 == 0) out->set_xxh3(0x1234567890ABCDEFull + i);
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
            "layers digest de9805cea65f0f8939907fddf8574cb082ad15ddd161e1b90f3da25cc60134ee\n"
            "layers rank 0 5f2d974f58361239e2800937a6a0e7d2f14e7bb4fa14ef54a21d1a2b0b9f6f4f\n"
            "layers rank 1 899e4fce57df83d49fe576ed9724c1491eae6d3045acc69dfe842944663d4e65\n"
            "layers rank 2 1dd3546a9e1b49e9f9cdfd0529975784aa49fc9271532461a561f3bc468e629b\n"
            "layers rank 3 0ec9143b5b08291f3aeddd564c64e46c1f5d77290c2f294a2acf9733ac6585a2\n"
            "layers whole f6b1e1bbdd9fccd4cb973c7554186cd45ab2f4ab9669570cc35b33b0af9fe6c8\n"
            "fsdp digest 366d6241e0d9aa08552e079b691ecacf3e036991ab1ca87108400c03e8408bf5\n"
            "fsdp rank 0 599bc66ad0f0b14072c72b56193e8b0c99fc8d739d6b6120f0a1e9a0e39497c3\n"
            "fsdp rank 1 6eff2b1a1a4fac24f5ecedd8a97f7fd1e52b171e0d3361622a2a4818388e3988\n"
            "fsdp rank 2 ce57cdf8542a80b5969e13a2cda1020c55f5bcd9acf7d69956eec0bce5598b4d\n"
            "fsdp rank 3 42998aa9be6e31e7ba4ccbeabe3ed53a9230a5e3d3c12e27d6283811e3ffaea6\n"
            "fsdp whole 29262f24c324285a389f54a101936973d7dac60f26f0f2a5ac825bfa8bd040e5\n"
            "replicate digest 11370bfa3b3bbc6767e8111cc474be7f1bb6c93aa46766c6bbcf28bc106bdf12\n"
            "replicate rank 0 9cb1bd85cdc8de10e19a7e3b9c92a1a6644dea117af4fff753cf0ccff0440363\n"
            "replicate rank 1 7b8f078b9f3cf952b1d60de701e39fe7729d50c3b97e3c99236fc972f75ee44e\n"
            "replicate rank 2 586e5816dd2ab5f92092e1d1588b708a038af1f14e8435d30e5581b9fad973b9\n"
            "replicate rank 3 27d03cc9a43639e3ec123454b4571347cb5c077dc4eefaadaa1ff42537df0035\n"
            "replicate whole b5dcbe53f4f9ebb8c073e980c6d5555e3964547a8282d40c726f46e31b153b32\n"
            "fsdp-f32 digest 1eb295cbf99d722f9021e42420167c0457ed082bc42d9337cb29597fa97aafbe\n"
            "fsdp-f32 rank 0 d81317321e682c79540b1785255224463f5ac917b52454760642a050a2cf4a56\n"
            "fsdp-f32 rank 1 368ae1203d7f28c94ab4889324725093159b13037a70d5c4f522e78f40a4f758\n"
            "fsdp-f32 rank 2 89e1b17fbc697e40fbfff6143b3161ddf7b2168048e7fa3760439e204cff24ce\n"
            "fsdp-f32 rank 3 58d02ec0671867ec48c8fa5e4a722380df0cd32e291ba9a646df9d13b10827ec\n"
            "fsdp-f32 whole 6df0a79af1bf6b9bf89bfab40c2a887d4f4a43f427a142d872545031566628f1\n"
            "layout f79b96f7af6c6a963e49f340b6963987a7886c2784077e0a420f751dfedb1adf\n");
}

}  // namespace
}  // namespace metaload
