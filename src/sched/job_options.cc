#include "sched/job_options.h"

#include <fmt/core.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "memory/memory_model.h"
#include "planner/mixed.h"
#include "perf/perf_model.h"

namespace frenzy {
namespace {

using TypeOfCluster = ClusterGpuType;

// The layout a user reaches for first: plain data parallelism, micro-batch 1, nothing saved.
std::optional<RunOption> PlainDataParallel(const JobSpec& job, const TypeOfCluster& ti, int type,
                                           int64_t gpus) {
  if (job.global_batch % gpus != 0) return std::nullopt;
  const GpuType& g = *ti.gpu;
  TrainingSpec t = TrainingFor(job, g);
  t.micro_batch = 1;
  ParallelPlan p;
  p.dp = gpus;
  p.distributed_optimizer = gpus > 1 && job.framework == Framework::kMegatron;
  auto mem = PredictMemory(job.model, t, p, StageDetail::kWorst);
  if (!mem.ok()) return std::nullopt;
  auto perf = PredictPerf(job.model, t, p, g, Network{ti.gpus_per_node, ti.network_gbs});
  if (!perf.ok()) return std::nullopt;
  RunOption o;
  o.type = type;
  o.gpus = gpus;
  o.plan.gpu = g.name;
  o.plan.gpus = gpus;
  o.plan.dp = gpus;
  o.plan.distributed_optimizer = p.distributed_optimizer;
  o.plan.peak_bytes = mem->peak_bytes;
  o.plan.device_bytes = mem->device_bytes;
  o.plan.gpu_memory_bytes = g.memory_bytes;
  o.plan.iteration_s = perf->iteration_s;
  o.plan.tokens_per_s = perf->tokens_per_s;
  o.plan.mfu = perf->mfu;
  o.plan.total_s = job.tokens / perf->tokens_per_s;
  o.fits_prediction = mem->device_bytes <= g.memory_bytes;
  return o;
}

constexpr bool kMixedPipelinesAlways = true;

// A mixed plan as an option: its parts' GPUs per type, judged by its tightest part.
RunOption MixedOption(const JobSpec& job, const MixedPlan& p,
                      const std::vector<std::string>& types) {
  auto type_of = [&](const std::string& name) {
    return static_cast<int>(std::find(types.begin(), types.end(), name) - types.begin());
  };
  RunOption o;
  o.gpus = p.gpus;
  o.fits_prediction = true;
  Plan& plan = o.plan;
  double tightest = -1;
  size_t stage = 0;
  for (const MixedPart& part : p.parts) {
    o.parts.emplace_back(type_of(part.gpu), part.gpus);
    plan.gpu += (plan.gpu.empty() ? "" : "+") + part.gpu;
    // Its bytes on its GPU: the group's, or its stages' largest.
    int64_t bytes = part.device_bytes, memory = part.gpu_memory_bytes;
    auto share_of = [](int64_t b, int64_t m) {
      return m > 0 ? static_cast<double>(b) / static_cast<double>(m) : 0.0;
    };
    if (p.family == MixedFamily::kPipeline) {
      for (int64_t k = 0; k < part.stages; ++k, ++stage) {
        if (memory == 0 || share_of(p.stage_device_bytes[stage], p.stage_gpu_memory_bytes[stage]) >
                               share_of(bytes, memory)) {
          bytes = p.stage_device_bytes[stage];
          memory = p.stage_gpu_memory_bytes[stage];
        }
      }
    }
    const double share = share_of(bytes, memory);
    if (share > tightest) {
      tightest = share;
      o.type = o.parts.back().first;
      plan.device_bytes = bytes;
      plan.gpu_memory_bytes = memory;
      if (p.family == MixedFamily::kData) plan.micro_batch = part.micro_batch;
    }
  }
  plan.peak_bytes = plan.reserved_bytes = plan.resident_bytes = plan.device_bytes;
  plan.gpus = p.gpus;
  plan.tp = p.tp;
  plan.pp = p.pp;
  plan.dp = p.dp;
  plan.zero = p.zero;
  plan.distributed_optimizer = p.distributed_optimizer;
  plan.recompute = p.recompute;
  plan.precision = p.precision;
  plan.iteration_s = p.iteration_s;
  plan.tokens_per_s = p.tokens_per_s;
  plan.mfu = p.mfu;
  plan.total_s = job.tokens / p.tokens_per_s;
  return o;
}

// The table's mixed options: the fastest data-parallel plan of each composition, and where no
// single type holds the job with the margin (`none_single`) the fastest pipelines too, at most
// kMaxMixedOptions, fastest first.
Result<std::vector<RunOption>> MixedOptions(const JobSpec& job, const Cluster& cluster,
                                            const GpuCatalog& catalog, PlannerOptions po,
                                            bool none_single,
                                            const std::vector<std::string>& types) {
  po.top = std::numeric_limits<int64_t>::max();
  ASSIGN_OR_RETURN(MixedResult r,
                   PlanMixedDataParallel(job, cluster, catalog, po, /*every_count=*/true));
  if (none_single || kMixedPipelinesAlways) {
    ASSIGN_OR_RETURN(MixedResult pipes, PlanMixedPipelines(job, cluster, catalog, po));
    for (MixedPlan& p : pipes.plans) r.plans.push_back(std::move(p));
  }
  std::stable_sort(r.plans.begin(), r.plans.end(), [](const MixedPlan& a, const MixedPlan& b) {
    return a.tokens_per_s > b.tokens_per_s;
  });
  std::vector<RunOption> out;
  std::set<std::vector<std::pair<int, int64_t>>> seen;
  for (const MixedPlan& p : r.plans) {
    if (out.size() >= kMaxMixedOptions) break;
    RunOption o = MixedOption(job, p, types);
    std::vector<std::pair<int, int64_t>> key = o.parts;
    std::sort(key.begin(), key.end());
    if (seen.insert(key).second) out.push_back(std::move(o));
  }
  return out;
}

}  // namespace

const RunOption* JobOptions::Find(int type, int64_t gpus) const {
  const auto end = std::partition_point(options.begin(), options.end(),
                                        [](const RunOption& o) { return !o.mixed(); });
  auto it = std::lower_bound(options.begin(), end, std::make_pair(type, gpus),
                             [](const RunOption& o, const std::pair<int, int64_t>& k) {
                               return std::make_pair(o.type, o.gpus) < k;
                             });
  if (it == end || it->type != type || it->gpus != gpus) return nullptr;
  return &*it;
}

const RunOption* JobOptions::Fastest(int type) const {
  const RunOption* best = nullptr;
  for (const auto& o : options) {
    if (o.type != type || o.mixed()) continue;
    if (best == nullptr || o.plan.tokens_per_s > best->plan.tokens_per_s) best = &o;
  }
  return best;
}

std::vector<const RunOption*> JobOptions::OfType(int type) const {
  std::vector<const RunOption*> out;
  for (const auto& o : options) {
    if (o.type == type && !o.mixed()) out.push_back(&o);
  }
  return out;
}

int64_t CheckpointBytes(const JobSpec& job) {
  TrainingSpec t;  // the planner's defaults (AdamW), in the job's precision
  t.precision = job.precision;
  t.seq_len = job.seq_len;
  t.finetune = job.finetune;  // adapters alone when the base is frozen
  t.lora = job.lora;
  return CheckpointBytes(job.model, t);
}

Result<JobOptions> BuildJobOptions(const JobSpec& job_in, const Cluster& cluster,
                                   const GpuCatalog& catalog, OptionKind kind, double margin,
                                   bool mixed) {
  JobSpec job = job_in;
  job.gpu.reset();
  job.gpus.reset();
  if (!(job.tokens > 0)) job.tokens = 1e9;  // only speeds are kept
  PlannerOptions po;
  po.memory_margin = kind == OptionKind::kMarp ? margin : 0.0;
  po.top = std::numeric_limits<int64_t>::max();
  ASSIGN_OR_RETURN(PlanResult planned, PlanJob(job, cluster, catalog, po));
  const PlannerOptions full_margin = po;
  const bool none_with_margin = planned.plans.empty();

  JobOptions out;
  out.checkpoint_bytes = CheckpointBytes(job);
  std::vector<TypeOfCluster> types = ClusterGpuTypes(cluster, catalog);
  for (const auto& t : types) out.types.push_back(t.gpu->name);
  // With the full margin: where single types hold the job only with less, a pipeline over
  // several may hold it with all of it.
  // Offered to a job confined to one type or none: with options on two types or more it has
  // somewhere else to go while one is busy, and a mix (paced by its slowest part, synchronised
  // across types) measured no gain there and cost average JCT (bench/RESULTS.md, 2026-12-04).
  std::vector<RunOption> mixed_options;
  std::set<std::string> single_types;
  for (const Plan& p : planned.plans) single_types.insert(p.gpu);
  if (mixed && kind == OptionKind::kMarp && single_types.size() <= 1) {
    ASSIGN_OR_RETURN(mixed_options, MixedOptions(job, cluster, catalog, full_margin,
                                                 none_with_margin, out.types));
  }
  // A job that fits nowhere with the margin would never run: it is offered what fits with half
  // of it, then with none (the runtime's memory monitor watches it, and re-plans or requeues it
  // before it runs out of memory) — unless a mixed option holds it with the whole margin: a
  // faster layout inside the margin is one the prediction's error band may not leave room for
  // (sia64: Qwen3-32B on 16 A100-40GB at 1.09x the prediction crashed where the pipeline over
  // A100s and V100s holds it).
  for (double m : {margin / 2, 0.0}) {
    if (kind != OptionKind::kMarp || !planned.plans.empty() || !mixed_options.empty() ||
        m >= po.memory_margin) {
      break;
    }
    po.memory_margin = m;
    ASSIGN_OR_RETURN(planned, PlanJob(job, cluster, catalog, po));
  }
  auto type_index = [&](const std::string& name) {
    for (size_t i = 0; i < out.types.size(); ++i) {
      if (out.types[i] == name) return static_cast<int>(i);
    }
    return -1;
  };
  // plans are ranked fastest first: the first per (type, count) is the one to keep; for kMarp,
  // the later ones that need less memory than every faster one are its leaner layouts.
  constexpr size_t kMaxLeaner = 5;
  std::map<std::pair<int, int64_t>, RunOption> by_pair;
  for (const Plan& p : planned.plans) {
    int type = type_index(p.gpu);
    if (type < 0) continue;
    auto [it, fresh] = by_pair.try_emplace({type, p.gpus}, RunOption{type, p.gpus, p, true, {}, {}});
    if (fresh || kind != OptionKind::kMarp) continue;
    RunOption& o = it->second;
    int64_t least = o.leaner.empty() ? o.plan.device_bytes : o.leaner.back().device_bytes;
    // At least 3% leaner than the last one kept, or it is not worth a restart.
    if (static_cast<double>(p.device_bytes) < 0.97 * static_cast<double>(least)) {
      o.leaner.push_back(p);
    }
  }
  for (auto& [pair, o] : by_pair) {
    // Thinned evenly to kMaxLeaner, always keeping the leanest.
    if (o.leaner.size() > kMaxLeaner) {
      std::vector<Plan> kept;
      size_t n = o.leaner.size();
      for (size_t i = 0; i < kMaxLeaner; ++i) {
        kept.push_back(std::move(o.leaner[(i + 1) * n / kMaxLeaner - 1]));
      }
      o.leaner = std::move(kept);
    }
    out.options.push_back(std::move(o));
  }
  if (kind == OptionKind::kHand) {
    // Where nothing fits, users still ask: plain data parallelism on power-of-two counts.
    for (size_t ti = 0; ti < types.size(); ++ti) {
      for (int64_t n = 1; n <= types[ti].count; n *= 2) {
        if (out.Find(static_cast<int>(ti), n) != nullptr) continue;
        if (auto o = PlainDataParallel(job, types[ti], static_cast<int>(ti), n)) {
          out.options.push_back(*o);
        }
      }
    }
    std::sort(out.options.begin(), out.options.end(), [](const RunOption& a, const RunOption& b) {
      return std::make_pair(a.type, a.gpus) < std::make_pair(b.type, b.gpus);
    });
  }
  for (RunOption& o : mixed_options) out.options.push_back(std::move(o));
  return out;
}

Result<std::shared_ptr<const JobOptions>> OptionCache::Get(const std::string& model_key,
                                                           const JobSpec& job, OptionKind kind,
                                                           bool mixed) {
  // What else changes the table: the framework, the optimizer and what is trained.
  std::string variant = std::string(FrameworkName(job.framework)) + "/" +
                        OptimizerName(job.optimizer) + "/" + FineTuneName(job.finetune);
  if (job.precision == Precision::kFp8) {
    variant += std::string("/fp8-") +
               Fp8RecipeName(job.fp8_recipe_or_default()) +
               (job.fp8_param_gather ? "/pg" : "");
  }
  if (job.moe_capacity_factor > 0) variant += "/cf" + std::to_string(job.moe_capacity_factor);
  // The layouts the job's framework can run (jobs of one model under two frameworks differ).
  const LayoutLimits& x = job.limits;
  variant += fmt::format("/L{}{}{}{}{}{}{}{}{}", x.tp, x.pp, x.cp, x.ep, x.recompute,
                         x.recompute_every, x.offload_activations, x.fp16, x.even_nodes);
  for (int64_t z : x.zeros) variant += fmt::format("z{}", z);
  for (Offload o : x.offloads) variant += fmt::format("o{}", static_cast<int>(o));
  if (x.accumulate_unsharded) variant += "/u";
  if (x.fsdp_init != FsdpInit::kNone) variant += fmt::format("/i{}", static_cast<int>(x.fsdp_init));
  if (x.hf_loss != HfLoss::kPadded) variant += fmt::format("/h{}", static_cast<int>(x.hf_loss));
  if (x.mean_keeps_input) variant += "/m";
  if (job.offload_activations) variant += fmt::format("/a{}", *job.offload_activations);
  if (job.finetune != FineTune::kFull) {
    const LoraSpec& l = job.lora;
    variant += "/r" + std::to_string(l.rank) + "/t" + std::to_string(l.targets) + "/b" +
               std::to_string(l.adapter_bytes) + (l.double_quant ? "/dq" : "") + "/d" +
               std::to_string(l.dropout);
  }
  auto key = std::make_tuple(model_key, job.global_batch, job.seq_len,
                             static_cast<int>(job.precision), static_cast<int>(kind), variant,
                             mixed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
  }
  ASSIGN_OR_RETURN(JobOptions built,
                   BuildJobOptions(job, cluster_, catalog_, kind, margin_, mixed));
  auto shared = std::make_shared<const JobOptions>(std::move(built));
  std::lock_guard<std::mutex> lock(mu_);
  return cache_.emplace(key, shared).first->second;
}

}  // namespace frenzy
