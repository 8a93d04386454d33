// The mixed layouts `predict` and `perf` take (issue 19):
//  * --stage-gpus, a heterogeneous pipeline: consecutive stages on one GPU type each,
//    "A100-40GB:2,V100-32GB:2" for the first two stages on A100s and the last two on V100s;
//  * --data-groups, heterogeneous data parallelism: groups of replicas on one type each with
//    their share of the global batch, TYPE:REPLICAS:BATCH[:MICRO] comma-separated,
//    "A100-40GB:2:380,V100-32GB:3:132" for 2 A100 replicas taking 380 sequences of every global
//    batch and 3 V100 ones taking 132 (MICRO: the group's micro-batch, default --micro-batch).
#ifndef FRENZY_CLI_MIXED_LAYOUTS_H_
#define FRENZY_CLI_MIXED_LAYOUTS_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "memory/memory_model.h"
#include "model/model_spec.h"
#include "perf/mixed_perf.h"

namespace frenzy::cli {

// The parts of `text` (TYPE:STAGES, comma-separated; types from the catalog), first to last;
// fails naming --stage-gpus when a part is malformed, a type unknown, or the stages do not add
// up to `pp`. The parts' networks are left at their defaults.
Result<std::vector<StageGpus>> ParseStageGpus(const std::string& text, int64_t pp);

// The groups of `text` (TYPE:REPLICAS:BATCH[:MICRO], comma-separated), in order; fails naming
// --data-groups when a group is malformed or a type unknown. Networks are left at defaults.
Result<std::vector<DataGroup>> ParseDataGroups(const std::string& text, int64_t micro_batch);

// Each stage of `est` judged on its own part's GPU memory (resident bytes against the GPU's):
// [{"stage", "gpu", "gpu_memory_bytes", "resident_bytes", "headroom_bytes", "fits"}, ...].
nlohmann::json StageFits(const MemoryEstimate& est, const std::vector<StageGpus>& parts);

// The network of `gpu` nodes in `cluster` (a bundled name or a file), or the class's default
// (DefaultNetwork); `why` names the one assumed.
Result<Network> NetworkFor(const std::string& cluster, const GpuType& gpu, int64_t gpus,
                           std::string* why);
// The figures of a perf estimate that `perf --json` prints for every layout.
nlohmann::json PerfFiguresJson(const std::string& model, const PerfEstimate& e);

// The commands' mixed layouts (each prints its answer, or fails naming the flag):
// predict --data-groups: each group accounted on its own type with its micro-batch and shards;
void PredictDataGroups(const std::string& text, const ModelSpec& spec,
                       const TrainingSpec& train, const ParallelPlan& plan, bool json);
// perf --stage-gpus: every stage on its own type, at the slowest stage's pace;
void PerfStageGpus(const std::string& text, const ModelSpec& spec, const TrainingSpec& train,
                   const ParallelPlan& plan, const std::string& cluster, bool json);
// perf --data-groups: the slowest group's step plus the exchange between groups.
void PerfDataGroups(const std::string& text, const ModelSpec& spec, const TrainingSpec& train,
                    const ParallelPlan& plan, const std::string& cluster, bool json);

}  // namespace frenzy::cli

#endif  // FRENZY_CLI_MIXED_LAYOUTS_H_
