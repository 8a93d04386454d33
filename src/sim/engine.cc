#include "sim/engine.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <queue>
#include <random>
#include <set>

#include "model/zoo.h"
#include "runtime/actions.h"
#include "runtime/faults.h"
#include "runtime/monitor.h"

namespace frenzy {
namespace {

// MARP's measured errors on published Megatron-LM runs (bench/RESULTS.md, "MARP against
// published measurements", rows pub019-pub031: (predicted - measured) / measured). A job's real
// peak is predicted / (1 + error).
constexpr double kMeasuredMarpErrors[] = {-0.014, 0.025,  -0.001, -0.014, -0.014, -0.049, -0.030,
                                          -0.081, -0.013, 0.020,  -0.019, -0.024, -0.059};

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
  double factor = 1;    // real peak / predicted
  double drift = 0;     // growth of the real peak by the end of the job (fraction)
  bool after_oom = false;  // the current (or next) run follows an out-of-memory crash
  runtime::RetryState retry;
  int64_t version = 0;  // bumped whenever the job starts or stops
  double checkpoint_tokens = 0;
  JobRecord record;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double idx = p * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(idx));
  size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
}

class Engine {
 public:
  Engine(const Workload& w, const Cluster& c, const GpuCatalog& cat, Policy& p, const SimOptions& o,
         OptionCache& cache)
      : w_(w),
        cluster_(c),
        catalog_(cat),
        policy_(p),
        opt_(o),
        cache_(cache),
        rng_(o.seed),
        // Separate streams, so that switching one model on leaves the others' draws unchanged.
        rng_drift_(o.seed ^ 0x9e3779b97f4a7c15ULL),
        rng_crash_(o.seed ^ 0xbf58476d1ce4e5b9ULL),
        use_runtime_(p.uses_runtime()) {
    runtime_opt_.restart_s = o.restart_s;
    runtime_opt_.max_ooms = o.max_ooms;
    runtime_opt_.act_horizon_s = 3 * o.report_interval_s;
    retry_opt_.backoff_s = o.retry_backoff_s;
    retry_opt_.max_attempts = o.max_crashes;
  }

  Result<SimResult> Run();

 private:
  Status Prepare();
  void Push(double t, EventKind k, int64_t job = -1, int64_t version = 0, int node = -1) {
    events_.push(Event{t, seq_++, k, job, version, node});
  }
  JobView* Active(int64_t key);
  // `oom`: the run crashed out of memory (its waste, and the next run's restart pause, are
  // counted as out-of-memory waste).
  void StopRun(JobView& v, double now, bool graceful, bool oom = false);
  Status Apply(const Decisions& d, double now);
  // `layout` < 0: the layout the job's memory factor allows (JobView::Layout).
  Status StartRun(JobView& v, const Allocation& a, double now, int layout = -1);
  // The real peak of the job on (option, layout) at `progress` (fraction).
  double RealPeak(const JobState& js, const Plan& plan, double progress) const;
  // The speed of a run on these nodes (stragglers slow the whole gang).
  double Speed(const Allocation& a) const;
  // Runtime: a memory and speed report of a running job.
  void OnReport(JobView& v, double now);
  // The queued and running jobs and the cluster as the policy and the runtime see them.
  Snapshot SnapshotAt(double now) const;
  // Runtime: applies the memory actions for the running jobs; true when it acted.
  Status RunMemoryActions(double now, bool& acted);
  void Cordon(int node, double now);
  void Hold(JobView& v);
  void Unhold(int64_t key);
  void Finish(int64_t key, JobOutcome outcome, double now);
  void Sample(double now);
  // Asks the policy and applies its decisions; sets `acted` when it decided anything.
  Status Invoke(double now, bool& acted);

  const Workload& w_;
  const Cluster& cluster_;
  const GpuCatalog& catalog_;
  Policy& policy_;
  const SimOptions& opt_;
  OptionCache& cache_;
  std::mt19937_64 rng_;
  std::mt19937_64 rng_drift_, rng_crash_;
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
  std::vector<double> overhead_ms_;
  std::vector<TimelinePoint> timeline_;
  PolicyMetrics m_;
  double busy_gpu_s_ = 0;
  int64_t running_ = 0;    // jobs running now
  int64_t busy_gpus_ = 0;  // GPUs allocated now
};

