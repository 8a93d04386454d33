#include "planner/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "memory/memory_model.h"
#include "perf/perf_model.h"

// The pipeline of PlanJob, one function per stage: the layouts of a GPU type are enumerated
// (EnumerateLayouts), each is fitted into memory with the least recomputation that fits
// (FitLayout), the ones that fit are scored (ScorePlan: speed, time and cost; MeetsGoals:
// deadline and budget), and what remains is ranked (ParetoSet, TopByObjective). When nothing
// remains, Diagnose says why, and WhatWouldFit plans the job on a bigger hypothetical cluster.

namespace frenzy {

const char* ReadingName(Reading r) {
  switch (r) {
    case Reading::kAllocated:
      return "allocated";
    case Reading::kReserved:
      return "reserved";
    case Reading::kDevice:
      return "device";
  }
  return "device";
}

std::optional<Reading> ParseReading(std::string_view s) {
  for (Reading r : {Reading::kAllocated, Reading::kReserved, Reading::kDevice}) {
    if (s == ReadingName(r)) return r;
  }
  return std::nullopt;
}

int64_t ReadingBytes(Reading r, int64_t allocated, int64_t reserved, int64_t resident) {
  switch (r) {
    case Reading::kAllocated:
      return allocated;
    case Reading::kReserved:
      return reserved;
    case Reading::kDevice:
      break;
  }
  return resident;
}

namespace {

}  // namespace

int64_t JudgedBytes(const Plan& p, Reading r) {
  return ReadingBytes(r, p.peak_bytes, p.reserved_bytes, p.resident_bytes);
}

bool LayoutLimits::Allows(int64_t zero) const {
  return zeros.empty() || std::find(zeros.begin(), zeros.end(), zero) != zeros.end();
}

bool EvenOverNodes(int64_t gpus, int64_t per_node, int64_t tp) {
  if (per_node <= 0) return true;
  const int64_t nodes = (gpus + per_node - 1) / per_node;
  return gpus % nodes == 0 && (gpus / nodes) % std::max<int64_t>(1, tp) == 0;
}

bool LayoutLimits::Allows(Offload o) const {
  if (o == Offload::kNone) return true;
  return offloads.empty() || std::find(offloads.begin(), offloads.end(), o) != offloads.end();
}
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

Status ValidateJob(const JobSpec& job) {
  if (!(job.tokens > 0)) return InvalidArgument("must be positive", {}, "tokens");
  if (job.global_batch < 1) return InvalidArgument("must be at least 1", {}, "global_batch");
  if (job.seq_len < 1) return InvalidArgument("must be at least 1", {}, "seq_len");
  return Status::Ok();
}

// The cluster's GPU types the job may use: all of them, or the pinned one.
Result<std::vector<TypeInfo>> TypesFor(const JobSpec& job, const Cluster& cluster,
                                       const GpuCatalog& catalog) {
  std::vector<TypeInfo> types = ClusterGpuTypes(cluster, catalog);
  if (!job.gpu) return types;
  const GpuType* pinned = catalog.Find(*job.gpu);
  if (pinned == nullptr) return NotFound("unknown GPU type '" + *job.gpu + "'", {}, "gpu");
  std::erase_if(types, [&](const TypeInfo& t) { return t.gpu != pinned; });
  if (types.empty()) {
    return InvalidArgument("the cluster has no " + pinned->name + " GPUs", {}, "gpu");
  }
  return types;
}


// A recomputation the search tries: its kind and, for kFull, every how many layers.
struct RecomputeChoice {
  Recompute kind = Recompute::kNone;
  int64_t every = 1;
};

// The values of each dimension tried on one GPU type; a pin is the only value of its dimension.
// DP is not here: its values depend on TP x PP x CP.
struct Candidates {
  std::vector<int64_t> tps, pps, cps, eps, mbs, zeros;
  std::vector<RecomputeChoice> rcs;  // least recomputation first
  std::vector<Offload> offloads = {Offload::kNone};
};

// Offload modes a framework has, for a ZeRO stage (ValidateLayout's rules, so that the search
// never counts a combination the framework lacks as an impossible layout).
bool OffloadFits(Framework f, int64_t zero, Offload o) {
  switch (o) {
    case Offload::kNone:
      return true;
    case Offload::kOptimizer:
      return f == Framework::kDeepSpeed && zero >= 1;
    case Offload::kParams:
      return (f == Framework::kDeepSpeed || f == Framework::kFsdp) && zero == 3;
  }
  return false;
}

// Drops what the job's framework cannot run (JobSpec::limits). A pin outside the limits leaves
// its dimension empty: no layout, and the planner says the pins allow none.
void ApplyLimits(const JobSpec& job, Candidates* c) {
  const LayoutLimits& l = job.limits;
  auto only_one = [](std::vector<int64_t>& v) { std::erase_if(v, [](int64_t x) { return x != 1; }); };
  if (!l.tp) only_one(c->tps);
  if (!l.pp) only_one(c->pps);
  if (!l.cp) only_one(c->cps);
  if (!l.ep) only_one(c->eps);
  std::erase_if(c->zeros, [&](int64_t z) { return !l.Allows(z); });
  std::erase_if(c->rcs, [&](const RecomputeChoice& r) {
    if (r.kind == Recompute::kNone) return false;
    return !l.recompute || (r.every > 1 && !l.recompute_every);
  });
  std::erase_if(c->offloads, [&](Offload o) { return !l.Allows(o); });
}

Candidates CandidatesFor(const JobSpec& job, const TypeInfo& ti) {
  Candidates c;
  // Adapter fine-tuning runs data parallel (PEFT): TP, PP and CP are tried only when pinned
  // (and then refused by ValidateLayout with its reason).
  const bool adapters = job.finetune != FineTune::kFull;
  c.tps = PinnedOr(job.tp, adapters ? std::vector<int64_t>{1}
                                    : Divisors(ti.gpus_per_node, ti.gpus_per_node));
  c.pps = PinnedOr(job.pp, adapters ? std::vector<int64_t>{1}
                                    : Divisors(job.model.num_layers, ti.count));
  c.cps = PinnedOr(job.cp, job.seq_len >= 16384 && !adapters ? std::vector<int64_t>{1, 2, 4, 8}
                                                             : std::vector<int64_t>{1});
  // Expert parallelism: MoE models in full training, under the frameworks that have it
  // (Megatron-LM, DeepSpeed-MoE, torchtitan); any divisor of the experts (and of dp x cp).
  const bool ep = job.model.moe.enabled() && !adapters && job.framework != Framework::kHf;
  c.eps = PinnedOr(job.ep, ep ? Divisors(job.model.moe.num_experts, job.model.moe.num_experts)
                              : std::vector<int64_t>{1});
  c.mbs = PinnedOr(job.micro_batch, {1, 2, 4, 8});
  if (job.zero) {
    c.zeros = {*job.zero};
  } else if (job.framework == Framework::kDeepSpeed || job.framework == Framework::kFsdp) {
    c.zeros = {0, 1, 2, 3};
  } else {
    c.zeros = {0};
  }
  // With fused (flash) attention, which the planner assumes, selective recomputation has
  // nothing left to drop (the attention core keeps no s x s tensors), so the choice is
  // between keeping everything and recomputing whole layers.
  c.rcs = {{Recompute::kNone, 1}, {Recompute::kFull, 1}};
  if (job.framework == Framework::kFsdp && !adapters) {
    // torchtitan checkpoints every Nth block too (selective_ac_option = "N"): between keeping
    // everything and recomputing every layer.
    c.rcs = {{Recompute::kNone, 1}, {Recompute::kFull, 4}, {Recompute::kFull, 2},
             {Recompute::kFull, 1}};
  }
  if (job.recompute) c.rcs = {{*job.recompute, 1}};
  if (job.offload) c.offloads = {*job.offload};
  ApplyLimits(job, &c);
  return c;
}

// The offload modes worth a second search when nothing fits without: those of the job's
// framework (for a fine-tune, FSDP's CPUOffload only: what MARP models of it); none when the job
// pins offload (its first search tried it).
std::vector<Offload> OffloadsToTry(const JobSpec& job) {
  if (job.offload) return {};
  if (job.finetune != FineTune::kFull && job.framework != Framework::kFsdp) return {};
  std::vector<Offload> modes;
  if (job.framework == Framework::kDeepSpeed) modes = {Offload::kOptimizer, Offload::kParams};
  if (job.framework == Framework::kFsdp) modes = {Offload::kParams};
  std::erase_if(modes, [&](Offload o) { return !job.limits.Allows(o); });
  return modes;
}

// One layout short of its recomputation: the parallel plan, micro-batch and GPU count.
struct Layout {
  ParallelPlan p;
  int64_t micro_batch = 1;
  int64_t gpus = 0;
};

// The ZeRO stages, offload modes and micro-batches of one parallel layout (micro-batches
// smallest first; see EnumerateLayouts).
// The hybrid shard groups worth trying for a layout: 0 (shard over every data-parallel rank),
// and under PyTorch FSDP a node's data-parallel ranks when the layout spans nodes (HSDP: the
// all-gathers stay on the node, only a shard's gradient crosses the network). Data parallel
// layouts only (no PP, CP or EP), as torchtitan's and Accelerate's HSDP meshes are planned.
std::vector<int64_t> ShardGroups(const JobSpec& job, const ParallelPlan& base, int64_t zero,
                                 int64_t per_node) {
  std::vector<int64_t> groups = {0};
  const int64_t s = per_node / base.tp;
  if (zero >= 2 && job.framework == Framework::kFsdp && job.limits.hybrid_shard &&
      base.pp == 1 && base.cp == 1 && base.ep == 1 && per_node % base.tp == 0 && s >= 1 &&
      base.dp > s && base.dp % s == 0) {
    groups.push_back(s);
  }
  return groups;
}

template <typename Visit>
void EnumerateStates(const JobSpec& job, const Candidates& c, ParallelPlan base, int64_t gpus,
                     int64_t per_node, Visit& visit) {
  for (int64_t zero : c.zeros) {
    // DeepSpeed-MoE does not run under ZeRO-3 (ValidateLayout's rule): not a layout to count.
    if (job.framework == Framework::kDeepSpeed && zero >= 3 && base.ep > 1 && !job.zero) continue;
    for (int64_t group : ShardGroups(job, base, zero, per_node)) {
      for (Offload off : c.offloads) {
        if (!OffloadFits(job.framework, zero, off) && !job.offload) continue;
        for (int64_t mb : c.mbs) {
          if (job.global_batch % (mb * base.dp) != 0) continue;
          Layout l;
          l.p = base;
          l.p.offload = off;
          l.p.zero = static_cast<int>(zero);
          l.p.shard_group = group;
          l.micro_batch = mb;
          l.gpus = gpus;
          if (!visit(l) && !job.micro_batch) break;
        }
      }
    }
  }
}

// Calls visit(layout) for every layout of one GPU type, in a fixed order (TP, PP, CP, DP, EP,
// expert TP, ZeRO, micro-batch, outermost first). visit returns whether the layout fits;
// micro-batches are tried smallest first, and once one does not fit the larger ones (which need
// more memory) are skipped, unless the micro-batch is pinned.
template <typename Visit>
void EnumerateLayouts(const JobSpec& job, const TypeInfo& ti, const Candidates& c, Visit visit) {
  const bool megatron = job.framework == Framework::kMegatron;
  for (int64_t tp : c.tps) {
    for (int64_t pp : c.pps) {
      for (int64_t cp : c.cps) {
        int64_t max_dp = ti.count / (tp * pp * cp);
        if (max_dp < 1) continue;
        for (int64_t dp : PinnedOr(job.dp, Divisors(job.global_batch, max_dp))) {
          int64_t n = tp * pp * cp * dp;
          if (n > ti.count || (job.gpus && n != *job.gpus)) continue;
          if (job.limits.even_nodes && !EvenOverNodes(n, ti.gpus_per_node, tp)) continue;
          ParallelPlan p;
          p.tp = tp;
          p.pp = pp;
          p.cp = cp;
          p.dp = dp;
          p.sequence_parallel = tp > 1 && megatron;
          p.distributed_optimizer = dp > 1 && megatron;
          // Megatron-LM's experts may skip TP (--expert-tensor-parallel-size 1, as its
          // performance recipes run them): tried beside etp = tp; EP then folds over the TP
          // ranks too.
          const bool etp1 =
              tp > 1 && megatron && job.model.moe.enabled() && job.finetune == FineTune::kFull;
          for (int64_t ep : c.eps) {
            p.ep = ep;
            if ((dp * cp) % ep == 0 || job.ep) {
              p.etp = 0;  // = tp
              EnumerateStates(job, c, p, n, ti.gpus_per_node, visit);
            }
            if (etp1 && (tp * dp * cp) % ep == 0) {
              p.etp = 1;
              EnumerateStates(job, c, p, n, ti.gpus_per_node, visit);
            }
          }
        }
      }
    }
  }
}

// A plan's layout and memory; speed, time and cost are ScorePlan's.
Plan MakePlan(const GpuType& g, const TrainingSpec& t, const Layout& l, RecomputeChoice rc,
              const MemoryEstimate& mem) {
  Plan plan;
  plan.precision = t.precision;
  plan.gpu = g.name;
  plan.gpus = l.gpus;
  plan.tp = l.p.tp;
  plan.pp = l.p.pp;
  plan.dp = l.p.dp;
  plan.cp = l.p.cp;
  plan.ep = l.p.ep;
  plan.etp = l.p.expert_tp();
  plan.micro_batch = l.micro_batch;
  plan.zero = l.p.zero;
  plan.shard_group = l.p.shard_group;
  plan.distributed_optimizer = l.p.distributed_optimizer;
  plan.recompute = rc.kind;
  plan.recompute_every = t.recompute_every;
  plan.offload = l.p.offload;
  plan.offload_activations = t.offload_activations;
  plan.peak_bytes = mem.peak_bytes;
  plan.reserved_bytes = mem.peak_reserved_bytes;
  plan.device_bytes = mem.device_bytes;
  plan.resident_bytes = mem.resident_bytes;
  plan.gpu_memory_bytes = g.memory_bytes;
  return plan;
}

// Adds speed, time to train the job's tokens and cost (GPU-hours x the catalog price).
void ScorePlan(const JobSpec& job, const GpuType& g, const PerfEstimate& perf, Plan* plan) {
  plan->iteration_s = perf.iteration_s;
  plan->tokens_per_s = perf.tokens_per_s;
  plan->mfu = perf.mfu;
  plan->total_s = job.tokens / perf.tokens_per_s;
  if (g.price_per_hour) {
    plan->cost = plan->total_s / 3600.0 * static_cast<double>(plan->gpus) * *g.price_per_hour;
  }
}

bool MeetsGoals(const JobSpec& job, const Plan& plan) {
  bool late = job.deadline_s && plan.total_s > *job.deadline_s;
  // A GPU whose price is unknown cannot be shown to meet a budget: unknown is never free.
  bool dear = job.budget && (!plan.cost || *plan.cost > *job.budget);
  return !late && !dear;
}

// What the search over every layout of every GPU type found.
struct Search {
  std::vector<Plan> meeting_goals;  // fit in memory and meet the deadline and budget
  int64_t considered = 0;
  int64_t fitting = 0;
  std::vector<Plan> least_per_type;  // per GPU type, the layout needing the least memory
  std::optional<LayoutError> first_error;
  // Offloaded layouts that fit the GPU but not the nodes' host memory: the least host memory
  // per node (with the margin) one of them needs, and what that type's nodes have.
  int64_t least_host_needed = std::numeric_limits<int64_t>::max();
  int64_t host_memory = 0;
};

// The search of one GPU type: each of its layouts fitted and scored into a Search.
class TypeSearch {
 public:
  TypeSearch(const JobSpec& job, const TypeInfo& ti, const PlannerOptions& opt, Search* s)
      : job_(job),
        ti_(ti),
        t_(TrainingFor(job, *ti.gpu)),
        net_{ti.gpus_per_node, ti.network_gbs},
        usable_bytes_(static_cast<int64_t>(static_cast<double>(ti.gpu->memory_bytes) /
                                           (1.0 + opt.memory_margin))),
        host_margin_(opt.host_margin),
        reading_(opt.reading),
        s_(s) {}

