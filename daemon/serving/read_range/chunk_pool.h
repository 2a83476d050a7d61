// Reusable payload buffers for ReadRange chunks.
//
// Every chunk the daemon sends is pread straight into a buffer that gRPC then owns until the
// bytes are on the wire (proto/chunk_wire.h). A fresh malloc per chunk hands the kernel fresh
// pages to fault in on every pread: measured on this project's VMs, that is most of a
// daemon's system time. Buffers released by gRPC come back here instead and stay resident;
// at most `max_free` are kept, so memory is bounded by the chunks in flight plus those.
//
//   grpc::Slice payload = pool.Take(n);   // pread into payload.begin(), then send it
#ifndef METALOAD_DAEMON_SERVING_READ_RANGE_CHUNK_POOL_H_
#define METALOAD_DAEMON_SERVING_READ_RANGE_CHUNK_POOL_H_

#include <grpcpp/support/slice.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace metaload {

class ChunkPool {
 public:
  // Buffers hold `buffer_bytes`; a request larger, or of half that or less, gets a one-off
  // buffer of its size (a short last chunk or a tiny read must not hold a whole buffer).
  ChunkPool(size_t buffer_bytes, size_t max_free) : buffer_bytes_(buffer_bytes), max_free_(max_free) {}
  ~ChunkPool();
  ChunkPool(const ChunkPool&) = delete;
  ChunkPool& operator=(const ChunkPool&) = delete;

  // A slice of `length_bytes` writable bytes (uninitialized); thread-safe. The pool must
  // outlive every slice it gave out (the daemon's service owns it).
  grpc::Slice Take(size_t length_bytes);

 private:
  struct Buffer {
    ChunkPool* pool;
    std::unique_ptr<uint8_t[]> data;
  };
  static void Release(void* buffer);

  const size_t buffer_bytes_;
  const size_t max_free_;
  absl::Mutex mu_;
  std::vector<Buffer*> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_SERVING_READ_RANGE_CHUNK_POOL_H_
