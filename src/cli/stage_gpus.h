// --stage-gpus, the heterogeneous pipeline `predict` and `perf` take (issue 19): consecutive
// stages on one GPU type each, "A100-40GB:2,V100-32GB:2" for the first two stages on A100s and
// the last two on V100s.
#ifndef FRENZY_CLI_STAGE_GPUS_H_
#define FRENZY_CLI_STAGE_GPUS_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "memory/memory_model.h"
#include "perf/perf_model.h"

namespace frenzy::cli {

// The parts of `text` (TYPE:STAGES, comma-separated; types from the catalog), first to last;
// fails naming --stage-gpus when a part is malformed, a type unknown, or the stages do not add
// up to `pp`. The parts' networks are left at their defaults.
Result<std::vector<StageGpus>> ParseStageGpus(const std::string& text, int64_t pp);

// Each stage of `est` judged on its own part's GPU memory (resident bytes against the GPU's):
// [{"stage", "gpu", "gpu_memory_bytes", "resident_bytes", "headroom_bytes", "fits"}, ...].
nlohmann::json StageFits(const MemoryEstimate& est, const std::vector<StageGpus>& parts);

}  // namespace frenzy::cli

#endif  // FRENZY_CLI_STAGE_GPUS_H_
