// Hand-built clusters and option tables for the scheduler tests (no planner needed).
#ifndef FRENZY_TESTS_SCHED_SCHED_FIXTURES_H_
#define FRENZY_TESTS_SCHED_SCHED_FIXTURES_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "sched/policy.h"

namespace frenzy::testing {

inline constexpr int64_t kGiB = int64_t{1} << 30;

struct TypeSpec {
  std::string name;
  int64_t memory_gib;
  int nodes;
  int64_t gpus_per_node;
};

inline ClusterView MakeCluster(const std::vector<TypeSpec>& specs) {
  ClusterView c;
  for (size_t t = 0; t < specs.size(); ++t) {
    c.types.push_back(specs[t].name);
    c.gpu_memory_bytes.push_back(specs[t].memory_gib * kGiB);
    c.gpus_per_node.push_back(specs[t].gpus_per_node);
    for (int n = 0; n < specs[t].nodes; ++n) {
      c.nodes.push_back(
          NodeView{static_cast<int>(t), specs[t].gpus_per_node, specs[t].gpus_per_node, true});
    }
  }
  return c;
}

inline RunOption Opt(int type, int64_t gpus, double tokens_per_s, int64_t device_gib = 10) {
  RunOption o{type, gpus, Plan{}, true, {}};
  o.plan.gpus = gpus;
  o.plan.tp = 1;
  o.plan.tokens_per_s = tokens_per_s;
  o.plan.device_bytes = device_gib * kGiB;
  return o;
}

inline JobOptions Table(const ClusterView& c, std::vector<RunOption> opts) {
  JobOptions t;
  t.types = c.types;
  std::sort(opts.begin(), opts.end(), [](const RunOption& a, const RunOption& b) {
    return a.type != b.type ? a.type < b.type : a.gpus < b.gpus;
  });
  t.options = std::move(opts);
  return t;
}

}  // namespace frenzy::testing

#endif  // FRENZY_TESTS_SCHED_SCHED_FIXTURES_H_