  // The reading a layout's fit is judged on (PlannerOptions::reading).
  int64_t Judged(const MemoryEstimate& m) const {
    return ReadingBytes(reading_, m.peak_bytes, m.peak_reserved_bytes, m.resident_bytes);
  }

  // Fits one layout with the least recomputation whose memory fits (less recomputation is
  // faster: the first that fits is the one to keep); returns whether one did.
  bool FitLayout(const Layout& l, const std::vector<RecomputeChoice>& rcs) {
    const GpuType& g = *ti_.gpu;
    t_.micro_batch = l.micro_batch;
    for (RecomputeChoice rc : rcs) {
      t_.recompute = rc.kind;
      t_.recompute_every = rc.kind == Recompute::kFull ? rc.every : 1;
      auto mem = PredictMemory(job_.model, t_, l.p, StageDetail::kWorst);
      ++s_->considered;
      if (!mem.ok()) {  // the layout itself is impossible
        if (!s_->first_error) {
          s_->first_error = LayoutError{mem.status().field(), mem.status().message()};
        }
        return false;
      }
      const int64_t judged = Judged(*mem);
      if (judged < least_device_) {
        least_device_ = judged;
        least_ = MakePlan(g, t_, l, rc, *mem);
      }
      if (judged > usable_bytes_) continue;
      // Offloaded states of the job's ranks on one node, in that node's host memory.
      const int64_t host_node = mem->host_bytes * std::min(ti_.gpus_per_node, l.gpus);
      if (host_node > 0) {
        const auto needed =
            static_cast<int64_t>(static_cast<double>(host_node) * (1.0 + host_margin_));
        if (needed > ti_.host_memory_bytes) {
          if (needed < s_->least_host_needed) {
            s_->least_host_needed = needed;
            s_->host_memory = ti_.host_memory_bytes;
          }
          // More recomputation frees no host memory of offloaded model states, but
          // offloaded activations shrink with it (checkpointed layers offload their inputs).
          if (t_.offload_activations) continue;
          return false;
        }
      }
      auto perf = PredictPerf(job_.model, t_, l.p, g, net_);
      if (!perf.ok()) return false;
      Plan plan = MakePlan(g, t_, l, rc, *mem);
      plan.host_bytes_per_node = host_node;
      ScorePlan(job_, g, *perf, &plan);
      ++s_->fitting;
      if (MeetsGoals(job_, plan)) s_->meeting_goals.push_back(plan);
      return true;
    }
    return false;
  }

