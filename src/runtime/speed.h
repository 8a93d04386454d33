// What the runtime learns of a job's speed: the throughput model predicts every option's
// tokens/s, but a real job runs faster or slower (bench/RESULTS.md: a 7.8% median error on
// held-out published runs, up to 77%). Jobs report their progress; a run's observed speed is
// measured from its first report to its latest (one long interval, not the luckiest of many short
// ones), and its ratio to the prediction of the layout it runs is the job's speed factor on that
// GPU type. The factor kept is the best run's on the type: a slow node only slows a gang down, so
// the best run is the job's own speed there, and a run below it says something about the nodes
// (the straggler detector's input) rather than about the job.
//
// It also learns across jobs, as the memory monitor does: every job of a class (its model) adds
// its factor on a type to the class's mean there, and a job that has not run on a type starts
// from its class's mean (a model's kernels run alike in every job that trains it; the simulator's
// world draws its speed truth per model by default, sim/world.h).
//
// For the straggler detector, a run is compared with what the job showed on its earlier runs of
// the type (PriorFactor): a job slower than predicted everywhere is the model's error, not a bad
// node; a run slower than the job's own earlier runs points at the nodes.
//
// The simulator's engine feeds it at every report interval of a run; the daemon at the memory
// reports it feeds the monitor (a run's polls and its own reports).
#ifndef FRENZY_RUNTIME_SPEED_H_
#define FRENZY_RUNTIME_SPEED_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <unordered_map>
#include <vector>

namespace frenzy::runtime {

// The slowest of the held-out published runs against the throughput model's prediction
// (bench/RESULTS.md, "Throughput accuracy": an error of +74.6%, so 1 / 1.746 of the prediction).
// A job's first run on a type is only suspect below this: slower than the model is ever wrong.
inline constexpr double kSlowestMeasuredSpeedRatio = 0.57;
// What a report may show at all: a job 100x faster or slower than predicted is a report's error
// (the measured errors stay within 0.57x-4.3x); such a report is not learned from. The store
// reads factors back within the same bounds.
inline constexpr double kMinSpeedRatio = 0.01;
inline constexpr double kMaxSpeedRatio = 100;

class SpeedLearner {
 public:
  // A progress report of job `key`'s run number `run` on GPU type `type`: `done_tokens` at `t_s`,
  // the layout predicted at `predicted_tokens_per_s`. Reports must come after the run's restart
  // pause. Returns the run's observed speed over the prediction since its previous report, when
  // there was one.
  std::optional<double> Report(int64_t key, int type, int64_t run, double t_s, double done_tokens,
                               double predicted_tokens_per_s);
  // The learned factor on each of `types` GPU types (cluster order): the job's own where it ran,
  // else its class's mean where jobs of its class ran, else 0; empty when nothing is known
  // anywhere (JobView::speed_factor's convention).
  std::vector<double> Factors(int64_t key, size_t types) const;
  // The learned factor on one type (as Factors), or 1 where nothing is known there.
  double Factor(int64_t key, int type) const;
  // The factor its runs before the current one showed on the type; 0: none ran there.
  double PriorFactor(int64_t key, int type) const;
  // What a run on the type should show, to judge its nodes by: PriorFactor, or for a first run
  // kSlowestMeasuredSpeedRatio (slower than that is not the model's error).
  double ExpectedFactor(int64_t key, int type) const {
    const double prior = PriorFactor(key, type);
    return prior > 0 ? prior : kSlowestMeasuredSpeedRatio;
  }
  // The job's class, for learning across jobs (the model's name); jobs without one learn alone.
  void Track(int64_t key, std::string job_class) { jobs_[key].cls = std::move(job_class); }
  // The job ended: its own record goes; what it added to its class stays.
  void Forget(int64_t key);

  // What the learner knows, for a store (the daemon keeps it across its own restarts): a job's
  // own factors per type (Own), and per class the samples of the jobs it has forgotten (Settled);
  // a restored job adds its own samples to its class again.
  struct ClassEvidence {
    std::vector<double> sum;  // per type: the samples' sum
    std::vector<int64_t> n;   // per type: how many (the same size as sum)
  };
  // The job's own factors per type (0: not run there); empty when it has run nowhere.
  std::vector<double> Own(int64_t key) const;
  // REQUIRES: Track(key, ...) first, so that its samples go to its class.
  void Restore(int64_t key, const std::vector<double>& own);
  std::map<std::string, ClassEvidence> Settled() const;
  void RestoreSettled(const std::string& job_class, const ClassEvidence& e);
  // Grows whenever a class learns something: what Factors says of a job that has not reported
  // since is unchanged while it stays the same.
  int64_t class_version() const { return version_; }

 private:
  struct Job {
    int64_t run = -1;
    double t_s = 0, done = 0;
    int type = -1;             // of the current run
    double run_best = 0;       // the current run's best ratio
    std::vector<double> best;  // per type, over the earlier runs; 0: not seen
    std::string cls;           // its class; empty: none
  };
  // Per (class, type): the mean of its jobs' factors there, one sample a job.
  struct ClassType {
    double sum = 0;
    int64_t n = 0;
    std::unordered_map<int64_t, double> of;  // per job: its sample
  };
  void Learn(const Job& j, int64_t key, int type, double f);
  static std::vector<double> OwnOf(const Job& j);
  int64_t version_ = 0;
  std::unordered_map<std::string, std::vector<ClassType>> classes_;
  std::unordered_map<int64_t, Job> jobs_;
};

}  // namespace frenzy::runtime

#endif  // FRENZY_RUNTIME_SPEED_H_
