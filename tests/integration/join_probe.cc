// A hostile member credential holder, for the integration tests (test_member_flood.py), which
// have no gRPC of their own in Python (issue 35). Credentials come from METALOAD_TOKEN_FILE and
// METALOAD_TLS_CA/CERT/KEY, as any client's.
//
//   build/tests/join_probe ADDRESS flood PREFIX COUNT [ROOTS [ROOT_BYTES]]
//       Joins COUNT made-up names PREFIX0 .. PREFIX<COUNT-1> from 8 threads, each with ROOTS
//       roots (default 0) of ROOT_BYTES bytes (default 64). Prints
//       "joined J refused R in MS ms" and, when one was refused, "first <code> <message>".
//   build/tests/join_probe ADDRESS join NAME [ROOTS [ROOT_BYTES]]
//       One Join: "OK MS" or "<code> MS <message>".
//   build/tests/join_probe ADDRESS status READERS
//       READERS GetStatus calls at once, each read whole (no receive limit): one line each,
//       "OK MS BYTES" or "<code> MS <message>".
// Exit 0 when the calls were made (whatever they answered), 2 for bad usage or credentials.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "proto/metaload.grpc.pb.h"
#include "security/client_credentials.h"

namespace {

using Clock = std::chrono::steady_clock;

int64_t MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

std::string CodeName(const grpc::Status& status) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()));
}

// A made-up node: an address nobody serves, `roots` distinct roots of `root_bytes` bytes each.
metaload::v1::JoinRequest MadeUpJoin(const std::string& name, int roots, int root_bytes) {
  metaload::v1::JoinRequest request;
  metaload::v1::NodeInfo* node = request.mutable_node();
  node->set_name(name);
  node->set_address("127.0.0.1:9");
  node->set_gpu_count(1);
  node->set_gpu_memory_bytes(uint64_t{1} << 30);
  for (int r = 0; r < roots; ++r) {
    std::string root = absl::StrCat("/r", r, "/");
    root.resize(std::max<size_t>(root.size() + 1, static_cast<size_t>(root_bytes)), 'x');
    node->add_roots(root);
  }
  return request;
}

grpc::Status Join(metaload::v1::Metad::Stub& stub, const metaload::v1::JoinRequest& request) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  metaload::v1::JoinResponse response;
  return stub.Join(&ctx, request, &response);
}

int Flood(metaload::v1::Metad::Stub& stub, const std::string& prefix, int count, int roots, int root_bytes) {
  std::atomic<int> next{0}, joined{0}, refused{0};
  std::mutex mu;
  std::string first;
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = next++; i < count; i = next++) {
        const grpc::Status status = Join(stub, MadeUpJoin(absl::StrCat(prefix, i), roots, root_bytes));
        if (status.ok()) {
          ++joined;
          continue;
        }
        ++refused;
        std::lock_guard<std::mutex> lock(mu);
        if (first.empty()) first = absl::StrCat(CodeName(status), " ", status.error_message());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::printf("joined %d refused %d in %lld ms\n", joined.load(), refused.load(),
              static_cast<long long>(MillisecondsSince(start)));
  if (!first.empty()) std::printf("first %s\n", first.c_str());
  return 0;
}

int Status(const std::string& address, int readers) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  std::vector<std::string> lines(readers);
  std::vector<std::thread> threads;
  for (int r = 0; r < readers; ++r) {
    threads.emplace_back([&, r] {
      // A channel each: the calls run at once, as from several hosts.
      absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = metaload::DialDaemon(address, args);
      if (!channel.ok()) {
        lines[r] = absl::StrCat("DIAL 0 ", channel.status().message());
        return;
      }
      auto stub = metaload::v1::Metad::NewStub(*channel);
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
      metaload::v1::GetStatusResponse response;
      const Clock::time_point start = Clock::now();
      const grpc::Status status = stub->GetStatus(&ctx, metaload::v1::GetStatusRequest(), &response);
      const int64_t ms = MillisecondsSince(start);
      lines[r] = status.ok() ? absl::StrCat("OK ", ms, " ", response.ByteSizeLong())
                             : absl::StrCat(CodeName(status), " ", ms, " ", status.error_message());
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& line : lines) std::printf("%s\n", line.c_str());
  return 0;
}

bool ParseCount(const char* text, int max, int* out) {
  return absl::SimpleAtoi(text, out) && *out >= 0 && *out <= max;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: join_probe ADDRESS flood PREFIX COUNT [ROOTS [ROOT_BYTES]] | join NAME [ROOTS "
                 "[ROOT_BYTES]] | status READERS\n");
    return 2;
  }
  const std::string address = argv[1], mode = argv[2];
  if (mode == "status") {
    int readers = 0;
    if (!ParseCount(argv[3], 256, &readers)) return 2;
    return Status(address, readers);
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = metaload::DialDaemon(address);
  if (!channel.ok()) {
    std::fprintf(stderr, "%s\n", std::string(channel.status().message()).c_str());
    return 2;
  }
  auto stub = metaload::v1::Metad::NewStub(*channel);
  const int extra = mode == "flood" ? 5 : 4;  // where ROOTS is
  int count = 1, roots = 0, root_bytes = 64;
  if ((mode == "flood" && (argc < 5 || !ParseCount(argv[4], 1 << 20, &count))) ||
      (argc > extra && !ParseCount(argv[extra], 1024, &roots)) ||
      (argc > extra + 1 && !ParseCount(argv[extra + 1], 1 << 20, &root_bytes))) {
    std::fprintf(stderr, "join_probe: bad count\n");
    return 2;
  }
  if (mode == "flood") return Flood(*stub, argv[3], count, roots, root_bytes);
  if (mode != "join") return 2;
  const Clock::time_point start = Clock::now();
  const grpc::Status status = Join(*stub, MadeUpJoin(argv[3], roots, root_bytes));
  const int64_t ms = MillisecondsSince(start);
  if (status.ok()) {
    std::printf("OK %lld\n", static_cast<long long>(ms));
  } else {
    std::printf("%s %lld %s\n", CodeName(status).c_str(), static_cast<long long>(ms),
                status.error_message().c_str());
  }
  return 0;
}
