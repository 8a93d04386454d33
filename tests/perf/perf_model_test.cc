#include "perf/perf_model.h"
#include "perf/mixed_perf.h"

#include <gtest/gtest.h>

#include "model/param_count.h"
#include "model/zoo.h"

namespace frenzy {
namespace {

const GpuType& Gpu(const char* name) { return *GpuCatalog::Default().Find(name); }

PerfEstimate Perf(const ModelSpec& m, const TrainingSpec& t, const ParallelPlan& p,
                  const char* gpu, Network net = {8, 25}) {
  auto r = PredictPerf(m, t, p, Gpu(gpu), net);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : PerfEstimate{};
}

TEST(PerfModel, ModelFlopsFollowPalm) {
  // 6N + 12 L q s per token (PaLM Appendix B), N the matmul parameters a token uses.
  ModelSpec m = *ResolveModel("llama-2-7b");
  double n = static_cast<double>(TotalParams(m) - m.vocab_size * m.hidden_size);
  double expected = 6 * n + 12.0 * 32 * 4096 * 4096;
  EXPECT_NEAR(ModelFlopsPerToken(m, 4096), expected, 1e-9 * expected);
}

TEST(PerfModel, FasterGpusAreFaster) {
  ModelSpec m = *ResolveModel("llama-3-8b");
  TrainingSpec t;
  t.seq_len = 4096;
  ParallelPlan p;
  p.tp = 8;
  double a100 = Perf(m, t, p, "A100-80GB").iteration_s;
  double h100 = Perf(m, t, p, "H100-80GB").iteration_s;
  EXPECT_LT(h100, a100);
  EXPECT_GT(Perf(m, t, p, "H100-80GB").mfu, 0.1);
  EXPECT_LT(Perf(m, t, p, "H100-80GB").mfu, 1.0);
}

TEST(PerfModel, Fp8LinearsSpeedUpOnlyTheLinearShareOnHopper) {
  // Llama-3-8B at 8,192 tokens: the layers' linears are 6 x 6.98e9 FLOPs a token of 6 x 7.5e9
  // + 12 x 32 x 4096 x 8192 in all (the head and attention stay bf16): about 66%. At twice the
  // bf16 rate the compute can shrink to at most 1 - 0.66 / 2 = 0.67 of it, so the speed-up is
  // above 1 and below 1.5; casts and communication take some of it back. A100 has no FP8.
  ModelSpec m = *ResolveModel("llama-3-8b");
  TrainingSpec t;
  t.seq_len = 8192;
  ParallelPlan p;
  p.dp = 8;
  p.distributed_optimizer = true;
  const double bf16 = Perf(m, t, p, "H100-80GB").tokens_per_s;
  TrainingSpec f = t;
  f.precision = Precision::kFp8;
  const double fp8 = Perf(m, f, p, "H100-80GB").tokens_per_s;
  EXPECT_GT(fp8, bf16);
  EXPECT_LT(fp8, 1.5 * bf16);
  auto a100 = PredictPerf(m, f, p, Gpu("A100-80GB"), {8, 25});
  ASSERT_FALSE(a100.ok());
  EXPECT_EQ(a100.status().field(), "precision");
}

TEST(PerfModel, RecomputationCostsTime) {
  ModelSpec m = *ResolveModel("llama-3-8b");
  TrainingSpec t;
  t.seq_len = 4096;
  ParallelPlan p;
  double none = Perf(m, t, p, "H100-80GB").iteration_s;
  t.recompute = Recompute::kSelective;
  double sel = Perf(m, t, p, "H100-80GB").iteration_s;
  t.recompute = Recompute::kFull;
  double full = Perf(m, t, p, "H100-80GB").iteration_s;
  EXPECT_LT(none, sel);
  EXPECT_LT(sel, full);
  // One more forward of the matmuls (a third of their time), less for memory-bound work.
  EXPECT_GT(full / none, 1.15);
  EXPECT_LE(full / none, 4.0 / 3.0 + 0.01);
}

TEST(PerfModel, PipelineBubbleShrinksWithMicrobatchesAndInterleaving) {
  ModelSpec m = *ResolveModel("llama-2-13b");
  TrainingSpec t;
  t.seq_len = 4096;
  ParallelPlan p;
  p.pp = 4;
  t.global_batch = 4;
  auto few = Perf(m, t, p, "A100-80GB");
  t.global_batch = 64;
  auto many = Perf(m, t, p, "A100-80GB");
  EXPECT_GT(few.breakdown.pp_bubble_s / few.iteration_s,
            many.breakdown.pp_bubble_s / many.iteration_s);
  p.vpp = 2;
  auto inter = Perf(m, t, p, "A100-80GB");
  EXPECT_LT(inter.breakdown.pp_bubble_s, many.breakdown.pp_bubble_s);
}

TEST(PerfModel, SlowNetworksExposeDataParallelTraffic) {
  ModelSpec m = *ResolveModel("llama-2-7b");
  TrainingSpec t;
  t.seq_len = 2048;
  ParallelPlan p;
  p.dp = 32;
  t.global_batch = 32;
  auto fast = Perf(m, t, p, "A100-80GB", {8, 200});
  auto slow = Perf(m, t, p, "A100-80GB", {8, 5});
  EXPECT_GT(slow.breakdown.dp_comm_s, fast.breakdown.dp_comm_s);
  EXPECT_GT(slow.iteration_s, fast.iteration_s);
}

// Mixtral-8x7B at 4096-token sequences over dp ranks with expert parallelism ep, Megatron's
// distributed optimizer.
struct MixtralLayout {
  ModelSpec m = *ResolveModel("mixtral-8x7b");
  TrainingSpec t;
  ParallelPlan p;
  MixtralLayout(int64_t dp, int64_t ep) {
    t.seq_len = 4096;
    p.dp = dp;
    p.ep = ep;
    p.distributed_optimizer = true;
  }
  PerfEstimate Perf() const { return frenzy::Perf(m, t, p, "H100-80GB", {8, 400}); }
};

TEST(PerfModel, ExpertParallelAllToAllsMoveTheRoutedRows) {
  // Mixtral-8x7B, 4096 tokens a micro-batch, top-2: each all-to-all moves 2 x 4096 rows of
  // 4096 bf16 values (67,108,864 bytes), 7/8 of them to the 7 other ranks of an EP group of 8,
  // over NVLink at 450 GB/s one way (H100: 900 GB/s bidirectional): 130.5 us; dispatch and
  // combine in forward and in backward, in 32 MoE layers, 2 micro-batches: 33.4 ms.
  MixtralLayout l(8, 8);
  l.t.global_batch = 16;
  const double one = 67'108'864.0 * 7.0 / 8.0 / 450e9;
  auto ep8 = l.Perf();
  EXPECT_NEAR(ep8.breakdown.ep_comm_s, one * 4 * 32 * 2, 1e-9);
  // Without expert parallelism nothing is exchanged; every rank then holds and reduces all the
  // experts' gradients (with EP 8 at DP 8 nobody shares an expert), so the data-parallel step
  // moves more (on nodes of one GPU behind 10 GB/s, where nothing hides it).
  l.p.ep = 1;
  auto ep1 = l.Perf();
  EXPECT_EQ(ep1.breakdown.ep_comm_s, 0);
  const double ep1_dp = frenzy::Perf(l.m, l.t, l.p, "H100-80GB", {1, 10}).breakdown.dp_comm_s;
  l.p.ep = 8;
  const double ep8_dp = frenzy::Perf(l.m, l.t, l.p, "H100-80GB", {1, 10}).breakdown.dp_comm_s;
  EXPECT_GT(ep1_dp, 2 * ep8_dp);
  // On nodes of 4 GPUs (400 GB/s a node: 100 GB/s a GPU) half of the rows go to the other node
  // while 3/8 cross NVLink at once: 33,554,432 bytes over the network, 335.5 us an exchange.
  l.p.ep = 8;
  auto split = frenzy::Perf(l.m, l.t, l.p, "H100-80GB", {4, 400});
  EXPECT_NEAR(split.breakdown.ep_comm_s, 33'554'432.0 / 100e9 * 4 * 32 * 2, 1e-9);
  // DeepEP sends a token once to the other node when any of its 2 experts is there: it misses
  // both with probability (4/8)(3/7) = 3/14, so 11/14 of the 4096 tokens cross, not 2 x 1/2.
  l.t.moe_dispatcher = MoeDispatcher::kDeepEp;
  auto deepep = frenzy::Perf(l.m, l.t, l.p, "H100-80GB", {4, 400});
  EXPECT_NEAR(deepep.breakdown.ep_comm_s, 4096.0 * 11.0 / 14.0 * 8192 / 100e9 * 4 * 32 * 2, 1e-9);
}

TEST(PerfModel, ExpertsOutsideTensorParallelAreReducedOverTheTpRanks) {
  // TP 8, DP 1: with expert TP 1 every TP rank holds all of Mixtral's experts and they reduce
  // their gradients over the 8 ranks; with expert TP 8 each holds a slice and nothing is
  // reduced.
  MixtralLayout l(1, 1);
  l.p.tp = 8;
  l.p.sequence_parallel = true;
  l.p.distributed_optimizer = false;
  l.p.etp = 8;
  EXPECT_EQ(frenzy::Perf(l.m, l.t, l.p, "H100-80GB", {8, 400}).breakdown.dp_comm_s, 0);
  l.p.etp = 1;
  EXPECT_GT(frenzy::Perf(l.m, l.t, l.p, "H100-80GB", {1, 10}).breakdown.dp_comm_s, 0);
}

TEST(PerfModel, CapacityFactorPadsTheExpertsWork) {
  MixtralLayout l(8, 8);
  auto dropless = l.Perf();
  l.t.moe_capacity_factor = 2.0;
  auto padded = l.Perf();
  EXPECT_GT(padded.breakdown.compute_s, dropless.breakdown.compute_s);
  EXPECT_NEAR(padded.breakdown.ep_comm_s, 2.0 * dropless.breakdown.ep_comm_s, 1e-12);
  EXPECT_EQ(padded.model_flops_per_token, dropless.model_flops_per_token);  // padding is not model work
}

TEST(PerfModel, OffloadedActivationsHideUnderTheCompute) {
  // Llama-3.2-3B, 2 x 4096 tokens, pure bf16, every layer checkpointed: 23 layer inputs of
  // 50,331,648 bytes go to the host and back each micro-batch over PCIe, under the compute.
  ModelSpec m = *ResolveModel("llama-3.2-3b");
  TrainingSpec t;
  t.framework = Framework::kHf;
  t.precision = Precision::kBf16Pure;
  t.micro_batch = 2;
  t.seq_len = 4096;
  t.recompute = Recompute::kFull;
  const auto kept = Perf(m, t, ParallelPlan{}, "A100-80GB", {1, 25});
  t.offload_activations = true;
  const auto off = Perf(m, t, ParallelPlan{}, "A100-80GB", {1, 25});
  // 2 x 1.16 GB at 25.8 GB/s (PCIe Gen4, one GPU on the node) is 0.09 s, well under the
  // micro-batch's compute: nothing shows.
  EXPECT_EQ(off.breakdown.offload_s, 0);
  EXPECT_EQ(off.iteration_s, kept.iteration_s);
  EXPECT_EQ(kept.breakdown.offload_s, 0);
}

TEST(PerfModel, Bf16OnV100IsAnError) {
  ModelSpec m = *ResolveModel("gpt2");
  TrainingSpec t;
  t.seq_len = 1024;
  auto r = PredictPerf(m, t, ParallelPlan{}, Gpu("V100-32GB"), {8, 25});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().field(), "precision");
  t.precision = Precision::kFp16;
  EXPECT_TRUE(PredictPerf(m, t, ParallelPlan{}, Gpu("V100-32GB"), {8, 25}).ok());
}

// LoRA over a frozen base: the base's weights need no weight-gradient GEMM (4 FLOPs per weight
// and token), the adapters train (6); attention is unchanged. Llama-3-8B's published 8,030,261,248
// parameters less its 128,256 x 4096 input embedding, and PEFT's 41,943,040 adapters at r = 16.
TEST(PerfModel, LoraFrozenBaseSkipsWeightGradients) {
  ModelSpec m = *ResolveModel("llama-3-8b");
  TrainingSpec t;
  t.seq_len = 2048;
  t.framework = Framework::kHf;
  t.finetune = FineTune::kLora;
  t.lora.rank = 16;
  const double base = 8030261248.0 - 128256.0 * 4096.0;
  const double expected = 4 * base + 6 * 41943040.0 + 12.0 * 32 * 4096 * 2048;
  auto lora = Perf(m, t, ParallelPlan{}, "A100-80GB");
  EXPECT_NEAR(lora.model_flops_per_token, expected, 1e-4 * expected);
  t.finetune = FineTune::kFull;
  auto full = Perf(m, t, ParallelPlan{}, "A100-80GB");
  EXPECT_LT(lora.breakdown.compute_s, 0.8 * full.breakdown.compute_s);
  // Adam reads and writes the states of what is trained: 41.9M adapters, not 8.07B weights.
  EXPECT_NEAR(lora.breakdown.optimizer_s / full.breakdown.optimizer_s, 41943040.0 / 8030261248.0,
              1e-6);
}

TEST(PerfModel, LoraReducesOnlyTheAdaptersGradients) {
  ModelSpec m = *ResolveModel("llama-2-7b");
  TrainingSpec t;
  t.seq_len = 2048;
  t.global_batch = 32;
  t.framework = Framework::kHf;
  ParallelPlan p;
  p.dp = 32;
  auto full = Perf(m, t, p, "A100-80GB", {8, 5});
  t.finetune = FineTune::kLora;
  auto lora = Perf(m, t, p, "A100-80GB", {8, 5});
  ASSERT_GT(full.breakdown.dp_comm_s, 0.1);
  EXPECT_LT(lora.breakdown.dp_comm_s, 0.01 * full.breakdown.dp_comm_s);
}

TEST(PerfModel, QloraPaysForDequantisationAndRecomputationRepeatsHalfTheWork) {
  ModelSpec m = *ResolveModel("llama-2-7b");
  TrainingSpec t;
  t.seq_len = 2048;
  t.framework = Framework::kHf;
  t.finetune = FineTune::kLora;
  auto lora = Perf(m, t, ParallelPlan{}, "A100-80GB");
  t.finetune = FineTune::kQlora;
  auto qlora = Perf(m, t, ParallelPlan{}, "A100-80GB");
  EXPECT_GT(qlora.breakdown.compute_s, lora.breakdown.compute_s);
  EXPECT_LT(qlora.breakdown.compute_s, 1.2 * lora.breakdown.compute_s);
  // Recomputing a frozen layer's forward costs about half its matmul work (forward 2 of 4
  // FLOPs per weight), against a third when every weight is trained.
  t.finetune = FineTune::kLora;
  t.recompute = Recompute::kFull;
  auto lora_rc = Perf(m, t, ParallelPlan{}, "A100-80GB");
  t.finetune = FineTune::kFull;
  auto full_rc = Perf(m, t, ParallelPlan{}, "A100-80GB");
  EXPECT_GT(lora_rc.breakdown.recompute_s / lora_rc.breakdown.compute_s, 0.4);
  EXPECT_LT(full_rc.breakdown.recompute_s / full_rc.breakdown.compute_s, 0.34);
}

}  // namespace
}  // namespace frenzy

