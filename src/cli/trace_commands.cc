// `frenzy trace convert` (real cluster traces into workload files) and `frenzy workload
// generate` (synthetic workloads). The mapping lives in sim/trace_convert.h and
// sim/generator.h; this file reads and writes files and prints summaries.
#include <fmt/core.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/strings.h"
#include "hardware/cluster.h"
#include "hardware/gpu.h"
#include "sim/generator.h"
#include "sim/trace_convert.h"
#include "sim/workload.h"

namespace frenzy::cli {
namespace {

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read the file", path, "trace");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status WriteWorkload(const std::string& path, const Workload& w) {
  std::string text = WorkloadToCsv(w);
  // What is written must read back: a cheap guard against a workload the simulator rejects.
  RETURN_IF_ERROR(ParseWorkloadCsv(text, path).status());
  std::ofstream out(path, std::ios::binary);
  if (!out) return InvalidArgument("cannot write the file", path, "--out");
  out << text;
  if (!out) return InvalidArgument("write failed", path, "--out");
  return Status::Ok();
}

template <typename K>
nlohmann::json Histogram(const std::map<K, int64_t>& h) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : h) j[fmt::format("{}", k)] = v;
  return j;
}

template <typename K>
std::string HistogramText(const std::map<K, int64_t>& h) {
  std::string s;
  for (const auto& [k, v] : h) s += fmt::format("{}{}: {}", s.empty() ? "" : ", ", k, v);
  return s.empty() ? "-" : s;
}

// ---- trace convert -------------------------------------------------------------------------

struct ConvertCliOptions {
  std::string from;
  std::vector<std::string> inputs;
  std::string out;
  std::string columns;
  uint64_t seed = 1;
  std::string cluster = "cluster64";
  int64_t max_jobs = 0;
  double load = 0;
  bool json = false;
};

