// Benchmark helper, not a test: the limit of loading into memory the process owns (issue 5's
// bench/run_bench.py runs it). Reads the given files, already in the page cache, with pread
// in 16 MiB pieces from --threads threads into one buffer of fresh, never-touched anonymous
// memory (mmap), as a rank fills freshly allocated tensors, with no other work at all.
// `cat > /dev/null` reuses one small buffer and never pays for fresh pages; this does, so
// the two bracket what a loader can reach on this machine.
//
//   build/tests/bench_pread_baseline [--threads N] [--huge-pages] FILE...
//
// Prints one JSON object: {"bytes","seconds","gb_per_s","threads","huge_pages"}.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr uint64_t kPieceBytes = 16ull << 20;
constexpr uint64_t kHugePageBytes = 2ull << 20;

struct Piece {
  int fd;
  uint64_t file_offset;
  uint64_t dest_offset;
  uint64_t length;
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "bench_pread_baseline: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  bool huge_pages = false;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--threads" && i + 1 < argc) {
      threads = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--huge-pages") {
      huge_pages = true;
    } else if (arg == "--help" || arg == "-h") {
      std::printf("usage: bench_pread_baseline [--threads N] [--huge-pages] FILE...\n");
      return 0;
    } else {
      paths.push_back(arg);
    }
  }
  if (paths.empty()) {
    std::fprintf(stderr, "usage: bench_pread_baseline [--threads N] [--huge-pages] FILE...\n");
    return 2;
  }
  std::vector<Piece> pieces;
  uint64_t total = 0;
  std::vector<int> fds;
  for (const std::string& path : paths) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) Die(path);
    struct stat st;
    if (::fstat(fd, &st) != 0) Die(path);
    fds.push_back(fd);
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    for (uint64_t at = 0; at < size; at += kPieceBytes) {
      pieces.push_back({fd, at, total + at, std::min(kPieceBytes, size - at)});
    }
    total += size;
  }

  const auto start = std::chrono::steady_clock::now();
  const uint64_t length = (total + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes + kHugePageBytes;
  void* raw = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) Die("mmap");
  auto* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + kHugePageBytes - 1) /
                                          kHugePageBytes * kHugePageBytes);
  if (huge_pages) ::madvise(base, total, MADV_HUGEPAGE);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < pieces.size();) {
      const Piece& p = pieces[i];
      for (uint64_t done = 0; done < p.length;) {
        ssize_t n = ::pread(p.fd, base + p.dest_offset + done, p.length - done,
                            static_cast<off_t>(p.file_offset + done));
        if (n <= 0) Die("pread");
        done += static_cast<uint64_t>(n);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "{\"bytes\": %llu, \"seconds\": %.6f, \"gb_per_s\": %.4f, \"threads\": %d, \"huge_pages\": %s}\n",
      static_cast<unsigned long long>(total), seconds, static_cast<double>(total) / seconds / 1e9, threads,
      huge_pages ? "true" : "false");
  ::munmap(raw, length);
  for (int fd : fds) ::close(fd);
  return 0;
}