Status Engine::Prepare() {
  for (const auto& node : cluster_.nodes) {
    auto it = std::find(view_.types.begin(), view_.types.end(), node.gpu);
    if (it == view_.types.end()) {
      const GpuType* g = catalog_.Find(node.gpu);
      if (g == nullptr) return NotFound("unknown GPU type '" + node.gpu + "'", cluster_.name);
      view_.types.push_back(node.gpu);
      view_.gpu_memory_bytes.push_back(g->memory_bytes);
      view_.gpus_per_node.push_back(node.gpus);
      it = view_.types.end() - 1;
    }
    int t = static_cast<int>(it - view_.types.begin());
    view_.gpus_per_node[static_cast<size_t>(t)] =
        std::max(view_.gpus_per_node[static_cast<size_t>(t)], node.gpus);
    view_.nodes.push_back(NodeView{t, node.gpus, node.gpus, true});
  }
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
  std::normal_distribution<double> normal(0.0, opt_.memory_error_pct.value_or(0) / 100.0);
  std::uniform_int_distribution<size_t> pick(0, std::size(kMeasuredMarpErrors) - 1);
  for (size_t key = 0; key < idx.size(); ++key) {
    const WorkloadJob& wj = w_.jobs[idx[key]];
    order_[idx[key]] = key;
    std::string where = fmt::format("{}: job '{}'", w_.name, wj.id);
    auto mit = models.find(wj.model);
    if (mit == models.end()) {
      auto spec = ResolveModel(wj.model);
      if (!spec.ok()) {
        return Status(spec.status().code(), spec.status().ToString(), where, "model");
      }
      mit = models.emplace(wj.model, *spec).first;
    }
    JobState& js = jobs_[key];
    js.spec.model = mit->second;
    js.spec.tokens = wj.tokens;
    js.spec.global_batch = wj.global_batch;
    js.spec.seq_len = wj.seq_len;
    js.spec.precision = wj.precision;
    auto opts = cache_.Get(wj.model, js.spec, policy_.options_kind());
    if (!opts.ok()) {
      return Status(opts.status().code(), opts.status().ToString(), where, "model");
    }
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
    double err = opt_.memory_error_pct ? normal(rng_) : kMeasuredMarpErrors[pick(rng_)];
    js.factor = opt_.memory_error_pct ? std::max(0.5, 1.0 + err) : 1.0 / (1.0 + err);
    js.record.id = wj.id;
    js.record.model = wj.model;
    js.record.submit_s = wj.submit_s;
    js.factor *= 1.0 + opt_.memory_bias_pct / 100.0;
    if (opt_.memory_drift_pct > 0) {
      js.drift = std::uniform_real_distribution<double>(0.0, opt_.memory_drift_pct / 100.0)(
          rng_drift_);
    }
    js.record.memory_factor = js.factor;
    js.record.memory_drift = js.drift;
    Push(wj.submit_s, EventKind::kArrival, static_cast<int64_t>(key));
  }
  node_speed_.assign(view_.nodes.size(), 1.0);
  node_failed_.assign(view_.nodes.size(), 0);
  if (opt_.straggler_fraction > 0) {
    std::bernoulli_distribution slow(opt_.straggler_fraction);
    for (double& sp : node_speed_) {
      if (slow(rng_drift_)) sp = opt_.straggler_speed;
    }
  }
  if (opt_.node_mtbf_s > 0) {
    std::exponential_distribution<double> fail(1.0 / opt_.node_mtbf_s);
    for (size_t n = 0; n < view_.nodes.size(); ++n) {
      Push(fail(rng_), EventKind::kNodeFail, -1, 0, static_cast<int>(n));
    }
  }
  return Status::Ok();
}

