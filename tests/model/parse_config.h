// Parsing a config.json text in the model tests: the spec (a failure is reported), or the
// error a bad one must give.
#ifndef FRENZY_TESTS_MODEL_PARSE_CONFIG_H_
#define FRENZY_TESTS_MODEL_PARSE_CONFIG_H_

#include <gtest/gtest.h>

#include <string>

#include "model/hf_config.h"

namespace frenzy::test {

inline ModelSpec Parse(const std::string& text) {
  auto r = ParseHfConfigText(text, "test.json");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : ModelSpec{};
}

inline Status ParseError(const std::string& text) {
  auto r = ParseHfConfigText(text, "bad.json");
  EXPECT_FALSE(r.ok()) << "expected an error for " << text;
  return r.status();
}

}  // namespace frenzy::test

#endif  // FRENZY_TESTS_MODEL_PARSE_CONFIG_H_
