// The flags that choose a strategy (--strategy, --tp, --pp, --reserve, --dtype): what each
// accepts, and one test per refusal with the message users see.
#include "planner/strategy/strategy_flags.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/planner/strategy/strategy_testing.h"

namespace metaload {
namespace {

absl::StatusOr<StrategyOptions> Parse(std::vector<std::string> flags) {
  return testing::ParsePlanFlags(std::move(flags));
}

void ExpectRefused(std::vector<std::string> flags, const std::string& message) {
  absl::StatusOr<StrategyOptions> options = Parse(flags);
  ASSERT_FALSE(options.ok()) << "expected: " << message;
  EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(options.status().message(), message);
}

TEST(StrategyFlagsTest, DefaultsAreLayersWithATenPercentReserveAndStoredDtypes) {
  absl::StatusOr<StrategyOptions> options = Parse({});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->strategy, "layers");
  EXPECT_EQ(options->tp, 1);
  EXPECT_EQ(options->pp, 0);
  EXPECT_DOUBLE_EQ(options->reserve_fraction, 0.10);
  EXPECT_EQ(options->reserve_bytes, 0u);
  EXPECT_FALSE(options->load_dtype.has_value());
}

TEST(StrategyFlagsTest, ReserveAsPercentageFractionOrSize) {
  absl::StatusOr<StrategyOptions> percent = Parse({"--reserve", "10%"});
  ASSERT_TRUE(percent.ok()) << percent.status();
  EXPECT_DOUBLE_EQ(percent->reserve_fraction, 0.10);
  absl::StatusOr<StrategyOptions> fraction = Parse({"--reserve", "0.25"});
  ASSERT_TRUE(fraction.ok()) << fraction.status();
  EXPECT_DOUBLE_EQ(fraction->reserve_fraction, 0.25);
  EXPECT_EQ(fraction->reserve_bytes, 0u);
  absl::StatusOr<StrategyOptions> size = Parse({"--reserve", "8GiB"});
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(size->reserve_bytes, 8ull << 30);
  EXPECT_EQ(size->reserve_fraction, 0.0);
  absl::StatusOr<StrategyOptions> none = Parse({"--reserve=0"});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->reserve_fraction, 0.0);
  EXPECT_EQ(none->reserve_bytes, 0u);
}

TEST(StrategyFlagsTest, ReserveRefusesWhatIsNeitherAFractionBelowOneNorASize) {
  for (const char* bad : {"8", "1", "100%", "-5%", "-0.1", "lots", "nan", "10%%", ""}) {
    ExpectRefused({"--reserve", bad},
                  std::string("--reserve \"") + bad +
                      "\": use a fraction below 1 (0.1), a percentage below 100 (10%) or a size (8GiB)");
  }
}

TEST(StrategyFlagsTest, DtypeAcceptsBf16Fp16Fp32) {
  for (const auto& [name, dtype] : std::vector<std::pair<std::string, DType>>{{"bf16", DType::kBF16},
                                                                              {"fp16", DType::kF16},
                                                                              {"fp32", DType::kF32},
                                                                              {"bfloat16", DType::kBF16}}) {
    absl::StatusOr<StrategyOptions> options = Parse({"--dtype", name});
    ASSERT_TRUE(options.ok()) << name << ": " << options.status();
    EXPECT_EQ(options->load_dtype, dtype) << name;
  }
}

TEST(StrategyFlagsTest, DtypeRefusesIntegersFp64AndUnknownNames) {
  for (const char* bad : {"int8", "fp64", "fp8", "bool", "float99"}) {
    ExpectRefused({"--dtype", bad}, std::string("--dtype \"") + bad + "\": use bf16, fp16 or fp32");
  }
}

TEST(StrategyFlagsTest, TpAndPpGoWithStrategyTp) {
  absl::StatusOr<StrategyOptions> options = Parse({"--strategy", "tp", "--tp", "4", "--pp", "2"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->strategy, "tp");
  EXPECT_EQ(options->tp, 4);
  EXPECT_EQ(options->pp, 2);
  ExpectRefused({"--tp", "2"}, "--tp is for --strategy tp (the strategy is layers)");
  ExpectRefused({"--strategy", "fsdp", "--pp", "2"}, "--pp is for --strategy tp (the strategy is fsdp)");
}

TEST(StrategyFlagsTest, TpAndPpMustBePositive) {
  absl::StatusOr<StrategyOptions> zero_tp = Parse({"--strategy", "tp", "--tp", "0"});
  ASSERT_FALSE(zero_tp.ok());
  EXPECT_THAT(std::string(zero_tp.status().message()), ::testing::HasSubstr("--tp"));
  absl::StatusOr<StrategyOptions> zero_pp = Parse({"--strategy", "tp", "--pp", "0"});
  ASSERT_FALSE(zero_pp.ok());
  EXPECT_THAT(std::string(zero_pp.status().message()), ::testing::HasSubstr("--pp"));
}

}  // namespace
}  // namespace metaload
