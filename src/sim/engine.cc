#include "sim/engine.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <queue>
#include <set>

#include "model/zoo.h"
#include "runtime/actions.h"
#include "runtime/faults.h"
#include "runtime/monitor.h"
#include "sched/apply.h"
#include "sim/engine_internal.h"
#include "sim/metrics.h"
#include "sim/world.h"

namespace frenzy {
namespace engine_internal {

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
  if (!opt_.withheld.empty()) {
    std::set<std::string> ids;
    for (const auto& j : w_.jobs) ids.insert(j.id);
    for (const auto& id : opt_.withheld) {
      if (!ids.contains(id)) {
        return InvalidArgument("no job '" + id + "' in the workload to withhold", w_.name,
                               "withheld");
      }
    }
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
  auto opts = cache_.Get(wj.model, js.spec, policy_.options_kind(), policy_.mixed_options());
  if (!opts.ok()) return Status(opts.status().code(), opts.status().ToString(), where, "model");
  js.options = *opts;
  // The memory and speed truth of this job (drawn for every job, in key order, whatever the
  // policy).
  js.truth = world_.DrawJob(view_.types.size(), wj.model);
  if (policy_.uses_profiled_memory() && !js.truth.speed.empty()) {
    // A policy that profiles sees the job's true speeds: its own copy of the table.
    auto profiled = std::make_shared<JobOptions>(*js.options);
    for (RunOption& o : profiled->options) {
      o.plan.tokens_per_s *= js.truth.Speed(o.type);
      for (Plan& p : o.leaner) p.tokens_per_s *= js.truth.Speed(o.type);
    }
    js.options = std::move(profiled);
    js.profiled = true;
  }
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
  js.record.id = wj.id;
  js.record.model = wj.model;
  js.record.submit_s = wj.submit_s;
  js.record.memory_factor = js.truth.factor;
  js.record.memory_drift = js.truth.drift;
  if (opt_.withheld.contains(wj.id)) {
    js.withheld = true;
    ++arrived_;  // never submitted: the run ends without waiting for it
    return Status::Ok();
  }
  Push(wj.submit_s, EventKind::kArrival, static_cast<int64_t>(key));
  return Status::Ok();
}

JobView* Engine::Active(int64_t key) {
  // The views are the engine's own (views_); Find hands them out read-only to ApplyDecisions.
  return const_cast<JobView*>(Find(key));
}

JobView* Engine::Current(const Event& e) {
  if (e.version != jobs_[static_cast<size_t>(e.job)].version) return nullptr;
  return Active(e.job);
}

// Ends the current run. Graceful (the policy stopped it): a checkpoint is written at the stop.
// Otherwise (crash, failure): progress since the last checkpoint is lost.
void Engine::StopRun(JobView& v, double now, bool graceful, bool oom, const char* end) {
  JobState& js = jobs_[static_cast<size_t>(v.key)];
  const RunOption& o = v.option(v.alloc.option);
  double gpus = static_cast<double>(o.gpus);
  // The run as it was (SimOptions::record_runs), before the stop clears it; what it kept is
  // known below.
  std::optional<RunRecord> run;
  if (opt_.record_runs) {
    run = RunRecord{js.record.id,
                    v.run_start_s,
                    v.progress_since_s,
                    now,
                    o.mixed() ? o.plan.gpu : view_.types[static_cast<size_t>(o.type)],
                    o.gpus,
                    v.layout,
                    v.rate_tokens_per_s,
                    0,
                    end != nullptr ? end
                    : oom          ? "oom"
                    : graceful     ? "stop"
                                   : "crash"};
  }
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
  if (run) {
    run->tokens = done - v.done_tokens;  // what the run kept
    runs_.push_back(std::move(*run));
  }
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
  for (const auto& [n, g] : a.placement)
    speed = std::min(speed, node_speed_[static_cast<size_t>(n)]);
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
  double pause = restart ? opt_.restart.Of(v.options->checkpoint_bytes) : 0.0;
  if (!restart && policy_.uses_profiled_memory()) {
    pause = opt_.profile_s_per_type * static_cast<double>(view_.types.size());
  }
  v.progress_since_s = now + pause;
  // The true speed; a profiled table (below) already holds it.
  // A mixed option runs at the pace of its slowest part: its parts were balanced on predicted
  // speeds, so the type whose truth falls furthest below the prediction sets it.
  double truth = js.truth.Speed(o.type);
  for (const auto& part : o.parts) truth = std::min(truth, js.truth.Speed(part.first));
  const double known = js.profiled ? truth : 1.0;
  v.rate_tokens_per_s = plan.tokens_per_s * Speed(a) * truth / known;
  ++js.version;
  js.record.gpu = o.mixed() ? o.plan.gpu : view_.types[static_cast<size_t>(o.type)];
  js.record.gpus = o.gpus;
  js.record.restarts = v.restarts;
  js.record.speed_factor = truth;
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
  if (v->running) {
    StopRun(*v, now, /*graceful=*/true, /*oom=*/false,
            outcome == JobOutcome::kFinished ? "finish" : "stop");
  }
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

Snapshot Engine::SnapshotAt(double now) const {
  Snapshot s;
  s.now_s = now;
  s.cluster = &view_;
  s.jobs = std::span<const JobView* const>(active_.data(), active_.size());
  s.change_seq = change_seq_;
  s.costs.restart = opt_.restart;
  return s;
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
  // Every job sees what it and its class learned up to now, as the daemon's at every pass (its
  // own reports update it at once; what its class learned, here).
  if (use_runtime_ && speed_.class_version() != speed_seen_) {
    speed_seen_ = speed_.class_version();
    for (JobView* v : active_) v->speed_factor = speed_.Factors(v->key, view_.types.size());
  }
  const Snapshot s = SnapshotAt(now);
  double t0 = opt_.wall_now_s ? opt_.wall_now_s() : 0.0;
  Decisions d = policy_.Schedule(s);
  double t1 = opt_.wall_now_s ? opt_.wall_now_s() : 0.0;
  overhead_ms_.push_back((t1 - t0) * 1e3);
  acted = !d.stop.empty() || !d.start.empty();
  return ApplyDecisions(d, view_, policy_.name(), now, *this);
}

Result<SimResult> Engine::Run() {
  double wall0 = opt_.wall_now_s ? opt_.wall_now_s() : 0.0;
  RETURN_IF_ERROR(Prepare());
  double now = 0;
  double first_arrival = std::numeric_limits<double>::infinity();
  for (const JobState& js : jobs_) {
    if (!js.withheld) first_arrival = std::min(first_arrival, js.record.submit_s);
  }
  if (std::isinf(first_arrival)) first_arrival = 0;  // no job, or every job withheld
  last_finish_ = first_arrival;
  const int64_t total = static_cast<int64_t>(jobs_.size());
  int64_t next_progress = 0;
  while (!events_.empty()) {
    now = events_.top().t;
    if (now > opt_.max_time_s) {
      now = opt_.max_time_s;  // the clock stops at the cut, not at the next event after it
      break;
    }
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
    if (v->running) StopRun(*v, now, /*graceful=*/true, /*oom=*/false, "clock");
    JobState& js = jobs_[static_cast<size_t>(v->key)];
    js.record.outcome = JobOutcome::kUnfinished;
    js.record.ooms = v->ooms;
  }
  SimResult r;
  r.jobs.reserve(jobs_.size());
  for (size_t i = 0; i < w_.jobs.size(); ++i) {
    if (!jobs_[order_[i]].withheld) r.jobs.push_back(jobs_[order_[i]].record);
  }
  PolicyMetrics counts = m_;
  counts.policy = std::string(policy_.name());
  RunTotals totals;
  totals.first_arrival_s = first_arrival;
  totals.last_finish_s = last_finish_;
  totals.end_s = now;
  totals.cluster_gpus = cluster_.total_gpus();
  r.metrics = ComputeMetrics(counts, r.jobs, overhead_ms_, totals);
  r.timeline = ThinTimeline(timeline_);
  r.runs = std::move(runs_);
  return r;
}

}  // namespace engine_internal

Status SimOptions::Validate() const {
  auto bad = [](const char* field, const char* why) { return InvalidArgument(why, {}, field); };
  if (memory_error_pct && !(*memory_error_pct >= 0 && *memory_error_pct < 50)) {
    return bad("memory_error_pct", "must be in [0, 50) percent");
  }
  if (perf_error_pct && !(*perf_error_pct >= 0 && *perf_error_pct < 100)) {
    return bad("perf_error_pct", "must be in [0, 100) percent");
  }
  if (!(profile_s_per_type >= 0)) {
    return bad("profile_s_per_type", "must be >= 0");
  }
  if (!(memory_margin >= 0)) return bad("memory_margin", "must be >= 0");
  if (!(restart.fixed_s >= 0 || restart.fixed_s == -1)) {
    return bad("restart_s", "must be >= 0 (or unset: from the job's checkpoint)");
  }
  if (!(restart.startup_s >= 0)) return bad("startup_s", "must be >= 0");
  if (!(restart.storage_gbs > 0)) return bad("storage_gbs", "must be > 0");
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
  engine_internal::Engine e(workload, cluster, catalog, policy, options, cache);
  return e.Run();
}

}  // namespace frenzy
