#include "common/status.h"

#include <gtest/gtest.h>

#include "common/json_reader.h"
#include "common/strings.h"

namespace frenzy {
namespace {

Result<int> Half(int v) {
  if (v % 2 != 0) return InvalidArgument("odd", "input", "v");
  return v / 2;
}

Result<int> Quarter(int v) {
  ASSIGN_OR_RETURN(int h, Half(v));
  ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(Status, ToStringNamesWhereAndField) {
  Status s = InvalidArgument("must be positive", "cfg.json", "hidden_size");
  EXPECT_EQ(s.ToString(), "cfg.json: field 'hidden_size': must be positive");
  EXPECT_EQ(Status().ToString(), "ok");
}

TEST(Status, AssignOrReturnPropagatesTheFirstError) {
  EXPECT_EQ(*Quarter(12), 3);
  Result<int> r = Quarter(6);  // 6 -> 3 -> odd
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().field(), "v");
}

TEST(JsonReader, ParseErrorsGiveLineAndColumn) {
  auto r = ParseJson("{\n  \"a\": 1,\n  \"b\": }\n", "x.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("x.json: invalid JSON at line 3"), std::string::npos)
      << r.status().ToString();
}

TEST(JsonReader, CollectsEveryBadField) {
  auto doc = nlohmann::json::parse(R"({"a": "x", "b": -3, "c": 2.5})");
  JsonReader r(doc, "f.json");
  r.Int("a");
  r.IntAtLeast("b", 1);
  r.Int("c");
  r.Int("missing");
  Status s = r.Finish();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.field(), "a");
  for (const char* f : {"'b'", "'c'", "'missing'"}) {
    EXPECT_NE(s.message().find(f), std::string::npos) << s.message();
  }
}

TEST(JsonReader, AcceptsIntegralFloatsAsIntegers) {
  auto doc = nlohmann::json::parse(R"({"a": 4096.0})");
  JsonReader r(doc, "f.json");
  EXPECT_EQ(r.Int("a"), 4096);
  EXPECT_TRUE(r.Finish().ok());
}

TEST(Strings, ThousandsAndClosestMatches) {
  EXPECT_EQ(WithThousands(6738415616), "6,738,415,616");
  EXPECT_EQ(WithThousands(12), "12");
  auto m = ClosestMatches("llama-2-7", {"llama-2-7b", "llama-2-13b", "gpt2"}, 2);
  ASSERT_FALSE(m.empty());
  EXPECT_EQ(m[0], "llama-2-7b");
}

}  // namespace
}  // namespace frenzy

namespace frenzy {
namespace {

// Found by the fuzzer: a number too large for a double is an error, not an exception.
TEST(JsonReader, HugeNumberIsAnError) {
  auto r = ParseJson(R"({"model_type": "llama", "x": 1e600})", "x.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().where(), "x.json");
}

}  // namespace
}  // namespace frenzy
