// Where a rank's fill starts (client/read/fill.h ReadSettings::stagger_*): the job's ranks start
// their pieces at different points and wrap around, so that they do not all open the first file
// at once; every byte still arrives. The reads are recorded by a file system that wraps the
// POSIX one.
#include <gtest/gtest.h>

#include <climits>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "client/read/fill.h"
#include "planner/format/checkpoint.h"
#include "tests/daemon/service/checkpoint_daemon.h"
#include "tests/test_support.h"

namespace metaload {
namespace {

// The POSIX file system, recording the offset of every read.
class RecordingFileSystem final : public FileSystem {
 public:
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) override {
    absl::StatusOr<std::unique_ptr<RandomAccessFile>> file = base_->Open(path);
    if (!file.ok()) return file.status();
    return std::unique_ptr<RandomAccessFile>(std::make_unique<Recorded>(*std::move(file), this));
  }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenUnderRoots(const std::string& path,
                                                                   const std::vector<std::string>& roots,
                                                                   bool same_device) override {
    return base_->OpenUnderRoots(path, roots, same_device);
  }
  absl::StatusOr<PathKind> KindOf(const std::string& path, bool follow_links) override {
    return base_->KindOf(path, follow_links);
  }
  absl::StatusOr<std::vector<std::string>> List(const std::string& path) override {
    return base_->List(path);
  }
  absl::StatusOr<std::string> Canonical(const std::string& path) override { return base_->Canonical(path); }

  std::vector<uint64_t> offsets() {
    std::lock_guard<std::mutex> lock(mu_);
    return offsets_;
  }

 private:
  class Recorded final : public RandomAccessFile {
   public:
    Recorded(std::unique_ptr<RandomAccessFile> base, RecordingFileSystem* fs)
        : base_(std::move(base)), fs_(fs) {}
    const std::string& path() const override { return base_->path(); }
    uint64_t size_bytes() const override { return base_->size_bytes(); }
    int64_t mtime_ns() const override { return base_->mtime_ns(); }
    absl::Status ReadAt(uint64_t offset, absl::Span<uint8_t> out) const override {
      fs_->Record(offset);
      return base_->ReadAt(offset, out);
    }
    absl::Status ReadRuns(const StridedRuns& runs, uint64_t position,
                          absl::Span<uint8_t> out) const override {
      fs_->Record(runs.first_offset + position);
      return base_->ReadRuns(runs, position, out);
    }
    void WillNeed(uint64_t offset, uint64_t length) const override { base_->WillNeed(offset, length); }
    absl::StatusOr<bool> Unchanged() const override { return base_->Unchanged(); }

   private:
    std::unique_ptr<RandomAccessFile> base_;
    RecordingFileSystem* fs_;
  };

  void Record(uint64_t offset) {
    std::lock_guard<std::mutex> lock(mu_);
    offsets_.push_back(offset);
  }

  FileSystem* const base_ = FileSystem::Default();
  std::mutex mu_;
  std::vector<uint64_t> offsets_;
};

constexpr int64_t kOrderTensorBytes = 64 << 10;  // one piece each

class FillOrderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string root = std::filesystem::canonical(dir_.path()).string();
    ASSERT_TRUE(testing::WriteTestCheckpoint(root + "/m", {"a", "b", "c", "d"}, kOrderTensorBytes).ok());
    path_ = root + "/m/model.safetensors";
    file_bytes_ = testing::ReadFileOrDie(path_);
    absl::StatusOr<Checkpoint> checkpoint = OpenCheckpoint(path_);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    stored_ = checkpoint->tensors;
    ASSERT_EQ(stored_.size(), 4u);
    routes_["model.safetensors"] = FileRoute{"model.safetensors", path_, file_bytes_.size(), {}, {}};
  }

  // The names of the tensors, in the order one thread read them as member `index` of `count`;
  // every tensor must arrive whole.
  std::vector<std::string> ReadOrder(int index, int count) {
    std::vector<FillTarget> targets(stored_.size());
    for (size_t t = 0; t < stored_.size(); ++t) {
      targets[t].name = stored_[t].name;
      targets[t].stored = stored_[t];
      targets[t].dest = torch::empty({kOrderTensorBytes}, torch::kUInt8);
    }
    RecordingFileSystem disk;
    FillSettings settings;
    settings.read.source = Source::kDirect;
    settings.read.read_threads = 1;
    settings.read.file_system = &disk;
    settings.read.stagger_index = index;
    settings.read.stagger_count = count;
    absl::StatusOr<FillOutcome> outcome = FillTargets(targets, routes_, settings);
    EXPECT_TRUE(outcome.ok()) << outcome.status();
    for (size_t t = 0; outcome.ok() && t < targets.size(); ++t) {
      EXPECT_TRUE(outcome->results[t].filled) << outcome->results[t].error;
      EXPECT_TRUE(std::string(static_cast<const char*>(targets[t].dest.data_ptr()), kOrderTensorBytes) ==
                  file_bytes_.substr(stored_[t].begin_offset, kOrderTensorBytes))
          << targets[t].name;
    }
    std::vector<std::string> order;
    for (uint64_t offset : disk.offsets()) {
      for (const TensorLayout& t : stored_) {
        if (offset == t.begin_offset) order.push_back(t.name);
      }
    }
    return order;
  }

  testing::TempDir dir_;
  std::string path_, file_bytes_;
  std::vector<TensorLayout> stored_;
  std::map<std::string, FileRoute> routes_;
};

TEST_F(FillOrderTest, EachMemberStartsItsShareOfTheWayInAndWrapsAround) {
  EXPECT_EQ(ReadOrder(0, 1), (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_EQ(ReadOrder(0, 2), (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_EQ(ReadOrder(1, 2), (std::vector<std::string>{"c", "d", "a", "b"}));
  EXPECT_EQ(ReadOrder(3, 4), (std::vector<std::string>{"d", "a", "b", "c"}));
  // More members than pieces: neighbours share a start.
  EXPECT_EQ(ReadOrder(5, 8), (std::vector<std::string>{"c", "d", "a", "b"}));
}

TEST(FirstPieceTest, OutOfRangeStartsAtTheFirstAndTheLargestValuesDoNotOverflow) {
  auto first = [](int index, int count, size_t pieces) {
    ReadSettings read;
    read.stagger_index = index;
    read.stagger_count = count;
    return FirstPiece(read, pieces);
  };
  EXPECT_EQ(first(0, 1, 10), 0u);
  EXPECT_EQ(first(-1, 4, 10), 0u);
  EXPECT_EQ(first(4, 4, 10), 0u);
  EXPECT_EQ(first(1, 0, 10), 0u);
  EXPECT_EQ(first(1, -3, 10), 0u);
  EXPECT_EQ(first(INT_MIN, INT_MAX, 10), 0u);
  EXPECT_EQ(first(1, 2, 0), 0u);
  EXPECT_EQ(first(INT_MAX - 1, INT_MAX, SIZE_MAX), SIZE_MAX - SIZE_MAX / INT_MAX - 1);
  EXPECT_LT(first(INT_MAX - 1, INT_MAX, SIZE_MAX), SIZE_MAX);
  EXPECT_EQ(first(1023, 1024, 5), 4u);
}

}  // namespace
}  // namespace metaload
