// Planner outcomes for people and programs: the one-line explanation that `frenzy plan` and the
// API show, and the typed reasons of an infeasible outcome as JSON. The planner itself writes no
// prose (planner/planner.h); only the CLI and the daemon call these, at the edge.
//
// Pure functions of their inputs.
#ifndef FRENZY_PLANNER_EXPLAIN_H_
#define FRENZY_PLANNER_EXPLAIN_H_

#include <nlohmann/json.hpp>

#include <string>

#include "planner/planner.h"

namespace frenzy {

// Why the winner won ("fastest plan: 16 x A100-80GB (TP 1, PP 2, ...) trains in 3.1 days at 64%
// MFU; 35 of 80 GiB per GPU"), or why nothing fits and what would ("no plan fits this cluster:
// A100-80GB (80 GiB): at least 85 GiB per GPU even on 16 of them (...). It would fit on 20 x
// A100-80GB (...); this cluster has 16."). `options` must be the ones `result` was planned
// with (the objective names the winner).
std::string ExplainPlan(const PlanResult& result, const PlannerOptions& options);

// {"kind": "too_little_memory", "error": {"field", "message"} | null,
//  "shortfalls": [{"gpu", "gpu_memory_bytes", "least_bytes", "least_layout": {...}}],
//  "would_fit": {"plan": PlanToJson, "cluster_gpus"} | null}
nlohmann::json InfeasibleToJson(const Infeasible& why);

// InfeasibleToJson(*result.infeasible), or null when the result is placed.
nlohmann::json InfeasibleOrNull(const PlanResult& result);

}  // namespace frenzy

#endif  // FRENZY_PLANNER_EXPLAIN_H_
