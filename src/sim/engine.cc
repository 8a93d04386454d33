#include "sim/engine.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <queue>
#include <set>

#include "model/zoo.h"
#include "runtime/actions.h"
#include "runtime/faults.h"
#include "runtime/monitor.h"
#include "sched/apply.h"
#include "sim/metrics.h"
#include "sim/world.h"

namespace frenzy {
namespace {

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
  JobTruth truth;          // real peak / predicted, and its growth
  bool after_oom = false;  // the current (or next) run follows an out-of-memory crash
  runtime::RetryState retry;
  int64_t version = 0;  // bumped whenever the job starts or stops
  double checkpoint_tokens = 0;
  JobRecord record;
};

WorldOptions WorldOf(const SimOptions& o) {
  WorldOptions w;
  w.seed = o.seed;
  w.memory_error_pct = o.memory_error_pct;
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
  void StopRun(JobView& v, double now, bool graceful, bool oom = false);
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
  const SimOptions& opt_;
  OptionCache& cache_;
  World world_;
  const bool use_runtime_;
  runtime::RuntimeOptions runtime_opt_;
  runtime::RetryOptions retry_opt_;
  runtime::MemoryMonitor monitor_;
  runtime::StragglerDetector stragglers_;
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

Status Engine::Prepare() {
  ASSIGN_OR_RETURN(view_, ClusterView::Of(cluster_, catalog_));
  // Keys follow arrival order, so the active list (sorted by key) is in arrival order.
  std::vector<size_t> idx(w_.jobs.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(),
                   [&](size_t a, size_t b) { return w_.jobs[a].submit_s < w_.jobs[b].submit_s; });
  order_.assign(w_.jobs.size(), 0);
  requested_.assign(w_.jobs.size(), -1);
  jobs_.resize(w_.jobs.size());
  views_.resize(w_.jobs.size());
  std::map<std::string, ModelSpec> models;
  for (size_t key = 0; key < idx.size(); ++key) {
    order_[idx[key]] = key;
    RETURN_IF_ERROR(PrepareJob(key, w_.jobs[idx[key]], models));
  }
  node_speed_ = world_.DrawNodeSpeeds(view_.nodes.size());
  node_failed_.assign(view_.nodes.size(), 0);
  if (opt_.node_mtbf_s > 0) {
    for (size_t n = 0; n < view_.nodes.size(); ++n) {
      Push(world_.NodeFailureAfter(), EventKind::kNodeFail, -1, 0, static_cast<int>(n));
    }
  }
  return Status::Ok();
}

Status Engine::PrepareJob(size_t key, const WorkloadJob& wj,
                          std::map<std::string, ModelSpec>& models) {
  std::string where = fmt::format("{}: job '{}'", w_.name, wj.id);
  auto mit = models.find(wj.model);
  if (mit == models.end()) {
    auto spec = ResolveModel(wj.model);
    if (!spec.ok()) return Status(spec.status().code(), spec.status().ToString(), where, "model");
    mit = models.emplace(wj.model, *spec).first;
  }
  JobState& js = jobs_[key];
  js.spec.model = mit->second;
  js.spec.tokens = wj.tokens;
  js.spec.global_batch = wj.global_batch;
  js.spec.seq_len = wj.seq_len;
  js.spec.precision = wj.precision;
  auto opts = cache_.Get(wj.model, js.spec, policy_.options_kind());
  if (!opts.ok()) return Status(opts.status().code(), opts.status().ToString(), where, "model");
  js.options = *opts;
  int requested = -1;
  if (wj.requested_gpu && wj.requested_gpus) {
    const GpuType* g = catalog_.Find(*wj.requested_gpu);
    if (g == nullptr) {
      return NotFound("unknown GPU type '" + *wj.requested_gpu + "'", where, "requested_gpu");
    }
    const auto& types = js.options->types;
    auto t = std::find(types.begin(), types.end(), g->name);
    if (t != types.end()) {
      const RunOption* o =
          js.options->Find(static_cast<int>(t - types.begin()), *wj.requested_gpus);
      if (o != nullptr) requested = static_cast<int>(o - js.options->options.data());
    }
  }
  requested_[key] = requested;
  // The memory truth of this job (drawn for every job, in key order, whatever the policy).
  js.truth = world_.DrawJob();
  js.record.id = wj.id;
  js.record.model = wj.model;
  js.record.submit_s = wj.submit_s;
  js.record.memory_factor = js.truth.factor;
  js.record.memory_drift = js.truth.drift;
  Push(wj.submit_s, EventKind::kArrival, static_cast<int64_t>(key));
  return Status::Ok();
}

JobView* Engine::Active(int64_t key) {
  auto it = std::lower_bound(active_.begin(), active_.end(), key,
                             [](const JobView* v, int64_t k) { return v->key < k; });
  if (it == active_.end() || (*it)->key != key) return nullptr;
  return *it;
}

JobView* Engine::Current(const Event& e) {
  if (e.version != jobs_[static_cast<size_t>(e.job)].version) return nullptr;
  return Active(e.job);
}

// Ends the current run. Graceful (the policy stopped it): a checkpoint is written at the stop.
// Otherwise (crash, failure): progress since the last checkpoint is lost.
void Engine::StopRun(JobView& v, double now, bool graceful, bool oom) {
  JobState& js = jobs_[static_cast<size_t>(v.key)];
  const RunOption& o = v.option(v.alloc.option);
  double gpus = static_cast<double>(o.gpus);
  double ran = std::max(0.0, now - v.run_start_s);
  double done = v.DoneAt(now);
  double pause = std::min(ran, std::max(0.0, v.progress_since_s - v.run_start_s));
  js.record.wasted_gpu_s += gpus * pause;
  if (js.after_oom) js.record.oom_wasted_gpu_s += gpus * pause;
  js.after_oom = oom;
  if (graceful) {
    js.checkpoint_tokens = done;
  } else if (v.rate_tokens_per_s > 0 && now > v.progress_since_s) {
    // Checkpoints every checkpoint_interval_s of progress in this run.
    double progressed_s = now - v.progress_since_s;
    double kept_s =
        std::floor(progressed_s / opt_.checkpoint_interval_s) * opt_.checkpoint_interval_s;
    js.checkpoint_tokens = std::min(v.total_tokens, v.done_tokens + kept_s * v.rate_tokens_per_s);
    js.record.wasted_gpu_s += gpus * (progressed_s - kept_s);
    if (oom) js.record.oom_wasted_gpu_s += gpus * (progressed_s - kept_s);
  }
  done = js.checkpoint_tokens;
  js.record.gpu_s += gpus * ran;
  busy_gpu_s_ += gpus * ran;
  for (const auto& [n, g] : v.alloc.placement) view_.nodes[static_cast<size_t>(n)].free += g;
  // A down node's GPUs stay unavailable.
  for (const auto& [n, g] : v.alloc.placement) {
    if (!view_.nodes[static_cast<size_t>(n)].up) view_.nodes[static_cast<size_t>(n)].free = 0;
  }
  v.attained_gpu_s += gpus * ran;
  v.done_tokens = done;
  --running_;
  busy_gpus_ -= o.gpus;
  v.running = false;
  v.rate_tokens_per_s = 0;
  v.alloc = Allocation{};
  ++js.version;
}

double Engine::Speed(const Allocation& a) const {
  double speed = 1;
  for (const auto& [n, g] : a.placement) speed = std::min(speed, node_speed_[static_cast<size_t>(n)]);
  return speed;
}

Status Engine::StartRun(JobView& v, const Allocation& a, double now, int layout) {
  JobState& js = jobs_[static_cast<size_t>(v.key)];
  const RunOption& o = v.option(a.option);
  if (layout < 0) layout = ChooseLayout(v, a, view_);
  if (static_cast<size_t>(layout) > o.leaner.size()) {
    return Status(StatusCode::kInternal,
                  fmt::format("job '{}' started on layout {} of an option with {}", v.id, layout,
                              o.leaner.size() + 1));
  }
  const Plan& plan = v.PlanOf(a.option, layout);
  for (const auto& [n, g] : a.placement) view_.nodes[static_cast<size_t>(n)].free -= g;
  bool restart = v.first_start_s >= 0;
  if (!restart) v.first_start_s = now;
  if (restart) ++v.restarts;
  v.running = true;
  ++running_;
  busy_gpus_ += o.gpus;
  v.alloc = a;
  v.layout = layout;
  v.run_start_s = now;
  v.progress_since_s = now + (restart ? opt_.restart_s : 0.0);
  v.rate_tokens_per_s = plan.tokens_per_s * Speed(a);
  ++js.version;
  js.record.gpu = view_.types[static_cast<size_t>(o.type)];
  js.record.gpus = o.gpus;
  js.record.restarts = v.restarts;
  if (js.record.first_start_s < 0) js.record.first_start_s = now;
  // When the run ends: finished, out of memory (at once, or when drift crosses the GPU's
  // memory), or crashed for another reason, whichever comes first.
  RunShape shape;
  shape.now_s = now;
  shape.progress_since_s = v.progress_since_s;
  shape.rate = v.rate_tokens_per_s;
  shape.done = v.done_tokens;
  shape.total = v.total_tokens;
  shape.predicted_bytes = plan.device_bytes;
  shape.capacity_bytes = view_.gpu_memory_bytes[static_cast<size_t>(o.type)];
  RunEnd end = world_.EndOf(js.truth, shape);
  EventKind how = end.kind == RunEndKind::kOom     ? EventKind::kOom
                  : end.kind == RunEndKind::kCrash ? EventKind::kCrash
                                                   : EventKind::kFinish;
  Push(end.t_s, how, v.key, js.version);
  if (use_runtime_) Push(now + opt_.report_interval_s, EventKind::kReport, v.key, js.version);
  return Status::Ok();
}

const JobView* Engine::Find(int64_t key) const {
  auto it = std::lower_bound(active_.begin(), active_.end(), key,
                             [](const JobView* v, int64_t k) { return v->key < k; });
  if (it == active_.end() || (*it)->key != key) return nullptr;
  return *it;
}

Status Engine::Stop(const JobView& job, double now_s, bool /*move*/) {
  StopRun(*Active(job.key), now_s, /*graceful=*/true);
  return Status::Ok();
}

Status Engine::Start(const JobView& job, const Allocation& alloc, double now_s) {
  return StartRun(*Active(job.key), alloc, now_s);
}

void Engine::Finish(int64_t key, JobOutcome outcome, double now) {
  JobView* v = Active(key);
  JobState& js = jobs_[static_cast<size_t>(key)];
  if (v->running) StopRun(*v, now, /*graceful=*/true);
  if (use_runtime_) {
    js.record.planned_factor = v->memory_factor.value_or(0.0);
    monitor_.Finish(key);
  }
  js.record.outcome = outcome;
  js.record.ooms = v->ooms;
  js.record.restarts = v->restarts;
  if (outcome == JobOutcome::kFinished) js.record.finish_s = now;
  active_.erase(std::lower_bound(active_.begin(), active_.end(), key,
                                 [](const JobView* a, int64_t k) { return a->key < k; }));
  ++done_;
  ++change_seq_;
}

void Engine::Hold(JobView& v) {
  held_.insert(v.key);
  active_.erase(std::lower_bound(active_.begin(), active_.end(), v.key,
                                 [](const JobView* a, int64_t k) { return a->key < k; }));
  ++change_seq_;
}

void Engine::Unhold(int64_t key) {
  if (held_.erase(key) == 0) return;
  JobView* slot = &views_[static_cast<size_t>(key)];
  active_.insert(std::lower_bound(active_.begin(), active_.end(), key,
                                  [](const JobView* a, int64_t k) { return a->key < k; }),
                 slot);
  ++change_seq_;
}

void Engine::Report(JobView& v, double now) {
  if (now < v.progress_since_s || v.total_tokens <= 0) return;  // still loading its checkpoint
  JobState& js = jobs_[static_cast<size_t>(v.key)];
  const Plan& plan = v.PlanOf(v.alloc.option, v.layout);
  const RunOption& o = v.option(v.alloc.option);
  const int64_t capacity = view_.gpu_memory_bytes[static_cast<size_t>(o.type)];
  double progress = v.DoneAt(now) / v.total_tokens;
  runtime::MemoryReport r;
  r.t_s = now;
  r.progress = progress;
  r.peak_bytes = static_cast<int64_t>(js.truth.RealPeak(plan.device_bytes, progress));
  r.predicted_bytes = plan.device_bytes;
  r.capacity_bytes = capacity;
  monitor_.Report(v.key, r);
  v.memory_factor = monitor_.Factor(v.key);
  reported_ = true;
  // Speed: a gang runs at its slowest node's pace.
  std::vector<int> nodes;
  for (const auto& [n, g] : v.alloc.placement) nodes.push_back(n);
  double ratio = plan.tokens_per_s > 0 ? v.rate_tokens_per_s / plan.tokens_per_s : 1.0;
  for (int n : stragglers_.Report(nodes, ratio)) Cordon(n, now);
}

void Engine::Cordon(int node, double now) {
  ++m_.stragglers_detected;
  NodeView& nv = view_.nodes[static_cast<size_t>(node)];
  nv.up = false;
  nv.free = 0;
  for (size_t i = 0; i < active_.size(); ++i) {
    JobView& v = *active_[i];
    if (!v.running) continue;
    bool on = std::any_of(v.alloc.placement.begin(), v.alloc.placement.end(),
                          [&](const auto& p) { return p.first == node; });
    if (!on) continue;
    double left = std::max(0.0, v.total_tokens - v.DoneAt(now));
    double predicted = v.PlanOf(v.alloc.option, v.layout).tokens_per_s;
    if (runtime::ShouldLeaveSlowNode(left, v.rate_tokens_per_s, predicted, opt_.restart_s)) {
      StopRun(v, now, /*graceful=*/true);
      jobs_[static_cast<size_t>(v.key)].record.note =
          fmt::format("left node {} (running at {:.0f}% of the predicted speed)", node,
                      100 * v.rate_tokens_per_s / std::max(1e-9, predicted));
    }
  }
  ++change_seq_;
  Push(now + opt_.node_repair_s, EventKind::kStragglerFix, -1, 0, node);
}

Snapshot Engine::SnapshotAt(double now) const {
  Snapshot s;
  s.now_s = now;
  s.cluster = &view_;
  s.jobs = std::span<const JobView* const>(active_.data(), active_.size());
  s.change_seq = change_seq_;
  s.costs.restart_s = opt_.restart_s;
  return s;
}

Status Engine::RunMemoryActions(double now, bool& acted) {
  const Snapshot s = SnapshotAt(now);
  std::vector<runtime::MemoryAction> actions =
      runtime::PlanMemoryActions(s, monitor_, runtime_opt_);
  for (const runtime::MemoryAction& a : actions) {
    JobView* v = Active(a.job);
    if (v == nullptr || !v->running) continue;
    JobState& js = jobs_[static_cast<size_t>(a.job)];
    v->memory_factor = a.factor;
    ++js.record.memory_actions;
    js.record.note = a.why;
    StopRun(*v, now, /*graceful=*/true);
    if (a.kind == runtime::ActionKind::kRequeue) {
      ++m_.memory_requeues;
    } else {
      ++(a.kind == runtime::ActionKind::kReplan ? m_.memory_replans : m_.memory_moves);
      if (std::string why = CheckAllocation(*v, a.alloc, view_); !why.empty()) {
        return Status(StatusCode::kInternal,
                      fmt::format("the runtime's {} of job '{}' at t={:.0f} s is invalid: {}",
                                  runtime::ActionKindName(a.kind), v->id, now, why));
      }
      RETURN_IF_ERROR(StartRun(*v, a.alloc, now, a.layout));
    }
    ++change_seq_;
    acted = true;
  }
  return Status::Ok();
}

void Engine::Sample(double now) {
  TimelinePoint p;
  p.t_s = now;
  p.running = running_;
  p.queued = static_cast<int64_t>(active_.size()) - running_;
  p.busy_gpus = busy_gpus_;
  if (!timeline_.empty() && timeline_.back().t_s == now) {
    timeline_.back() = p;
  } else {
    timeline_.push_back(p);
  }
}

Status Engine::Invoke(double now, bool& acted) {
  const Snapshot s = SnapshotAt(now);
  double t0 = opt_.wall_now_s ? opt_.wall_now_s() : 0.0;
  Decisions d = policy_.Schedule(s);
  double t1 = opt_.wall_now_s ? opt_.wall_now_s() : 0.0;
  overhead_ms_.push_back((t1 - t0) * 1e3);
  acted = !d.stop.empty() || !d.start.empty();
  return ApplyDecisions(d, view_, policy_.name(), now, *this).status();
}

bool Engine::Dispatch(const Event& e, double now) {
  switch (e.kind) {
    case EventKind::kArrival:
      return OnArrival(e, now);
    case EventKind::kFinish:
      return OnFinish(e, now);
    case EventKind::kOom:
      return OnOom(e, now);
    case EventKind::kCrash:
      return OnCrash(e, now);
    case EventKind::kRetry:
      Unhold(e.job);
      return true;
    case EventKind::kReport:
      return OnReport(e, now);
    case EventKind::kStragglerFix:
      return OnStragglerFix(e, now);
    case EventKind::kRound:
      round_pending_ = false;
      return false;  // the caller asks the policy (round_now)
    case EventKind::kNodeFail:
      return OnNodeFail(e, now);
    case EventKind::kNodeRepair:
      return OnNodeRepair(e, now);
  }
  return false;
}

bool Engine::OnArrival(const Event& e, double now) {
  JobState& js = jobs_[static_cast<size_t>(e.job)];
  JobView v;
  v.key = e.job;
  v.id = js.record.id;
  v.submit_s = js.record.submit_s;
  v.options = js.options.get();
  v.total_tokens = js.spec.tokens;
  if (policy_.uses_profiled_memory()) v.memory_factor = js.truth.factor;
  if (use_runtime_) {
    monitor_.Track(e.job, js.record.model);  // the class: the workload's model
    v.memory_factor = monitor_.Factor(e.job);
  }
  v.requested_option = requested_[static_cast<size_t>(e.job)];
  JobView* slot = &views_[static_cast<size_t>(e.job)];
  *slot = std::move(v);
  auto pos = std::lower_bound(active_.begin(), active_.end(), e.job,
                              [](const JobView* a, int64_t k) { return a->key < k; });
  active_.insert(pos, slot);
  ++arrived_;
  ++change_seq_;
  if (js.options->options.empty()) {
    Finish(e.job, JobOutcome::kImpossible, now);
    return true;
  }
  if (policy_.round_s() > 0 && !round_pending_) {
    Push(now, EventKind::kRound);
    round_pending_ = true;
  }
  return true;
}

bool Engine::OnFinish(const Event& e, double now) {
  if (Current(e) == nullptr) return false;
  Finish(e.job, JobOutcome::kFinished, now);
  last_finish_ = std::max(last_finish_, now);
  return true;
}

bool Engine::OnOom(const Event& e, double now) {
  JobView* v = Current(e);
  if (v == nullptr) return false;
  JobState& js = jobs_[static_cast<size_t>(e.job)];
  const int option = v->alloc.option;
  if (use_runtime_) {
    // The runtime learns a lower bound from the crash and plans a safer layout; the one that
    // crashed no longer fits the job's factor.
    const Plan& plan = v->PlanOf(option, v->layout);
    monitor_.ReportOom(e.job, plan.device_bytes,
                       view_.gpu_memory_bytes[static_cast<size_t>(v->option(option).type)]);
    runtime::OomRecovery rec = runtime::RecoverFromOom(*v, monitor_, view_, runtime_opt_);
    StopRun(*v, now, /*graceful=*/false, /*oom=*/true);
    ++v->ooms;
    ++m_.oom_events;
    ++change_seq_;
    v->memory_factor = rec.factor;
    js.record.note = rec.message;
    if (rec.give_up) Finish(e.job, JobOutcome::kGivenUp, now);
    return true;
  }
  // The crashed run is lost (StopRun counts it: no checkpoint was reached).
  StopRun(*v, now, /*graceful=*/false, /*oom=*/true);
  v->failed_options.push_back(option);
  ++v->ooms;
  ++m_.oom_events;
  ++change_seq_;
  if (v->ooms >= opt_.max_ooms) {
    js.record.note = fmt::format("given up after {} out-of-memory crashes", v->ooms);
    Finish(e.job, JobOutcome::kGivenUp, now);
  }
  return true;
}

bool Engine::OnCrash(const Event& e, double now) {
  JobView* v = Current(e);
  if (v == nullptr) return false;
  JobState& js = jobs_[static_cast<size_t>(e.job)];
  const RunOption& o = v->option(v->alloc.option);
  std::string log = fmt::format("run on {} x {} exited with an error after {:.0f} s", o.gpus,
                                view_.types[static_cast<size_t>(o.type)], now - v->run_start_s);
  StopRun(*v, now, /*graceful=*/false);
  ++js.record.crashes;
  ++m_.crashes;
  ++change_seq_;
  runtime::RetryDecision d = runtime::OnCrash(js.retry, js.checkpoint_tokens, log, retry_opt_);
  js.record.note = d.message;
  if (!d.retry) {
    Finish(e.job, JobOutcome::kFailed, now);
  } else {
    Hold(*v);
    Push(now + d.delay_s, EventKind::kRetry, e.job, js.version);
  }
  return true;
}

bool Engine::OnReport(const Event& e, double now) {
  JobView* v = Current(e);
  if (v == nullptr || !v->running) return false;
  Report(*v, now);
  if (v->running) Push(now + opt_.report_interval_s, EventKind::kReport, e.job, e.version);
  return false;  // what the runtime does with it is decided after the batch (reported_)
}

bool Engine::OnStragglerFix(const Event& e, double /*now*/) {
  NodeView& node = view_.nodes[static_cast<size_t>(e.node)];
  node_speed_[static_cast<size_t>(e.node)] = 1.0;
  stragglers_.Clear(e.node);
  if (!node_failed_[static_cast<size_t>(e.node)]) {
    int64_t used = 0;
    for (const JobView* v : active_) {
      if (!v->running) continue;
      for (const auto& [n, g] : v->alloc.placement) {
        if (n == e.node) used += g;
      }
    }
    node.up = true;
    node.free = node.gpus - used;
  }
  ++change_seq_;
  return true;
}

bool Engine::OnNodeFail(const Event& e, double now) {
  NodeView& node = view_.nodes[static_cast<size_t>(e.node)];
  node.up = false;
  node_failed_[static_cast<size_t>(e.node)] = 1;
  ++m_.node_failures;
  for (size_t i = 0; i < active_.size(); ++i) {
    JobView& v = *active_[i];
    if (!v.running) continue;
    bool on = std::any_of(v.alloc.placement.begin(), v.alloc.placement.end(),
                          [&](const auto& p) { return p.first == e.node; });
    if (!on) continue;
    StopRun(v, now, /*graceful=*/false);
    ++jobs_[static_cast<size_t>(v.key)].record.failures;
  }
  node.free = 0;
  Push(now + opt_.node_repair_s, EventKind::kNodeRepair, -1, 0, e.node);
  ++change_seq_;
  return true;
}

bool Engine::OnNodeRepair(const Event& e, double now) {
  NodeView& node = view_.nodes[static_cast<size_t>(e.node)];
  node_failed_[static_cast<size_t>(e.node)] = 0;
  // A node still declared slow stays cordoned until its straggler repair.
  node.up = !stragglers_.IsSlow(e.node);
  node.free = node.up ? node.gpus : 0;
  Push(now + world_.NodeFailureAfter(), EventKind::kNodeFail, -1, 0, e.node);
  ++change_seq_;
  return true;
}

Status Engine::AfterBatch(double now, bool changed, bool round_now, bool& stop) {
  if (reported_) {
    reported_ = false;
    bool acted = false;
    RETURN_IF_ERROR(RunMemoryActions(now, acted));
    changed = changed || acted;
  }
  const int64_t total = static_cast<int64_t>(jobs_.size());
  bool call = (changed && policy_.event_driven()) || round_now;
  if (call && !active_.empty()) {
    bool acted = false;
    RETURN_IF_ERROR(Invoke(now, acted));
    // Nothing runs, nothing more arrives or gets repaired, the policy starts nothing: what is
    // left can never run. (With every node up, a failure can only take GPUs away: waiting
    // changes nothing.)
    bool all_up = std::all_of(view_.nodes.begin(), view_.nodes.end(),
                              [](const NodeView& n) { return n.up; });
    if (!acted && arrived_ == total && running_ == 0 && held_.empty() && all_up) {
      stop = true;
      return Status::Ok();
    }
  }
  const double round = policy_.round_s();
  if (round > 0 && !round_pending_ && !active_.empty()) {
    Push(now + round, EventKind::kRound);
    round_pending_ = true;
  }
  return Status::Ok();
}

Result<SimResult> Engine::Run() {
  double wall0 = opt_.wall_now_s ? opt_.wall_now_s() : 0.0;
  RETURN_IF_ERROR(Prepare());
  double now = 0;
  double first_arrival = w_.jobs.empty() ? 0 : std::numeric_limits<double>::infinity();
  for (const auto& j : w_.jobs) first_arrival = std::min(first_arrival, j.submit_s);
  last_finish_ = first_arrival;
  const int64_t total = static_cast<int64_t>(jobs_.size());
  int64_t next_progress = 0;
  while (!events_.empty()) {
    now = events_.top().t;
    if (now > opt_.max_time_s) break;
    bool changed = false, round_now = false;
    while (!events_.empty() && events_.top().t == now) {
      Event e = events_.top();
      events_.pop();
      ++m_.events;
      round_now = round_now || e.kind == EventKind::kRound;
      changed = Dispatch(e, now) || changed;
    }
    bool stop = false;
    RETURN_IF_ERROR(AfterBatch(now, changed, round_now, stop));
    if (stop) break;
    Sample(now);
    if (opt_.progress && done_ >= next_progress) {
      opt_.progress(static_cast<double>(done_) / static_cast<double>(std::max<int64_t>(1, total)));
      next_progress = done_ + std::max<int64_t>(1, total / 200);
    }
    if (active_.empty() && held_.empty() && arrived_ == total) break;
  }
  SimResult r = Results(now, first_arrival);
  r.metrics.sim_wall_s = opt_.wall_now_s ? opt_.wall_now_s() - wall0 : 0.0;
  return r;
}

SimResult Engine::Results(double now, double first_arrival) {
  // Whatever is still active (or held after a crash) did not finish.
  for (int64_t key : held_) {
    JobState& js = jobs_[static_cast<size_t>(key)];
    js.record.outcome = JobOutcome::kUnfinished;
    js.record.ooms = views_[static_cast<size_t>(key)].ooms;
  }
  for (JobView* v : active_) {
    if (v->running) StopRun(*v, now, /*graceful=*/true);
    JobState& js = jobs_[static_cast<size_t>(v->key)];
    js.record.outcome = JobOutcome::kUnfinished;
    js.record.ooms = v->ooms;
  }
  SimResult r;
  r.jobs.reserve(jobs_.size());
  for (size_t i = 0; i < w_.jobs.size(); ++i) r.jobs.push_back(jobs_[order_[i]].record);
  PolicyMetrics counts = m_;
  counts.policy = std::string(policy_.name());
  RunTotals totals;
  totals.first_arrival_s = first_arrival;
  totals.last_finish_s = last_finish_;
  totals.end_s = now;
  totals.cluster_gpus = cluster_.total_gpus();
  r.metrics = ComputeMetrics(counts, r.jobs, overhead_ms_, totals);
  r.timeline = ThinTimeline(timeline_);
  return r;
}

}  // namespace

Status SimOptions::Validate() const {
  auto bad = [](const char* field, const char* why) { return InvalidArgument(why, {}, field); };
  if (memory_error_pct && !(*memory_error_pct >= 0 && *memory_error_pct < 50)) {
    return bad("memory_error_pct", "must be in [0, 50) percent");
  }
  if (!(memory_margin >= 0)) return bad("memory_margin", "must be >= 0");
  if (!(restart_s >= 0)) return bad("restart_s", "must be >= 0");
  if (!(checkpoint_interval_s > 0)) return bad("checkpoint_interval_s", "must be > 0");
  if (!(oom_after_s >= 0)) return bad("oom_after_s", "must be >= 0");
  if (max_ooms < 1) return bad("max_ooms", "must be at least 1");
  if (!(node_mtbf_s >= 0)) return bad("node_mtbf_s", "must be >= 0 (0: no failures)");
  if (!(node_repair_s >= 0)) return bad("node_repair_s", "must be >= 0");
  if (!(memory_drift_pct >= 0 && memory_drift_pct <= 100)) {
    return bad("memory_drift_pct", "must be in [0, 100] percent");
  }
  if (!(memory_bias_pct > -50 && memory_bias_pct <= 100)) {
    return bad("memory_bias_pct", "must be in (-50, 100] percent");
  }
  if (!(report_interval_s > 0)) return bad("report_interval_s", "must be > 0");
  if (!(job_crash_mtbf_s >= 0)) return bad("job_crash_mtbf_s", "must be >= 0 (0: no crashes)");
  if (!(straggler_fraction >= 0 && straggler_fraction <= 1)) {
    return bad("straggler_fraction", "must be in [0, 1]");
  }
  if (!(straggler_speed > 0 && straggler_speed <= 1)) {
    return bad("straggler_speed", "must be in (0, 1]");
  }
  if (!(retry_backoff_s >= 0)) return bad("retry_backoff_s", "must be >= 0");
  if (max_crashes < 1) return bad("max_crashes", "must be at least 1");
  if (std::isnan(max_time_s)) return bad("max_time_s", "must be a number");
  return Status::Ok();
}

const char* JobOutcomeName(JobOutcome o) {
  switch (o) {
    case JobOutcome::kFinished:
      return "finished";
    case JobOutcome::kGivenUp:
      return "given_up";
    case JobOutcome::kUnfinished:
      return "unfinished";
    case JobOutcome::kImpossible:
      return "impossible";
    case JobOutcome::kFailed:
      return "failed";
  }
  return "unfinished";
}

Result<SimResult> Simulate(const Workload& workload, const Cluster& cluster,
                           const GpuCatalog& catalog, Policy& policy, const SimOptions& options,
                           OptionCache& cache) {
  RETURN_IF_ERROR(options.Validate());
  Engine e(workload, cluster, catalog, policy, options, cache);
  return e.Run();
}

}  // namespace frenzy

