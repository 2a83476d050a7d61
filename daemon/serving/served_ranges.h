// The bytes a daemon may serve of one registered model (issue 13 §2): per checkpoint file, by
// its absolute path, the byte ranges of the model's tensors, neighbours and overlaps merged (a
// rank coalesces adjacent tensors into one read). A ReadRange is served only when every byte it
// asks for lies inside them: not a `.env` beside the weights, not a safetensors header.
//
// Once the file is opened for a read, CheckOpened confirms it on that descriptor (issue 35):
//  - Files this host stamped when this daemon registered them (`registered`: its own
//    registration, or a record naming this node as registered_on) are served only while the
//    descriptor is that very file, unchanged: the same device, inode, size, mtime and ctime.
//    Another file renamed over the path with the size and mtime copied is refused, as is the
//    file written with its mtime set back (util/fs/file_stamp.h).
//  - A record this daemon did not build itself (PublishModel, etcd, a state_dir file, a
//    coordinator's GetLayout) is not believed (issue 23): it is checked against the file's own
//    safetensors header (record_check.h), and only a file that holds every tensor the record
//    places in it is served. A refusal tells the client only that the file does not hold what
//    the record says; what differs goes to the daemon's log with who sent the record, so that
//    forged records are no oracle of a file's header. The verdict is kept per file while the
//    file keeps its whole stamp (device, inode, size, mtime, ctime): a file renamed over it, or
//    written, has another, whatever mtime it was given; so a file is parsed once per record,
//    not once per ReadRange.
//
//   ServedRanges served("llama", checkpoint, "PublishModel from ipv4:10.0.0.7:41234 as token");
//   ML_RETURN_IF_ERROR(served.Check("/models/llama/model.safetensors", runs));
//   ... open the file ...
//   ML_RETURN_IF_ERROR(served.CheckOpened("/models/llama/model.safetensors", *file));
//
// Immutable once built but for its verdicts, which are internally locked; safe to share between
// threads. Copies share their verdicts.
#ifndef METALOAD_DAEMON_SERVING_SERVED_RANGES_H_
#define METALOAD_DAEMON_SERVING_SERVED_RANGES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "planner/format/checkpoint.h"
#include "util/fs/file_stamp.h"
#include "util/fs/file_system.h"
#include "util/strided_runs.h"

namespace metaload {

// What a ReadRange must still confirm on the file it opened (ServedRanges::CheckOpened).
using OpenedFileCheck = std::function<absl::Status(const RandomAccessFile& opened)>;

// Per file of a checkpoint, by its name relative to the checkpoint folder, the stamp this host
// gave it when this daemon registered it (ModelRecord.file_stats of a record registered here).
using HostStamps = std::map<std::string, FileStamp>;

class ServedRanges {
 public:
  ServedRanges() = default;  // serves nothing
  // Every tensor of `checkpoint`, by checkpoint.dir + "/" + its file, as this daemon read them
  // itself (its own registration): CheckOpened checks no header, only that each file of
  // `registered` is still the one stamped. `model` names it in errors.
  ServedRanges(std::string model, const Checkpoint& checkpoint, HostStamps registered = {});
  // The same of a record sent to this daemon: CheckOpened also checks each file against
  // `checkpoint`, which is kept (it may be the owner's: a shared_ptr that owns nothing, when the
  // owner holds both). `sent_by` says who sent the record in the log line of a refusal
  // ("PublishModel from ipv4:10.0.0.7:41234 as ...", "etcd key ...", "state_dir file ...").
  // `registered`: only for a record that says this node registered it (its stamps are this
  // host's; a forger can only make them refuse more).
  ServedRanges(std::string model, std::shared_ptr<const Checkpoint> checkpoint, std::string sent_by,
               HostStamps registered = {});

  // OK when `path` is a file of the model and every byte of `runs` lies inside its tensors
  // (no runs: the file alone is asked about). PermissionDenied naming the path otherwise: a file
  // the model does not hold, or the first run with a byte outside its tensors, or one that ends
  // past 2^64 (the runs come from a request: every sum and product is checked).
  absl::Status Check(const std::string& path, const StridedRuns& runs) const;
  // After Check passed and `path` was opened as `file` for the read. First, where `path` has a
  // registered stamp, FailedPrecondition unless `file` is that very file
  // (CheckSameFileSinceRegistration: "<path> changed since it was registered: inode ...;
  // run `metactl register --refresh M`"): the file must be put back or registered anew, which
  // no retry does. Then OK for a record this daemon built, or when `file` holds the tensors the
  // record places in it (record_check.h); else PermissionDenied RecordRefusal ("ReadRange:
  // "PATH" does not hold what the record of model "M" says", no more), its reason logged once
  // per file version naming who sent the record. Reads the header (blocks): call from the io
  // queue.
  absl::Status CheckOpened(const std::string& path, const RandomAccessFile& file) const;

  // Whether `other` says the same of the same files, stamped alike (a record fetched anew,
  // unchanged): then the verdicts of this one still hold.
  bool SameClaims(const ServedRanges& other) const;

  const std::string& model() const { return model_; }

 private:
  struct Verdicts;  // per path: the file's stamp when checked, and the verdict

  std::string model_;
  // Null for a record this daemon built; else what the record claims, who sent it, the verdicts.
  std::shared_ptr<const Checkpoint> claims_;
  std::string sent_by_;
  std::shared_ptr<Verdicts> verdicts_;
  struct ServedFile {
    // Disjoint [begin, end) byte ranges, sorted, none touching the next.
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    FileStamp registered;  // as this host stamped it; not recorded() when it did not
  };
  std::map<std::string, ServedFile> files_;  // by path
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_SERVING_SERVED_RANGES_H_
