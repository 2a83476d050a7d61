// Malformed traffic on a real metad's gRPC port (issue 13 §4): calls no metaload client
// makes — a megabyte of metadata, bytes that are no protobuf, offsets that overflow, chunk
// sizes at the ends of their range, a method that does not exist — each answered with a
// fitting status, and each followed by a check that the daemon still serves a good read.
// Raw TCP garbage and HTTP/1.1 are in tests/integration/robustness/test_abuse.py.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/metaload.grpc.pb.h"
#include "proto/upload.h"
#include "tests/daemon/metad_process.h"
#include "tests/daemon/model_records.h"
#include "tests/test_support.h"
#include "util/units.h"

namespace metaload {
namespace {

using ::metaload::testing::MetadProcess;
using ::metaload::testing::TempDir;
using ::metaload::testing::WriteFileOrDie;

constexpr uint64_t kTensorBytes = 8 * kMiB;  // w: BF16 [2048, 2048], stored at [kDataBegin, + 8 MiB)
constexpr uint64_t kDataBegin = testing::kOneTensorDataBegin;
constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

// One daemon serving one published model of one 8 MiB tensor; reads stay inside its bytes.
class MalformedTrafficTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::mkdir(dir_.File("root").c_str(), 0755);
    std::string file = testing::OneTensorHeader(2048, 2048);
    file.resize(kDataBegin + kTensorBytes);
    for (size_t i = kDataBegin; i < file.size(); ++i) file[i] = static_cast<char>(i * 131 % 251);
    WriteFileOrDie(dir_.File("root/model.safetensors"), file);  // published by hand
    WriteFileOrDie(dir_.File("node.yaml"),
                   absl::StrCat("node: a\nlisten: 127.0.0.1:0\ngpus: 1\nroots: [", dir_.File("root"), "]\n"));
    process_ =
        std::make_unique<MetadProcess>(dir_.File("node.yaml"), std::vector<std::string>{}, dir_.File("log"));
    ASSERT_FALSE(process_->address().empty()) << testing::ReadFileOrDie(dir_.File("log"));
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    channel_ = grpc::CreateCustomChannel(process_->address(), grpc::InsecureChannelCredentials(), args);
    stub_ = v1::Metad::NewStub(channel_);
    ASSERT_TRUE(Publish().ok());
  }

  grpc::Status Publish() {
    v1::PublishModelRequest request;
    *request.mutable_model() = testing::OneTensorModel(dir_.File("root"), 2048, 2048);
    grpc::ClientContext ctx;
    v1::PublishModelResponse response;
    return PublishModel(*stub_, &ctx, request, &response);
  }

  v1::ReadRangeRequest Range(uint64_t offset, uint64_t length, uint32_t chunk_bytes = 0) const {
    v1::ReadRangeRequest request;
    request.set_model("m");
    request.set_path(dir_.File("root/model.safetensors"));
    request.set_offset(offset);
    request.set_length(length);
    request.set_chunk_bytes(chunk_bytes);
    return request;
  }

  // Reads a whole range; `chunk_sizes` gets each chunk's payload size.
  grpc::Status Read(const v1::ReadRangeRequest& request, std::vector<size_t>* chunk_sizes = nullptr,
                    std::string* bytes = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    auto reader = stub_->ReadRange(&ctx, request);
    v1::ReadRangeChunk chunk;
    while (reader->Read(&chunk)) {
      if (chunk_sizes != nullptr) chunk_sizes->push_back(chunk.data().size());
      if (bytes != nullptr) bytes->append(chunk.data());
    }
    return reader->Finish();
  }

  // The daemon still serves another client: a fresh channel reads the whole tensor, bit-exact.
  void ExpectStillServes() {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto fresh = v1::Metad::NewStub(
        grpc::CreateCustomChannel(process_->address(), grpc::InsecureChannelCredentials(), args));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    auto reader = fresh->ReadRange(&ctx, Range(kDataBegin, kTensorBytes));
    std::string bytes;
    v1::ReadRangeChunk chunk;
    while (reader->Read(&chunk)) bytes.append(chunk.data());
    grpc::Status s = reader->Finish();
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(bytes, testing::ReadFileOrDie(dir_.File("root/model.safetensors")).substr(kDataBegin));
  }

  // A unary call of `method` whose request is `payload`, as raw bytes.
  grpc::Status RawCall(const std::string& method, const std::string& payload) {
    grpc::GenericStub generic(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Slice slice(payload);
    grpc::ByteBuffer request(&slice, 1), response;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    grpc::Status result;
    generic.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
      std::lock_guard<std::mutex> lock(mu);
      result = std::move(s);
      done = true;
      cv.notify_one();
    });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    return result;
  }

  TempDir dir_;
  std::unique_ptr<MetadProcess> process_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Metad::Stub> stub_;
};

TEST_F(MalformedTrafficTest, AMegabyteOfMetadataIsRefusedAndTheDaemonServesOthers) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  ctx.AddMetadata("x-abuse", std::string(kMiB, 'a'));
  v1::GetStatusResponse status;
  grpc::Status s = stub_->GetStatus(&ctx, v1::GetStatusRequest(), &status);
  // gRPC's metadata limit (GRPC_ARG_MAX_METADATA_SIZE, 8 KiB by default) refuses it before the
  // service sees the call.
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  ExpectStillServes();
}

