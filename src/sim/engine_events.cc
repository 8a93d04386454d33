// The engine's event handlers (one per event kind), what happens after a batch of events, and
// the runtime's memory actions applied to the simulated world.
#include <fmt/core.h>

#include <algorithm>

#include "sim/engine_internal.h"

namespace frenzy::engine_internal {

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
  // Speed: what the job runs at over the prediction (the runtime learns it), and, against what
  // it ran at before on the type, whether its nodes are slow (a gang runs at its slowest node's
  // pace).
  const auto observed =
      speed_.Report(v.key, o.type, js.version, now, v.DoneAt(now), plan.tokens_per_s);
  v.speed_factor = speed_.Factors(v.key, view_.types.size());
  // A job's first run on a type cannot tell a slow node from the model's error: it is compared
  // with the slowest the model was ever measured to be wrong by.
  if (!observed) return;
  std::vector<int> nodes;
  for (const auto& [n, g] : v.alloc.placement) nodes.push_back(n);
  for (int n : stragglers_.Report(nodes, *observed / speed_.ExpectedFactor(v.key, o.type))) {
    Cordon(n, now);
  }
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
    // What it would run at elsewhere: the prediction corrected by its earlier runs (as the
    // detector compared it), not the model's error, which follows the job.
    const double predicted = v.PlanOf(v.alloc.option, v.layout).tokens_per_s *
                             speed_.ExpectedFactor(v.key, v.option(v.alloc.option).type);
    if (runtime::ShouldLeaveSlowNode(left, v.rate_tokens_per_s, predicted,
                                     opt_.restart.Of(v.options->checkpoint_bytes))) {
      StopRun(v, now, /*graceful=*/true, /*oom=*/false, "slow-node");
      jobs_[static_cast<size_t>(v.key)].record.note =
          fmt::format("left node {} (running at {:.0f}% of the predicted speed)", node,
                      100 * v.rate_tokens_per_s / std::max(1e-9, predicted));
    }
  }
  ++change_seq_;
  Push(now + opt_.node_repair_s, EventKind::kStragglerFix, -1, 0, node);
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
    StopRun(*v, now, /*graceful=*/true, /*oom=*/false, "memory");
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
    speed_.Track(e.job, js.record.model);
    v.memory_factor = monitor_.Factor(e.job);
    v.speed_factor = speed_.Factors(e.job, view_.types.size());  // its class's, so far
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
    StopRun(v, now, /*graceful=*/false, /*oom=*/false, "node-failure");
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

}  // namespace frenzy::engine_internal
