#include "planner/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "memory/memory_model.h"
#include "model/zoo.h"
#include "planner/explain.h"

namespace frenzy {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

Cluster Bundled(const char* name) { return *ResolveCluster(name, GpuCatalog::Default()); }

JobSpec Job(const char* model, double tokens = 1e10, int64_t gb = 64, int64_t seq = 2048) {
  JobSpec j;
  j.model = *ResolveModel(model);
  j.tokens = tokens;
  j.global_batch = gb;
  j.seq_len = seq;
  return j;
}

PlanResult Plan_(const JobSpec& j, const Cluster& c, PlannerOptions o = {}) {
  auto r = PlanJob(j, c, GpuCatalog::Default(), o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : PlanResult{};
}

// The prose, for failure messages only: tests check the typed outcome.
std::string Why(const PlanResult& r) { return ExplainPlan(r, {}); }

// One node of `gpus` GPUs of one type.
Cluster OneNode(const char* gpu, int64_t gpus) {
  Cluster c;
  c.name = "one-node";
  c.nodes.push_back({"n0", gpu, gpus, 100});
  return c;
}

TEST(Planner, EveryPlanFitsWithItsMargin) {
  for (const char* model : {"gpt2-xl", "llama-2-7b", "llama-2-13b", "mixtral-8x7b"}) {
    PlanResult r = Plan_(Job(model, 1e10, 64, 1024), Bundled("cluster64"));
    ASSERT_FALSE(r.plans.empty()) << model << ": " << Why(r);
    EXPECT_FALSE(r.infeasible) << model;
    for (const auto& p : r.plans) {
      EXPECT_LE(static_cast<double>(p.device_bytes) * 1.10,
                static_cast<double>(p.gpu_memory_bytes) + 1)
          << model << " on " << p.gpu;
      EXPECT_EQ(p.tp * p.pp * p.dp * p.cp, p.gpus);
      EXPECT_EQ(64 % (p.micro_batch * p.dp), 0);
      EXPECT_GT(p.total_s, 0);
    }
    // Ranked by time.
    for (size_t i = 1; i < r.plans.size(); ++i) {
      EXPECT_LE(r.plans[i - 1].total_s, r.plans[i].total_s);
    }
  }
}

TEST(Planner, ParetoSetIsNonDominated) {
  PlanResult r = Plan_(Job("llama-2-7b"), Bundled("cluster64"));
  ASSERT_FALSE(r.pareto.empty());
  for (size_t i = 1; i < r.pareto.size(); ++i) {
    EXPECT_GT(r.pareto[i].gpus, r.pareto[i - 1].gpus);
    EXPECT_LT(r.pareto[i].total_s, r.pareto[i - 1].total_s);
  }
}

TEST(Planner, EveryPlanIsDominatedByAParetoPlan) {
  // With no limit on `top`, `plans` is every layout that fits (no deadline or budget here), so
  // the Pareto set must cover each: some Pareto plan uses no more GPUs and is no slower.
  PlannerOptions o;
  o.top = std::numeric_limits<int64_t>::max();
  PlanResult r = Plan_(Job("llama-2-7b"), Bundled("cluster64"), o);
  ASSERT_FALSE(r.pareto.empty());
  EXPECT_EQ(static_cast<int64_t>(r.plans.size()), r.layouts_fitting);
  size_t flagged = 0;
  for (const Plan& p : r.plans) {
    flagged += p.pareto ? 1 : 0;
    bool dominated = std::any_of(r.pareto.begin(), r.pareto.end(), [&](const Plan& q) {
      return q.gpus <= p.gpus && q.total_s <= p.total_s;
    });
    EXPECT_TRUE(dominated) << p.gpus << " x " << p.gpu << " in " << p.total_s << " s";
  }
  EXPECT_EQ(flagged, r.pareto.size());  // the plans marked `pareto` are the Pareto set
}

TEST(Planner, CountsEveryLayoutOfASmallCluster) {
  // GPT-2 (12 layers) on one node of 2 A100-80GB, global batch 4, by hand: (TP, PP, DP) is
  // (1,1,1), (1,1,2), (1,2,1) or (2,1,1) (TP and PP divide 2 and 12, TP x PP x DP <= 2, DP
  // divides 4); micro-batches 1, 2, 4 with DP 1 and 1, 2 with DP 2 (micro-batch x DP divides 4):
  // 3 + 2 + 3 + 3 = 11 layouts. GPT-2 fits an 80 GB GPU without recomputation, so each is one
  // memory prediction and fits.
  PlanResult r = Plan_(Job("gpt2", 1e9, 4, 1024), OneNode("A100-80GB", 2));
  EXPECT_EQ(r.layouts_considered, 11);
  EXPECT_EQ(r.layouts_fitting, 11);
  // Pinning the micro-batch to 2 leaves one per (TP, PP, DP): 4.
  JobSpec j = Job("gpt2", 1e9, 4, 1024);
  j.micro_batch = 2;
  PlanResult pinned = Plan_(j, OneNode("A100-80GB", 2));
  EXPECT_EQ(pinned.layouts_considered, 4);
  EXPECT_EQ(pinned.layouts_fitting, 4);
}

TEST(Planner, TotalTimeIsIterationsTimesIterationTime) {
  // Llama-2-7B, 3e10 tokens, 64 sequences of 2,048 tokens per iteration: by hand,
  // 3e10 / (64 x 2048) = 228,881.8 iterations, each taking the plan's iteration time.
  PlanResult r = Plan_(Job("llama-2-7b", 3e10), Bundled("cluster64"));
  ASSERT_FALSE(r.plans.empty());
  const double iterations = 3e10 / (64.0 * 2048.0);
  for (const Plan& p : r.plans) {
    EXPECT_NEAR(p.total_s, iterations * p.iteration_s, 1e-9 * p.total_s) << p.gpus << p.gpu;
  }
  // Twice the tokens, twice the time, same plan.
  PlanResult twice = Plan_(Job("llama-2-7b", 6e10), Bundled("cluster64"));
  ASSERT_FALSE(twice.plans.empty());
  EXPECT_EQ(twice.plans[0].gpus, r.plans[0].gpus);
  EXPECT_NEAR(twice.plans[0].total_s, 2 * r.plans[0].total_s, 1e-9 * r.plans[0].total_s);
}

TEST(Planner, MoreMemoryNeverHurts) {
  // The same job on a cluster whose GPUs have more memory finds at least as many fitting
  // layouts and a plan at least as fast.
  JobSpec j = Job("llama-2-13b");
  j.gpu = "A100-40GB";
  Cluster c = Bundled("cluster2048");
  PlanResult small = Plan_(j, c);
  j.gpu = "A100-80GB";
  PlanResult large = Plan_(j, c);
  ASSERT_FALSE(large.plans.empty());
  EXPECT_GE(large.layouts_fitting, small.layouts_fitting);
  if (!small.plans.empty()) {
    EXPECT_LE(large.plans[0].total_s, small.plans[0].total_s * 1.0001);
  }
}

TEST(Planner, FasterGpusRankFirstAtEqualCount) {
  JobSpec j = Job("llama-2-7b");
  j.gpus = 8;
  PlanResult r = Plan_(j, Bundled("cluster2048"));
  ASSERT_FALSE(r.plans.empty());
  EXPECT_EQ(r.plans[0].gpu, "H100-80GB") << Why(r);
}

TEST(Planner, PinsAreRespected) {
  JobSpec j = Job("llama-2-7b");
  j.tp = 2;
  j.micro_batch = 1;
  j.recompute = Recompute::kSelective;
  j.gpu = "a100";
  PlanResult r = Plan_(j, Bundled("cluster64"));
  ASSERT_FALSE(r.plans.empty());
  for (const auto& p : r.plans) {
    EXPECT_EQ(p.tp, 2);
    EXPECT_EQ(p.micro_batch, 1);
    EXPECT_EQ(p.recompute, Recompute::kSelective);
    EXPECT_EQ(p.gpu, "A100-80GB");
  }
}

TEST(Planner, PinsThatAllowNoLayoutAreInfeasible) {
  // 3 GPUs on a 2-GPU node: not one layout to try, so no layout error either.
  JobSpec j = Job("gpt2", 1e9, 4, 1024);
  j.gpus = 3;
  PlanResult r = Plan_(j, OneNode("A100-80GB", 2));
  ASSERT_TRUE(r.infeasible);
  EXPECT_EQ(r.infeasible->kind, InfeasibleKind::kNoLayout);
  EXPECT_FALSE(r.infeasible->error);
  EXPECT_EQ(r.layouts_considered, 0);
  EXPECT_TRUE(r.plans.empty());
  EXPECT_TRUE(r.pareto.empty());
}

TEST(Planner, ImpossibleJobNamesTheShortfallOfEveryGpuType) {
  // Llama-3.1-405B (405,853,388,800 parameters, its model card) cannot be trained on the lab
  // cluster's 8 GPUs of each type: mixed-precision Adam keeps at least 16 bytes per parameter
  // (ZeRO, Rajbhandari et al. 2020, section 3.1), so even sharded over all 8 GPUs of a type a
  // layout needs 16 x 405.85e9 / 8 = 811.7 GB per GPU, 1.1 x that with the margin.
  PlanResult r = Plan_(Job("llama-3.1-405b", 1e12, 64, 8192), Bundled("lab"));
  EXPECT_TRUE(r.plans.empty());
  EXPECT_TRUE(r.pareto.empty());
  ASSERT_TRUE(r.infeasible);
  EXPECT_EQ(r.infeasible->kind, InfeasibleKind::kTooLittleMemory);
  EXPECT_EQ(r.layouts_fitting, 0);
  const double params = 405853388800.0;
  const std::vector<std::pair<std::string, int64_t>> expected = {
      {"A100-80GB", 80 * kGiB}, {"V100-32GB", 32 * kGiB}, {"RTX-3090", 24 * kGiB}};
  ASSERT_EQ(r.infeasible->shortfalls.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const Shortfall& s = r.infeasible->shortfalls[i];
    EXPECT_EQ(s.gpu, expected[i].first);  // in the cluster's order
    EXPECT_EQ(s.gpu_memory_bytes, expected[i].second);
    EXPECT_GE(static_cast<double>(s.least_bytes), 1.1 * 16 * params / 8) << s.gpu;
    EXPECT_GT(s.least_bytes, s.gpu_memory_bytes) << s.gpu;
    // The least memory per GPU takes every GPU of the type.
    EXPECT_EQ(s.least.gpus, 8) << s.gpu;
    EXPECT_EQ(s.least.gpu, s.gpu);
  }
  // What would fit: more of the largest-memory type (A100-80GB). By the same 16 bytes per
  // parameter and margin, 80 GiB GPUs number at least 16 x 405.85e9 x 1.1 / 80 GiB = 83.1.
  ASSERT_TRUE(r.infeasible->would_fit);
  const WouldFit& w = *r.infeasible->would_fit;
  EXPECT_EQ(w.plan.gpu, "A100-80GB");
  EXPECT_EQ(w.cluster_gpus, 8);
  EXPECT_GE(w.plan.gpus, 84);
  EXPECT_LE(static_cast<double>(w.plan.device_bytes) * 1.1,
            static_cast<double>(w.plan.gpu_memory_bytes));
  EXPECT_EQ(w.plan.tp * w.plan.pp * w.plan.dp * w.plan.cp, w.plan.gpus);
  EXPECT_GT(w.plan.total_s, 0);
}

TEST(Planner, NothingFitsNamesEveryGpuType) {
  // Llama-2-70B (68,976,648,192 parameters) on cluster64: 16 A100-80GB, 16 V100-32GB and 32
  // RTX-3090. The 16 bytes per parameter bound of the test above, per type: 1.1 x 16 x 68.98e9
  // over 16 and 32 GPUs.
  PlanResult r = Plan_(Job("llama-2-70b", 1e10, 256, 2048), Bundled("cluster64"));
  ASSERT_TRUE(r.plans.empty());
  ASSERT_TRUE(r.infeasible);
  EXPECT_EQ(r.infeasible->kind, InfeasibleKind::kTooLittleMemory);
  const double params = 68976648192.0;
  const std::vector<std::pair<std::string, int64_t>> expected = {
      {"A100-80GB", 16}, {"V100-32GB", 16}, {"RTX-3090", 32}};
  ASSERT_EQ(r.infeasible->shortfalls.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const Shortfall& s = r.infeasible->shortfalls[i];
    EXPECT_EQ(s.gpu, expected[i].first);
    EXPECT_GE(static_cast<double>(s.least_bytes),
              1.1 * 16 * params / static_cast<double>(expected[i].second))
        << s.gpu;
    EXPECT_GT(s.least_bytes, s.gpu_memory_bytes) << s.gpu;
    EXPECT_LE(s.least.gpus, expected[i].second) << s.gpu;
  }
  // ... and says what would fit: more of the cluster's largest GPUs.
  ASSERT_TRUE(r.infeasible->would_fit);
  EXPECT_EQ(r.infeasible->would_fit->plan.gpu, "A100-80GB");
  EXPECT_EQ(r.infeasible->would_fit->cluster_gpus, 16);
  EXPECT_GT(r.infeasible->would_fit->plan.gpus, 16);
}

TEST(Planner, NoWouldFitWhenTheGpuCountIsPinned) {
  // A pinned count is the user's: the planner does not look for more GPUs.
  JobSpec j = Job("llama-2-70b", 1e10, 256, 2048);
  j.gpus = 8;
  PlanResult r = Plan_(j, Bundled("cluster64"));
  ASSERT_TRUE(r.infeasible);
  EXPECT_EQ(r.infeasible->kind, InfeasibleKind::kTooLittleMemory);
  EXPECT_FALSE(r.infeasible->would_fit);
  for (const Shortfall& s : r.infeasible->shortfalls) EXPECT_EQ(s.least.gpus, 8) << s.gpu;
}

TEST(Planner, SequenceLongerThanThePositionTableIsExplained) {
  // GPT-2's learned position table holds 1,024 positions (n_positions in its config).
  PlanResult r = Plan_(Job("gpt2-xl", 1e10, 64, 2048), Bundled("cluster64"));
  EXPECT_TRUE(r.plans.empty());
  ASSERT_TRUE(r.infeasible);
  EXPECT_EQ(r.infeasible->kind, InfeasibleKind::kNoLayout);
  ASSERT_TRUE(r.infeasible->error);
  EXPECT_EQ(r.infeasible->error->field, "seq_len");
  EXPECT_NE(r.infeasible->error->message.find("1024"), std::string::npos)
      << r.infeasible->error->message;
  EXPECT_TRUE(r.infeasible->shortfalls.empty());
}

TEST(Planner, DeadlineAndBudgetFilter) {
  JobSpec j = Job("gpt2-xl", 1e10, 64, 1024);
  PlanResult free = Plan_(j, Bundled("cluster64"));
  ASSERT_FALSE(free.plans.empty());
  ASSERT_FALSE(free.infeasible);
  j.deadline_s = free.plans[0].total_s / 10;  // ten times faster than the fastest plan
  PlanResult late = Plan_(j, Bundled("cluster64"));
  EXPECT_TRUE(late.plans.empty());
  ASSERT_TRUE(late.infeasible);
  EXPECT_EQ(late.infeasible->kind, InfeasibleKind::kGoalsUnmet);
  // The deadline filters plans, not memory: as many layouts fit.
  EXPECT_EQ(late.layouts_fitting, free.layouts_fitting);
  // A deadline the fastest plan just meets keeps it first.
  j.deadline_s = free.plans[0].total_s;
  PlanResult just = Plan_(j, Bundled("cluster64"));
  ASSERT_FALSE(just.plans.empty());
  EXPECT_EQ(just.plans[0].total_s, free.plans[0].total_s);
  for (const Plan& p : just.plans) EXPECT_LE(p.total_s, *j.deadline_s);
}

TEST(Planner, BudgetBelowTheCheapestPlanIsInfeasible) {
  PlannerOptions cheapest;
  cheapest.objective = Objective::kCost;
  JobSpec j = Job("llama-2-7b", 2e10, 256);
  j.gpu = "A100-80GB";  // priced, so every plan has a cost
  PlanResult r = Plan_(j, Bundled("lab"), cheapest);
  ASSERT_FALSE(r.plans.empty());
  ASSERT_TRUE(r.plans[0].cost);
  j.budget = *r.plans[0].cost * 0.99;
  PlanResult dear = Plan_(j, Bundled("lab"), cheapest);
  ASSERT_TRUE(dear.infeasible);
  EXPECT_EQ(dear.infeasible->kind, InfeasibleKind::kGoalsUnmet);
  j.budget = *r.plans[0].cost * 1.01;
  PlanResult within = Plan_(j, Bundled("lab"), cheapest);
  ASSERT_FALSE(within.plans.empty());
  for (const Plan& p : within.plans) EXPECT_LE(*p.cost, *j.budget);
}

TEST(Planner, ABudgetNeverAdmitsAGpuOfUnknownPrice) {
  // cluster64's V100-32GB and RTX-3090 have no price: without a budget they are planned; with
  // any budget, however large, only priced plans remain (unknown is never free).
  PlannerOptions all;
  all.top = std::numeric_limits<int64_t>::max();
  JobSpec j = Job("llama-2-7b");
  PlanResult open = Plan_(j, Bundled("cluster64"), all);
  ASSERT_TRUE(std::any_of(open.plans.begin(), open.plans.end(),
                          [](const Plan& p) { return !p.cost; }));
  j.budget = 1e12;
  PlanResult budgeted = Plan_(j, Bundled("cluster64"), all);
  ASSERT_FALSE(budgeted.plans.empty());
  for (const Plan& p : budgeted.plans) EXPECT_TRUE(p.cost) << p.gpu;
}

TEST(Planner, The2026FamiliesArePlannedOnABlackwellCluster) {
  // Every new family's largest zoo model trains on 128 B200s (DeepSeek-V3 needs 122 of them
  // without expert parallelism); each plan fits its GPUs.
  for (const char* m : {"qwen3-32b", "qwen3-235b-a22b", "gemma-2-27b", "gemma-3-27b",
                        "deepseek-v2-lite", "deepseek-v3", "gpt-oss-120b", "olmo-2-7b", "phi-4",
                        "starcoder2-15b", "mistral-small-3.1-24b", "llama-3.3-70b",
                        "qwen2.5-72b", "smollm2-1.7b", "phi-3.5-moe", "glm-4-9b-0414"}) {
    PlanResult r = Plan_(Job(m, 1e11, 512, 4096), Bundled("b200-128"));
    ASSERT_FALSE(r.plans.empty()) << m << ": " << Why(r);
    EXPECT_EQ(r.plans[0].gpu, "B200") << m;
    EXPECT_LE(r.plans[0].device_bytes, r.plans[0].gpu_memory_bytes) << m;
  }
}

// Adapter fine-tuning is planned as PEFT runs it: data parallel only, even where full training
// would use context parallelism, and the frozen base decides what fits.
TEST(Planner, LoraAndQloraArePlannedDataParallel) {
  Cluster c = OneNode("A100-80GB", 8);
  JobSpec lora = Job("llama-3-70b", 1e7, 16, 2048);
  lora.framework = Framework::kHf;
  lora.finetune = FineTune::kLora;
  // A 16-bit 70B base is 141 GB on every DDP rank: nothing fits without sharding.
  PlanResult r = Plan_(lora, c);
  ASSERT_TRUE(r.infeasible) << Why(r);
  EXPECT_EQ(r.infeasible->kind, InfeasibleKind::kTooLittleMemory);
  // FSDP shards the frozen base; QLoRA's 4-bit base (about 37 GB) fits one GPU.
  lora.framework = Framework::kFsdp;
  r = Plan_(lora, c);
  ASSERT_FALSE(r.plans.empty()) << Why(r);
  JobSpec qlora = lora;
  qlora.framework = Framework::kHf;
  qlora.finetune = FineTune::kQlora;
  PlanResult q = Plan_(qlora, c);
  ASSERT_FALSE(q.pareto.empty()) << Why(q);
  EXPECT_EQ(q.pareto.front().gpus, 1);
  for (const PlanResult* res : {&r, &q}) {
    for (const auto& p : res->plans) {
      EXPECT_EQ(p.tp * p.pp * p.cp, 1) << p.gpu << " " << p.gpus;
      EXPECT_EQ(p.dp, p.gpus);
    }
  }
  // Megatron has no PEFT path: the job's error says which frameworks do.
  qlora.framework = Framework::kMegatron;
  q = Plan_(qlora, c);
  ASSERT_TRUE(q.infeasible);
  EXPECT_EQ(q.infeasible->kind, InfeasibleKind::kNoLayout);
  ASSERT_TRUE(q.infeasible->error);
  EXPECT_EQ(q.infeasible->error->field, "finetune");
}

// LoRA's data-parallel layouts on one node often tie on time (ZeRO 2 or 3, one sequence a rank
// or four): of tied plans the one leaving more memory ranks first, whatever else fits.
TEST(Planner, TiedPlansRankByTheMemoryTheyLeave) {
  JobSpec j = Job("llama-2-7b", 1e9, 64, 2048);
  j.framework = Framework::kFsdp;
  j.finetune = FineTune::kLora;
  PlannerOptions o;
  o.top = 200;
  PlanResult r = Plan_(j, OneNode("A100-80GB", 8), o);
  ASSERT_GT(r.plans.size(), 2u) << Why(r);
  int ties = 0;
  for (size_t i = 1; i < r.plans.size(); ++i) {
    const Plan& a = r.plans[i - 1];
    const Plan& b = r.plans[i];
    if (a.total_s != b.total_s || a.gpus != b.gpus) continue;
    ++ties;
    EXPECT_LE(a.device_bytes, b.device_bytes) << i;
  }
  EXPECT_GT(ties, 0) << "no tied plans: the case no longer exercises the tie-break";
}

TEST(Planner, TheEnvironmentsTransformersReleaseReachesTheMemoryModel) {
  const GpuType& g = **GpuCatalog::Default().Lookup("RTX-3090");
  JobSpec j = Job("llama-2-7b", 1e7, 16, 2048);
  j.framework = Framework::kFsdp;
  j.finetune = FineTune::kLora;
  j.limits.hf_loss = HfLoss::kModelUpcastSliced;
  TrainingSpec t = TrainingFor(j, g);
  EXPECT_EQ(t.hf_loss, HfLoss::kModelUpcastSliced);
  EXPECT_EQ(t.device_memory_bytes, g.memory_bytes);
  // Megatron-LM computes its own loss: the release does not apply.
  j.framework = Framework::kMegatron;
  j.finetune = FineTune::kFull;
  EXPECT_EQ(TrainingFor(j, g).hf_loss, HfLoss::kPadded);
  // Planned with it, the same pinned layout holds more (the kept fp32 logits and the slices).
  JobSpec pinned = Job("llama-2-7b", 1e7, 16, 2048);
  pinned.framework = Framework::kFsdp;
  pinned.finetune = FineTune::kLora;
  pinned.lora.adapter_bytes = 2;
  pinned.precision = Precision::kBf16Pure;
  pinned.gpu = "A100-80GB";
  pinned.gpus = 2;
  pinned.micro_batch = 8;
  pinned.zero = 3;
  pinned.recompute = Recompute::kFull;
  const Cluster c = OneNode("A100-80GB", 8);
  PlanResult now = Plan_(pinned, c);
  pinned.limits.hf_loss = HfLoss::kModelUpcastSliced;
  PlanResult old = Plan_(pinned, c);
  ASSERT_FALSE(now.plans.empty()) << Why(now);
  ASSERT_FALSE(old.plans.empty()) << Why(old);
  EXPECT_GT(old.plans.front().peak_bytes, now.plans.front().peak_bytes);
  EXPECT_GT(old.plans.front().reserved_bytes, now.plans.front().reserved_bytes);
}

// The QLoRA paper fine-tuned LLaMA-65B on one 48 GB GPU (Dettmers et al. 2023, abstract):
// artidoro/qlora's finetune_guanaco_65b.sh — NF4 with double quantisation, LoRA r = 64 on every
// linear layer, alpha 16, dropout 0.05, adapters cast to bf16, paged 32-bit AdamW, gradient
// checkpointing, micro-batch 1 of at most 16 + 512 tokens, 16 sequences a step.
TEST(Planner, TheQloraPapers65bFineTuneFitsOne48GbGpu) {
  JobSpec j = Job("llama-65b", 1e7, 16, 528);
  j.framework = Framework::kHf;
  j.finetune = FineTune::kQlora;
  j.lora.rank = 64;
  j.lora.alpha = 16;
  j.lora.dropout = 0.05;
  j.lora.adapter_bytes = 2;
  j.optimizer = OptimizerKind::kPagedAdamW;
  j.micro_batch = 1;
  PlanResult r = Plan_(j, OneNode("A40", 1));
  ASSERT_FALSE(r.plans.empty()) << Why(r);
  const Plan& p = r.plans.front();
  EXPECT_EQ(p.gpus, 1);
  EXPECT_EQ(p.recompute, Recompute::kFull);
  EXPECT_LE(static_cast<double>(p.resident_bytes) * 1.1, static_cast<double>(48 * kGiB));
  // PEFT's defaults (fp32 adapters) with torch's AdamW do not fit the same GPU.
  j.lora.adapter_bytes = 4;
  j.optimizer = OptimizerKind::kAdamW;
  EXPECT_TRUE(Plan_(j, OneNode("A40", 1)).infeasible);
}

// Two DGX A100 (8 x A100-40GB, 1 TB of system memory each: NVIDIA DGX A100 user guide,
// factory configuration of the 320 GB system).
Cluster TwoDgxA100_40(double host_gib) {
  Cluster c;
  c.name = "dgx-a100-40gb";
  for (int i = 0; i < 2; ++i) {
    c.nodes.push_back({"dgx" + std::to_string(i), "A100-40GB", 8, 25, host_gib});
  }
  return c;
}

// A 70B full fine-tune fits no layout of 16 x A100-40GB (16 bytes a parameter is 70 GB a GPU
// even fully sharded); ZeRO-Infinity/ZeRO-Offload moves the states to the nodes' host memory.
TEST(Planner, Full70bFineTuneFitsSixteenA100_40GbOnlyWithOffload) {
  JobSpec j = Job("llama-2-70b", 1e9, 64, 4096);
  j.framework = Framework::kDeepSpeed;
  JobSpec no_offload = j;
  no_offload.offload = Offload::kNone;
  PlanResult none = Plan_(no_offload, TwoDgxA100_40(1024));
  ASSERT_TRUE(none.infeasible);
  EXPECT_EQ(none.infeasible->kind, InfeasibleKind::kTooLittleMemory);
  PlanResult r = Plan_(j, TwoDgxA100_40(1024));
  ASSERT_FALSE(r.plans.empty()) << Why(r);
  for (const auto& p : r.plans) {
    EXPECT_NE(p.offload, Offload::kNone);
    EXPECT_GT(p.host_bytes_per_node, 0);
    EXPECT_LE(static_cast<double>(p.host_bytes_per_node) * 1.5, 1024.0 * kGiB);
  }
  EXPECT_NE(Why(r).find("offload"), std::string::npos) << Why(r);
  // Nodes of 256 GB hold no layout's states; a cluster file without host memory is never
  // offloaded to. Both say so.
  PlanResult small = Plan_(j, TwoDgxA100_40(256));
  ASSERT_TRUE(small.infeasible);
  EXPECT_TRUE(small.infeasible->offload_tried);
  EXPECT_GT(small.infeasible->offload_least_host_bytes, 256 * kGiB);
  EXPECT_EQ(small.infeasible->offload_host_memory_bytes, 256 * kGiB);
  PlanResult unknown = Plan_(j, TwoDgxA100_40(0));
  ASSERT_TRUE(unknown.infeasible);
  EXPECT_FALSE(unknown.infeasible->offload_tried);
  ASSERT_EQ(unknown.infeasible->host_memory_unknown.size(), 1u);
  EXPECT_NE(Why(unknown).find("host_memory_gib"), std::string::npos) << Why(unknown);
}

// Answer.AI's fsdp_qlora fine-tuned Llama-2-70B with QLoRA on two 24 GB RTX 3090s, with FSDP's
// CPUOffload (benchmarks_03_2024.md). Its 4-bit base is about 35 GB, half of it on each GPU with
// the adapters' states and a layer being gathered: nothing fits two 24 GB GPUs without offload,
// and with it the sharded base and the adapters' states wait in host memory.
TEST(Planner, QloraOf70bOnTwo24GbGpusFitsWithFsdpCpuOffload) {
  JobSpec j = Job("llama-2-70b", 1e7, 2, 2048);
  j.framework = Framework::kFsdp;
  j.finetune = FineTune::kQlora;
  j.lora.rank = 64;
  j.lora.upcast_rest = false;
  auto two_3090 = [](double host_gib) {
    Cluster c;
    c.name = "two-3090";
    c.nodes.push_back({"n0", "RTX-3090", 2, 25, host_gib});
    return c;
  };
  JobSpec pinned = j;
  pinned.offload = Offload::kNone;
  PlanResult none = Plan_(pinned, two_3090(128));
  ASSERT_TRUE(none.infeasible) << Why(none);
  PlanResult r = Plan_(j, two_3090(128));
  ASSERT_FALSE(r.plans.empty()) << Why(r);
  for (const auto& p : r.plans) {
    EXPECT_EQ(p.offload, Offload::kParams);  // on one GPU or both: every plan offloads
    EXPECT_GT(p.host_bytes_per_node, 0);
  }
  EXPECT_NE(Why(r).find("offload"), std::string::npos) << Why(r);
  // A node with too little host memory for the states: offload was tried and says why.
  PlanResult small = Plan_(j, two_3090(16));
  ASSERT_TRUE(small.infeasible);
  EXPECT_TRUE(small.infeasible->offload_tried);
}

// An FP8 job on a cluster of H100 and A100 nodes: FP8 linears where the GPUs have FP8 tensor
// cores, bf16 mixed precision on the others, and the plans say which; on the H100s FP8 is
// faster than the same job in bf16.
TEST(Planner, Fp8RunsWhereTheGpusHaveFp8TensorCores) {
  Cluster c;
  c.name = "h100-a100";
  c.nodes.push_back({"h0", "H100-80GB", 8, 50, 0});
  c.nodes.push_back({"a0", "A100-80GB", 8, 25, 0});
  JobSpec j = Job("llama-3-8b", 1e10, 64, 4096);
  j.precision = Precision::kFp8;
  PlannerOptions o;
  o.top = 1000;
  PlanResult r = Plan_(j, c, o);
  ASSERT_FALSE(r.plans.empty()) << Why(r);
  bool h100 = false, a100 = false;
  for (const auto& p : r.plans) {
    if (p.gpu == "H100-80GB") {
      h100 = true;
      EXPECT_EQ(p.precision, Precision::kFp8);
    } else {
      a100 = true;
      EXPECT_EQ(p.precision, Precision::kBf16);
    }
  }
  EXPECT_TRUE(h100 && a100);
  JobSpec bf16 = j;
  bf16.precision = Precision::kBf16;
  PlanResult b = Plan_(bf16, c, o);
  ASSERT_FALSE(b.plans.empty());
  EXPECT_EQ(r.plans[0].gpu, "H100-80GB");
  EXPECT_LT(r.plans[0].total_s, b.plans[0].total_s);
}

TEST(Planner, MixtureOfExpertsRunsExpertParallel) {
  // Mixtral-8x7B (46.7B parameters, 8 experts) on 8 nodes of 8 H100s. Without expert
  // parallelism every data-parallel rank holds all experts, so the states fit only with deep
  // TP x PP; splitting the experts over EP ranks leaves each rank one to four of them.
  Cluster c;
  c.name = "h100x64";
  for (int i = 0; i < 8; ++i) c.nodes.push_back({"n" + std::to_string(i), "H100-80GB", 8, 50, 0});
  JobSpec j = Job("mixtral-8x7b", 1e11, 256, 4096);
  PlannerOptions o;
  o.top = 1000;
  PlanResult r = Plan_(j, c, o);
  ASSERT_FALSE(r.plans.empty()) << Why(r);
  EXPECT_GT(r.plans[0].ep, 1);
  const Plan& best = r.plans[0];
  EXPECT_EQ(best.tp * best.dp * best.cp / best.etp % best.ep, 0);
  JobSpec no_ep = j;
  no_ep.ep = 1;
  PlanResult b = Plan_(no_ep, c, o);
  ASSERT_FALSE(b.plans.empty()) << Why(b);
  EXPECT_LT(r.plans[0].total_s, b.plans[0].total_s);
  // A dense model is never given EP.
  PlanResult dense = Plan_(Job("llama-3-8b", 1e10, 64, 4096), c, o);
  ASSERT_FALSE(dense.plans.empty());
  for (const auto& p : dense.plans) EXPECT_EQ(p.ep, 1);
}

TEST(Planner, TorchtitanJobsCheckpointEveryNthLayerWhenThatIsEnough) {
  // Llama-3.1-8B over FSDP on one node of 8 H100s, 8192-token sequences one at a time: keeping
  // every activation does not fit, checkpointing every 2nd block does, and recomputes half as
  // much as checkpointing every block.
  JobSpec j = Job("llama-3.1-8b", 1e10, 64, 8192);
  j.framework = Framework::kFsdp;
  j.tp = 1;
  j.pp = 1;
  j.micro_batch = 1;
  PlanResult r = Plan_(j, OneNode("H100-80GB", 8));
  ASSERT_FALSE(r.plans.empty()) << Why(r);
  const Plan& best = r.plans.front();
  EXPECT_EQ(best.recompute, Recompute::kFull);
  EXPECT_GT(best.recompute_every, 1);
  JobSpec none = j;
  none.recompute = Recompute::kNone;
  EXPECT_TRUE(Plan_(none, OneNode("H100-80GB", 8)).infeasible);
  JobSpec every_layer = j;
  every_layer.recompute = Recompute::kFull;
  PlanResult full = Plan_(every_layer, OneNode("H100-80GB", 8));
  ASSERT_FALSE(full.plans.empty());
  EXPECT_EQ(full.plans.front().recompute_every, 1);
  EXPECT_LT(best.total_s, full.plans.front().total_s);
}

// Hybrid sharding (HSDP) under FSDP: on two nodes of 8 GPUs joined by 100 Gb/s Ethernet, full
// sharding all-gathers every layer's weights across the network in forward and backward, while
// HSDP gathers over NVLink and sends only each rank's 1/8 of the gradient across: faster, at the
// price of states sharded over 8 ranks instead of 16: llama-2-13b's 13e9 parameters x 12 to 16
// bytes (fp32 weights and Adam moments, plus the fp32 gradients that gradient accumulation, 64
// sequences in 4 micro-batches a step, keeps from one micro-batch to the next) x (1/8 - 1/16) =
// 9.1 to 12.1 GiB per GPU more allocated, at most 12.7 GiB with the caching allocator's 5%
// reserve on top. Megatron-LM's distributed optimizer has no such mode.
TEST(Planner, FsdpJobsAcrossNodesMayShardWithinANode) {
  Cluster c;
  c.name = "two-nodes";
  c.nodes.push_back({"n0", "H100-80GB", 8, 12.5});
  c.nodes.push_back({"n1", "H100-80GB", 8, 12.5});
  JobSpec j = Job("llama-2-13b", 1e10, 64, 2048);
  j.framework = Framework::kFsdp;
  j.gpus = 16;
  j.tp = 1;
  j.pp = 1;
  j.zero = 3;
  j.micro_batch = 1;
  j.recompute = Recompute::kNone;
  PlannerOptions o;
  o.top = 100;
  PlanResult r = Plan_(j, c, o);
  const Plan* full = nullptr;
  const Plan* hybrid = nullptr;
  for (const Plan& p : r.plans) {
    if (p.shard_group == 0 && !full) full = &p;
    if (p.shard_group == 8 && !hybrid) hybrid = &p;
    EXPECT_TRUE(p.shard_group == 0 || p.shard_group == 8) << p.shard_group;
  }
  ASSERT_TRUE(full && hybrid) << Why(r);
  EXPECT_GT(hybrid->tokens_per_s, 1.2 * full->tokens_per_s);
  EXPECT_GT(hybrid->device_bytes - full->device_bytes, 9 * kGiB);
  EXPECT_LT(hybrid->device_bytes - full->device_bytes, 12.8 * kGiB);
  EXPECT_EQ(PlanToJson(*hybrid)["shard_group"], 8);
  EXPECT_FALSE(PlanToJson(*full).contains("shard_group"));  // train.py's default: all of dp
  // One node: nothing to replicate across.
  JobSpec one = j;
  one.gpus = 8;
  for (const Plan& p : Plan_(one, c, o).plans) EXPECT_EQ(p.shard_group, 0);
  j.framework = Framework::kMegatron;
  j.zero.reset();
  for (const Plan& p : Plan_(j, c, o).plans) EXPECT_EQ(p.shard_group, 0);
}

// `fits` judged on the reading a user takes: allocated <= reserved <= device for every layout
// (the caching allocator reserves what it allocates; the device adds the CUDA context and
// NCCL's buffers), so each reading admits at least the layouts of the next, and every plan fits
// its own reading with the margin.
TEST(Planner, FitsIsJudgedOnTheChosenReading) {
  JobSpec j = Job("llama-2-13b", 1e10, 64, 4096);
  const Cluster c = Bundled("lab");
  PlannerOptions o;
  o.top = 1000;
  std::map<Reading, int64_t> fitting;
  for (Reading r : {Reading::kAllocated, Reading::kReserved, Reading::kDevice}) {
    o.reading = r;
    PlanResult res = Plan_(j, c, o);
    fitting[r] = res.layouts_fitting;
    ASSERT_FALSE(res.plans.empty()) << ReadingName(r) << ": " << Why(res);
    for (const Plan& p : res.plans) {
      EXPECT_LE(p.peak_bytes, p.reserved_bytes);
      EXPECT_LE(p.reserved_bytes, p.device_bytes);
      EXPECT_LE(static_cast<double>(JudgedBytes(p, r)) * 1.10,
                static_cast<double>(p.gpu_memory_bytes) + 1)
          << ReadingName(r);
    }
  }
  EXPECT_GE(fitting[Reading::kAllocated], fitting[Reading::kReserved]);
  EXPECT_GE(fitting[Reading::kReserved], fitting[Reading::kDevice]);
  EXPECT_GT(fitting[Reading::kAllocated], fitting[Reading::kDevice]);
  EXPECT_EQ(ParseReading("reserved"), Reading::kReserved);
  EXPECT_FALSE(ParseReading("nvidia-smi").has_value());
}

TEST(Planner, ActivationOffloadWhenNothingElseFits) {
  // Llama-2-7B, full fine-tune in pure bf16 under the HF/torchtune stack, two 24,576-token
  // sequences a micro-batch on one A100-80GB: even with every layer checkpointed the layer
  // inputs (32 x 2 x 24576 x 4096 x 2 bytes) push it past the GPU; offloading all but the last
  // five of them (27 x 402,653,184 bytes) to the node's 256 GiB fits, and the plan says so.
  JobSpec j = Job("llama-2-7b", 1e9, 2, 24576);
  j.framework = Framework::kHf;
  j.precision = Precision::kBf16Pure;
  j.micro_batch = 2;
  Cluster c;
  c.name = "one-a100";
  c.nodes.push_back({"n0", "A100-80GB", 1, 25, 256});
  PlanResult r = Plan_(j, c);
  ASSERT_FALSE(r.plans.empty()) << Why(r);
  EXPECT_TRUE(r.plans.front().offload_activations);
  EXPECT_EQ(r.plans.front().host_bytes_per_node, int64_t{27} * 402'653'184);
  EXPECT_NE(ExplainPlan(r, {}).find("activations offloaded"), std::string::npos);
  // With too little host memory the plan says how much a node would need: at least the 27
  // offloaded layer inputs.
  c.nodes[0].host_memory_gib = 8;
  PlanResult small = Plan_(j, c);
  ASSERT_TRUE(small.infeasible);
  EXPECT_GE(small.infeasible->offload_least_host_bytes, int64_t{27} * 402'653'184);
  EXPECT_EQ(small.infeasible->offload_host_memory_bytes, int64_t{8} << 30);
  EXPECT_NE(ExplainPlan(small, {}).find("host memory per node"), std::string::npos)
      << ExplainPlan(small, {});
  // Without the nodes' host memory it is not tried; pinned off, nothing fits.
  c.nodes[0].host_memory_gib = 0;
  EXPECT_TRUE(Plan_(j, c).infeasible);
  c.nodes[0].host_memory_gib = 256;
  j.offload_activations = false;
  EXPECT_TRUE(Plan_(j, c).infeasible);
}

TEST(Planner, BadJobsAreErrors) {
  JobSpec j = Job("gpt2");
  j.tokens = 0;
  EXPECT_FALSE(PlanJob(j, Bundled("lab"), GpuCatalog::Default(), {}).ok());
  j = Job("gpt2");
  j.gpu = "B300";
  EXPECT_FALSE(PlanJob(j, Bundled("lab"), GpuCatalog::Default(), {}).ok());
}

TEST(Planner, EncodersArePlannedWithAMaskedLmHead) {
  // BERT-large (hidden 1024, vocab 30,522, seq 512). The masked-LM head predicts every token
  // over the vocabulary; a classification head (2 labels) only the pooled first token. So on
  // the same layout, the plan must hold the bf16 logits and the fp32 softmax that
  // cross-entropy keeps for backward, 2 + 4 bytes per token per vocabulary entry (of the
  // rank's vocabulary shard), and at most those plus the logits' bf16 gradient (2 more), the
  // head's extra parameters at 18 bytes each (bf16 weight, fp32 gradient, fp32 master weight
  // and Adam moments) and 32 MiB for the head's hidden-width activations and allocator
  // rounding. Extra parameters: transform dense 1024 x 1024 + 1024, its LayerNorm 2 x 1024 and
  // the decoder bias 30,522 (the decoder weight is tied to the embedding), less the
  // classifier's 1024 x 2 + 2: 1,080,120.
  PlanResult r = Plan_(Job("bert-large-uncased", 1e9, 256, 512), Bundled("lab"));
  ASSERT_FALSE(r.plans.empty()) << Why(r);
  const ModelSpec bert = *ResolveModel("bert-large-uncased");
  int checked = 0;
  for (const Plan& p : r.plans) {
    // One pipeline stage holds the head; with more, the worst stage (the one a plan's memory
    // is) is the first, which holds in-flight activations and no head. bf16 on the A100 (the
    // V100 trains in fp16).
    if (p.gpu != "A100-80GB" || p.pp != 1) continue;
    TrainingSpec t;
    t.head = HeadType::kClassification;
    t.seq_len = 512;
    t.global_batch = 256;
    t.micro_batch = p.micro_batch;
    t.recompute = p.recompute;
    ParallelPlan layout;
    layout.tp = p.tp;
    layout.pp = p.pp;
    layout.dp = p.dp;
    layout.cp = p.cp;
    layout.zero = static_cast<int>(p.zero);
    layout.sequence_parallel = p.tp > 1;
    layout.distributed_optimizer = p.distributed_optimizer;
    auto cls = PredictMemory(bert, t, layout, StageDetail::kWorst);
    ASSERT_TRUE(cls.ok()) << cls.status().ToString();
    const double tokens = static_cast<double>(p.micro_batch * 512 / p.cp);
    const double vocab = 30522.0 / static_cast<double>(p.tp);
    const double diff = static_cast<double>(p.device_bytes - cls->device_bytes);
    // Megatron frees the logits when forward ends, so the classification plan's own peak can
    // lie in its layers' backward, where the MLM plan holds no vocabulary-sized buffer either:
    // the residual stream's gradient and a layer's hidden-width gradients above the start of
    // backward, fewer than 4 bf16 tensors of tokens x 1,024.
    EXPECT_GE(diff, tokens * vocab * (2 + 4) - 4.0 * 2 * tokens * 1024)
        << "mb " << p.micro_batch << " tp " << p.tp;
    EXPECT_LE(diff, tokens * vocab * (2 + 4 + 2) + 18.0 * 1080120 + 32.0 * (1 << 20))
        << "mb " << p.micro_batch << " tp " << p.tp;
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST(Planner, CostObjectiveRanksCheapestFirst) {
  PlannerOptions o;
  o.objective = Objective::kCost;
  PlanResult r = Plan_(Job("llama-2-7b"), Bundled("cluster2048"), o);
  ASSERT_GE(r.plans.size(), 2u);
  for (size_t i = 1; i < r.plans.size(); ++i) {
    ASSERT_TRUE(r.plans[i].cost && r.plans[i - 1].cost);
    EXPECT_LE(*r.plans[i - 1].cost, *r.plans[i].cost);
  }
  // The fastest plan is never cheaper than the cheapest.
  PlanResult fast = Plan_(Job("llama-2-7b"), Bundled("cluster2048"));
  ASSERT_TRUE(fast.plans[0].cost);
  EXPECT_GE(*fast.plans[0].cost, *r.plans[0].cost);
  EXPECT_LE(fast.plans[0].total_s, r.plans[0].total_s);
}

TEST(Planner, CostIsGpuHoursAtTheCatalogPrice) {
  // On-demand prices per GPU-hour in data/gpus.json (each with its source there).
  const std::map<std::string, double> price = {
      {"H100-80GB", 3.49}, {"A100-80GB", 1.59}, {"A100-40GB", 1.99}, {"L40S", 1.09}};
  PlannerOptions o;
  o.objective = Objective::kCost;
  PlanResult r = Plan_(Job("llama-2-7b"), Bundled("cluster2048"), o);
  ASSERT_FALSE(r.plans.empty());
  for (const Plan& p : r.plans) {
    ASSERT_TRUE(price.count(p.gpu)) << p.gpu;
    ASSERT_TRUE(p.cost) << p.gpu;
    double gpu_hours = static_cast<double>(p.gpus) * p.total_s / 3600;
    EXPECT_NEAR(*p.cost, gpu_hours * price.at(p.gpu), 1e-9 * *p.cost) << p.gpu;
  }
}

TEST(Planner, UnpricedGpusRankLastByCost) {
  // cluster64's V100-32GB and RTX-3090 have no price in the catalog: by cost, every priced
  // (A100-80GB) plan comes before them.
  PlannerOptions o;
  o.objective = Objective::kCost;
  o.top = std::numeric_limits<int64_t>::max();
  PlanResult r = Plan_(Job("llama-2-7b"), Bundled("cluster64"), o);
  ASSERT_FALSE(r.plans.empty());
  ASSERT_TRUE(r.plans.front().cost);
  bool unpriced_seen = false;
  for (const Plan& p : r.plans) {
    if (!p.cost) unpriced_seen = true;
    EXPECT_FALSE(unpriced_seen && p.cost) << "a priced plan after an unpriced one";
  }
  EXPECT_TRUE(unpriced_seen);
}

// ---- the prose, rendered from typed outcomes built by hand ----------------------------------

Plan Layout(const char* gpu, int64_t gpus, int64_t tp, int64_t pp, int64_t dp, Recompute rc) {
  Plan p;
  p.gpu = gpu;
  p.gpus = gpus;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  p.recompute = rc;
  return p;
}

TEST(ExplainPlan, NamesTheWinner) {
  PlanResult r;
  Plan w = Layout("A100-80GB", 16, 1, 2, 8, Recompute::kNone);
  w.total_s = 3.1 * 86400;
  w.mfu = 0.64;
  w.device_bytes = 35 * kGiB;
  w.gpu_memory_bytes = 80 * kGiB;
  r.plans = {w};
  r.pareto = {w};
  EXPECT_EQ(ExplainPlan(r, {}),
            "fastest plan: 16 x A100-80GB (TP 1, PP 2, DP 8, micro-batch 1, none recomputation) "
            "trains in 3.1 days at 64% MFU; 35 of 80 GiB per GPU");
  PlannerOptions cost;
  cost.objective = Objective::kCost;
  r.plans[0].cp = 2;
  r.plans[0].total_s = 90 * 60;
  EXPECT_EQ(ExplainPlan(r, cost),
            "cheapest plan: 16 x A100-80GB (TP 1, PP 2, DP 8, CP 2, micro-batch 1, none "
            "recomputation) trains in 1.5 h at 64% MFU; 35 of 80 GiB per GPU");
  r.plans.clear();
  EXPECT_EQ(ExplainPlan(r, {}), "no plans requested (--top 0)");
}

TEST(ExplainPlan, SaysWhyNothingFitsAndWhatWould) {
  PlanResult r;
  r.infeasible = Infeasible{};
  r.infeasible->kind = InfeasibleKind::kTooLittleMemory;
  r.infeasible->shortfalls = {
      {"A100-80GB", 80 * kGiB, 85 * kGiB, Layout("A100-80GB", 16, 8, 2, 1, Recompute::kFull)},
      {"RTX-3090", 24 * kGiB, 45 * kGiB, Layout("RTX-3090", 32, 4, 8, 1, Recompute::kFull)}};
  r.infeasible->would_fit =
      WouldFit{Layout("A100-80GB", 20, 1, 20, 1, Recompute::kFull), /*cluster_gpus=*/16};
  EXPECT_EQ(ExplainPlan(r, {}),
            "no plan fits this cluster: A100-80GB (80 GiB): at least 85 GiB per GPU even on 16 "
            "of them (TP=8 PP=2 DP=1, full recomputation); RTX-3090 (24 GiB): at least 45 GiB "
            "per GPU even on 32 of them (TP=4 PP=8 DP=1, full recomputation). It would fit on "
            "20 x A100-80GB (TP=1 PP=20 DP=1, full recomputation); this cluster has 16.");
  r.infeasible->would_fit.reset();
  r.infeasible->shortfalls.pop_back();
  EXPECT_EQ(ExplainPlan(r, {}),
            "no plan fits this cluster: A100-80GB (80 GiB): at least 85 GiB per GPU even on 16 "
            "of them (TP=8 PP=2 DP=1, full recomputation). More GPUs of a type (to shard "
            "further) or GPUs with more memory would fit it.");
  r.infeasible = Infeasible{};
  r.infeasible->kind = InfeasibleKind::kGoalsUnmet;
  EXPECT_EQ(ExplainPlan(r, {}),
            "plans fit in memory, but none meets the deadline or budget (a GPU type whose price "
            "is unknown never meets a budget)");
  r.infeasible = Infeasible{};
  r.infeasible->kind = InfeasibleKind::kNoLayout;
  EXPECT_EQ(ExplainPlan(r, {}), "no layout of this model is possible here with these pins");
  r.infeasible->error = LayoutError{"tp", "must divide the heads"};
  EXPECT_EQ(ExplainPlan(r, {}),
            "no layout of this model is possible here (tp: must divide the heads)");
}

TEST(ExplainPlan, RendersWhatThePlannerFound) {
  // End to end, the one test of the planner's prose: the sentence carries the typed values.
  PlanResult r = Plan_(Job("llama-3.1-405b", 1e12, 64, 8192), Bundled("lab"));
  ASSERT_TRUE(r.infeasible && r.infeasible->would_fit);
  std::string text = ExplainPlan(r, {});
  EXPECT_EQ(text.rfind("no plan fits this cluster: A100-80GB (80 GiB): at least ", 0), 0u) << text;
  for (const char* gpu : {"V100-32GB (32 GiB)", "RTX-3090 (24 GiB)"}) {
    EXPECT_NE(text.find(gpu), std::string::npos) << text;
  }
  EXPECT_NE(text.find("It would fit on " + std::to_string(r.infeasible->would_fit->plan.gpus) +
                      " x A100-80GB"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("this cluster has 8."), std::string::npos) << text;
}

TEST(ExplainPlan, InfeasibleAsJson) {
  PlanResult r = Plan_(Job("gpt2-xl", 1e10, 64, 2048), Bundled("cluster64"));
  ASSERT_TRUE(r.infeasible);
  nlohmann::json j = InfeasibleToJson(*r.infeasible);
  EXPECT_EQ(j["kind"], "no_layout");
  EXPECT_EQ(j["error"]["field"], "seq_len");
  EXPECT_TRUE(j["shortfalls"].empty());
  EXPECT_TRUE(j["would_fit"].is_null());
  EXPECT_TRUE(InfeasibleOrNull(Plan_(Job("gpt2", 1e9, 64, 1024), Bundled("lab"))).is_null());
}

}  // namespace
}  // namespace frenzy
