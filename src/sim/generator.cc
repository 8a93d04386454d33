#include "sim/generator.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

#include "sim/trace_convert.h"

namespace frenzy {

const std::vector<std::string>& DefaultGeneratorModels() {
  // 125M to 70B, weighted towards the sizes labs train most (several 1-13B models).
  static const std::vector<std::string> kModels = {
      "opt-125m",   "opt-350m",   "bloom-560m", "opt-1.3b",    "pythia-1.4b", "opt-2.7b",
      "llama-2-7b", "mistral-7b", "llama-3-8b", "llama-2-13b", "opt-30b",     "llama-2-70b",
  };
  return kModels;
}

Result<Workload> GenerateWorkload(const GeneratorOptions& options, const Cluster& cluster,
                                  const GpuCatalog& catalog) {
  if (options.jobs < 1) return InvalidArgument("must be at least 1", {}, "jobs");
  if (!(options.load > 0)) return InvalidArgument("must be positive", {}, "load");
  if (!(options.min_hours > 0) || !(options.max_hours >= options.min_hours)) {
    return InvalidArgument("need 0 < min_hours <= max_hours", {}, "hours");
  }
  if (options.seq_len != 2048) {
    return InvalidArgument("only 2048 is supported (the hand-tuned tables assume it)", {},
                           "seq_len");
  }
  const bool user_models = !options.models.empty();
  std::vector<std::string> wanted = user_models ? options.models : DefaultGeneratorModels();
  ASSIGN_OR_RETURN(auto mapper, LlmJobMapper::Create(cluster, catalog, wanted));

  // Keep the models that fit somewhere; a model the user named that fits nowhere is an error.
  std::vector<std::string> models;
  double mean_gpus = 0;  // E[requested GPUs] over the mix, for the arrival rate
  for (const auto& m : wanted) {
    ASSIGN_OR_RETURN(auto choices, mapper->ModelChoices(m));
    if (choices.empty()) {
      if (user_models) {
        return InvalidArgument(
            fmt::format("model '{}' fits no GPU type of cluster '{}'", m, cluster.name), {},
            "models");
      }
      continue;
    }
    double wsum = 0, gsum = 0;
    for (const auto& [job, w] : choices) {
      wsum += w;
      gsum += w * static_cast<double>(job.gpus);
    }
    mean_gpus += gsum / wsum;
    models.push_back(m);
  }
  if (models.empty()) {
    return InvalidArgument("no model of the mix fits cluster '" + cluster.name + "'", {}, "models");
  }
  mean_gpus /= static_cast<double>(models.size());

  // Durations are log-uniform in [min, max] hours: mean (max - min) / ln(max / min).
  const double lo = options.min_hours * 3600, hi = options.max_hours * 3600;
  const double mean_duration = hi > lo ? (hi - lo) / std::log(hi / lo) : lo;
  const double total_gpus = static_cast<double>(cluster.total_gpus());
  // Poisson arrivals: rate x E[GPUs x duration] = load x GPUs of the cluster.
  const double rate = options.load * total_gpus / (mean_gpus * mean_duration);

  auto rng = SeededRng(options.seed, "generator");
  Workload w;
  w.name = fmt::format("synthetic-{}-{}", cluster.name, options.seed);
  double t = 0, demand = 0;  // demand: GPU-seconds asked for, on the requested GPUs
  for (int64_t i = 0; i < options.jobs; ++i) {
    t += -std::log(1.0 - Uniform01(rng)) / rate;
    const std::string& model = models[UniformIndex(rng, models.size())];
    ASSIGN_OR_RETURN(MappedJob m, mapper->ForModel(model, rng));
    double duration = lo * std::exp(Uniform01(rng) * std::log(hi / lo));
    WorkloadJob j;
    j.id = fmt::format("gen-{:05d}", i);
    j.submit_s = t;
    j.model = m.model;
    j.tokens = std::max(1.0, std::round(duration * m.tokens_per_s));
    j.global_batch = m.global_batch;
    j.seq_len = options.seq_len;
    j.requested_gpu = m.gpu;
    j.requested_gpus = m.gpus;
    j.precision = Precision::kBf16;
    demand += static_cast<double>(m.gpus) * (j.tokens / m.tokens_per_s);
    w.jobs.push_back(std::move(j));
  }
  // The arrival process above has the target load in expectation; scaling its clock so that the
  // realized offered load over the window [0, last arrival] equals the target removes the sample
  // noise (about +-5% on 2,000 jobs, far more on 60) while keeping exponential gaps.
  if (options.exact_load && t > 0) {
    double realized = demand / (total_gpus * t);
    double scale = realized / options.load;
    for (auto& j : w.jobs) j.submit_s *= scale;
  }
  // Whole seconds with millisecond resolution keep the CSV short.
  for (auto& j : w.jobs) j.submit_s = std::round(j.submit_s * 1000) / 1000;
  return w;
}

}  // namespace frenzy
