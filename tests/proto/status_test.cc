// absl::Status <-> grpc::Status (proto/convert.h): a status's kind (util/error_kind.h) crosses
// gRPC in error_details, so that a FailedPrecondition keeps its kind on the client (a refused
// register's bad input exits 2, a meta tensor 3), through an agent that forwards it too; a
// status without one goes as it always went.
#include <gtest/gtest.h>

#include <string>

#include "proto/chunk_wire.h"
#include "proto/convert.h"
#include "util/error_kind.h"

namespace metaload {
namespace {

TEST(StatusConversion, AKindCrossesGrpcAndAForwardingAgent) {
  const absl::Status refused = MetaTensorError("model m: 1 tensor would stay on meta: score.weight");
  const grpc::Status wire = ToGrpcStatus(refused);
  EXPECT_EQ(wire.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(wire.error_message(), refused.message());
  EXPECT_FALSE(wire.error_details().empty());
  const absl::Status received = FromGrpcStatus(wire, "registering m on 127.0.0.1:7070");
  EXPECT_EQ(received.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(received.message(), "registering m on 127.0.0.1:7070: " + std::string(refused.message()));
  EXPECT_EQ(KindOf(received), ErrorKind::kMetaTensor);
  // An agent forwards its coordinator's answer: the kind arrives all the same.
  EXPECT_EQ(KindOf(FromGrpcStatus(ToGrpcStatus(received), "agent")), ErrorKind::kMetaTensor);
  const absl::Status not_a_file =
      WithErrorKind(absl::FailedPreconditionError("/m/x is not a regular file"), ErrorKind::kBadInput);
  EXPECT_EQ(KindOf(FromGrpcStatus(ToGrpcStatus(not_a_file), "reading")), ErrorKind::kBadInput);
}

TEST(StatusConversion, DetailsAreAGoogleRpcStatusOfTheCodeAndOneAnyPerPayload) {
  const std::string details = ToGrpcStatus(MetaTensorError("x")).error_details();
  ASSERT_GE(details.size(), 4u);
  EXPECT_EQ(details.substr(0, 2), std::string("\x08\x09", 2)) << "field 1 (code): FAILED_PRECONDITION";
  EXPECT_EQ(details[2], '\x1a') << "field 3 (details): a google.protobuf.Any";
  EXPECT_NE(details.find(std::string(kErrorKindUrl)), std::string::npos);
  EXPECT_NE(details.find("meta_tensor"), std::string::npos);
}

TEST(StatusConversion, AStatusWithoutKindGoesAsBeforeAndIsAFailure) {
  // A daemon's "not the coordinator" (and "has no coordinator"): state to fix, exit 1.
  const grpc::Status wire = ToGrpcStatus(absl::FailedPreconditionError("node-b is not the coordinator"));
  EXPECT_EQ(wire.error_details(), "");
  const absl::Status received = FromGrpcStatus(wire, "publishing to coordinator node-b");
  EXPECT_EQ(received.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(KindOf(received), ErrorKind::kFailure);
}

TEST(StatusConversion, DetailsThatDoNotParseAreIgnored) {
  for (const std::string& garbage :
       {std::string("\xff\xff\xff"), std::string("\x1a\x7f"), std::string("\x1a\x02\x0a\x7f")}) {
    const absl::Status received =
        FromGrpcStatus(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "m", garbage), "call");
    EXPECT_EQ(received.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(received.message(), "call: m");
    EXPECT_EQ(KindOf(received), ErrorKind::kFailure);
  }
}

TEST(StatusConversion, AChunkWithoutChecksumIsAFailureOfAnOlderDaemon) {
  grpc::ByteBuffer buffer = EncodeChunk(0, 0, grpc::Slice(std::string(4, 's')), std::nullopt);
  std::vector<uint8_t> dest(4);
  absl::StatusOr<ChunkHeader> header =
      DecodeChunkInto(buffer, absl::MakeSpan(dest), ChunkCheck{"/m/model.safetensors", "10.0.0.7:7070"});
  ASSERT_EQ(header.status().code(), absl::StatusCode::kFailedPrecondition) << header.status();
  EXPECT_EQ(KindOf(header.status()), ErrorKind::kFailure) << "upgrade that daemon: state to fix, exit 1";
}

}  // namespace
}  // namespace metaload
