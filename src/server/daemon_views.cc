// The daemon's views: jobs and the cluster as JSON, and the Prometheus metrics text.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "backend/process.h"
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
  if (spec.contains("user")) j["user"] = spec["user"];
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

namespace {

constexpr size_t kMemorySamples = 240;
constexpr double kMemoryEveryS = 5;
constexpr double kUsageWindowS = 6 * 3600;  // the dashboard's chart: the last six hours
constexpr double kUsageEveryS = 60;
constexpr size_t kMaxHistoryJobs = 512;  // ended jobs' readings kept beyond this are dropped

}  // namespace

void Daemon::SampleUsage(double now) {
  std::vector<int64_t> used(view_.types.size());
  for (size_t t = 0; t < used.size(); ++t) {
    used[t] = view_.TotalOfType(static_cast<int>(t)) - view_.FreeOfType(static_cast<int>(t));
  }
  if (!usage_history_.empty() && usage_history_.back().second == used &&
      now - usage_history_.back().first < kUsageEveryS) {
    return;
  }
  usage_history_.emplace_back(now, std::move(used));
  while (usage_history_.size() > 1 && now - usage_history_.front().first > kUsageWindowS) {
    usage_history_.pop_front();
  }
}

void Daemon::SampleMemory(int64_t key, double now, int64_t peak, int64_t predicted) {
  if (memory_history_.size() > kMaxHistoryJobs && !memory_history_.contains(key)) {
    for (auto it = memory_history_.begin(); it != memory_history_.end();) {
      it = active_.contains(it->first) ? std::next(it) : memory_history_.erase(it);
    }
  }
  std::vector<MemorySample>& h = memory_history_[key];
  // A poll every tick repeats the same reading: keep one a few seconds unless it changed.
  if (!h.empty() && h.back().peak_bytes == peak && h.back().predicted_bytes == predicted &&
      now - h.back().t_s < kMemoryEveryS) {
    return;
  }
  if (h.size() >= kMemorySamples) {
    size_t kept = 0;
    for (size_t i = 0; i < h.size(); i += 2) h[kept++] = h[i];
    h.resize(kept);
  }
  h.push_back({now, peak, predicted});
}

void Daemon::AddJobDetail(const JobRow& row, json& j) {
  const int64_t key = KeyOf(row.id);
  json readings = json::array();
  if (auto it = memory_history_.find(key); it != memory_history_.end()) {
    for (const MemorySample& m : it->second) {
      readings.push_back(
          {{"t_s", m.t_s}, {"peak_bytes", m.peak_bytes}, {"predicted_bytes", m.predicted_bytes}});
    }
  }
  j["memory"]["readings"] = readings;
  // The options it had: what each memory-safe layout on each type would take and give (only
  // while the job is queued or running: an ended job's table is gone).
  json options = json::array();
  auto table = options_of_.find(key);
  if (table != options_of_.end() && active_.contains(key)) {
    const JobOptions& o = *table->second;
    const json plan = ParseOr(row.plan, json(nullptr));
    const int chosen = plan.is_object() ? plan.value("option", -1) : -1;
    const double left = std::max(0.0, row.total_tokens - row.done_tokens);
    for (size_t i = 0; i < o.options.size() && options.size() < 200; ++i) {
      const RunOption& r = o.options[i];
      const double tps = r.plan.tokens_per_s;
      options.push_back({{"option", i},
                         {"gpu", r.mixed() ? r.plan.gpu : o.types[r.type]},
                         {"gpus", r.gpus},
                         {"tokens_per_s", tps},
                         {"time_left_s", tps > 0 ? json(left / tps) : json(nullptr)},
                         {"device_bytes", r.plan.device_bytes},
                         {"gpu_memory_bytes", r.plan.gpu_memory_bytes},
                         {"chosen", static_cast<int>(i) == chosen}});
    }
  }
  j["options"] = options;
}

Result<json> Daemon::LogTail(const std::string& id, int lines) {
  if (lines < 1 || lines > 200) return InvalidArgument("must be 1 to 200", {}, "lines");
  ASSIGN_OR_RETURN(auto row, store_->GetJob(id));
  if (!row) return NotFound("no job '" + id + "'", {}, "id");
  // The id matched [A-Za-z0-9_-]{1,64} (api.cc): the folder is the job's own, never elsewhere.
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path newest;
  fs::file_time_type newest_t{};
  for (fs::directory_iterator it(fs::path(opt_.runs_dir) / id, ec), end; !ec && it != end;
       it.increment(ec)) {
    const fs::path& f = it->path();
    if (!it->is_regular_file(ec) || (f.extension() != ".log" && f.extension() != ".out")) continue;
    fs::file_time_type t = it->last_write_time(ec);
    if (!ec && (newest.empty() || t > newest_t)) newest = f, newest_t = t;
  }
  json out = {{"file", newest.empty() ? "" : newest.filename().string()}, {"lines", json::array()}};
  if (newest.empty()) return out;
  std::vector<std::string> tail = TailLines(newest.string());
  const size_t from = tail.size() > static_cast<size_t>(lines) ? tail.size() - lines : 0;
  for (size_t i = from; i < tail.size(); ++i) out["lines"].push_back(Utf8Prefix(tail[i], 1000));
  return out;
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
  // Used GPUs per type over the last hours: [t_s, used of types[0], used of types[1], ...].
  json usage = json::array();
  for (const auto& [t, used] : usage_history_) {
    json sample = json::array({t});
    for (int64_t u : used) sample.push_back(u);
    usage.push_back(sample);
  }
  return json{{"backend", backend_name_}, {"types", types}, {"nodes", nodes},
              {"agents", agents},         {"usage", usage}, {"now_s", now_s_()}};
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
