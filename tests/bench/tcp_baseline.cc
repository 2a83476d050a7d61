// Benchmark helper, not a test: the loopback TCP baseline of issue 5 (bench/run_bench.py
// runs it). Moves the bytes of the given files from one process to another over one TCP
// connection on 127.0.0.1, the way a daemon serving a rank would have to at the least:
//
//   sender (forked child)  pread()s each file in --chunk-bytes pieces into one reused buffer
//                          and send()s them;
//   receiver (this process) recv()s everything into one buffer of fresh, never-touched
//                          anonymous memory (mmap), so it pays the page faults a rank pays
//                          when it fills freshly allocated tensors.
//
// The clock runs from the receiver's "go" byte (the connection already established) to the
// last byte received. Afterwards, outside the clock, the received bytes are compared with
// the files (--no-verify skips it). Prints one JSON object on stdout:
//
//   {"bytes":..., "seconds":..., "gb_per_s":..., "chunk_bytes":...,
//    "receiver_user_s":..., "receiver_sys_s":..., "receiver_minor_faults":...,
//    "sender_user_s":..., "sender_sys_s":..., "verified":true}
//
// Run: build/tests/bench_tcp_baseline [--chunk-bytes N] [--no-verify] FILE...
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Options {
  std::vector<std::string> files;
  uint64_t chunk_bytes = 1ull << 20;  // the sender's pread/send size
  bool verify = true;
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "bench_tcp_baseline: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

bool ParseOptions(int argc, char** argv, Options* options) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--chunk-bytes" && i + 1 < argc) {
      char* end = nullptr;
      options->chunk_bytes = std::strtoull(argv[++i], &end, 10);
      if (*end != '\0' || options->chunk_bytes == 0 || options->chunk_bytes > (1ull << 30)) return false;
    } else if (arg == "--no-verify") {
      options->verify = false;
    } else if (!arg.empty() && arg[0] == '-') {
      return false;
    } else {
      options->files.push_back(arg);
    }
  }
  return !options->files.empty();
}

uint64_t FileSize(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) Die("stat " + path);
  return static_cast<uint64_t>(st.st_size);
}

// pread exactly `length` bytes at `offset`; short reads are retried.
void PreadAll(int fd, uint8_t* dest, uint64_t length, uint64_t offset, const std::string& path) {
  while (length > 0) {
    ssize_t got = pread(fd, dest, length, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) Die("pread " + path);
    dest += got;
    offset += static_cast<uint64_t>(got);
    length -= static_cast<uint64_t>(got);
  }
}

void SendAll(int socket_fd, const uint8_t* data, uint64_t length) {
  while (length > 0) {
    ssize_t sent = send(socket_fd, data, length, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) Die("send");
    data += sent;
    length -= static_cast<uint64_t>(sent);
  }
}

// The child: waits for the receiver's go byte, then sends every file in order.
[[noreturn]] void RunSender(const Options& options, uint16_t port) {
  int socket_fd = socket(AF_INET, SOCK_STREAM, 0);
  if (socket_fd < 0) Die("socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(socket_fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) Die("connect");
  char go = 0;
  if (recv(socket_fd, &go, 1, MSG_WAITALL) != 1) Die("waiting for the go byte");
  std::vector<uint8_t> chunk(options.chunk_bytes);
  for (const std::string& path : options.files) {
    int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0) Die("open " + path);
    const uint64_t size = FileSize(path);
    for (uint64_t offset = 0; offset < size; offset += options.chunk_bytes) {
      const uint64_t length = std::min<uint64_t>(options.chunk_bytes, size - offset);
      PreadAll(fd, chunk.data(), length, offset, path);
      SendAll(socket_fd, chunk.data(), length);
    }
    close(fd);
  }
  close(socket_fd);
  _exit(0);
}

// Compares the received bytes with the files, outside the clock.
bool Verify(const Options& options, const uint8_t* received) {
  std::vector<uint8_t> expected(16ull << 20);
  for (const std::string& path : options.files) {
    int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0) Die("open " + path);
    const uint64_t size = FileSize(path);
    for (uint64_t offset = 0; offset < size; offset += expected.size()) {
      const uint64_t length = std::min<uint64_t>(expected.size(), size - offset);
      PreadAll(fd, expected.data(), length, offset, path);
      if (std::memcmp(expected.data(), received + offset, length) != 0) {
        std::fprintf(stderr, "bench_tcp_baseline: received bytes of %s differ near offset %llu\n",
                     path.c_str(), static_cast<unsigned long long>(offset));
        close(fd);
        return false;
      }
    }
    close(fd);
    received += size;
  }
  return true;
}

