// Opening under a root without a check-then-open window (issue 13's symlink swap).
#include "util/fs/confined_open.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace metaload {
namespace {

namespace fs = std::filesystem;

// Parameter: force the component-by-component walk (kernels without openat2).
class ConfinedOpenTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    ConfinedOpenForceWalkForTests(GetParam());
    char tmpl[] = "/tmp/confined-XXXXXX";
    base_ = fs::path(::mkdtemp(tmpl));
    root_ = base_ / "root";
    outside_ = base_ / "outside";
    fs::create_directories(root_ / "d");
    fs::create_directories(outside_);
    Write(root_ / "d" / "f", "INSIDE");
    Write(outside_ / "f", "SECRET");
    roots_ = {fs::canonical(root_).string()};
  }
  void TearDown() override {
    ConfinedOpenForceWalkForTests(false);
    fs::remove_all(base_);
  }
  static void Write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }
  static std::string Read(const ReadOnlyFile& f) {
    std::string text(f.size_bytes(), '\0');
    EXPECT_TRUE(f.ReadAt(0, absl::MakeSpan(reinterpret_cast<uint8_t*>(text.data()), text.size())).ok());
    return text;
  }

  fs::path base_, root_, outside_;
  std::vector<std::string> roots_;
};

TEST_P(ConfinedOpenTest, OpensAFileUnderItsRootAndRefusesEverythingElse) {
  absl::StatusOr<ReadOnlyFile> ok = OpenUnderRoots((root_ / "d" / "f").string(), roots_);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(Read(*ok), "INSIDE");
  EXPECT_EQ(OpenUnderRoots((root_ / "d" / ".." / ".." / "outside" / "f").string(), roots_).status().code(),
            absl::StatusCode::kPermissionDenied);
  fs::create_symlink(outside_, root_ / "link");
  absl::StatusOr<ReadOnlyFile> out = OpenUnderRoots((root_ / "link" / "f").string(), roots_);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kPermissionDenied) << out.status();
  EXPECT_EQ(OpenUnderRoots(roots_[0], roots_).status().code(), absl::StatusCode::kPermissionDenied)
      << "the root itself is not a file under it";
  EXPECT_EQ(OpenUnderRoots((root_ / "d").string(), roots_).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// Issue 23: a dangling link out of the root was "cannot resolve: No such file", one to a file
// that exists there "leads out of this daemon's roots": whether a path outside exists.
TEST_P(ConfinedOpenTest, ALinkOutOfTheRootIsRefusedAlikeWhetherItsTargetExistsOrNot) {
  fs::create_symlink(outside_ / "f", root_ / "to-present");
  fs::create_symlink(outside_ / "no-such-file", root_ / "to-absent");
  fs::create_symlink("../../outside/no-such-file", root_ / "d" / "relative-to-absent");
  for (const char* name : {"to-present", "to-absent", "d/relative-to-absent"}) {
    absl::StatusOr<ReadOnlyFile> f = OpenUnderRoots((fs::path(roots_[0]) / name).string(), roots_);
    EXPECT_EQ(f.status().code(), absl::StatusCode::kPermissionDenied) << name << ": " << f.status();
    EXPECT_NE(f.status().message().find("leads out of this daemon's roots"), std::string::npos) << f.status();
  }
  fs::create_symlink("f-missing", root_ / "d" / "dangles-inside");
  EXPECT_EQ(OpenUnderRoots((fs::path(roots_[0]) / "d" / "dangles-inside").string(), roots_).status().code(),
            absl::StatusCode::kNotFound)
      << "a link within the root that dangles is not found, as it is";
  EXPECT_EQ(OpenUnderRoots((fs::path(roots_[0]) / "d" / "missing").string(), roots_).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(ConfinedOpenTest, ARootThatIsASymlinkServesWhatIsUnderItsTarget) {
  fs::create_symlink(root_, base_ / "root-link");
  const std::vector<std::string> roots = {
      fs::canonical(base_ / "root-link").string()};  // as metad resolves roots
  absl::StatusOr<ReadOnlyFile> f = OpenUnderRoots((base_ / "root-link" / "d" / "f").string(), roots);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(Read(*f), "INSIDE");
}

// A thread swaps root/d with root/s, a symlink to the outside folder (renameat2 EXCHANGE),
// as fast as it can while root/d/f is opened again and again. A check-then-open leaks the
// outside file; a confined open never does.
TEST_P(ConfinedOpenTest, ASymlinkSwappedInDuringTheOpenIsNeverFollowed) {
  fs::create_symlink(outside_, root_ / "s");
  std::atomic<bool> stop{false};
  std::thread swapper([&] {
    const std::string d = (root_ / "d").string(), s = (root_ / "s").string();
    while (!stop.load()) ::renameat2(AT_FDCWD, d.c_str(), AT_FDCWD, s.c_str(), RENAME_EXCHANGE);
  });
  const std::string target = (root_ / "d" / "f").string();
  int opened = 0, refused = 0, leaked = 0, naive_leaked = 0;
  const absl::Time end = absl::Now() + absl::Seconds(2);
  while (absl::Now() < end) {
    absl::StatusOr<ReadOnlyFile> f = OpenUnderRoots(target, roots_);
    if (f.ok()) {
      ++opened;
      if (Read(*f) == "SECRET") ++leaked;
    } else {
      ++refused;
    }
    // What ReadRange did before: resolve and check, then open the checked path.
    absl::StatusOr<std::string> checked = ResolveUnderRoots(target, roots_);
    if (checked.ok()) {
      absl::StatusOr<ReadOnlyFile> naive = ReadOnlyFile::Open(target);
      if (naive.ok() && Read(*naive) == "SECRET") ++naive_leaked;
    }
  }
  stop.store(true);
  swapper.join();
  std::printf("confined: %d opened, %d refused, %d leaked (openat2: %d); check-then-open leaked %d\n", opened,
              refused, leaked, ConfinedOpenUsesOpenat2(), naive_leaked);
  EXPECT_EQ(ConfinedOpenUsesOpenat2(), !GetParam());
  EXPECT_EQ(leaked, 0);
  EXPECT_GT(opened, 0) << "the race must leave room for honest opens too";
  EXPECT_GT(naive_leaked, 0) << "the race did not happen; the test proved nothing";
}

// Registration opens headers, indexes and config.json this way too (issue 23): its error says
// which rule refused the path, and never where the symlink leads.
TEST_P(ConfinedOpenTest, ASymlinkOutOfTheRootsIsRefusedNamingTheFileAndTheRule) {
  fs::create_symlink(outside_ / "f", root_ / "d" / "to-outside");
  const std::string path = (root_ / "d" / "to-outside").string();
  absl::StatusOr<ReadOnlyFile> f = OpenUnderRoots(path, roots_);
  ASSERT_EQ(f.status().code(), absl::StatusCode::kPermissionDenied) << f.status();
  EXPECT_EQ(f.status().message(), absl::StrCat("\"", path, "\" leads out of this daemon's roots [", roots_[0],
                                               "] through a symbolic link (refused: metad opens only files "
                                               "beneath its roots)"));
  fs::create_symlink("f", root_ / "d" / "to-inside");
  absl::StatusOr<ReadOnlyFile> inside = OpenUnderRoots((root_ / "d" / "to-inside").string(), roots_);
  ASSERT_TRUE(inside.ok()) << inside.status();
  EXPECT_EQ(Read(*inside), "INSIDE") << "a symlink that stays under the root is followed";
}

TEST_P(ConfinedOpenTest, SameDeviceRefusesAHardLinkThatPlainRootsOpen) {
  fs::create_hard_link(outside_ / "f", root_ / "d" / "linked");
  const std::string path = (root_ / "d" / "linked").string();
  absl::StatusOr<ReadOnlyFile> plain = OpenUnderRoots(path, roots_);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(Read(*plain), "SECRET") << "documented: a hard link is a file of the root";
  absl::StatusOr<ReadOnlyFile> strict = OpenUnderRoots(path, roots_, {.same_device = true});
  ASSERT_EQ(strict.status().code(), absl::StatusCode::kPermissionDenied) << strict.status();
  EXPECT_EQ(
      strict.status().message(),
      absl::StrCat("\"", path, "\" has 2 hard links (same_device: true refuses hard-linked files: another ",
                   "name of the file may lie outside root ", roots_[0], ")"));
  absl::StatusOr<ReadOnlyFile> single =
      OpenUnderRoots((root_ / "d" / "f").string(), roots_, {.same_device = true});
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ(Read(*single), "INSIDE");
}

INSTANTIATE_TEST_SUITE_P(Openat2OrWalk, ConfinedOpenTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Walk" : "Openat2";
                         });

}  // namespace
}  // namespace metaload
