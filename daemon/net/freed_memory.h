// Gives the kernel back memory the daemon has freed. A connection's buffered requests are freed
// when it closes, but glibc's allocator keeps what gRPC's threads freed in their arenas (a push of
// 2.4 GiB of half-sent messages left metad at 2.4 GiB after its connections had closed): once a
// second metad asks how much the allocator holds free, and past kKeptFreeBytes has it returned
// (malloc_trim), so that resident memory goes back to what is in use.
//
// Thread-safety: any thread (metad calls it from its main loop); glibc locks each arena it trims.
#ifndef METALOAD_DAEMON_NET_FREED_MEMORY_H_
#define METALOAD_DAEMON_NET_FREED_MEMORY_H_

#include <cstdint>

namespace metaload {

// Free bytes the allocator may keep: below this a trim is not worth its walk of the heap.
inline constexpr uint64_t kKeptFreeBytes = uint64_t{32} << 20;

// Returns the allocator's free memory to the kernel when it holds more than kKeptFreeBytes;
// the bytes it held free before (0: it held too little to trim).
uint64_t ReleaseFreedMemory();

}  // namespace metaload

#endif  // METALOAD_DAEMON_NET_FREED_MEMORY_H_
