// Init rules and --init-missing policies: what parses, and one test per distinct error.
#include "planner/skeleton/init_rule.h"

#include <gtest/gtest.h>

#include "planner/skeleton/init_policy.h"

namespace metaload {
namespace {

TEST(InitRule, ParsesNestedRulesNumbersBoolsAndLists) {
  auto rule = ParseInitRule(
      "rope_inv_freq(base=500000,dim=128,scaling=yarn(factor=4,original_max_position_embeddings=128,"
      "beta_fast=32,beta_slow=1,truncate=true))");
  ASSERT_TRUE(rule.ok()) << rule.status();
  EXPECT_EQ(rule->name, "rope_inv_freq");
  EXPECT_EQ(*rule->Number("base"), 500000);
  const InitRuleValue* scaling = rule->Find("scaling");
  ASSERT_NE(scaling, nullptr);
  ASSERT_EQ(scaling->kind, InitRuleValue::Kind::kRule);
  EXPECT_EQ(scaling->rule->name, "yarn");
  EXPECT_TRUE(*scaling->rule->Bool("truncate"));

  auto longrope =
      ParseInitRule("rope_inv_freq(base=10000,dim=8,scaling=longrope(short_factor=[1,1.25,1e-05,2]))");
  ASSERT_TRUE(longrope.ok()) << longrope.status();
  EXPECT_EQ(longrope->Find("scaling")->rule->Find("short_factor")->list,
            (std::vector<double>{1, 1.25, 1e-05, 2}));
  EXPECT_EQ(*ParseInitRule("constant(value=-8.5)")->Number("value"), -8.5);
  EXPECT_TRUE(ParseInitRule("f()").ok());
}

TEST(InitRule, EachErrorNamesTheProblem) {
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {"", "expected a rule name"},
      {"rope", "expected '('"},
      {"f(=1)", "expected an argument name"},
      {"f(a1)", "expected '='"},
      {"f(a=)", "expected a number"},
      {"f(a=1", "expected ',' or ')'"},
      {"f(a=[1,2)", "expected ',' or ']'"},
      {"f(a=1))", "unexpected text after the rule"},
      {"f(a=g(b=h(c=i(d=j(e=k(f=l(g=m(h=n(i=o(j=1))))))))))", "rules nest too deep"},
  };
  for (const Case& c : cases) {
    auto rule = ParseInitRule(c.text);
    ASSERT_FALSE(rule.ok()) << c.text;
    EXPECT_EQ(rule.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(rule.status().message().find(c.message), absl::string_view::npos)
        << c.text << ": " << rule.status().message();
  }
  auto rule = ParseInitRule("f(a=true)");
  EXPECT_FALSE(rule->Number("a").ok());
  EXPECT_FALSE(rule->Bool("b").ok());
}

TEST(InitPolicy, ParsesEveryFormAndRefusesTheRest) {
  EXPECT_EQ(ParseInitPolicy("error")->kind, InitPolicy::Kind::kError);
  EXPECT_EQ(ParseInitPolicy("zeros")->kind, InitPolicy::Kind::kZeros);
  auto normal = ParseInitPolicy("normal:0.02");
  ASSERT_TRUE(normal.ok());
  EXPECT_EQ(normal->std, 0.02);
  EXPECT_EQ(normal->ToString(), "normal:0.02");
  for (const char* bad : {"zero", "normal:", "normal:-1", "normal:0", "normal:nan", "normal:inf", "ones"}) {
    auto policy = ParseInitPolicy(bad);
    EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(policy.status().message().find("use error, zeros or normal:STD"), absl::string_view::npos);
  }
  EXPECT_EQ(InitSeedFor("score.weight"), InitSeedFor("score.weight"));
  EXPECT_NE(InitSeedFor("score.weight"), InitSeedFor("score.bias"));
}

}  // namespace
}  // namespace metaload
