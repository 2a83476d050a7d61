// This process's memory as the kernel counts it (Linux /proc/self/status), for reports and
// benchmarks: the daemon's status, a rank's growth during its load.
#ifndef METALOAD_UTIL_PROC_MEMORY_H_
#define METALOAD_UTIL_PROC_MEMORY_H_

#include <cstdint>

namespace metaload {

// VmRSS: resident now. 0 when /proc is unreadable.
uint64_t ResidentBytes();
// VmHWM: the most ever resident (the high-water mark). 0 when /proc is unreadable.
uint64_t PeakResidentBytes();

}  // namespace metaload

#endif  // METALOAD_UTIL_PROC_MEMORY_H_