void RunConvert(const ConvertCliOptions& o) {
  auto start = std::chrono::steady_clock::now();
  auto format = ParseTraceFormat(o.from);
  if (!format) {
    return Fail(
        InvalidArgument("unknown trace format '" + o.from + "' (itp, gavel, csv)", {}, "--from"));
  }
  std::optional<ColumnMap> columns;
  if (!o.columns.empty()) {
    auto c = ParseColumnMap(o.columns);
    if (!c.ok()) return Fail(c.status());
    columns = *c;
  }
  if (*format == TraceFormat::kCsv && !columns) {
    return Fail(InvalidArgument("--from csv needs --columns submit=COL,duration=COL,gpus=COL", {},
                                "--columns"));
  }
  if (*format != TraceFormat::kCsv && columns) {
    return Fail(InvalidArgument("--columns applies to --from csv only", {}, "--columns"));
  }
  if (o.max_jobs < 0) return Fail(InvalidArgument("must not be negative", {}, "--max-jobs"));
  const GpuCatalog& catalog = GpuCatalog::Default();
  auto cluster = ResolveCluster(o.cluster, catalog);
  if (!cluster.ok()) return Fail(cluster.status());

  // Several files make one trace (e.g. the ten ITP clusters); ids stay unique per file.
  std::vector<TraceJob> trace;
  for (const auto& path : o.inputs) {
    auto text = ReadFile(path);
    if (!text.ok()) return Fail(text.status());
    auto jobs = ReadTrace(*text, *format, columns ? &*columns : nullptr, path);
    if (!jobs.ok()) return Fail(jobs.status());
    for (auto& j : jobs.value()) {
      if (o.inputs.size() > 1 && *format != TraceFormat::kItp) {
        j.id = fmt::format("f{}-{}", &path - o.inputs.data(), j.id);
      }
      trace.push_back(std::move(j));
    }
  }
  auto read_done = std::chrono::steady_clock::now();
  ConvertOptions co;
  co.seed = o.seed;
  if (o.max_jobs > 0) co.max_jobs = o.max_jobs;
  if (o.load != 0) {
    if (!(o.load > 0)) return Fail(InvalidArgument("must be positive", {}, "--load"));
    co.target_load = o.load;
  }
  co.source = o.inputs.size() == 1 ? o.inputs.front() : "trace";
  ConvertReport rep;
  auto w = ConvertTrace(trace, *cluster, catalog, co, &rep);
  if (!w.ok()) return Fail(w.status());
  w->name = o.out;
  if (Status s = WriteWorkload(o.out, *w); !s.ok()) return Fail(s);
  auto done = std::chrono::steady_clock::now();
  double read_s = std::chrono::duration<double>(read_done - start).count();
  double total_s = std::chrono::duration<double>(done - start).count();

  if (o.json) {
    nlohmann::json j;
    j["out"] = o.out;
    j["cluster"] = cluster->name;
    j["format"] = o.from;
    j["seed"] = o.seed;
    j["trace_jobs"] = trace.size();
    j["jobs"] = rep.jobs;
    j["capped"] = rep.capped;
    j["resized"] = rep.resized;
    j["trace_gpus"] = Histogram(rep.trace_gpus);
    j["requested_gpus"] = Histogram(rep.requested_gpus);
    j["gpu_types"] = Histogram(rep.gpu_types);
    j["models"] = Histogram(rep.models);
    j["trace_median_duration_s"] = rep.trace_median_duration_s;
    j["trace_load"] = rep.trace_load;
    j["load"] = rep.load;
    j["median_duration_error"] = rep.median_duration_error;
    j["max_duration_error"] = rep.max_duration_error;
    j["read_s"] = read_s;
    j["elapsed_s"] = total_s;
    return PrintJson(j);
  }
  fmt::print("converted {} of {} trace jobs for {} -> {} ({:.2f} s)\n", rep.jobs, trace.size(),
             cluster->name, o.out, total_s);
  fmt::print("  trace GPUs      {}\n", HistogramText(rep.trace_gpus));
  fmt::print("  requested GPUs  {}\n", HistogramText(rep.requested_gpus));
  if (rep.capped > 0) {
    fmt::print("  {} jobs capped at the {} GPUs of the cluster's largest type\n", rep.capped,
               rep.requested_gpus.empty() ? 0 : rep.requested_gpus.rbegin()->first);
  }
  if (rep.resized > 0) fmt::print("  {} jobs moved to a smaller GPU count\n", rep.resized);
  fmt::print("  GPU types       {}\n", HistogramText(rep.gpu_types));
  fmt::print("  models          {}\n", HistogramText(rep.models));
  fmt::print("  offered load on {} GPUs: {:.3g}{}\n", cluster->total_gpus(), rep.trace_load,
             co.target_load ? fmt::format(" in the trace, scaled to {:.3g}", rep.load) : "");
  fmt::print(
      "  duration on the requested GPUs vs the trace: median error {:.2g}%, max {:.2g}% "
      "(trace median {:.0f} s)\n",
      rep.median_duration_error * 100, rep.max_duration_error * 100, rep.trace_median_duration_s);
}

// ---- workload generate ---------------------------------------------------------------------

struct GenerateCliOptions {
  std::string cluster = "cluster64";
  int64_t jobs = 100;
  double load = 0.8;
  uint64_t seed = 1;
  std::string models;
  double min_hours = 0.5, max_hours = 24;
  std::string out;
  bool json = false;
};

