// The seam a ReadRange stream calls at the points where a test wants to break it: a chunk was
// read (its payload may be forged before its checksum, changed after it, or sent without one), and payload
// bytes were handed to gRPC (the process may kill or stop itself there, as a crashed or hung
// host would). In production nothing happens there: ServingHooks::None(), whose methods do
// nothing. The faults that implement them live in tests/faults/ and are linked only into the
// test binary metad_faulty (tests/faults/README.md), never into metad.
//
//   RangeServing serving;  serving.hooks = ServingHooks::None();   // what MetadService passes
//   ... in a test: serving.hooks = &faults;  (a ServingHooks of its own)
//
// Thread-safety: every method may be called from several streams' threads at once (the io
// queue's workers and gRPC's reactions); implementations lock what they share.
#ifndef METALOAD_DAEMON_SERVING_READ_RANGE_SERVING_HOOKS_H_
#define METALOAD_DAEMON_SERVING_READ_RANGE_SERVING_HOOKS_H_

#include <cstdint>

#include "absl/types/span.h"

namespace metaload {

class ServingHooks {
 public:
  virtual ~ServingHooks() = default;

  // The hooks that do nothing: production's. Never null, lives as long as the process.
  static ServingHooks* None();

  // Whether the chunk about to be read carries the CRC-32C of its payload (docs/integrity.md).
  // False is what a daemon older than checksums sends, and what measuring their cost needs:
  // asked before the checksum is computed, so that none is. Default: true.
  virtual bool ChecksumChunk() { return true; }
  // A chunk's `payload` as read, before its checksum is computed: a change here reaches the
  // rank with a checksum that matches, as from a server that chooses the bytes it sends (only
  // the registered digests catch it, docs/integrity.md). Default: nothing.
  virtual void ForgeChunk(absl::Span<uint8_t> payload) {}
  // A chunk's `payload` was read and its checksum (if any) computed; it is sent once this
  // returns, so a change here reaches the rank as corruption in flight would. Default: nothing.
  virtual void ChunkRead(absl::Span<uint8_t> payload) {}
  // `served_bytes` ReadRange payload bytes have been handed to gRPC so far, over every stream
  // of this daemon, the chunk about to be written included. Called on the thread that starts
  // the write, with the stream's lock held: it must not block. Default: nothing.
  virtual void BytesServed(uint64_t served_bytes) {}
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_SERVING_READ_RANGE_SERVING_HOOKS_H_
