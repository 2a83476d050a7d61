// The daemon's side of ReadRange: streams a contiguous range or a slice's strided runs of
// one file, gathered back to back, as serialized ReadRangeChunk messages.
//
// No reaction touches the file system: resolving the path, opening the file and every read
// run as jobs on the daemon's io WorkQueue, which start the writes; a reaction (OnWriteDone)
// only starts the next write of a chunk already read and posts the next read. Each chunk is
// pread straight into the gRPC slice that is sent (proto/chunk_wire.h), and the next chunk
// is read while the previous one is on the wire (read-ahead of one): at most two chunk buffers
// per stream are held (the one being written and the one read ahead; a sent buffer goes back
// to the pool as its write completes), each of min(chunk size, bytes left), so a slow reader
// slows the reads instead of growing the daemon's memory. A reader that takes no chunk for
// idle_stream_timeout is cancelled (stream_table.h). Cancellation (OnCancel, or a failed
// write) ends the stream once no job is in flight.
//
// Only tensors of registered models are served (issue 13): a request names its model, and every
// byte it asks for must lie inside that model's tensors in the file (RangeServing::allow), checked
// before the file is opened; the file opened must then be the very path checked (no symlink in
// between), and under the daemon's roots (util/fs/confined_open.h), through the serving's
// FileSystem; and, before its first byte is read, hold what the model's record says it holds, as
// its own safetensors header says (the check `allow` hands back; issue 23).
//
// Integrity (docs/integrity.md): a request that names the file's registered size and mtime is
// refused (FailedPrecondition) when the opened file differs; every chunk carries the CRC-32C of
// the bytes read.
#ifndef METALOAD_DAEMON_SERVING_READ_RANGE_RANGE_WRITER_H_
#define METALOAD_DAEMON_SERVING_READ_RANGE_RANGE_WRITER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/exec/work_queue.h"
#include "daemon/serving/load_log.h"
#include "daemon/serving/read_range/chunk_pool.h"
#include "daemon/serving/read_range/serving_hooks.h"
#include "daemon/serving/read_range/stream_table.h"
#include "planner/plan/slice.h"
#include "proto/metaload.pb.h"
#include "util/fs/file_system.h"

namespace metaload {

// The runs a ReadRange asks for (ValidateRangeRequest, range_request.h): the request is
// untrusted, so every product and sum is checked before anything else reads them. `path` names
// the file in errors.
absl::StatusOr<StridedRuns> RequestedRuns(const v1::ReadRangeRequest& request, const std::string& path);
// OutOfRange when a byte of `runs` (from RequestedRuns) lies past the file's end.
absl::Status CheckRunsInFile(const v1::ReadRangeRequest& request, const StridedRuns& runs,
                             const std::string& path, uint64_t file_size_bytes);

// What every stream of one daemon shares. All must outlive the streams (the service owns them).
struct RangeServing {
  const std::vector<std::string>* roots = nullptr;  // canonical
  uint32_t default_chunk_bytes = 1 << 20;
  ChunkPool* pool = nullptr;
  WorkQueue* io = nullptr;
  std::atomic<uint64_t>* bytes_served = nullptr;
  std::atomic<uint32_t>* streams_in_flight = nullptr;  // counts this stream from start to OnDone
  StreamTable* streams = nullptr;
  // What files are opened through (util/fs/file_system.h) and what each chunk and each byte
  // served is told to (serving_hooks.h): production's back end by scheme and no hooks; tests
  // hand their faults in. Never null.
  FileSystem* file_system = FileSystem::ByScheme();
  ServingHooks* hooks = ServingHooks::None();
  // When every byte of `runs` in `path` lies inside a tensor of registered model `model`, the
  // check the opened file must then pass (daemon/serving/served_ranges.h: CheckOpened);
  // PermissionDenied naming the path otherwise. Asked on the io queue before the file is opened,
  // and may block there (a node agent asks its coordinator); so may the check it returns.
  std::function<absl::StatusOr<std::function<absl::Status(const RandomAccessFile& opened)>>(
      const std::string& model, const std::string& path, const StridedRuns& runs)>
      allow;
  // Node config same_device: files only on their root's mount, with one link (confined_open.h).
  bool same_device = false;
  std::atomic<uint64_t>* read_errors = nullptr;  // reads of a file that failed (metad's metrics)
  // Told of every stream whose file was opened, and how it ended (../load_log.h); may be null.
  LoadLog* loads = nullptr;
};

// Deletes itself when gRPC is done with it.
class RangeWriter final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // Starts the stream: posts the job that opens the file and reads the first chunk. `stream`:
  // admitted by serving.streams, which this releases when done. `client`: the reader's host, for
  // the log (a refusal, a stream cut short).
  RangeWriter(v1::ReadRangeRequest request, const RangeServing& serving, StreamTable::Stream* stream,
              std::string client);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  struct Chunk {
    grpc::ByteBuffer buffer;  // a serialized ReadRangeChunk
    uint64_t payload_bytes = 0;
  };

  // Jobs on the io queue.
  void Open();
  void ReadNext();
  absl::StatusOr<Chunk> ReadChunk(uint64_t position);
  // Starts the next write, posts the next read, or finishes; from any thread, without mu_.
  void Progress();
  // Tells the load log how the stream ended (a stream refused before its file opened is a
  // refusal, logged as one). `error`, `opened`, `cancelled`, `sent_bytes`: as mu_ held them
  // when the stream's end was decided.
  void Ended(const absl::Status& error, bool opened, bool cancelled, uint64_t sent_bytes);

  const v1::ReadRangeRequest request_;
  const RangeServing serving_;
  StreamTable::Stream* const stream_;
  const std::string client_;
  // Set by Open before any read or write, then only read.
  std::unique_ptr<RandomAccessFile> file_;
  StridedRuns runs_;
  uint64_t length_ = 0;
  uint32_t chunk_bytes_ = 0;
  grpc::ByteBuffer in_flight_;

  absl::Mutex mu_;
  bool opened_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<Chunk> ready_ ABSL_GUARDED_BY(mu_);
  uint64_t read_position_ ABSL_GUARDED_BY(mu_) = 0;  // bytes read so far (ready or sent)
  uint64_t sent_bytes_ ABSL_GUARDED_BY(mu_) = 0;     // handed to gRPC
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool job_in_flight_ ABSL_GUARDED_BY(mu_) = true;  // Open is posted by the constructor
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_SERVING_READ_RANGE_RANGE_WRITER_H_
