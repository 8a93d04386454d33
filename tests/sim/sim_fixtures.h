// Shared by the simulator's tests: the bundled lab cluster and workloads from CSV text.
#ifndef FRENZY_TESTS_SIM_SIM_FIXTURES_H_
#define FRENZY_TESTS_SIM_SIM_FIXTURES_H_

#include <gtest/gtest.h>

#include <string>

#include "hardware/cluster.h"
#include "hardware/gpu.h"
#include "sim/workload.h"

namespace frenzy::testing {

inline const Cluster& Lab() {
  static const Cluster c = *ResolveCluster("lab", GpuCatalog::Default());
  return c;
}

inline Workload Parse(const std::string& csv) {
  auto w = ParseWorkloadCsv(csv, "test.csv");
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  return *w;
}

}  // namespace frenzy::testing

#endif  // FRENZY_TESTS_SIM_SIM_FIXTURES_H_
