// Heterogeneous pipelines (issue 19): one job over several GPU types, consecutive pipeline stages
// on each, when no single type holds it.
//
// The family: Megatron-style tensor parallelism inside a node (the same degree on every type),
// data parallelism over whole pipelines, and a pipeline whose first stages sit on the type with
// the most memory per GPU (the first stage keeps the most micro-batches in flight) and the last
// on the least. Layers are split first by speed (each stage's share of the layers in proportion
// to its type's achievable matmul rate, so that the stages take about as long), then moved one
// at a time from a stage whose predicted memory exceeds its GPU's (with the margin) to the stage
// with the most headroom, until every stage fits or none has room. Each candidate is judged by
// MARP per stage on its own type and timed by PredictMixedPerf (the slowest stage's pace).
//
// Pruned hard: two to four of the cluster's types, in memory order; tp a power of two up to the
// smallest node; dp a power of two; on each type all the stages its GPUs allow or half of them;
// micro-batch 1; no recomputation or full; Megatron's distributed optimizer when dp > 1; no ZeRO
// or context parallelism. For T types: at most sum over subsets of 2^|subset| x 4 tp x the dp
// values x 2 candidates, each fitted in at most 2 pp + 4 memory predictions (sia64's three
// types: 4,740 predictions for Llama-3.1-70B, 0.03 s). Only full training under frameworks with
// pipeline parallelism and no required ZeRO stage; fits judged on the planner's reading.
#ifndef FRENZY_PLANNER_MIXED_H_
#define FRENZY_PLANNER_MIXED_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "hardware/cluster.h"
#include "hardware/gpu.h"
#include "planner/planner.h"

namespace frenzy {

struct MixedPart {
  std::string gpu;
  int64_t stages = 0;
  int64_t gpus = 0;  // stages x tp x dp
};

struct MixedPlan {
  std::vector<MixedPart> parts;  // first stages first
  int64_t gpus = 0, tp = 1, pp = 1, dp = 1, micro_batch = 1;
  bool distributed_optimizer = false;
  Recompute recompute = Recompute::kNone;
  Precision precision = Precision::kBf16;
  std::vector<int64_t> stage_layers;
  std::vector<int64_t> stage_device_bytes;  // each stage's bytes of the planner's reading
  std::vector<int64_t> stage_gpu_memory_bytes;
  double iteration_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;  // against the summed peaks of all its GPUs
  double total_s = 0;
};

struct MixedResult {
  std::vector<MixedPlan> plans;  // fastest first, at most options.top
  int64_t layouts_considered = 0;
};

// REQUIRES: job.model.Validate().ok(). Empty when the job cannot pipeline (pinned pp 1,
// fine-tuning, a framework without pipelines) or nothing fits.
Result<MixedResult> PlanMixedPipelines(const JobSpec& job, const Cluster& cluster,
                                       const GpuCatalog& catalog, const PlannerOptions& options);

nlohmann::json MixedPlanToJson(const MixedPlan& p);

}  // namespace frenzy

#endif  // FRENZY_PLANNER_MIXED_H_
