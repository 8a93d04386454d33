// A zoo model for the memory tests (a failed lookup is reported).
#ifndef FRENZY_TESTS_MEMORY_ZOO_MODEL_H_
#define FRENZY_TESTS_MEMORY_ZOO_MODEL_H_

#include <gtest/gtest.h>

#include <string>

#include "model/zoo.h"

namespace frenzy::test {

inline ModelSpec Zoo(const std::string& name) {
  auto r = ResolveModel(name);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : ModelSpec{};
}

}  // namespace frenzy::test

#endif  // FRENZY_TESTS_MEMORY_ZOO_MODEL_H_
