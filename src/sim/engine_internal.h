// The simulator's engine, inside: its events, its per-job state and the Engine class, shared by
// engine.cc (set-up, runs, decisions, results) and engine_events.cc (one handler per event, the
// runtime's actions). Not part of the API: sim/engine.h is.
#ifndef FRENZY_SIM_ENGINE_INTERNAL_H_
#define FRENZY_SIM_ENGINE_INTERNAL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <queue>
#include <set>
#include <string>
#include <vector>

#include "runtime/actions.h"
#include "runtime/faults.h"
#include "runtime/monitor.h"
#include "runtime/speed.h"
#include "sched/apply.h"
#include "sim/engine.h"
#include "sim/world.h"

namespace frenzy::engine_internal {

enum class EventKind {
  kArrival,
  kFinish,
  kOom,
  kRound,
  kNodeFail,
  kNodeRepair,
  kReport,        // a running job reports memory and speed to the runtime
  kCrash,         // a run crashes for a reason other than memory
  kRetry,         // a crashed job's back-off is over
  kStragglerFix,  // a node declared slow is repaired
};

struct Event {
  double t = 0;
  int64_t seq = 0;
  EventKind kind = EventKind::kArrival;
  int64_t job = -1;     // key, for job events
  int64_t version = 0;  // the job's run version the event belongs to
  int node = -1;
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

struct JobState {
  JobSpec spec;
  std::shared_ptr<const JobOptions> options;
  JobTruth truth;          // real peak / predicted, and its growth; real speed / predicted
  bool profiled = false;   // `options` holds the true speeds (a profiling policy's copy)
  bool after_oom = false;  // the current (or next) run follows an out-of-memory crash
  bool withheld = false;   // SimOptions::withheld: drawn, never submitted
  runtime::RetryState retry;
  int64_t version = 0;  // bumped whenever the job starts or stops
  double checkpoint_tokens = 0;
  JobRecord record;
};

inline WorldOptions WorldOf(const SimOptions& o) {
  WorldOptions w;
  w.seed = o.seed;
  w.memory_error_pct = o.memory_error_pct;
  w.perf_error_pct = o.perf_error_pct;
  w.perf_error_per_model = o.perf_error_per_model;
  w.memory_bias_pct = o.memory_bias_pct;
  w.memory_drift_pct = o.memory_drift_pct;
  w.straggler_fraction = o.straggler_fraction;
  w.straggler_speed = o.straggler_speed;
  w.node_mtbf_s = o.node_mtbf_s;
  w.job_crash_mtbf_s = o.job_crash_mtbf_s;
  w.oom_after_s = o.oom_after_s;
  return w;
}

// The event loop. One handler per event kind; after every batch of simultaneous events, the
// runtime's memory actions (policies with uses_runtime) and then the policy. Decisions reach
// the world through ApplyDecisions (the engine is their DecisionTarget), as in the daemon.
class Engine : private DecisionTarget {
 public:
  Engine(const Workload& w, const Cluster& c, const GpuCatalog& cat, Policy& p, const SimOptions& o,
         OptionCache& cache)
      : w_(w),
        cluster_(c),
        catalog_(cat),
        policy_(p),
        opt_(o),
        cache_(cache),
        world_(WorldOf(o)),
        use_runtime_(p.uses_runtime()) {
    runtime_opt_.max_ooms = o.max_ooms;
    runtime_opt_.act_horizon_s = 3 * o.report_interval_s;
    retry_opt_.backoff_s = o.retry_backoff_s;
    retry_opt_.max_attempts = o.max_crashes;
  }

  Result<SimResult> Run();

