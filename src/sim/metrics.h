// What a simulation measured, computed from what happened: the jobs' records, the engine's
// event counts, the policy's per-call overhead and the timeline. A pure function: the engine
// gathers, this sums up.
#ifndef FRENZY_SIM_METRICS_H_
#define FRENZY_SIM_METRICS_H_

#include <cstdint>
#include <vector>

#include "sim/engine.h"

namespace frenzy {

struct RunTotals {
  double first_arrival_s = 0;
  double last_finish_s = 0;  // of a finished job (first_arrival_s when none finished)
  double end_s = 0;          // when the clock stopped
  int64_t cluster_gpus = 0;
};

// `counts` carries the engine's counters (events, OOMs, failures, crashes, runtime actions);
// the rest of the returned metrics is derived from `jobs` (workload order), `overhead_ms` (one
// per policy call) and `totals`.
PolicyMetrics ComputeMetrics(PolicyMetrics counts, const std::vector<JobRecord>& jobs,
                             const std::vector<double>& overhead_ms, const RunTotals& totals);

// A fair comparison of policies run on one workload: the jobs every one of them finished, and
// each policy's figures over exactly those (a policy that loses its longest jobs, e.g. to
// out-of-memory crashes, looks faster on its own finished jobs alone).
struct CommonFigures {
  int64_t jobs = 0;  // finished under every policy
  // Per result, in the order given, over those jobs:
  std::vector<double> avg_jct_s, p99_jct_s, gpu_hours;
};
// REQUIRES: every result replayed the same workload (jobs in workload order).
CommonFigures ComputeCommon(const std::vector<SimResult>& results);

// The timeline thinned to about `points` samples, keeping the last.
std::vector<TimelinePoint> ThinTimeline(const std::vector<TimelinePoint>& timeline,
                                        size_t points = 4000);

// Linear interpolation between order statistics; 0 for an empty sample.
double Percentile(std::vector<double> v, double p);

}  // namespace frenzy

#endif  // FRENZY_SIM_METRICS_H_
