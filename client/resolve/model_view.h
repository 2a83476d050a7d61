// What the rank pipeline needs to know of a model to fill its tensors (client/resolve/
// resolver.h): where each stored tensor is and who serves each file, the tied aliases, how
// non-persistent buffers are computed. Opened from a daemon that has the model registered or
// from a checkpoint folder this host reads (OpenModel, for materialize.h); the plan-driven
// load builds one from its part of the plan (client/load/rank_loader.cc).
//
//   ML_ASSIGN_OR_RETURN(ModelView view, OpenModel({.model = "llama", .daemon = "127.0.0.1:7070"}));
//
// Thread-safety: a plain value; OpenModel is reentrant.
#ifndef METALOAD_CLIENT_RESOLVE_MODEL_VIEW_H_
#define METALOAD_CLIENT_RESOLVE_MODEL_VIEW_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/read/daemon_client.h"
#include "planner/format/quantization.h"
#include "planner/format/tensor_layout.h"

namespace metaload {

struct ModelSpec {
  std::string model;       // the registered name (daemon) or a name for messages (checkpoint)
  std::string daemon;      // host:port of a daemon that knows `model`; "" with `checkpoint`
  std::string checkpoint;  // a checkpoint folder or file this host reads; "" with `daemon`
  absl::Duration timeout = absl::Minutes(5);
};

struct ModelView {
  std::string model;
  std::map<std::string, TensorLayout> stored;       // by name
  std::map<std::string, FileRoute> files;           // by relative file name
  std::map<std::string, std::string> tied_to;       // alias -> the stored name of its group
  std::map<std::string, std::string> buffer_rules;  // non-persistent buffer -> its rule
  std::map<std::string, int64_t> layer_counts;      // "model.layers" -> 48: for grouped findings
  std::string init_missing = "error";               // the policy the model was registered with
  std::string answered_by;                          // the daemon's node ("" for a checkpoint)
  std::string origin;                               // "daemon 127.0.0.1:7070" / "checkpoint /m/x"
  // The config.json the model was registered with (a daemon's view; "" for a checkpoint, whose
  // folder the caller reads itself, or when it had none).
  std::string hf_config_json;
  // A checkpoint folder's digest manifest that was there but not used, and why
  // (planner/format/digest_manifest.h): its tensors are then read without digests.
  std::string digest_note;
  // The daemon requires proof of content (require_digests in the coordinator's node config):
  // a load fails unless every tensor's bytes are proven, whatever require_proof says.
  bool proof_required = false;
  // What the config's quantization_config declares (planner/format/quantization.h), and the
  // stored codes and scales it pairs: what a dequantizing load reads a value from.
  std::optional<Quantization> quantization;
  QuantizedSet quantized;
};

// InvalidArgument / NotFound for a bad spec, an unknown model or an unreadable checkpoint;
// Unavailable when the daemon cannot be reached.
absl::StatusOr<ModelView> OpenModel(const ModelSpec& spec);

}  // namespace metaload

#endif  // METALOAD_CLIENT_RESOLVE_MODEL_VIEW_H_
