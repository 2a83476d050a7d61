#include "tests/test_support.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace metaload::testing {

std::string FixturesDir() {
  const char* env = std::getenv("METALOAD_FIXTURES");
  std::string dir = env != nullptr && *env != '\0' ? env : METALOAD_FIXTURES_DEFAULT;
  std::error_code ec;
  return std::filesystem::is_directory(dir, ec) ? dir : "";
}

TempDir::TempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/metaload-test-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string ReadFileOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void WriteFileOrDie(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  if (!out) throw std::runtime_error("cannot write " + path);
}

namespace {

// The low end of the kernel's ephemeral range (ip_local_port_range), from which bind(0) and every
// outgoing connection take their ports.
int EphemeralLow() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  return range >> low && low > 1024 ? low : 32768;
}

bool Binds(int port) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(s);
  return ok;
}

}  // namespace

int FreeLoopbackPort() {
  // The rule of tests/integration's free_port (bench/processes.py): below the ephemeral range,
  // at random. A port bind(0) hands out is one the next outgoing connection of a test running
  // beside this one may take before the caller listens on it (EADDRINUSE in a rendezvous under
  // ctest -j2, 2026-12-06).
  const int low = EphemeralLow();
  const int first = std::max(1024, low - 12000);
  std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> pick(first, low - 1);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = pick(random);
    if (Binds(port)) return port;
  }
  throw std::runtime_error("no free loopback port below the ephemeral range");
}

}  // namespace metaload::testing
