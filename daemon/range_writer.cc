#include "daemon/range_writer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "planner/log.h"
#include "planner/units.h"
#include "proto/chunk_wire.h"
#include "proto/convert.h"

namespace metaload {

absl::StatusOr<StridedRuns> RequestedRuns(const v1::ReadRangeRequest& request, const std::string& path,
                                          uint64_t file_size_bytes) {
  StridedRuns runs;
  runs.first_offset = request.offset();
  if (request.run_bytes() == 0) {
    runs.run_bytes = runs.stride_bytes = request.length();
    runs.run_count = request.length() == 0 ? 0 : 1;
  } else {
    if (request.stride_bytes() < request.run_bytes() || request.length() % request.run_bytes() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "strided read of ", path, ": length ", request.length(), " must be a multiple of run_bytes ",
          request.run_bytes(), ", and stride_bytes ", request.stride_bytes(), " at least run_bytes"));
    }
    runs.run_bytes = request.run_bytes();
    runs.stride_bytes = request.stride_bytes();
    runs.run_count = request.length() / request.run_bytes();
  }
  uint64_t span = 0, end = 0;
  if (runs.run_count > 0 &&
      (MulOverflows(runs.run_count - 1, runs.stride_bytes, &span) || AddOverflows(span, runs.run_bytes, &span) ||
       AddOverflows(runs.first_offset, span, &end) || end > file_size_bytes)) {
    return absl::OutOfRangeError(absl::StrCat("range [", request.offset(), ", +", request.length(),
                                              request.run_bytes() == 0 ? "" : " strided", ") passes the end of ",
                                              path, " (", file_size_bytes, " bytes)"));
  }
  return runs;
}

RangeWriter::RangeWriter(ReadOnlyFile file, const StridedRuns& runs, uint32_t chunk_bytes, ChunkPool* pool,
                         std::atomic<uint64_t>* bytes_served)
    : file_(std::move(file)), runs_(runs), length_(runs.total_bytes()), chunk_bytes_(chunk_bytes), pool_(pool),
      bytes_served_(bytes_served) {
  if (runs_.run_count > 0) {
    file_.WillNeed(runs_.first_offset, (runs_.run_count - 1) * runs_.stride_bytes + runs_.run_bytes);
  }
  {
    absl::MutexLock lock(&mu_);
    if (length_ > 0) {
      absl::StatusOr<Chunk> first = ReadChunk(0);
      if (first.ok()) {
        ready_ = std::move(*first);
        read_position_ = std::min<uint64_t>(chunk_bytes_, length_);
      } else {
        error_ = first.status();
      }
    }
  }
  Pump();
}

absl::StatusOr<RangeWriter::Chunk> RangeWriter::ReadChunk(uint64_t position) {
  const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk_bytes_, length_ - position));
  grpc::Slice payload = pool_->Take(n);  // ours until it is handed to gRPC below
  absl::Status read =
      file_.ReadRuns(runs_, position, absl::MakeSpan(const_cast<uint8_t*>(payload.begin()), n));
  if (!read.ok()) {
    LogWarning(absl::StrCat("ReadRange: ", read.message()));
    return read;
  }
  const uint64_t offset =
      runs_.first_offset + (position / runs_.run_bytes) * runs_.stride_bytes + position % runs_.run_bytes;
  return Chunk{EncodeChunk(offset, position, std::move(payload)), n};
}

void RangeWriter::OnWriteDone(bool ok) {
  {
    absl::MutexLock lock(&mu_);
    if (!ok) cancelled_ = true;
    if (reading_ahead_) {
      // Pump's thread is still reading the next chunk; it continues when it has it.
      write_done_ = true;
      return;
    }
  }
  Pump();
}

void RangeWriter::Pump() {
  while (true) {
    uint64_t next_position = 0, payload_bytes = 0;
    bool read_ahead = false;
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      if (cancelled_) {
        finish = grpc::Status(grpc::StatusCode::CANCELLED, "the reader went away");
      } else if (!ready_.has_value()) {
        finish = ToGrpcStatus(error_);  // nothing left to send: everything was, or a read failed
      } else {
        in_flight_ = std::move(ready_->buffer);
        payload_bytes = ready_->payload_bytes;
        ready_.reset();
        read_ahead = error_.ok() && read_position_ < length_;
        next_position = read_position_;
        reading_ahead_ = read_ahead;
      }
    }
    if (finish.has_value()) {
      // Outside the lock: Finish may run OnDone, which deletes this.
      Finish(*finish);
      return;
    }
    bytes_served_->fetch_add(payload_bytes, std::memory_order_relaxed);
    StartWrite(&in_flight_);
    if (!read_ahead) return;  // OnWriteDone -> Pump finishes the stream
    absl::StatusOr<Chunk> next = ReadChunk(next_position);
    {
      absl::MutexLock lock(&mu_);
      if (next.ok()) {
        ready_ = std::move(*next);
        read_position_ = std::min<uint64_t>(next_position + chunk_bytes_, length_);
      } else {
        error_ = next.status();
      }
      reading_ahead_ = false;
      if (!write_done_) return;  // OnWriteDone will pump
      write_done_ = false;
    }
  }
}

}  // namespace metaload
