// Sends one ReadRange, as a hostile or careless client might, and prints how the daemon answered:
// "OK <bytes received>" or "<gRPC code name> <message>" (exit 0 either way; 2 for bad usage).
// The integration tests (test_served_ranges.py) have no gRPC of their own in Python.
//
//   build/tests/read_range_probe ADDRESS MODEL PATH OFFSET LENGTH
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "proto/metaload.grpc.pb.h"
#include "tests/daemon/range_request_argv.h"

int main(int argc, char** argv) {
  std::unique_ptr<metaload::v1::Metad::Stub> stub;
  metaload::v1::ReadRangeRequest request;
  if (!metaload::testing::ParseRangeRequestArgv(argc, argv, &stub, &request)) return 2;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto reader = stub->ReadRange(&ctx, request);
  metaload::v1::ReadRangeChunk chunk;
  uint64_t received = 0;
  while (reader->Read(&chunk)) received += chunk.data().size();
  const grpc::Status status = reader->Finish();
  if (status.ok()) {
    std::printf("OK %llu\n", static_cast<unsigned long long>(received));
  } else {
    const std::string code = absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()));
    std::printf("%s %s\n", code.c_str(), status.error_message().c_str());
  }
  return 0;
}
