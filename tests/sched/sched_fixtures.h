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
  RunOption o{type, gpus, Plan{}, true, {}, {}};
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

// The scale scenario of Sia's tests and benchmark: 64 GPUs of three types, and 12 option tables
// (job kinds) whose speed grows with the GPU count less than linearly, some too big for v100.
// A job of the scale scenarios: profiled (its memory factor known, 1), a long way to go.
inline JobView ProfiledJob(int64_t key, const JobOptions* table) {
  JobView j;
  j.key = key;
  j.id = "job" + std::to_string(key);
  j.options = table;
  j.memory_factor = 1.0;
  j.total_tokens = 1e12;
  return j;
}

inline ClusterView SiaScaleCluster() {
  return MakeCluster({{"h100", 80, 4, 8}, {"a100", 80, 2, 8}, {"v100", 32, 2, 8}});
}
inline std::vector<JobOptions> SiaScaleTables(const ClusterView& c) {
  std::vector<JobOptions> tables;
  tables.reserve(12);
  for (int k = 0; k < 12; ++k) {
    std::vector<RunOption> opts;
    for (int t = 0; t < 3; ++t) {
      for (int64_t g = 1; g <= 32; g *= 2) {
        if (g > c.TotalOfType(t)) break;
        const double speed = (100.0 + 17 * k) * (3 - t) * g * (1.0 - 0.02 * (k % 5) * g / 8);
        opts.push_back(Opt(t, g, speed, t == 2 && k % 3 == 0 ? 40 : 16));
      }
    }
    tables.push_back(Table(c, opts));
  }
  return tables;
}

// The scale scenario of Gavel's tests and benchmark: 4 types x 16 GPUs and 20 option tables.
inline ClusterView GavelScaleCluster() {
  return MakeCluster({{"h100", 80, 2, 8}, {"a100", 80, 2, 8}, {"v100", 32, 2, 8}, {"t4", 16, 4, 4}});
}
inline std::vector<JobOptions> GavelScaleTables(const ClusterView& c) {
  std::vector<JobOptions> tables;
  tables.reserve(20);
  for (int k = 0; k < 20; ++k) {
    const double base = 100.0 + 37.0 * k;
    std::vector<RunOption> opts;
    for (int t = 0; t < 4; ++t) {
      for (int64_t g : {1, 2, 4, 8}) {
        const double speed = base * (4 - t) * (1.0 + 0.1 * ((k + t) % 3)) * g * 0.9;
        opts.push_back(Opt(t, g, speed, 8 + (k % 4) * 4));
      }
    }
    tables.push_back(Table(c, opts));
  }
  return tables;
}

}  // namespace frenzy::testing

#endif  // FRENZY_TESTS_SCHED_SCHED_FIXTURES_H_
