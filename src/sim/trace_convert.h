// Trace conversion: real cluster job traces (arrival time, duration, GPU count; no model) into
// LLM training workloads (sim/workload.h), deterministically for a seed.
//
// Formats: `itp` (Microsoft ITP 2021: job_id,submission_time,duration,num_gpu), `gavel`
// (Gavel's Philly-derived TSV: job_type, command, num_steps_arg, needs_data_dir, total_steps,
// arrival_time, scale_factor — duration is not in the file and is derived as documented in
// docs/workloads.md), and `csv` with a column mapping (submit=COL,duration=COL,gpus=COL
// [,model=COL]). The mapping from a trace job to an LLM job is documented in docs/workloads.md.
#ifndef FRENZY_SIM_TRACE_CONVERT_H_
#define FRENZY_SIM_TRACE_CONVERT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "hardware/cluster.h"
#include "hardware/gpu.h"
#include "model/model_spec.h"
#include "sched/job_options.h"
#include "sim/workload.h"

namespace frenzy {

enum class TraceFormat { kItp, kGavel, kCsv };
std::optional<TraceFormat> ParseTraceFormat(std::string_view s);

// Column names for the generic CSV format.
struct ColumnMap {
  std::string submit, duration, gpus;
  std::optional<std::string> model;
  std::optional<std::string> id;  // job ids; absent: "job-<n>" in file order
};
// Parses "submit=COL,duration=COL,gpus=COL[,model=COL][,id=COL]".
Result<ColumnMap> ParseColumnMap(std::string_view spec);

// One job as the trace gives it.
struct TraceJob {
  std::string id;
  double submit_s = 0;
  double duration_s = 0;  // on the GPUs it asked for
  int64_t gpus = 0;
  std::optional<std::string> model;  // only when the trace names one (csv with model=COL)
  int64_t line = 0;                  // line in the trace file, for messages
};

// Reads a trace; a bad line is an error naming `where`, the line and the field. Blank lines are
// skipped; in the header formats (itp, csv) a repeat of the header line is skipped too, so that
// files joined with `cat` read as one trace. REQUIRES: `columns` set for kCsv.
Result<std::vector<TraceJob>> ReadTrace(std::string_view text, TraceFormat format,
                                        const ColumnMap* columns, const std::string& where);

// Gavel's trace gives steps, not seconds: the seconds one step of a job type takes, by the rule
// of docs/workloads.md (per model family, fitted so that the family's 1-GPU jobs have the
// median duration of Gavel's Philly duration sampler; 1 s for families Gavel does not have).
double GavelSecondsPerStep(std::string_view job_type);

struct ConvertOptions {
  uint64_t seed = 1;
  std::optional<int64_t> max_jobs;  // keep the first N jobs by submit time
  bool rebase_time = true;          // shift submit times so the first job arrives at 0
  std::string source = "trace";     // names the trace in error messages
  // When set, submit times are scaled (after rebasing) so that the offered load — GPU-seconds
  // asked for (requested GPUs x trace duration) / (cluster GPUs x last submit time) — equals
  // it; durations are kept. Traces of big clusters offer a small one many times its capacity.
  std::optional<double> target_load;
};

// What a conversion did, for the `trace convert` summary.
struct ConvertReport {
  int64_t jobs = 0;
  int64_t capped = 0;   // jobs whose GPU count exceeded what one type of the cluster has
  int64_t resized = 0;  // jobs moved to another count because no model has a layout on theirs
  std::map<int64_t, int64_t> trace_gpus;      // trace GPU count -> jobs
  std::map<int64_t, int64_t> requested_gpus;  // requested GPU count -> jobs
  std::map<std::string, int64_t> models;      // model -> jobs
  std::map<std::string, int64_t> gpu_types;   // requested GPU type -> jobs
  // |tokens / speed on the requested GPUs - trace duration| / trace duration, over the jobs.
  double median_duration_error = 0;
  double max_duration_error = 0;
  double trace_median_duration_s = 0;
  // Offered load of the converted jobs on the cluster (as for target_load), before and after
  // any time scaling; 0 when all jobs arrive at once.
  double trace_load = 0;
  double load = 0;
};

// Maps trace jobs to LLM training jobs on `cluster` (whose GPU types users request by hand).
// The converted job's requested GPU count equals the trace's (capped at the largest count one
// type of the cluster offers) and its token budget is set so that it trains for the trace's
// duration on the GPUs it requested, at the hand-tuned layout's predicted speed.
// `report`, when given, receives the summary.
Result<Workload> ConvertTrace(const std::vector<TraceJob>& trace, const Cluster& cluster,
                              const GpuCatalog& catalog, const ConvertOptions& options,
                              ConvertReport* report = nullptr);

// ---- The mapping shared by the converter and the generator (sim/generator.h) ---------------

// The global batch of a job on `gpus` GPUs: gpus x 2^k, the smallest such that is at least
// max(64, 8 x gpus) sequences — a power of two whenever `gpus` is one, and always a multiple of
// the GPU count so that plain data parallelism divides it.
int64_t GlobalBatchFor(int64_t gpus);

// Zoo models a converted job may train: the zoo's decoders of at most 100B parameters (the
// gigantic ones — llama-3.1-405b, bloom, mixtral-8x22b — fit no cluster a trace job asked for),
// sorted by name.
Result<std::vector<std::string>> TraceModelNames();

// An LLM job a user would have submitted by hand.
struct MappedJob {
  std::string model;
  std::string gpu;   // requested GPU type (catalog name)
  int64_t gpus = 0;  // requested GPU count
  int64_t global_batch = 0;
  double tokens_per_s = 0;  // the hand-tuned layout's predicted speed on those GPUs
  bool fits_prediction = true;
};

// Picks models and requested GPUs for jobs on one cluster, from the hand-tuned option tables
// (sched/job_options.h, OptionKind::kHand) of each (model, global batch), cached. Draws use the
// caller's RNG only. Not thread-safe.
class LlmJobMapper {
 public:
  // `models`: the candidates (zoo names); empty: TraceModelNames(). REQUIRES: `cluster` and
  // `catalog` outlive the mapper.
  static Result<std::unique_ptr<LlmJobMapper>> Create(const Cluster& cluster,
                                                      const GpuCatalog& catalog,
                                                      std::vector<std::string> models = {});

