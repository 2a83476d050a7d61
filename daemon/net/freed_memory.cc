#include "daemon/net/freed_memory.h"

#include <malloc.h>

namespace metaload {

uint64_t ReleaseFreedMemory() {
  // fordblks: free bytes in the arenas' bins, which malloc_trim can hand back page by page
  // (glibc >= 2.8 returns free pages inside the heap, not only at its top).
  const struct mallinfo2 info = ::mallinfo2();
  const uint64_t free_bytes = info.fordblks;
  if (free_bytes <= kKeptFreeBytes) return 0;
  ::malloc_trim(0);
  return free_bytes;
}

}  // namespace metaload
