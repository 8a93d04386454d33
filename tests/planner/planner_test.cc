#include "planner/planner.h"

#include <gtest/gtest.h>

#include "model/zoo.h"

namespace frenzy {
namespace {

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

TEST(Planner, EveryPlanFitsWithItsMargin) {
  for (const char* model : {"gpt2-xl", "llama-2-7b", "llama-2-13b", "mixtral-8x7b"}) {
    PlanResult r = Plan_(Job(model, 1e10, 64, 1024), Bundled("cluster64"));
    ASSERT_FALSE(r.plans.empty()) << model << ": " << r.explanation;
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
    EXPECT_FALSE(r.explanation.empty());
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
  EXPECT_EQ(r.plans[0].gpu, "H100-80GB") << r.explanation;
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

TEST(Planner, ImpossibleJobGetsAnExplanation) {
  // Llama-3.1-405B cannot be trained on the 24-GPU lab cluster.
  PlanResult r = Plan_(Job("llama-3.1-405b", 1e12, 64, 8192), Bundled("lab"));
  EXPECT_TRUE(r.plans.empty());
  EXPECT_NE(r.explanation.find("no plan fits"), std::string::npos) << r.explanation;
  EXPECT_NE(r.explanation.find("GiB"), std::string::npos);
}

TEST(Planner, SequenceLongerThanThePositionTableIsExplained) {
  PlanResult r = Plan_(Job("gpt2-xl", 1e10, 64, 2048), Bundled("cluster64"));
  EXPECT_TRUE(r.plans.empty());
  EXPECT_NE(r.explanation.find("position"), std::string::npos) << r.explanation;
}

TEST(Planner, DeadlineAndBudgetFilter) {
  JobSpec j = Job("gpt2-xl", 1e10, 64, 1024);
  PlanResult free = Plan_(j, Bundled("cluster64"));
  ASSERT_FALSE(free.plans.empty());
  j.deadline_s = free.plans[0].total_s / 10;  // impossible deadline
  PlanResult late = Plan_(j, Bundled("cluster64"));
  EXPECT_TRUE(late.plans.empty());
  EXPECT_NE(late.explanation.find("deadline"), std::string::npos);
}

TEST(Planner, BadJobsAreErrors) {
  JobSpec j = Job("gpt2");
  j.tokens = 0;
  EXPECT_FALSE(PlanJob(j, Bundled("lab"), GpuCatalog::Default(), {}).ok());
  j = Job("gpt2");
  j.gpu = "B300";
  EXPECT_FALSE(PlanJob(j, Bundled("lab"), GpuCatalog::Default(), {}).ok());
}

}  // namespace
}  // namespace frenzy

namespace frenzy {
namespace {

TEST(Planner, EncodersArePlannedWithAMaskedLmHead) {
  PlanResult r = Plan_(Job("bert-large-uncased", 1e9, 256, 512), Bundled("lab"));
  ASSERT_FALSE(r.plans.empty()) << r.explanation;
}

TEST(Planner, NothingFitsNamesEveryGpuType) {
  PlanResult r = Plan_(Job("llama-2-70b", 1e10, 256, 2048), Bundled("cluster64"));
  ASSERT_TRUE(r.plans.empty());
  for (const char* gpu : {"A100-80GB", "V100-32GB", "RTX-3090"}) {
    EXPECT_NE(r.explanation.find(gpu), std::string::npos) << r.explanation;
  }
  // ... and says what would fit: more of the cluster's largest GPUs.
  EXPECT_NE(r.explanation.find("would fit on"), std::string::npos) << r.explanation;
  EXPECT_NE(r.explanation.find("x A100-80GB"), std::string::npos) << r.explanation;
}

}  // namespace
}  // namespace frenzy

namespace frenzy {
namespace {

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

TEST(Planner, TimeIsTokensOverThroughput) {
  PlanResult r = Plan_(Job("llama-2-7b", 3e10), Bundled("cluster64"));
  ASSERT_FALSE(r.plans.empty());
  const auto& p = r.plans[0];
  EXPECT_NEAR(p.total_s, 3e10 / p.tokens_per_s, 1e-6 * p.total_s);
  // Twice the tokens, twice the time, same plan.
  PlanResult twice = Plan_(Job("llama-2-7b", 6e10), Bundled("cluster64"));
  EXPECT_NEAR(twice.plans[0].total_s, 2 * p.total_s, 1e-6 * p.total_s);
}

}  // namespace
}  // namespace frenzy
