// A rank's fill (client/read/fill.h) through disks that fail, in-process: the rank's own direct
// reads go through a FaultFileSystem (ReadSettings::file_system), and so do the ReadRange reads
// of the daemons it streams from (real MetadServices in this process, ServiceSeams::file_system:
// tests/daemon/service/checkpoint_daemon.h). Each test names the fault and the exact outcome:
// which source delivered which bytes, each failover, and the error a target is left with.
//
// The checkpoint: model.safetensors with two U8 tensors of 4 MiB, "a.weight" then "b.weight";
// each target is one piece (pieces.h: 16 MiB), read by one thread, so the order is fixed.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/read/fill.h"
#include "tests/daemon/service/checkpoint_daemon.h"
#include "tests/faults/fault_file_system.h"
#include "tests/test_support.h"
#include "util/hash/tile_digest.h"
#include "util/units.h"

namespace metaload {
namespace {

constexpr int64_t kTensorBytes = 4 << 20;
constexpr char kFile[] = "/m/model.safetensors";  // the faults' path suffix

class FillFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::canonical(dir_.path()).string();
    checkpoint_ = root_ + "/m";
    ASSERT_TRUE(testing::WriteTestCheckpoint(checkpoint_, {"a.weight", "b.weight"}, kTensorBytes).ok());
    path_ = root_ + kFile;
    file_bytes_ = testing::ReadFileOrDie(path_);
  }

  // Model "m" as `daemon` lays it out (GetLayout, as materialize asks), registered there first;
  // `more` are further servers of its file, in this order.
  ModelLayout Layout(testing::CheckpointDaemon& daemon,
                     const std::vector<testing::CheckpointDaemon*>& more = {}, bool digest = false) {
    EXPECT_TRUE(daemon.Register("m", checkpoint_, digest).ok());
    for (testing::CheckpointDaemon* other : more) EXPECT_TRUE(other->Register("m", checkpoint_).ok());
    absl::StatusOr<ModelLayout> layout = DaemonClient(daemon.address()).GetLayout("m", absl::Seconds(30));
    EXPECT_TRUE(layout.ok()) << layout.status();
    if (!layout.ok()) return {};
    for (auto& [file, route] : layout->files) {
      for (testing::CheckpointDaemon* other : more)
        route.servers.push_back({other->node(), other->address()});
    }
    return *std::move(layout);
  }

  static const TensorLayout& Stored(const ModelLayout& layout, const std::string& name) {
    for (const TensorLayout& t : layout.tensors) {
      if (t.name == name) return t;
    }
    ADD_FAILURE() << name << " is not in the layout";
    return layout.tensors.front();
  }

  // Reads a.weight then b.weight of `layout`, whole, into fresh CPU tensors (targets_), with one
  // thread, the rank's direct reads through rank_disk_; `source` and `stall_timeout` as given.
  FillOutcome Fill(const ModelLayout& layout, Source source = Source::kAuto,
                   absl::Duration stall_timeout = absl::Seconds(30)) {
    targets_.clear();
    for (const char* name : {"a.weight", "b.weight"}) {
      FillTarget& target = targets_.emplace_back();
      target.name = name;
      target.stored = Stored(layout, name);
      target.dest = torch::zeros({kTensorBytes}, torch::kUInt8);
    }
    FillSettings settings;
    settings.model = "m";
    settings.read.source = source;
    settings.read.read_threads = 1;
    settings.read.stall_timeout = stall_timeout;
    settings.read.file_system = &rank_disk_;
    settings.read.retry.first_backoff = absl::Milliseconds(10);
    absl::StatusOr<FillOutcome> outcome = FillTargets(targets_, layout.files, settings);
    EXPECT_TRUE(outcome.ok()) << outcome.status();
    if (outcome.ok()) return *std::move(outcome);
    FillOutcome failed;
    failed.results.resize(targets_.size());  // every target unfilled
    return failed;
  }

  // What the file holds where `t` is stored, and what target `i` holds now.
  std::string StoredBytes(const TensorLayout& t) const {
    return file_bytes_.substr(t.begin_offset, t.size_bytes());
  }
  std::string Held(size_t i) const {
    return std::string(static_cast<const char*>(targets_[i].dest.data_ptr()), targets_[i].dest.nbytes());
  }
  // Both targets hold exactly their stored bytes.
  void ExpectBitExact() const {
    for (size_t i = 0; i < targets_.size(); ++i) EXPECT_EQ(Held(i), StoredBytes(targets_[i].stored)) << i;
  }