TEST_F(MalformedTrafficTest, BytesThatAreNoProtobufAreRefused) {
  for (const std::string& garbage : {std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11),
                                     std::string("\x0a\xff\xff\xff\xff\x0f", 6), std::string(64, '\x07')}) {
    grpc::Status s = RawCall("/metaload.v1.Metad/GetPlan", garbage);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_EQ(s.error_message(), "GetPlan: the request is not a GetPlanRequest");
    s = RawCall("/metaload.v1.Metad/ReadRange", garbage);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_EQ(s.error_message(), "ReadRange: the request is not a ReadRangeRequest");
  }
  ExpectStillServes();
}

TEST_F(MalformedTrafficTest, AnUnknownMethodIsUnimplemented) {
  grpc::Status s = RawCall("/metaload.v1.Metad/Format", "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED) << s.error_message();
  // The health service is served (grpc.health.v1, docs/operations.md); a method it lacks is not.
  s = RawCall("/grpc.health.v1.Health/Check", "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::OK) << s.error_message();
  s = RawCall("/grpc.health.v1.Health/Format", "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED) << s.error_message();
  ExpectStillServes();
}

TEST_F(MalformedTrafficTest, GetPlanOfAnUnknownModelIsNotFoundNamingIt) {
  grpc::ClientContext ctx;
  v1::GetPlanRequest request;
  request.set_model("no-such-model");
  request.set_world_size(1);
  v1::GetPlanResponse response;
  grpc::Status s = stub_->GetPlan(&ctx, request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_NE(s.error_message().find("no-such-model"), std::string::npos) << s.error_message();
  ExpectStillServes();
}

TEST_F(MalformedTrafficTest, OffsetsThatOverflowAreOutOfRange) {
  // Ranges whose last byte would lie past 2^64: refused before anything else looks at them.
  const std::vector<std::pair<uint64_t, uint64_t>> cases = {
      {kMax, 1},                               // -1 as uint64
      {kMax, kMax},                            // both
      {8, kMax},                               // offset + length wraps
      {uint64_t{1} << 63, uint64_t{1} << 63},  // wraps to exactly 0
  };
  for (auto [offset, length] : cases) {
    grpc::Status s = Read(Range(offset, length));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE)
        << offset << " +" << length << ": " << s.error_message();
    EXPECT_NE(s.error_message().find(absl::StrCat("range [", offset, ", +", length, ") of ")),
              std::string::npos)
        << s.error_message();
    EXPECT_NE(s.error_message().find("ends past 2^64 bytes"), std::string::npos) << s.error_message();
  }
  // Representable but outside the registered tensor (one past its end; a strided span far past
  // it): not served, whatever the file holds there.
  grpc::Status s = Read(Range(kDataBegin + kTensorBytes, 1));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_NE(s.error_message().find(absl::StrCat(
                "bytes [", kDataBegin + kTensorBytes, ", ", kDataBegin + 1 + kTensorBytes, ") of \"",
                dir_.File("root/model.safetensors"), "\" are not inside a tensor of registered model \"m\"")),
            std::string::npos)
      << s.error_message();
  v1::ReadRangeRequest strided = Range(kDataBegin, 2 * kMiB);
  strided.set_run_bytes(kMiB);
  strided.set_stride_bytes(kMax / 2 + 2);
  s = Read(strided);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  // Strided, and the span (runs - 1) * stride itself overflows.
  strided = Range(kDataBegin, 3 * kMiB);
  strided.set_run_bytes(kMiB);
  strided.set_stride_bytes(kMax / 2 + 2);
  s = Read(strided);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE) << s.error_message();
  ExpectStillServes();
}

TEST_F(MalformedTrafficTest, ChunkBytesZeroMeansTheDefault) {
  std::vector<size_t> sizes;
  std::string bytes;
  grpc::Status s = Read(Range(kDataBegin, 3 * kMiB, 0), &sizes, &bytes);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(sizes, (std::vector<size_t>{kMiB, kMiB, kMiB}));  // chunk_size's default, 1 MiB
  EXPECT_EQ(bytes, testing::ReadFileOrDie(dir_.File("root/model.safetensors")).substr(kDataBegin, 3 * kMiB));
}

// chunk_bytes is clamped to 4 KiB .. 3 MiB, as node.yaml's chunk_size is bounded (daemon/serving/
// range_writer.cc): a chunk always fits gRPC's default 4 MiB receive limit, and a tiny one cannot
// make a message per few bytes.
TEST_F(MalformedTrafficTest, ChunkBytesOutsideItsRangeIsClamped) {
  std::vector<size_t> sizes;
  std::string bytes;
  grpc::Status s = Read(Range(kDataBegin, 7 * kMiB, std::numeric_limits<uint32_t>::max()), &sizes, &bytes);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(sizes, (std::vector<size_t>{3 * kMiB, 3 * kMiB, kMiB}));
  EXPECT_EQ(bytes, testing::ReadFileOrDie(dir_.File("root/model.safetensors")).substr(kDataBegin, 7 * kMiB));
  sizes.clear();
  s = Read(Range(kDataBegin, 12 * 1024, 1), &sizes);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(sizes, (std::vector<size_t>{4096, 4096, 4096}));
  ExpectStillServes();
}

}  // namespace
}  // namespace metaload