void RunGenerate(const GenerateCliOptions& o) {
  const GpuCatalog& catalog = GpuCatalog::Default();
  auto cluster = ResolveCluster(o.cluster, catalog);
  if (!cluster.ok()) return Fail(cluster.status());
  GeneratorOptions go;
  go.seed = o.seed;
  go.jobs = o.jobs;
  go.load = o.load;
  go.min_hours = o.min_hours;
  go.max_hours = o.max_hours;
  std::stringstream names(o.models);
  for (std::string name; std::getline(names, name, ',');) {
    if (!name.empty()) go.models.push_back(name);
  }
  auto w = GenerateWorkload(go, *cluster, catalog);
  if (!w.ok()) {
    const Status& s = w.status();
    // Name the flag the user typed.
    std::string field = s.field() == "hours" ? "--min-hours/--max-hours" : "--" + s.field();
    return Fail(Status(s.code(), s.message(), s.where(), field));
  }
  w->name = o.out;
  if (Status s = WriteWorkload(o.out, *w); !s.ok()) return Fail(s);
  std::map<int64_t, int64_t> gpus;
  std::map<std::string, int64_t> models, types;
  for (const auto& j : w->jobs) {
    ++gpus[j.requested_gpus.value_or(0)];
    ++models[j.model];
    ++types[j.requested_gpu.value_or("")];
  }
  double span = w->jobs.empty() ? 0 : w->jobs.back().submit_s;
  if (o.json) {
    nlohmann::json j;
    j["out"] = o.out;
    j["cluster"] = cluster->name;
    j["seed"] = o.seed;
    j["jobs"] = w->jobs.size();
    j["load"] = o.load;
    j["span_s"] = span;
    j["requested_gpus"] = Histogram(gpus);
    j["gpu_types"] = Histogram(types);
    j["models"] = Histogram(models);
    return PrintJson(j);
  }
  fmt::print("generated {} jobs for {} at load {} over {:.1f} h -> {}\n", w->jobs.size(),
             cluster->name, o.load, span / 3600, o.out);
  fmt::print("  requested GPUs  {}\n", HistogramText(gpus));
  fmt::print("  GPU types       {}\n", HistogramText(types));
  fmt::print("  models          {}\n", HistogramText(models));
}

}  // namespace

void RegisterTraceCommands(CLI::App& app) {
  {
    auto* trace = app.add_subcommand("trace", "Real cluster job traces.");
    trace->require_subcommand(1);
    auto o = std::make_shared<ConvertCliOptions>();
    auto* cmd = trace->add_subcommand(
        "convert",
        "Convert a real job trace (arrivals, durations, GPU counts) into an LLM training "
        "workload; the mapping is in docs/workloads.md.");
    cmd->add_option("--from", o->from, "Trace format: itp, gavel or csv")->required();
    cmd->add_option("trace", o->inputs, "Trace file(s); several files make one trace")->required();
    cmd->add_option("--out", o->out, "Workload CSV to write")->required();
    cmd->add_option("--columns", o->columns,
                    "For --from csv: submit=COL,duration=COL,gpus=COL[,model=COL][,id=COL]");
    cmd->add_option("--seed", o->seed, "Seed of the model and GPU type draws")
        ->capture_default_str();
    cmd->add_option("--cluster", o->cluster, "Cluster whose GPU types users request")
        ->capture_default_str();
    cmd->add_option("--max-jobs", o->max_jobs, "Keep the first N jobs by submit time (0: all)");
    cmd->add_option("--load", o->load,
                    "Scale submit times so that the offered load on the cluster is this "
                    "(default: keep the trace's times)");
    cmd->add_flag("--json", o->json, "Machine-readable summary");
    cmd->callback([o] { RunConvert(*o); });
  }
  {
    auto* workload = app.add_subcommand("workload", "Workload files.");
    workload->require_subcommand(1);
    auto o = std::make_shared<GenerateCliOptions>();
    auto* cmd = workload->add_subcommand(
        "generate",
        "Generate a synthetic workload: Poisson arrivals at a target load, zoo LLMs, "
        "log-uniform durations (docs/workloads.md).");
    cmd->add_option("--cluster", o->cluster, "Cluster (bundled name or file)")
        ->capture_default_str();
    cmd->add_option("--jobs", o->jobs, "Number of jobs")->capture_default_str();
    cmd->add_option("--load", o->load,
                    "Offered load: GPU-seconds asked for per second / GPUs of the cluster")
        ->capture_default_str();
    cmd->add_option("--seed", o->seed, "Seed")->capture_default_str();
    cmd->add_option("--models", o->models, "Comma-separated zoo models (default: a 125M-70B mix)");
    cmd->add_option("--min-hours", o->min_hours, "Shortest duration on the requested GPUs")
        ->capture_default_str();
    cmd->add_option("--max-hours", o->max_hours, "Longest duration on the requested GPUs")
        ->capture_default_str();
    cmd->add_option("--out", o->out, "Workload CSV to write")->required();
    cmd->add_flag("--json", o->json, "Machine-readable summary");
    cmd->callback([o] { RunGenerate(*o); });
  }
}

}  // namespace frenzy::cli