  static void ExpectOneFailover(const FillResult& result, const std::string& from, const std::string& to,
                                uint64_t at_byte, const std::string& error) {
    ASSERT_EQ(result.failovers.size(), 1u);
    EXPECT_EQ(result.failovers[0].from, from);
    EXPECT_EQ(result.failovers[0].to, to);
    EXPECT_EQ(result.failovers[0].at_byte, at_byte);
    EXPECT_EQ(result.failovers[0].error, error);
  }

  testing::TempDir dir_;
  std::string root_, checkpoint_, path_, file_bytes_;
  FaultFileSystem rank_disk_;  // no fault until a test adds one
  std::vector<FillTarget> targets_;
};

TEST_F(FillFaultsTest, ADirectReadThatHitsEioFailsOverToTheDaemonServingTheFile) {
  testing::CheckpointDaemon a("node-a", root_);
  ModelLayout layout = Layout(a);
  const uint64_t eio_at = Stored(layout, "b.weight").begin_offset + kMiB;
  rank_disk_.Add({.kind = FileFault::kEio, .path_suffix = kFile, .at_byte = eio_at});

  FillOutcome outcome = Fill(layout);
  const FillResult& read_a = outcome.results[0];
  EXPECT_TRUE(read_a.filled) << read_a.error;
  EXPECT_EQ(read_a.provenance.kind, Provenance::Kind::kDirect) << "its bytes lie before the fault";
  EXPECT_TRUE(read_a.failovers.empty());
  const FillResult& read_b = outcome.results[1];
  EXPECT_TRUE(read_b.filled) << read_b.error;
  EXPECT_EQ(read_b.provenance.kind, Provenance::Kind::kStream) << "no byte of it came from the disk";
  EXPECT_EQ(read_b.provenance.nodes, std::vector<std::string>{"node-a"});
  // A failed direct read keeps nothing: the stream starts at byte 0.
  ExpectOneFailover(read_b, "direct", "node-a", 0,
                    absl::StrCat("reading ", path_, " at ", eio_at, ": Input/output error"));
  ExpectBitExact();
  EXPECT_EQ(outcome.direct_bytes, static_cast<uint64_t>(kTensorBytes));
  EXPECT_EQ(outcome.streamed_bytes, static_cast<uint64_t>(kTensorBytes));
  EXPECT_EQ(outcome.streamed_bytes_by_node, (std::map<std::string, uint64_t>{{"node-a", kTensorBytes}}));
}

// An object store's files (FileSystem::IsObjectStore) under auto: the daemon serving the file
// reads it for the rank, which opens nothing itself (an EIO waits on every read of the rank's
// own "bucket" and is never reached); `--source direct` still reads it here; with no daemon
// serving it, auto reads it here too.
TEST_F(FillFaultsTest, AnObjectStoresFileIsStreamedFromItsDaemonUnderAutoAndNeverReadByTheRank) {
  testing::CheckpointDaemon a("node-a", root_);
  ModelLayout layout = Layout(a);
  rank_disk_.ActAsObjectStore();
  rank_disk_.Add({.kind = FileFault::kEio, .path_suffix = kFile, .at_byte = 0});

  FillOutcome outcome = Fill(layout);
  for (const FillResult& result : outcome.results) {
    EXPECT_TRUE(result.filled) << result.error;
    EXPECT_EQ(result.provenance.kind, Provenance::Kind::kStream);
    EXPECT_EQ(result.provenance.nodes, std::vector<std::string>{"node-a"});
    EXPECT_TRUE(result.failovers.empty());
  }
  ExpectBitExact();
  EXPECT_EQ(rank_disk_.faults_injected(), 0u) << "the rank read nothing of the object store itself";
  EXPECT_EQ(outcome.direct_bytes, 0u);
  EXPECT_EQ(outcome.streamed_bytes_by_node, (std::map<std::string, uint64_t>{{"node-a", 2 * kTensorBytes}}));
}

TEST_F(FillFaultsTest, AnObjectStoresFileIsReadByTheRankUnderSourceDirectOrWhenNoDaemonServesIt) {
  testing::CheckpointDaemon a("node-a", root_);
  ModelLayout layout = Layout(a);
  rank_disk_.ActAsObjectStore();

  FillOutcome forced = Fill(layout, Source::kDirect);
  ExpectBitExact();
  EXPECT_EQ(forced.direct_bytes, static_cast<uint64_t>(2 * kTensorBytes));
  EXPECT_EQ(forced.streamed_bytes, 0u);

  for (auto& [file, route] : layout.files) route.servers.clear();  // no daemon serves it
  FillOutcome alone = Fill(layout);
  ExpectBitExact();
  EXPECT_EQ(alone.results[0].provenance.kind, Provenance::Kind::kDirect);
  EXPECT_EQ(alone.direct_bytes, static_cast<uint64_t>(2 * kTensorBytes));
  EXPECT_EQ(alone.streamed_bytes, 0u);
}

