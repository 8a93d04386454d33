#include "sim/metrics.h"

#include <algorithm>
#include <cmath>

namespace frenzy {

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double idx = p * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(idx));
  size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
}

PolicyMetrics ComputeMetrics(PolicyMetrics m, const std::vector<JobRecord>& jobs,
                             const std::vector<double>& overhead_ms, const RunTotals& t) {
  m.jobs = static_cast<int64_t>(jobs.size());
  std::vector<double> jct;
  double queue_sum = 0;
  int64_t started = 0;
  double gpu_s = 0, wasted = 0, oom_wasted = 0;
  double all_sum = 0;
  int64_t arrived = 0;
  for (const JobRecord& rec : jobs) {
    if (rec.outcome == JobOutcome::kFinished) {
      all_sum += rec.jct_s();
      ++arrived;
    } else if (rec.submit_s < t.end_s) {  // a job due after the clock stopped never arrived
      all_sum += t.end_s - rec.submit_s;
      ++arrived;
    }
    switch (rec.outcome) {
      case JobOutcome::kFinished:
        ++m.finished;
        jct.push_back(rec.jct_s());
        break;
      case JobOutcome::kGivenUp:
        ++m.given_up;
        break;
      case JobOutcome::kImpossible:
        ++m.impossible;
        break;
      case JobOutcome::kFailed:
        ++m.failed;
        break;
      case JobOutcome::kUnfinished:
        ++m.unfinished;
        break;
    }
    if (rec.first_start_s >= 0) {
      ++started;
      queue_sum += rec.first_start_s - rec.submit_s;
    }
    gpu_s += rec.gpu_s;
    wasted += rec.wasted_gpu_s;
    oom_wasted += rec.oom_wasted_gpu_s;
    m.restarts += rec.restarts;
  }
  if (!jct.empty()) {
    double sum = 0;
    for (double j : jct) sum += j;
    m.avg_jct_s = sum / static_cast<double>(jct.size());
    m.p50_jct_s = Percentile(jct, 0.50);
    m.p95_jct_s = Percentile(jct, 0.95);
    m.p99_jct_s = Percentile(jct, 0.99);
  }
  m.makespan_s = std::max(0.0, (m.finished > 0 ? t.last_finish_s : t.end_s) - t.first_arrival_s);
  m.avg_queue_s = started > 0 ? queue_sum / static_cast<double>(started) : 0;
  // Utilisation is over the time GPU-seconds were counted: to the last completion, or to when the
  // clock stopped while jobs were still unfinished (a --max-hours cut, or jobs that can never
  // run), since their runs count GPU-seconds to the end.
  const double window =
      m.unfinished > 0 ? std::max(0.0, t.end_s - t.first_arrival_s) : m.makespan_s;
  double capacity = static_cast<double>(t.cluster_gpus) * window;
  m.gpu_util = capacity > 0 ? gpu_s / capacity : 0;
  m.gpu_util_useful = capacity > 0 ? (gpu_s - wasted) / capacity : 0;
  if (arrived > 0) m.avg_jct_all_s = all_sum / static_cast<double>(arrived);
  m.gpu_hours = gpu_s / 3600;
  m.wasted_gpu_hours = wasted / 3600;
  m.oom_wasted_gpu_hours = oom_wasted / 3600;
  m.sched_calls = static_cast<int64_t>(overhead_ms.size());
  if (!overhead_ms.empty()) {
    for (double x : overhead_ms) {
      m.sched_overhead_ms_total += x;
      m.sched_overhead_ms_max = std::max(m.sched_overhead_ms_max, x);
    }
    m.sched_overhead_ms_mean = m.sched_overhead_ms_total / static_cast<double>(m.sched_calls);
    m.sched_overhead_ms_p99 = Percentile(overhead_ms, 0.99);
  }
  return m;
}

std::vector<TimelinePoint> ThinTimeline(const std::vector<TimelinePoint>& timeline,
                                        size_t points) {
  std::vector<TimelinePoint> out;
  size_t step = std::max<size_t>(1, timeline.size() / points);
  for (size_t i = 0; i < timeline.size(); i += step) out.push_back(timeline[i]);
  if (!timeline.empty() && (timeline.size() - 1) % step != 0) out.push_back(timeline.back());
  return out;
}

CommonFigures ComputeCommon(const std::vector<SimResult>& results) {
  CommonFigures c;
  if (results.empty()) return c;
  const size_t n = results.front().jobs.size();
  std::vector<char> all(n, 1);
  for (const SimResult& r : results) {
    for (size_t i = 0; i < n; ++i) {
      if (i >= r.jobs.size() || r.jobs[i].outcome != JobOutcome::kFinished) all[i] = 0;
    }
  }
  c.jobs = std::count(all.begin(), all.end(), 1);
  for (const SimResult& r : results) {
    std::vector<double> jct;
    double gpu_s = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!all[i]) continue;
      jct.push_back(r.jobs[i].jct_s());
      gpu_s += r.jobs[i].gpu_s;
    }
    double sum = 0;
    for (double v : jct) sum += v;
    c.avg_jct_s.push_back(jct.empty() ? 0 : sum / static_cast<double>(jct.size()));
    c.p99_jct_s.push_back(Percentile(std::move(jct), 0.99));
    c.gpu_hours.push_back(gpu_s / 3600);
  }
  return c;
}

}  // namespace frenzy
