// What clients can make a daemon hold (issue 13, "Limits"): real metad processes with small
// limits in their node config, readers that open streams and never read (their HTTP/2 window
// stays closed, so the daemon's writes wait), and the daemon's resident memory read from
// /proc while they wait and after they go.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/serving/read_range/stream_table.h"
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

// A stream whose reader never reads: its window (64 KiB, not grown by BDP probing) fills with
// the first chunk, and the daemon's write waits until the stream is cancelled.
struct StalledStream {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<v1::ReadRangeChunk>> reader;
};

class LimitsTest : public ::testing::Test {
 protected:
  // A daemon with `limits` lines of config and a sparse 64 MiB tensor (after its header)
  // under its root, which Stall publishes as model "m" the first time.
  void Start(const std::string& limits) {
    ::mkdir(dir_.File("root").c_str(), 0755);
    WriteFileOrDie(dir_.File("root/model.safetensors"), testing::OneTensorHeader(4096, 8192));
    ASSERT_EQ(::truncate(dir_.File("root/model.safetensors").c_str(),
                         static_cast<off_t>(testing::kOneTensorDataBegin + 64 * kMiB)),
              0);
    WriteFileOrDie(dir_.File("node.yaml"),
                   absl::StrCat("node: a\nlisten: 127.0.0.1:0\nroots: [", dir_.File("root"), "]\n", limits));
    process_ =
        std::make_unique<MetadProcess>(dir_.File("node.yaml"), std::vector<std::string>{}, dir_.File("log"));
    ASSERT_FALSE(process_->address().empty()) << ::metaload::testing::ReadFileOrDie(dir_.File("log"));
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 10);
    stub_ = v1::Metad::NewStub(
        grpc::CreateCustomChannel(process_->address(), grpc::InsecureChannelCredentials(), args));
  }

  std::unique_ptr<StalledStream> Stall(uint64_t length = 64 * kMiB) {
    if (!published_) {
      // ReadRange serves only bytes of registered tensors: BF16 [4096, 8192] is the 64 MiB.
      grpc::ClientContext ctx;
      v1::PublishModelRequest publish;
      *publish.mutable_model() = testing::OneTensorModel(dir_.File("root"), 4096, 8192);
      v1::PublishModelResponse response;
      grpc::Status published = PublishModel(*stub_, &ctx, publish, &response);
      EXPECT_TRUE(published.ok()) << published.error_message();
      published_ = true;
    }
    auto stream = std::make_unique<StalledStream>();
    stream->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::ReadRangeRequest request;
    request.set_model("m");
    request.set_path(dir_.File("root/model.safetensors"));
    request.set_offset(testing::kOneTensorDataBegin);
    request.set_length(length);
    stream->reader = stub_->ReadRange(&stream->ctx, request);
    return stream;
  }

  // `count` stalled streams, once the daemon serves them all.
  std::vector<std::unique_ptr<StalledStream>> StallMany(int count) {
    std::vector<std::unique_ptr<StalledStream>> held;
    for (int i = 0; i < count; ++i) held.push_back(Stall());
    EXPECT_EQ(AwaitStreams(count), static_cast<uint32_t>(count));
    return held;
  }

  // The status a stream ends with, cancelling it first when `cancel`.
  static grpc::Status End(StalledStream& stream, bool cancel = true) {
    if (cancel) stream.ctx.TryCancel();
    v1::ReadRangeChunk chunk;
    while (stream.reader->Read(&chunk)) {
    }
    return stream.reader->Finish();
  }

  uint32_t StreamsInFlight() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::GetStatusResponse status;
    EXPECT_TRUE(stub_->GetStatus(&ctx, v1::GetStatusRequest(), &status).ok());
    return status.streams_in_flight();
  }

  // Polls GetStatus until `want` streams are in flight or `timeout` passes; the last count.
  uint32_t AwaitStreams(uint32_t want, absl::Duration timeout = absl::Seconds(10)) {
    const absl::Time end = absl::Now() + timeout;
    uint32_t now = StreamsInFlight();
    while (now != want && absl::Now() < end) {
      absl::SleepFor(absl::Milliseconds(50));
      now = StreamsInFlight();
    }
    return now;
  }

  // False in a sanitizer build (scripts/setup.sh sanitize sets METALOAD_SANITIZED): ASan's
  // quarantine and shadow memory keep freed bytes resident, so RSS bounds say nothing there;
  // the plain build, which CI runs, asserts them.
  static bool MemoryIsMeasurable() { return std::getenv("METALOAD_SANITIZED") == nullptr; }

  // The daemon's resident memory now (VmRSS), in bytes.
  uint64_t ResidentBytes() const { return process_->ResidentBytes(); }

  // Resident memory once it has stopped falling: the daemon hands freed memory back within
  // its stream sweeper's period (a second) of the last stream going.
  uint64_t SettledResidentBytes() {
    absl::SleepFor(absl::Milliseconds(1200));
    uint64_t last = ResidentBytes();
    for (int i = 0; i < 20; ++i) {
      absl::SleepFor(absl::Milliseconds(100));
      const uint64_t now = ResidentBytes();
      if (now + kMiB >= last) return now;
      last = now;
    }
    return last;
  }

  TempDir dir_;
  std::unique_ptr<MetadProcess> process_;
  std::unique_ptr<v1::Metad::Stub> stub_;
  bool published_ = false;
};