  // The layout of this type needing the least device memory, if any layout was possible.
  std::optional<Plan> Least() const {
    return least_.gpus > 0 ? std::optional<Plan>(least_) : std::nullopt;
  }

 private:
  const JobSpec& job_;
  const TypeInfo& ti_;
  TrainingSpec t_;  // micro-batch and recomputation set per layout
  Network net_;
  int64_t usable_bytes_;  // GPU memory less the margin
  double host_margin_;
  Reading reading_;
  Search* s_;
  Plan least_;
  int64_t least_device_ = std::numeric_limits<int64_t>::max();
};

Search SearchLayouts(const JobSpec& job, const std::vector<TypeInfo>& types,
                     const PlannerOptions& opt, const std::vector<Offload>* offloads = nullptr) {
  Search s;
  s.meeting_goals.reserve(4096);
  for (const TypeInfo& ti : types) {
    // Offload needs the nodes' host memory to check against.
    if (offloads != nullptr && ti.host_memory_bytes <= 0) continue;
    TypeSearch ts(job, ti, opt, &s);
    Candidates c = CandidatesFor(job, ti);
    if (offloads != nullptr) c.offloads = *offloads;
    EnumerateLayouts(job, ti, c, [&](const Layout& l) { return ts.FitLayout(l, c.rcs); });
    if (auto least = ts.Least()) s.least_per_type.push_back(*least);
  }
  return s;
}

// Between plans equally good by the measure at hand: the one that leaves its GPUs more memory
// (less device memory), then the earlier enumerated. A total order, so which of two tied
// layouts a job gets never depends on what else happened to fit or on the sort's internals.
bool TieBreak(const std::vector<Plan>& plans, size_t a, size_t b) {
  if (plans[a].device_bytes != plans[b].device_bytes) {
    return plans[a].device_bytes < plans[b].device_bytes;
  }
  return a < b;
}

// Indices of `plans` by GPUs, then time. Indices are sorted, not the plans themselves (a
// planner call sees thousands of fitting layouts).
std::vector<size_t> ByGpusThenTime(const std::vector<Plan>& plans) {
  std::vector<size_t> order(plans.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Plan& x = plans[a];
    const Plan& y = plans[b];
    if (x.gpus != y.gpus) return x.gpus < y.gpus;
    if (x.total_s != y.total_s) return x.total_s < y.total_s;
    return TieBreak(plans, a, b);
  });
  return order;
}

