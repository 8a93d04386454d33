#include "common/json_limits.h"

#include <gtest/gtest.h>

#include <string>

namespace frenzy {
namespace {

// Depths counted by hand: brackets inside strings (escaped quotes included) do not count.
TEST(JsonLimits, DepthCountsBracketsOutsideStrings) {
  EXPECT_EQ(JsonDepth("1", 64), 0);
  EXPECT_EQ(JsonDepth("{}", 64), 1);
  EXPECT_EQ(JsonDepth(R"({"a":[1,{"b":[]}]})", 64), 4);
  EXPECT_EQ(JsonDepth(R"(["[[[[", "\"[[[", {"x": "]]]]"}])", 64), 2);
  EXPECT_EQ(JsonDepth(R"([[], [], [[]]])", 64), 3);
  // Stops once past the bound instead of scanning a huge input.
  EXPECT_EQ(JsonDepth(std::string(100000, '['), 10), 11);
}

TEST(JsonLimits, BoundedParseNamesTheFieldAndTheProblem) {
  auto ok = ParseJsonBounded(R"({"a":[1,2]})", "body");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)["a"][1], 2);
  auto deep = ParseJsonBounded(std::string(65, '[') + std::string(65, ']'), "body");
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().field(), "body");
  EXPECT_NE(deep.status().message().find("deeper than 64"), std::string::npos);
  EXPECT_TRUE(ParseJsonBounded(std::string(64, '[') + std::string(64, ']'), "body").ok());
  auto big = ParseJsonBounded(std::string(100, ' '), "body", JsonLimits{64, 50});
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("100 bytes"), std::string::npos);
  auto bad = ParseJsonBounded("{\"a\": ", "spec");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().field(), "spec");
}

TEST(JsonLimits, ParseOrFallsBackOnAnythingUnreadable) {
  EXPECT_EQ(ParseJsonOr("", 7), 7);
  EXPECT_EQ(ParseJsonOr("nope", 7), 7);
  EXPECT_EQ(ParseJsonOr(std::string(60000, '[') + std::string(60000, ']'), 7), 7);
  EXPECT_EQ(ParseJsonOr("[1]", 7), nlohmann::json::array({1}));
}

TEST(JsonLimits, Utf8PrefixNeverCutsACharacter) {
  EXPECT_EQ(Utf8Prefix("abc", 5), "abc");
  EXPECT_EQ(Utf8Prefix("abc", 2), "ab");
  EXPECT_EQ(Utf8Prefix("a\xc3\xa9", 2), "a");                            // é is 2 bytes: not split
  EXPECT_EQ(Utf8Prefix("\xe2\x82\xac\xe2\x82\xac", 4), "\xe2\x82\xac");  // €€
  EXPECT_EQ(DumpJson(nlohmann::json("a\xff")), "\"a\xef\xbf\xbd\"");     // U+FFFD
  EXPECT_FALSE(ParseJsonBounded("1e400", "body").ok());
  EXPECT_EQ(ParseJsonOr("[1e400]", 7), 7);
}

TEST(JsonLimits, ValueDepthIsIterative) {
  nlohmann::json v = nlohmann::json::parse(std::string(5000, '[') + std::string(5000, ']'));
  EXPECT_EQ(JsonValueDepth(v), 5000);
  EXPECT_EQ(JsonValueDepth(nlohmann::json(3)), 0);
}

}  // namespace
}  // namespace frenzy
