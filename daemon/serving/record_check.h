// A model record's claim on one checkpoint file, checked against the file itself (issue 23): a
// record a daemon did not build (PublishModel, etcd, a state_dir file, a coordinator's GetLayout)
// says which tensors lie where; the daemon serves those bytes only when the file's own
// safetensors header holds each of those tensors with the same dtype, shape and byte range. A
// forged record naming a `.env` beside the weights, a file's header (offset 0..8+N), a range
// across two tensors, or tensors the file holds otherwise is refused here.
//
//   ML_RETURN_IF_ERROR(CheckFileHoldsClaims(*file, "llama", claimed));
//
// The header is read from the very descriptor a ReadRange then reads (no window for a swap),
// bounded like registration's (kMaxSafetensorsHeaderBytes and the file's size), and validated by
// the planner's parser (planner/format/safetensors.h). No error shows the file's bytes; and as
// the reason names facts of the file's header (its dtypes, shapes, offsets, whether it is a
// safetensors file at all), it goes to the daemon's log, while the client that sent the record
// is answered RecordRefusal, which says none of them (issue 35: refusals were an oracle that
// gave an unregistered file's header away, field by field).
#ifndef METALOAD_DAEMON_SERVING_RECORD_CHECK_H_
#define METALOAD_DAEMON_SERVING_RECORD_CHECK_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "planner/format/tensor_layout.h"
#include "util/fs/file_system.h"

namespace metaload {

// OK when `file`'s safetensors header holds every tensor of `claimed` (the tensors model
// `model`'s record places in this file) by its name, with its dtype, shape and absolute byte
// range. PermissionDenied otherwise: RecordRefusal's message, then ": " and what disagrees (the
// file is not a safetensors file (the parser's reason), a tensor it lacks, or the first field
// that differs), for the daemon's log only; the read's own error when the file cannot be read.
absl::Status CheckFileHoldsClaims(const RandomAccessFile& file, const std::string& model,
                                  const std::vector<const TensorLayout*>& claimed);

// What the client is told when CheckFileHoldsClaims refused a record: PermissionDenied
// "ReadRange: "PATH" does not hold what the record of model "M" says", and nothing more.
absl::Status RecordRefusal(const std::string& path, const std::string& model);

}  // namespace metaload

#endif  // METALOAD_DAEMON_SERVING_RECORD_CHECK_H_