 private:
  Status Prepare();
  Status PrepareJob(size_t key, const WorkloadJob& wj, std::map<std::string, ModelSpec>& models);
  void Push(double t, EventKind k, int64_t job = -1, int64_t version = 0, int node = -1) {
    events_.push(Event{t, seq_++, k, job, version, node});
  }
  JobView* Active(int64_t key);
  // A job event for the job's current run: its view, or nullptr when the event is stale.
  JobView* Current(const Event& e);
  // `oom`: the run crashed out of memory (its waste, and the next run's restart pause, are
  // counted as out-of-memory waste).
  // `end` names why for RunRecord::end (default: stop, or oom / crash when not graceful).
  void StopRun(JobView& v, double now, bool graceful, bool oom = false,
               const char* end = nullptr);
  // `layout` < 0: the layout the job's memory factor allows (JobView::Layout).
  // REQUIRES: `a` was checked (CheckAllocation or ApplyDecisions).
  Status StartRun(JobView& v, const Allocation& a, double now, int layout = -1);
  // The speed of a run on these nodes (stragglers slow the whole gang).
  double Speed(const Allocation& a) const;
  // The queued and running jobs and the cluster as the policy and the runtime see them.
  Snapshot SnapshotAt(double now) const;
  void Cordon(int node, double now);
  void Hold(JobView& v);
  void Unhold(int64_t key);
  void Finish(int64_t key, JobOutcome outcome, double now);
  void Sample(double now);

  // DecisionTarget: what a policy's stop and start do here.
  const JobView* Find(int64_t key) const override;
  Status Stop(const JobView& job, double now_s, bool move) override;
  Status Start(const JobView& job, const Allocation& alloc, double now_s) override;

  // Event handlers: each returns true when the policy should hear of the change.
  bool Dispatch(const Event& e, double now);
  bool OnArrival(const Event& e, double now);
  bool OnFinish(const Event& e, double now);
  bool OnOom(const Event& e, double now);
  bool OnCrash(const Event& e, double now);
  bool OnReport(const Event& e, double now);
  bool OnStragglerFix(const Event& e, double now);
  bool OnNodeFail(const Event& e, double now);
  bool OnNodeRepair(const Event& e, double now);
  // A running job's memory and speed report to the runtime.
  void Report(JobView& v, double now);
  // After a batch of events: the runtime's memory actions, then the policy. Sets `stop` when
  // nothing can change any more (what is left can never run).
  Status AfterBatch(double now, bool changed, bool round_now, bool& stop);
  // Runtime: applies the memory actions for the running jobs; true when it acted.
  Status RunMemoryActions(double now, bool& acted);
  // Asks the policy and applies its decisions; sets `acted` when it decided anything.
  Status Invoke(double now, bool& acted);
  // The jobs' records and the metrics once the clock stopped at `now`.
  SimResult Results(double now, double first_arrival);

  const Workload& w_;
  const Cluster& cluster_;
  const GpuCatalog& catalog_;
  Policy& policy_;
  std::vector<RunRecord> runs_;  // SimOptions::record_runs
  const SimOptions& opt_;
  OptionCache& cache_;
  World world_;
  const bool use_runtime_;
  runtime::RuntimeOptions runtime_opt_;
  runtime::RetryOptions retry_opt_;
  runtime::MemoryMonitor monitor_;
  runtime::StragglerDetector stragglers_;
  runtime::SpeedLearner speed_;
  int64_t speed_seen_ = -1;  // the class version the views' speed factors were last set at
  std::vector<double> node_speed_;  // 1, or straggler_speed for a straggler
  std::set<int64_t> held_;          // crashed jobs waiting out their back-off (not active)
  std::vector<char> node_failed_;   // by node: down after a failure (not only cordoned)
  bool reported_ = false;           // a report arrived in this batch of events

  ClusterView view_;
  std::vector<JobState> jobs_;    // by key
  std::vector<size_t> order_;     // workload index -> key
  std::vector<int> requested_;    // by key: the user's request as an option index, or -1
  std::vector<JobView> views_;    // by key (filled at arrival)
  std::vector<JobView*> active_;  // queued and running, by key (pointers into views_)
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  int64_t seq_ = 0;
  int64_t change_seq_ = 0;
  bool round_pending_ = false;
  int64_t done_ = 0;
  int64_t arrived_ = 0;
  double last_finish_ = 0;
  std::vector<double> overhead_ms_;
  std::vector<TimelinePoint> timeline_;
  PolicyMetrics m_;  // the counters; the rest is ComputeMetrics'
  double busy_gpu_s_ = 0;
  int64_t running_ = 0;    // jobs running now
  int64_t busy_gpus_ = 0;  // GPUs allocated now
};

}  // namespace frenzy::engine_internal

#endif  // FRENZY_SIM_ENGINE_INTERNAL_H_
