#include "planner/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/core.h>

#include "memory/memory_model.h"
#include "perf/perf_model.h"

namespace frenzy {
namespace {

using TypeInfo = ClusterGpuType;

std::vector<int64_t> Divisors(int64_t n, int64_t limit) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= std::min(n, limit); ++i) {
    if (n % i == 0) d.push_back(i);
  }
  return d;
}

std::vector<int64_t> PinnedOr(const std::optional<int64_t>& pin, std::vector<int64_t> all) {
  if (pin) return {*pin};
  return all;
}

std::string Duration(double s) {
  if (s < 3600) return fmt::format("{:.0f} min", s / 60);
  if (s < 86400 * 2) return fmt::format("{:.1f} h", s / 3600);
  return fmt::format("{:.1f} days", s / 86400);
}

std::string Gib(int64_t b) { return fmt::format("{:.0f}", static_cast<double>(b) / (1 << 30)); }

}  // namespace

std::vector<ClusterGpuType> ClusterGpuTypes(const Cluster& c, const GpuCatalog& cat) {
  std::vector<ClusterGpuType> out;
  for (const auto& node : c.nodes) {
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const ClusterGpuType& t) { return t.gpu->name == node.gpu; });
    if (it == out.end()) {
      const GpuType* g = cat.Find(node.gpu);
      if (g == nullptr) continue;
      out.push_back({g, 0, 0, node.network_gbs});
      it = out.end() - 1;
    }
    it->count += node.gpus;
    it->gpus_per_node = std::max(it->gpus_per_node, node.gpus);
    it->network_gbs = std::min(it->network_gbs, node.network_gbs);
  }
  return out;
}

