#include "sim/trace_convert.h"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>
#include <utility>

#include "common/strings.h"
#include "model/param_count.h"
#include "model/zoo.h"

namespace frenzy {
namespace {

std::vector<std::string_view> Split(std::string_view line, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t at = line.find(sep, start);
    out.push_back(Trim(line.substr(start, at == std::string_view::npos ? line.npos : at - start)));
    if (at == std::string_view::npos) break;
    start = at + 1;
  }
  return out;
}

Result<double> ToDouble(std::string_view s, const std::string& where, const std::string& field) {
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) {
    return InvalidArgument("'" + std::string(s) + "' is not a number", where, field);
  }
  return v;
}

Result<int64_t> ToInt(std::string_view s, const std::string& where, const std::string& field) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) {
    // Some traces write counts as "8.0".
    double d = 0;
    auto [q, ec2] = std::from_chars(s.data(), s.data() + s.size(), d);
    if (!s.empty() && ec2 == std::errc() && q == s.data() + s.size() && d == std::floor(d) &&
        std::fabs(d) < 1e15) {
      return static_cast<int64_t>(d);
    }
    return InvalidArgument("'" + std::string(s) + "' is not an integer", where, field);
  }
  return v;
}

Status CheckTimes(const TraceJob& j, const std::string& at, const std::string& submit_field,
                  const std::string& duration_field, const std::string& gpus_field) {
  if (j.submit_s < 0) return InvalidArgument("must not be negative", at, submit_field);
  if (!(j.duration_s > 0)) return InvalidArgument("must be positive", at, duration_field);
  if (j.gpus < 1) return InvalidArgument("must be at least 1", at, gpus_field);
  return Status::Ok();
}

// Lines of `text` with their 1-based numbers; blank lines are left out.
template <typename F>
Status ForEachLine(std::string_view text, F&& f) {
  int64_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == text.npos ? text.npos : nl - pos);
    pos = nl == text.npos ? text.size() : nl + 1;
    ++line_no;
    if (Trim(line).empty()) continue;
    RETURN_IF_ERROR(f(line, line_no));
  }
  return Status::Ok();
}

// Traces with a header line (itp, csv): column positions by name, case-insensitive.
struct HeaderColumns {
  std::string header;  // the header line as written, to skip repeats of it
  std::map<std::string, size_t> index;
};

Result<std::vector<TraceJob>> ReadHeaderTrace(std::string_view text, const ColumnMap& cols,
                                              const std::string& where) {
  std::vector<TraceJob> jobs;
  std::optional<HeaderColumns> header;
  std::set<std::string> ids;
  Status st = ForEachLine(text, [&](std::string_view line, int64_t line_no) -> Status {
    std::string at = fmt::format("{}:{}", where, line_no);
    if (!header) {
      header.emplace();
      header->header = std::string(Trim(line));
      auto cells = Split(line, ',');
      for (size_t i = 0; i < cells.size(); ++i) header->index[ToLower(cells[i])] = i;
      std::vector<std::string> need = {cols.submit, cols.duration, cols.gpus};
      if (cols.model) need.push_back(*cols.model);
      if (cols.id) need.push_back(*cols.id);
      for (const auto& n : need) {
        if (!header->index.count(ToLower(n))) {
          return InvalidArgument("the header lacks this column", at, n);
        }
      }
      return Status::Ok();
    }
    if (Trim(line) == header->header) return Status::Ok();  // files joined with cat
    auto cells = Split(line, ',');
    auto cell = [&](const std::string& name) -> Result<std::string_view> {
      size_t i = header->index.at(ToLower(name));
      if (i >= cells.size() || cells[i].empty()) return InvalidArgument("missing value", at, name);
      return cells[i];
    };
    TraceJob j;
    j.line = line_no;
    ASSIGN_OR_RETURN(std::string_view submit, cell(cols.submit));
    ASSIGN_OR_RETURN(j.submit_s, ToDouble(submit, at, cols.submit));
    ASSIGN_OR_RETURN(std::string_view duration, cell(cols.duration));
    ASSIGN_OR_RETURN(j.duration_s, ToDouble(duration, at, cols.duration));
    ASSIGN_OR_RETURN(std::string_view gpus, cell(cols.gpus));
    ASSIGN_OR_RETURN(j.gpus, ToInt(gpus, at, cols.gpus));
    if (cols.model) {
      ASSIGN_OR_RETURN(std::string_view model, cell(*cols.model));
      j.model = std::string(model);
    }
    if (cols.id) {
      ASSIGN_OR_RETURN(std::string_view id, cell(*cols.id));
      j.id = std::string(id);
    } else {
      j.id = fmt::format("job-{}", jobs.size());
    }
    RETURN_IF_ERROR(CheckTimes(j, at, cols.submit, cols.duration, cols.gpus));
    if (!ids.insert(j.id).second) {
      return InvalidArgument("duplicate job id '" + j.id + "'", at, cols.id.value_or("id"));
    }
    jobs.push_back(std::move(j));
    return Status::Ok();
  });
  RETURN_IF_ERROR(st);
  if (!header) return InvalidArgument("empty trace: a header line is required", where);
  return jobs;
}

