// `frenzy simulate`: several policies on one workload in one run, side by side.
#include <fmt/core.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "cli/commands.h"
#include "hardware/cluster.h"
#include "hardware/gpu.h"
#include "sched/policy.h"
#include "sim/engine.h"
#include "sim/metrics.h"
#include "sim/report.h"
#include "sim/workload.h"

namespace frenzy::cli {
namespace {

struct SimulateOptions {
  std::string cluster = "cluster64";
  std::string workload;
  std::string policies = "fifo-static,tiresias,gavel,sia";
  uint64_t seed = 1;
  std::optional<double> memory_error;
  std::optional<double> perf_error;
  std::string perf_error_per = "model";
  std::optional<double> restart_s;  // unset: from each job's checkpoint
  double startup_s = kDefaultStartupS;
  double storage_gbs = kDefaultStorageGbs;
  double checkpoint_min = 30;
  double mtbf_h = 0;
  double repair_h = 1;
  double max_hours = 0;
  double margin = 0.10;
  double memory_drift = 0;
  double memory_bias = 0;
  double report_min = 5;
  double crash_mtbf_h = 0;
  double stragglers = 0;
  double straggler_speed = 0.5;
  std::string withhold;  // a file of job ids, one per line
  std::string out;
  bool json = false;
  bool no_progress = false;
};

Status WriteFile(const std::filesystem::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  if (!f) return InvalidArgument("cannot write " + p.string(), {}, "out");
  f << text;
  if (!f) return InvalidArgument("write failed: " + p.string(), {}, "out");
  return Status::Ok();
}

// --withhold's file: one job id a line; blank lines and lines starting with '#' are skipped.
// No file (an empty path): no job withheld.
Result<std::set<std::string>> ReadWithheld(const std::string& path) {
  if (path.empty()) return std::set<std::string>{};
  std::ifstream f(path);
  if (!f) return InvalidArgument("cannot read " + path, {}, "--withhold");
  std::set<std::string> ids;
  for (std::string line; std::getline(f, line);) {
    const auto b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    ids.insert(line.substr(b, line.find_last_not_of(" \t\r") + 1 - b));
  }
  return ids;
}

// The --json document: every policy's metrics, and (with several) the fair comparison — every
// policy over the jobs all of them finished.
nlohmann::json ResultsJson(const Cluster& cluster, const Workload& workload, uint64_t seed,
                           const std::vector<SimResult>& results) {
  nlohmann::json j;
  j["cluster"] = cluster.name;
  j["workload"] = workload.name;
  j["seed"] = seed;
  j["policies"] = nlohmann::json::array();
  for (const auto& r : results) j["policies"].push_back(MetricsToJson(r.metrics));
  if (results.size() > 1) {
    const CommonFigures c = ComputeCommon(results);
    nlohmann::json per = nlohmann::json::array();
    for (size_t i = 0; i < results.size(); ++i) {
      per.push_back({{"policy", results[i].metrics.policy},
                     {"avg_jct_s", c.avg_jct_s[i]},
                     {"p99_jct_s", c.p99_jct_s[i]},
                     {"gpu_hours", c.gpu_hours[i]}});
    }
    j["common"] = {{"jobs", c.jobs}, {"policies", per}};
  }
  return j;
}

void RunSimulate(const SimulateOptions& o) {
  const GpuCatalog& catalog = GpuCatalog::Default();
  auto cluster = ResolveCluster(o.cluster, catalog);
  if (!cluster.ok()) return Fail(cluster.status());
  auto workload = ResolveWorkload(o.workload);
  if (!workload.ok()) return Fail(workload.status());
  std::vector<std::unique_ptr<Policy>> policies;
  std::stringstream names(o.policies);
  for (std::string name; std::getline(names, name, ',');) {
    if (name.empty()) continue;
    auto p = MakePolicy(name);
    if (!p.ok()) return Fail(p.status());
    policies.push_back(std::move(p).value());
  }
  if (policies.empty()) return Fail(InvalidArgument("no policy named", {}, "policy"));
  SimOptions so;
  so.seed = o.seed;
  so.memory_drift_pct = o.memory_drift;
  so.memory_bias_pct = o.memory_bias;
  so.report_interval_s = o.report_min * 60;
  so.job_crash_mtbf_s = o.crash_mtbf_h * 3600;
  so.straggler_fraction = o.stragglers;
  so.straggler_speed = o.straggler_speed;
  so.memory_error_pct = o.memory_error;
  so.perf_error_pct = o.perf_error;
  so.perf_error_per_model = o.perf_error_per == "model";
  so.memory_margin = o.margin;
  so.restart.fixed_s = o.restart_s.value_or(-1);
  so.restart.startup_s = o.startup_s;
  so.restart.storage_gbs = o.storage_gbs;
  so.checkpoint_interval_s = o.checkpoint_min * 60;
  so.node_mtbf_s = o.mtbf_h * 3600;
  so.node_repair_s = o.repair_h * 3600;
  if (o.max_hours > 0) so.max_time_s = o.max_hours * 3600;
  so.record_runs = !o.out.empty();
  auto withheld = ReadWithheld(o.withhold);
  if (!withheld.ok()) return Fail(withheld.status());
  so.withheld = std::move(*withheld);
  if (Status valid = so.Validate(); !valid.ok()) {
    // The engine names its option; the user typed the flag.
    static const std::map<std::string, std::string> kFlag = {
        {"memory_error_pct", "memory-error"},
        {"perf_error_pct", "perf-error"},
        {"memory_margin", "margin"},
        {"restart_s", "restart-s"},
        {"startup_s", "startup-s"},
        {"storage_gbs", "storage-gbs"},
        {"checkpoint_interval_s", "checkpoint-min"},
        {"node_mtbf_s", "mtbf-h"},
        {"node_repair_s", "repair-h"},
        {"memory_drift_pct", "memory-drift"},
        {"memory_bias_pct", "memory-bias"},
        {"report_interval_s", "report-min"},
        {"job_crash_mtbf_s", "crash-mtbf-h"},
        {"straggler_fraction", "stragglers"},
        {"straggler_speed", "straggler-speed"},
        {"max_time_s", "max-hours"}};
    auto flag = kFlag.find(valid.field());
    return Fail(InvalidArgument(valid.message(), {},
                                flag != kFlag.end() ? "--" + flag->second : valid.field()));
  }
  so.wall_now_s = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  bool bar = !o.no_progress && isatty(STDERR_FILENO);
  OptionCache cache(*cluster, catalog, o.margin);
  std::vector<SimResult> results;
  for (auto& p : policies) {
    std::string label(p->name());
    if (bar) {
      so.progress = [label](double f) {
        int width = 30;
        int filled = static_cast<int>(f * width);
        std::cerr << fmt::format("\r{:<12} [{}{}] {:3.0f}%", label, std::string(filled, '#'),
                                 std::string(width - filled, ' '), 100 * f)
                  << std::flush;
      };
    }
    auto r = Simulate(*workload, *cluster, catalog, *p, so, cache);
    if (bar) std::cerr << "\r" << std::string(52, ' ') << "\r" << std::flush;
    if (!r.ok()) return Fail(r.status());
    results.push_back(std::move(*r));
  }
  if (!o.out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.out, ec);
    if (ec) return Fail(InvalidArgument("cannot create " + o.out + ": " + ec.message(), {}, "out"));
    std::filesystem::path dir(o.out);
    int64_t gpus = cluster->total_gpus();
    for (const auto& [file, text] :
         {std::pair<std::string, std::string>{"jobs.csv", JobsCsv(results)},
          {"timeline.csv", TimelineCsv(results, gpus)},
          {"runs.csv", RunsCsv(results)},
          {"jct_cdf.svg", JctCdfSvg(results)},
          {"timeline.svg", TimelineSvg(results, gpus)},
          {"index.html", IndexHtml(results, {workload->name, cluster->name, gpus, o.seed})}}) {
      if (Status s = WriteFile(dir / file, text); !s.ok()) return Fail(s);
    }
    nlohmann::json summary = nlohmann::json::array();
    for (const auto& r : results) summary.push_back(MetricsToJson(r.metrics));
    if (Status s = WriteFile(dir / "summary.json", summary.dump(2) + "\n"); !s.ok()) {
      return Fail(s);
    }
  }
  if (o.json) {
    PrintJson(ResultsJson(*cluster, *workload, o.seed, results));
    return;
  }
  std::cout << fmt::format("{} jobs of {} on {} ({} GPUs), seed {}\n\n", workload->jobs.size(),
                           workload->name, cluster->name, cluster->total_gpus(), o.seed);
  std::cout << ComparisonTable(results);
  if (!o.out.empty()) {
    std::cout << fmt::format(
        "\nwrote jobs.csv, runs.csv, timeline.csv, summary.json, jct_cdf.svg, timeline.svg and "
        "index.html to {}\n",
        o.out);
  }
}

}  // namespace

