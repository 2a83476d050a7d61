#include "daemon/serving/chunk_pool.h"

namespace metaload {

ChunkPool::~ChunkPool() {
  absl::MutexLock lock(&mu_);
  for (Buffer* buffer : free_) delete buffer;
}

grpc::Slice ChunkPool::Take(size_t length_bytes) {
  if (length_bytes > buffer_bytes_) return grpc::Slice(length_bytes);
  Buffer* buffer = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (!free_.empty()) {
      buffer = free_.back();
      free_.pop_back();
    }
  }
  if (buffer == nullptr) buffer = new Buffer{this, std::make_unique<uint8_t[]>(buffer_bytes_)};
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