Result<std::vector<TraceJob>> ReadGavelTrace(std::string_view text, const std::string& where) {
  static const char* kFields[] = {"job_type",    "command",      "num_steps_arg", "needs_data_dir",
                                  "total_steps", "arrival_time", "scale_factor"};
  std::vector<TraceJob> jobs;
  Status st = ForEachLine(text, [&](std::string_view line, int64_t line_no) -> Status {
    std::string at = fmt::format("{}:{}", where, line_no);
    auto cells = Split(line, '\t');
    if (cells.size() != 7) {
      return InvalidArgument(
          fmt::format("expected 7 tab-separated fields (job_type, command, num_steps_arg, "
                      "needs_data_dir, total_steps, arrival_time, scale_factor), found {}",
                      cells.size()),
          at, cells.size() < 7 ? kFields[cells.size()] : "line");
    }
    if (cells[0].empty()) return InvalidArgument("missing value", at, kFields[0]);
    ASSIGN_OR_RETURN(int64_t needs_data, ToInt(cells[3], at, kFields[3]));
    if (needs_data != 0 && needs_data != 1) {
      return InvalidArgument("expected 0 or 1", at, kFields[3]);
    }
    ASSIGN_OR_RETURN(int64_t steps, ToInt(cells[4], at, kFields[4]));
    if (steps < 1) return InvalidArgument("must be at least 1", at, kFields[4]);
    TraceJob j;
    j.line = line_no;
    j.id = fmt::format("job-{}", jobs.size());
    ASSIGN_OR_RETURN(j.submit_s, ToDouble(cells[5], at, kFields[5]));
    ASSIGN_OR_RETURN(j.gpus, ToInt(cells[6], at, kFields[6]));
    j.duration_s = static_cast<double>(steps) * GavelSecondsPerStep(cells[0]);
    RETURN_IF_ERROR(CheckTimes(j, at, kFields[5], kFields[4], kFields[6]));
    jobs.push_back(std::move(j));
    return Status::Ok();
  });
  RETURN_IF_ERROR(st);
  return jobs;
}

// splitmix64's finalizer: spreads a 64-bit value over all bits.
uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// FNV-1a: a stable hash of a string (std::hash may differ between standard libraries).
uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 14695981039346656037ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

constexpr int64_t kSeqLen = 2048;

}  // namespace

std::optional<TraceFormat> ParseTraceFormat(std::string_view s) {
  std::string l = ToLower(s);
  if (l == "itp") return TraceFormat::kItp;
  if (l == "gavel" || l == "philly") return TraceFormat::kGavel;
  if (l == "csv") return TraceFormat::kCsv;
  return std::nullopt;
}

