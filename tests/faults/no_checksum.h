// FOR TESTS AND MEASUREMENTS ONLY: METALOAD_TEST_NO_CHECKSUM=1, chunks without their CRC-32C.
// Read by the test binaries alone — never by metad or libmetaload.so, whose ranks refuse an
// unchecksummed chunk always:
//   metad_faulty (serving_faults.h) then sends its chunks without a checksum, as a daemon older
//     than checksums does (tests/integration/robustness/test_integrity.py: ranks must refuse it);
//   bench_stream (tests/bench/stream_bench.cc) then accepts such chunks, so that
//     bench/stream_checksum.py measures what checksums cost a stream.
#ifndef METALOAD_TESTS_FAULTS_NO_CHECKSUM_H_
#define METALOAD_TESTS_FAULTS_NO_CHECKSUM_H_

namespace metaload {

inline constexpr char kNoChecksumEnv[] = "METALOAD_TEST_NO_CHECKSUM";

// True when METALOAD_TEST_NO_CHECKSUM is "1".
bool ChecksumsOffFromEnvironment();

}  // namespace metaload

#endif  // METALOAD_TESTS_FAULTS_NO_CHECKSUM_H_
