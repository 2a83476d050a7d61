// The second storage back end (util/fs/memory_file_system.h), the scheme registry that picks it,
// and the location arithmetic every reader now uses instead of std::filesystem.
#include "util/fs/memory_file_system.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "util/fs/location.h"
#include "util/fs/storage.h"

namespace metaload {
namespace {

MemoryFileSystem& Memory() { return RegisteredMemoryFileSystem(); }

std::string Read(const RandomAccessFile& file, uint64_t offset, size_t size) {
  std::string out(size, '\0');
  EXPECT_TRUE(file.ReadAt(offset, absl::MakeSpan(reinterpret_cast<uint8_t*>(out.data()), size)).ok());
  return out;
}

TEST(Location, PathArithmeticIsTheSameForEveryScheme) {
  EXPECT_EQ(SchemeOf("mem://b/x"), "mem");
  EXPECT_EQ(SchemeOf("/models/x"), "");
  EXPECT_EQ(SchemeOf("weird/a://b"), "") << "a '/' before :// is a path, not a scheme";
  EXPECT_EQ(NormalLocation("mem://b//x/./y/../z/"), "mem://b/x/z");
  EXPECT_EQ(NormalLocation("mem://b/../../x"), "mem://x") << "no parent past the top";
  EXPECT_EQ(NormalLocation("/a//b/./c/.."), "/a/b");
  EXPECT_EQ(JoinLocation("mem://b/x", "model.safetensors"), "mem://b/x/model.safetensors");
  EXPECT_EQ(JoinLocation("/a/", "f"), "/a/f");
  EXPECT_EQ(JoinLocation("/a", "/abs"), "/abs");
  EXPECT_EQ(ParentOf("mem://b/x/f"), "mem://b/x");
  EXPECT_EQ(ParentOf("f"), ".");
  EXPECT_EQ(BaseNameOf("mem://b/x/f"), "f");
  EXPECT_EQ(BaseNameOf("/a/b/"), "b");
}

TEST(FileSystemRegistry, SchemesPickTheirBackEndAndUnknownOnesAreNamed) {
  MemoryFileSystem& memory = Memory();
  absl::StatusOr<FileSystem*> fs = FileSystemFor("mem://anything");
  ASSERT_TRUE(fs.ok()) << fs.status();
  EXPECT_EQ(*fs, &memory);
  EXPECT_EQ(*FileSystemFor("/plain/path"), FileSystem::Default());
  absl::StatusOr<FileSystem*> unknown = FileSystemFor("s4://bucket/x");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      unknown.status().message(),
      "s4://bucket/x: no storage back end for s4:// locations in this build (POSIX paths, mem://, s3://)");
  EXPECT_FALSE(RegisterFileSystem("mem", &memory).ok()) << "taken";
  EXPECT_FALSE(RegisterFileSystem("file", &memory).ok());
  EXPECT_FALSE(RegisterFileSystem("1x", &memory).ok());
  EXPECT_FALSE(RegisterFileSystem("a/b", &memory).ok());
}

TEST(MemoryFileSystem, FilesFoldersAndListsAsAStorageSeesThem) {
  MemoryFileSystem& memory = Memory();
  memory.Put("mem://t1/ckpt/a.safetensors", "0123456789", 77);
  memory.Put("mem://t1/ckpt/sub/b.json", "{}");
  const Storage storage;
  EXPECT_EQ(*storage.KindOf("mem://t1/ckpt/a.safetensors"), PathKind::kFile);
  EXPECT_EQ(*storage.KindOf("mem://t1/ckpt"), PathKind::kFolder);
  EXPECT_EQ(*storage.KindOf("mem://t1/ckpt/"), PathKind::kFolder);
  EXPECT_EQ(*storage.KindOf("mem://t1/ck"), PathKind::kMissing) << "a prefix of a name is no folder";
  EXPECT_EQ(*storage.List("mem://t1/ckpt"), (std::vector<std::string>{"a.safetensors", "sub"}));
  EXPECT_EQ(storage.List("mem://t1/none").status().code(), absl::StatusCode::kNotFound);

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file = storage.Open("mem://t1//ckpt/./a.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->path(), "mem://t1/ckpt/a.safetensors");
  EXPECT_EQ((*file)->size_bytes(), 10u);
  EXPECT_EQ((*file)->mtime_ns(), 77);
  EXPECT_EQ(Read(**file, 3, 4), "3456");
  uint8_t past[4];
  EXPECT_EQ((*file)->ReadAt(8, absl::MakeSpan(past, 4)).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*file)->ReadAt(UINT64_MAX, absl::MakeSpan(past, 4)).code(), absl::StatusCode::kOutOfRange)
      << "offset + size overflows";
  StridedRuns runs{1, 2, 3, 3};  // bytes 1-2, 4-5, 7-8
  std::string gathered(6, '\0');
  ASSERT_TRUE(
      (*file)->ReadRuns(runs, 0, absl::MakeSpan(reinterpret_cast<uint8_t*>(gathered.data()), 6)).ok());
  EXPECT_EQ(gathered, "124578");

  EXPECT_EQ(storage.Open("mem://t1/ckpt/none").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(storage.Open("mem://t1/ckpt").status().code(), absl::StatusCode::kFailedPrecondition)
      << "a folder is not a file";
}

TEST(MemoryFileSystem, APutIsANewVersionThatOpenHandlesNotice) {
  MemoryFileSystem& memory = Memory();
  memory.Put("mem://t2/f", "old");
  std::unique_ptr<RandomAccessFile> file = *Storage().Open("mem://t2/f");
  EXPECT_TRUE(*file->Unchanged());
  memory.Put("mem://t2/f", "new!");
  EXPECT_FALSE(*file->Unchanged());
  EXPECT_EQ(Read(*file, 0, 3), "old") << "a handle reads the version it opened";
  EXPECT_TRUE(memory.Remove("mem://t2/f"));
  EXPECT_FALSE(*file->Unchanged());
}

TEST(MemoryFileSystem, RootsConfineItsLocationsToo) {
  MemoryFileSystem& memory = Memory();
  memory.Put("mem://t3/root/f", "x");
  memory.Put("mem://t3/rootless/f", "y");
  const std::vector<std::string> roots{"mem://t3/root"};
  const Storage confined = Storage::UnderRoots(roots, {});
  EXPECT_TRUE(confined.Open("mem://t3/root/f").ok());
  EXPECT_EQ(confined.Open("mem://t3/rootless/f").status().code(), absl::StatusCode::kPermissionDenied)
      << "a sibling that shares the root's spelling is outside it";
  EXPECT_EQ(confined.Open("mem://t3/root/../rootless/f").status().code(),
            absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace metaload
