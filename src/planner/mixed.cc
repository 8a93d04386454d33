#include "planner/mixed.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <utility>

#include "memory/memory_model.h"
#include "perf/mixed_perf.h"

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

// One precision for the whole job: each type's (TrainingFor: fp8 to bf16 without FP8 tensor
// cores, bf16 to fp16 or fp32 without bf16); where they differ, fp16 if the framework has it,
// else fp32. FP8 is left to single-type plans.
TrainingSpec CommonTraining(const JobSpec& job, const std::vector<const ClusterGpuType*>& use) {
  TrainingSpec t = TrainingFor(job, *use[0]->gpu);
  if (t.fp8()) t.precision = Precision::kBf16;
  for (const auto* u : use) {
    Precision q = TrainingFor(job, *u->gpu).precision;
    if (q == Precision::kFp8) q = Precision::kBf16;
    if (q != t.precision) t.precision = job.limits.fp16 ? Precision::kFp16 : Precision::kFp32;
  }
  return t;
}

// The subsets of two to kMaxTypes of `types`, in their order.
std::vector<std::vector<const ClusterGpuType*>> TypeSubsets(
    const std::vector<ClusterGpuType>& types) {
  std::vector<std::vector<const ClusterGpuType*>> out;
  const size_t k = types.size();
  if (k < 2 || k > 12) return out;
  for (uint32_t mask = 1; mask < (1u << k); ++mask) {
    std::vector<const ClusterGpuType*> use;
    for (size_t i = 0; i < k; ++i) {
      if (mask & (1u << i)) use.push_back(&types[i]);
    }
    if (use.size() >= 2 && use.size() <= kMaxTypes) out.push_back(std::move(use));
  }
  return out;
}

void KeepFastest(MixedResult& out, int64_t top) {
  std::stable_sort(out.plans.begin(), out.plans.end(), [](const MixedPlan& a, const MixedPlan& b) {
    return a.tokens_per_s > b.tokens_per_s;  // fastest first
  });
  const size_t keep = static_cast<size_t>(std::max<int64_t>(top, 1));
  if (out.plans.size() > keep) out.plans.resize(keep);
}

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
  const int64_t global_batch = job.global_batch > 0 ? job.global_batch : 1;
  for (const auto& use : TypeSubsets(types)) {
    const TrainingSpec t = CommonTraining(job, use);
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
  KeepFastest(out, options.top);
  return out;
}

