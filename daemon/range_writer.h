// The daemon's side of ReadRange: streams a contiguous range or a slice's strided runs of
// one file, gathered back to back, as serialized ReadRangeChunk messages.
//
// Each chunk is pread straight into the gRPC slice that is sent (proto/chunk_wire.h), and
// the next chunk is read while the previous one is on the wire (read-ahead of one), so disk
// or page-cache reads overlap with sending. At most two chunks per stream are held: a slow
// reader slows the reads (flow control) instead of growing the daemon's memory.
// Cancellation surfaces as a failed write, which ends the stream.
#ifndef METALOAD_DAEMON_RANGE_WRITER_H_
#define METALOAD_DAEMON_RANGE_WRITER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/chunk_pool.h"
#include "planner/file_io.h"
#include "planner/slice.h"
#include "proto/metaload.pb.h"

namespace metaload {

// The runs a ReadRange asks for, validated against the file: the request is untrusted, so
// every product and sum is checked before a byte is read. InvalidArgument for a strided
// request whose length is not whole runs or whose stride is below its run; OutOfRange when
// any byte lies past the file's end.
absl::StatusOr<StridedRuns> RequestedRuns(const v1::ReadRangeRequest& request, const std::string& path,
                                          uint64_t file_size_bytes);

// Deletes itself when gRPC is done with it.
class RangeWriter final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // REQUIRES: `runs` lie inside the file (RequestedRuns).
  // `pool` gives the chunks' payload buffers and must outlive this.
  RangeWriter(ReadOnlyFile file, const StridedRuns& runs, uint32_t chunk_bytes, ChunkPool* pool,
              std::atomic<uint64_t>* bytes_served);

  void OnWriteDone(bool ok) override;
  void OnDone() override { delete this; }

 private:
  // Starts the next write if one is ready, then reads ahead; loops when the write finished
  // while it was reading.
  void Pump();
  struct Chunk {
    grpc::ByteBuffer buffer;  // a serialized ReadRangeChunk
    uint64_t payload_bytes = 0;
  };
  absl::StatusOr<Chunk> ReadChunk(uint64_t position);

  ReadOnlyFile file_;
  const StridedRuns runs_;
  const uint64_t length_;
  const uint32_t chunk_bytes_;
  ChunkPool* const pool_;
  std::atomic<uint64_t>* const bytes_served_;
  grpc::ByteBuffer in_flight_;

  absl::Mutex mu_;
  std::optional<Chunk> ready_ ABSL_GUARDED_BY(mu_);
  uint64_t read_position_ ABSL_GUARDED_BY(mu_) = 0;  // bytes read so far (ready or sent)
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool reading_ahead_ ABSL_GUARDED_BY(mu_) = false;
  bool write_done_ ABSL_GUARDED_BY(mu_) = false;  // arrived while reading ahead
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_RANGE_WRITER_H_
