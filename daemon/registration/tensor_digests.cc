#include "daemon/registration/tensor_digests.h"

#include <algorithm>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "planner/format/checkpoint_digests.h"
#include "proto/convert.h"
#include "util/fs/storage.h"
#include "util/log.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace metaload {
namespace {

// Below this a registration is quick and the log says only how long it took.
constexpr uint64_t kProgressFromBytes = 1ull << 30;
constexpr absl::Duration kProgressEvery = absl::Seconds(5);

// Logs how far the digests are, at most every kProgressEvery, for large models only.
class Progress {
 public:
  Progress(absl::string_view model, uint64_t total_bytes) : model_(model), total_bytes_(total_bytes) {}

  void Add(uint64_t bytes, const std::string& file) {
    done_bytes_ += bytes;
    if (total_bytes_ < kProgressFromBytes || absl::Now() - last_log_ < kProgressEvery) return;
    last_log_ = absl::Now();
    LogInfo(absl::StrFormat("RegisterModel %s: digests of %s of %s (%.0f%%), reading %s", model_,
                            FormatBytes(done_bytes_), FormatBytes(total_bytes_),
                            100.0 * static_cast<double>(done_bytes_) / static_cast<double>(total_bytes_),
                            file));
  }

  void Done(size_t tensor_count, DigestKind kind) const {
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start_);
    LogInfo(absl::StrFormat("RegisterModel %s: %s digests of %d tensors, %s, in %.2f s (%.2f GB/s)", model_,
                            DigestKindName(kind), tensor_count, FormatBytes(done_bytes_), seconds,
                            seconds > 0 ? static_cast<double>(done_bytes_) / seconds / 1e9 : 0.0));
  }

 private:
  const std::string model_;
  const uint64_t total_bytes_;
  uint64_t done_bytes_ = 0;
  const absl::Time start_ = absl::Now();
  absl::Time last_log_ = absl::Now();
};

}  // namespace

absl::Status RecordTensorDigests(const Checkpoint& checkpoint, absl::string_view model_name, DigestKind kind,
                                 const DigestFiles& files, const std::function<bool()>& should_stop,
                                 v1::ModelRecord* record) {
  const std::vector<TensorLayout>& tensors = checkpoint.tensors;
  if (static_cast<size_t>(record->tensors_size()) != tensors.size()) {
    return absl::InternalError(absl::StrCat("the record of ", model_name, " has ", record->tensors_size(),
                                            " tensors, its checkpoint ", tensors.size()));
  }
  uint64_t total_bytes = 0;
  for (const TensorLayout& t : tensors) total_bytes += t.size_bytes();
  Progress progress(model_name, total_bytes);
  DigestPassOptions options;
  options.should_stop = should_stop;
  options.on_bytes = [&progress](uint64_t bytes, const std::string& file) { progress.Add(bytes, file); };
  // The files must still be the ones whose stamps the record holds (taken with the headers).
  for (const v1::FileStat& stat : record->file_stats()) {
    options.expected[stat.file()] = FileStampFromProto(stat);
  }
  const Storage storage = Storage::UnderRoots(*files.roots, {files.same_device}, files.file_system);
  absl::StatusOr<std::vector<TensorDigest>> digests = DigestCheckpoint(checkpoint, kind, storage, options);
  if (absl::IsCancelled(digests.status())) {
    return absl::CancelledError(absl::StrCat("registering ", model_name, ": ", digests.status().message()));
  }
  if (!digests.ok()) return digests.status();
  for (size_t t = 0; t < tensors.size(); ++t) {
    v1::TensorLocation* location = record->mutable_tensors(static_cast<int>(t));
    location->clear_xxh3();
    DigestToProto((*digests)[t], location->mutable_digest());
  }
  progress.Done(tensors.size(), kind);
  return absl::OkStatus();
}

}  // namespace metaload