namespace {

// One type's group as the data-parallel search sizes it: its replicas, the micro-batch that
// fits, and its step's linear model in sequences per replica (t(s) = a + c s).
struct GroupFit {
  const ClusterGpuType* type = nullptr;
  int64_t dp = 0, micro_batch = 0;
  int64_t device_bytes = 0;
  double a = 0, c = 0;
};

// The largest micro-batch (1, 2, 4, 8, or the pinned one) whose memory fits `u` with the
// margin for `dp` replicas of the layout, with its bytes; nullopt when none fits.
std::optional<GroupFit> FitGroup(const JobSpec& job, const TrainingSpec& t, const ParallelPlan& p,
                                 const ClusterGpuType& u, int64_t dp,
                                 const PlannerOptions& options, int64_t* considered) {
  std::optional<GroupFit> best;
  const double limit = static_cast<double>(u.gpu->memory_bytes) / (1 + options.memory_margin);
  for (int64_t mb = 1; mb <= 8; mb *= 2) {
    if (job.micro_batch && *job.micro_batch != mb) continue;
    TrainingSpec tg = t;
    tg.micro_batch = mb;
    tg.global_batch = mb * dp * p.pp;  // at least pp micro-batches in flight: the worst
    ParallelPlan pg = p;
    pg.dp = dp;
    pg.distributed_optimizer = p.distributed_optimizer && dp > 1;
    ++*considered;
    auto est = PredictMemory(job.model, tg, pg, StageDetail::kWorst);
    if (!est.ok()) break;
    const int64_t bytes = ReadingBytes(options.reading, est->peak_bytes, est->peak_reserved_bytes,
                                       est->resident_bytes);
    if (static_cast<double>(bytes) > limit) break;  // a larger micro-batch needs more
    best = GroupFit{&u, dp, mb, bytes, 0, 0};
  }
  return best;
}

// The group's step time at s sequences per replica.
Result<double> GroupStep(const JobSpec& job, const TrainingSpec& t, const ParallelPlan& p,
                         const GroupFit& g, int64_t s) {
  TrainingSpec tg = t;
  tg.micro_batch = g.micro_batch;
  tg.global_batch = s * g.dp;
  ParallelPlan pg = p;
  pg.dp = g.dp;
  pg.distributed_optimizer = p.distributed_optimizer && g.dp > 1;
  ASSIGN_OR_RETURN(PerfEstimate e,
                   PredictPerf(job.model, tg, pg, *g.type->gpu,
                               Network{g.type->gpus_per_node, g.type->network_gbs}));
  return e.iteration_s;
}

// Sequences per replica of each group so that the groups finish together and their batches
// add up to `batch`; empty when some group would get none or the batch cannot be met in whole
// micro-batches.
std::vector<int64_t> BalanceBatch(const std::vector<GroupFit>& groups, int64_t batch) {
  // Continuous balance: a + c s = T for all, sum dp s = batch.
  double num = static_cast<double>(batch), den = 0;
  for (const GroupFit& g : groups) {
    num += static_cast<double>(g.dp) * g.a / g.c;
    den += static_cast<double>(g.dp) / g.c;
  }
  const double T = num / den;
  std::vector<int64_t> s(groups.size());
  int64_t rest = batch;
  for (size_t i = 0; i < groups.size(); ++i) {
    const GroupFit& g = groups[i];
    const double x = std::max(0.0, (T - g.a) / g.c);
    s[i] = static_cast<int64_t>(std::floor(x / static_cast<double>(g.micro_batch))) * g.micro_batch;
    rest -= s[i] * g.dp;
  }
  while (rest > 0) {  // the rest, a micro-batch at a time, to whoever finishes it soonest
    size_t pick = groups.size();
    double soonest = 0;
    for (size_t i = 0; i < groups.size(); ++i) {
      const GroupFit& g = groups[i];
      if (g.dp * g.micro_batch > rest) continue;
      const double t = g.a + g.c * static_cast<double>(s[i] + g.micro_batch);
      if (pick == groups.size() || t < soonest) pick = i, soonest = t;
    }
    if (pick == groups.size()) return {};
    s[pick] += groups[pick].micro_batch;
    rest -= groups[pick].dp * groups[pick].micro_batch;
  }
  if (rest < 0) return {};
  for (int64_t x : s) {
    if (x <= 0) return {};
  }
  return s;
}

// The plan of one set of groups with their balanced batches, timed; nullopt when impossible.
std::optional<MixedPlan> DataPlan(const JobSpec& job, const TrainingSpec& t, const ParallelPlan& p,
                                  const std::vector<GroupFit>& groups,
                                  const std::vector<int64_t>& per_replica) {
  std::vector<DataGroup> dg;
  for (size_t i = 0; i < groups.size(); ++i) {
    const GroupFit& g = groups[i];
    dg.push_back({g.type->gpu, Network{g.type->gpus_per_node, g.type->network_gbs}, g.dp,
                  g.micro_batch, per_replica[i] * g.dp});
  }
  auto perf = PredictMixedDataPerf(job.model, t, p, dg);
  if (!perf.ok()) return std::nullopt;
  MixedPlan plan;
  plan.family = MixedFamily::kData;
  plan.dp = 0;  // the groups' replicas, summed below
  for (size_t i = 0; i < groups.size(); ++i) {
    const GroupFit& g = groups[i];
    MixedPart part;
    part.gpu = g.type->gpu->name;
    part.stages = p.pp;
    part.dp = g.dp;
    part.gpus = g.dp * p.tp * p.pp;
    part.micro_batch = g.micro_batch;
    part.batch = dg[i].batch;
    part.accumulation = dg[i].accumulation();
    part.step_s = perf->group_step_s[i];
    part.device_bytes = g.device_bytes;
    part.gpu_memory_bytes = g.type->gpu->memory_bytes;
    plan.gpus += part.gpus;
    plan.dp += g.dp;
    plan.parts.push_back(std::move(part));
  }
  plan.tp = p.tp;
  plan.pp = p.pp;
  plan.micro_batch = 0;
  plan.zero = p.zero;
  plan.distributed_optimizer = p.distributed_optimizer;
  plan.recompute = t.recompute;
  plan.precision = t.precision;
  plan.cross_group_s = perf->cross_group_s;
  plan.iteration_s = perf->estimate.iteration_s;
  plan.tokens_per_s = perf->estimate.tokens_per_s;
  plan.mfu = perf->estimate.mfu;
  plan.total_s = job.tokens > 0 ? job.tokens / plan.tokens_per_s : 0;
  return plan;
}

// The ZeRO stages the family tries: Megatron's distributed optimizer (stage 0 with the flag),
// else each stage the framework has among 0 to 3 (and the pin).
std::vector<std::pair<int, bool>> ShardingChoices(const JobSpec& job) {
  std::vector<std::pair<int, bool>> out;
  if (job.framework == Framework::kMegatron) {
    if (!job.zero || *job.zero == 0) out.emplace_back(0, true);
    return out;
  }
  for (int z = 0; z <= 3; ++z) {
    if (job.limits.Allows(z) && (!job.zero || *job.zero == z)) out.emplace_back(z, false);
  }
  return out;
}

}  // namespace

