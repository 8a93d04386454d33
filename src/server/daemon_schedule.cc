// The scheduling pass: the snapshot the policy decides on, and its decisions applied.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <set>

#include "common/json_limits.h"
#include "common/strings.h"
#include "model/hf_config.h"
#include "model/zoo.h"
#include "planner/explain.h"
#include "runtime/actions.h"
#include "sched/apply.h"
#include "server/daemon.h"
#include "server/daemon_internal.h"

namespace frenzy::server {

using nlohmann::json;
using namespace internal;  // NOLINT: the daemon's own helpers

Status Daemon::PrepareSchedule(double now, Pass& pass, int& changes) {
  auto build = [&] {
    pass.views.clear();
    pass.keep.clear();
    pass.seen.clear();
    pass.index_of.clear();
    pass.views.reserve(active_.size());
    pass.keep.reserve(active_.size());
    pass.seen.reserve(active_.size());
    pass.index_of.reserve(active_.size());
    for (const auto& [key, r] : active_) {
      auto rt = runtime_.find(key);
      // A crashed job waits out its back-off unseen, as the engine holds it.
      if (rt != runtime_.end() && rt->second.retry_at_s > now) continue;
      auto v = RuntimeView(r);
      if (!v.ok()) continue;
      pass.keep.push_back(options_of_.at(key));
      pass.index_of[key] = pass.views.size();
      v->submit_s = r.submitted_s;
      v->progress_since_s = now;
      v->first_start_s = r.started_s;
      v->restarts = static_cast<int>(std::max<int64_t>(0, r.attempt - 1));
      if (use_runtime_ && r.memory_factor > 0) v->memory_factor = r.memory_factor;
      if (use_runtime_) v->speed_factor = speed_.Factors(key, view_.types.size());
      if (r.state == JobState::kRunning) {
        json plan = ParseOr(r.plan, json::object());
        v->running = true;
        v->alloc.option = plan.value("option", 0);
        v->layout = plan.value("layout", 0);
        v->run_start_s = plan.value("run_start_s", now);
        v->rate_tokens_per_s = plan.value("tokens_per_s", 0.0);
        v->alloc.placement = running_.at(key);
        if (v->alloc.option < 0 ||
            static_cast<size_t>(v->alloc.option) >= v->options->options.size()) {
          v->alloc.option = 0;
        }
        if (v->layout < 0 ||
            static_cast<size_t>(v->layout) >
                v->options->options[static_cast<size_t>(v->alloc.option)].leaner.size()) {
          v->layout = 0;
        }
      }
      pass.views.push_back(*std::move(v));
      pass.seen.emplace_back(r.state, r.attempt);
    }
  };
  build();
  // The runtime first, as in the engine: a job about to run out of memory is re-planned on its
  // GPUs, moved to GPUs where it fits, or requeued for the policy to place with its corrected
  // memory factor.
  if (use_runtime_ && reported_) {
    reported_ = false;
    Snapshot s;
    s.now_s = now;
    s.cluster = &view_;
    s.jobs = pass.views;
    s.change_seq = passes_;
    s.costs.restart = opt_.restart;
    std::vector<runtime::MemoryAction> actions =
        runtime::PlanMemoryActions(s, monitor_, opt_.runtime);
    for (const runtime::MemoryAction& a : actions) {
      auto it = active_.find(a.job);
      auto vi = pass.index_of.find(a.job);
      if (it == active_.end() || vi == pass.index_of.end() ||
          it->second.state != JobState::kRunning) {
        continue;
      }
      RETURN_IF_ERROR(ApplyMemoryAction(it->second, a, pass.views[vi->second], now));
      ++changes;
    }
    if (!actions.empty()) build();
  }
  pass.view = view_;
  return Status::Ok();
}

Status Daemon::ApplyMemoryAction(JobRow row, const runtime::MemoryAction& a, const JobView& view,
                                 double now) {
  row.memory_factor = a.factor;
  row.memory_note = monitor_.Explain(a.job);
  const std::string kind = std::string("memory_") + runtime::ActionKindName(a.kind);
  RETURN_IF_ERROR(Stop(row, now, kind, a.why));
  if (a.kind == runtime::ActionKind::kRequeue) return Status::Ok();
  JobRow queued = active_.at(a.job);
  JobView v = view;
  v.running = false;
  v.alloc = Allocation{};
  v.memory_factor = a.factor;
  if (std::string why = CheckAllocation(v, a.alloc, view_); !why.empty()) {
    return Status(StatusCode::kInternal, fmt::format("the runtime's {} of job '{}' is invalid: {}",
                                                     runtime::ActionKindName(a.kind), row.id, why));
  }
  return Launch(queued, v, a.alloc, now, a.layout);
}

// The policy's decisions, applied to runs. The policy decided on a snapshot while submissions,
// cancels and runs went on; a decision for a job that changed since (cancelled, ended, restarted)
// or for GPUs no longer free is stale and skipped — not a policy bug, which ApplyDecisions
// refuses before it gets here.
class Daemon::Applier : public DecisionTarget {
 public:
  Applier(Daemon& d, Pass& pass, int& changes) : d_(d), pass_(pass), changes_(changes) {}

  const JobView* Find(int64_t key) const override {
    auto vi = pass_.index_of.find(key);
    return vi == pass_.index_of.end() ? nullptr : &pass_.views[vi->second];
  }

  Status Stop(const JobView& job, double now_s, bool move) override {
    JobRow* row = Current(job.key, JobState::kRunning);
    if (row == nullptr) return Status::Ok();
    RETURN_IF_ERROR(move ? d_.Stop(*row, now_s, "moved", "moved by the scheduler")
                         : d_.Stop(*row, now_s, "preempted",
                                   "stopped by the scheduler; resumes from its checkpoint"));
    stopped_.insert(job.key);
    ++changes_;
    return Status::Ok();
  }

