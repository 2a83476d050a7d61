#include "daemon/serving/read_range/range_writer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/requests/refusal_log.h"
#include "daemon/serving/read_range/range_request.h"
#include "proto/chunk_wire.h"
#include "proto/convert.h"
#include "util/fs/confined_open.h"
#include "util/fs/file_stamp.h"
#include "util/hash/crc32c.h"
#include "util/identifiers.h"
#include "util/log.h"
#include "util/units.h"

namespace metaload {

namespace {

RangeRequest NumbersOf(const v1::ReadRangeRequest& request) {
  return RangeRequest{request.offset(), request.length(), request.run_bytes(), request.stride_bytes()};
}

}  // namespace

absl::StatusOr<StridedRuns> RequestedRuns(const v1::ReadRangeRequest& request, const std::string& path) {
  return ValidateRangeRequest(NumbersOf(request), path);
}

absl::Status CheckRunsInFile(const v1::ReadRangeRequest& request, const StridedRuns& runs,
                             const std::string& path, uint64_t file_size_bytes) {
  return CheckRunsInFile(NumbersOf(request), runs, path, file_size_bytes);
}

RangeWriter::RangeWriter(v1::ReadRangeRequest request, const RangeServing& serving,
                         StreamTable::Stream* stream, std::string client)
    : request_(std::move(request)), serving_(serving), stream_(stream), client_(std::move(client)) {
  if (serving_.streams_in_flight != nullptr) serving_.streams_in_flight->fetch_add(1);
  if (serving_.io->Post([this] { Open(); })) return;  // the job may finish the stream at once
  {
    absl::MutexLock lock(&mu_);
    job_in_flight_ = false;
    error_ = absl::ResourceExhaustedError(
        absl::StrCat("the daemon's ", serving_.io->name(), " queue is full; try again"));
  }
  Progress();
}

void RangeWriter::OnDone() {
  if (serving_.streams_in_flight != nullptr) serving_.streams_in_flight->fetch_sub(1);
  serving_.streams->Release(stream_);
  delete this;
}

void RangeWriter::Open() {
  absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<StridedRuns> runs = RequestedRuns(request_, request_.path());
    if (!runs.ok()) return runs.status();
    // Before the file system is touched: nothing is learned of a file no model holds.
    auto allowed = serving_.allow(request_.model(), request_.path(), *runs);
    if (!allowed.ok()) return allowed.status();
    // Resolved, checked and opened in one step: no window for a symlink swap (confined_open.h).
    absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
        serving_.file_system->OpenUnderRoots(request_.path(), *serving_.roots, serving_.same_device);
    if (!file.ok()) return file.status();
    const std::string& path = (*file)->path();
    if (path != request_.path()) {
      // The model's file as registered is this canonical path; a path that leads elsewhere now
      // (a symlink put in its place) is not that file.
      return absl::PermissionDeniedError(absl::StrCat("ReadRange: ", QuoteForMessage(request_.path(), 512),
                                                      " resolves to ", QuoteForMessage(path, 512),
                                                      ", not a file of a registered model"));
    }
    // Checked on the descriptor that is read, so that a rewrite between the check and the reads
    // cannot slip past it (a rename over the path leaves this descriptor on the old file). First
    // what the daemon knows: the file it stamped at registration, the record's word against the
    // file's own header; a forged record's `.env` or header bytes are never read past this. Only
    // then anything told of the file (its size, its mtime against the request's): a refused
    // record's sender learns nothing of a file it names.
    if (absl::Status holds = (*allowed)(**file); !holds.ok()) return holds;
    absl::Status unchanged = CheckUnchangedSinceRegistration(
        path, StampOf(**file), FileStamp{request_.expected_size_bytes(), request_.expected_mtime_ns()},
        request_.model());
    if (!unchanged.ok()) return unchanged;
    if (absl::Status inside = CheckRunsInFile(request_, *runs, path, (*file)->size_bytes()); !inside.ok())
      return inside;
    uint32_t chunk = request_.chunk_bytes() == 0 ? serving_.default_chunk_bytes : request_.chunk_bytes();
    chunk_bytes_ = std::clamp<uint32_t>(chunk, 4096, 3u << 20);
    runs_ = *runs;
    length_ = runs_.total_bytes();
    file_ = *std::move(file);
    file_->WillRead(runs_);
    return absl::OkStatus();
  }();
  if (status.ok()) {
    {
      absl::MutexLock lock(&mu_);
      opened_ = true;  // still in flight: this job goes on to read the first chunk
    }
    if (serving_.loads != nullptr) serving_.loads->StreamOpened(request_.model(), client_);
    ReadNext();
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    error_ = status;
    job_in_flight_ = false;
  }
  Progress();
}

// REQUIRES: job_in_flight_, set by whoever posted this job; nothing else reads meanwhile.
void RangeWriter::ReadNext() {
  uint64_t position = 0;
  {
    absl::MutexLock lock(&mu_);
    position = read_position_;
  }
  absl::StatusOr<Chunk> chunk = ReadChunk(position);
  {
    absl::MutexLock lock(&mu_);
    if (chunk.ok()) {
      read_position_ = position + chunk->payload_bytes;
      ready_ = std::move(*chunk);
    } else {
      error_ = chunk.status();
    }
    job_in_flight_ = false;
  }
  Progress();
}