Result<MixedResult> PlanMixedDataParallel(const JobSpec& job, const Cluster& cluster,
                                          const GpuCatalog& catalog,
                                          const PlannerOptions& options, bool every_count) {
  MixedResult out;
  const ModelSpec& m = job.model;
  if (job.finetune != FineTune::kFull || job.gpu || (job.cp && *job.cp != 1) ||
      (job.ep && *job.ep != 1) || job.global_batch < 2) {
    return out;
  }
  std::vector<ClusterGpuType> types;
  for (const ClusterGpuType& t : ClusterGpuTypes(cluster, catalog)) {
    if (t.count > 0) types.push_back(t);
  }
  for (const auto& use : TypeSubsets(types)) {
    const TrainingSpec base = CommonTraining(job, use);
    int64_t node = use[0]->gpus_per_node;
    for (const auto* u : use) node = std::min(node, u->gpus_per_node);
    for (int64_t tp = 1; tp <= (job.limits.tp ? node : 1); tp *= 2) {
      if (job.tp && *job.tp != tp) continue;
      for (int64_t pp = 1; pp <= std::min<int64_t>(8, m.num_layers); pp *= 2) {
        if ((job.pp && *job.pp != pp) || (pp > 1 && !job.limits.pp)) continue;
        for (auto [zero, dist_opt] : ShardingChoices(job)) {
          for (Recompute rc : {Recompute::kNone, Recompute::kFull}) {
            if (job.recompute && *job.recompute != rc) continue;
            if (rc != Recompute::kNone && !job.limits.recompute) continue;
            TrainingSpec t = base;
            t.recompute = rc;
            t.global_batch = job.global_batch;
            ParallelPlan p;
            p.tp = tp;
            p.pp = pp;
            p.zero = zero;
            p.distributed_optimizer = dist_opt;
            // Each type's groups: all the replicas it holds, or half of them.
            std::vector<std::vector<GroupFit>> fits;
            for (const auto* u : use) {
              std::vector<GroupFit> f;
              const int64_t most = u->count / (tp * pp);
              std::vector<int64_t> counts = StageChoices(std::max<int64_t>(most, 1));
              if (every_count) {
                counts = {most};
                for (int64_t n = 1; n < most; n *= 2) counts.push_back(n);
              }
              for (int64_t dp : counts) {
                if (most < 1) break;
                auto g = FitGroup(job, t, p, *u, dp, options, &out.layouts_considered);
                if (!g) continue;
                // The step's linear model from two points: one and two micro-batches a replica
                // per pipeline stage.
                const int64_t s1 = g->micro_batch * pp;
                auto t1 = GroupStep(job, t, p, *g, s1);
                auto t2 = GroupStep(job, t, p, *g, 2 * s1);
                if (!t1.ok() || !t2.ok() || !(*t2 > *t1)) continue;
                g->c = (*t2 - *t1) / static_cast<double>(s1);
                g->a = *t1 - g->c * static_cast<double>(s1);
                f.push_back(*g);
              }
              fits.push_back(std::move(f));
            }
            bool all = true;
            for (const auto& f : fits) all = all && !f.empty();
            if (!all) continue;
            std::vector<size_t> pick(fits.size(), 0);
            for (bool more = true; more;) {
              std::vector<GroupFit> groups;
              int64_t replicas = 0;
              for (size_t i = 0; i < fits.size(); ++i) {
                groups.push_back(fits[i][pick[i]]);
                replicas += groups.back().dp;
              }
              const bool pinned_out = (job.dp && *job.dp != replicas) ||
                                      (job.gpus && *job.gpus != replicas * tp * pp);
              std::vector<int64_t> s;
              if (!pinned_out) s = BalanceBatch(groups, job.global_batch);
              if (!s.empty()) {
                if (auto plan = DataPlan(job, t, p, groups, s)) out.plans.push_back(*plan);
              }
              more = false;
              for (size_t i = 0; i < pick.size() && !more; ++i) {
                if (++pick[i] < fits[i].size()) {
                  more = true;
                } else {
                  pick[i] = 0;
                }
              }
            }
          }
        }
      }
    }
  }
  KeepFastest(out, options.top);
  return out;
}

