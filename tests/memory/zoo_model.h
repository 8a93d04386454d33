// A zoo model and a checked prediction for the memory tests (failures are reported).
#ifndef FRENZY_TESTS_MEMORY_ZOO_MODEL_H_
#define FRENZY_TESTS_MEMORY_ZOO_MODEL_H_

#include <gtest/gtest.h>

#include <string>

#include "memory/memory_model.h"
#include "model/zoo.h"

namespace frenzy::test {

inline ModelSpec Zoo(const std::string& name) {
  auto r = ResolveModel(name);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : ModelSpec{};
}

// MARP's estimate of a layout the test expects to be possible (a refusal is reported).
inline MemoryEstimate Predict(const ModelSpec& m, const TrainingSpec& t, const ParallelPlan& p) {
  auto r = PredictMemory(m, t, p);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : MemoryEstimate{};
}

}  // namespace frenzy::test

#endif  // FRENZY_TESTS_MEMORY_ZOO_MODEL_H_