JobView* Engine::Active(int64_t key) {
  auto it = std::lower_bound(active_.begin(), active_.end(), key,
                             [](const JobView* v, int64_t k) { return v->key < k; });
  if (it == active_.end() || (*it)->key != key) return nullptr;
  return *it;
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

double Engine::RealPeak(const JobState& js, const Plan& plan, double progress) const {
  return static_cast<double>(plan.device_bytes) * js.factor * (1.0 + js.drift * progress);
}

double Engine::Speed(const Allocation& a) const {
  double speed = 1;
  for (const auto& [n, g] : a.placement) speed = std::min(speed, node_speed_[static_cast<size_t>(n)]);
  return speed;
}

Status Engine::StartRun(JobView& v, const Allocation& a, double now, int layout) {
  JobState& js = jobs_[static_cast<size_t>(v.key)];
  auto bad = [&](const std::string& why) {
    return Status(StatusCode::kInternal,
                  fmt::format("policy '{}' made an invalid decision for job '{}' at t={:.0f} s: {}",
                              policy_.name(), v.id, now, why));
  };
  if (a.option < 0 || static_cast<size_t>(a.option) >= v.options->options.size()) {
    return bad("no such option");
  }
  const RunOption& o = v.option(a.option);
  int64_t sum = 0;
  for (const auto& [n, g] : a.placement) {
    if (n < 0 || static_cast<size_t>(n) >= view_.nodes.size()) return bad("no such node");
    const NodeView& node = view_.nodes[static_cast<size_t>(n)];
    if (node.type != o.type) return bad("node of another GPU type");
    if (!node.up) return bad("node is down");
    if (g < 1 || g > node.free)
      return bad(fmt::format("node {} has {} free GPUs, not {}", n, node.free, g));
    sum += g;
  }
  if (sum != o.gpus) return bad(fmt::format("placement has {} GPUs, the option {}", sum, o.gpus));
  if (layout < 0) {
    // The fastest layout the job's memory factor allows whose TP groups stay inside the nodes.
    layout = std::max(0, v.Layout(a.option, view_));
    auto keeps_groups = [&](int k) {
      int64_t tp = v.PlanOf(a.option, k).tp;
      return std::all_of(a.placement.begin(), a.placement.end(),
                         [&](const auto& np) { return np.second % tp == 0; });
    };
    while (layout > 0 && !keeps_groups(layout) &&
           static_cast<size_t>(layout) < o.leaner.size()) {
      ++layout;
    }
  }
  if (static_cast<size_t>(layout) > o.leaner.size()) return bad("no such layout");
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
  const double capacity = static_cast<double>(view_.gpu_memory_bytes[static_cast<size_t>(o.type)]);
  const double p0 = v.total_tokens > 0 ? v.done_tokens / v.total_tokens : 0.0;
  const double left = std::max(0.0, v.total_tokens - v.done_tokens);
  // When the run ends: finished, out of memory (at once, or when drift crosses the GPU's
  // memory), or crashed for another reason, whichever comes first.
  double end = v.progress_since_s + left / v.rate_tokens_per_s;
  EventKind how = EventKind::kFinish;
  if (RealPeak(js, plan, p0) > capacity) {
    end = v.progress_since_s + opt_.oom_after_s;
    how = EventKind::kOom;
  } else if (js.drift > 0 && RealPeak(js, plan, 1.0) > capacity) {
    double p_cross = (capacity / RealPeak(js, plan, 0.0) - 1.0) / js.drift;
    double t = v.progress_since_s + (p_cross * v.total_tokens - v.done_tokens) / v.rate_tokens_per_s;
    if (t < end) {
      end = std::max(now, t);
      how = EventKind::kOom;
    }
  }
  if (opt_.job_crash_mtbf_s > 0) {
    double t = now + std::exponential_distribution<double>(1.0 / opt_.job_crash_mtbf_s)(rng_crash_);
    if (t < end) {
      end = t;
      how = EventKind::kCrash;
    }
  }
  Push(end, how, v.key, js.version);
  if (use_runtime_) Push(now + opt_.report_interval_s, EventKind::kReport, v.key, js.version);
  return Status::Ok();
}

Status Engine::Apply(const Decisions& d, double now) {
  for (int64_t key : d.stop) {
    JobView* v = Active(key);
    if (v == nullptr || !v->running) {
      return Status(
          StatusCode::kInternal,
          fmt::format("policy '{}' stopped job key {} which is not running", policy_.name(), key));
    }
    StopRun(*v, now, /*graceful=*/true);
  }
  for (const auto& [key, alloc] : d.start) {
    JobView* v = Active(key);
    if (v == nullptr) {
      return Status(StatusCode::kInternal,
                    fmt::format("policy '{}' started unknown job key {}", policy_.name(), key));
    }
    if (v->running) StopRun(*v, now, /*graceful=*/true);  // a move
    RETURN_IF_ERROR(StartRun(*v, alloc, now));
  }
  return Status::Ok();
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

void Engine::OnReport(JobView& v, double now) {
  if (now < v.progress_since_s || v.total_tokens <= 0) return;  // still loading its checkpoint
  JobState& js = jobs_[static_cast<size_t>(v.key)];
  const Plan& plan = v.PlanOf(v.alloc.option, v.layout);
  const RunOption& o = v.option(v.alloc.option);
  const int64_t capacity = view_.gpu_memory_bytes[static_cast<size_t>(o.type)];
  double progress = v.DoneAt(now) / v.total_tokens;
  runtime::MemoryReport r;
  r.t_s = now;
  r.progress = progress;
  r.peak_bytes = static_cast<int64_t>(RealPeak(js, plan, progress));
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
    switch (a.kind) {
      case runtime::ActionKind::kReplan:
        ++m_.memory_replans;
        RETURN_IF_ERROR(StartRun(*v, a.alloc, now, a.layout));
        break;
      case runtime::ActionKind::kMove:
        ++m_.memory_moves;
        RETURN_IF_ERROR(StartRun(*v, a.alloc, now, a.layout));
        break;
      case runtime::ActionKind::kRequeue:
        ++m_.memory_requeues;
        break;
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
  return Apply(d, now);
}

Result<SimResult> Engine::Run() {
  double wall0 = opt_.wall_now_s ? opt_.wall_now_s() : 0.0;
  RETURN_IF_ERROR(Prepare());
  const bool profiled = policy_.uses_profiled_memory();
  const double round = policy_.round_s();
  double now = 0;
  double first_arrival = w_.jobs.empty() ? 0 : std::numeric_limits<double>::infinity();
  for (const auto& j : w_.jobs) first_arrival = std::min(first_arrival, j.submit_s);
  double last_finish = first_arrival;
  int64_t total = static_cast<int64_t>(jobs_.size());
  int64_t arrived = 0;
  int64_t next_progress = 0;

  while (!events_.empty()) {
    now = events_.top().t;
    if (now > opt_.max_time_s) break;
    bool changed = false, round_now = false;
    while (!events_.empty() && events_.top().t == now) {
      Event e = events_.top();
      events_.pop();
      ++m_.events;
      switch (e.kind) {
        case EventKind::kArrival: {
          JobState& js = jobs_[static_cast<size_t>(e.job)];
          JobView v;
          v.key = e.job;
          v.id = js.record.id;
          v.submit_s = js.record.submit_s;
          v.options = js.options.get();
          v.total_tokens = js.spec.tokens;
          if (profiled) v.memory_factor = js.factor;
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
          ++arrived;
          ++change_seq_;
          changed = true;
          if (js.options->options.empty()) {
            Finish(e.job, JobOutcome::kImpossible, now);
            break;
          }
          if (round > 0 && !round_pending_) {
            Push(now, EventKind::kRound);
            round_pending_ = true;
          }
          break;
        }
        case EventKind::kFinish: {
          JobState& js = jobs_[static_cast<size_t>(e.job)];
          if (e.version != js.version) break;
          Finish(e.job, JobOutcome::kFinished, now);
          last_finish = std::max(last_finish, now);
          changed = true;
          break;
        }
        case EventKind::kOom: {
          JobState& js = jobs_[static_cast<size_t>(e.job)];
          if (e.version != js.version) break;
          JobView* v = Active(e.job);
          int option = v->alloc.option;
          if (use_runtime_) {
            // The runtime learns a lower bound from the crash and plans a safer layout; the
            // one that crashed no longer fits the job's factor.
            const Plan& plan = v->PlanOf(option, v->layout);
            monitor_.ReportOom(e.job, plan.device_bytes,
                               view_.gpu_memory_bytes[static_cast<size_t>(v->option(option).type)]);
            runtime::OomRecovery rec = runtime::RecoverFromOom(*v, monitor_, view_, runtime_opt_);
            StopRun(*v, now, /*graceful=*/false, /*oom=*/true);
            ++v->ooms;
            ++m_.oom_events;
            ++change_seq_;
            changed = true;
            v->memory_factor = rec.factor;
            js.record.note = rec.message;
            if (rec.give_up) Finish(e.job, JobOutcome::kGivenUp, now);
            break;
          }
          // The crashed run is lost (StopRun counts it: no checkpoint was reached).
          StopRun(*v, now, /*graceful=*/false, /*oom=*/true);
          v->failed_options.push_back(option);
          ++v->ooms;
          ++m_.oom_events;
          ++change_seq_;
          changed = true;
          if (v->ooms >= opt_.max_ooms) {
            js.record.note = fmt::format("given up after {} out-of-memory crashes", v->ooms);
            Finish(e.job, JobOutcome::kGivenUp, now);
          }
          break;
        }
        case EventKind::kCrash: {
          JobState& js = jobs_[static_cast<size_t>(e.job)];
          if (e.version != js.version) break;
          JobView* v = Active(e.job);
          const RunOption& o = v->option(v->alloc.option);
          std::string log = fmt::format("run on {} x {} exited with an error after {:.0f} s", o.gpus,
                                        view_.types[static_cast<size_t>(o.type)],
                                        now - v->run_start_s);
          StopRun(*v, now, /*graceful=*/false);
          ++js.record.crashes;
          ++m_.crashes;
          ++change_seq_;
          changed = true;
          runtime::RetryDecision d = runtime::OnCrash(js.retry, js.checkpoint_tokens, log, retry_opt_);
          js.record.note = d.message;
          if (!d.retry) {
            Finish(e.job, JobOutcome::kFailed, now);
          } else {
            Hold(*v);
            Push(now + d.delay_s, EventKind::kRetry, e.job, js.version);
          }
          break;
        }
        case EventKind::kRetry:
          Unhold(e.job);
          changed = true;
          break;
        case EventKind::kReport: {
          JobState& js = jobs_[static_cast<size_t>(e.job)];
          if (e.version != js.version) break;
          JobView* v = Active(e.job);
          if (v == nullptr || !v->running) break;
          OnReport(*v, now);
          if (v->running) Push(now + opt_.report_interval_s, EventKind::kReport, e.job, js.version);
          break;
        }
        case EventKind::kStragglerFix: {
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
          changed = true;
          break;
        }
        case EventKind::kRound:
          round_pending_ = false;
          round_now = true;
          break;
        case EventKind::kNodeFail: {
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
          changed = true;
          break;
        }
        case EventKind::kNodeRepair: {
          NodeView& node = view_.nodes[static_cast<size_t>(e.node)];
          node_failed_[static_cast<size_t>(e.node)] = 0;
          // A node still declared slow stays cordoned until its straggler repair.
          node.up = !stragglers_.IsSlow(e.node);
          node.free = node.up ? node.gpus : 0;
          std::exponential_distribution<double> fail(1.0 / opt_.node_mtbf_s);
          Push(now + fail(rng_), EventKind::kNodeFail, -1, 0, e.node);
          ++change_seq_;
          changed = true;
          break;
        }
      }
    }
    if (reported_) {
      reported_ = false;
      bool acted = false;
      RETURN_IF_ERROR(RunMemoryActions(now, acted));
      changed = changed || acted;
    }
    bool call = (changed && policy_.event_driven()) || round_now;
    if (call && !active_.empty()) {
      bool acted = false;
      RETURN_IF_ERROR(Invoke(now, acted));
      // Nothing runs, nothing more arrives or gets repaired, the policy starts nothing: what
      // is left can never run.
      // (With every node up, a failure can only take GPUs away: waiting changes nothing.)
      bool all_up = std::all_of(view_.nodes.begin(), view_.nodes.end(),
                                [](const NodeView& n) { return n.up; });
      bool stuck = !acted && arrived == total && running_ == 0 && held_.empty() && all_up;
      if (stuck) break;
    }
    if (round > 0 && !round_pending_ && !active_.empty()) {
      Push(now + round, EventKind::kRound);
      round_pending_ = true;
    }
    Sample(now);
    if (opt_.progress && done_ >= next_progress) {
      opt_.progress(static_cast<double>(done_) / static_cast<double>(std::max<int64_t>(1, total)));
      next_progress = done_ + std::max<int64_t>(1, total / 200);
    }
    if (active_.empty() && held_.empty() && arrived == total) break;
  }
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
  PolicyMetrics& m = m_;
  m.policy = std::string(policy_.name());
  m.jobs = total;
  std::vector<double> jct;
  double queue_sum = 0;
  int64_t started = 0;
  double gpu_s = 0, wasted = 0, oom_wasted = 0;
  r.jobs.reserve(jobs_.size());
  for (size_t i = 0; i < w_.jobs.size(); ++i) {
    const JobRecord& rec = jobs_[order_[i]].record;
    r.jobs.push_back(rec);
    if (rec.outcome == JobOutcome::kFinished) {
      ++m.finished;
      jct.push_back(rec.jct_s());
    } else if (rec.outcome == JobOutcome::kGivenUp) {
      ++m.given_up;
    } else if (rec.outcome == JobOutcome::kImpossible) {
      ++m.impossible;
    } else if (rec.outcome == JobOutcome::kFailed) {
      ++m.failed;
    } else {
      ++m.unfinished;
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
  m.makespan_s = std::max(0.0, (m.finished > 0 ? last_finish : now) - first_arrival);
  m.avg_queue_s = started > 0 ? queue_sum / static_cast<double>(started) : 0;
  double capacity = static_cast<double>(cluster_.total_gpus()) * m.makespan_s;
  m.gpu_util = capacity > 0 ? gpu_s / capacity : 0;
  m.gpu_util_useful = capacity > 0 ? (gpu_s - wasted) / capacity : 0;
  m.gpu_hours = gpu_s / 3600;
  m.wasted_gpu_hours = wasted / 3600;
  m.oom_wasted_gpu_hours = oom_wasted / 3600;
  m.sched_calls = static_cast<int64_t>(overhead_ms_.size());
  if (!overhead_ms_.empty()) {
    for (double x : overhead_ms_) {
      m.sched_overhead_ms_total += x;
      m.sched_overhead_ms_max = std::max(m.sched_overhead_ms_max, x);
    }
    m.sched_overhead_ms_mean = m.sched_overhead_ms_total / static_cast<double>(m.sched_calls);
    m.sched_overhead_ms_p99 = Percentile(overhead_ms_, 0.99);
  }
  // Thin the timeline to about 4,000 points (keeping the last).
  size_t step = std::max<size_t>(1, timeline_.size() / 4000);
  for (size_t i = 0; i < timeline_.size(); i += step) r.timeline.push_back(timeline_[i]);
  if (!timeline_.empty() && (timeline_.size() - 1) % step != 0) {
    r.timeline.push_back(timeline_.back());
  }
  m.sim_wall_s = opt_.wall_now_s ? opt_.wall_now_s() - wall0 : 0.0;
  r.metrics = m;
  return r;
}

}  // namespace

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
  Engine e(workload, cluster, catalog, policy, options, cache);
  return e.Run();
}

}  // namespace frenzy
