#include "planner/mixed.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <utility>

#include "memory/memory_model.h"
#include "perf/perf_model.h"

namespace frenzy {
namespace {

// Layers per stage in proportion to `rate`, each at least 1, summing to `layers` (largest
// remainders take the leftovers).
std::vector<int64_t> SplitByRate(const std::vector<double>& rate, int64_t layers) {
  double sum = std::accumulate(rate.begin(), rate.end(), 0.0);
  const bool even = !(sum > 0);  // no rates known: an even split
  if (even) sum = static_cast<double>(rate.size());
  std::vector<int64_t> out(rate.size());
  std::vector<std::pair<double, size_t>> rest;
  int64_t given = 0;
  for (size_t i = 0; i < rate.size(); ++i) {
    const double x = static_cast<double>(layers) * (even ? 1.0 : rate[i]) / sum;
    out[i] = std::max<int64_t>(1, static_cast<int64_t>(std::floor(x)));
    rest.emplace_back(x - std::floor(x), i);
    given += out[i];
  }
  std::stable_sort(rest.begin(), rest.end(), [](const auto& a, const auto& b) {
    return a.first > b.first;
  });
  for (size_t k = 0; given < layers; k = (k + 1) % rest.size(), ++given) ++out[rest[k].second];
  while (given > layers) {
    auto most = std::max_element(out.begin(), out.end());
    --*most;
    --given;
  }
  return out;
}

// A stage's bytes of the reading its fit is judged on (the device one less paged states).
int64_t StageBytes(const StageEstimate& s, Reading reading) {
  return ReadingBytes(reading, s.peak_bytes, s.peak_reserved_bytes,
                      s.device_bytes - s.pageable_bytes);
}

// Moves layers from stages over their GPU's memory to the stage with the most headroom until
// every stage fits; the estimate of the fitting split, or nullopt. A few passes: each moves
// about as many layers as the overflow holds.
std::optional<MemoryEstimate> FitLayers(const ModelSpec& m, const TrainingSpec& t, ParallelPlan& p,
                                        const std::vector<double>& limit, Reading reading,
                                        int64_t* considered) {
  for (int64_t pass = 0; pass < 2 * p.pp + 4; ++pass) {
    ++*considered;
    auto est = PredictMemory(m, t, p);
    if (!est.ok()) return std::nullopt;
    size_t over = 0, room = 0;
    double worst = 0, best = -1;
    for (size_t i = 0; i < est->stages.size(); ++i) {
      const StageEstimate& s = est->stages[i];
      const double resident = static_cast<double>(StageBytes(s, reading));
      if (resident - limit[i] > worst) worst = resident - limit[i], over = i;
      if (limit[i] - resident > best) best = limit[i] - resident, room = i;
    }
    if (worst <= 0) return std::move(est).value();
    const StageEstimate& o = est->stages[over];
    const int64_t layers = p.stage_layers[over];
    if (best <= 0 || room == over || layers <= 1) return std::nullopt;
    // Bytes a layer costs on the crowded stage: its model states and activations, roughly.
    const double per_layer =
        static_cast<double>(o.breakdown.weights + o.breakdown.gradients + o.breakdown.optimizer +
                            o.breakdown.activations) /
        static_cast<double>(layers);
    const int64_t move = std::clamp<int64_t>(
        static_cast<int64_t>(std::ceil(worst / std::max(per_layer, 1.0))), 1, layers - 1);
    p.stage_layers[over] -= move;
    p.stage_layers[room] += move;
  }
  return std::nullopt;
}

// At most this many types in one pipeline (the search grows as 2^types per subset).
constexpr size_t kMaxTypes = 4;

std::vector<int64_t> StageChoices(int64_t most) {
  std::vector<int64_t> c = {most};
  if (most / 2 >= 1 && most / 2 != most) c.push_back(most / 2);
  return c;
}

// One candidate: the layers split by speed and fitted to memory, then timed; nullopt when it
// does not fit or is impossible.
std::optional<MixedPlan> Evaluate(const JobSpec& job, TrainingSpec t, ParallelPlan p,
                                  const std::vector<StageGpus>& parts,
                                  const std::vector<double>& rate,
                                  const std::vector<double>& limit, Reading reading,
                                  int64_t* considered) {
  const ModelSpec& m = job.model;
  t.micro_batch = 1;
  t.global_batch = job.global_batch > 0 ? job.global_batch : 1;
  p.stage_layers = SplitByRate(rate, m.num_layers);
  auto est = FitLayers(m, t, p, limit, reading, considered);
  if (!est) return std::nullopt;
  auto perf = PredictMixedPerf(m, t, p, parts);
  if (!perf.ok()) return std::nullopt;
  MixedPlan plan;
  for (const StageGpus& part : parts) {
    plan.parts.push_back({part.gpu->name, part.stages, part.stages * p.tp * p.dp});
    for (int64_t j = 0; j < part.stages; ++j) {
      plan.stage_gpu_memory_bytes.push_back(part.gpu->memory_bytes);
    }
  }
  plan.gpus = p.gpus();
  plan.tp = p.tp;
  plan.pp = p.pp;
  plan.dp = p.dp;
  plan.distributed_optimizer = p.distributed_optimizer;
  plan.recompute = t.recompute;
  plan.precision = t.precision;
  plan.stage_layers = p.stage_layers;
  for (const StageEstimate& s : est->stages) {
    plan.stage_device_bytes.push_back(StageBytes(s, reading));
  }
  plan.iteration_s = perf->estimate.iteration_s;
  plan.tokens_per_s = perf->estimate.tokens_per_s;
  plan.mfu = perf->estimate.mfu;
  plan.total_s = job.tokens > 0 ? job.tokens / plan.tokens_per_s : 0;
  return plan;
}

}  // namespace

Result<MixedResult> PlanMixedPipelines(const JobSpec& job, const Cluster& cluster,
                                       const GpuCatalog& catalog, const PlannerOptions& options) {
  MixedResult out;
  const ModelSpec& m = job.model;
  // The family's layouts: no ZeRO, no context parallelism, micro-batch 1; a job or framework
  // that pins or needs otherwise gets none.
  if (!job.limits.pp || job.finetune != FineTune::kFull || job.gpu || (job.pp && *job.pp < 2) ||
      !job.limits.Allows(0) || (job.zero && *job.zero != 0) || (job.cp && *job.cp != 1) ||
      (job.micro_batch && *job.micro_batch != 1)) {
    return out;
  }
  std::vector<ClusterGpuType> types;
  for (const ClusterGpuType& t : ClusterGpuTypes(cluster, catalog)) {
    if (t.count > 0) types.push_back(t);
  }
  std::stable_sort(types.begin(), types.end(), [](const auto& a, const auto& b) {
    return a.gpu->memory_bytes > b.gpu->memory_bytes;  // the first stages on the largest
  });
  const size_t k = types.size();
  if (k < 2 || k > 12) return out;
  const int64_t global_batch = job.global_batch > 0 ? job.global_batch : 1;
  for (uint32_t mask = 1; mask < (1u << k); ++mask) {
    std::vector<const ClusterGpuType*> use;
    for (size_t i = 0; i < k; ++i) {
      if (mask & (1u << i)) use.push_back(&types[i]);
    }
    if (use.size() < 2 || use.size() > kMaxTypes) continue;
    // One precision for the pipeline: each type's (TrainingFor: fp8 to bf16 without FP8 tensor
    // cores, bf16 to fp16 or fp32 without bf16); where they differ, fp16 if the framework has
    // it, else fp32. FP8 is left to single-type plans.
    TrainingSpec t = TrainingFor(job, *use[0]->gpu);
    if (t.fp8()) t.precision = Precision::kBf16;
    for (const auto* u : use) {
      Precision q = TrainingFor(job, *u->gpu).precision;
      if (q == Precision::kFp8) q = Precision::kBf16;
      if (q != t.precision) t.precision = job.limits.fp16 ? Precision::kFp16 : Precision::kFp32;
    }
    int64_t node = use[0]->gpus_per_node;
    for (const auto* u : use) node = std::min(node, u->gpus_per_node);
    for (int64_t tp = 1; tp <= (job.limits.tp ? node : 1); tp *= 2) {
      if (job.tp && *job.tp != tp) continue;
      for (int64_t dp = 1; global_batch % dp == 0; dp *= 2) {
        std::vector<std::vector<int64_t>> choices;
        bool room = true;
        for (const auto* u : use) {
          const int64_t most = u->count / (tp * dp);
          room = room && most >= 1;
          choices.push_back(StageChoices(std::max<int64_t>(most, 1)));
        }
        if (!room) break;  // a larger dp has less room still
        if (job.dp && *job.dp != dp) continue;
        std::vector<size_t> pick(use.size(), 0);
        for (bool more = true; more;) {
          std::vector<StageGpus> parts;
          std::vector<double> rate, limit;
          int64_t pp = 0;
          for (size_t i = 0; i < use.size(); ++i) {
            const GpuType& g = *use[i]->gpu;
            const int64_t s = choices[i][pick[i]];
            parts.push_back({&g, Network{use[i]->gpus_per_node, use[i]->network_gbs}, s});
            pp += s;
            for (int64_t j = 0; j < s; ++j) {
              rate.push_back(PeakTflops(g, t.precision) * EfficiencyOf(g).matmul);
              limit.push_back(static_cast<double>(g.memory_bytes) / (1 + options.memory_margin));
            }
          }
          // The pins on the whole layout, before any prediction.
          const bool pinned_out = pp > m.num_layers || (job.pp && *job.pp != pp) ||
                                  (job.gpus && *job.gpus != tp * pp * dp);
          for (Recompute rc : {Recompute::kNone, Recompute::kFull}) {
            if (pinned_out) break;
            if (job.recompute && *job.recompute != rc) continue;
            if (rc != Recompute::kNone && !job.limits.recompute) continue;
            ParallelPlan p;
            p.tp = tp;
            p.pp = pp;
            p.dp = dp;
            p.distributed_optimizer = dp > 1 && job.framework == Framework::kMegatron;
            TrainingSpec ts = t;
            ts.recompute = rc;
            auto plan = Evaluate(job, ts, p, parts, rate, limit, options.reading,
                                 &out.layouts_considered);
            if (plan) out.plans.push_back(std::move(*plan));
          }
          // Next combination of stage counts.
          more = false;
          for (size_t i = 0; i < pick.size() && !more; ++i) {
            if (++pick[i] < choices[i].size()) {
              more = true;
            } else {
              pick[i] = 0;
            }
          }
        }
      }
    }
  }
  std::stable_sort(out.plans.begin(), out.plans.end(), [](const MixedPlan& a, const MixedPlan& b) {
    return a.tokens_per_s > b.tokens_per_s;  // fastest first
  });
  if (out.plans.size() > static_cast<size_t>(std::max<int64_t>(options.top, 1))) {
    out.plans.resize(static_cast<size_t>(std::max<int64_t>(options.top, 1)));
  }
  return out;
}

nlohmann::json MixedPlanToJson(const MixedPlan& p) {
  nlohmann::json parts = nlohmann::json::array();
  for (const MixedPart& part : p.parts) {
    parts.push_back({{"gpu", part.gpu}, {"stages", part.stages}, {"gpus", part.gpus}});
  }
  return {{"parts", parts},
          {"gpus", p.gpus},
          {"tp", p.tp},
          {"pp", p.pp},
          {"dp", p.dp},
          {"micro_batch", p.micro_batch},
          {"distributed_optimizer", p.distributed_optimizer},
          {"recompute", RecomputeName(p.recompute)},
          {"precision", PrecisionName(p.precision)},
          {"stage_layers", p.stage_layers},
          {"stage_device_bytes", p.stage_device_bytes},
          {"stage_gpu_memory_bytes", p.stage_gpu_memory_bytes},
          {"iteration_s", p.iteration_s},
          {"tokens_per_s", p.tokens_per_s},
          {"mfu", p.mfu},
          {"total_s", p.total_s}};
}

}  // namespace frenzy
