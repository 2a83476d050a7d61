// metactl with the in-memory storage back end registered for "mem://" locations, so that the
// integration tests drive every offline command through a second back end
// (tests/integration/cli/test_memory_storage.py). METALOAD_TEST_MEMORY="DIR=mem://LOCATION[;...]"
// puts every file of each DIR (not its subfolders) under LOCATION before the command runs.
// Only tests build it: metactl itself registers no back end but POSIX.
#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_split.h"
#include "client/metactl/commands.h"
#include "tests/test_support.h"
#include "util/fs/memory_file_system.h"

int main(int argc, char** argv) {
  metaload::MemoryFileSystem* memory = &metaload::RegisteredMemoryFileSystem();
  if (const char* spec = std::getenv("METALOAD_TEST_MEMORY"); spec != nullptr) {
    for (absl::string_view pair : absl::StrSplit(spec, ';', absl::SkipEmpty())) {
      std::pair<std::string, std::string> dir_and_location = absl::StrSplit(pair, absl::MaxSplits('=', 1));
      for (const auto& entry : std::filesystem::directory_iterator(dir_and_location.first)) {
        if (!entry.is_regular_file()) continue;
        memory->Put(dir_and_location.second + "/" + entry.path().filename().string(),
                    metaload::testing::ReadFileOrDie(entry.path().string()));
      }
    }
  }
  return metaload::MetactlMain(argc, argv);
}