TEST_F(FillFaultsTest, AFileThatShrinksMidReadWithNoOtherSourceLeavesItsTensorUnfilledNamingTheFile) {
  testing::CheckpointDaemon a("node-a", root_);
  ModelLayout layout = Layout(a);
  for (auto& [file, route] : layout.files) route.servers.clear();  // no daemon serves it
  const TensorLayout& b = Stored(layout, "b.weight");
  rank_disk_.Add({.kind = FileFault::kShrink, .path_suffix = kFile, .at_byte = b.begin_offset + kMiB});

  FillOutcome outcome = Fill(layout);
  EXPECT_TRUE(outcome.results[0].filled) << outcome.results[0].error;
  EXPECT_EQ(Held(0), StoredBytes(targets_[0].stored));
  const FillResult& read_b = outcome.results[1];
  EXPECT_FALSE(read_b.filled);
  // Verification prefixes the tensor ("b.weight: not filled: ..."); the fill names the file,
  // the bytes and why, after one more try of the only source (DATA_LOSS is retried once).
  EXPECT_EQ(read_b.error,
            absl::StrCat("every source failed (0 of ", kTensorBytes, " bytes in place): direct read: ", path_,
                         " ended at ", b.begin_offset + kMiB, " while reading [", b.begin_offset, ", ",
                         b.end_offset, "): the file was truncated"));
  ASSERT_EQ(read_b.failovers.size(), 1u);
  EXPECT_EQ(read_b.failovers[0].to, "direct");
  EXPECT_EQ(outcome.direct_bytes, static_cast<uint64_t>(kTensorBytes)) << "only a.weight's bytes arrived";
  EXPECT_EQ(outcome.streamed_bytes, 0u);
}

TEST_F(FillFaultsTest, ACorruptedByteUnderRegisteredDigestsLeavesAProofThatDoesNotMatch) {
  testing::CheckpointDaemon a("node-a", root_);
  ModelLayout layout = Layout(a, {}, /*digest=*/true);
  const TensorLayout& b = Stored(layout, "b.weight");
  ASSERT_TRUE(b.digest.has_value()) << "registration recorded digests";
  const std::string stored = StoredBytes(b);
  const TileGrid grid = TileGridFor(DigestKind::kFast, b.shape, 1);
  ASSERT_EQ(b.digest->lanes,
            LanesToBytes(DigestOf(
                DigestKind::kFast, grid,
                absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(stored.data()), stored.size()))))
      << "the daemon recorded the digest of the bytes as stored";
  rank_disk_.Add({.kind = FileFault::kCorrupt, .path_suffix = kFile, .at_byte = b.begin_offset + 100});

  FillOutcome outcome = Fill(layout);
  ASSERT_TRUE(outcome.results[0].filled && outcome.results[0].proof.has_value());
  const TensorProof& good = *outcome.results[0].proof;
  EXPECT_EQ(JudgeSlot(good, {good.sum.tiles_hashed, good.sum.tiles_cut, 1, good.sum.lanes}).state,
            ContentState::kChecked);
  // The read itself succeeded: the proof of what it read is what verification refuses.
  const FillResult& read_b = outcome.results[1];
  ASSERT_TRUE(read_b.filled && read_b.proof.has_value());
  const TensorProof& bad = *read_b.proof;
  EXPECT_EQ(bad.sum.tiles_hashed, grid.tile_count);
  const ContentVerdict verdict = JudgeSlot(bad, {bad.sum.tiles_hashed, bad.sum.tiles_cut, 1, bad.sum.lanes});
  EXPECT_EQ(verdict.state, ContentState::kMismatch);
  EXPECT_NE(verdict.why.find("bytes differ from the digest registered for it (fast 0x"), std::string::npos)
      << verdict.why;
  std::string as_read = stored;
  as_read[100] ^= 0xFF;
  EXPECT_EQ(Held(1), as_read) << "what the disk returned";
}

