// The daemon's API operations and its start-up. The rest of it: daemon_spec.cc (job specs),
// daemon_views.cc (JSON and Prometheus views), daemon_runs.cc (following runs, launching),
// daemon_schedule.cc (the scheduling pass).
#include "server/daemon.h"

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
#include "server/daemon_internal.h"

namespace frenzy::server {

using nlohmann::json;
using namespace internal;  // NOLINT: the daemon's own helpers

Daemon::Daemon(DaemonOptions o, std::unique_ptr<Store> s, std::unique_ptr<Backend> b,
               std::function<double()> now, Cluster c, const GpuCatalog& catalog)
    : opt_(std::move(o)),
      store_(std::move(s)),
      backend_(std::move(b)),
      backend_name_(backend_->name()),
      now_s_(std::move(now)),
      cluster_(std::move(c)),
      catalog_(catalog),
      cache_(cluster_, catalog_, opt_.memory_margin) {}

Result<std::unique_ptr<Daemon>> Daemon::Create(DaemonOptions options, std::unique_ptr<Store> store,
                                               std::unique_ptr<Backend> backend,
                                               std::function<double()> now_s,
                                               const GpuCatalog& catalog) {
  ASSIGN_OR_RETURN(std::vector<BackendNode> nodes, backend->Nodes());
  Cluster c;
  c.name = std::string(backend->name());
  for (const BackendNode& n : nodes) {
    const GpuType* g = catalog.Find(n.gpu);
    if (g == nullptr) {
      return NotFound(fmt::format("node '{}' has GPUs of unknown type '{}'", n.name, n.gpu),
                      std::string(backend->name()), "gpu");
    }
    Node node;
    node.name = n.name;
    node.gpu = g->name;
    node.gpus = n.gpus;
    // 100 Gb/s Ethernet unless the backend knows better (the sim backend has a cluster file).
    node.network_gbs = n.network_gbs > 0 ? n.network_gbs : 12.5;
    c.nodes.push_back(node);
  }
  if (c.nodes.empty()) {
    return Status(StatusCode::kFailedPrecondition, "the backend reports no nodes with GPUs",
                  std::string(backend->name()));
  }
  auto policy = MakePolicy(options.policy);
  if (!policy.ok()) return policy.status();
  std::unique_ptr<Daemon> d(new Daemon(std::move(options), std::move(store), std::move(backend),
                                       std::move(now_s), std::move(c), catalog));
  d->policy_ = std::move(policy).value();
  d->use_runtime_ = d->policy_->uses_runtime();
  ASSIGN_OR_RETURN(d->view_, ClusterView::Of(d->cluster_, catalog));
  for (size_t i = 0; i < d->cluster_.nodes.size(); ++i) {
    d->node_index_[d->cluster_.nodes[i].name] = static_cast<int>(i);
  }
  d->ApplyNodes(nodes);
  d->last_nodes_s_ = d->now_s_();
  RETURN_IF_ERROR(d->LoadStored());
  return d;
}

Status Daemon::LoadStored() {
  // Stored rows are checked before use: one that cannot be read (damaged, planted, or from a
  // version that accepted what this one refuses) is quarantined and reported, and the daemon
  // runs on with the rest. A queued or running one is ended as failed with the reason; its
  // stored spec stays as it was for an operator to look at.
  auto bad_json = [](const std::string& text, bool object) {
    if (text.empty()) return false;
    json j = ParseJsonOr(text, json());
    return j.is_null() || (object && !j.is_object());
  };
  ASSIGN_OR_RETURN(auto rows, store_->ListJobs());
  const double now = now_s_();
  for (JobRow& r : rows) {
    std::string why;
    if (r.spec.empty() || bad_json(r.spec, true)) {
      why = "its spec is not a JSON object within the limits";
    } else if (bad_json(r.plan, true) || bad_json(r.allocation, false)) {
      why = "its plan or allocation is not JSON within the limits";
    } else if (!Terminal(r.state)) {
      if (auto parsed = ParseStoredSpec(ParseOr(r.spec, json::object())); !parsed.ok()) {
        why = "its spec is no longer accepted: " + parsed.status().ToString();
      }
    }
    if (why.empty()) {
      if (!Terminal(r.state)) {
        int64_t key = KeyOf(r.id);
        if (use_runtime_) {
          monitor_.Track(key, r.model);  // the class: the model's name
          speed_.Track(key, r.model);
        }
        Hold(key, r);
        active_.emplace(key, std::move(r));
      }
      continue;
    }
    ++quarantined_;
    quarantine_notes_.push_back(fmt::format("job {}: {}", r.id, why));
    if (!Terminal(r.state)) {
      if (r.state == JobState::kRunning && !r.handle.empty()) {
        (void)backend_->Cancel(r.handle);  // nothing can follow it without a readable spec
      }
      r.state = JobState::kFailed;
      r.updated_s = r.finished_s = now;
      r.allocation.clear();
      r.message = "quarantined at start-up: " + why;
      RETURN_IF_ERROR(store_->UpdateJob(r, "quarantined", why));
    }
  }
  ASSIGN_OR_RETURN(auto nodes, store_->Nodes());
  for (const NodeRow& n : nodes) {
    if (bad_json(n.readings, true)) {
      ++quarantined_;
      quarantine_notes_.push_back(
          fmt::format("node {}: its last heartbeat is not JSON within the limits (not shown)",
                      n.name.substr(0, 128)));
    }
  }
  return LoadRuntime();
}

Result<json> Daemon::Submit(const json& body) {
  // Parsing and the option table (planning every layout: seconds for a large new model) run
  // without the daemon's lock; only the insert takes it.
  ASSIGN_OR_RETURN(Parsed p, ParseSpec(body));
  ASSIGN_OR_RETURN(auto options, cache_.Get(p.model_key, p.spec, policy_->options_kind()));
  if (options->options.empty()) {
    PlannerOptions po;
    po.memory_margin = opt_.memory_margin;
    auto planned = PlanJob(p.spec, cluster_, catalog_, po);
    std::string why = planned.ok() ? ExplainPlan(*planned, po) : planned.status().message();
    return Status(StatusCode::kFailedPrecondition,
                  "no GPU type and count of this cluster can hold the job: " + why, {}, "model");
  }
  JobRow row;
  row.spec = DumpJson(p.normalized);
  row.model = p.model_name;
  row.state = JobState::kQueued;
  row.total_tokens = p.spec.tokens;
  std::lock_guard<std::mutex> lock(mu_);
  row.submitted_s = row.updated_s = now_s_();
  ASSIGN_OR_RETURN(std::string id, store_->InsertJob(row, p.model_name));
  row.id = id;
  active_.emplace(KeyOf(id), row);
  if (use_runtime_) {
    monitor_.Track(KeyOf(id), row.model);  // the class: the model's name
    speed_.Track(KeyOf(id), row.model);
  }
  dirty_ = true;
  ++submissions_;
  return JobJson(row, false);
}

Result<json> Daemon::GetJob(const std::string& id) {
  // The store is thread-safe and has every committed change; the dashboard's detail (options,
  // memory readings) is the loop's, read under its lock.
  ASSIGN_OR_RETURN(auto row, store_->GetJob(id));
  if (!row) return NotFound("no job '" + id + "'", {}, "id");
  json j = JobJson(*row, true);
  std::lock_guard<std::mutex> lock(mu_);
  AddJobDetail(*row, j);
  return j;
}

Result<json> Daemon::ListJobs(const std::string& state_filter, int64_t limit) {
  std::vector<JobState> states;
  if (!state_filter.empty()) {
    auto st = JobStateFromName(state_filter);
    if (!st) return InvalidArgument("unknown state '" + state_filter + "'", {}, "state");
    states.push_back(*st);
  }
  ASSIGN_OR_RETURN(auto rows, store_->ListJobs(states, limit));
  json out = json::array();
  for (const JobRow& r : rows) out.push_back(JobJson(r, false));
  return json{{"jobs", out}};
}

Result<JobRow> Daemon::FindJob(const std::string& id) {
  if (auto it = active_.find(KeyOf(id)); it != active_.end() && it->second.id == id) {
    return it->second;
  }
  ASSIGN_OR_RETURN(auto stored, store_->GetJob(id));  // an ended job
  if (!stored) return NotFound("no job '" + id + "'", {}, "id");
  return *std::move(stored);
}

Result<json> Daemon::Cancel(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(JobRow row, FindJob(id));
  if (Terminal(row.state)) {
    return Status(StatusCode::kFailedPrecondition,
                  fmt::format("job '{}' already {}", id, JobStateName(row.state)), {}, "id");
  }
  if (row.state == JobState::kRunning && !row.handle.empty()) {
    RETURN_IF_ERROR(backend_->Cancel(row.handle));
  }
  RETURN_IF_ERROR(
      End(row, JobState::kCancelled, now_s_(), "cancelled by request", "cancelled", "by request"));
  monitor_.Forget(KeyOf(id));
  return JobJson(row, false);
}

Result<json> Daemon::Report(const std::string& id, const json& body) {
  if (!body.is_object()) return InvalidArgument("a report must be a JSON object", {}, "");
  auto field = [&](const char* key, bool required, bool integer,
                   double hi) -> Result<std::optional<double>> {
    if (!body.contains(key)) {
      if (required) return InvalidArgument("missing", {}, key);
      return std::optional<double>();
    }
    const json& v = body[key];
    double x = v.is_number() ? v.get<double>() : -1;
    if (!v.is_number() || (integer && x != std::floor(x)) || !(x >= 0 && x <= hi)) {
      return InvalidArgument(fmt::format("must be a non-negative {} of at most {:g}",
                                         integer ? "integer" : "number", hi),
                             {}, key);
    }
    return std::optional<double>(x);
  };
  // Types and absolute bounds first (a job has at most 1e15 tokens, see ParseSpec), then the
  // job's own total under the lock.
  ASSIGN_OR_RETURN(auto step, field("step", true, true, 1e15));
  ASSIGN_OR_RETURN(auto tokens, field("tokens", true, false, 1e15));
  ASSIGN_OR_RETURN(auto peak, field("peak_bytes", false, false, kMaxPeakBytes));
  ASSIGN_OR_RETURN(auto saved, field("checkpoint_tokens", false, false, 1e15));
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(JobRow row, FindJob(id));
  if (row.state != JobState::kRunning) {
    return Status(StatusCode::kFailedPrecondition,
                  fmt::format("job '{}' is {}, not running", id, JobStateName(row.state)), {},
                  "id");
  }
  // A step trains at least one token, and a run trains whole steps: its last step may pass the
  // job's total by less than one step (global_batch x seq_len tokens), never more. The step's
  // size is read from the stored spec once per job, not at every report.
  const int64_t key = KeyOf(id);
  auto& last = last_report_[key];
  if (last.step_tokens < 0) {
    const json spec = ParseOr(row.spec, json::object());
    auto number = [&](const char* k) {
      return spec.contains(k) && spec[k].is_number() ? spec[k].get<double>() : 0.0;
    };
    last.step_tokens = number("global_batch") * number("seq_len");
  }
  const double most = row.total_tokens + last.step_tokens;
  RETURN_IF_ERROR(field("step", true, true, most).status());
  RETURN_IF_ERROR(field("tokens", true, false, most).status());
  if (saved && *saved > *tokens) {
    return InvalidArgument(
        fmt::format("a checkpoint of {:.0f} tokens is ahead of the run's {:.0f}", *saved, *tokens),
        {}, "checkpoint_tokens");
  }
  // Within one run, progress only goes forward (a resumed run is a new attempt and may restart
  // from an earlier checkpoint).
  if (last.attempt != row.attempt) last = LastReport{row.attempt, 0, 0, last.step_tokens};
  if (*step < last.step || *tokens < last.tokens) {
    return Status(StatusCode::kFailedPrecondition,
                  fmt::format("progress went back within attempt {}: step {:.0f} after {:.0f}, "
                              "tokens {:.0f} after {:.0f}",
                              row.attempt, *step, last.step, *tokens, last.tokens),
                  {}, *step < last.step ? "step" : "tokens");
  }
  last.step = *step;
  last.tokens = *tokens;
  row.step = static_cast<int64_t>(*step);
  row.done_tokens = std::min(row.total_tokens, std::max(row.done_tokens, *tokens));
  if (saved) {  // a crash of this run resumes from there
    double& kept = runtime_[key].checkpoint_tokens;
    kept = std::max(kept, *saved);
  }
  row.updated_s = now_s_();
  if (peak && *peak) {
    row.observed_bytes = static_cast<int64_t>(*peak);
    SampleMemory(KeyOf(row.id), row.updated_s, row.observed_bytes, row.predicted_bytes);
    if (FeedMonitor(row, ParseOr(row.plan, json::object()), row.observed_bytes, row.updated_s)) {
      dirty_ = true;  // a new memory factor: the policy should see it
    }
  }
  RETURN_IF_ERROR(Save(row, "", ""));
  // What the monitor learned survives a restart, as from a backend's reading.
  if (peak && *peak) RETURN_IF_ERROR(SaveRuntime(key, row.id));
  return json{{"ok", true}, {"memory_factor", row.memory_factor}};
}

Result<json> Daemon::Heartbeat(const std::string& node, const json& body) {
  if (!body.is_object() || !body.contains("gpus") || !body["gpus"].is_array()) {
    return InvalidArgument("a heartbeat needs a 'gpus' array", {}, "gpus");
  }
  if (body["gpus"].size() > 1024) return InvalidArgument("over 1,024 GPUs on a node", {}, "gpus");
  NodeRow n;
  n.name = node;
  n.gpus = static_cast<int64_t>(body["gpus"].size());
  // Only what the daemon reads is stored, with its type checked: the stored heartbeat is served
  // to anyone who asks for the cluster.
  json gpus = json::array();
  for (size_t i = 0; i < body["gpus"].size(); ++i) {
    ASSIGN_OR_RETURN(json g, CleanGpuReading(body["gpus"][i], i));
    if (n.gpu.empty()) n.gpu = g.value("gpu", g.value("name", std::string()));
    gpus.push_back(std::move(g));
  }
  json readings = {{"gpus", gpus}};
  if (body.contains("source") && body["source"].is_string() &&
      body["source"].get_ref<const std::string&>().size() <= 64) {
    readings["source"] = body["source"];
  }
  n.up = true;
  n.readings = DumpJson(readings);
  std::lock_guard<std::mutex> lock(mu_);
  n.last_seen_s = now_s_();
  RETURN_IF_ERROR(store_->UpsertNode(n));
  return json{{"ok", true}};
}

bool Daemon::RunTokenValid(const std::string& id, const std::string& token) {
  if (token.empty()) return false;
  const std::string hash = Sha256Hex(token);
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t key = KeyOf(id);
  auto it = run_token_hash_.find(key);
  if (it == run_token_hash_.end()) {
    auto stored = store_->RunTokenHash(id);  // a run launched before a restart
    if (!stored.ok() || stored->empty()) return false;
    it = run_token_hash_.emplace(key, *stored).first;
  }
  return EqualConstantTime(hash, it->second);
}

Status Daemon::CheckStore() const { return store_->CheckFile(); }

Result<json> Daemon::Plan(const json& body) {
  // No lock: the cluster and catalog never change after Create, and a plan of a large model
  // must not hold submissions up.
  ASSIGN_OR_RETURN(Parsed p, ParseSpec(body));
  PlannerOptions po;
  po.memory_margin = opt_.memory_margin;
  po.top = 5;
  ASSIGN_OR_RETURN(PlanResult r, PlanJob(p.spec, cluster_, catalog_, po));
  json plans = json::array();
  for (const auto& pl : r.plans) plans.push_back(PlanToJson(pl));
  json pareto = json::array();
  for (const auto& pl : r.pareto) pareto.push_back(PlanToJson(pl));
  return json{{"plans", plans},
              {"pareto", pareto},
              {"explanation", ExplainPlan(r, po)},
              {"infeasible", InfeasibleOrNull(r)}};
}

Status Daemon::Checkpoint() {
  // Every checkpoint writes and syncs the database file beside the commits: a few large ones
  // disturb submissions less than one per tick (p99 5.2-5.7 ms against 8.4-10.3 ms at 3,000+
  // submissions/s, bench/RESULTS.md). The frame bound keeps the log's size in check.
  constexpr int64_t kMaxWalFrames = 65536;  // 256 MiB of 4 KiB pages
  const double now = now_s_();
  if (now - last_checkpoint_s_ < opt_.checkpoint_every_s && store_->WalFrames() < kMaxWalFrames) {
    return Status::Ok();
  }
  last_checkpoint_s_ = now;
  return store_->Checkpoint().status();
}

}  // namespace frenzy::server
