// What the S3 back end decides without a server: locations and range splitting (the server
// side is tests/integration/object_storage/).
#include "util/fs/s3/s3_file_system.h"

#include <gtest/gtest.h>

#include <string>

#include "util/fs/file_system.h"

namespace metaload {
namespace {

TEST(S3Location, Parsed) {
  absl::StatusOr<S3Location> where = ParseS3Location("s3://models/llama//a/../model.safetensors");
  ASSERT_TRUE(where.ok()) << where.status();
  EXPECT_EQ(where->bucket, "models");
  EXPECT_EQ(where->key, "llama/model.safetensors");
  EXPECT_EQ(ParseS3Location("s3://models")->key, "");
  EXPECT_EQ(ParseS3Location("s3://models/")->key, "");
}

TEST(S3Location, HostileNames) {
  for (const std::string& bad :
       std::vector<std::string>{"s3://", "s3://ab", "s3://Models/x", "s3://my_bucket/x",
                                std::string("s3://") + std::string(64, 'a'), "s3://b\x01ucket/x"}) {
    EXPECT_EQ(ParseS3Location(bad).status().message(),
              bad + ": an S3 bucket name is 3 to 63 of a-z, 0-9, '.' and '-'");
  }
  const std::string long_key = "s3://models/" + std::string(1025, 'k');
  EXPECT_EQ(ParseS3Location(long_key).status().message(),
            long_key.substr(0, 256) + "...: an S3 key is at most 1024 bytes");
}

TEST(S3Location, ServedByTheBuiltInBackEnd) {
  absl::StatusOr<FileSystem*> fs = FileSystemFor("s3://models/llama");
  ASSERT_TRUE(fs.ok()) << fs.status();
  EXPECT_EQ(*fs, &TheS3FileSystem());
}

TEST(SplitRange, CoversExactlyInParts) {
  using Parts = std::vector<std::pair<uint64_t, uint64_t>>;
  EXPECT_EQ(SplitRange(10, 0, 4), Parts{});
  EXPECT_EQ(SplitRange(10, 3, 4), (Parts{{10, 3}}));
  EXPECT_EQ(SplitRange(10, 8, 4), (Parts{{10, 4}, {14, 4}}));
  EXPECT_EQ(SplitRange(10, 9, 4), (Parts{{10, 4}, {14, 4}, {18, 1}}));
  EXPECT_EQ(SplitRange(UINT64_MAX - 5, 5, 2),
            (Parts{{UINT64_MAX - 5, 2}, {UINT64_MAX - 3, 2}, {UINT64_MAX - 1, 1}}));
  EXPECT_EQ(SplitRange(0, 3, 0),
            (Parts{{0, 1}, {1, 1}, {2, 1}}));  // a zero part size is one byte, not a hang
}

}  // namespace
}  // namespace metaload
