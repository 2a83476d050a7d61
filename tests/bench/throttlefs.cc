// Benchmark helper, not a test: an emulated network file system for the benchmark's emulated
// cluster (bench/cluster/). It serves one backing folder, read-only, at several mount points,
// one per emulated host, from one process, so that
//   - every mount is its own FUSE superblock: hosts do not share a page cache (a file read on
//     host 0 is not cached for host 1), as with NFS, Lustre or a FUSE-mounted bucket;
//   - every mount draws from one shared link of --bandwidth-mb-per-s (10^6 bytes per second):
//     hosts compete for the storage's aggregate bandwidth;
//   - every read request waits --latency-us first (requests in flight overlap, like RPCs);
//   - the kernel reads ahead --read-ahead-kib per file (the mount's bdi read_ahead_kb; FUSE's
//     default of 128 KiB would make one 128 KiB request per round trip, slower than NFS clients).
// Like an NFS client, a host keeps what it read in its page cache across opens while the file
// is unchanged (keep_cache: re-opening a file does not drop the pages another reader of that
// host prefetched); the benchmark drops every host's cache before every run (posix_fadvise
// DONTNEED through each mount, bench/cluster/hosts.py), so each run starts cold. Reads are
// buffered (no direct_io), so mmap works, as safetensors, transformers and DCP use it.
//
//   build/tests/throttlefs --backing DIR [--bandwidth-mb-per-s 1000] [--latency-us 1000]
//                          [--read-ahead-kib 4096] MOUNT [MOUNT...]
//
// Each mount's root also answers the name ".throttlefs-stats" (not listed by readdir): a JSON
// object {"bytes", "requests", "mounts": [{"mount","bytes","requests"}...]} of what was served
// so far, read fresh at every open (direct_io for that file only). SIGTERM or SIGINT unmounts
// every mount and exits 0. Prints "ready" on stdout once every mount answers.
#define FUSE_USE_VERSION 35
#include <dirent.h>
#include <fcntl.h>
#include <fuse3/fuse.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr char kStatsName[] = "/.throttlefs-stats";
constexpr uint64_t kStatsHandle = ~uint64_t{0};  // an fh no open(2) returns
constexpr unsigned kRequestBytes = 1u << 20;     // reads of up to 1 MiB, like NFS's rsize

struct MountStats {
  std::string mount;
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> requests{0};
};

// One link shared by every mount: a read of n bytes occupies it for n / bandwidth after every
// byte queued before it (first come, first served), so the aggregate never exceeds it however
// many hosts read at once.
class SharedLink {
 public:
  explicit SharedLink(double bytes_per_s) : bytes_per_s_(bytes_per_s) {}

  void Transfer(uint64_t bytes) {
    using Clock = std::chrono::steady_clock;
    const auto duration = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(static_cast<double>(bytes) / bytes_per_s_));
    Clock::time_point done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto now = Clock::now();
      busy_until_ = std::max(busy_until_, now) + duration;
      done = busy_until_;
    }
    std::this_thread::sleep_until(done);
  }

 private:
  const double bytes_per_s_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point busy_until_{};
};

struct Served {
  std::string backing;
  std::chrono::microseconds latency{0};
  std::unique_ptr<SharedLink> link;
  std::vector<std::unique_ptr<MountStats>> mounts;
};

Served* g_served = nullptr;

MountStats& StatsOf() { return *static_cast<MountStats*>(fuse_get_context()->private_data); }

std::string Backing(const char* path) { return g_served->backing + path; }

std::string StatsJson() {
  uint64_t bytes = 0, requests = 0;
  std::string mounts;
  for (const auto& m : g_served->mounts) {
    const uint64_t b = m->bytes.load(), r = m->requests.load();
    bytes += b;
    requests += r;
    if (!mounts.empty()) mounts += ", ";
    mounts += "{\"mount\": \"" + m->mount + "\", \"bytes\": " + std::to_string(b) +
              ", \"requests\": " + std::to_string(r) + "}";
  }
  return "{\"bytes\": " + std::to_string(bytes) + ", \"requests\": " + std::to_string(requests) +
         ", \"mounts\": [" + mounts + "]}\n";
}

