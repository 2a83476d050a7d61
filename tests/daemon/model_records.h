// Model records for tests that publish a model to a real metad by hand (PublishModel), with no
// checkpoint header to parse: the daemon serves the bytes the record says the tensor has.
#ifndef METALOAD_TESTS_DAEMON_MODEL_RECORDS_H_
#define METALOAD_TESTS_DAEMON_MODEL_RECORDS_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "proto/metaload.pb.h"

namespace metaload::testing {

// Model "m", registered on node "a": one BF16 tensor "w" of [rows, cols] stored in
// CHECKPOINT_DIR/model.safetensors from byte 8 (after a length prefix the daemon never reads).
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
  t->set_begin_offset(8);
  t->set_end_offset(8 + static_cast<uint64_t>(rows * cols * 2));
  return r;
}

}  // namespace metaload::testing

#endif  // METALOAD_TESTS_DAEMON_MODEL_RECORDS_H_
