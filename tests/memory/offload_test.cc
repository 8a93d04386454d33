// Offloaded model states (DeepSpeed ZeRO-Offload / ZeRO-Infinity, FSDP CPUOffload): what stays
// on the GPU and what host memory holds, against DeepSpeed's own estimator formulas
// (deepspeed/runtime/zero/stage3.py, estimate_zero3_model_states_mem_needs; stage_1_and_2.py,
// estimate_zero2_model_states_mem_needs), which count 16 bytes a parameter on the host for
// offload_optimizer and 18 with offload_param, before their 1.5 buffer factor.
#include <gtest/gtest.h>

#include "memory/memory_model.h"
#include "zoo_model.h"

namespace frenzy {
namespace {

using test::Predict;
using test::Zoo;

constexpr double kLlama2_70b = 68'976'648'192.0;  // published parameter count

TEST(Offload, ZeroInfinityHostBytesAreDeepSpeedsEstimate) {
  // 2 nodes x 8 GPUs, ZeRO-3, offload_param + offload_optimizer, zero_init: DeepSpeed's
  // estimator gives cpu_mem = 18 x P / num_nodes (x 1.5) per node and only the gathered layers
  // on the GPU; with offload_optimizer alone, 16 x P / num_nodes and 2 x P / 16 on each GPU.
  ModelSpec m = Zoo("llama-2-70b");
  TrainingSpec t;
  t.framework = Framework::kDeepSpeed;
  t.seq_len = 4096;
  t.recompute = Recompute::kFull;
  ParallelPlan p;
  p.dp = 16;
  p.zero = 3;
  p.offload = Offload::kParams;
  MemoryEstimate est = Predict(m, t, p);
  EXPECT_NEAR(8.0 * static_cast<double>(est.host_bytes), 18.0 * kLlama2_70b / 2, 16.0);
  EXPECT_EQ(est.stages[0].breakdown.weights, 0);
  EXPECT_EQ(est.stages[0].breakdown.optimizer, 0);
  p.offload = Offload::kOptimizer;
  est = Predict(m, t, p);
  EXPECT_NEAR(8.0 * static_cast<double>(est.host_bytes), 16.0 * kLlama2_70b / 2, 16.0);
  EXPECT_NEAR(static_cast<double>(est.stages[0].breakdown.weights), 2.0 * kLlama2_70b / 16, 2.0);
  EXPECT_EQ(est.stages[0].breakdown.optimizer, 0);
  // Without offload the same layout holds 16 bytes a parameter / 16 on each GPU.
  p.offload = Offload::kNone;
  MemoryEstimate gpu_only = Predict(m, t, p);
  EXPECT_EQ(gpu_only.host_bytes, 0);
  EXPECT_GT(gpu_only.peak_bytes - est.peak_bytes, static_cast<int64_t>(12.0 * kLlama2_70b / 16));
}

TEST(Offload, ZeroOffloadWithStage2KeepsTheWeightsOnEveryGpu) {
  // estimate_zero2_model_states_mem_needs with cpu_offload: gpu_mem = 2 x P (all 16-bit
  // weights on every GPU), 16 bytes a parameter on the host over all ranks.
  ModelSpec m = Zoo("llama-2-7b");
  TrainingSpec t;
  t.framework = Framework::kDeepSpeed;
  t.recompute = Recompute::kFull;
  ParallelPlan p;
  p.dp = 8;
  p.zero = 2;
  p.offload = Offload::kOptimizer;
  MemoryEstimate est = Predict(m, t, p);
  EXPECT_EQ(est.stages[0].breakdown.weights, 2 * int64_t{6'738'415'616});
  EXPECT_NEAR(8.0 * static_cast<double>(est.host_bytes), 16.0 * 6'738'415'616.0, 16.0);
}

TEST(Offload, FsdpCpuOffloadKeepsShardsGradientsAndTheStepOnTheHost) {
  // CPUOffload(offload_params=True): the fp32 flat-parameter shard, its fp32 gradient and
  // AdamW's two fp32 moments: 16 bytes a parameter, sharded.
  ModelSpec m = Zoo("llama-2-7b");
  TrainingSpec t;
  t.framework = Framework::kFsdp;
  ParallelPlan p;
  p.dp = 8;
  p.zero = 3;
  p.offload = Offload::kParams;
  MemoryEstimate est = Predict(m, t, p);
  EXPECT_NEAR(static_cast<double>(est.host_bytes), 16.0 * 6'738'415'616.0 / 8, 2.0);
  EXPECT_EQ(est.stages[0].breakdown.weights, 0);
  EXPECT_EQ(est.stages[0].breakdown.gradients, 0);
}

TEST(Offload, ActivationOffloadKeepsTheLastFiveLayerInputsOnTheGpu) {
  // torchtune's full_finetune_single_device on Llama-3.2-3B (28 layers, hidden 3072), 2 x 4096
  // tokens in pure bf16 with every layer checkpointed: each layer saves its input, 2 x 4096 x
  // 3072 x 2 = 50,331,648 bytes; OffloadActivations moves them to the host but keeps the last
  // five on the GPU (max_fwd_stash_size = 5): 23 x 50,331,648 bytes leave the GPU, and the host
  // holds them. (torchtune's README: 23.1 -> 21.8 GiB when offloading is added.)
  const ModelSpec model = Zoo("llama-3.2-3b");
  TrainingSpec t;
  t.framework = Framework::kHf;
  t.precision = Precision::kBf16Pure;
  t.micro_batch = 2;
  t.seq_len = 4096;
  t.recompute = Recompute::kFull;
  const MemoryEstimate kept = Predict(model, t, ParallelPlan{});
  t.offload_activations = true;
  const MemoryEstimate off = Predict(model, t, ParallelPlan{});
  ASSERT_FALSE(kept.stages.empty());
  ASSERT_FALSE(off.stages.empty());
  EXPECT_EQ(kept.stages[0].peak_phase, off.stages[0].peak_phase);
  EXPECT_EQ(kept.peak_bytes - off.peak_bytes, int64_t{23} * 50'331'648);
  EXPECT_EQ(off.host_bytes - kept.host_bytes, int64_t{23} * 50'331'648);
  // Megatron's offloading is not this one.
  t.framework = Framework::kMegatron;
  auto megatron = PredictMemory(model, t, ParallelPlan{});
  ASSERT_FALSE(megatron.ok());
  EXPECT_EQ(megatron.status().field(), "offload_activations");
}

TEST(Offload, ImpossibleCombinationsSayWhy) {
  ModelSpec m = Zoo("llama-2-7b");
  TrainingSpec t;
  ParallelPlan p;
  p.dp = 8;
  p.offload = Offload::kOptimizer;
  t.framework = Framework::kMegatron;
  EXPECT_EQ(PredictMemory(m, t, p).status().field(), "offload");
  t.framework = Framework::kDeepSpeed;  // ZeRO 0
  EXPECT_EQ(PredictMemory(m, t, p).status().field(), "offload");
  p.zero = 2;
  p.offload = Offload::kParams;  // offload_param needs stage 3
  EXPECT_EQ(PredictMemory(m, t, p).status().field(), "offload");
  t.framework = Framework::kFsdp;
  p.zero = 3;
  p.offload = Offload::kOptimizer;  // FSDP offloads parameters with everything else
  EXPECT_EQ(PredictMemory(m, t, p).status().field(), "offload");
  p.offload = Offload::kParams;
  EXPECT_TRUE(PredictMemory(m, t, p).ok());
}

}  // namespace
}  // namespace frenzy
