// The simulated world: what MARP and the scheduler cannot know, drawn from a seed. Each job's
// memory truth (its real peak over MARP's prediction, and how that grows with its progress),
// which nodes are stragglers, when nodes fail and when runs crash for other reasons — and, from
// them, how a run placed on a GPU ends: it finishes, runs out of memory, or crashes.
//
// Separate random streams (memory truth and node failures; drift and stragglers; crashes; speed),
// so
// that switching one model on leaves the others' draws unchanged. The simulator's engine draws
// from it; the daemon's sim backend can be given the same truths (JobTruth) so that the same
// scenario runs through both.
#ifndef FRENZY_SIM_WORLD_H_
#define FRENZY_SIM_WORLD_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace frenzy {

struct WorldOptions {
  uint64_t seed = 1;
  std::optional<double> memory_error_pct;  // std. deviation, %; unset: MARP's measured errors
  // The throughput model's error: std. deviation, %; unset: its measured errors on held-out
  // published runs; 0: the prediction is the truth.
  std::optional<double> perf_error_pct;
  // Whose draw a speed truth is. Per model (the default): every job of one model runs at the same
  // real speed over the prediction on a GPU type, drawn when the model's first job arrives: the
  // throughput model's error is how that model's kernels, shapes and communication run on that
  // GPU, the same for every job that trains it (jobs of a model differ in tokens, not in what a
  // step computes). Per job: each job its own draw, as if every job trained a model of its own.
  bool perf_error_per_model = true;
  double memory_bias_pct = 0;              // every job's real peak is this much higher (%)
  double memory_drift_pct = 0;             // a job's peak grows by up to this much by its end
  double straggler_fraction = 0;           // of nodes, running at straggler_speed
  double straggler_speed = 0.5;
  double node_mtbf_s = 0;                  // 0: nodes never fail
  double job_crash_mtbf_s = 0;             // 0: runs crash only out of memory
  double oom_after_s = 30;                 // into a run's progress, when an OOM crash happens
};

// A job's memory truth: its real peak on any layout is the layout's predicted bytes x factor x
// (1 + drift x progress).
struct JobTruth {
  double factor = 1;
  double drift = 0;
  // Per GPU type (cluster order): its real speed / the throughput model's prediction; empty:
  // 1 everywhere.
  std::vector<double> speed;
  double Speed(int type) const {
    return static_cast<size_t>(type) < speed.size() ? speed[static_cast<size_t>(type)] : 1.0;
  }
  double RealPeak(int64_t predicted_bytes, double progress) const {
    return static_cast<double>(predicted_bytes) * factor * (1.0 + drift * progress);
  }
};

// How a run ends, if nothing stops it first.
enum class RunEndKind { kFinish, kOom, kCrash };
struct RunEnd {
  double t_s = 0;
  RunEndKind kind = RunEndKind::kFinish;
};

// A run's circumstances: it makes progress from `progress_since_s` at `rate` tokens/s, with
// `done` of `total` tokens behind it, on GPUs of `capacity_bytes` with a layout predicted at
// `predicted_bytes`.
struct RunShape {
  double now_s = 0;
  double progress_since_s = 0;
  double rate = 0;
  double done = 0, total = 0;
  int64_t predicted_bytes = 0;
  int64_t capacity_bytes = 0;
};

// When and how a run ends, by its memory truth alone (no crash draws): out of memory
// `oom_after_s` into its progress when the peak exceeds the GPU at once, when drift carries it
// across the GPU's memory, or it finishes.
RunEnd MemoryEnd(const JobTruth& truth, const RunShape& run, double oom_after_s);

class World {
 public:
  explicit World(const WorldOptions& o);
  // The next job's memory and speed truth on a cluster of `types` GPU types (call once per job,
  // in arrival order).
  // `model` names the job's model, whose speed truth its jobs share (perf_error_per_model);
  // empty: a draw of the job's own.
  JobTruth DrawJob(size_t types = 0, const std::string& model = {});
  // Per node: 1, or straggler_speed for a straggler (call once, after the jobs).
  std::vector<double> DrawNodeSpeeds(size_t nodes);
  // Seconds until a node's next failure. REQUIRES: node_mtbf_s > 0.
  double NodeFailureAfter();
  // How a run ends: MemoryEnd, or an earlier crash for another reason.
  RunEnd EndOf(const JobTruth& truth, const RunShape& run);

 private:
  WorldOptions o_;
  std::mt19937_64 rng_, rng_drift_, rng_crash_, rng_perf_;
  std::normal_distribution<double> normal_;  // keeps its second draw: one object for the run
  std::normal_distribution<double> perf_normal_;
  std::uniform_int_distribution<size_t> pick_, perf_pick_;
  std::map<std::string, std::vector<double>> model_speed_;  // per model: its speed truth
};

}  // namespace frenzy

#endif  // FRENZY_SIM_WORLD_H_