void RegisterSimulateCommands(CLI::App& app) {
  auto o = std::make_shared<SimulateOptions>();
  auto* cmd = app.add_subcommand(
      "simulate", "Replay a workload on a cluster under several scheduling policies.");
  cmd->add_option("--cluster,-c", o->cluster, "Bundled cluster name or cluster file")
      ->capture_default_str();
  cmd->add_option("--workload,-w", o->workload, "Bundled workload name or workload CSV file")
      ->required();
  cmd->add_option("--policy,-p", o->policies, "Policies, comma-separated")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the memory truth and failures")
      ->capture_default_str();
  cmd->add_option("--perf-error", o->perf_error,
                  "Std. deviation of the throughput model's error, percent (default: its measured "
                  "errors on held-out published runs; 0: none)");
  cmd->add_option("--perf-error-per", o->perf_error_per,
                  "Whose draw a speed truth is: model (every job of a model runs alike on a GPU "
                  "type) or job")
      ->check(CLI::IsMember({"model", "job"}))
      ->capture_default_str();
  cmd->add_option("--memory-error", o->memory_error,
                  "Std. deviation of MARP's error, percent (default: its measured errors; 0: "
                  "none)");
  cmd->add_option("--margin", o->margin, "MARP safety margin for memory-aware plans")
      ->capture_default_str();
  cmd->add_option("--restart-s", o->restart_s,
                  "Every restart costs this many s (default: start-up plus the job's checkpoint "
                  "over the storage bandwidth)");
  cmd->add_option("--startup-s", o->startup_s,
                  "Start-up of a restarted run (launch, rendezvous), s")
      ->capture_default_str();
  cmd->add_option("--storage-gbs", o->storage_gbs, "Checkpoint load bandwidth per job, GB/s")
      ->capture_default_str();
  cmd->add_option("--checkpoint-min", o->checkpoint_min, "Minutes between checkpoints")
      ->capture_default_str();
  cmd->add_option("--mtbf-h", o->mtbf_h, "Mean hours between failures per node (0: none)")
      ->capture_default_str();
  cmd->add_option("--repair-h", o->repair_h, "Hours to repair a failed node")
      ->capture_default_str();
  cmd->add_option("--max-hours", o->max_hours, "Stop the simulated clock here (0: never)")
      ->capture_default_str();
  cmd->add_option(
         "--memory-drift", o->memory_drift,
         "Jobs' real peak grows by up to this much (percent, uniform per job) by their end")
      ->capture_default_str();
  cmd->add_option("--memory-bias", o->memory_bias,
                  "Every job's real peak is this much above its drawn truth (percent)")
      ->capture_default_str();
  cmd->add_option("--report-min", o->report_min,
                  "Minutes between memory reports of running jobs (runtime policies)")
      ->capture_default_str();
  cmd->add_option("--crash-mtbf-h", o->crash_mtbf_h,
                  "Mean hours between other crashes of a running job (0: none)")
      ->capture_default_str();
  cmd->add_option("--stragglers", o->stragglers, "Fraction of nodes that run slower than predicted")
      ->capture_default_str();
  cmd->add_option("--straggler-speed", o->straggler_speed, "Speed of a straggler node (fraction)")
      ->capture_default_str();
  cmd->add_option("--withhold", o->withhold,
                  "File of job ids (one per line) drawn into the simulated world but never "
                  "submitted: the same world without those jobs");
  cmd->add_option(
      "--out,-o", o->out,
      "Folder for summary.json, jobs.csv, runs.csv (every run of every job), timeline.csv, SVG "
      "plots and index.html (the table and plots in one page)");
  cmd->add_flag("--no-progress", o->no_progress, "No progress bar");
  cmd->add_flag("--json", o->json, "Machine-readable output");
  cmd->callback([o] { RunSimulate(*o); });
}

}  // namespace frenzy::cli