absl::StatusOr<RangeWriter::Chunk> RangeWriter::ReadChunk(uint64_t position) {
  const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk_bytes_, length_ - position));
  grpc::Slice payload = serving_.pool->Take(n);  // ours until it is handed to gRPC below
  absl::Status read =
      file_->ReadRuns(runs_, position, absl::MakeSpan(const_cast<uint8_t*>(payload.begin()), n));
  if (!read.ok()) {  // logged as the stream ends (Ended)
    if (serving_.read_errors != nullptr) serving_.read_errors->fetch_add(1, std::memory_order_relaxed);
    return read;
  }
  const uint64_t offset =
      runs_.first_offset + (position / runs_.run_bytes) * runs_.stride_bytes + position % runs_.run_bytes;
  // The checksum covers the bytes as read, computed here, on the io thread, before they leave.
  serving_.hooks->ForgeChunk(absl::MakeSpan(const_cast<uint8_t*>(payload.begin()), n));  // a test's fault
  std::optional<uint32_t> crc;
  if (serving_.hooks->ChecksumChunk()) crc = Crc32c(absl::MakeConstSpan(payload.begin(), n));
  serving_.hooks->ChunkRead(absl::MakeSpan(const_cast<uint8_t*>(payload.begin()), n));  // a test's fault
  return Chunk{EncodeChunk(offset, position, std::move(payload), crc), n};
}

void RangeWriter::OnWriteDone(bool ok) {
  serving_.streams->WaitDone(stream_);
  in_flight_.Clear();  // its buffer goes back to the pool now, not when the next write starts
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) cancelled_ = true;
  }
  Progress();
}

void RangeWriter::OnCancel() {
  bool opened = false;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    opened = opened_;
  }
  // A read in flight on an object store may wait long (a stalled GET): ended now, so that the
  // io thread it holds is free (file_ is set before opened_ and lives until OnDone).
  if (opened) file_->Cancel();
  Progress();
}

void RangeWriter::Progress() {
  bool start_write = false, post_read = false;
  std::optional<grpc::Status> finish;
  bool opened = false, cancelled = false;
  uint64_t sent_bytes = 0;
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    if (!cancelled_ && !writing_ && ready_.has_value()) {
      in_flight_ = std::move(ready_->buffer);
      sent_bytes_ += ready_->payload_bytes;
      serving_.hooks->BytesServed(
          serving_.bytes_served->fetch_add(ready_->payload_bytes, std::memory_order_relaxed) +
          ready_->payload_bytes);  // a test's fault may stop the process here (serving_hooks.h)
      ready_.reset();
      writing_ = start_write = true;
    }
    if (!cancelled_ && opened_ && error_.ok() && !job_in_flight_ && !ready_.has_value() &&
        read_position_ < length_) {
      job_in_flight_ = post_read = true;  // read ahead while the last chunk is on the wire
    }
    const bool idle = !job_in_flight_ && !writing_;
    if (idle && cancelled_) {
      finish = grpc::Status(grpc::StatusCode::CANCELLED, "the reader went away");
    } else if (idle && !ready_.has_value() && (!error_.ok() || read_position_ == length_)) {
      finish = ToGrpcStatus(error_);  // everything was sent, or a read failed
    }
    if (finish.has_value()) {
      finished_ = true;
      opened = opened_;
      cancelled = cancelled_;
      sent_bytes = sent_bytes_;
      error = error_;
    }
  }
  if (start_write) {
    serving_.streams->WaitStarted(stream_);  // the idle clock runs until OnWriteDone
    StartWrite(&in_flight_);
  }
  if (post_read && !serving_.io->Post([this] { ReadNext(); })) {
    {
      absl::MutexLock lock(&mu_);
      job_in_flight_ = false;
      error_ = absl::ResourceExhaustedError(
          absl::StrCat("the daemon's ", serving_.io->name(), " queue is full; try again"));
    }
    Progress();
    return;
  }
  // Last: Finish may run OnDone, which deletes this.
  if (finish.has_value()) {
    Ended(error, opened, cancelled, sent_bytes);
    Finish(*finish);
  }
}

void RangeWriter::Ended(const absl::Status& error, bool opened, bool cancelled, uint64_t sent_bytes) {
  if (!opened) {
    if (!cancelled && !error.ok()) LogRefusal("ReadRange", client_, error);
    return;
  }
  if (serving_.loads == nullptr) return;
  StreamEnding ended{request_.model(), client_, request_.path(), sent_bytes, length_};
  if (cancelled) {
    ended.how = StreamEnd::kCancelled;
  } else if (!error.ok()) {
    ended.how = StreamEnd::kFailed;
    ended.reason = std::string(error.message());
  }
  serving_.loads->StreamEnded(ended);
}

}  // namespace metaload
