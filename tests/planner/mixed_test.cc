// Heterogeneous pipelines (planner/mixed.h): what no single GPU type holds, several do.
#include "planner/mixed.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <string>

#include "memory/memory_model.h"
#include "sched/job_options.h"
#include "model/zoo.h"

namespace frenzy {
namespace {

JobSpec Job(const char* model, int64_t global_batch = 64) {
  JobSpec j;
  j.model = *ResolveModel(model);
  j.tokens = 1e10;
  j.global_batch = global_batch;
  j.seq_len = 2048;
  return j;
}

// Llama-3.1-70B on sia64 (16 A100-40GB, 24 V100-32GB, 24 T4; like Sia's testbed): no single type
// holds it (at 18 bytes a parameter its states alone are 1.27 TB; the 16 A100s have 640 GB), but
// a pipeline over the types does, every stage within its own GPU's memory with the margin, on
// no more GPUs of a type than the cluster has, the stages covering the 80 layers once.
TEST(MixedPipelines, Llama70BFitsOverSia64sThreeTypes) {
  const Cluster c = *ResolveCluster("sia64", GpuCatalog::Default());
  const JobSpec job = Job("llama-3.1-70b");
  PlannerOptions o;
  auto single = PlanJob(job, c, GpuCatalog::Default(), o);
  ASSERT_TRUE(single.ok());
  ASSERT_TRUE(single->plans.empty());
  auto r = PlanMixedPipelines(job, c, GpuCatalog::Default(), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->plans.empty());
  std::map<std::string, int64_t> have;
  for (const auto& t : ClusterGpuTypes(c, GpuCatalog::Default())) have[t.gpu->name] = t.count;
  double last = 0;
  for (const MixedPlan& p : r->plans) {
    EXPECT_GE(p.parts.size(), 2u);
    EXPECT_EQ(std::accumulate(p.stage_layers.begin(), p.stage_layers.end(), int64_t{0}), 80);
    ASSERT_EQ(static_cast<int64_t>(p.stage_layers.size()), p.pp);
    int64_t stages = 0, gpus = 0;
    for (const MixedPart& part : p.parts) {
      EXPECT_LE(part.gpus, have[part.gpu]) << part.gpu;
      EXPECT_EQ(part.gpus, part.stages * p.tp * p.dp);
      stages += part.stages;
      gpus += part.gpus;
    }
    EXPECT_EQ(stages, p.pp);
    EXPECT_EQ(gpus, p.gpus);
    for (size_t s = 0; s < p.stage_layers.size(); ++s) {
      EXPECT_LE(static_cast<double>(p.stage_device_bytes[s]) * (1 + o.memory_margin),
                static_cast<double>(p.stage_gpu_memory_bytes[s]))
          << "stage " << s;
    }
    // V100s and T4s have no bf16: the pipeline runs fp16.
    EXPECT_EQ(p.precision, Precision::kFp16);
    EXPECT_GE(p.iteration_s, last);  // fastest first
    last = p.iteration_s;
  }
  // The stages' memory is MARP's for that layout (re-predicted here from the plan's fields).
  const MixedPlan& best = r->plans.front();
  TrainingSpec t;
  t.seq_len = 2048;
  t.global_batch = 64;
  t.precision = best.precision;
  t.recompute = best.recompute;
  ParallelPlan p;
  p.tp = best.tp;
  p.pp = best.pp;
  p.dp = best.dp;
  p.distributed_optimizer = best.distributed_optimizer;
  p.stage_layers = best.stage_layers;
  auto est = PredictMemory(job.model, t, p);
  ASSERT_TRUE(est.ok()) << est.status().ToString();
  for (size_t s = 0; s < est->stages.size(); ++s) {
    EXPECT_EQ(est->stages[s].device_bytes - est->stages[s].pageable_bytes,
              best.stage_device_bytes[s]);
  }
}

// A job that pins pp to 1, or fine-tunes (data parallel only), gets no pipeline.
TEST(MixedPipelines, NoneWhereTheJobCannotPipeline) {
  const Cluster c = *ResolveCluster("sia64", GpuCatalog::Default());
  JobSpec job = Job("llama-3.1-70b");
  job.pp = 1;
  auto r = PlanMixedPipelines(job, c, GpuCatalog::Default(), {});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->plans.empty());
  job.pp.reset();
  job.finetune = FineTune::kLora;
  r = PlanMixedPipelines(job, c, GpuCatalog::Default(), {});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->plans.empty());
}

