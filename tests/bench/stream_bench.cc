// Streams one file from a running metad with DaemonClient::ReadRange, as a rank does, and
// prints GB/s: bench/stream_checksum.py runs it against daemons with checksums on (metad) and
// off (metad_faulty with METALOAD_TEST_NO_CHECKSUM=1) to measure what checksums cost a stream.
// With METALOAD_TEST_NO_CHECKSUM=1 this binary accepts chunks without a checksum
// (tests/faults/no_checksum.h), which a rank never does.
//
//   build/tests/bench_stream ADDRESS MODEL PATH OFFSET BYTES REPEATS [STREAMS]
//
// [OFFSET, OFFSET + BYTES) of PATH must lie inside tensors of registered model MODEL: a daemon
// serves nothing else.
//
// The destination is one buffer, touched once before timing, so page faults are not measured.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "client/read/daemon_client.h"
#include "tests/faults/no_checksum.h"

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s ADDRESS MODEL PATH OFFSET BYTES REPEATS [STREAMS]\n", argv[0]);
    return 2;
  }
  const std::string address = argv[1], model = argv[2], path = argv[3];
  const uint64_t offset = std::strtoull(argv[4], nullptr, 10);
  const uint64_t bytes = std::strtoull(argv[5], nullptr, 10);
  const int repeats = std::atoi(argv[6]);
  const int streams = argc > 7 ? std::max(1, std::atoi(argv[7])) : 2;  // a rank's default --read-threads
  std::vector<uint8_t> dest(bytes);
  std::memset(dest.data(), 0, dest.size());
  metaload::DaemonClient client(address, metaload::ChecksumsOffFromEnvironment()
                                             ? metaload::ChunkChecksums::kOptionalForMeasurement
                                             : metaload::ChunkChecksums::kRequired);
  // One piece per stream, as a rank cuts its reads.
  const uint64_t piece = (bytes + streams - 1) / streams;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    std::vector<absl::Status> results(streams);
    for (int s = 0; s < streams; ++s) {
      threads.emplace_back([&, s] {
        const uint64_t begin = std::min<uint64_t>(bytes, s * piece),
                       end = std::min<uint64_t>(bytes, begin + piece);
        results[s] = client.ReadRange(model, path, offset + begin,
                                      absl::MakeSpan(dest.data() + begin, end - begin), absl::Minutes(5));
      });
    }
    for (std::thread& t : threads) t.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (const absl::Status& s : results) {
      if (!s.ok()) {
        std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
        return 1;
      }
    }
    std::printf("%.3f\n", bytes / seconds / 1e9);
  }
  return 0;
}