// The Pareto set over (gpus, time): walking `order` (ByGpusThenTime), the strictly faster
// ones. Marks them in `plans`.
std::vector<Plan> ParetoSet(std::vector<Plan>& plans, const std::vector<size_t>& order) {
  std::vector<Plan> pareto;
  double best_time = std::numeric_limits<double>::infinity();
  for (size_t i : order) {
    if (plans[i].total_s < best_time) {
      best_time = plans[i].total_s;
      plans[i].pareto = true;
      pareto.push_back(plans[i]);
    }
  }
  return pareto;
}

double ObjectiveScore(const Plan& pl, Objective objective) {
  double cost = pl.cost.value_or(std::numeric_limits<double>::infinity());
  switch (objective) {
    case Objective::kTime:
      return pl.total_s;
    case Objective::kCost:
      return cost;
    case Objective::kMix:
      // Geometric mean of time and cost: a plan twice as fast at twice the cost ties.
      return std::sqrt(pl.total_s * cost);
  }
  return pl.total_s;
}

// The best `top` plans by the objective, fewer GPUs first on ties, then TieBreak; `order` is
// ByGpusThenTime.
std::vector<Plan> TopByObjective(const std::vector<Plan>& plans, std::vector<size_t> order,
                                 const PlannerOptions& opt) {
  size_t top = std::min(order.size(), static_cast<size_t>(std::max<int64_t>(0, opt.top)));
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(top), order.end(),
                    [&](size_t a, size_t b) {
                      double sa = ObjectiveScore(plans[a], opt.objective);
                      double sb = ObjectiveScore(plans[b], opt.objective);
                      if (sa != sb) return sa < sb;
                      if (plans[a].gpus != plans[b].gpus) return plans[a].gpus < plans[b].gpus;
                      return TieBreak(plans, a, b);
                    });
  std::vector<Plan> out;
  for (size_t k = 0; k < top; ++k) out.push_back(plans[order[k]]);
  return out;
}

