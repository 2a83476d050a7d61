// Which device a rank's tensors live on, from what its user typed: the one rule under
// `metactl load --device`, `metaload.load`/`materialize(device=)` (the Python package asks it
// through the native module) and the verification that follows a load (verify.h).
//
//   ML_ASSIGN_OR_RETURN(torch::Device device, ResolveDevice("cuda", /*rank=*/3));  // cuda:LOCAL_RANK
//
// Thread-safety: reentrant (reads LOCAL_RANK and counts CUDA devices on every call).
#ifndef METALOAD_CLIENT_LOAD_DEVICE_H_
#define METALOAD_CLIENT_LOAD_DEVICE_H_

#include <torch/types.h>

#include <string>

#include "absl/status/statusor.h"

namespace metaload {

// "cpu"; "cuda:N"; "cuda": cuda:$LOCAL_RANK when set, else cuda:(rank % visible devices); "":
// as "cuda" when a CUDA device is visible, else "cpu". InvalidArgument naming the text when it
// is none of these, names no visible device, or CUDA is not visible at all.
absl::StatusOr<torch::Device> ResolveDevice(const std::string& text, int rank);

// Whether `text` asks for a CUDA device ("cuda", "cuda:N"), whether or not one is visible: a
// rank whose load failed still verifies with the backend its peers use.
bool NamesCuda(const std::string& text);

}  // namespace metaload

#endif  // METALOAD_CLIENT_LOAD_DEVICE_H_
