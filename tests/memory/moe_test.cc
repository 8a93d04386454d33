// Expert parallelism and MoE routing in MARP. Expected values are derived by hand from
// Mixtral-8x7B's architecture (mistralai/Mixtral-8x7B-v0.1 config.json: 32 layers, hidden 4096,
// 8 experts of SwiGLU width 14336, top-2, 32 query and 8 key/value heads of 128, vocabulary
// 32000, untied head):
//   one expert of one layer: 3 x 4096 x 14336 = 176,160,768 parameters; all routed experts:
//   32 x 8 x that = 45,097,156,608; everything else (attention 32 x 41,943,040, routers
//   32 x 8 x 4096, norms 65 x 4096, embedding and head 2 x 32000 x 4096) = 1,605,636,096.
// Megatron-core's distributed optimizer shards the dense parameters' states over the data-
// parallel ranks and the experts' over the expert-data-parallel ranks (dp / ep), as its
// expert_data_parallel group does; DeepSpeed-MoE and torchtitan shard experts the same way.
#include <gtest/gtest.h>

#include "memory/memory_model.h"
#include "zoo_model.h"

namespace frenzy {
namespace {

using test::Zoo;

constexpr int64_t kExpertLayer = 176'160'768;  // one expert, one layer
constexpr int64_t kDense = 1'605'636'096;       // all but the routed experts

// Mixtral-8x7B under Megatron with 4096-token sequences, dp x ep ranks, distributed optimizer.
struct MixtralRun {
  ModelSpec m = Zoo("mixtral-8x7b");
  TrainingSpec t;
  ParallelPlan p;
  MixtralRun(int64_t dp, int64_t ep) {
    t.seq_len = 4096;
    p.dp = dp;
    p.ep = ep;
    p.distributed_optimizer = true;
  }
  MemoryEstimate Predict() const { return test::Predict(m, t, p); }
};

TEST(Moe, ExpertStatesShardOverTheExpertDataParallelRanks) {
  const MemoryEstimate e = MixtralRun(16, 8).Predict();
  ASSERT_EQ(e.stages.size(), 1u);
  // Each rank holds 1 of the 8 experts of each of the 32 layers; the experts' states are
  // sharded over 16 / 8 = 2 ranks, the rest over 16.
  const int64_t experts_on_rank = 32 * kExpertLayer;  // 5,637,144,576
  EXPECT_EQ(e.stages[0].params, kDense + experts_on_rank);
  const auto& b = e.stages[0].breakdown;
  EXPECT_EQ(b.weights, 2 * (kDense + experts_on_rank));   // bf16 weights
  EXPECT_EQ(b.gradients, 4 * (kDense + experts_on_rank));  // fp32 main grads
  // fp32 master weights + two fp32 moments: 12 bytes a parameter of the shard.
  EXPECT_NEAR(static_cast<double>(b.optimizer), 12.0 * (kDense / 16.0 + experts_on_rank / 2.0),
              16.0);
}

TEST(Moe, ExpertParallelAtFullDataParallelShardsLikePlainZero) {
  // dp = ep = 8: every rank owns its expert outright (expert-DP 1), which is the same share
  // of the states as sharding everything over 8.
  const MemoryEstimate e = MixtralRun(8, 8).Predict();
  ASSERT_EQ(e.stages.size(), 1u);
  const auto& b = e.stages[0].breakdown;
  EXPECT_NEAR(static_cast<double>(b.optimizer), 12.0 * (kDense + 32.0 * 8 * kExpertLayer) / 8.0,
              16.0);
}

TEST(Moe, ExpertsOutsideTensorParallelAreWholeOnEachTpRank) {
  // TP 2, DP 8, EP 8 under sequence parallelism: with expert TP 2 (the default) a rank holds
  // half of its expert's matrices, with expert TP 1 all of them — 32 x 176,160,768 / 2 more
  // parameters. Their states shard over the expert-data-parallel ranks, 2 x 8 / (etp x 8):
  // 1 rank at etp 2, 2 at etp 1, so the optimizer's share is the same.
  MixtralRun run(8, 8);
  run.p.tp = 2;
  run.p.sequence_parallel = true;
  const MemoryEstimate split = run.Predict();
  run.p.etp = 1;
  const MemoryEstimate whole = run.Predict();
  ASSERT_FALSE(split.stages.empty());
  ASSERT_FALSE(whole.stages.empty());
  EXPECT_EQ(whole.stages[0].params - split.stages[0].params, 16 * kExpertLayer);
  EXPECT_NEAR(static_cast<double>(whole.stages[0].breakdown.optimizer),
              static_cast<double>(split.stages[0].breakdown.optimizer), 16.0);
  // Megatron refuses MoE with TP but without sequence parallelism.
  run.p.sequence_parallel = false;
  auto no_sp = PredictMemory(run.m, run.t, run.p);
  ASSERT_FALSE(no_sp.ok());
  EXPECT_EQ(no_sp.status().field(), "sequence_parallel");
}

TEST(Moe, RoutedRowsKeepThePermutedTokensAndScaleWithTheCapacityFactor) {
  // Megatron-core's MoE layer, per routed row (top-2 of 4096 tokens): the grouped fc1 keeps
  // its input (h = 4096 wide), fc1's output (2 x 14336: gate and up) and fc2's input (14336),
  // and the combine's multiply by the routing probability keeps the expert's output (4096),
  // 2 bytes each: (4096 + 3 x 14336 + 4096) x 2 = 102,400 bytes a row. Padding to capacity 1.5
  // makes 1.5 x as many rows: the difference per layer is 0.5 x 2 x 4096 rows x 102,400 bytes.
  MixtralRun run(8, 8);
  const MemoryEstimate dropless = run.Predict();
  run.t.moe_capacity_factor = 1.5;
  const MemoryEstimate padded = run.Predict();
  const int64_t per_layer = dropless.stages[0].activations_per_microbatch / 32;
  const int64_t padded_per_layer = padded.stages[0].activations_per_microbatch / 32;
  EXPECT_EQ(padded_per_layer - per_layer, int64_t{4096} * 102'400);
  // Dropless, the routed rows alone hold 2 x 4096 x 102,400 bytes a layer.
  EXPECT_GT(per_layer, int64_t{2} * 4096 * 102'400);
}

TEST(Moe, RoutingAndExpertParallelismAreCheckedAgainstTheFramework) {
  MixtralRun run(8, 8);
  const ModelSpec& m = run.m;
  TrainingSpec& t = run.t;
  ParallelPlan& p = run.p;
  p.distributed_optimizer = false;  // Megatron's
  t.framework = Framework::kHf;
  auto hf = PredictMemory(m, t, p);
  ASSERT_FALSE(hf.ok());
  EXPECT_EQ(hf.status().field(), "ep");
  t.framework = Framework::kDeepSpeed;
  EXPECT_TRUE(PredictMemory(m, t, p).ok());
  p.zero = 3;  // DeepSpeed-MoE asserts "MoE not supported with Stage 3"
  EXPECT_FALSE(PredictMemory(m, t, p).ok());
  p.zero = 0;
  t.moe_dispatcher = MoeDispatcher::kDeepEp;  // not DeepSpeed's
  EXPECT_FALSE(PredictMemory(m, t, p).ok());
  t.moe_dispatcher = MoeDispatcher::kAllToAll;
  t.moe_capacity_factor = 1.25;  // Megatron's flag
  auto ds = PredictMemory(m, t, p);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().field(), "moe_capacity_factor");
  t.framework = Framework::kMegatron;
  t.moe_capacity_factor = -1;
  EXPECT_FALSE(PredictMemory(m, t, p).ok());
  t.moe_capacity_factor = 0;
  p.ep = 16;  // more than the 8 experts
  EXPECT_FALSE(PredictMemory(m, t, p).ok());
  ModelSpec dense = Zoo("llama-3.1-8b");
  p.ep = 1;
  t.moe_capacity_factor = 1.0;
  EXPECT_FALSE(PredictMemory(dense, t, p).ok());
}

// --moe-grouped-gemm: Transformer Engine runs the grouped GEMM on its four compute streams, each
// with a 32 MiB cuBLAS workspace of its own (get_multi_stream_cublas_workspace), on top of the
// 32 MiB cuBLAS and 32 MiB TE workspaces every Megatron run has: 4 x 32 MiB = 134,217,728 bytes
// more, in every phase. Megatron's 2023 layers (no TE) and other frameworks have no such flag.
TEST(Moe, GroupedGemmAddsTransformerEngineStreamWorkspaces) {
  MixtralRun run(16, 8);
  const MemoryEstimate plain = run.Predict();
  run.t.moe_grouped_gemm = true;
  const MemoryEstimate grouped = run.Predict();
  ASSERT_EQ(grouped.stages.size(), 1u);
  // Two PyTorch cuBLAS workspaces (the forward's thread, the autograd thread) and TE's, 32 MiB each.
  EXPECT_EQ(plain.stages[0].breakdown.overhead, 96 * 1024 * 1024);
  EXPECT_EQ(grouped.stages[0].breakdown.overhead, plain.stages[0].breakdown.overhead + 134'217'728);
  EXPECT_EQ(grouped.peak_bytes, plain.peak_bytes + 134'217'728);
  run.t.megatron_legacy = true;  // Megatron's own layers: no TE workspaces at all
  EXPECT_EQ(run.Predict().stages[0].breakdown.overhead, 64 * 1024 * 1024);
  run.t.megatron_legacy = false;
  run.t.framework = Framework::kDeepSpeed;
  run.p.distributed_optimizer = false;
  auto ds = PredictMemory(run.m, run.t, run.p);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().field(), "moe_grouped_gemm");
  run.t.framework = Framework::kMegatron;
  run.p.ep = 1;
  auto dense = PredictMemory(Zoo("llama-3.1-8b"), run.t, run.p);
  ASSERT_FALSE(dense.ok());
  EXPECT_EQ(dense.status().field(), "moe_grouped_gemm");
}

}  // namespace
}  // namespace frenzy