// The fewest GPUs of the largest-memory type (the first of equals) that hold the job, found by
// planning on that type's nodes multiplied, doubling up to 4,096 GPUs.
std::optional<WouldFit> WhatWouldFit(const JobSpec& job, const std::vector<TypeInfo>& types,
                                     const GpuCatalog& catalog, const PlannerOptions& opt) {
  const TypeInfo* biggest = &types[0];
  for (const auto& ti : types) {
    if (ti.gpu->memory_bytes > biggest->gpu->memory_bytes) biggest = &ti;
  }
  JobSpec pinned = job;
  pinned.gpu = biggest->gpu->name;
  for (int64_t factor = 2; biggest->count * factor <= 4096; factor *= 2) {
    Cluster bigger;
    bigger.name = "hypothetical";
    int64_t nodes = (biggest->count * factor + biggest->gpus_per_node - 1) / biggest->gpus_per_node;
    for (int64_t i = 0; i < nodes; ++i) {
      bigger.nodes.push_back({"n" + std::to_string(i), biggest->gpu->name, biggest->gpus_per_node,
                              biggest->network_gbs});
    }
    // Only the Pareto front is needed: no ranking, and no diagnosis of the bigger cluster.
    Search s = SearchLayouts(pinned, ClusterGpuTypes(bigger, catalog), opt);
    std::vector<Plan> pareto = ParetoSet(s.meeting_goals, ByGpusThenTime(s.meeting_goals));
    if (!pareto.empty()) return WouldFit{pareto.front(), biggest->count};
  }
  return std::nullopt;
}

