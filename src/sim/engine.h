// The trace-driven simulator: replays a workload on a cluster under one scheduling policy with a
// discrete-event clock, and measures what the field compares (JCT, queueing, utilisation, OOM
// crashes, scheduling overhead).
//
// Events are ordered by (time, sequence number), so a run is a deterministic function of its
// inputs and seed. Event kinds: job arrival, job completion, out-of-memory crash, scheduling
// round, node failure and repair. After every batch of simultaneous events an event-driven
// policy is asked for decisions; round-based policies are also asked every round.
//
// Model of a job (see docs/simulator.md):
//  * it progresses at its option's predicted tokens/s (perf model) while running;
//  * a restart (any start after the first) first pays its restart (RestartModel: start-up and
//    checkpoint load) without progress; a job stopped by its policy checkpoints first and loses
//    nothing;
//  * memory truth: the job's real peak = MARP's prediction x its memory factor, drawn once per
//    job (`memory_error_pct`: normal with that standard deviation; unset: drawn from MARP's
//    measured errors on published Megatron runs). Placed where the real peak exceeds the GPU,
//    it crashes `oom_after_s` into its run, keeps only progress up to its last checkpoint, and
//    that option is marked failed for it; after `max_ooms` crashes the job is given up;
//  * node failures (exponential, mean `node_mtbf_s`) crash the jobs on the node, which keep
//    their last checkpoint (one every `checkpoint_interval_s` of progress);
//  * memory drift: a job's real peak grows with its progress (`memory_drift_pct`); a run
//    crashes when the peak crosses its GPU's memory;
//  * other crashes (`job_crash_mtbf_s`) are retried with back-off, and fail a job after
//    `max_crashes` in a row without progress; straggler nodes run slower than predicted.
// With a policy that uses_runtime, the engine feeds memory and speed reports to Frenzy's runtime
// (src/runtime) every `report_interval_s` and applies what it decides: memory factors, re-plans,
// moves and requeues before an out-of-memory crash, recovery after one, slow nodes avoided.
//
// The engine never contains policy logic: it applies decisions through ApplyDecisions
// (sched/apply.h, as the daemon does), which reports a policy's invalid decision as an Internal
// error. The world's truths (memory, stragglers, failures, crashes) come from sim/world.h, the
// metrics from sim/metrics.h.
#ifndef FRENZY_SIM_ENGINE_H_
#define FRENZY_SIM_ENGINE_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "hardware/cluster.h"
#include "hardware/gpu.h"
#include "sched/job_options.h"
#include "sched/policy.h"
#include "sim/workload.h"

