#include "runtime/monitor.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

namespace frenzy::runtime {

double JobMemory::ProjectedRatio(double at_progress) const {
  double r = ratio;
  if (!samples.empty()) {
    double p0 = samples.back().first;
    r = samples.back().second + slope * std::max(0.0, at_progress - p0);
  }
  return std::max(r, floor.value_or(0.0));
}

double ClassCorrection::Ratio() const { return std::min(max_ratio, mean_ratio + 2 * stddev); }

void MemoryMonitor::Track(int64_t job, std::string job_class) {
  jobs_[job].job_class = std::move(job_class);
}

void MemoryMonitor::Report(int64_t job, const MemoryReport& r) {
  if (r.predicted_bytes <= 0 || r.capacity_bytes <= 0) return;
  JobMemory& m = jobs_[job];
  double ratio = static_cast<double>(r.peak_bytes) / static_cast<double>(r.predicted_bytes);
  double progress = std::clamp(r.progress, 0.0, 1.0);
  m.ratio = ratio;
  m.peak_bytes = r.peak_bytes;
  m.predicted_bytes = r.predicted_bytes;
  m.capacity_bytes = r.capacity_bytes;
  m.progress = progress;
  ++m.reports;
  // A report at the same progress (e.g. after a restart) replaces the older one.
  if (!m.samples.empty() && m.samples.back().first >= progress) {
    while (!m.samples.empty() && m.samples.back().first >= progress) m.samples.pop_back();
  }
  m.samples.emplace_back(progress, ratio);
  if (m.samples.size() > static_cast<size_t>(opt_.window)) m.samples.erase(m.samples.begin());
  // Least-squares slope of ratio against progress over the window.
  m.slope = 0;
  if (m.samples.size() >= 2) {
    double n = static_cast<double>(m.samples.size());
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (const auto& [x, y] : m.samples) {
      sx += x;
      sy += y;
      sxx += x * x;
      sxy += x * y;
    }
    double den = n * sxx - sx * sx;
    if (den > 1e-12) m.slope = std::max(0.0, (n * sxy - sx * sy) / den);
  }
}

void MemoryMonitor::ReportOom(int64_t job, int64_t predicted_bytes, int64_t capacity_bytes) {
  if (predicted_bytes <= 0) return;
  JobMemory& m = jobs_[job];
  ++m.ooms;
  double at_least = static_cast<double>(capacity_bytes) / static_cast<double>(predicted_bytes);
  m.floor = std::max(m.floor.value_or(0.0), at_least);
}

void MemoryMonitor::Finish(int64_t job) {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return;
  const JobMemory& m = it->second;
  if (m.reports > 0 && !m.job_class.empty()) {
    double x = m.ProjectedRatio(1.0);
    ClassCorrection& c = classes_[m.job_class];
    ++c.jobs;
    double delta = x - c.mean_ratio;
    if (c.jobs == 1) {
      c.mean_ratio = x;
      c.max_ratio = x;
      c.m2 = 0;
    } else {
      c.mean_ratio += delta / c.jobs;
      c.m2 += delta * (x - c.mean_ratio);
      c.max_ratio = std::max(c.max_ratio, x);
    }
    c.stddev = c.jobs > 1 ? std::sqrt(c.m2 / (c.jobs - 1)) : 0.0;
  }
  jobs_.erase(it);
}

const JobMemory* MemoryMonitor::Find(int64_t job) const {
  auto it = jobs_.find(job);
  return it == jobs_.end() ? nullptr : &it->second;
}

std::optional<ClassCorrection> MemoryMonitor::Correction(const std::string& job_class) const {
  auto it = classes_.find(job_class);
  if (it == classes_.end() || it->second.jobs < opt_.min_evidence) return std::nullopt;
  return it->second;
}

double MemoryMonitor::Bound(double f) const {
  return std::clamp(f, opt_.min_factor, opt_.max_factor);
}

std::optional<double> MemoryMonitor::Factor(int64_t job) const {
  const JobMemory* m = Find(job);
  if (m != nullptr && (m->reports > 0 || m->floor)) {
    // The bound never lets a layout that crashed fit again.
    return std::max(Bound(m->ProjectedRatio(1.0) * (1 + opt_.margin)),
                    m->floor.value_or(0.0) * (1 + opt_.margin));
  }
  if (m != nullptr) {
    if (auto c = Correction(m->job_class)) return Bound(c->Ratio() * (1 + opt_.margin));
  }
  return std::nullopt;
}

std::string MemoryMonitor::Explain(int64_t job) const {
  const JobMemory* m = Find(job);
  if (m == nullptr) return "not watched";
  auto f = Factor(job);
  if (m->reports == 0 && m->floor) {
    return fmt::format("out of memory {} time(s) before its first report: at least {:.2f}x the "
                       "prediction; planned with {:.2f}x",
                       m->ooms, *m->floor, *f);
  }
  if (m->reports > 0 || m->floor) {
    std::string s = fmt::format(
        "observed {:.2f}x the prediction at {:.0f}% progress (trend +{:.3f} per 100%), "
        "expected {:.2f}x by the end",
        m->ratio, 100 * m->progress, m->slope, m->ProjectedRatio(1.0));
    if (m->floor) s += fmt::format("; out of memory {} time(s): at least {:.2f}x", m->ooms, *m->floor);
    return s + fmt::format("; planned with {:.2f}x", *f);
  }
  if (auto c = Correction(m->job_class)) {
    return fmt::format(
        "class {}: {:.2f}x the prediction on average (sd {:.2f}, max {:.2f}) over {} jobs; "
        "planned with {:.2f}x",
        m->job_class, c->mean_ratio, c->stddev, c->max_ratio, c->jobs, *f);
  }
  return "no observation yet: planned with the prediction and its margin";
}

}  // namespace frenzy::runtime
