// Heterogeneous pipelines (planner/mixed.h): what no single GPU type holds, several do.
#include "planner/mixed.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <string>

#include "memory/memory_model.h"
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

}  // namespace
}  // namespace frenzy