double Seconds(const timeval& tv) { return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6; }

// A listening loopback socket; its port in `*port`.
int Listen(uint16_t* port) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) Die("socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t address_length = sizeof(address);
  if (bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) Die("bind");
  if (listen(listener, 1) != 0) Die("listen");
  if (getsockname(listener, reinterpret_cast<sockaddr*>(&address), &address_length) != 0) Die("getsockname");
  *port = ntohs(address.sin_port);
  return listener;
}

// Signals the sender to start, then receives `total_bytes` into `buffer`; the bytes received.
uint64_t ReceiveAll(int socket_fd, uint8_t* buffer, uint64_t total_bytes) {
  const char go = 1;
  SendAll(socket_fd, reinterpret_cast<const uint8_t*>(&go), 1);
  uint64_t received = 0;
  while (received < total_bytes) {
    const uint64_t want = std::min<uint64_t>(total_bytes - received, 16ull << 20);
    ssize_t got = recv(socket_fd, buffer + received, want, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) Die("recv");
    if (got == 0) break;
    received += static_cast<uint64_t>(got);
  }
  return received;
}

int Run(const Options& options) {
  uint64_t total_bytes = 0;
  for (const std::string& path : options.files) total_bytes += FileSize(path);
  if (total_bytes == 0) {
    std::fprintf(stderr, "bench_tcp_baseline: the files hold no bytes\n");
    return 1;
  }
  uint16_t port = 0;
  const int listener = Listen(&port);
  const pid_t sender = fork();
  if (sender < 0) Die("fork");
  if (sender == 0) {
    close(listener);
    RunSender(options, port);
  }

  // Fresh anonymous memory, never touched before recv() writes it (like torch::empty).
  void* mapped = mmap(nullptr, total_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) Die("mmap of the receive buffer");
  auto* buffer = static_cast<uint8_t*>(mapped);
  int socket_fd = accept(listener, nullptr, nullptr);
  if (socket_fd < 0) Die("accept");
  close(listener);

  rusage usage_before{};
  getrusage(RUSAGE_SELF, &usage_before);
  const auto start = std::chrono::steady_clock::now();
  const uint64_t received = ReceiveAll(socket_fd, buffer, total_bytes);
  const auto end = std::chrono::steady_clock::now();
  rusage usage_after{};
  getrusage(RUSAGE_SELF, &usage_after);
  close(socket_fd);

  int sender_status = 0;
  if (waitpid(sender, &sender_status, 0) != sender) Die("waitpid");
  rusage sender_usage{};
  getrusage(RUSAGE_CHILDREN, &sender_usage);
  if (!WIFEXITED(sender_status) || WEXITSTATUS(sender_status) != 0) {
    std::fprintf(stderr, "bench_tcp_baseline: the sender failed\n");
    return 1;
  }
  if (received != total_bytes) {
    std::fprintf(stderr, "bench_tcp_baseline: received %llu of %llu bytes\n",
                 static_cast<unsigned long long>(received), static_cast<unsigned long long>(total_bytes));
    return 1;
  }
  const bool verified = options.verify && Verify(options, buffer);
  if (options.verify && !verified) return 1;

  const double seconds = std::chrono::duration<double>(end - start).count();
  std::printf(
      "{\"bytes\": %llu, \"seconds\": %.6f, \"gb_per_s\": %.4f, \"chunk_bytes\": %llu, "
      "\"receiver_user_s\": %.3f, \"receiver_sys_s\": %.3f, \"receiver_minor_faults\": %ld, "
      "\"sender_user_s\": %.3f, \"sender_sys_s\": %.3f, \"verified\": %s}\n",
      static_cast<unsigned long long>(total_bytes), seconds, static_cast<double>(total_bytes) / seconds / 1e9,
      static_cast<unsigned long long>(options.chunk_bytes),
      Seconds(usage_after.ru_utime) - Seconds(usage_before.ru_utime),
      Seconds(usage_after.ru_stime) - Seconds(usage_before.ru_stime),
      usage_after.ru_minflt - usage_before.ru_minflt, Seconds(sender_usage.ru_utime),
      Seconds(sender_usage.ru_stime), verified ? "true" : "false");
  munmap(mapped, total_bytes);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!ParseOptions(argc, argv, &options)) {
    std::fprintf(stderr, "usage: bench_tcp_baseline [--chunk-bytes N] [--no-verify] FILE...\n");
    return 2;
  }
  return Run(options);
}
