// The daemon's views: jobs and the cluster as JSON, and the Prometheus metrics text.
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
#include "server/daemon.h"
#include "server/daemon_internal.h"

namespace frenzy::server {

using nlohmann::json;
using namespace internal;  // NOLINT: the daemon's own helpers

json Daemon::JobJson(const JobRow& r, bool detail) {
  json j = {{"id", r.id},
            {"model", r.model},
            {"state", JobStateName(r.state)},
            {"submitted_s", r.submitted_s},
            {"updated_s", r.updated_s},
            {"attempt", r.attempt},
            {"progress",
             {{"tokens_done", r.done_tokens},
              {"tokens_total", r.total_tokens},
              {"fraction", r.total_tokens > 0 ? r.done_tokens / r.total_tokens : 0.0},
              {"step", r.step}}},
            {"message", r.message}};
  json spec = ParseOr(r.spec, json::object());
  if (spec.contains("name")) j["name"] = spec["name"];
  if (r.started_s >= 0) j["started_s"] = r.started_s;
  if (r.finished_s >= 0) j["finished_s"] = r.finished_s;
  json plan = ParseOr(r.plan, nullptr);
  j["plan"] = plan;
  j["memory"] = {{"predicted_bytes", r.predicted_bytes},
                 {"observed_bytes", r.observed_bytes},
                 {"factor", r.memory_factor > 0 ? json(r.memory_factor) : json(nullptr)},
                 {"note", r.memory_note}};
  if (detail) {
    j["spec"] = spec;
    j["why"] = r.why;
    j["allocation"] = ParseOr(r.allocation, json::array());
    j["handle"] = r.handle;
    json ev = json::array();
    if (auto events = store_->Events(r.id, 50); events.ok()) {
      for (const EventRow& e : *events) {
        ev.push_back({{"t_s", e.t_s}, {"kind", e.kind}, {"detail", e.detail}});
      }
    }
    j["events"] = ev;
  }
  return j;
}

json Daemon::ClusterJson() {
  std::lock_guard<std::mutex> lock(mu_);
  json nodes = json::array();
  for (size_t i = 0; i < cluster_.nodes.size(); ++i) {
    const Node& n = cluster_.nodes[i];
    const NodeView& v = view_.nodes[i];
    nodes.push_back(
        {{"name", n.name}, {"gpu", n.gpu}, {"gpus", n.gpus}, {"free", v.free}, {"up", v.up}});
  }
  json types = json::array();
  for (size_t t = 0; t < view_.types.size(); ++t) {
    types.push_back({{"gpu", view_.types[t]},
                     {"memory_bytes", view_.gpu_memory_bytes[t]},
                     {"gpus", view_.TotalOfType(static_cast<int>(t))},
                     {"free", view_.FreeOfType(static_cast<int>(t))}});
  }
  json agents = json::array();
  if (auto rows = store_->Nodes(); rows.ok()) {
    for (const NodeRow& r : *rows) {
      agents.push_back({{"name", r.name},
                        {"gpu", r.gpu},
                        {"gpus", r.gpus},
                        {"last_seen_s", r.last_seen_s},
                        {"readings", ParseOr(r.readings, nullptr)}});
    }
  }
  return json{{"backend", backend_name_}, {"types", types}, {"nodes", nodes}, {"agents", agents}};
}

std::string Daemon::Metrics() {
  std::lock_guard<std::mutex> lock(mu_);
  std::string s;
  s += "# HELP frenzy_jobs Jobs by state.\n# TYPE frenzy_jobs gauge\n";
  const auto running = static_cast<int64_t>(running_.size());
  const auto queued = static_cast<int64_t>(active_.size()) - running;
  s += fmt::format("frenzy_jobs{{state=\"queued\"}} {}\n", queued);
  s += fmt::format("frenzy_jobs{{state=\"running\"}} {}\n", running);
  for (JobState st : {JobState::kSucceeded, JobState::kFailed, JobState::kCancelled}) {
    auto n = store_->CountJobs(st);
    s += fmt::format("frenzy_jobs{{state=\"{}\"}} {}\n", JobStateName(st), n.ok() ? *n : -1);
  }
  s += "# HELP frenzy_quarantined_rows Stored rows that could not be loaded at start-up (see the "
       "log).\n# TYPE frenzy_quarantined_rows gauge\n";
  s += fmt::format("frenzy_quarantined_rows {}\n", quarantined_);
  s += "# HELP frenzy_queue_length Jobs waiting for GPUs.\n# TYPE frenzy_queue_length gauge\n";
  s += fmt::format("frenzy_queue_length {}\n", queued);
  s += "# HELP frenzy_gpus GPUs per type: total and used.\n# TYPE frenzy_gpus gauge\n";
  for (size_t t = 0; t < view_.types.size(); ++t) {
    int64_t total = view_.TotalOfType(static_cast<int>(t));
    int64_t used = total - view_.FreeOfType(static_cast<int>(t));
    s += fmt::format("frenzy_gpus{{type=\"{}\",kind=\"total\"}} {}\n", view_.types[t], total);
    s += fmt::format("frenzy_gpus{{type=\"{}\",kind=\"used\"}} {}\n", view_.types[t], used);
  }
  s += "# HELP frenzy_job_memory_bytes Peak memory per GPU of running jobs: predicted and "
       "observed.\n# TYPE frenzy_job_memory_bytes gauge\n";
  for (const auto& [key, placement] : running_) {
    const JobRow& r = active_.at(key);
    s += fmt::format("frenzy_job_memory_bytes{{job=\"{}\",kind=\"predicted\"}} {}\n", r.id,
                     r.predicted_bytes);
    s += fmt::format("frenzy_job_memory_bytes{{job=\"{}\",kind=\"observed\"}} {}\n", r.id,
                     r.observed_bytes);
  }
  s += "# HELP frenzy_schedule_seconds Time of the control loop's scheduling passes.\n"
       "# TYPE frenzy_schedule_seconds summary\n";
  s += fmt::format("frenzy_schedule_seconds_sum {:.6f}\nfrenzy_schedule_seconds_count {}\n",
                   schedule_s_total_, passes_);
  s += "# HELP frenzy_ticks_total Control-loop ticks (a tick asks the policy only when something "
       "changed or it has not for a while).\n# TYPE frenzy_ticks_total counter\n";
  s += fmt::format("frenzy_ticks_total {}\n", ticks_);
  s += fmt::format(
      "# TYPE frenzy_schedule_last_seconds gauge\nfrenzy_schedule_last_seconds {:.6f}\n",
      last_schedule_s_);
  s += fmt::format(
      "# HELP frenzy_schedule_locked_last_seconds How long the last pass held the daemon's lock "
      "(taking the snapshot and applying the decisions; the policy decides without it).\n"
      "# TYPE frenzy_schedule_locked_last_seconds gauge\nfrenzy_schedule_locked_last_seconds "
      "{:.6f}\n",
      last_locked_s_);
  s += fmt::format("# TYPE frenzy_submissions_total counter\nfrenzy_submissions_total {}\n",
                   submissions_);
  s += fmt::format("# TYPE frenzy_launches_total counter\nfrenzy_launches_total {}\n", launches_);
  return s;
}

}  // namespace frenzy::server