// Why the search found no plan meeting the goals, and what would fit.
Infeasible Diagnose(const JobSpec& job, const std::vector<TypeInfo>& types,
                    const GpuCatalog& catalog, const PlannerOptions& opt, const Search& s) {
  Infeasible why;
  if (s.fitting > 0) {
    why.kind = InfeasibleKind::kGoalsUnmet;
    return why;
  }
  if (s.least_per_type.empty()) {
    why.kind = InfeasibleKind::kNoLayout;
    why.error = s.first_error;
    return why;
  }
  why.kind = InfeasibleKind::kTooLittleMemory;
  for (const Plan& l : s.least_per_type) {
    why.shortfalls.push_back(
        {l.gpu, l.gpu_memory_bytes,
         static_cast<int64_t>(static_cast<double>(JudgedBytes(l, opt.reading)) *
                              (1.0 + opt.memory_margin)),
         l});
  }
  if (!job.gpus) why.would_fit = WhatWouldFit(job, types, catalog, opt);
  return why;
}

}  // namespace

TrainingSpec TrainingFor(const JobSpec& job, const GpuType& g) {
  TrainingSpec t;
  if (job.model.arch == ArchKind::kEncoder) t.head = HeadType::kMaskedLm;
  t.seq_len = job.seq_len;
  t.global_batch = job.global_batch;
  t.framework = job.framework;
  t.precision = job.precision;
  t.finetune = job.finetune;
  t.lora = job.lora;
  t.optimizer = job.optimizer;
  t.fp8_recipe = job.fp8_recipe_or_default();
  t.fp8_param_gather = job.fp8_param_gather;
  t.moe_capacity_factor = job.moe_capacity_factor;
  t.offload_activations = job.offload_activations.value_or(false);
  t.accumulate_unsharded = job.limits.accumulate_unsharded && job.framework == Framework::kFsdp;
  if (job.framework == Framework::kFsdp) t.fsdp_init = job.limits.fsdp_init;
  if (job.framework != Framework::kMegatron && t.head == HeadType::kCausalLm) {
    t.hf_loss = job.limits.hf_loss;
  }
  t.mean_keeps_input = job.limits.mean_keeps_input;
  t.device_memory_bytes = g.memory_bytes;  // the allocator's replays retry within it
  if (t.fp8() && !g.fp8_tflops) {
    t.precision = Precision::kBf16;  // no FP8 tensor cores (A100, V100): bf16 mixed precision
    t.fp8_param_gather = false;
  }
  if ((t.precision == Precision::kBf16 || t.precision == Precision::kBf16Pure) && !g.bf16_tflops) {
    // No bf16 tensor cores (V100, T4): fp16 mixed precision, or fp32 where the framework has
    // no fp16 mode (torchtitan).
    t.precision = job.limits.fp16 ? Precision::kFp16 : Precision::kFp32;
  }
  return t;
}