Result<ColumnMap> ParseColumnMap(std::string_view spec) {
  ColumnMap m;
  bool submit = false, duration = false, gpus = false;
  for (std::string_view part : Split(spec, ',')) {
    if (part.empty()) continue;
    size_t eq = part.find('=');
    if (eq == std::string_view::npos || Trim(part.substr(eq + 1)).empty()) {
      return InvalidArgument("expected KEY=COLUMN, got '" + std::string(part) + "'", {},
                             "--columns");
    }
    std::string key = ToLower(Trim(part.substr(0, eq)));
    std::string col(Trim(part.substr(eq + 1)));
    if (key == "submit") {
      m.submit = col;
      submit = true;
    } else if (key == "duration") {
      m.duration = col;
      duration = true;
    } else if (key == "gpus") {
      m.gpus = col;
      gpus = true;
    } else if (key == "model") {
      m.model = col;
    } else if (key == "id") {
      m.id = col;
    } else {
      return InvalidArgument("unknown key '" + key + "' (submit, duration, gpus, model, id)", {},
                             "--columns");
    }
  }
  if (!submit || !duration || !gpus) {
    return InvalidArgument("submit=COL, duration=COL and gpus=COL are all required", {},
                           "--columns");
  }
  return m;
}

double GavelSecondsPerStep(std::string_view job_type) {
  // Gavel wrote total_steps = duration x (the job type's steps/s on a V100), with durations
  // from its Philly-shaped sampler (scheduler/utils.py, _generate_duration), whose median is
  // 60 x 10^2.4375 s = 16,430 s. Per family, seconds per step = 16,430 s / the median
  // total_steps of that family's 1-GPU jobs in the 15,264 jobs of traces/msr/seed=0 (see
  // docs/workloads.md); batch sizes within a family are pooled.
  struct Family {
    std::string_view prefix;
    double seconds_per_step;
  };
  static constexpr Family kFamilies[] = {
      {"ResNet-18", 0.0406},    {"ResNet-50", 0.244}, {"Transformer", 0.245}, {"LM", 0.0173},
      {"Recommendation", 4.32}, {"A3C", 0.243},       {"CycleGAN", 0.387},
  };
  std::string_view t = Trim(job_type);
  for (const auto& f : kFamilies) {
    if (t.starts_with(f.prefix) && (t.size() == f.prefix.size() || t[f.prefix.size()] == ' ')) {
      return f.seconds_per_step;
    }
  }
  return 1.0;
}

Result<std::vector<TraceJob>> ReadTrace(std::string_view text, TraceFormat format,
                                        const ColumnMap* columns, const std::string& where) {
  switch (format) {
    case TraceFormat::kItp: {
      ColumnMap m;
      m.submit = "submission_time";
      m.duration = "duration";
      m.gpus = "num_gpu";
      m.id = "job_id";
      return ReadHeaderTrace(text, m, where);
    }
    case TraceFormat::kGavel:
      return ReadGavelTrace(text, where);
    case TraceFormat::kCsv:
      if (columns == nullptr) {
        return InvalidArgument("the csv format needs a column mapping", where, "--columns");
      }
      return ReadHeaderTrace(text, *columns, where);
  }
  return InvalidArgument("unknown trace format", where);
}

// ---- random numbers ------------------------------------------------------------------------

std::mt19937_64 SeededRng(uint64_t seed, std::string_view key) {
  return std::mt19937_64(Mix64(Mix64(seed) ^ Fnv1a(key)));
}

double Uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

size_t UniformIndex(std::mt19937_64& rng, size_t n) {
  size_t i = static_cast<size_t>(Uniform01(rng) * static_cast<double>(n));
  return std::min(i, n - 1);
}

size_t WeightedIndex(std::mt19937_64& rng, const std::vector<double>& weights) {
  double total = 0;
  for (double w : weights) total += std::max(0.0, w);
  double x = Uniform01(rng) * total;
  size_t last = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0) continue;
    last = i;
    if (x < weights[i]) return i;
    x -= weights[i];
  }
  return last;  // rounding at the top end
}

// ---- the mapping ---------------------------------------------------------------------------

int64_t GlobalBatchFor(int64_t gpus) {
  int64_t want = std::max<int64_t>(64, 8 * gpus);
  int64_t g = std::max<int64_t>(gpus, 1);
  while (g < want) g *= 2;
  return g;
}