  // The most GPUs one type of the cluster has: trace counts are capped at this.
  int64_t max_gpus() const { return max_gpus_; }
  const std::vector<std::string>& models() const { return models_; }

  // A trace job asking for `gpus` GPUs (REQUIRES: 1 <= gpus <= max_gpus()). With `model`, that
  // model; otherwise one drawn among the candidates that fit `gpus` GPUs of the drawn type and
  // preferably not half as many. The returned count differs from `gpus` only when no candidate
  // has a layout on that count of any type (then: the largest smaller count that has one).
  Result<MappedJob> ForTraceJob(int64_t gpus, const std::optional<std::string>& model,
                                std::mt19937_64& rng);

  // A job of `model` (generator): a type drawn by GPU count among the types where the model
  // fits, and the smallest power-of-two count of that type that fits. NotFound-like error when
  // it fits no type of the cluster.
  Result<MappedJob> ForModel(const std::string& model, std::mt19937_64& rng);
  // The (type -> MappedJob) choices ForModel draws from, with the draw weights; empty when the
  // model fits nowhere.
  Result<std::vector<std::pair<MappedJob, double>>> ModelChoices(const std::string& model);

  // The hand-tuned option table of `model` at `global_batch` (seq 2048, bf16).
  Result<std::shared_ptr<const JobOptions>> HandTable(const std::string& model,
                                                      int64_t global_batch);

 private:
  LlmJobMapper(const Cluster& cluster, const GpuCatalog& catalog);
  struct Candidates {
    std::vector<int> preferred, fallback;  // indices into models_
  };
  Result<const Candidates*> CandidatesFor(int type, int64_t gpus);
  Result<MappedJob> Make(const std::string& model, int type, int64_t gpus);

  const Cluster& cluster_;
  const GpuCatalog& catalog_;
  OptionCache cache_;
  std::vector<std::string> models_;  // candidates for trace jobs without a model
  std::map<std::string, ModelSpec> specs_;
  std::vector<std::string> types_;    // cluster GPU types, cluster order
  std::vector<int64_t> type_counts_;  // GPUs per type
  int64_t max_gpus_ = 0;
  std::map<std::pair<int, int64_t>, Candidates> candidates_;
  std::map<std::string, std::vector<std::pair<MappedJob, double>>> model_choices_;
};

// Deterministic random numbers (the same on every standard library, unlike std::*_distribution):
// a generator seeded from (seed, key), a uniform double in [0, 1), an index in [0, n), and a
// weighted index (REQUIRES: some weight > 0).
std::mt19937_64 SeededRng(uint64_t seed, std::string_view key);
double Uniform01(std::mt19937_64& rng);
size_t UniformIndex(std::mt19937_64& rng, size_t n);
size_t WeightedIndex(std::mt19937_64& rng, const std::vector<double>& weights);

}  // namespace frenzy

#endif  // FRENZY_SIM_TRACE_CONVERT_H_