TEST(PeerHost, IsTheHostOfEveryPeerForm) {
  EXPECT_EQ(PeerHost("ipv4:127.0.0.1:41234"), "127.0.0.1");
  EXPECT_EQ(PeerHost("ipv6:[::1]:41234"), "[::1]");
  EXPECT_EQ(PeerHost("ipv6:%5B::1%5D:41234"), "[::1]");
  EXPECT_EQ(PeerHost("unix:/run/metad.sock"), "unix");
  EXPECT_EQ(PeerHost("garbage"), "garbage");
}

TEST_F(LimitsTest, AStreamPastMaxStreamsPerClientIsRefusedNamingTheKey) {
  Start("max_streams: 8\nmax_streams_per_client: 4\n");
  std::vector<std::unique_ptr<StalledStream>> held = StallMany(4);
  auto extra = Stall();
  grpc::Status refused = End(*extra, /*cancel=*/false);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_EQ(refused.error_message(),
            "a: 4 ReadRange streams from 127.0.0.1 already in flight (max_streams_per_client)");
  // One goes: the next is admitted.
  EXPECT_EQ(End(*held.back()).error_code(), grpc::StatusCode::CANCELLED);
  held.pop_back();
  ASSERT_EQ(AwaitStreams(3), 3u);
  held.push_back(Stall());
  EXPECT_EQ(AwaitStreams(4), 4u);
  for (auto& stream : held) End(*stream);
}

TEST_F(LimitsTest, AStreamPastMaxStreamsIsRefusedNamingTheKey) {
  Start("max_streams: 3\n");  // max_streams_per_client follows it down to 3
  std::vector<std::unique_ptr<StalledStream>> held = StallMany(3);
  auto extra = Stall();
  grpc::Status refused = End(*extra, /*cancel=*/false);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_NE(refused.error_message().find("a: 3 ReadRange streams already in flight (max_streams)"),
            std::string::npos)
      << refused.error_message();
  for (auto& stream : held) End(*stream);
}

