#include "sim/world.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace frenzy {
namespace {

// MARP's measured errors on published Megatron-LM runs (bench/RESULTS.md, "MARP against
// published measurements", rows pub019-pub031: (predicted - measured) / measured). A job's real
// peak is predicted / (1 + error).
constexpr double kMeasuredMarpErrors[] = {-0.014, 0.025,  -0.001, -0.014, -0.014, -0.049, -0.030,
                                          -0.081, -0.013, 0.020,  -0.019, -0.024, -0.059};

}  // namespace

RunEnd MemoryEnd(const JobTruth& truth, const RunShape& r, double oom_after_s) {
  const double capacity = static_cast<double>(r.capacity_bytes);
  const double p0 = r.total > 0 ? r.done / r.total : 0.0;
  const double left = std::max(0.0, r.total - r.done);
  RunEnd end{r.progress_since_s + left / r.rate, RunEndKind::kFinish};
  if (truth.RealPeak(r.predicted_bytes, p0) > capacity) {
    return RunEnd{r.progress_since_s + oom_after_s, RunEndKind::kOom};
  }
  if (truth.drift > 0 && truth.RealPeak(r.predicted_bytes, 1.0) > capacity) {
    // The progress at which the growing peak crosses the GPU's memory.
    double p_cross = (capacity / truth.RealPeak(r.predicted_bytes, 0.0) - 1.0) / truth.drift;
    double t = r.progress_since_s + (p_cross * r.total - r.done) / r.rate;
    if (t < end.t_s) end = RunEnd{std::max(r.now_s, t), RunEndKind::kOom};
  }
  return end;
}

World::World(const WorldOptions& o)
    : o_(o),
      rng_(o.seed),
      rng_drift_(o.seed ^ 0x9e3779b97f4a7c15ULL),
      rng_crash_(o.seed ^ 0xbf58476d1ce4e5b9ULL),
      normal_(0.0, o.memory_error_pct.value_or(0) / 100.0),
      pick_(0, std::size(kMeasuredMarpErrors) - 1) {}

JobTruth World::DrawJob() {
  JobTruth t;
  double err = o_.memory_error_pct ? normal_(rng_) : kMeasuredMarpErrors[pick_(rng_)];
  t.factor = o_.memory_error_pct ? std::max(0.5, 1.0 + err) : 1.0 / (1.0 + err);
  t.factor *= 1.0 + o_.memory_bias_pct / 100.0;
  if (o_.memory_drift_pct > 0) {
    t.drift =
        std::uniform_real_distribution<double>(0.0, o_.memory_drift_pct / 100.0)(rng_drift_);
  }
  return t;
}

std::vector<double> World::DrawNodeSpeeds(size_t nodes) {
  std::vector<double> speed(nodes, 1.0);
  if (o_.straggler_fraction > 0) {
    std::bernoulli_distribution slow(o_.straggler_fraction);
    for (double& s : speed) {
      if (slow(rng_drift_)) s = o_.straggler_speed;
    }
  }
  return speed;
}

double World::NodeFailureAfter() {
  return std::exponential_distribution<double>(1.0 / o_.node_mtbf_s)(rng_);
}

RunEnd World::EndOf(const JobTruth& truth, const RunShape& run) {
  RunEnd end = MemoryEnd(truth, run, o_.oom_after_s);
  if (o_.job_crash_mtbf_s > 0) {
    double t =
        run.now_s + std::exponential_distribution<double>(1.0 / o_.job_crash_mtbf_s)(rng_crash_);
    if (t < end.t_s) end = RunEnd{t, RunEndKind::kCrash};
  }
  return end;
}

}  // namespace frenzy