void* Init(fuse_conn_info* conn, fuse_config* cfg) {
  cfg->kernel_cache = 0;  // Open says keep_cache per file (the stats file is never cached)
  cfg->direct_io = 0;     // buffered, so mmap works
  cfg->use_ino = 1;
  cfg->attr_timeout = 1.0;
  cfg->entry_timeout = 1.0;
  conn->max_readahead = kRequestBytes;
  conn->max_background = 64;
  return fuse_get_context()->private_data;
}

int GetAttr(const char* path, struct stat* st, fuse_file_info*) {
  if (std::strcmp(path, kStatsName) == 0) {
    std::memset(st, 0, sizeof(*st));
    st->st_mode = S_IFREG | 0444;
    st->st_nlink = 1;
    st->st_size = 0;  // unknown in advance; direct_io reads past it
    return 0;
  }
  return lstat(Backing(path).c_str(), st) == 0 ? 0 : -errno;
}

int ReadDir(const char* path, void* buf, fuse_fill_dir_t fill, off_t, fuse_file_info*, fuse_readdir_flags) {
  DIR* dir = opendir(Backing(path).c_str());
  if (dir == nullptr) return -errno;
  while (dirent* entry = readdir(dir)) {
    struct stat st {};
    st.st_ino = entry->d_ino;
    st.st_mode = static_cast<mode_t>(DTTOIF(entry->d_type));
    if (fill(buf, entry->d_name, &st, 0, static_cast<fuse_fill_dir_flags>(0)) != 0) break;
  }
  closedir(dir);
  return 0;
}

int Open(const char* path, fuse_file_info* fi) {
  if ((fi->flags & O_ACCMODE) != O_RDONLY) return -EROFS;
  if (std::strcmp(path, kStatsName) == 0) {
    fi->fh = kStatsHandle;
    fi->direct_io = 1;
    return 0;
  }
  const int fd = open(Backing(path).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  fi->fh = static_cast<uint64_t>(fd);
  // Without it every open dropped the pages the host had read: a daemon opening a file per
  // request re-read what it had just prefetched for another (1.5x the bytes it served).
  fi->keep_cache = 1;
  return 0;
}

int Read(const char*, char* buf, size_t size, off_t offset, fuse_file_info* fi) {
  if (fi->fh == kStatsHandle) {
    const std::string json = StatsJson();
    if (offset < 0 || static_cast<uint64_t>(offset) >= json.size()) return 0;
    const size_t n = std::min(size, json.size() - static_cast<size_t>(offset));
    std::memcpy(buf, json.data() + offset, n);
    return static_cast<int>(n);
  }
  std::this_thread::sleep_for(g_served->latency);
  const ssize_t n = pread(static_cast<int>(fi->fh), buf, size, offset);
  if (n < 0) return -errno;
  g_served->link->Transfer(static_cast<uint64_t>(n));
  MountStats& stats = StatsOf();
  stats.bytes += static_cast<uint64_t>(n);
  stats.requests += 1;
  return static_cast<int>(n);
}

int Release(const char*, fuse_file_info* fi) {
  if (fi->fh != kStatsHandle) close(static_cast<int>(fi->fh));
  return 0;
}

// The kernel's read-ahead for one mount: the bdi of its device number (0:N for FUSE).
void SetReadAhead(const std::string& mount, uint64_t kib) {
  struct stat st {};
  if (stat(mount.c_str(), &st) != 0) return;
  const std::string path = "/sys/class/bdi/" + std::to_string(major(st.st_dev)) + ":" +
                           std::to_string(minor(st.st_dev)) + "/read_ahead_kb";
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr || std::fprintf(f, "%llu\n", static_cast<unsigned long long>(kib)) < 0 ||
      std::fclose(f) != 0) {
    std::fprintf(stderr, "throttlefs: could not set %s (reads stay at the kernel's default)\n", path.c_str());
  }
}

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "throttlefs: %s\nusage: throttlefs --backing DIR [--bandwidth-mb-per-s N (default 1000)] "
               "[--latency-us N (default 1000)] [--read-ahead-kib N (default 4096)] MOUNT [MOUNT...]\n",
               why);
  std::exit(2);
}