Result<PlanResult> PlanJob(const JobSpec& job, const Cluster& cluster, const GpuCatalog& catalog,
                           const PlannerOptions& opt) {
  if (!(job.tokens > 0)) return InvalidArgument("must be positive", {}, "tokens");
  if (job.global_batch < 1) return InvalidArgument("must be at least 1", {}, "global_batch");
  if (job.seq_len < 1) return InvalidArgument("must be at least 1", {}, "seq_len");
  std::vector<TypeInfo> types = ClusterGpuTypes(cluster, catalog);
  if (job.gpu) {
    const GpuType* pinned = catalog.Find(*job.gpu);
    if (pinned == nullptr) return NotFound("unknown GPU type '" + *job.gpu + "'", {}, "gpu");
    std::erase_if(types, [&](const TypeInfo& t) { return t.gpu != pinned; });
    if (types.empty()) {
      return InvalidArgument("the cluster has no " + pinned->name + " GPUs", {}, "gpu");
    }
  }
  const ModelSpec& m = job.model;
  PlanResult result;
  std::vector<Plan> fitting;
  fitting.reserve(4096);
  // Best effort when nothing fits: per GPU type, the layout needing the least memory per GPU.
  int64_t least_device = std::numeric_limits<int64_t>::max();
  Plan least;
  std::vector<Plan> least_per_type;
  std::string first_error;  // why layouts were impossible, when all were

  for (const TypeInfo& ti : types) {
    const GpuType& g = *ti.gpu;
    least_device = std::numeric_limits<int64_t>::max();
    least = Plan{};
    TrainingSpec t;
    if (m.arch == ArchKind::kEncoder) t.head = HeadType::kMaskedLm;
    t.seq_len = job.seq_len;
    t.global_batch = job.global_batch;
    t.framework = job.framework;
    t.precision = job.precision;
    if ((t.precision == Precision::kBf16 || t.precision == Precision::kBf16Pure) &&
        !g.bf16_tflops) {
      t.precision = Precision::kFp16;  // no bf16 tensor cores (V100, T4): fp16 mixed precision
    }
    Network net{ti.gpus_per_node, ti.network_gbs};
    const int64_t usable = static_cast<int64_t>(static_cast<double>(g.memory_bytes) /
                                                (1.0 + opt.memory_margin));
    auto tps = PinnedOr(job.tp, Divisors(ti.gpus_per_node, ti.gpus_per_node));
    auto pps = PinnedOr(job.pp, Divisors(m.num_layers, ti.count));
    auto cps = PinnedOr(job.cp, job.seq_len >= 16384 ? std::vector<int64_t>{1, 2, 4, 8}
                                                     : std::vector<int64_t>{1});
    auto mbs = PinnedOr(job.micro_batch, {1, 2, 4, 8});
    std::vector<int64_t> zeros;
    if (job.zero) {
      zeros = {*job.zero};
    } else if (job.framework == Framework::kDeepSpeed || job.framework == Framework::kFsdp) {
      zeros = {0, 1, 2, 3};
    } else {
      zeros = {0};
    }
    // With fused (flash) attention, which the planner assumes, selective recomputation has
    // nothing left to drop (the attention core keeps no s x s tensors), so the choice is
    // between keeping everything and recomputing whole layers.
    std::vector<Recompute> rcs = {Recompute::kNone, Recompute::kFull};
    if (job.recompute) rcs = {*job.recompute};

    for (int64_t tp : tps) {
      for (int64_t pp : pps) {
        for (int64_t cp : cps) {
          int64_t max_dp = ti.count / (tp * pp * cp);
          if (max_dp < 1) continue;
          auto dps = PinnedOr(job.dp, Divisors(job.global_batch, max_dp));
          for (int64_t dp : dps) {
            int64_t n = tp * pp * cp * dp;
            if (n > ti.count || (job.gpus && n != *job.gpus)) continue;
            for (int64_t zero : zeros) {
              for (int64_t mb : mbs) {
                if (job.global_batch % (mb * dp) != 0) continue;
                ParallelPlan p;
                p.tp = tp;
                p.pp = pp;
                p.cp = cp;
                p.dp = dp;
                p.zero = static_cast<int>(zero);
                p.sequence_parallel = tp > 1 && job.framework == Framework::kMegatron;
                p.distributed_optimizer = dp > 1 && job.framework == Framework::kMegatron;
                t.micro_batch = mb;
                bool any_fit = false;
                // Less recomputation is faster: the first that fits is the one to keep.
                for (Recompute rc : rcs) {
                  t.recompute = rc;
                  auto mem = PredictMemory(m, t, p, StageDetail::kWorst);
                  ++result.layouts_considered;
                  if (!mem.ok()) {  // the layout itself is impossible
                    if (first_error.empty()) {
                      first_error = mem.status().field() + ": " + mem.status().message();
                    }
                    break;
                  }
                  auto make_plan = [&] {
                    Plan plan;
                    plan.gpu = g.name;
                    plan.gpus = n;
                    plan.tp = tp;
                    plan.pp = pp;
                    plan.dp = dp;
                    plan.cp = cp;
                    plan.micro_batch = mb;
                    plan.zero = zero;
                    plan.distributed_optimizer = p.distributed_optimizer;
                    plan.recompute = rc;
                    plan.peak_bytes = mem->peak_bytes;
                    plan.device_bytes = mem->device_bytes;
                    plan.gpu_memory_bytes = g.memory_bytes;
                    return plan;
                  };
                  if (mem->device_bytes < least_device) {
                    least_device = mem->device_bytes;
                    least = make_plan();
                  }
                  if (mem->device_bytes > usable) continue;
                  auto perf = PredictPerf(m, t, p, g, net);
                  if (!perf.ok()) break;
                  Plan plan = make_plan();
                  plan.iteration_s = perf->iteration_s;
                  plan.tokens_per_s = perf->tokens_per_s;
                  plan.mfu = perf->mfu;
                  plan.total_s = job.tokens / perf->tokens_per_s;
                  if (g.price_per_hour) {
                    plan.cost = plan.total_s / 3600.0 * static_cast<double>(n) * *g.price_per_hour;
                  }
                  ++result.layouts_fitting;
                  bool late = job.deadline_s && plan.total_s > *job.deadline_s;
                  bool dear = job.budget && plan.cost && *plan.cost > *job.budget;
                  if (!late && !dear) fitting.push_back(plan);
                  any_fit = true;
                  break;
                }
                // Bigger micro-batches need more memory: stop once even full recompute fails.
                if (!any_fit && !job.micro_batch) break;
              }
            }
          }
        }
      }
    }
    if (least.gpus > 0) least_per_type.push_back(least);
  }

  if (fitting.empty()) {
    if (result.layouts_fitting > 0) {
      result.explanation = "plans fit in memory, but none meets the deadline or budget";
    } else if (least_per_type.empty()) {
      result.explanation = "no layout of this model is possible here" +
                           (first_error.empty() ? std::string(" with these pins")
                                                : " (" + first_error + ")");
    } else {
      result.explanation = "no plan fits this cluster:";
      for (size_t i = 0; i < least_per_type.size(); ++i) {
        const Plan& l = least_per_type[i];
        result.explanation += fmt::format(
            " {} ({} GiB): at least {} GiB per GPU even on {} of them (TP={} PP={} DP={}, {} "
            "recomputation){}",
            l.gpu, Gib(l.gpu_memory_bytes),
            Gib(static_cast<int64_t>(static_cast<double>(l.device_bytes) *
                                     (1.0 + opt.memory_margin))),
            l.gpus, l.tp, l.pp, l.dp, RecomputeName(l.recompute),
            i + 1 < least_per_type.size() ? ";" : ".");
      }
      // What would fit: the fewest GPUs of this cluster's largest-memory type that hold the
      // job, found by planning on the same nodes multiplied (up to 4,096 GPUs).
      const TypeInfo* biggest = &types[0];
      for (const auto& ti : types) {
        if (ti.gpu->memory_bytes > biggest->gpu->memory_bytes) biggest = &ti;
      }
      std::string would_fit;
      if (!job.gpus) {
        for (int64_t factor = 2; biggest->count * factor <= 4096 && would_fit.empty();
             factor *= 2) {
          Cluster bigger;
          bigger.name = "hypothetical";
          int64_t nodes = (biggest->count * factor + biggest->gpus_per_node - 1) /
                          biggest->gpus_per_node;
          for (int64_t i = 0; i < nodes; ++i) {
            bigger.nodes.push_back({"n" + std::to_string(i), biggest->gpu->name,
                                    biggest->gpus_per_node, biggest->network_gbs});
          }
          JobSpec pinned = job;
          pinned.gpu = biggest->gpu->name;
          PlannerOptions quick = opt;
          quick.top = 1;
          auto r = PlanJob(pinned, bigger, catalog, quick);
          if (r.ok() && !r->pareto.empty()) {
            const Plan& f = r->pareto.front();
            would_fit = fmt::format(
                " It would fit on {} x {} (TP={} PP={} DP={}, {} recomputation); this cluster has "
                "{}.",
                f.gpus, f.gpu, f.tp, f.pp, f.dp, RecomputeName(f.recompute), biggest->count);
          }
        }
      }
      result.explanation +=
          would_fit.empty()
              ? std::string(" More GPUs of a type (to shard further) or GPUs with more memory "
                            "would fit it.")
              : would_fit;
    }
    return result;
  }

  // Pareto set over (gpus, time): by GPUs then time, keep the strictly faster ones. Indices are
  // sorted, not the plans themselves (a planner call sees thousands of fitting layouts).
  std::vector<size_t> order(fitting.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Plan& x = fitting[a];
    const Plan& y = fitting[b];
    return x.gpus != y.gpus ? x.gpus < y.gpus : x.total_s < y.total_s;
  });
  double best_time = std::numeric_limits<double>::infinity();
  for (size_t i : order) {
    if (fitting[i].total_s < best_time) {
      best_time = fitting[i].total_s;
      fitting[i].pareto = true;
      result.pareto.push_back(fitting[i]);
    }
  }

  auto score = [&](const Plan& pl) {
    double cost = pl.cost.value_or(std::numeric_limits<double>::infinity());
    switch (opt.objective) {
      case Objective::kTime:
        return pl.total_s;
      case Objective::kCost:
        return cost;
      case Objective::kMix:
        // Geometric mean of time and cost: a plan twice as fast at twice the cost ties.
        return std::sqrt(pl.total_s * cost);
    }
    return pl.total_s;
  };
  size_t top = std::min(order.size(), static_cast<size_t>(std::max<int64_t>(0, opt.top)));
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(top), order.end(),
                    [&](size_t a, size_t b) {
                      double sa = score(fitting[a]), sb = score(fitting[b]);
                      if (sa != sb) return sa < sb;
                      return fitting[a].gpus < fitting[b].gpus;
                    });
  for (size_t k = 0; k < top; ++k) result.plans.push_back(fitting[order[k]]);
  if (result.plans.empty()) {
    result.explanation = "no plans requested (--top 0)";
    return result;
  }
  const Plan& w = result.plans.front();
  const char* why = opt.objective == Objective::kCost ? "cheapest"
                    : opt.objective == Objective::kMix ? "best time x cost"
                                                       : "fastest";
  result.explanation = fmt::format(
      "{} plan: {} x {} (TP {}, PP {}, DP {}{}, micro-batch {}, {} recomputation) trains in {} "
      "at {:.0f}% MFU; {} of {} GiB per GPU",
      why, w.gpus, w.gpu, w.tp, w.pp, w.dp, w.cp > 1 ? fmt::format(", CP {}", w.cp) : "",
      w.micro_batch, RecomputeName(w.recompute), Duration(w.total_s), 100 * w.mfu,
      Gib(w.device_bytes), Gib(w.gpu_memory_bytes));
  return result;
}

nlohmann::json PlanToJson(const Plan& p) {
  nlohmann::json j = {{"gpu", p.gpu},
                      {"gpus", p.gpus},
                      {"tp", p.tp},
                      {"pp", p.pp},
                      {"dp", p.dp},
                      {"cp", p.cp},
                      {"micro_batch", p.micro_batch},
                      {"zero", p.zero},
                      {"distributed_optimizer", p.distributed_optimizer},
                      {"recompute", RecomputeName(p.recompute)},
                      {"peak_bytes", p.peak_bytes},
                      {"device_bytes", p.device_bytes},
                      {"gpu_memory_bytes", p.gpu_memory_bytes},
                      {"iteration_s", p.iteration_s},
                      {"tokens_per_s", p.tokens_per_s},
                      {"mfu", p.mfu},
                      {"total_s", p.total_s},
                      {"pareto", p.pareto}};
  j["cost"] = p.cost ? nlohmann::json(*p.cost) : nlohmann::json(nullptr);
  return j;
}

}  // namespace frenzy