namespace frenzy {
namespace {

// The pipeline runs at the pace of its most loaded stage: 20 + 12 layers of Llama-2-7B take
// longer than 16 + 16, 12 + 20 as long as 20 + 12, and an explicit even split is the default.
TEST(PerfModel, AnUnevenPipelineRunsAtItsMostLoadedStagesPace) {
  ModelSpec m = *ResolveModel("llama-2-7b");
  TrainingSpec t;
  t.seq_len = 2048;
  t.global_batch = 16;
  ParallelPlan p;
  p.pp = 2;
  const double even = Perf(m, t, p, "A100-80GB").iteration_s;
  p.stage_layers = {16, 16};
  EXPECT_DOUBLE_EQ(Perf(m, t, p, "A100-80GB").iteration_s, even);
  p.stage_layers = {20, 12};
  const double front = Perf(m, t, p, "A100-80GB").iteration_s;
  EXPECT_GT(front, even * 1.1);
  p.stage_layers = {12, 20};
  EXPECT_DOUBLE_EQ(Perf(m, t, p, "A100-80GB").iteration_s, front);
}

}  // namespace
}  // namespace frenzy

namespace frenzy {
namespace {

// A two-type pipeline of Llama-2-7B in fp16 (V100s have no bf16): stage 0 on A100-80GB, stage 1
// on V100-32GB. It runs at its slowest stage's pace; with one type on both it is the homogeneous
// pipeline; and the split that balances the stages gives the A100 stage more layers (its fp16
// peak is 312 TFLOP/s against the V100's 125) and beats the even split.
TEST(PerfModel, AHeterogeneousPipelineRunsAtItsSlowestStagesPace) {
  ModelSpec m = *ResolveModel("llama-2-7b");
  TrainingSpec t;
  t.seq_len = 2048;
  t.global_batch = 16;
  t.precision = Precision::kFp16;
  ParallelPlan p;
  p.pp = 2;
  const Network net{8, 25};
  auto same = PredictMixedPerf(m, t, p, {{&Gpu("A100-80GB"), net, 2}});
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_NEAR(same->estimate.iteration_s, Perf(m, t, p, "A100-80GB").iteration_s, 1e-9);

  const std::vector<StageGpus> mixed = {{&Gpu("A100-80GB"), net, 1}, {&Gpu("V100-32GB"), net, 1}};
  auto even = PredictMixedPerf(m, t, p, mixed);
  ASSERT_TRUE(even.ok()) << even.status().ToString();
  ASSERT_EQ(even->stage_iteration_s.size(), 2u);
  EXPECT_EQ(even->slowest_stage, 1);
  EXPECT_DOUBLE_EQ(even->estimate.iteration_s, even->stage_iteration_s[1]);
  EXPECT_GT(even->stage_iteration_s[1], 2 * even->stage_iteration_s[0]);

  int64_t best_k = 0;
  double best = even->estimate.iteration_s;
  for (int64_t k = 1; k < 32; ++k) {
    p.stage_layers = {k, 32 - k};
    auto r = PredictMixedPerf(m, t, p, mixed);
    ASSERT_TRUE(r.ok());
    if (r->estimate.iteration_s < best) best = r->estimate.iteration_s, best_k = k;
  }
  EXPECT_GT(best_k, 16);
  EXPECT_LT(best, 0.8 * even->estimate.iteration_s);
  // Stages that do not add up to the pipeline are refused, naming the field.
  auto wrong = PredictMixedPerf(m, t, p, {{&Gpu("A100-80GB"), net, 1}});
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().field(), "stage_gpus");
}

// Heterogeneous data parallelism: two groups of 8 replicas of Llama-2-7B (6,738,415,616
// parameters, Meta's model card) on A100-80GB and H100 nodes of 8 with 25 GB/s a node. Each
// group reduces inside itself; the groups then all-reduce Megatron's fp32 gradients (4 bytes a
// parameter), each GPU its 1/8 slice: 2 x (2 - 1) / 2 x 6,738,415,616 x 4 / 8 bytes at
// 25 / 8 GB/s = 1.078 s. The job runs at the slower group's step plus that.
TEST(PerfModel, HeterogeneousDataParallelRunsAtTheSlowestGroupPlusTheExchange) {
  ModelSpec m = *ResolveModel("llama-2-7b");
  TrainingSpec t;
  t.seq_len = 2048;
  t.global_batch = 128;
  ParallelPlan p;
  const Network net{8, 25};
  const std::vector<DataGroup> groups = {{&Gpu("A100-80GB"), net, 8, 1, 64},
                                         {&Gpu("H100-80GB"), net, 8, 1, 64}};
  auto r = PredictMixedDataPerf(m, t, p, groups);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NEAR(r->cross_group_s, 6738415616.0 * 4 / 8 / 3.125e9, 0.002);
  ASSERT_EQ(r->group_step_s.size(), 2u);
  EXPECT_EQ(r->slowest_group, 0);  // the A100s, on an equal share of the batch
  EXPECT_GT(r->group_step_s[0], 1.5 * r->group_step_s[1]);
  EXPECT_NEAR(r->estimate.iteration_s, r->group_step_s[0] + r->cross_group_s, 1e-9);
  EXPECT_NEAR(r->estimate.tokens_per_s, 128.0 * 2048 / r->estimate.iteration_s, 1e-6);
  EXPECT_EQ(r->estimate.gpus, 16);
  // Batches that do not add up to the global batch, or that leave a replica a fraction of a
  // micro-batch, are refused naming the field.
  t.global_batch = 100;
  auto wrong = PredictMixedDataPerf(m, t, p, groups);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().field(), "data_groups");
  t.global_batch = 128;
  auto split = PredictMixedDataPerf(m, t, p, {{&Gpu("A100-80GB"), net, 8, 1, 60},
                                              {&Gpu("H100-80GB"), net, 8, 1, 68}});
  ASSERT_FALSE(split.ok());
  EXPECT_EQ(split.status().field(), "data_groups");
}

}  // namespace
}  // namespace frenzy

namespace frenzy {
namespace {

// A pipeline's stages split the work: timed stage by stage, the two halves of Llama-3.2-1B
// (16 layers, a 128,256-word output layer on the last stage only) compute what one stage holding
// everything does.
TEST(PerfModel, StagesTimedOneByOneSplitTheCompute) {
  ModelSpec m = *ResolveModel("llama-3.2-1b");
  TrainingSpec t;
  t.seq_len = 2048;
  t.global_batch = 8;
  ParallelPlan one;
  const double whole = Perf(m, t, one, "A100-80GB").breakdown.compute_s;
  ParallelPlan two;
  two.pp = 2;
  auto s0 = PredictPerf(m, t, two, Gpu("A100-80GB"), {8, 25}, nullptr, 0);
  auto s1 = PredictPerf(m, t, two, Gpu("A100-80GB"), {8, 25}, nullptr, 1);
  ASSERT_TRUE(s0.ok() && s1.ok());
  EXPECT_NEAR(s0->breakdown.compute_s + s1->breakdown.compute_s, whole, 1e-9 * whole);
  EXPECT_LT(s0->breakdown.compute_s, s1->breakdown.compute_s);  // no output layer on stage 0
}

}  // namespace
}  // namespace frenzy