Result<std::vector<std::string>> TraceModelNames() {
  ASSIGN_OR_RETURN(std::vector<ZooEntry> zoo, LoadZoo());
  std::vector<std::string> names;
  for (const auto& e : zoo) {
    if (e.spec.arch != ArchKind::kDecoder) continue;
    if (TotalParams(e.spec) > 100'000'000'000LL) continue;
    names.push_back(e.name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

LlmJobMapper::LlmJobMapper(const Cluster& cluster, const GpuCatalog& catalog)
    : cluster_(cluster),
      catalog_(catalog),
      cache_(cluster, catalog, PlannerOptions{}.memory_margin) {}

Result<std::unique_ptr<LlmJobMapper>> LlmJobMapper::Create(const Cluster& cluster,
                                                           const GpuCatalog& catalog,
                                                           std::vector<std::string> models) {
  std::unique_ptr<LlmJobMapper> m(new LlmJobMapper(cluster, catalog));
  if (models.empty()) {
    ASSIGN_OR_RETURN(models, TraceModelNames());
  }
  for (const auto& name : models) {
    if (m->specs_.count(name)) continue;
    ASSIGN_OR_RETURN(ModelSpec spec, ResolveModel(name));
    m->specs_.emplace(name, std::move(spec));
    m->models_.push_back(name);
  }
  for (const auto& t : cluster.totals()) {
    m->types_.push_back(t.gpu);
    m->type_counts_.push_back(t.gpus);
    m->max_gpus_ = std::max(m->max_gpus_, t.gpus);
  }
  if (m->types_.empty()) return InvalidArgument("the cluster has no GPUs", cluster.name, "cluster");
  return m;
}

Result<std::shared_ptr<const JobOptions>> LlmJobMapper::HandTable(const std::string& model,
                                                                  int64_t global_batch) {
  auto it = specs_.find(model);
  if (it == specs_.end()) {
    ASSIGN_OR_RETURN(ModelSpec spec, ResolveModel(model));
    it = specs_.emplace(model, std::move(spec)).first;
  }
  JobSpec job;
  job.model = it->second;
  job.tokens = 1e9;  // only speeds are used
  job.global_batch = global_batch;
  job.seq_len = kSeqLen;
  job.precision = Precision::kBf16;
  return cache_.Get(model, job, OptionKind::kHand);
}

Result<MappedJob> LlmJobMapper::Make(const std::string& model, int type, int64_t gpus) {
  MappedJob j;
  j.model = model;
  j.gpu = types_[static_cast<size_t>(type)];
  j.gpus = gpus;
  j.global_batch = GlobalBatchFor(gpus);
  ASSIGN_OR_RETURN(auto table, HandTable(j.model, j.global_batch));
  const RunOption* o = table->Find(type, gpus);
  if (o == nullptr) {
    return Status(StatusCode::kInternal, "no hand-tuned layout for a chosen job", j.model);
  }
  j.tokens_per_s = o->plan.tokens_per_s;
  j.fits_prediction = o->fits_prediction;
  return j;
}

Result<const LlmJobMapper::Candidates*> LlmJobMapper::CandidatesFor(int type, int64_t gpus) {
  auto key = std::make_pair(type, gpus);
  auto it = candidates_.find(key);
  if (it != candidates_.end()) return &it->second;
  Candidates c;
  if (gpus <= type_counts_[static_cast<size_t>(type)]) {
    for (size_t m = 0; m < models_.size(); ++m) {
      ASSIGN_OR_RETURN(auto table, HandTable(models_[m], GlobalBatchFor(gpus)));
      const RunOption* o = table->Find(type, gpus);
      if (o == nullptr || !o->fits_prediction) continue;
      bool fits_half = false;
      if (gpus >= 2) {
        ASSIGN_OR_RETURN(auto half_table, HandTable(models_[m], GlobalBatchFor(gpus / 2)));
        const RunOption* h = half_table->Find(type, gpus / 2);
        fits_half = h != nullptr && h->fits_prediction;
      }
      (fits_half ? c.fallback : c.preferred).push_back(static_cast<int>(m));
    }
  }
  return &candidates_.emplace(key, std::move(c)).first->second;
}

Result<MappedJob> LlmJobMapper::ForTraceJob(int64_t gpus, const std::optional<std::string>& model,
                                            std::mt19937_64& rng) {
  if (gpus < 1 || gpus > max_gpus_) {
    return InvalidArgument(fmt::format("{} GPUs: expected 1 to {}", gpus, max_gpus_), {}, "gpus");
  }
  const size_t ntypes = types_.size();
  if (model) {
    // The trace names the model: draw the type among those where it fits on `gpus` GPUs; where
    // it fits nowhere, among those with any hand layout on that count (the job will crash, as
    // such jobs do).
    ASSIGN_OR_RETURN(auto table, HandTable(*model, GlobalBatchFor(gpus)));
    std::vector<double> fit(ntypes, 0), any(ntypes, 0);
    bool has_fit = false, has_any = false;
    for (size_t t = 0; t < ntypes; ++t) {
      if (type_counts_[t] < gpus) continue;
      const RunOption* o = table->Find(static_cast<int>(t), gpus);
      if (o == nullptr) continue;
      any[t] = static_cast<double>(type_counts_[t]);
      has_any = true;
      if (o->fits_prediction) {
        fit[t] = any[t];
        has_fit = true;
      }
    }
    if (!has_any) {
      return InvalidArgument(fmt::format("model '{}' has no layout on {} GPUs of any type of "
                                         "cluster '{}'",
                                         *model, gpus, cluster_.name),
                             {}, "model");
    }
    size_t t = WeightedIndex(rng, has_fit ? fit : any);
    return Make(*model, static_cast<int>(t), gpus);
  }
  // No model: the type first (weighted by its GPU count among types with enough GPUs and some
  // candidate), then a model among the candidates of (type, count).
  for (int64_t n = gpus; n >= 1; --n) {
    std::vector<double> weights(ntypes, 0);
    bool any = false;
    for (size_t t = 0; t < ntypes; ++t) {
      if (type_counts_[t] < n) continue;
      ASSIGN_OR_RETURN(const Candidates* c, CandidatesFor(static_cast<int>(t), n));
      if (c->preferred.empty() && c->fallback.empty()) continue;
      weights[t] = static_cast<double>(type_counts_[t]);
      any = true;
    }
    if (!any) continue;
    size_t t = WeightedIndex(rng, weights);
    ASSIGN_OR_RETURN(const Candidates* c, CandidatesFor(static_cast<int>(t), n));
    const std::vector<int>& pool = c->preferred.empty() ? c->fallback : c->preferred;
    return Make(models_[static_cast<size_t>(pool[UniformIndex(rng, pool.size())])],
                static_cast<int>(t), n);
  }
  return InvalidArgument(
      fmt::format("no candidate model fits any GPU count up to {} on cluster '{}'", gpus,
                  cluster_.name),
      {}, "model");
}

Result<std::vector<std::pair<MappedJob, double>>> LlmJobMapper::ModelChoices(
    const std::string& model) {
  auto it = model_choices_.find(model);
  if (it != model_choices_.end()) return it->second;
  std::vector<std::pair<MappedJob, double>> choices;
  for (size_t t = 0; t < types_.size(); ++t) {
    for (int64_t n = 1; n <= type_counts_[t]; n *= 2) {
      ASSIGN_OR_RETURN(auto table, HandTable(model, GlobalBatchFor(n)));
      const RunOption* o = table->Find(static_cast<int>(t), n);
      if (o == nullptr || !o->fits_prediction) continue;
      ASSIGN_OR_RETURN(MappedJob j, Make(model, static_cast<int>(t), n));
      choices.emplace_back(std::move(j), static_cast<double>(type_counts_[t]));
      break;
    }
  }
  model_choices_.emplace(model, choices);
  return choices;
}

Result<MappedJob> LlmJobMapper::ForModel(const std::string& model, std::mt19937_64& rng) {
  ASSIGN_OR_RETURN(auto choices, ModelChoices(model));
  if (choices.empty()) {
    return InvalidArgument(
        fmt::format("model '{}' fits no power-of-two count of any GPU type of cluster '{}'", model,
                    cluster_.name),
        {}, "model");
  }
  std::vector<double> weights;
  for (const auto& c : choices) weights.push_back(c.second);
  return choices[WeightedIndex(rng, weights)].first;
}

// ---- conversion ----------------------------------------------------------------------------

Result<Workload> ConvertTrace(const std::vector<TraceJob>& trace, const Cluster& cluster,
                              const GpuCatalog& catalog, const ConvertOptions& options,
                              ConvertReport* report) {
  std::vector<const TraceJob*> order;
  order.reserve(trace.size());
  for (const auto& j : trace) order.push_back(&j);
  std::stable_sort(order.begin(), order.end(),
                   [](const TraceJob* a, const TraceJob* b) { return a->submit_s < b->submit_s; });
  if (options.max_jobs && static_cast<int64_t>(order.size()) > *options.max_jobs) {
    order.resize(static_cast<size_t>(std::max<int64_t>(0, *options.max_jobs)));
  }
  if (options.target_load && !(*options.target_load > 0)) {
    return InvalidArgument("must be positive", {}, "load");
  }
  ASSIGN_OR_RETURN(auto mapper, LlmJobMapper::Create(cluster, catalog));
  const double t0 = order.empty() || !options.rebase_time ? 0.0 : order.front()->submit_s;

  Workload w;
  w.name = options.source;
  w.jobs.reserve(order.size());
  ConvertReport rep;
  std::vector<double> errors, durations;
  std::set<std::string> ids;
  double demand = 0, last_submit = 0;
  for (const TraceJob* tj : order) {
    std::string at = fmt::format("{}:{}", options.source, tj->line);
    int64_t want = std::min(tj->gpus, mapper->max_gpus());
    if (tj->gpus > want) ++rep.capped;
    auto rng = SeededRng(options.seed, tj->id);
    auto mapped = mapper->ForTraceJob(want, tj->model, rng);
    if (!mapped.ok()) {
      const Status& s = mapped.status();
      std::string msg = s.where().empty() ? s.message() : "'" + s.where() + "': " + s.message();
      return Status(s.code(), msg, at, s.field());
    }
    if (mapped->gpus != want) ++rep.resized;
    WorkloadJob j;
    j.id = tj->id;
    for (int k = 2; !ids.insert(j.id).second; ++k) j.id = fmt::format("{}-{}", tj->id, k);
    j.submit_s = tj->submit_s - t0;
    j.model = mapped->model;
    // Whole tokens: the rounding error (< 0.5 token) is what the report's duration error shows.
    j.tokens = std::max(1.0, std::round(tj->duration_s * mapped->tokens_per_s));
    j.global_batch = mapped->global_batch;
    j.seq_len = kSeqLen;
    j.requested_gpu = mapped->gpu;
    j.requested_gpus = mapped->gpus;
    j.precision = Precision::kBf16;
    ++rep.trace_gpus[tj->gpus];
    ++rep.requested_gpus[mapped->gpus];
    ++rep.models[mapped->model];
    ++rep.gpu_types[mapped->gpu];
    // Re-derive the duration from what the workload file says, as the simulator will.
    ASSIGN_OR_RETURN(auto table, mapper->HandTable(j.model, j.global_batch));
    int type = -1;
    for (size_t t = 0; t < table->types.size(); ++t) {
      if (table->types[t] == mapped->gpu) type = static_cast<int>(t);
    }
    const RunOption* o = table->Find(type, mapped->gpus);
    double predicted = o == nullptr ? 0.0 : j.tokens / o->plan.tokens_per_s;
    errors.push_back(std::fabs(predicted - tj->duration_s) / tj->duration_s);
    durations.push_back(tj->duration_s);
    demand += static_cast<double>(mapped->gpus) * tj->duration_s;
    last_submit = std::max(last_submit, j.submit_s);
    w.jobs.push_back(std::move(j));
  }
  const double gpus = static_cast<double>(cluster.total_gpus());
  if (last_submit > 0 && gpus > 0) {
    rep.trace_load = rep.load = demand / (gpus * last_submit);
    if (options.target_load) {
      double scale = rep.trace_load / *options.target_load;
      for (auto& j : w.jobs) j.submit_s = std::round(j.submit_s * scale * 1000) / 1000;
      rep.load = *options.target_load;
    }
  }
  rep.jobs = static_cast<int64_t>(w.jobs.size());
  rep.median_duration_error = Median(errors);
  rep.max_duration_error = errors.empty() ? 0 : *std::max_element(errors.begin(), errors.end());
  rep.trace_median_duration_s = Median(durations);
  if (report != nullptr) *report = std::move(rep);
  return w;
}

}  // namespace frenzy
