// Sends one ReadRange, as a hostile or careless client might, and prints how the daemon answered:
// "OK <bytes received>" or "<gRPC code name> <message>" (exit 0 either way; 2 for bad usage).
// With BYTES_OUT, every payload byte received, refused stream or not, is written there, so that
// a test can tell which file's bytes came back, and that none did. The integration tests
// (test_served_ranges.py, test_swapped_files.py) have no gRPC of their own in Python.
//
//   build/tests/read_range_probe ADDRESS MODEL PATH OFFSET LENGTH [BYTES_OUT]
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "proto/metaload.grpc.pb.h"
#include "tests/daemon/range_request_argv.h"

int main(int argc, char** argv) {
  std::unique_ptr<metaload::v1::Metad::Stub> stub;
  metaload::v1::ReadRangeRequest request;
  const char* bytes_out = argc == 7 ? argv[6] : nullptr;
  if (!metaload::testing::ParseRangeRequestArgv(bytes_out == nullptr ? argc : 6, argv, &stub, &request))
    return 2;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto reader = stub->ReadRange(&ctx, request);
  metaload::v1::ReadRangeChunk chunk;
  uint64_t received = 0;
  std::string payload;
  while (reader->Read(&chunk)) {
    received += chunk.data().size();
    if (bytes_out != nullptr) payload += chunk.data();
  }
  const grpc::Status status = reader->Finish();
  if (bytes_out != nullptr && !(std::ofstream(bytes_out, std::ios::binary | std::ios::trunc) << payload)) {
    std::fprintf(stderr, "cannot write %s\n", bytes_out);
    return 2;
  }
  if (status.ok()) {
    std::printf("OK %llu\n", static_cast<unsigned long long>(received));
  } else {
    const std::string code = absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()));
    std::printf("%s %s\n", code.c_str(), status.error_message().c_str());
  }
  return 0;
}