TEST_F(FillFaultsTest, AStreamFromASlowDiskIsGivenUpAfterTheStallTimeoutAndTheOtherServerSendsIt) {
  FaultFileSystem slow_disk;
  slow_disk.Add({.kind = FileFault::kSlow, .delay = absl::Seconds(2)});
  testing::CheckpointDaemon a("node-a", root_, &slow_disk);
  testing::CheckpointDaemon b("node-b", root_);
  ModelLayout layout = Layout(a, {&b});

  FillOutcome outcome = Fill(layout, Source::kStream, absl::Milliseconds(300));
  const FillResult& read_a = outcome.results[0];
  EXPECT_TRUE(read_a.filled) << read_a.error;
  ExpectOneFailover(
      read_a, "node-a", "node-b", 0,
      absl::StrCat("streaming ", path_, " [", targets_[0].stored.begin_offset, ", +", kTensorBytes, ") from ",
                   a.address(), ": no byte for 300ms after 0; the daemon hangs or is unreachable"));
  EXPECT_EQ(read_a.provenance.nodes, std::vector<std::string>{"node-b"});
  const FillResult& read_b = outcome.results[1];
  EXPECT_TRUE(read_b.filled) << read_b.error;
  EXPECT_TRUE(read_b.failovers.empty()) << "node-a failed lately: tried last, so never";
  EXPECT_EQ(read_b.provenance.nodes, std::vector<std::string>{"node-b"});
  ExpectBitExact();
  EXPECT_EQ(outcome.streamed_bytes_by_node, (std::map<std::string, uint64_t>{{"node-b", 2 * kTensorBytes}}));
  EXPECT_GE(slow_disk.faults_injected(), 1u);
}

TEST_F(FillFaultsTest, ADaemonWhoseDiskFailsMidStreamSendsDataLossAndTheRankResumesOnTheOtherServer) {
  FaultFileSystem failing_disk;
  testing::CheckpointDaemon a("node-a", root_, &failing_disk);
  testing::CheckpointDaemon b("node-b", root_);
  ModelLayout layout = Layout(a, {&b});
  const TensorLayout& stored_b = Stored(layout, "b.weight");
  // Past 2.5 MiB of b.weight: node-a sends two 1 MiB chunks (chunk_size), then its third read fails.
  const uint64_t eio_at = stored_b.begin_offset + 2 * kMiB + kMiB / 2;
  failing_disk.Add({.kind = FileFault::kEio, .path_suffix = kFile, .at_byte = eio_at});
  const FileRoute& route = layout.files.at("model.safetensors");

  // What the stream itself says: the daemon's DATA_LOSS, after the bytes read before the fault.
  std::string streamed(kTensorBytes, '\0');
  uint64_t received = 0;
  absl::Status broken =
      DaemonClient(a.address())
          .ReadRuns("m", path_, StridedRuns{stored_b.begin_offset, kTensorBytes, kTensorBytes, 1}, 0,
                    absl::MakeSpan(reinterpret_cast<uint8_t*>(streamed.data()), streamed.size()),
                    absl::Seconds(30), nullptr, route.registered, &received);
  EXPECT_EQ(broken.code(), absl::StatusCode::kDataLoss) << broken;
  const std::string stream_error =
      absl::StrCat("streaming ", path_, " [", stored_b.begin_offset, ", +", kTensorBytes, ") from ",
                   a.address(), ": reading ", path_, " at ", eio_at, ": Input/output error");
  EXPECT_EQ(broken.message(), stream_error);
  EXPECT_EQ(received, 2 * kMiB);
  EXPECT_EQ(streamed.substr(0, received), StoredBytes(stored_b).substr(0, received));

  // A rank: b.weight breaks on node-a at byte 2 MiB and resumes there on node-b; nothing is
  // read twice.
  FillOutcome outcome = Fill(layout, Source::kStream);
  EXPECT_TRUE(outcome.results[0].filled) << outcome.results[0].error;
  EXPECT_TRUE(outcome.results[0].failovers.empty());
  const FillResult& read_b = outcome.results[1];
  EXPECT_TRUE(read_b.filled) << read_b.error;
  ExpectOneFailover(read_b, "node-a", "node-b", 2 * kMiB, stream_error);
  EXPECT_EQ(read_b.provenance.nodes, (std::vector<std::string>{"node-a", "node-b"}));
  ExpectBitExact();
  EXPECT_EQ(outcome.streamed_bytes_by_node,
            (std::map<std::string, uint64_t>{{"node-a", kTensorBytes + 2 * kMiB},
                                             {"node-b", kTensorBytes - 2 * kMiB}}));
}

}  // namespace
}  // namespace metaload