// Heterogeneous data parallelism over one node of 8 A100-40GB and two of 4 V100-32GB, Llama-2-7B
// at a global batch of 512: every part fits its own GPU with the margin, the parts' batches add
// up to the global batch in whole micro-batches, and the split balances the groups' steps: an
// A100 replica takes 3 to 4.6 times a V100 replica's sequences (in fp16 the A100's dense peak is
// 312 TFLOP/s against the V100's 125, and measured training runs reach about 60% of the A100's
// and 40% of the V100's (llm-foundry's MPT table, OneFlow's DLPerf; data/perf_calibration.json):
// 312 x 0.6 / (125 x 0.4) = 3.7), and the two groups' steps end within 10% of each other. The
// fastest such plan beats the A100s alone.
TEST(MixedDataParallel, TwoTypesSplitTheBatchSoThatTheirStepsMatch) {
  const char* text = R"({"name": "a100-v100", "node_groups": [
      {"prefix": "a", "count": 1, "gpu": "A100-40GB", "gpus_per_node": 8, "network_gbs": 25},
      {"prefix": "v", "count": 2, "gpu": "V100-32GB", "gpus_per_node": 4, "network_gbs": 25}]})";
  auto c = Cluster::Parse(text, "test", GpuCatalog::Default());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const JobSpec job = Job("llama-2-7b", 512);
  PlannerOptions o;
  auto r = PlanMixedDataParallel(job, *c, GpuCatalog::Default(), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->plans.empty());
  std::map<std::string, int64_t> have = {{"A100-40GB", 8}, {"V100-32GB", 8}};
  for (const MixedPlan& p : r->plans) {
    EXPECT_EQ(p.family, MixedFamily::kData);
    ASSERT_EQ(p.parts.size(), 2u);
    int64_t batch = 0, gpus = 0;
    for (const MixedPart& part : p.parts) {
      EXPECT_LE(part.gpus, have[part.gpu]);
      EXPECT_EQ(part.gpus, part.dp * p.tp * p.pp);
      EXPECT_EQ(part.batch, part.dp * part.micro_batch * part.accumulation);
      EXPECT_LE(static_cast<double>(part.device_bytes) * (1 + o.memory_margin),
                static_cast<double>(part.gpu_memory_bytes))
          << part.gpu;
      batch += part.batch;
      gpus += part.gpus;
    }
    EXPECT_EQ(batch, 512);
    EXPECT_EQ(gpus, p.gpus);
    EXPECT_EQ(p.precision, Precision::kFp16);  // V100s have no bf16
  }
  const MixedPlan& best = r->plans.front();
  const MixedPart& a100 = best.parts[0].gpu == "A100-40GB" ? best.parts[0] : best.parts[1];
  const MixedPart& v100 = best.parts[0].gpu == "A100-40GB" ? best.parts[1] : best.parts[0];
  const double ratio = (static_cast<double>(a100.batch) / static_cast<double>(a100.dp)) /
                       (static_cast<double>(v100.batch) / static_cast<double>(v100.dp));
  EXPECT_GT(ratio, 3.0);
  EXPECT_LT(ratio, 4.6);
  EXPECT_LT(std::max(a100.step_s, v100.step_s) / std::min(a100.step_s, v100.step_s), 1.10);
  auto single = PlanJob(job, *c, GpuCatalog::Default(), o);
  ASSERT_TRUE(single.ok());
  ASSERT_FALSE(single->plans.empty());
  EXPECT_GT(best.tokens_per_s, single->plans.front().tokens_per_s);
  // PlanMixed keeps only what beats the best single type.
  auto kept = PlanMixed(job, *c, GpuCatalog::Default(), o, single->plans.front().tokens_per_s);
  ASSERT_TRUE(kept.ok());
  ASSERT_FALSE(kept->plans.empty());
  for (const MixedPlan& p : kept->plans) {
    EXPECT_GT(p.tokens_per_s, single->plans.front().tokens_per_s);
  }
}

// Fine-tuning or a pinned GPU type gets no data-parallel mix.
TEST(MixedDataParallel, NoneForFineTuningOrAPinnedType) {
  const Cluster c = *ResolveCluster("sia64", GpuCatalog::Default());
  JobSpec job = Job("llama-2-7b", 512);
  job.gpu = "A100-40GB";
  auto r = PlanMixedDataParallel(job, c, GpuCatalog::Default(), {});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->plans.empty());
  job.gpu.reset();
  job.finetune = FineTune::kLora;
  r = PlanMixedDataParallel(job, c, GpuCatalog::Default(), {});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->plans.empty());
}

