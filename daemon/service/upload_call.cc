#include "daemon/service/upload_call.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/requests/request_limits.h"
#include "proto/convert.h"
#include "util/error_kind.h"

namespace metaload {
namespace {

class Refused final : public grpc::ServerReadReactor<v1::UploadChunk> {
 public:
  explicit Refused(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

bool UploadBudget::Take(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (bytes > capacity_bytes_ - held_bytes_) return false;
  held_bytes_ += bytes;
  return true;
}

void UploadBudget::Give(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  held_bytes_ -= std::min(bytes, held_bytes_);
}

uint64_t UploadBudget::held_bytes() const {
  absl::MutexLock lock(&mu_);
  return held_bytes_;
}

absl::Time UploadDeadline(absl::Time admitted, uint64_t bytes, absl::Duration idle_timeout) {
  return admitted + idle_timeout + absl::Seconds(static_cast<double>(bytes) / kMinUploadBytesPerSecond);
}

UploadCall::Reactor* UploadCall::Refuse(const absl::Status& status) { return new Refused(status); }

UploadCall::Reactor* UploadCall::Admit(grpc::CallbackServerContext* ctx, UploadLimits limits,
                                       std::unique_ptr<google::protobuf::MessageLite> request,
                                       std::function<void(UnaryCall*)> arrived) {
  absl::StatusOr<StreamTable::Stream*> stream = limits.uploads->Admit(ctx, limits.client);
  if (!stream.ok()) return Refuse(stream.status());
  return new UploadCall(ctx, std::move(limits), *stream, std::move(request), std::move(arrived));
}

UploadCall::UploadCall(grpc::CallbackServerContext* ctx, UploadLimits limits, StreamTable::Stream* stream,
                       std::unique_ptr<google::protobuf::MessageLite> request,
                       std::function<void(UnaryCall*)> arrived)
    : ctx_(ctx),
      limits_(std::move(limits)),
      stream_(stream),
      request_(std::move(request)),
      arrived_(std::move(arrived)),
      call_(
          ctx, {}, [this](const grpc::Status& status) { Finish(status); }, nullptr) {
  limits_.uploads->SetDeadline(stream_,
                               UploadDeadline(admitted_, limits_.max_request_bytes, limits_.idle_timeout));
  ReadNext();
}

void UploadCall::ReadNext() {
  limits_.uploads->WaitStarted(stream_);  // the idle clock runs until OnReadDone
  StartRead(&piece_);
}

void UploadCall::OnReadDone(bool ok) {
  limits_.uploads->WaitDone(stream_);
  if (!ok) {
    Arrived();
    return;
  }
  if (absl::Status taken = Take(); !taken.ok()) {
    Fail(taken);
    return;
  }
  ReadNext();
}

absl::Status UploadCall::Take() {
  const std::string& data = piece_.data();
  if (pieces_ == 0) {
    total_bytes_ = piece_.total_bytes();
    if (total_bytes_ == 0) {
      return absl::InvalidArgumentError(
          "the upload declares no length (UploadChunk.total_bytes): a request sent whole, by a client "
          "older than this daemon? Use a metactl of the same version");
    }
    if (total_bytes_ > limits_.max_request_bytes) {
      return TooLargeError(absl::StrCat("the request is ", total_bytes_, " bytes, over max_request_size (",
                                        limits_.max_request_bytes, " bytes)"));
    }
    limits_.uploads->SetDeadline(stream_, UploadDeadline(admitted_, total_bytes_, limits_.idle_timeout));
  } else if (piece_.total_bytes() != 0 && piece_.total_bytes() != total_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("piece ", pieces_ + 1, " declares ", piece_.total_bytes(),
                                                   " bytes; the first declared ", total_bytes_));
  }
  const uint64_t received = bytes_.size();
  if (data.size() > total_bytes_ - received) {
    return absl::InvalidArgumentError(absl::StrCat("piece ", pieces_ + 1, " brings ", data.size(),
                                                   " bytes after ", received, " of the ", total_bytes_,
                                                   " declared"));
  }
  if (data.empty()) return absl::InvalidArgumentError(absl::StrCat("piece ", pieces_ + 1, " is empty"));
  // Only the last piece may be short: each one costs a reaction.
  if (pieces_ > 0 && last_piece_bytes_ < kMinUploadPieceBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "piece ", pieces_, " carries ", last_piece_bytes_,
        " bytes and is not the last; each but the last must carry at least ", kMinUploadPieceBytes));
  }
  if (!limits_.budget->Take(data.size())) {
    return absl::ResourceExhaustedError(
        absl::StrCat("uploads in flight hold ", limits_.budget->held_bytes(), " bytes, and may hold ",
                     limits_.budget->capacity_bytes(), " (", kUploadBytesPerMaxRequest,
                     " x max_request_size); try again"));
  }
  held_bytes_ += data.size();
  last_piece_bytes_ = data.size();
  if (pieces_ == 0) bytes_.reserve(std::min<uint64_t>(total_bytes_, 2 * data.size()));
  bytes_.append(data);
  std::string().swap(*piece_.mutable_data());
  ++pieces_;
  return absl::OkStatus();
}

void UploadCall::Fail(const absl::Status& refused) {
  call_.Finish(absl::Status(refused.code(),
                            absl::StrCat(limits_.node, ": ", limits_.method, ": ", refused.message())));
}

void UploadCall::Arrived() {
  if (ctx_->IsCancelled()) return Fail(absl::CancelledError("the caller cancelled its upload"));
  if (pieces_ == 0) return Fail(absl::InvalidArgumentError("the upload ended before its first piece"));
  if (bytes_.size() != total_bytes_) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("the upload ended after ", bytes_.size(), " of the ",
                                                        total_bytes_, " bytes it declared")));
  }
  // Parsing up to max_request_size (1 GiB at most) is no work for a gRPC thread. The call is not
  // finished before the job ran, so the reactor is still there.
  PostOrRefuse(*limits_.parsing, limits_.node, &call_, [this] {
    const bool parsed = request_->ParseFromString(bytes_);
    std::string().swap(bytes_);  // the request holds it now (still counted in the budget)
    if (!parsed)
      return Fail(absl::InvalidArgumentError(absl::StrCat("the upload is not a ", request_->GetTypeName())));
    arrived_(&call_);
  });
}

void UploadCall::OnDone() {
  call_.Done();
  limits_.uploads->Release(stream_);
  limits_.budget->Give(held_bytes_);
  delete this;
}

}  // namespace metaload
