#include "daemon/serving/read_range/chunk_pool.h"

namespace metaload {

ChunkPool::~ChunkPool() {
  absl::MutexLock lock(&mu_);
  for (Buffer* buffer : free_) delete buffer;
}

grpc::Slice ChunkPool::Take(size_t length_bytes) {
  // A short chunk (a stream's last, a 1-byte read) must not hold a whole buffer: a one-off of
  // its size. grpc::Slice(n) is uninitialized, like the pooled buffers.
  if (length_bytes > buffer_bytes_ || length_bytes <= buffer_bytes_ / 2) return grpc::Slice(length_bytes);
  Buffer* buffer = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (!free_.empty()) {
      buffer = free_.back();
      free_.pop_back();
    }
  }
  // Not make_unique<uint8_t[]>(n), which zero-fills: pread overwrites every byte sent.
  if (buffer == nullptr) buffer = new Buffer{this, std::unique_ptr<uint8_t[]>(new uint8_t[buffer_bytes_])};
  return grpc::Slice(buffer->data.get(), length_bytes, &ChunkPool::Release, buffer);
}

void ChunkPool::Release(void* opaque) {
  auto* buffer = static_cast<Buffer*>(opaque);
  ChunkPool* pool = buffer->pool;
  {
    absl::MutexLock lock(&pool->mu_);
    if (pool->free_.size() < pool->max_free_) {
      pool->free_.push_back(buffer);
      return;
    }
  }
  delete buffer;
}

}  // namespace metaload
