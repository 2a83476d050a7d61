// A ReadRange client for tests to kill mid-stream (tests/integration/robustness/test_abuse.py): it starts
// one stream of [OFFSET, OFFSET + LENGTH) of PATH (a file of registered model MODEL) from the
// daemon at ADDRESS, prints
// "streaming N" to stdout once the first chunk (N payload bytes) arrived, then stops reading and
// waits to be killed, so that the daemon holds a stream stalled on flow control, as with a rank
// that died mid-load. Exits 1 (with the status on stderr) if the stream ends before a chunk.
// It starts in a fraction of the time metactl takes (no LibTorch), so that a test can kill a
// hundred of them one after another.
//
//   build/tests/held_stream_client ADDRESS MODEL PATH OFFSET LENGTH
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "proto/metaload.grpc.pb.h"
#include "tests/daemon/range_request_argv.h"

int main(int argc, char** argv) {
  std::unique_ptr<metaload::v1::Metad::Stub> stub;
  metaload::v1::ReadRangeRequest request;
  if (!metaload::testing::ParseRangeRequestArgv(argc, argv, &stub, &request)) return 2;
  grpc::ClientContext ctx;
  auto reader = stub->ReadRange(&ctx, request);
  metaload::v1::ReadRangeChunk chunk;
  if (!reader->Read(&chunk)) {
    grpc::Status status = reader->Finish();
    std::fprintf(stderr, "stream ended before a chunk: %d %s\n", status.error_code(),
                 status.error_message().c_str());
    return 1;
  }
  std::printf("streaming %zu\n", chunk.data().size());
  std::fflush(stdout);
  for (;;) ::pause();
}