// A positive integer flag value, whole and in range, or a usage error naming the flag.
uint64_t ParseCount(const char* flag, const char* text, uint64_t min, uint64_t max) {
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-' || v < min || v > max) {
    Usage((std::string(flag) + " wants a whole number from " + std::to_string(min) + " to " +
           std::to_string(max) + ", not '" + text + "'")
              .c_str());
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  Served served;
  uint64_t bandwidth_mb_per_s = 1000, latency_us = 1000, read_ahead_kib = 4096;
  std::vector<std::string> mounts;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--help" || arg == "-h") {
      std::printf(
          "usage: throttlefs --backing DIR [--bandwidth-mb-per-s N] [--latency-us N] [--read-ahead-kib N]\n"
          "                  MOUNT [MOUNT...]\n"
          "Serves DIR read-only at every MOUNT (one per emulated host: no shared page cache),\n"
          "all of them through one link of N MB/s with a per-request latency.\n");
      return 0;
    } else if (arg == "--backing" && has_value) {
      served.backing = argv[++i];
    } else if (arg == "--bandwidth-mb-per-s" && has_value) {
      bandwidth_mb_per_s = ParseCount("--bandwidth-mb-per-s", argv[++i], 1, 1000000);
    } else if (arg == "--latency-us" && has_value) {
      latency_us = ParseCount("--latency-us", argv[++i], 0, 10000000);
    } else if (arg == "--read-ahead-kib" && has_value) {
      read_ahead_kib = ParseCount("--read-ahead-kib", argv[++i], 4, 1 << 20);
    } else if (arg.rfind("--", 0) == 0) {
      Usage(("unknown or incomplete flag " + arg).c_str());
    } else {
      mounts.push_back(arg);
    }
  }
  struct stat st {};
  if (served.backing.empty()) Usage("--backing DIR is required");
  if (stat(served.backing.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    Usage(("--backing " + served.backing + " is not a folder").c_str());
  }
  while (served.backing.size() > 1 && served.backing.back() == '/') served.backing.pop_back();
  if (mounts.empty()) Usage("give at least one MOUNT");
  served.latency = std::chrono::microseconds(latency_us);
  served.link = std::make_unique<SharedLink>(static_cast<double>(bandwidth_mb_per_s) * 1e6);
  g_served = &served;

  // Block the signals in every thread (the FUSE loops inherit the mask); one thread waits.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  fuse_operations ops{};
  ops.init = Init;
  ops.getattr = GetAttr;
  ops.readdir = ReadDir;
  ops.open = Open;
  ops.read = Read;
  ops.release = Release;
  std::vector<fuse*> fuses;
  std::vector<std::thread> loops;
  for (const std::string& mount : mounts) {
    served.mounts.push_back(std::make_unique<MountStats>());
    served.mounts.back()->mount = mount;
    const char* fuse_argv[] = {"throttlefs", "-o", "ro,default_permissions,allow_other,fsname=throttlefs"};
    fuse_args args = FUSE_ARGS_INIT(3, const_cast<char**>(fuse_argv));
    fuse* f = fuse_new(&args, &ops, sizeof(ops), served.mounts.back().get());
    fuse_opt_free_args(&args);
    if (f == nullptr) {
      std::fprintf(stderr, "throttlefs: fuse_new failed for %s\n", mount.c_str());
      return 1;
    }
    if (fuse_mount(f, mount.c_str()) != 0) {
      std::fprintf(stderr, "throttlefs: cannot mount %s (is /dev/fuse there, are we root?)\n", mount.c_str());
      for (fuse* g : fuses) fuse_unmount(g);
      return 1;
    }
    fuses.push_back(f);
  }
  for (fuse* f : fuses) {
    loops.emplace_back([f] {
      fuse_loop_config config{};
      config.clone_fd = 0;
      config.max_idle_threads = 16;
      fuse_loop_mt(f, &config);
    });
  }
  for (const std::string& mount : mounts) SetReadAhead(mount, read_ahead_kib);
  std::printf("ready\n");
  std::fflush(stdout);

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  for (fuse* f : fuses) {
    fuse_exit(f);
    fuse_unmount(f);  // the loop's pending read of /dev/fuse returns, and the loop ends
  }
  for (std::thread& t : loops) t.join();
  for (fuse* f : fuses) fuse_destroy(f);
  return 0;
}