Result<MixedResult> PlanMixed(const JobSpec& job, const Cluster& cluster,
                              const GpuCatalog& catalog, const PlannerOptions& options,
                              double best_single_tokens_per_s) {
  ASSIGN_OR_RETURN(MixedResult out, PlanMixedDataParallel(job, cluster, catalog, options));
  if (best_single_tokens_per_s > 0) {
    std::erase_if(out.plans, [&](const MixedPlan& p) {
      return !(p.tokens_per_s > best_single_tokens_per_s);
    });
    return out;
  }
  ASSIGN_OR_RETURN(MixedResult pipes, PlanMixedPipelines(job, cluster, catalog, options));
  out.layouts_considered += pipes.layouts_considered;
  for (MixedPlan& p : pipes.plans) out.plans.push_back(std::move(p));
  KeepFastest(out, options.top);
  return out;
}

const char* MixedFamilyName(MixedFamily f) {
  return f == MixedFamily::kData ? "data" : "pipeline";
}

nlohmann::json MixedPlanToJson(const MixedPlan& p) {
  nlohmann::json parts = nlohmann::json::array();
  for (const MixedPart& part : p.parts) {
    nlohmann::json j = {{"gpu", part.gpu}, {"stages", part.stages}, {"gpus", part.gpus}};
    if (p.family == MixedFamily::kData) {
      j.update({{"dp", part.dp},
                {"micro_batch", part.micro_batch},
                {"batch", part.batch},
                {"accumulation", part.accumulation},
                {"step_s", part.step_s},
                {"device_bytes", part.device_bytes},
                {"gpu_memory_bytes", part.gpu_memory_bytes}});
    }
    parts.push_back(std::move(j));
  }
  nlohmann::json j = {{"family", MixedFamilyName(p.family)},
          {"parts", parts},
          {"gpus", p.gpus},
          {"tp", p.tp},
          {"pp", p.pp},
          {"dp", p.dp},
          {"micro_batch", p.micro_batch},
          {"zero", p.zero},
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
  if (p.family == MixedFamily::kData) {
    j.erase("stage_layers");
    j.erase("stage_device_bytes");
    j.erase("stage_gpu_memory_bytes");
    j["cross_group_s"] = p.cross_group_s;
  }
  return j;
}

}  // namespace frenzy
