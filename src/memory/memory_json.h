// JSON view of a memory estimate, as `frenzy predict --json` prints it and the daemon serves it.
#ifndef FRENZY_MEMORY_MEMORY_JSON_H_
#define FRENZY_MEMORY_MEMORY_JSON_H_

#include <nlohmann/json.hpp>

#include "hardware/gpu.h"
#include "memory/memory_model.h"
#include "memory/training.h"

namespace frenzy {

nlohmann::json BreakdownToJson(const MemoryBreakdown& b);
nlohmann::json LayoutToJson(const TrainingSpec& t, const ParallelPlan& p);
// `gpu` may be null; with a GPU the JSON gains "gpu", "fits" and "headroom_bytes".
nlohmann::json MemoryEstimateToJson(const MemoryEstimate& e, const GpuType* gpu);

}  // namespace frenzy

#endif  // FRENZY_MEMORY_MEMORY_JSON_H_