// The scheduler's option table with mixed options (sched/job_options.h): after the single-type
// options, each mixed one's parts add up to its GPUs, on distinct types, within what the cluster
// has; Find and OfType never return one. Gemma-2-27B, which of sia64's types only the A100-40GB
// hold, gets mixed options after its single-type ones; Llama-3.1-70B, which no type holds, mixed
// options only; Llama-2-7B, which every type holds, none (a job with options on two types or
// more is not offered mixes); without `mixed` a table has none.
TEST(MixedOptions, TheOptionTableHoldsMixedPlansAfterTheSingleTypeOnes) {
  const Cluster c = *ResolveCluster("sia64", GpuCatalog::Default());
  std::map<std::string, int64_t> have;
  for (const auto& t : ClusterGpuTypes(c, GpuCatalog::Default())) have[t.gpu->name] = t.count;
  auto seven = BuildJobOptions(Job("llama-2-7b", 128), c, GpuCatalog::Default(),
                               OptionKind::kMarp, 0.1, /*mixed=*/true);
  ASSERT_TRUE(seven.ok()) << seven.status().ToString();
  std::set<int> seven_types;
  for (const RunOption& o : seven->options) {
    EXPECT_FALSE(o.mixed()) << o.plan.gpu;
    seven_types.insert(o.type);
  }
  EXPECT_GE(seven_types.size(), 2u);
  for (const char* model : {"gemma-2-27b", "llama-3.1-70b"}) {
    auto t = BuildJobOptions(Job(model, 128), c, GpuCatalog::Default(), OptionKind::kMarp, 0.1,
                             /*mixed=*/true);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    size_t mixed = 0;
    bool seen_mixed = false;
    for (const RunOption& o : t->options) {
      if (!o.mixed()) {
        EXPECT_FALSE(seen_mixed) << model << ": a single-type option after a mixed one";
        EXPECT_EQ(t->Find(o.type, o.gpus), &o);
        continue;
      }
      seen_mixed = true;
      ++mixed;
      int64_t sum = 0;
      std::map<int, int64_t> per;
      for (const auto& [type, gpus] : o.parts) {
        sum += gpus;
        per[type] += gpus;
        EXPECT_LE(gpus, have[t->types[static_cast<size_t>(type)]]);
      }
      EXPECT_EQ(per.size(), o.parts.size()) << "a type named twice";
      EXPECT_EQ(sum, o.gpus);
      EXPECT_GT(o.plan.tokens_per_s, 0);
      EXPECT_LE(static_cast<double>(o.plan.device_bytes) * 1.1,
                static_cast<double>(o.plan.gpu_memory_bytes) + 1);
      for (const RunOption* s : t->OfType(o.type)) EXPECT_FALSE(s->mixed());
    }
    EXPECT_GT(mixed, 0u) << model;
    EXPECT_LE(mixed, kMaxMixedOptions);
    if (std::string(model) == "llama-3.1-70b") {
      EXPECT_EQ(mixed, t->options.size());
    } else {
      EXPECT_LT(mixed, t->options.size());  // the A100-40GB options first
    }
    auto plain = BuildJobOptions(Job(model, 128), c, GpuCatalog::Default(), OptionKind::kMarp,
                                 0.1);
    ASSERT_TRUE(plain.ok());
    for (const RunOption& o : plain->options) EXPECT_FALSE(o.mixed());
  }
}

// The margin is relaxed only when nothing holds the job with it. Qwen3-32B (global batch 128,
// sequence 2048) on sia64: 16 A100-40GB hold it only inside the margin (without mixed options
// the table offers them with less of it), while a pipeline over the A100s and the V100s holds
// it with all of it; with mixed options the table then keeps the margin, so every option it
// offers is a mixed one that fits with the whole 10%.
TEST(MixedOptions, AMixedPlanWithTheWholeMarginBeatsSingleTypesWithLess) {
  const Cluster c = *ResolveCluster("sia64", GpuCatalog::Default());
  const JobSpec job = Job("qwen3-32b", 128);
  auto plain = BuildJobOptions(job, c, GpuCatalog::Default(), OptionKind::kMarp, 0.1);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  ASSERT_FALSE(plain->options.empty());
  bool inside_margin = false;
  for (const RunOption& o : plain->options) {
    ASSERT_FALSE(o.mixed());
    const double need = static_cast<double>(o.plan.device_bytes);
    const double have = static_cast<double>(o.plan.gpu_memory_bytes);
    EXPECT_LE(need, have) << o.plan.gpu;
    if (need * 1.1 > have) inside_margin = true;
  }
  ASSERT_TRUE(inside_margin) << "the scenario needs single-type options inside the margin";

  auto with_mixed = BuildJobOptions(job, c, GpuCatalog::Default(), OptionKind::kMarp, 0.1,
                                    /*mixed=*/true);
  ASSERT_TRUE(with_mixed.ok()) << with_mixed.status().ToString();
  ASSERT_FALSE(with_mixed->options.empty());
  for (const RunOption& o : with_mixed->options) {
    EXPECT_TRUE(o.mixed()) << o.plan.gpu << " x " << o.gpus;
    EXPECT_LE(static_cast<double>(o.plan.device_bytes) * 1.1,
              static_cast<double>(o.plan.gpu_memory_bytes) + 1)
        << o.plan.gpu;
  }
}

}  // namespace
}  // namespace frenzy
