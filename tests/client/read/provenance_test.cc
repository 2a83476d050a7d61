// The text of a Provenance (client/read/provenance.h): the strings `metactl load --report` and
// the Python package have always shown, made from the struct at the edge.
#include "client/read/provenance.h"

#include <gtest/gtest.h>

namespace metaload {
namespace {

using Kind = Provenance::Kind;

TEST(Provenance, ReadsNameEverySourceThatDeliveredInOrder) {
  EXPECT_EQ(ProvenanceText({.kind = Kind::kDirect, .nodes = {""}}), "direct");
  EXPECT_EQ(ProvenanceText({.kind = Kind::kStream, .nodes = {"a"}}), "stream:a");
  EXPECT_EQ(ProvenanceText({.kind = Kind::kStream, .nodes = {"a", "b"}}), "stream:a+b");
  EXPECT_EQ(ProvenanceText({.kind = Kind::kDirect, .nodes = {"", "b"}}), "direct+stream:b");
  EXPECT_EQ(ProvenanceText({.kind = Kind::kStream, .nodes = {"a", "", "b"}}), "stream:a+direct+stream:b");
}

TEST(Provenance, ConversionThenTheStoredNameOfAnAliasFollowTheSources) {
  EXPECT_EQ(ProvenanceText({.kind = Kind::kStream, .nodes = {"a"}, .converted_to = DType::kBF16}),
            "stream:a>BF16");
  EXPECT_EQ(
      ProvenanceText({.kind = Kind::kDirect, .nodes = {""}, .converted_to = DType::kF32, .tied_to = "w"}),
      "direct>F32 (tied:w)");
  EXPECT_EQ(ProvenanceText({.tied_to = "w"}), " (tied:w)") << "an alias that could not be read at all";
  EXPECT_EQ(ProvenanceText({}), "") << "an empty shard: nothing to read";
}

TEST(Provenance, WhatIsNotReadSaysWhatMadeIt) {
  EXPECT_EQ(ProvenanceText({.kind = Kind::kInit, .rule = "zeros"}), "init:zeros");
  EXPECT_EQ(ProvenanceText({.kind = Kind::kBuffer, .rule = "rope_inv_freq(base=10000,dim=8)"}),
            "buffer:rope_inv_freq(base=10000,dim=8)");
  EXPECT_EQ(ProvenanceText({.kind = Kind::kTied, .tied_to = "model.embed_tokens.weight"}), "tied")
      << "the stored name is its own field (--report's \"tied_to\")";
  EXPECT_EQ(ProvenanceText({.kind = Kind::kModule}), "module");
}

TEST(Provenance, KindNamesAreThePythonPackages) {
  EXPECT_STREQ(ProvenanceKindName(Kind::kNone), "none");
  EXPECT_STREQ(ProvenanceKindName(Kind::kDirect), "direct");
  EXPECT_STREQ(ProvenanceKindName(Kind::kStream), "stream");
  EXPECT_STREQ(ProvenanceKindName(Kind::kInit), "init");
  EXPECT_STREQ(ProvenanceKindName(Kind::kBuffer), "buffer");
  EXPECT_STREQ(ProvenanceKindName(Kind::kTied), "tied");
  EXPECT_STREQ(ProvenanceKindName(Kind::kModule), "module");
}

}  // namespace
}  // namespace metaload
