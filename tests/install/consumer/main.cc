// consumer CHECKPOINT_DIR: opens the checkpoint folder (no daemon), fills every tensor it stores
// into a CPU tensor of its stored dtype with metaload::Materialize, and prints one line per
// tensor, "name source hex-of-its-bytes", for tests/integration/python/test_install.py to compare with
// what it wrote. Exit 0 when every tensor was filled; 1, with the reason on stderr, otherwise.
// It includes only the installed facade (include/metaload/).
#include <torch/types.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "metaload/errors.h"
#include "metaload/load.h"
#include "metaload/materialize.h"
#include "metaload/verify.h"  // the whole public API compiles from the installed headers

namespace {

std::string Hex(const at::Tensor& tensor) {
  const at::Tensor contiguous = tensor.contiguous();
  const auto* bytes = static_cast<const uint8_t*>(contiguous.data_ptr());
  std::string out;
  for (size_t i = 0; i < contiguous.nbytes(); ++i) {
    char digits[3];
    std::snprintf(digits, sizeof(digits), "%02x", bytes[i]);
    out += digits;
  }
  return out;
}

absl::Status LoadAndPrint(const std::string& checkpoint) {
  absl::StatusOr<metaload::Model> model =
      metaload::Model::Open({.name = "consumer", .checkpoint = checkpoint});
  if (!model.ok()) return model.status();
  std::vector<metaload::TensorRequest> requests;
  for (const metaload::StoredTensor& t : model->stored()) {
    requests.push_back({.name = t.name,
                        .full_shape = t.shape,
                        .dest = at::empty(t.shape, at::TensorOptions().dtype(t.dtype))});
  }
  absl::StatusOr<metaload::MaterializeReport> report = metaload::Materialize(*model, requests);
  if (!report.ok()) return report.status();
  if (!report->refused.empty()) {
    std::string why;
    for (const std::string& line : report->summary) why += (why.empty() ? "" : "; ") + line;
    return absl::FailedPreconditionError(why);
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    const metaload::TensorResult& result = report->results[i];
    if (!result.filled) return absl::DataLossError(requests[i].name + ": " + result.error);
    std::printf("%s %s %s\n", requests[i].name.c_str(), result.provenance.c_str(),
                Hex(requests[i].dest).c_str());
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer CHECKPOINT_DIR\n");
    return 2;
  }
  const absl::Status status = LoadAndPrint(argv[1]);
  if (!status.ok()) {
    std::fprintf(stderr, "consumer: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
