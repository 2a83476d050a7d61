// The standard gRPC health check (grpc.health.v1.Health/Check) of a metad, as Kubernetes' gRPC
// probe makes it: no token, no TLS, the service "" (the whole server). The integration tests
// have no gRPC in Python; the request and answer are encoded by hand (HealthCheckRequest
// {string service = 1}, HealthCheckResponse {ServingStatus status = 1}: SERVING 1,
// NOT_SERVING 2), through a generic stub.
//
//   build/tests/health_probe ADDRESS
//       Prints "status: SERVING", "status: NOT_SERVING" or "error: <code>: <message>".
// Exit 0 when SERVING, 1 when NOT_SERVING, 3 on an error (as grpc_health_probe does: 0 healthy).
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <vector>

#include "absl/status/status.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: health_probe ADDRESS\n");
    return 2;
  }
  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Slice empty;  // HealthCheckRequest{service: ""}: no field at all
  grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> answered;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&answered](grpc::Status s) { answered.set_value(std::move(s)); });
  const grpc::Status status = answered.get_future().get();
  if (!status.ok()) {
    std::printf("error: %s: %s\n",
                absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())).c_str(),
                status.error_message().c_str());
    return 3;
  }
  std::vector<grpc::Slice> slices;
  (void)response.Dump(&slices);
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  // Field 1, varint: 0x08 then the status (an empty message is UNKNOWN, 0).
  const int value = bytes.size() == 2 && bytes[0] == 0x08 ? bytes[1] : bytes.empty() ? 0 : -1;
  const char* names[] = {"UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"};
  if (value < 0 || value > 3) {
    std::printf("error: an answer that is not a HealthCheckResponse (%zu bytes)\n", bytes.size());
    return 3;
  }
  std::printf("status: %s\n", names[value]);
  return value == 1 ? 0 : 1;
}
