// Synthetic workload generator: Poisson arrivals at a target cluster load, a model mix from the
// zoo, token budgets from a log-uniform distribution; deterministic for a seed (docs/workloads.md).
//
// Each job: a model drawn uniformly from the mix; the GPUs its user would request by hand — a
// GPU type drawn by GPU count among the cluster's types where the model's hand-tuned layout
// fits, and the smallest power-of-two count of it that fits (LlmJobMapper::ForModel); a
// duration on those GPUs, log-uniform in [min_hours, max_hours]; tokens = duration x the hand
// layout's predicted speed.
#ifndef FRENZY_SIM_GENERATOR_H_
#define FRENZY_SIM_GENERATOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "hardware/cluster.h"
#include "hardware/gpu.h"
#include "sim/workload.h"

namespace frenzy {

struct GeneratorOptions {
  uint64_t seed = 1;
  int64_t jobs = 100;
  // Offered load: expected GPU-seconds demanded per second / GPUs in the cluster, using each
  // job's requested GPUs and its predicted duration on them.
  double load = 0.8;
  // Zoo models to draw from, uniformly; empty: a default LLM mix documented in docs/workloads.md.
  std::vector<std::string> models;
  double min_hours = 0.5, max_hours = 24;  // duration on the requested GPUs, log-uniform
  int64_t seq_len = 2048;                  // only 2048 (the hand-tuned tables are built for it)
  // Scale the arrival clock so that the realized offered load over [0, last arrival] is exactly
  // `load` (otherwise it is `load` only in expectation).
  bool exact_load = true;
};

// The default model mix: zoo LLMs from 125M to 70B parameters (models that fit no type of the
// cluster are left out of it).
const std::vector<std::string>& DefaultGeneratorModels();

Result<Workload> GenerateWorkload(const GeneratorOptions& options, const Cluster& cluster,
                                  const GpuCatalog& catalog);

}  // namespace frenzy

#endif  // FRENZY_SIM_GENERATOR_H_