const char* InfeasibleKindName(InfeasibleKind k) {
  switch (k) {
    case InfeasibleKind::kGoalsUnmet:
      return "goals_unmet";
    case InfeasibleKind::kNoLayout:
      return "no_layout";
    case InfeasibleKind::kTooLittleMemory:
      return "too_little_memory";
  }
  return "unknown";
}

std::vector<ClusterGpuType> ClusterGpuTypes(const Cluster& c, const GpuCatalog& cat) {
  std::vector<ClusterGpuType> out;
  for (const auto& node : c.nodes) {
    const auto host = static_cast<int64_t>(node.host_memory_gib * 1073741824.0);
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const ClusterGpuType& t) { return t.gpu->name == node.gpu; });
    if (it == out.end()) {
      const GpuType* g = cat.Find(node.gpu);
      if (g == nullptr) continue;
      out.push_back({g, 0, 0, node.network_gbs, host});
      it = out.end() - 1;
    }
    it->host_memory_bytes = std::min(it->host_memory_bytes, host);
    it->count += node.gpus;
    it->gpus_per_node = std::max(it->gpus_per_node, node.gpus);
    it->network_gbs = std::min(it->network_gbs, node.network_gbs);
  }
  return out;
}

Result<PlanResult> PlanJob(const JobSpec& job, const Cluster& cluster, const GpuCatalog& catalog,
                           const PlannerOptions& opt) {
  RETURN_IF_ERROR(ValidateJob(job));
  ASSIGN_OR_RETURN(std::vector<TypeInfo> types, TypesFor(job, cluster, catalog));
  Search s = SearchLayouts(job, types, opt);
  PlanResult result;
  result.layouts_considered = s.considered;
  result.layouts_fitting = s.fitting;
  // Nothing fits the GPUs: model states in host memory, where the framework can put them.
  const std::vector<Offload> offloads = OffloadsToTry(job);
  std::optional<Search> offloaded;
  if (s.fitting == 0 && !offloads.empty()) {
    offloaded = SearchLayouts(job, types, opt, &offloads);
    result.layouts_considered += offloaded->considered;
    result.layouts_fitting += offloaded->fitting;
  }
  // Still nothing: the saved activations in host memory too, where the framework can (torchtune
  // under hf or fsdp, no pipeline).
  const bool act_offload = !job.offload_activations && (!job.pp || *job.pp == 1) &&
                           job.limits.offload_activations &&
                           (job.framework == Framework::kHf || job.framework == Framework::kFsdp);
  std::optional<Search> activations;  // the activation-offload search, where it found nothing
  if (s.fitting == 0 && (!offloaded || offloaded->meeting_goals.empty()) && act_offload) {
    JobSpec act = job;
    act.offload_activations = true;
    act.pp = 1;
    Search a = SearchLayouts(act, types, opt);
    result.layouts_considered += a.considered;
    result.layouts_fitting += a.fitting;
    if (!a.meeting_goals.empty()) {
      offloaded = std::move(a);
    } else {
      activations = std::move(a);
    }
  }
  if (offloaded && !offloaded->meeting_goals.empty()) {
    s = std::move(*offloaded);
  } else if (s.meeting_goals.empty()) {
    Infeasible why = Diagnose(job, types, catalog, opt, s);
    if (offloaded || activations) {
      for (const TypeInfo& ti : types) {
        if (ti.host_memory_bytes <= 0) why.host_memory_unknown.push_back(ti.gpu->name);
      }
      why.offload_tried = why.host_memory_unknown.size() < types.size();
    }
    // What the offloading searches found: layouts that fit but miss the goals, and the least
    // host memory a node would need where the GPUs would hold the job.
    for (const std::optional<Search>* tried : {&offloaded, &activations}) {
      if (!*tried) continue;
      const Search& t = **tried;
      if (t.fitting > 0) why.kind = InfeasibleKind::kGoalsUnmet;
      if (t.least_host_needed < std::numeric_limits<int64_t>::max() &&
          (why.offload_least_host_bytes == 0 ||
           t.least_host_needed < why.offload_least_host_bytes)) {
        why.offload_least_host_bytes = t.least_host_needed;
        why.offload_host_memory_bytes = t.host_memory;
      }
    }
    result.infeasible = std::move(why);
    return result;
  }
  std::vector<size_t> order = ByGpusThenTime(s.meeting_goals);
  result.pareto = ParetoSet(s.meeting_goals, order);
  result.plans = TopByObjective(s.meeting_goals, std::move(order), opt);
  return result;
}

