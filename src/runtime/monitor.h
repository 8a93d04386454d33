// The memory monitor: what jobs really use, against what MARP predicted.
//
// It is fed memory reports — in the simulator from its memory truth, in production from the node
// agent's GPU readings and the training process's own peak-memory reports — and keeps, per job,
// the observed peak over the prediction of the layout that produced it (the *ratio*, which carries
// over between layouts), its trend against the job's progress, and the headroom left on its GPUs.
// From them it derives the job's *memory factor*: the ratio it will reach by the end of the job
// plus a safety margin, which the scheduler multiplies into every predicted layout
// (JobView::memory_factor) so that the next plan for this job is right first time.
//
// It also learns across jobs: the final ratio of every job is added to its class (architecture
// and framework, e.g. "llama-2-7b/megatron"); once a class has `min_evidence` jobs, new jobs of
// it start with the class's correction. Every factor is bounded to [min_factor, max_factor] and
// carries a one-line explanation (shown by `frenzy status` and in simulation reports).
//
// No clock, no I/O: times and progress come in with the reports.
#ifndef FRENZY_RUNTIME_MONITOR_H_
#define FRENZY_RUNTIME_MONITOR_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace frenzy::runtime {

struct MonitorOptions {
  double margin = 0.03;         // headroom added to the projected ratio
  double min_factor = 0.5;      // bounds of any factor
  double max_factor = 3.0;
  int window = 8;               // latest reports used for the trend
  int min_evidence = 3;         // jobs of a class before its correction is used
};

// One report: the job's peak device memory per GPU (max over its ranks) so far in this run, at
// `progress` (fraction of its tokens done, 0..1), running a layout predicted at
// `predicted_bytes`, on GPUs of `capacity_bytes`.
struct MemoryReport {
  double t_s = 0;
  double progress = 0;
  int64_t peak_bytes = 0;
  int64_t predicted_bytes = 0;
  int64_t capacity_bytes = 0;
};

struct JobMemory {
  std::string job_class;
  std::vector<std::pair<double, double>> samples;  // (progress, ratio), latest `window`
  double ratio = 0;        // latest observed peak / predicted
  double slope = 0;        // d ratio / d progress (>= 0; peaks do not shrink)
  int64_t peak_bytes = 0;  // latest report
  int64_t predicted_bytes = 0;
  int64_t capacity_bytes = 0;
  double progress = 0;
  int reports = 0;
  int ooms = 0;
  std::optional<double> floor;  // lower bound on the ratio learned from an OOM crash
  // The ratio the job is expected to reach at `at_progress` (trend extrapolated, at least the
  // OOM floor).
  double ProjectedRatio(double at_progress) const;
  // Bytes left on the GPU before the current layout runs out (negative: over).
  int64_t headroom_bytes() const { return capacity_bytes - peak_bytes; }
};

struct ClassCorrection {
  double mean_ratio = 1;
  double stddev = 0;
  double max_ratio = 1;
  int jobs = 0;
  double m2 = 0;  // sum of squared deviations (Welford)
  // What a new job of the class is planned with: mean + 2 standard deviations, at most the
  // largest ratio seen.
  double Ratio() const;
};

class MemoryMonitor {
 public:
  explicit MemoryMonitor(MonitorOptions options = {}) : opt_(options) {}
  const MonitorOptions& options() const { return opt_; }

  // A job the monitor should watch; `job_class` groups jobs for learning across jobs.
  void Track(int64_t job, std::string job_class);
  void Report(int64_t job, const MemoryReport& report);
  // An out-of-memory crash of a layout predicted at `predicted_bytes` on `capacity_bytes` GPUs:
  // the job's ratio is at least capacity / predicted from now on.
  void ReportOom(int64_t job, int64_t predicted_bytes, int64_t capacity_bytes);
  // The job ended: its projected final ratio joins its class (when it was observed), and it is
  // forgotten.
  void Finish(int64_t job);
  void Forget(int64_t job) { jobs_.erase(job); }

  const JobMemory* Find(int64_t job) const;
  // The factor to plan this job with: projected final ratio x (1 + margin) when the job was
  // observed, else its class correction when the class has enough evidence, else none. Bounded,
  // except that it is always above an OOM floor x (1 + margin).
  std::optional<double> Factor(int64_t job) const;
  // One line saying where the factor comes from.
  std::string Explain(int64_t job) const;
  // A class's correction once it has min_evidence jobs.
  std::optional<ClassCorrection> Correction(const std::string& job_class) const;
  const std::map<std::string, ClassCorrection>& classes() const { return classes_; }
  // What a monitor knew before (a restarted daemon's, read back from its store).
  void Restore(int64_t job, JobMemory memory) { jobs_[job] = std::move(memory); }
  void RestoreClass(const std::string& job_class, const ClassCorrection& c) {
    classes_[job_class] = c;
  }
  size_t tracked() const { return jobs_.size(); }

 private:
  double Bound(double f) const;
  MonitorOptions opt_;
  std::map<int64_t, JobMemory> jobs_;
  std::map<std::string, ClassCorrection> classes_;
};

}  // namespace frenzy::runtime

#endif  // FRENZY_RUNTIME_MONITOR_H_