// The documented ceiling (docs/node-config.md, "Limits and memory"): each stalled stream holds
// at most two chunk buffers, so max_streams of them hold max_streams x 2 x chunk_size over
// the daemon's baseline, plus gRPC's own per-stream buffers; all of it goes when they do.
TEST_F(LimitsTest, StalledStreamsHoldAtMostTwoChunksEachAndFreeThemWhenGone) {
  constexpr int kStreams = 128;
  constexpr uint64_t kChunk = 256 << 10;
  Start(absl::StrCat("max_streams: ", kStreams, "\nmax_streams_per_client: ", kStreams,
                     "\nchunk_size: 256KiB\n"));
  const uint64_t baseline = SettledResidentBytes();
  std::vector<std::unique_ptr<StalledStream>> held = StallMany(kStreams);
  absl::SleepFor(absl::Milliseconds(500));  // every read-ahead done
  const uint64_t stalled = ResidentBytes();
  const uint64_t window = kStreams * 2 * kChunk;
  RecordProperty("baseline_bytes", std::to_string(baseline));
  RecordProperty("stalled_bytes", std::to_string(stalled));
  std::cout << "metad RSS: baseline " << baseline / kMiB << " MiB, " << kStreams << " stalled streams "
            << stalled / kMiB << " MiB (" << (stalled - baseline) / kStreams / 1024 << " KiB a stream)\n";
  if (MemoryIsMeasurable()) {
    EXPECT_LT(stalled, baseline + window + window / 4 + 16 * kMiB)
        << "more than two " << kChunk << "-byte chunks a stream";
    EXPECT_GT(stalled, baseline + window / 2) << "the streams hold no chunk: the test no longer stalls them";
  }
  // Also past the limit, a reader gets its answer at once, holding nothing.
  auto extra = Stall();
  EXPECT_EQ(End(*extra, /*cancel=*/false).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);

  for (auto& stream : held) End(*stream);
  held.clear();
  ASSERT_EQ(AwaitStreams(0), 0u);
  const uint64_t after = SettledResidentBytes();
  std::cout << "metad RSS after they went: " << after / kMiB << " MiB\n";
  if (MemoryIsMeasurable()) {
    EXPECT_LT(after, baseline + baseline / 5 + 64 * kChunk) << "the pool keeps at most 64 buffers";
  }
}

// Issue 13: 300 one-byte reads held a zero-filled 1 MiB buffer each.
TEST_F(LimitsTest, OneByteStreamsDoNotHoldAWholeChunkEach) {
  constexpr int kStreams = 300;
  Start("max_streams: 512\nmax_streams_per_client: 512\n");
  const uint64_t baseline = SettledResidentBytes();
  std::vector<std::unique_ptr<StalledStream>> held;
  for (int i = 0; i < kStreams; ++i) held.push_back(Stall(/*length=*/1));
  for (auto& stream : held) {  // every one served
    v1::ReadRangeChunk chunk;
    EXPECT_TRUE(stream->reader->Read(&chunk));
    EXPECT_EQ(chunk.data().size(), 1u);
  }
  const uint64_t with_streams = ResidentBytes();
  std::cout << "metad RSS: baseline " << baseline / kMiB << " MiB, after " << kStreams << " one-byte streams "
            << with_streams / kMiB << " MiB\n";
  if (MemoryIsMeasurable()) {
    EXPECT_LT(with_streams, baseline + 24 * kMiB) << kStreams << " one-byte streams held whole chunks";
  }
  for (auto& stream : held) EXPECT_TRUE(End(*stream, /*cancel=*/false).ok());
}

TEST_F(LimitsTest, AStreamNotReadForIdleStreamTimeoutIsCancelledAndFreed) {
  Start("idle_stream_timeout: 1s\n");
  const uint64_t baseline = SettledResidentBytes();
  std::vector<std::unique_ptr<StalledStream>> held = StallMany(8);
  const absl::Time stalled_at = absl::Now();
  EXPECT_EQ(AwaitStreams(0, absl::Seconds(5)), 0u) << "idle streams were not cancelled";
  const absl::Duration took = absl::Now() - stalled_at;
  EXPECT_GE(took, absl::Milliseconds(900));
  EXPECT_LT(took, absl::Seconds(3));
  for (auto& stream : held)
    EXPECT_EQ(End(*stream, /*cancel=*/false).error_code(), grpc::StatusCode::CANCELLED);
  if (MemoryIsMeasurable()) {
    EXPECT_LT(SettledResidentBytes(), baseline + baseline / 5);
  }
  EXPECT_NE(::metaload::testing::ReadFileOrDie(dir_.File("log")).find("(idle_stream_timeout)"),
            std::string::npos);
}

