// ADDRESS MODEL PATH OFFSET LENGTH, as the test tools that send one raw ReadRange take them
// (held_stream_client, tests/integration/read_range_probe): the stub and the request.
#ifndef METALOAD_TESTS_DAEMON_RANGE_REQUEST_ARGV_H_
#define METALOAD_TESTS_DAEMON_RANGE_REQUEST_ARGV_H_

#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "proto/metaload.grpc.pb.h"

namespace metaload::testing {

// False (usage printed) unless argv holds the five arguments.
inline bool ParseRangeRequestArgv(int argc, char** argv, std::unique_ptr<v1::Metad::Stub>* stub,
                                  v1::ReadRangeRequest* request) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s ADDRESS MODEL PATH OFFSET LENGTH\n", argv[0]);
    return false;
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  *stub = v1::Metad::NewStub(grpc::CreateCustomChannel(argv[1], grpc::InsecureChannelCredentials(), args));
  request->set_model(argv[2]);
  request->set_path(argv[3]);
  request->set_offset(std::strtoull(argv[4], nullptr, 10));
  request->set_length(std::strtoull(argv[5], nullptr, 10));
  return true;
}

}  // namespace metaload::testing

#endif  // METALOAD_TESTS_DAEMON_RANGE_REQUEST_ARGV_H_
