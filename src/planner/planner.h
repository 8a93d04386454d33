// The planner: the serverless decision. Given a job (model and training goals, never GPUs) and
// a cluster, it enumerates every layout on every GPU type the cluster has — GPU count, TP
// (within a node), PP (dividing the layers), DP, CP, micro-batch (with gradient accumulation
// reaching the global batch), ZeRO / distributed optimizer, recomputation — keeps those whose
// predicted per-GPU memory fits with a safety margin (MARP), predicts their speed (perf), and
// ranks them by completion time, cost or a mix. It also returns the Pareto set over
// (GPUs used, time). "No plan fits" is an answer that says what would fit.
//
// Pure function of its inputs; the scheduler calls it for every job it sees.
#ifndef FRENZY_PLANNER_PLANNER_H_
#define FRENZY_PLANNER_PLANNER_H_

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "hardware/cluster.h"
#include "hardware/gpu.h"
#include "memory/training.h"
#include "model/model_spec.h"

namespace frenzy {

enum class Objective { kTime, kCost, kMix };

// What a user submits. Every optional field is a pin the planner respects.
struct JobSpec {
  ModelSpec model;
  double tokens = 0;          // tokens to train on
  int64_t global_batch = 0;   // sequences per iteration
  int64_t seq_len = 2048;
  Precision precision = Precision::kBf16;
  Framework framework = Framework::kMegatron;
  std::optional<std::string> gpu;  // pin a GPU type (users normally do not)
  std::optional<int64_t> gpus, tp, pp, dp, cp, micro_batch, zero;
  std::optional<Recompute> recompute;
  std::optional<double> deadline_s;  // finish within this many seconds
  std::optional<double> budget;      // spend at most this (USD)
};

struct PlannerOptions {
  // Headroom kept above the predicted device memory: MARP's worst error on its ground truth is
  // 2.8% (CPU) and 8.1% on published Megatron reserved memory (bench/RESULTS.md); 10% covers
  // both.
  double memory_margin = 0.10;
  Objective objective = Objective::kTime;
  int64_t top = 10;
};

struct Plan {
  std::string gpu;
  int64_t gpus = 0;
  int64_t tp = 1, pp = 1, dp = 1, cp = 1, micro_batch = 1, zero = 0;
  bool distributed_optimizer = false;
  Recompute recompute = Recompute::kNone;
  int64_t peak_bytes = 0;
  int64_t device_bytes = 0;
  int64_t gpu_memory_bytes = 0;
  double iteration_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  double total_s = 0;
  std::optional<double> cost;  // USD; absent when the GPU has no price
  bool pareto = false;
};

struct PlanResult {
  std::vector<Plan> plans;   // ranked, best first, at most `top`
  std::vector<Plan> pareto;  // over (gpus, total_s), fewest GPUs first
  int64_t layouts_considered = 0;
  int64_t layouts_fitting = 0;
  std::string explanation;   // why the winner won, or why nothing fits and what would
};

// One GPU type of a cluster as the planner sees it: how many GPUs, the largest node (the TP
// limit) and the slowest node's network. In order of first appearance in the cluster; nodes
// whose type is not in the catalog are left out.
struct ClusterGpuType {
  const GpuType* gpu = nullptr;
  int64_t count = 0;
  int64_t gpus_per_node = 0;
  double network_gbs = 0;
};
std::vector<ClusterGpuType> ClusterGpuTypes(const Cluster& cluster, const GpuCatalog& catalog);

// A plan as JSON (the fields of Plan; `cost` null when unknown).
nlohmann::json PlanToJson(const Plan& p);

Result<PlanResult> PlanJob(const JobSpec& job, const Cluster& cluster, const GpuCatalog& catalog,
                           const PlannerOptions& options);

}  // namespace frenzy

#endif  // FRENZY_PLANNER_PLANNER_H_
