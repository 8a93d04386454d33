// Mixed plans (issue 19): one job over several GPU types. Two families:
//  * heterogeneous pipelines (PlanMixedPipelines): consecutive pipeline stages on each type,
//    when no single type holds the job;
//  * heterogeneous data parallelism (PlanMixedDataParallel): groups of whole replicas on each
//    type, each group with its own share of the global batch, micro-batch and accumulation.
//
// The pipeline family: Megatron-style tensor parallelism inside a node (the same degree on every type),
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
//
// The data-parallel family: every replica has the same model-parallel layout (tp inside a node,
// pp with an even split, one ZeRO stage or Megatron's distributed optimizer, sharded inside each
// group, recomputation none or full); a group of dp_g replicas on one type takes b_g sequences
// of every global batch B (sum of b_g = B) as micro-batches of m_g, the largest of 1, 2, 4, 8
// that fits its type's memory with the margin. The batch is split so that the groups' steps
// take the same time: each group's step is linear in its sequences per replica s (t_g(s) =
// a_g + c_g s, two PredictPerf points), the continuous balance s_g = (T - a_g) / c_g with
// sum dp_g s_g = B, rounded down to whole micro-batches, the rest given a micro-batch at a time
// to the group that finishes it soonest. Timed by PredictMixedDataPerf (the slowest group plus
// the exchange between groups). Pruned: two to four types; tp and pp powers of two (pp up to 8);
// on each type all the replicas its GPUs hold or half of them; every group takes at least one
// micro-batch per replica. Only full training without context or expert parallelism.
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

enum class MixedFamily { kPipeline, kData };
const char* MixedFamilyName(MixedFamily f);  // "pipeline", "data"

struct MixedPart {
  std::string gpu;
  int64_t stages = 0;  // pipeline: the stages on this type; data: the replicas' pp
  int64_t gpus = 0;    // pipeline: stages x tp x dp; data: dp x tp x pp
  // The data-parallel family: the group's replicas, micro-batch, sequences of every global
  // batch, accumulation steps (batch / (dp x micro_batch)), its own step time (without the
  // exchange between groups) and the device bytes of the planner's reading on its GPU type.
  int64_t dp = 0, micro_batch = 0, batch = 0, accumulation = 0;
  double step_s = 0;
  int64_t device_bytes = 0, gpu_memory_bytes = 0;
};

struct MixedPlan {
  MixedFamily family = MixedFamily::kPipeline;
  std::vector<MixedPart> parts;  // pipeline: first stages first; data: cluster order
  int64_t gpus = 0, tp = 1, pp = 1, dp = 1, micro_batch = 1;  // data: dp summed, micro-batch 0
  int64_t zero = 0;  // the data family's ZeRO stage (sharded inside each group)
  bool distributed_optimizer = false;
  Recompute recompute = Recompute::kNone;
  Precision precision = Precision::kBf16;
  // Pipeline family only:
  std::vector<int64_t> stage_layers;
  std::vector<int64_t> stage_device_bytes;  // each stage's bytes of the planner's reading
  std::vector<int64_t> stage_gpu_memory_bytes;
  double cross_group_s = 0;  // data family: the gradient exchange between groups, per step
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

// REQUIRES: job.model.Validate().ok(). Empty when the job cannot split its batch so (fine-tuning,
// a pinned GPU type, context or expert parallelism pinned) or nothing fits.
// `every_count`: on each type every power of two of replicas up to all it holds (and all), not
// only all or half: the smaller mixes a scheduler places on the GPUs left free.
Result<MixedResult> PlanMixedDataParallel(const JobSpec& job, const Cluster& cluster,
                                          const GpuCatalog& catalog,
                                          const PlannerOptions& options,
                                          bool every_count = false);

// The mixed plans worth offering beside the single-type ones, fastest first: when no single
// type holds the job (`best_single_tokens_per_s` 0), both families; otherwise only
// data-parallel plans faster than the best single-type plan.
Result<MixedResult> PlanMixed(const JobSpec& job, const Cluster& cluster,
                              const GpuCatalog& catalog, const PlannerOptions& options,
                              double best_single_tokens_per_s);

nlohmann::json MixedPlanToJson(const MixedPlan& p);

}  // namespace frenzy

#endif  // FRENZY_PLANNER_MIXED_H_