  Status Start(const JobView& job, const Allocation& alloc, double now_s) override {
    JobRow* row = Current(job.key, JobState::kQueued);
    if (row == nullptr) return Status::Ok();
    for (const auto& [n, g] : alloc.placement) {
      if (d_.view_.nodes[static_cast<size_t>(n)].free < g) return Status::Ok();  // taken since
    }
    JobRow copy = *row;
    JobView v = job;
    v.running = false;
    v.alloc = Allocation{};
    RETURN_IF_ERROR(d_.Launch(copy, v, alloc, now_s));
    ++changes_;
    return Status::Ok();
  }

 private:
  // The job's row when the decision still applies to it: the attempt the snapshot saw, in
  // `state` (a job stopped in this pass was running at the snapshot and is queued now).
  JobRow* Current(int64_t key, JobState state) {
    auto vi = pass_.index_of.find(key);
    auto it = d_.active_.find(key);
    if (vi == pass_.index_of.end() || it == d_.active_.end()) return nullptr;
    const auto& [seen_state, seen_attempt] = pass_.seen[vi->second];
    JobRow& row = it->second;
    if (row.attempt != seen_attempt || row.state != state) return nullptr;
    if (seen_state != state && !(state == JobState::kQueued && stopped_.count(key))) return nullptr;
    return &row;
  }

  Daemon& d_;
  Pass& pass_;
  int& changes_;
  std::set<int64_t> stopped_;
};

Status Daemon::ApplySchedule(double now, Pass& pass, const Decisions& d, int& changes) {
  // Validated against the snapshot the policy saw; applied to the cluster as it is now.
  Applier applier(*this, pass, changes);
  return ApplyDecisions(d, pass.view, policy_->name(), now, applier);
}

bool Daemon::ApplyNodes(const std::vector<BackendNode>& nodes) {
  std::vector<bool> up(view_.nodes.size(), false);
  for (const BackendNode& n : nodes) {
    if (auto it = node_index_.find(n.name); it != node_index_.end()) {
      up[static_cast<size_t>(it->second)] = n.up;
    }
  }
  bool changed = false;
  for (size_t i = 0; i < up.size(); ++i) {
    changed = changed || view_.nodes[i].up != up[i];
    view_.nodes[i].up = up[i];
  }
  return changed;
}

Result<int> Daemon::Tick() {
  std::lock_guard<std::mutex> tick_lock(tick_mu_);
  int changes = 0;
  Pass pass;
  double now = 0;
  int64_t seq = 0;
  double locked = 0;  // how long this pass held the daemon's lock
  // The backend is asked about the running jobs without the lock; only its answers are applied
  // under it (tick_mu_ keeps other ticks out meanwhile).
  std::vector<std::pair<int64_t, std::string>> handles;
  {
    std::lock_guard<std::mutex> lock(mu_);
    handles.reserve(running_.size());
    for (const auto& [key, placement] : running_) handles.emplace_back(key, active_.at(key).handle);
  }
  bool ask_nodes = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const double t = now_s_();
    ask_nodes = nodes_stale_ || last_nodes_s_ < 0 || t - last_nodes_s_ >= opt_.nodes_every_s;
  }
  std::optional<Result<std::vector<BackendNode>>> nodes;
  if (ask_nodes) nodes = backend_->Nodes();
  std::unordered_map<int64_t, Polled> polled;
  for (const auto& [key, handle] : handles) {
    polled.emplace(key, Polled{handle, backend_->Status(handle)});
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    now = now_s_();
    ++ticks_;
    if (nodes) {
      last_nodes_s_ = now;
      // A failed answer keeps what was known; the next interval asks again.
      if (nodes->ok()) {
        nodes_stale_ = false;
        if (ApplyNodes(**nodes)) dirty_ = true;
      }
    }
    RETURN_IF_ERROR(FollowRuns(now, polled, changes));
    SampleUsage(now);
    if (nodes_stale_) {
      dirty_ = true;  // a run lost its node: decide once the backend says which are left
      return changes;
    }
    const double every = policy_->round_s() > 0 ? policy_->round_s() : opt_.idle_pass_s;
    // Memory reports the runtime has not acted on yet count too (the engine acts on them
    // after the batch they arrive in).
    const bool fresh = dirty_ || changes > 0 || (use_runtime_ && reported_);
    if (!fresh && last_pass_s_ >= 0 && now - last_pass_s_ < every) {
      return changes;  // nothing new for the policy
    }
    if (dirty_ || changes > 0) ++change_seq_;
    seq = change_seq_;
    dirty_ = false;
    last_pass_s_ = now;
    RETURN_IF_ERROR(PrepareSchedule(now, pass, changes));
    locked = now_s_() - now;
  }
  // The policy decides on the snapshot while submissions, reports and reads go on.
  Snapshot s;
  s.now_s = now;
  s.cluster = &pass.view;
  s.jobs = pass.views;
  s.change_seq = seq;
  s.costs.restart = opt_.restart;
  Decisions d = policy_->Schedule(s);
  std::lock_guard<std::mutex> lock(mu_);
  const double apply_start = now_s_();
  // The pass's own launches and stops are no news to the policy; what arrived meanwhile is.
  const bool news = dirty_;
  Status applied = ApplySchedule(now, pass, d, changes);
  dirty_ = news || !applied.ok();
  RETURN_IF_ERROR(applied);
  double took = now_s_() - now;
  SampleUsage(now_s_());
  last_locked_s_ = locked + (now_s_() - apply_start);
  last_schedule_s_ = took;
  schedule_s_total_ += took;
  ++passes_;
  return changes;
}

}  // namespace frenzy::server