TEST_F(LimitsTest, AReaderThatKeepsReadingIsNotIdle) {
  Start("idle_stream_timeout: 1s\nchunk_size: 64KiB\n");
  auto stream = Stall(/*length=*/64 * kMiB);
  v1::ReadRangeChunk chunk;
  // A chunk every 0.3 s for 2.4 s: longer than the timeout, never idle for it.
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(stream->reader->Read(&chunk)) << "cancelled after " << i << " chunks";
    absl::SleepFor(absl::Milliseconds(300));
  }
  EXPECT_EQ(StreamsInFlight(), 1u);
  End(*stream);
}

TEST_F(LimitsTest, ModelsPastMaxModelsOrMaxTensorsPerModelAreRefusedNamingTheKey) {
  Start("max_models: 1\nmax_tensors_per_model: 2\n");
  auto publish = [&](const v1::ModelRecord& record) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::PublishModelRequest request;
    *request.mutable_model() = record;
    v1::PublishModelResponse response;
    return PublishModel(*stub_, &ctx, request, &response);
  };
  grpc::Status too_many_tensors = publish(testing::SmallTensorsModel("big", dir_.File("root"), 3));
  EXPECT_EQ(too_many_tensors.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(
      too_many_tensors.error_message(),
      "model big has 3 tensors; this daemon registers at most 2 per model (max_tensors_per_model in its "
      "node config)");
  // The skeleton counts too: one checkpoint tensor beside a skeleton of 20,000.
  v1::ModelRecord wide = testing::SmallTensorsModel("wide", dir_.File("root"), 1);
  wide.set_skeleton_json(testing::SmallTensorsModel("wide", dir_.File("root"), 20'000).skeleton_json());
  grpc::Status wide_skeleton = publish(wide);
  EXPECT_EQ(wide_skeleton.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(wide_skeleton.error_message(),
            "model wide's skeleton has 20000 tensors; this daemon registers at most 2 per model "
            "(max_tensors_per_model in its node config)");
  ASSERT_TRUE(publish(testing::SmallTensorsModel("m1", dir_.File("root"), 2)).ok());
  EXPECT_TRUE(publish(testing::SmallTensorsModel("m1", dir_.File("root"), 2)).ok())
      << "the same model again is no new model";
  grpc::Status too_many_models = publish(testing::SmallTensorsModel("m2", dir_.File("root"), 1));
  EXPECT_EQ(too_many_models.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(
      too_many_models.error_message(),
      "1 models are registered, the most this daemon holds (max_models in its node config); unregister some");
}

TEST_F(LimitsTest, ARequestOverMaxRequestSizeIsRefusedBeforeTheDaemonReadsIt) {
  Start("max_request_size: 1MiB\n");
  v1::ModelRecord record = testing::SmallTensorsModel("m", dir_.File("root"), 1);
  record.set_checkpoint_dir(std::string(2 << 20, 'x'));  // a 2 MiB request
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::PublishModelRequest request;
  *request.mutable_model() = record;
  v1::PublishModelResponse response;
  grpc::Status refused = PublishModel(*stub_, &ctx, request, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_EQ(refused.error_message(), absl::StrCat("a: PublishModel: the request is ", request.ByteSizeLong(),
                                                  " bytes, over max_request_size (1048576 bytes)"));
  EXPECT_EQ(StreamsInFlight(), 0u) << "the daemon answers on";
}

TEST(LimitsConfig, ABadLimitStopsMetadWithExitCode2) {
  for (const char* bad : {"max_streams: 0", "max_streams_per_client: -1", "max_request_size: 1KiB",
                          "idle_stream_timeout: 0s", "max_models: 2000", "max_tensors_per_model: 5000000"}) {
    TempDir dir;
    WriteFileOrDie(dir.File("node.yaml"), absl::StrCat("node: a\nlisten: 127.0.0.1:0\n", bad, "\n"));
    MetadProcess process(dir.File("node.yaml"), {}, dir.File("log"));
    EXPECT_EQ(process.ExitCodeWithin(10), 2) << bad;
    const std::string key(bad, std::string(bad).find(':'));
    EXPECT_NE(::metaload::testing::ReadFileOrDie(dir.File("log"))
                  .find(absl::StrCat(dir.File("node.yaml"), ": ", key, ":")),
              std::string::npos)
        << bad;
  }
}

}  // namespace
}  // namespace metaload
