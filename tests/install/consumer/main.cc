// consumer CHECKPOINT_DIR: opens the checkpoint folder (no daemon), fills every tensor it stores
// into a CPU tensor of its stored dtype with metaload::Materialize, and prints one line per
// tensor, "name source hex-of-its-bytes", for tests/integration/python/test_install.py to compare with
// what it wrote. Exit 0 when every tensor was filled; 1, with the reason on stderr, otherwise.
#include <torch/types.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "client/resolve/materialize.h"
#include "client/verify/verify.h"  // the whole public API compiles from the installed headers
#include "libtorch/torch_glue.h"
#include "util/status_macros.h"

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
  ML_ASSIGN_OR_RETURN(metaload::ModelView view,
                      metaload::OpenModel({.model = "consumer", .checkpoint = checkpoint}));
  std::vector<metaload::MaterializeRequest> requests;
  for (const auto& [name, layout] : view.stored) {
    ML_ASSIGN_OR_RETURN(c10::ScalarType type, metaload::ToScalarType(layout.dtype));
    requests.push_back({.name = name,
                        .full_shape = layout.shape,
                        .dest = at::empty(layout.shape, at::TensorOptions().dtype(type))});
  }
  ML_ASSIGN_OR_RETURN(metaload::MaterializeOutcome outcome, metaload::Materialize(view, requests, {}));
  if (!outcome.refused.empty()) return absl::FailedPreconditionError(absl::StrJoin(outcome.summary, "; "));
  for (size_t i = 0; i < requests.size(); ++i) {
    const metaload::MaterializeResult& result = outcome.results[i];
    if (!result.filled) return absl::DataLossError(requests[i].name + ": " + result.error);
    std::printf("%s %s %s\n", requests[i].name.c_str(), metaload::ProvenanceText(result.provenance).c_str(),
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