std::string RecomputeText(const Plan& p) {
  std::string s = RecomputeName(p.recompute);
  if (p.recompute == Recompute::kFull && p.recompute_every > 1) {
    s += "/" + std::to_string(p.recompute_every);
  }
  return s;
}

nlohmann::json PlanToJson(const Plan& p) {
  nlohmann::json j = {{"gpu", p.gpu},
                      {"gpus", p.gpus},
                      {"tp", p.tp},
                      {"pp", p.pp},
                      {"dp", p.dp},
                      {"cp", p.cp},
                      {"ep", p.ep},
                      {"etp", p.etp},
                      {"micro_batch", p.micro_batch},
                      {"zero", p.zero},
                      {"distributed_optimizer", p.distributed_optimizer},
                      {"recompute", RecomputeName(p.recompute)},
                      {"recompute_every", p.recompute_every},
                      {"offload", OffloadName(p.offload)},
                      {"offload_activations", p.offload_activations},
                      {"precision", PrecisionName(p.precision)},
                      {"peak_bytes", p.peak_bytes},
                      {"reserved_bytes", p.reserved_bytes},
                      {"device_bytes", p.device_bytes},
                      {"resident_bytes", p.resident_bytes},
                      {"host_bytes_per_node", p.host_bytes_per_node},
                      {"gpu_memory_bytes", p.gpu_memory_bytes},
                      {"iteration_s", p.iteration_s},
                      {"tokens_per_s", p.tokens_per_s},
                      {"mfu", p.mfu},
                      {"total_s", p.total_s},
                      {"pareto", p.pareto}};
  j["cost"] = p.cost ? nlohmann::json(*p.cost) : nlohmann::json(nullptr);
  if (p.shard_group > 0) j["shard_group"] = p.shard_group;  // hybrid sharding only
  return j;
}

}  // namespace frenzy