namespace frenzy {

struct SimOptions {
  uint64_t seed = 1;
  std::optional<double> memory_error_pct;  // std. deviation, %; unset: measured distribution
  // The throughput model's error (std. deviation, %): a job runs at its prediction times a truth
  // drawn per (model, GPU type) — or per (job, GPU type) without perf_error_per_model
  // (WorldOptions says why per model is the default); unset: drawn from the model's measured
  // errors on held-out published runs; 0: the prediction is the truth.
  std::optional<double> perf_error_pct;
  bool perf_error_per_model = true;
  // Policies that profile (Policy::uses_profiled_memory: Gavel, Sia) see every job's true speeds
  // after profiling it: its first start pays this per GPU type of the cluster, without progress.
  double profile_s_per_type = 60;
  double memory_margin = 0.10;             // MARP margin for the kMarp option tables
  RestartModel restart;                    // what every restart pays (sched/policy.h)
  double checkpoint_interval_s = 1800;     // of progress between checkpoints
  double oom_after_s = 30;                 // into a run, when an OOM crash happens
  int max_ooms = 5;                        // crashes before a job is given up
  double node_mtbf_s = 0;                  // 0: no node failures
  double node_repair_s = 3600;
  // Memory drift: each job's real peak grows linearly with its progress, by a fraction drawn
  // uniformly from [0, memory_drift_pct] % by the end (longer sequences later in a data mix,
  // fragmentation).
  double memory_drift_pct = 0;
  // Every job's real peak is this much above its drawn truth (%), e.g. a framework upgrade that
  // MARP does not know yet: what learning across jobs corrects.
  double memory_bias_pct = 0;
  // How often running jobs report memory and speed to the runtime (policies with uses_runtime).
  double report_interval_s = 300;
  double job_crash_mtbf_s = 0;  // > 0: runs also crash for other reasons (exponential)
  // A fraction of nodes are stragglers: their GPUs run at straggler_speed x the prediction.
  double straggler_fraction = 0;
  double straggler_speed = 0.5;
  double retry_backoff_s = 60;  // first back-off after a crash; doubles with each in a row
  int max_crashes = 4;          // crashes in a row without progress before a job fails
  double max_time_s = std::numeric_limits<double>::infinity();  // stop the clock here
  // Jobs of the workload (by id) whose truths are drawn, in their place, but which are never
  // submitted: the same world without them (every other job draws what it would with them).
  // They are left out of the results. An id the workload lacks is an error.
  std::set<std::string> withheld;
  // Wall clock for measuring the policy's overhead, in seconds (injected: the engine never
  // reads a clock itself). Unset: overhead is reported as 0.
  std::function<double()> wall_now_s;
  // Called now and then with the fraction of jobs done (for a progress bar).
  std::function<void(double)> progress;
  // Keep every run of every job (SimResult::runs): a row per start, for `--out`'s runs.csv.
  bool record_runs = false;
  // kInvalidArgument naming the first field out of its range (Simulate checks first).
  Status Validate() const;
};

// kImpossible: no option at all (the model cannot run on any GPU type and count of the cluster
// with this policy's table, or the job itself is impossible, e.g. longer sequences than the
// model's positions); the job is dropped at arrival.
// kGivenUp: out of memory too often (or nothing fits any more); kFailed: crashed for other
// reasons too often in a row.
enum class JobOutcome { kFinished, kGivenUp, kUnfinished, kImpossible, kFailed };
const char* JobOutcomeName(JobOutcome o);

struct JobRecord {
  std::string id, model;
  double submit_s = 0, first_start_s = -1, finish_s = -1;
  JobOutcome outcome = JobOutcome::kUnfinished;
  std::string gpu;   // of the last run
  int64_t gpus = 0;  // of the last run
  int ooms = 0, restarts = 0, failures = 0, crashes = 0;
  int memory_actions = 0;    // runtime re-plans, moves and requeues
  double memory_drift = 0;   // growth of its real peak by the end (fraction)
  double planned_factor = 0; // the runtime's last memory factor for it (0: none)
  std::string note;          // why it was given up or failed; the runtime's last explanation
  double gpu_s = 0;         // GPU-seconds allocated
  double wasted_gpu_s = 0;  // of which lost: crashed runs, lost progress, restart pauses
  double oom_wasted_gpu_s = 0;  // of which lost to out-of-memory crashes (and their restarts)
  double memory_factor = 1;
  double speed_factor = 1;  // its real speed over the prediction on the GPU type of its last run
  double jct_s() const { return finish_s - submit_s; }
};

// One run of a job (SimOptions::record_runs): from taking its GPUs to giving them back.
struct RunRecord {
  std::string job;             // JobRecord::id
  double start_s = 0;          // GPUs taken
  double progress_from_s = 0;  // progress from here: after the restart pause (or profiling)
  double end_s = 0;            // GPUs given back
  std::string gpu;             // GPU type; a mixed option's types joined with '+'
  int64_t gpus = 0;
  int layout = 0;              // 0: the option's plan; k: its k-th leaner layout
  double tokens_per_s = 0;     // the run's true speed
  double tokens = 0;           // progress it kept (a crash loses what its checkpoint did not hold)
  // Why it ended: stop (the policy), finish, oom, crash, node-failure, memory (the runtime's
  // re-plan, move or requeue), slow-node (left a straggler), clock (the simulation's end).
  std::string end;
};

struct TimelinePoint {
  double t_s = 0;
  int64_t queued = 0, running = 0, busy_gpus = 0;
};

struct PolicyMetrics {
  std::string policy;
  int64_t jobs = 0, finished = 0, given_up = 0, unfinished = 0, impossible = 0, failed = 0;
  int64_t jobs_lost() const { return given_up + failed; }
  double avg_jct_s = 0, p50_jct_s = 0, p95_jct_s = 0, p99_jct_s = 0;  // finished jobs
  // Every job that arrived before the clock stopped, one not finished counted from its submission
  // to then: a lower bound on the average of a policy that loses or starves jobs.
  double avg_jct_all_s = 0;
  double makespan_s = 0;       // first arrival to last completion
  double avg_queue_s = 0;      // arrival to first start, jobs that started
  double gpu_util = 0;         // allocated GPU-s / (GPUs x makespan)
  double gpu_util_useful = 0;  // allocated minus wasted
  double gpu_hours = 0, wasted_gpu_hours = 0, oom_wasted_gpu_hours = 0;
  int64_t oom_events = 0, node_failures = 0, restarts = 0, crashes = 0;
  // The runtime's actions (policies with uses_runtime).
  int64_t memory_replans = 0, memory_moves = 0, memory_requeues = 0, stragglers_detected = 0;
  int64_t sched_calls = 0;
  double sched_overhead_ms_mean = 0, sched_overhead_ms_p99 = 0, sched_overhead_ms_max = 0,
         sched_overhead_ms_total = 0;
  int64_t events = 0;
  double sim_wall_s = 0;  // wall time of the whole run (0 without a wall clock)
};

struct SimResult {
  PolicyMetrics metrics;
  std::vector<JobRecord> jobs;          // in workload order
  std::vector<TimelinePoint> timeline;  // at most ~4,000 points
  std::vector<RunRecord> runs;          // with SimOptions::record_runs, in the order they ended
};

// Resolves models and builds option tables for every job (shared through `cache` between the
// policies of one run), then simulates.
Result<SimResult> Simulate(const Workload& workload, const Cluster& cluster,
                           const GpuCatalog& catalog, Policy& policy, const SimOptions& options,
                           OptionCache& cache);

}  // namespace frenzy

#endif  // FRENZY_SIM_ENGINE_H_
