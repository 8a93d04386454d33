// Runs: following what the backend says of them (the runtime learns from every outcome), and
// launching them.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
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
#include "server/runtime_state.h"

namespace frenzy::server {

using nlohmann::json;
using namespace internal;  // NOLINT: the daemon's own helpers

Status Daemon::Requeue(JobRow& row, double now, const std::string& kind, const std::string& why) {
  row.state = JobState::kQueued;
  row.updated_s = now;
  row.handle.clear();
  row.allocation.clear();
  row.message = why;
  return Save(row, kind, why);
}

Status Daemon::End(JobRow& row, JobState state, double now, const std::string& message,
                   const std::string& kind, const std::string& detail) {
  row.state = state;
  row.updated_s = row.finished_s = now;
  row.allocation.clear();
  row.message = message;
  return Save(row, kind, detail);
}

Status Daemon::Stop(JobRow row, double now, const std::string& kind, const std::string& why) {
  RETURN_IF_ERROR(backend_->Cancel(row.handle));
  return Requeue(row, now, kind, why);
}

Status Daemon::Save(JobRow& row, const std::string& kind, const std::string& detail) {
  RETURN_IF_ERROR(store_->UpdateJob(row, kind, detail));
  const int64_t key = KeyOf(row.id);
  Hold(key, row);
  if (Terminal(row.state)) {
    active_.erase(key);
    options_of_.erase(key);
    // What the runtime learned of the job is kept in its class (monitor_.Finish), not per job.
    runtime_.erase(key);
    speed_.Forget(key);  // its speed samples stay in its class (first: the writes may fail)
    RETURN_IF_ERROR(store_->DeleteRuntimeState(row.id));
    if (use_runtime_) {
      RETURN_IF_ERROR(
          store_->PutRuntimeState("classes", DumpJson(ClassesToJson(monitor_.classes()))));
      RETURN_IF_ERROR(
          store_->PutRuntimeState("speed_classes", DumpJson(SpeedClassesToJson(speed_.Settled()))));
    }
  } else {
    active_[key] = row;
  }
  if (!kind.empty()) dirty_ = true;  // an event: a state change the policy should see
  return Status::Ok();
}

void Daemon::Hold(int64_t key, const JobRow& row) {
  if (auto it = running_.find(key); it != running_.end()) {
    for (const auto& [n, g] : it->second) view_.nodes[static_cast<size_t>(n)].free += g;
    running_.erase(it);
  }
  if (row.state != JobState::kRunning) return;
  std::vector<std::pair<int, int64_t>> placement;
  for (const json& p : ParseOr(row.allocation, json::array())) {
    if (!p.is_array() || p.size() != 2 || !p[0].is_string() || !p[1].is_number_integer()) {
      continue;
    }
    auto node = node_index_.find(p[0].get<std::string>());
    if (node == node_index_.end()) continue;  // a node the backend no longer reports
    placement.emplace_back(node->second, p[1].get<int64_t>());
    view_.nodes[static_cast<size_t>(node->second)].free -= placement.back().second;
  }
  running_.emplace(key, std::move(placement));
}

Status Daemon::FollowRuns(double now, const std::unordered_map<int64_t, Polled>& polled,
                          int& changes) {
  std::vector<JobRow> rows;
  for (const auto& [key, placement] : running_) rows.push_back(active_.at(key));
  for (JobRow& row : rows) {
    auto poll = polled.find(KeyOf(row.id));
    // Launched, moved or cancelled since the poll: asked again next tick.
    if (poll == polled.end() || poll->second.handle != row.handle) continue;
    const Result<RunStatus>& st = poll->second.status;
    if (!st.ok()) {
      row.message = "backend: " + st.status().ToString();
      continue;  // asked again next pass
    }
    const int64_t key = KeyOf(row.id);
    const bool observed = Observe(row, *st, now);
    switch (st->state) {
      case RunState::kPending:
      case RunState::kRunning:
        if (observed) {
          row.updated_s = now;
          RETURN_IF_ERROR(Save(row, "", ""));
          RETURN_IF_ERROR(SaveRuntime(key, row.id));
        }
        break;
      case RunState::kSucceeded:
        row.done_tokens = row.total_tokens;
        monitor_.Finish(key);  // its final ratio joins its class
        RETURN_IF_ERROR(End(row, JobState::kSucceeded, now, "finished", "succeeded", st->message));
        ++changes;
        break;
      case RunState::kCancelled:
        monitor_.Forget(key);
        RETURN_IF_ERROR(End(row, JobState::kCancelled, now, "cancelled outside Frenzy", "cancelled",
                            st->message));
        ++changes;
        break;
      case RunState::kLost:
        RollBackToCheckpoint(row);
        RETURN_IF_ERROR(
            Requeue(row, now, "lost", "the run disappeared: requeued from its last checkpoint"));
        ++changes;
        break;
      case RunState::kFailed:
        RETURN_IF_ERROR(OnRunFailed(row, *st, now));
        ++changes;
        break;
    }
  }
  // Crashed jobs whose back-off is over are the policy's again.
  for (auto& [key, rt] : runtime_) {
    if (rt.retry_at_s >= 0 && rt.retry_at_s <= now) {
      rt.retry_at_s = -1;
      ++changes;
    }
  }
  return Status::Ok();
}

bool Daemon::Observe(JobRow& row, const RunStatus& st, double now) {
  bool changed = false;
  if (st.checkpoint_progress >= 0) {
    double& kept = runtime_[KeyOf(row.id)].checkpoint_tokens;
    kept = std::max(kept, std::min(row.total_tokens, st.checkpoint_progress * row.total_tokens));
  }
  if (st.progress >= 0) {
    double done = std::min(row.total_tokens, st.progress * row.total_tokens);
    if (done > row.done_tokens) {
      row.done_tokens = done;
      changed = true;
    }
  }
  if (st.peak_bytes <= 0) return changed;
  if (st.peak_bytes != row.observed_bytes) {
    row.observed_bytes = st.peak_bytes;
    changed = true;
  }
  const int64_t key = KeyOf(row.id);
  SampleMemory(key, now, st.peak_bytes, row.predicted_bytes);
  // The monitor hears of the job's memory once a report interval, as in the simulator: its
  // trend is fitted over its last few reports, which a poll every second would crowd out.
  JobRuntime& rt = runtime_[key];
  json plan = ParseOr(row.plan, json::object());
  const double run_start = plan.value("run_start_s", now);
  if (now - std::max(rt.last_report_s, run_start) < opt_.report_interval_s) return changed;
  rt.last_report_s = now;
  FeedMonitor(row, plan, st.peak_bytes, now);
  return true;
}

bool Daemon::FeedMonitor(JobRow& row, const json& plan, int64_t peak_bytes, double now) {
  runtime::MemoryReport r;
  r.t_s = now;
  r.progress = row.total_tokens > 0 ? row.done_tokens / row.total_tokens : 0;
  r.peak_bytes = peak_bytes;
  r.predicted_bytes = plan.value("device_bytes", int64_t{0});
  r.capacity_bytes = plan.value("gpu_memory_bytes", int64_t{0});
  if (r.predicted_bytes <= 0 || r.capacity_bytes <= 0) return false;
  const int64_t key = KeyOf(row.id);
  monitor_.Report(key, r);
  reported_ = true;  // the runtime plans its actions at the next pass
  // Speed, from the same reports, as in the engine (runtime/speed.h).
  const int option = plan.value("option", -1);
  auto table = options_of_.find(key);
  if (table != options_of_.end() && option >= 0 &&
      static_cast<size_t>(option) < table->second->options.size()) {
    speed_.Report(key, table->second->options[static_cast<size_t>(option)].type, row.attempt, now,
                  row.done_tokens, plan.value("tokens_per_s", 0.0));
  }
  const double before = row.memory_factor;
  row.memory_factor = monitor_.Factor(key).value_or(0.0);
  row.memory_note = monitor_.Explain(key);
  return row.memory_factor != before;
}

Status Daemon::SaveRuntime(int64_t key, const std::string& id) {
  StoredRuntime s;
  if (auto it = runtime_.find(key); it != runtime_.end()) {
    s.retry = it->second.retry;
    s.failed_options = it->second.failed_options;
    s.ooms = it->second.ooms;
    s.retry_at_s = it->second.retry_at_s;
  }
  if (const runtime::JobMemory* m = monitor_.Find(key)) {
    s.memory = *m;
    s.has_memory = true;
  }
  s.speed = speed_.Own(key);
  return store_->PutRuntimeState(id, DumpJson(RuntimeToJson(s)));
}

Status Daemon::LoadRuntime() {
  ASSIGN_OR_RETURN(auto states, store_->RuntimeStates());
  for (const auto& [id, text] : states) {
    json j = ParseOr(text, json());
    if (id == "classes") {
      auto classes = ClassesFromJson(j);
      if (!classes.ok()) {
        quarantine_notes_.push_back("the runtime's classes: " + classes.status().ToString());
        ++quarantined_;
        continue;
      }
      for (const auto& [name, c] : *classes) monitor_.RestoreClass(name, c);
      continue;
    }
    if (id == "speed_classes") {
      auto classes = SpeedClassesFromJson(j);
      if (!classes.ok()) {
        quarantine_notes_.push_back("the runtime's speed classes: " + classes.status().ToString());
        ++quarantined_;
        continue;
      }
      for (const auto& [name, e] : *classes) speed_.RestoreSettled(name, e);
      continue;
    }
    const int64_t key = KeyOf(id);
    auto row = active_.find(key);
    if (row == active_.end() || row->second.id != id) {
      RETURN_IF_ERROR(store_->DeleteRuntimeState(id));  // the job ended meanwhile
      continue;
    }
    auto stored = RuntimeFromJson(j);
    if (!stored.ok()) {
      // What was learned is lost, not the job: it is planned afresh.
      quarantine_notes_.push_back(
          fmt::format("job {}: its runtime state: {}", id, stored.status().ToString()));
      ++quarantined_;
      continue;
    }
    JobRuntime& rt = runtime_[key];
    rt.retry = stored->retry;
    rt.failed_options = stored->failed_options;
    rt.ooms = stored->ooms;
    rt.retry_at_s = stored->retry_at_s;
    if (stored->has_memory) monitor_.Restore(key, stored->memory);
    if (!stored->speed.empty()) speed_.Restore(key, stored->speed);
  }
  return Status::Ok();
}

Result<JobView> Daemon::RuntimeView(const JobRow& row) {
  const int64_t key = KeyOf(row.id);
  JobView v;
  v.key = key;
  v.id = row.id;
  ASSIGN_OR_RETURN(auto options, OptionsFor(row));
  v.options = options.get();
  v.total_tokens = row.total_tokens;
  v.done_tokens = row.done_tokens;
  if (auto it = runtime_.find(key); it != runtime_.end()) {
    v.failed_options = it->second.failed_options;
    v.ooms = it->second.ooms;
  }
  if (use_runtime_) v.memory_factor = monitor_.Factor(key);
  return v;
}

// A run that crashed (or vanished) loses what it did since its last checkpoint, as in the
// engine (Engine::StopRun): the job resumes from there.
void Daemon::RollBackToCheckpoint(JobRow& row) {
  auto it = runtime_.find(KeyOf(row.id));
  if (it == runtime_.end() || it->second.checkpoint_tokens < 0) return;
  row.done_tokens = std::min(row.done_tokens, it->second.checkpoint_tokens);
}

Status Daemon::OnRunFailed(JobRow& row, const RunStatus& st, double now) {
  const int64_t key = KeyOf(row.id);
  RollBackToCheckpoint(row);
  switch (st.failure) {
    case FailureKind::kOutOfMemory:
      return OnOutOfMemory(row, now);
    case FailureKind::kNodeLost:
      // Not the job's fault: it resumes from its checkpoint, and the crash does not count. The
      // backend is asked which nodes are left before the next decision.
      nodes_stale_ = true;
      return Requeue(row, now, "node_lost",
                     "its node was lost: requeued from its last checkpoint (" + st.message + ")");
    case FailureKind::kNone:
    case FailureKind::kCrashed:
      break;
  }
  JobRuntime& rt = runtime_[key];
  runtime::RetryDecision d = runtime::OnCrash(rt.retry, row.done_tokens, st.message, opt_.retry);
  if (!d.retry) {
    RETURN_IF_ERROR(End(row, JobState::kFailed, now, d.message, "failed", d.message));
    return Status::Ok();
  }
  rt.retry_at_s = now + d.delay_s;  // held out of the policy's sight until then
  RETURN_IF_ERROR(Requeue(row, now, "crashed", d.message));
  return SaveRuntime(key, row.id);
}

Status Daemon::OnOutOfMemory(JobRow& row, double now) {
  const int64_t key = KeyOf(row.id);
  json plan = ParseOr(row.plan, json::object());
  ASSIGN_OR_RETURN(JobView v, RuntimeView(row));
  JobRuntime& rt = runtime_[key];
  std::string why;
  bool give_up = false;
  if (use_runtime_) {
    // The runtime learns a lower bound from the crash and plans a safer layout; the one that
    // crashed no longer fits the job's factor.
    monitor_.ReportOom(key, plan.value("device_bytes", int64_t{0}),
                       plan.value("gpu_memory_bytes", int64_t{0}));
    runtime::OomRecovery rec = runtime::RecoverFromOom(v, monitor_, view_, opt_.runtime);
    row.memory_factor = rec.factor;
    row.memory_note = monitor_.Explain(key);
    why = rec.message;
    give_up = rec.give_up;
  } else {
    // Without the runtime, the option that crashed is never offered again (as in the engine).
    rt.failed_options.push_back(plan.value("option", 0));
    give_up = rt.ooms + 1 >= opt_.runtime.max_ooms;
    why = give_up ? fmt::format("given up after {} out-of-memory crashes", rt.ooms + 1)
                  : "out of memory: requeued without the option that crashed";
  }
  ++rt.ooms;
  if (give_up) {
    RETURN_IF_ERROR(End(row, JobState::kFailed, now, why, "failed", why));
    return Status::Ok();
  }
  RETURN_IF_ERROR(Requeue(row, now, "out_of_memory", why));
  return SaveRuntime(key, row.id);
}

Result<bool> Daemon::FrameworkLaunch(JobRow& row, json spec, const frenzy::Plan& plan, double now,
                                     LaunchSpec& ls, json* plan_json) {
  // Most jobs run the daemon's own training command: only a framework job's spec is parsed
  // again (model and all) at launch.
  if (!NamesLauncher(spec)) return true;
  Result<Parsed> parsed = ParseStoredSpec(std::move(spec));
  if (!parsed.ok() || !parsed->launcher) return true;  // the daemon's own training command
  const Launcher l = *parsed->launcher;
  // The launch over the nodes the run was placed on, as the framework's launcher sees them.
  Cluster placed = cluster_;
  placed.nodes.clear();
  for (const auto& [name, gpus] : ls.placement) placed.nodes.push_back(Node{name, plan.gpu, gpus});
  LaunchOutcome out = MakeLaunch(l, parsed->spec, plan, placed, parsed->launch_input);
  std::string why;
  if (const auto* refused = std::get_if<Refused>(&out)) {
    why = fmt::format("{} cannot run the plan: {}", LauncherName(l), refused->reason);
  } else {
    const frenzy::Launch& launch = std::get<frenzy::Launch>(out);
    bool even = launch.nodes == static_cast<int64_t>(ls.placement.size());
    std::vector<std::string> counts;
    for (const auto& [name, gpus] : ls.placement) {
      even = even && gpus == launch.procs_per_node;
      counts.push_back(std::to_string(gpus));
    }
    if (!even) {
      why = fmt::format(
          "the run was placed as {} GPUs over {} node(s); {}'s launcher starts the "
          "same number of processes on every node",
          Join(counts, " + "), ls.placement.size(), LauncherName(l));
    } else {
      ls.framework = launch;
      (*plan_json)["launch"] = LaunchToJson(l, out);
      return true;
    }
  }
  RETURN_IF_ERROR(End(row, JobState::kFailed, now, why, "failed", why));
  return false;
}

Status Daemon::Launch(JobRow& row, const JobView& v, const Allocation& alloc, double now,
                      int layout) {
  const RunOption& o = v.option(alloc.option);
  if (layout < 0) layout = ChooseLayout(v, alloc, view_);
  frenzy::Plan plan = v.PlanOf(alloc.option, layout);
  double left = std::max(0.0, row.total_tokens - row.done_tokens);
  plan.total_s = plan.tokens_per_s > 0 ? left / plan.tokens_per_s : 0;
  json spec = ParseOr(row.spec, json::object());
  LaunchSpec ls;
  ls.job_id = row.id;
  ls.name = row.model;
  ls.plan = plan;
  ls.attempt = row.attempt;
  json placement = json::array();
  for (const auto& [n, g] : alloc.placement) {
    const std::string& name = cluster_.nodes[static_cast<size_t>(n)].name;
    ls.placement.emplace_back(name, g);
    ls.gpus_per_node = std::max(ls.gpus_per_node, g);
    placement.push_back({name, g});
  }
  ls.nodes = static_cast<int64_t>(alloc.placement.size());
  ls.command = opt_.train_command;
  ls.workdir = (std::filesystem::path(opt_.runs_dir) / row.id).string();
  std::error_code ec;
  std::filesystem::create_directories(ls.workdir, ec);
  if (ec) return InvalidArgument("cannot create " + ls.workdir + ": " + ec.message(), {}, "runs");
  json plan_json = PlanToJson(plan);
  plan_json["option"] = alloc.option;
  plan_json["layout"] = layout;
  plan_json["run_start_s"] = now;
  json train = plan_json;
  train["model"] = row.model;
  train["tokens"] = row.total_tokens;
  train["global_batch"] = spec.value("global_batch", int64_t{1});
  train["seq_len"] = spec.value("seq_len", int64_t{2048});
  train["precision"] = spec.value("precision", std::string("bf16"));
  train["framework"] = spec.value("modelled_as", std::string("megatron"));
  // What is trained, as submitted (validated at submission): "full", "lora", or the adapter.
  train["finetune"] = spec.contains("finetune") ? spec["finetune"] : json("full");
  if (Result<bool> framework = FrameworkLaunch(row, spec, plan, now, ls, &plan_json);
      !framework.ok()) {
    return framework.status();
  } else if (!*framework) {
    return Status::Ok();  // ended with the reason
  }
  ls.env["FRENZY_JOB_ID"] = row.id;
  ls.env["FRENZY_PLAN"] = DumpJson(train);
  ls.env["FRENZY_TOKENS"] = fmt::format("{:.0f}", row.total_tokens);
  ls.env["FRENZY_DONE_TOKENS"] = fmt::format("{:.0f}", row.done_tokens);
  if (!opt_.report_base_url.empty()) {
    ls.env["FRENZY_REPORT_URL"] = opt_.report_base_url + "/v1/jobs/" + row.id + "/report";
  }
  // The run reports with a token of its own, good for this job's reports only (never the admin
  // token: a training script can then not cancel or submit jobs); only its hash is stored.
  const std::string run_token = NewRunToken();
  const std::string run_token_hash = Sha256Hex(run_token);
  RETURN_IF_ERROR(store_->SetRunTokenHash(row.id, run_token_hash));
  run_token_hash_[KeyOf(row.id)] = run_token_hash;
  ls.env["FRENZY_TOKEN"] = run_token;
  auto handle = backend_->Launch(ls);
  runtime_[KeyOf(row.id)].checkpoint_tokens = row.done_tokens;  // what this run resumes from
  ++row.attempt;
  row.updated_s = now;
  if (!handle.ok()) {
    std::string why = "the backend could not launch it: " + handle.status().ToString();
    return End(row, JobState::kFailed, now, why, "failed", why);
  }
  // Why this plan: its rank among the job's options that fit, and its memory.
  int runnable = 0, faster = 0;
  for (size_t i = 0; i < v.options->options.size(); ++i) {
    if (!v.Runnable(static_cast<int>(i), view_)) continue;
    ++runnable;
    if (v.options->options[i].plan.tokens_per_s > o.plan.tokens_per_s) ++faster;
  }
  row.why = fmt::format(
      "{} by policy '{}': {:.0f} tokens/s, predicted {:.1f} of {:.0f} GiB per GPU{}; option {} "
      "of the {} memory-safe ones by speed ({} faster ones were busy or worth less to the queue)",
      Describe(plan), policy_->name(), plan.tokens_per_s,
      static_cast<double>(plan.device_bytes) / kGiB,
      static_cast<double>(plan.gpu_memory_bytes) / kGiB,
      layout > 0 ? fmt::format(" (a leaner layout: memory factor {:.2f})", *v.memory_factor) : "",
      faster + 1, runnable, faster);
  row.state = JobState::kRunning;
  row.handle = *handle;
  if (row.started_s < 0) row.started_s = now;
  row.plan = DumpJson(plan_json);
  row.allocation = DumpJson(placement);
  row.predicted_bytes = plan.device_bytes;
  row.message = "running";
  ++launches_;
  return Save(row, "started",
              fmt::format("attempt {}: {} as {}", row.attempt, Describe(plan), *handle));
}

}  // namespace frenzy::server
