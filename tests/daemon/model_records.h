// Model records for tests that publish a model to a real metad by hand (PublishModel), and the
// file such a record names (a daemon serves a published record's bytes only as the file's own
// safetensors header gives them, issue 23); and the records and members the registry's and the
// plan cache's unit tests hold.
#ifndef METALOAD_TESTS_DAEMON_MODEL_RECORDS_H_
#define METALOAD_TESTS_DAEMON_MODEL_RECORDS_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "planner/plan/cluster.h"
#include "proto/convert.h"
#include "proto/metaload.pb.h"

namespace metaload::testing {

// A fast digest for `t` as a registration records one (a tile size that fits its shape and
// dtype), its lanes made of `seed`: records that carry digests without the bytes behind them.
inline void SetFakeDigest(v1::TensorLocation* t, uint16_t seed) {
  const absl::StatusOr<DType> dtype = DTypeFromCode(t->dtype());
  const std::vector<int64_t> shape(t->shape().begin(), t->shape().end());
  v1::TensorDigest* digest = t->mutable_digest();
  digest->set_kind("fast");
  digest->set_tile_bytes(
      TileGridFor(DigestKind::kFast, shape, static_cast<uint64_t>(DTypeSizeBytes(dtype.value_or(DType::kU8))))
          .tile_bytes);
  digest->set_lanes(
      LanesToBytes({seed, static_cast<uint16_t>(seed + 1), static_cast<uint16_t>(seed + 2), 7}));
}

// Where OneTensorModel's tensor begins in its file: after the 8-byte length and a header padded
// to 120 bytes, whatever its shape.
inline constexpr uint64_t kOneTensorDataBegin = 128;

// The first kOneTensorDataBegin bytes of OneTensorModel's file: a safetensors header naming "w",
// BF16 [rows, cols]; the file's tensor bytes follow.
inline std::string OneTensorHeader(int64_t rows, int64_t cols) {
  const uint64_t bytes = static_cast<uint64_t>(rows * cols * 2);
  std::string json = absl::StrCat(R"({"w":{"dtype":"BF16","shape":[)", rows, ",", cols,
                                  R"(],"data_offsets":[0,)", bytes, "]}}");
  EXPECT_LE(json.size(), kOneTensorDataBegin - 8);
  json.resize(kOneTensorDataBegin - 8, ' ');
  std::string header(8, '\0');
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>(((kOneTensorDataBegin - 8) >> (8 * i)) & 0xff);
  return header + json;
}

// Model "m", registered on node "a": one BF16 tensor "w" of [rows, cols] stored in
// CHECKPOINT_DIR/model.safetensors from byte kOneTensorDataBegin (after OneTensorHeader).
inline v1::ModelRecord OneTensorModel(const std::string& checkpoint_dir, int64_t rows, int64_t cols) {
  v1::ModelRecord r;
  r.set_name("m");
  r.set_checkpoint_dir(checkpoint_dir);
  r.set_skeleton_json(
      absl::StrCat(R"({"format": "metaload.skeleton/1", "tensors": [{"name": "w", "shape": [)", rows, ", ",
                   cols, R"(], "dtype": "BF16"}]})"));
  r.set_registered_on("a");
  v1::TensorLocation* t = r.add_tensors();
  t->set_name("w");
  t->set_dtype("BF16");
  t->add_shape(rows);
  t->add_shape(cols);
  t->set_file("model.safetensors");
  t->set_begin_offset(kOneTensorDataBegin);
  t->set_end_offset(kOneTensorDataBegin + static_cast<uint64_t>(rows * cols * 2));
  return r;
}

// Model `name`, registered on node "a": `tensors` BF16 [4, 8] tensors w0, w1, ... stored one
// after another in CHECKPOINT_DIR/model.safetensors from byte 8 (the file need not exist: what
// a coordinator records; a daemon that serves it would check it against the file).
inline v1::ModelRecord SmallTensorsModel(const std::string& name, const std::string& dir, int tensors) {
  v1::ModelRecord r;
  r.set_name(name);
  r.set_checkpoint_dir(dir);
  std::string skeleton = R"({"format": "metaload.skeleton/1", "tensors": [)";
  for (int i = 0; i < tensors; ++i) {
    absl::StrAppend(&skeleton, i == 0 ? "" : ", ", R"({"name": "w)", i,
                    R"(", "shape": [4, 8], "dtype": "BF16"})");
    v1::TensorLocation* t = r.add_tensors();
    t->set_name(absl::StrCat("w", i));
    t->set_dtype("BF16");
    t->add_shape(4);
    t->add_shape(8);
    t->set_file("model.safetensors");
    t->set_begin_offset(8 + 64 * i);
    t->set_end_offset(72 + 64 * i);
  }
  r.set_skeleton_json(skeleton + "]}");
  r.set_registered_on("a");
  return r;
}

// Model "m", registered on node "a" from CHECKPOINT_DIR: three BF16 [4, 8] tensors, one per
// file model-<i>.safetensors, the first tied to head.weight.
inline v1::ModelRecord TiedModel(const std::string& checkpoint_dir = "/models/m") {
  v1::ModelRecord r;
  r.set_name("m");
  r.set_checkpoint_dir(checkpoint_dir);
  r.set_skeleton_json(R"({"format": "metaload.skeleton/1", "model": "m", "tensors": [
  {"name": "embed.weight", "shape": [4, 8], "dtype": "BF16"},
  {"name": "layers.0.w", "shape": [4, 8], "dtype": "BF16"},
  {"name": "layers.1.w", "shape": [4, 8], "dtype": "BF16"}],
  "tied": [["embed.weight", "head.weight"]]})");
  r.set_registered_on("a");
  int i = 0;
  for (const char* name : {"embed.weight", "layers.0.w", "layers.1.w"}) {
    v1::TensorLocation* t = r.add_tensors();
    t->set_name(name);
    t->set_dtype("BF16");
    t->add_shape(4);
    t->add_shape(8);
    t->set_file(absl::StrCat("model-", i, ".safetensors"));
    t->set_begin_offset(8);
    t->set_end_offset(8 + 64);
    ++i;
  }
  return r;
}

// TiedModel with each file stated as registered: model-<i>.safetensors of 1000 + i bytes,
// modified at 1796054400000000000 + i ns.
inline v1::ModelRecord StatedModel() {
  v1::ModelRecord stated = TiedModel();
  for (int i = 0; i < 3; ++i) {
    v1::FileStat* stat = stated.add_file_stats();
    stat->set_file(absl::StrCat("model-", i, ".safetensors"));
    stat->set_size_bytes(1000 + i);
    stat->set_mtime_ns(1796054400000000000 + i);
  }
  return stated;
}

// `record` as the registry holds it.
inline ModelRecord Plain(const v1::ModelRecord& record) {
  absl::StatusOr<ModelRecord> plain = ModelRecordFromProto(record);
  EXPECT_TRUE(plain.ok()) << plain.status();
  return plain.ok() ? *std::move(plain) : ModelRecord{};
}

// A member NAME at NAME:7070 with GPUS GPUs of 1 GiB and ROOTS.
inline NodeSpec Node(const std::string& name, int gpus, std::vector<std::string> roots = {"/models"}) {
  return NodeSpec{name, name + ":7070", gpus, 1ull << 30, std::move(roots)};
}

}  // namespace metaload::testing

#endif  // METALOAD_TESTS_DAEMON_MODEL_RECORDS_H_
