#include "memory/memory_model.h"

#include <gtest/gtest.h>

#include "memory/activations.h"
#include "memory/model_states.h"
#include "model/hf_config.h"
#include "model/param_count.h"
#include "model/zoo.h"
#include "zoo_model.h"

namespace frenzy {
namespace {

using test::Predict;
using test::Zoo;

// A GPT-3-style model for the published equations: h = 4096, 32 heads, FFN 4h, GELU, dropout.
ModelSpec Gpt() {
  auto r = ParseHfConfigText(R"({"model_type": "gpt2", "n_embd": 4096, "n_layer": 8,
      "n_head": 32, "n_positions": 4096, "vocab_size": 51200})",
                             "gpt.json");
  EXPECT_TRUE(r.ok());
  return *r;
}

TEST(ModelStates, MegatronMixedPrecisionAdamIs18BytesPerParam) {
  // Megatron-LM: bf16 weights (2) + fp32 main grads (4) + fp32 master weights and Adam
  // moments (12) = 18 bytes; the distributed optimizer shards the 12 over d ranks.
  ModelSpec m = Zoo("llama-2-7b");
  TrainingSpec t;
  t.framework = Framework::kMegatron;
  t.seq_len = 128;
  ParallelPlan p;
  MemoryEstimate e = Predict(m, t, p);
  const StageEstimate& s = e.stages[0];
  int64_t n = s.params;
  EXPECT_EQ(n, TotalParams(m));
  // The optimizer phase holds all states; the peak may be elsewhere but states don't change.
  EXPECT_EQ(s.breakdown.weights, 2 * n);
  EXPECT_EQ(s.breakdown.optimizer, 12 * n);
  p.dp = 8;
  p.distributed_optimizer = true;
  MemoryEstimate sharded = Predict(m, t, p);
  EXPECT_EQ(sharded.stages[0].breakdown.optimizer, (12 * n + 7) / 8);
}

TEST(ModelStates, ContextParallelRanksShardTheStatesToo) {
  // Megatron-core's distributed optimizer shards over the data-parallel group with the
  // context-parallel ranks (they reduce the same gradients): dp 2 x cp 4 shards the 12 bytes a
  // parameter of master weights and moments 8 ways, not 2. FSDP's mesh (torchtitan) likewise
  // shards the fp32 flat parameters over dp_shard x cp.
  ModelSpec m = Zoo("llama-2-7b");
  const int64_t n = 6'738'415'616;
  TrainingSpec t;
  t.framework = Framework::kMegatron;
  t.seq_len = 4096;
  ParallelPlan p;
  p.dp = 2;
  p.cp = 4;
  p.distributed_optimizer = true;
  EXPECT_EQ(Predict(m, t, p).stages[0].breakdown.optimizer, (12 * n + 7) / 8);
  t.framework = Framework::kFsdp;
  p.distributed_optimizer = false;
  p.zero = 3;
  EXPECT_EQ(Predict(m, t, p).stages[0].breakdown.weights, (4 * n + 7) / 8);
}

TEST(ModelStates, ZeroStagesShardAsThePaperSays) {
  // Rajbhandari et al. (ZeRO), §5 and Figure 1, mixed-precision Adam over Ψ parameters and
  // N_d data-parallel ranks: 2Ψ bytes of 16-bit weights, 2Ψ of 16-bit gradients, KΨ = 12Ψ of
  // optimizer states (fp32 master weights, momentum, variance). Stage 1 shards the optimizer
  // states, stage 2 also the gradients, stage 3 also the weights.
  //
  // Ψ for Llama-2-7B, by hand from its config (vocab 32000, hidden 4096, FFN 11008, 32 layers,
  // untied embeddings, RMSNorm without bias): embeddings + LM head 2 x 32000 x 4096 =
  // 262,144,000; per layer q/k/v/o 4 x 4096² = 67,108,864, gate/up/down 3 x 4096 x 11008 =
  // 135,266,304, two norms 8,192, so 32 x 202,383,360 = 6,476,267,520; final norm 4,096.
  // Ψ = 6,738,415,616 — the HF checkpoint's parameter count.
  constexpr int64_t kPsi = 6'738'415'616;
  constexpr int64_t d = 64;  // Ψ x 2 and Ψ x 12 divide by 64 exactly
  ModelSpec m = Zoo("llama-2-7b");
  TrainingSpec t;
  t.framework = Framework::kDeepSpeed;
  t.seq_len = 128;
  ParallelPlan p;
  p.dp = d;
  struct Expected {
    int64_t weights, gradients, optimizer;
  };
  const Expected expected[] = {
      {2 * kPsi, 2 * kPsi, 12 * kPsi},              // stage 0: 16Ψ
      {2 * kPsi, 2 * kPsi, 12 * kPsi / d},          // stage 1: 4Ψ + 12Ψ/N_d
      {2 * kPsi, 2 * kPsi / d, 12 * kPsi / d},      // stage 2: 2Ψ + 14Ψ/N_d
      {2 * kPsi / d, 2 * kPsi / d, 12 * kPsi / d},  // stage 3: 16Ψ/N_d
  };
  for (int zero = 0; zero <= 3; ++zero) {
    p.zero = zero;
    MemoryEstimate e = Predict(m, t, p);
    ASSERT_EQ(e.stages.size(), 1u);
    EXPECT_EQ(e.stages[0].params, kPsi);
    // DeepSpeed's flat gradient partition exists from the start of the step, so whichever
    // phase peaks holds all three states.
    const MemoryBreakdown& b = e.stages[0].breakdown;
    EXPECT_EQ(b.weights, expected[zero].weights) << "ZeRO-" << zero;
    EXPECT_EQ(b.gradients, expected[zero].gradients) << "ZeRO-" << zero;
    EXPECT_EQ(b.optimizer, expected[zero].optimizer) << "ZeRO-" << zero;
  }
}

TEST(Activations, MegatronLayerMatchesKorthikantiEquation) {
  // Korthikanti et al. 2023, eq. (1): sbh(34 + 5as/h) bytes per layer, 16-bit activations,
  // dropout on, no parallelism, no recomputation.
  ModelSpec m = Gpt();
  TrainingSpec t;
  t.framework = Framework::kMegatron;
  t.flash_attn = false;
  t.seq_len = 2048;
  t.micro_batch = 1;
  ParallelPlan p;
  LayerActivations la = LayerActivationBytes(m, t, p, false);
  double s = 2048, b = 1, h = 4096, a = 32;
  EXPECT_DOUBLE_EQ(static_cast<double>(la.saved), s * b * h * (34 + 5 * a * s / h));
  // §4.2: tensor parallel t divides all but 10sbh; sequence parallel divides those too.
  p.tp = 8;
  la = LayerActivationBytes(m, t, p, false);
  EXPECT_DOUBLE_EQ(static_cast<double>(la.saved), s * b * h * (10 + 24 / 8.0 + 5 * a * s / h / 8));
  p.sequence_parallel = true;
  la = LayerActivationBytes(m, t, p, false);
  EXPECT_DOUBLE_EQ(static_cast<double>(la.saved), s * b * h / 8 * (34 + 5 * a * s / h));
  // Selective recomputation drops the 5as/h term; full keeps only the 2sbh/t input.
  t.recompute = Recompute::kSelective;
  la = LayerActivationBytes(m, t, p, false);
  EXPECT_DOUBLE_EQ(static_cast<double>(la.saved), s * b * h / 8 * 34);
  t.recompute = Recompute::kFull;
  la = LayerActivationBytes(m, t, p, false);
  EXPECT_DOUBLE_EQ(static_cast<double>(la.saved), 2 * s * b * h / 8);
}

TEST(Activations, MegatronMlaKeepsLatentsAndNarrowValues) {
  // A DeepSeek-V2-Lite-shaped layer (queries unprojected, kv latent 512, heads of 128 + 64 for
  // q/k and 128 for v), dense MLP, flash attention, no dropout. Bytes per token worked out by
  // hand from Megatron-Core's MLASelfAttention (e = 2, h = 1024, 8 heads, gated f = 2816):
  //   two norm inputs 2*2h = 4096; the down-projection's input 2h = 2048;
  //   core inputs q, k (8 x 192) and v (8 x 128): 2*(3072 + 1024) = 8192;
  //   kv latent: norm input 2*512 + fp32 rstd 4, up-projection input 2*512: 2052;
  //   core output 2*8*128 = 2048 + fp32 softmax statistics 8*4 = 32; output projection 2048;
  //   MLP input 2048, fc1 output 2*2*2816 = 11264, fc2 input 2*2816 = 5632.
  auto cfg = ParseHfConfigText(R"({"model_type": "deepseek_v3", "hidden_size": 1024,
      "intermediate_size": 2816, "num_hidden_layers": 2, "num_attention_heads": 8,
      "num_key_value_heads": 8, "q_lora_rank": null, "kv_lora_rank": 512,
      "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
      "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 256,
      "first_k_dense_replace": 2, "vocab_size": 1000})",
                               "mla.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  TrainingSpec t;
  t.framework = Framework::kMegatron;
  t.dropout = false;
  t.seq_len = 4096;
  ParallelPlan p;
  const double tokens = 4096;
  EXPECT_DOUBLE_EQ(static_cast<double>(LayerActivationBytes(*cfg, t, p, false).saved),
                   tokens * (4096 + 2048 + 8192 + 2052 + 2080 + 2048 + 2048 + 11264 + 5632));
  // TP 2 with sequence parallel: heads, v and f halve; the norms' inputs and the latent
  // norm's input and statistics are sequence-split; the up-projection input is gathered.
  p.tp = 2;
  p.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(static_cast<double>(LayerActivationBytes(*cfg, t, p, false).saved),
                   tokens * (2048 + 1024 + 4096 + (1028 / 2 + 1024) + 1040 + 1024 + 1024 +
                             5632 + 2816));
  // A query latent of 256 adds its norm's input and rstd (sequence-split) and the gathered
  // up-projection input.
  ModelSpec q = *cfg;
  q.mla.q_lora_rank = 256;
  EXPECT_DOUBLE_EQ(static_cast<double>(LayerActivationBytes(q, t, p, false).saved -
                                       LayerActivationBytes(*cfg, t, p, false).saved),
                   tokens * ((2 * 256 + 4) / 2 + 2 * 256));
}

TEST(Activations, MonotonicInEveryKnob) {
  ModelSpec m = Zoo("llama-3-8b");
  for (Framework f : {Framework::kMegatron, Framework::kHf}) {
    TrainingSpec t;
    t.framework = f;
    t.flash_attn = false;
    ParallelPlan p;
    auto saved = [&](const TrainingSpec& tt, const ParallelPlan& pp) {
      return LayerActivationBytes(m, tt, pp, false).saved;
    };
    int64_t base = saved(t, p);
    TrainingSpec longer = t;
    longer.seq_len *= 2;
    EXPECT_GT(saved(longer, p), 2 * base);  // attention scores grow quadratically
    TrainingSpec flash = t;
    flash.flash_attn = true;
    EXPECT_LT(saved(flash, p), base);
    TrainingSpec sel = t;
    sel.recompute = Recompute::kSelective;
    TrainingSpec full = t;
    full.recompute = Recompute::kFull;
    EXPECT_LT(saved(sel, p), base);
    EXPECT_LT(saved(full, p), saved(sel, p));
    if (f == Framework::kHf) {
      // Per-op checkpointing keeps some matmul outputs: between full and none.
      TrainingSpec op = t;
      op.recompute = Recompute::kOp;
      EXPECT_GT(saved(op, p), saved(full, p));
      EXPECT_LT(saved(op, p), base);
    }
    ParallelPlan tp = p;
    tp.tp = 4;
    EXPECT_LT(saved(t, tp), base);
    ParallelPlan cp = p;
    cp.cp = 2;
    EXPECT_LT(saved(t, cp), base / 2 + 1);
  }
}

TEST(PredictMemory, PipelineFirstStageHoldsMostMicrobatches) {
  ModelSpec m = Zoo("llama-2-13b");
  TrainingSpec t;
  t.global_batch = 64;
  ParallelPlan p;
  p.pp = 4;
  MemoryEstimate e = Predict(m, t, p);
  ASSERT_EQ(e.stages.size(), 4u);
  EXPECT_EQ(e.stages[0].microbatches_in_flight, 4);
  EXPECT_EQ(e.stages[3].microbatches_in_flight, 1);
  EXPECT_GT(e.stages[0].breakdown.activations, e.stages[3].breakdown.activations);
  int64_t layers = 0;
  for (const auto& s : e.stages) layers += s.num_layers;
  EXPECT_EQ(layers, m.num_layers);
  // Interleaving raises the first stage's in-flight activations by (p - 1) / (p v).
  p.vpp = 2;
  MemoryEstimate inter = Predict(m, t, p);
  EXPECT_GT(inter.stages[0].activations_per_microbatch * inter.stages[0].microbatches_in_flight,
            e.stages[0].activations_per_microbatch * 4 - 1);
}

// Megatron's interleaved schedule, counted by hand: rank r runs 2 (pp - r - 1) + (vpp - 1) pp
// chunk forwards before its first backward (capped at m x vpp), then one more, each chunk half
// (vpp 2) or an eighth (vpp 8) of the rank's layers.
TEST(PredictMemory, InterleavedStagesHoldWhatMegatronsWarmupLeaves) {
  ModelSpec m = Zoo("llama-2-13b");  // 40 layers
  TrainingSpec t;
  t.global_batch = 64;  // 64 micro-batches
  ParallelPlan p;
  p.pp = 4;
  p.vpp = 2;
  MemoryEstimate e = Predict(m, t, p);
  ASSERT_EQ(e.stages.size(), 4u);
  // rank 0: 6 + 4 + 1 = 11 chunks = 5.5; rank 1: 4 + 4 + 1 = 9 = 4.5; rank 2: 2 + 4 + 1 = 7 =
  // 3.5; rank 3: 0 + 4 + 1 = 5 = 2.5 micro-batches (reported rounded up).
  EXPECT_EQ(e.stages[0].microbatches_in_flight, 6);
  EXPECT_EQ(e.stages[1].microbatches_in_flight, 5);
  EXPECT_EQ(e.stages[2].microbatches_in_flight, 4);
  EXPECT_EQ(e.stages[3].microbatches_in_flight, 3);
  // 4 micro-batches on 4 ranks with 5 chunks each (vpp 5 of 2 layers): rank 0 runs all 20
  // forwards first (6 + 16 > 20); rank 3 runs 16, then one more: 17 / 5 = 3.4.
  t.global_batch = 4;
  p.vpp = 5;
  e = Predict(m, t, p);
  EXPECT_EQ(e.stages[0].microbatches_in_flight, 4);
  EXPECT_EQ(e.stages[3].microbatches_in_flight, 4);
  EXPECT_LT(e.stages[3].breakdown.activations, e.stages[0].breakdown.activations);
  p.vpp = 1;  // plain 1F1B: the last rank holds one
  EXPECT_EQ(Predict(m, t, p).stages[3].microbatches_in_flight, 1);
}

// DeepSpeed's ZeRO step flattens the rank's 16-bit gradient partition and casts it to fp32
// (stage_1_and_2.py step; stage3.py _prepare_fp32_grad_for_sub_group): 2 + 4 bytes an element
// at the cast, on top of the states. Llama-2-7B, bf16, 4 ranks, 128 tokens under full
// recomputation, so the step is the peak.
TEST(PredictMemory, DeepSpeedStepCastsTheGradientPartition) {
  constexpr int64_t kPsi = 6'738'415'616;  // Llama-2-7B, by hand (ZeRO states test above)
  ModelSpec m = Zoo("llama-2-7b");
  TrainingSpec t;
  t.framework = Framework::kDeepSpeed;
  t.precision = Precision::kBf16;
  t.recompute = Recompute::kFull;
  t.seq_len = 128;
  ParallelPlan p;
  p.dp = 4;
  // ZeRO-2: the whole partition, Ψ/4; its reduce buckets were released when backward ended
  // (stage_1_and_2.py, _release_ipg_buffers).
  p.zero = 2;
  MemoryEstimate e = Predict(m, t, p);
  EXPECT_STREQ(e.stages[0].peak_phase, "optimizer");
  EXPECT_EQ(e.stages[0].breakdown.temporary, 6 * kPsi / 4);
  // ZeRO-1 on 2 ranks frees the other rank's half of the full gradients first (2 bytes x Ψ/2):
  // 6 x Ψ/2 - Ψ = 2Ψ.
  p.dp = 2;
  p.zero = 1;
  e = Predict(m, t, p);
  EXPECT_STREQ(e.stages[0].peak_phase, "optimizer");
  EXPECT_EQ(e.stages[0].breakdown.temporary, 2 * kPsi);
  // ZeRO-3, one sub-group at a time. The rank's partitions in the model's parameter order:
  // the embeddings 131,072,000 / 4 = 32,768,000; per layer q, k, v, o 4,194,304 each,
  // gate/up/down 11,272,192 each and two norms 1,024 each, 50,595,840 a layer. After 19 layers
  // the sub-group holds 994,088,960, below sub_group_size (1e9); layer 20's q takes it to
  // 998,283,264 and its k to 1,002,477,568, where it closes.
  constexpr int64_t kSubGroup = 1'002'477'568;
  p.dp = 4;
  p.zero = 3;
  e = Predict(m, t, p);
  EXPECT_STREQ(e.stages[0].peak_phase, "optimizer");
  // MARP bounds the closing parameter by the largest tensor's partition (the embeddings').
  EXPECT_GE(e.stages[0].breakdown.temporary, 6 * kSubGroup);
  EXPECT_LE(e.stages[0].breakdown.temporary, 6 * (kSubGroup + 32'768'000));
}

// DeepSpeed-MoE puts the experts in a parameter group of their own, sharded over the
// expert-data-parallel ranks, and ZeRO casts one group's partition at a time. A rank holding
// 1,000,000 parameters, 600,000 of them experts, on 4 data-parallel ranks with EP 2: the dense
// group's partition is 400,000 / 4 = 100,000, the experts' 600,000 / 2 = 300,000 (two ranks
// share each expert). bf16 over fp32 masters, 6 bytes an element at the cast: ZeRO-2 holds the
// larger, 1,800,000 bytes. ZeRO-1 first frees each group's gradients outside its partition
// (2 bytes each): the experts 1,800,000 - 2 x 300,000 = 1,200,000; the dense group 600,000 -
// 2 x 300,000 = 0.
TEST(ModelStates, DeepSpeedCastsOneParameterGroupAtATime) {
  TrainingSpec t;
  t.framework = Framework::kDeepSpeed;
  t.precision = Precision::kBf16;
  ParallelPlan p;
  p.dp = 4;
  p.ep = 2;
  memory_detail::StageParams sp;
  sp.total = 1'000'000;
  sp.experts = 600'000;
  sp.largest_tensor = 10'000;
  p.zero = 2;
  EXPECT_EQ(memory_detail::ModelStates(t, p, sp).optimizer_temp, 1'800'000);
  p.zero = 1;
  EXPECT_EQ(memory_detail::ModelStates(t, p, sp).optimizer_temp, 1'200'000);
  // Without experts one group: 1,000,000 / 4 at 6 bytes.
  sp.experts = 0;
  p.ep = 1;
  p.zero = 2;
  EXPECT_EQ(memory_detail::ModelStates(t, p, sp).optimizer_temp, 1'500'000);
  // fp32 training casts nothing: the flat copy alone, 4 bytes an element.
  t.precision = Precision::kFp32;
  EXPECT_EQ(memory_detail::ModelStates(t, p, sp).optimizer_temp, 1'000'000);
}

TEST(PredictMemory, MoreShardingNeverNeedsMoreMemory) {
  ModelSpec m = Zoo("mixtral-8x7b");
  TrainingSpec t;
  t.framework = Framework::kDeepSpeed;
  t.seq_len = 4096;
  ParallelPlan p;
  p.dp = 16;
  int64_t last = INT64_MAX;
  for (int zero = 0; zero <= 3; ++zero) {
    p.zero = zero;
    int64_t peak = Predict(m, t, p).peak_bytes;
    EXPECT_LE(peak, last) << "ZeRO-" << zero;
    last = peak;
  }
}

TEST(PredictMemory, ThreeLevelsAreOrdered) {
  ModelSpec m = Zoo("llama-3-8b");
  TrainingSpec t;
  ParallelPlan p;
  p.tp = 8;
  MemoryEstimate e = Predict(m, t, p);
  EXPECT_GT(e.peak_reserved_bytes, e.peak_bytes);
  EXPECT_GT(e.device_bytes, e.peak_reserved_bytes);
  t.device = DeviceKind::kCpu;
  MemoryEstimate cpu = Predict(m, t, p);
  EXPECT_EQ(cpu.device_bytes, cpu.peak_bytes);  // no CUDA context, no allocator cache
}

TEST(PredictMemory, ImpossibleLayoutsSayWhy) {
  ModelSpec m = Zoo("llama-2-7b");  // 32 heads, 32 layers
  TrainingSpec t;
  struct Case {
    ParallelPlan p;
    int64_t global_batch;
    const char* field;
  };
  ParallelPlan tp3;
  tp3.tp = 3;
  ParallelPlan pp64;
  pp64.pp = 64;
  ParallelPlan dp3;
  dp3.dp = 3;
  ParallelPlan cp3;
  cp3.cp = 3;
  ParallelPlan ep2;
  ep2.ep = 2;
  for (const auto& c : {Case{tp3, 0, "tp"}, Case{pp64, 0, "pp"}, Case{dp3, 8, "global_batch"},
                        Case{cp3, 0, "cp"}, Case{ep2, 0, "ep"}}) {
    t.global_batch = c.global_batch;
    auto r = PredictMemory(m, t, c.p);
    ASSERT_FALSE(r.ok()) << c.field;
    EXPECT_EQ(r.status().field(), c.field) << r.status().ToString();
    EXPECT_FALSE(r.status().message().empty());
  }
}

TEST(PredictMemory, EncoderNeedsAnEncoderHead) {
  ModelSpec m = Zoo("bert-base-uncased");
  TrainingSpec t;
  t.seq_len = 512;
  EXPECT_FALSE(PredictMemory(m, t, ParallelPlan{}).ok());
  t.head = HeadType::kMaskedLm;
  EXPECT_TRUE(PredictMemory(m, t, ParallelPlan{}).ok());
  t.head = HeadType::kClassification;
  EXPECT_TRUE(PredictMemory(m, t, ParallelPlan{}).ok());
}

// PyTorch gives each thread its own cuBLAS handle and each (handle, stream) its own workspace
// (CublasHandlePool.cpp); a step's forward runs on the caller's thread and its backward on the
// autograd engine's device thread: two workspaces of 32 MiB (":4096:8"), none on a CPU.
TEST(PredictMemory, TheForwardAndTheAutogradThreadEachHoldACublasWorkspace) {
  ModelSpec m = Zoo("gpt2");
  TrainingSpec t;
  t.framework = Framework::kHf;
  t.seq_len = 1024;
  EXPECT_EQ(Predict(m, t, ParallelPlan{}).stages[0].breakdown.overhead, int64_t{64} << 20);
  t.device = DeviceKind::kCpu;
  EXPECT_EQ(Predict(m, t, ParallelPlan{}).stages[0].breakdown.overhead, 0);
}

TEST(PredictMemory, HfAutocastKeepsFp32WeightsAndA16BitCopy) {
  // The HF Trainer under AMP keeps fp32 weights and grads (4 + 4) and fp32 Adam states (8);
  // autocast adds a 16-bit copy of the matmul weights while forward and backward run.
  ModelSpec m = Zoo("gpt2");
  TrainingSpec t;
  t.framework = Framework::kHf;
  t.seq_len = 1024;
  MemoryEstimate e = Predict(m, t, ParallelPlan{});
  const auto& b = e.stages[0].breakdown;
  EXPECT_EQ(b.weights, 4 * TotalParams(m));
  EXPECT_EQ(b.optimizer, 8 * TotalParams(m));
  t.precision = Precision::kBf16Pure;
  MemoryEstimate pure = Predict(m, t, ParallelPlan{});
  EXPECT_EQ(pure.stages[0].breakdown.weights, 2 * TotalParams(m));
  EXPECT_LT(pure.peak_bytes, e.peak_bytes);
}

}  // namespace
}  // namespace frenzy

namespace frenzy {
namespace {

TEST(PredictMemory, WorstStagesGiveTheSamePeakAsAllStages) {
  for (const char* name : {"llama-3.1-405b", "gpt2-xl", "mixtral-8x7b", "opt-66b"}) {
    ModelSpec m = *ResolveModel(name);
    for (int64_t pp : {1, 2, 3, 4, 6, 8}) {
      if (pp > m.num_layers) continue;
      for (Framework f : {Framework::kMegatron, Framework::kHf}) {
        TrainingSpec t;
        t.framework = f;
        t.seq_len = 1024;
        t.global_batch = 32;
        ParallelPlan p;
        p.pp = pp;
        auto all = PredictMemory(m, t, p, StageDetail::kAll);
        auto worst = PredictMemory(m, t, p, StageDetail::kWorst);
        ASSERT_TRUE(all.ok() && worst.ok());
        EXPECT_EQ(all->peak_bytes, worst->peak_bytes) << name << " pp=" << pp;
        EXPECT_EQ(all->device_bytes, worst->device_bytes) << name << " pp=" << pp;
      }
    }
  }
}

}  // namespace
}  // namespace frenzy

namespace frenzy {
namespace {

TEST(PredictMemory, SoftwareEnvironmentKnobs) {
  ModelSpec m = *ResolveModel("gpt2-xl");
  TrainingSpec t;
  t.framework = Framework::kHf;
  t.seq_len = 1024;
  ParallelPlan p;
  MemoryEstimate base = Predict(m, t, p);
  // An older CUDA context only moves what nvidia-smi shows.
  TrainingSpec old_cuda = t;
  old_cuda.cuda_context_bytes = int64_t{1343} << 20;
  MemoryEstimate oc = Predict(m, old_cuda, p);
  EXPECT_EQ(oc.peak_bytes, base.peak_bytes);
  EXPECT_EQ(oc.device_bytes - base.device_bytes, int64_t{1343 - 512} << 20);
  // Without the foreach optimizer the step's temporaries shrink to two tensors.
  TrainingSpec single = t;
  single.foreach_optimizer = false;
  EXPECT_LE(Predict(m, single, p).peak_bytes, base.peak_bytes);
  // A loss on 16-bit logits keeps half the vocabulary-sized buffers.
  TrainingSpec loss16 = t;
  loss16.loss_fp32 = false;
  OutputActivations o32 = OutputActivationBytes(m, t, p);
  OutputActivations o16 = OutputActivationBytes(m, loss16, p);
  EXPECT_EQ(2 * o16.loss_saved, o32.loss_saved);
  EXPECT_EQ(2 * o16.loss_backward_transient, o32.loss_backward_transient);
  EXPECT_LE(Predict(m, loss16, p).peak_bytes, base.peak_bytes);
  // A loop that keeps only the loss frees the logits before backward: pure bf16, 8 x 1,024
  // tokens, peak at the loss's backward, 8 x 1,024 x 50,257 bf16 logits = 823,410,688 bytes less.
  TrainingSpec big = t;
  big.precision = Precision::kBf16Pure;
  big.micro_batch = 8;
  TrainingSpec drop = big;
  drop.drop_logits = true;
  MemoryEstimate kept = Predict(m, big, p);
  MemoryEstimate dropped = Predict(m, drop, p);
  ASSERT_EQ(std::string(kept.stages[0].peak_phase), "loss");
  ASSERT_EQ(std::string(dropped.stages[0].peak_phase), "loss");
  EXPECT_EQ(kept.peak_bytes - dropped.peak_bytes, int64_t{8} * 1024 * 50'257 * 2);
  drop.framework = Framework::kMegatron;  // Megatron's loss keeps its own buffers
  ASSERT_FALSE(PredictMemory(m, drop, p).ok());
}

// GPT-2 XL under Megatron-LM, 8 x 1024 tokens with full recomputation, so the loss is the
// peak: kEntries logits entries (vocabulary 50,257).
constexpr int64_t kEntries = int64_t{8} * 1024 * 50'257;
TrainingSpec MegatronGpt2XlSpec() {
  TrainingSpec t;
  t.framework = Framework::kMegatron;
  t.seq_len = 1024;
  t.micro_batch = 8;
  t.global_batch = 8;
  t.recompute = Recompute::kFull;
  return t;
}

// Megatron's GPT model returns the loss alone, so its bf16 logits die when forward ends. GPT-2 XL
// (vocabulary 50,257), 8 x 1,024 tokens, full recompute so the loss holds the peak; one logit
// entry is 2 bytes in bf16 and 4 in fp32, 8 x 1,024 x 50,257 = 411,705,344 entries.
//  - forward, at the loss: bf16 logits + vocab_parallel_cross_entropy's fp32 softmax = 6 B each;
//  - start of backward: the softmax, turned into its gradient in place, and that gradient's
//    bf16 cast for the output layer (the logits are gone) = 6 B each;
//  - Megatron-LM through 2023: the model passed `output.float()` and the loss subtracted the
//    maximum out of place, a second fp32 copy alive in forward = 10 B each.
TEST(PredictMemory, MegatronLossFreesTheLogitsWithForward) {
  ModelSpec m = *ResolveModel("gpt2-xl");
  TrainingSpec t = MegatronGpt2XlSpec();
  ParallelPlan p;
  MemoryEstimate modern = Predict(m, t, p);
  // Forward and the start of backward tie at 6 B; logits kept into backward would make it 8.
  EXPECT_EQ(modern.stages[0].breakdown.logits, 6 * kEntries);
  TrainingSpec legacy = t;
  legacy.megatron_legacy = true;
  MemoryEstimate old = Predict(m, legacy, p);
  ASSERT_EQ(std::string(old.stages[0].peak_phase), "forward");
  EXPECT_EQ(old.stages[0].breakdown.logits, 10 * kEntries);
  // Besides the logits they differ by Transformer Engine's cuBLASLt workspace, 32 MiB on Hopper
  // (get_cublas_workspace_size_bytes), which 2023's own layers did not allocate.
  EXPECT_EQ(modern.stages[0].breakdown.overhead - old.stages[0].breakdown.overhead,
            int64_t{32} << 20);
  EXPECT_EQ(old.stages[0].breakdown.total() - old.stages[0].breakdown.logits + (int64_t{32} << 20),
            modern.stages[0].breakdown.total() - modern.stages[0].breakdown.logits);
  // The legacy loss is Megatron's alone.
  legacy.framework = Framework::kHf;
  EXPECT_FALSE(PredictMemory(m, legacy, p).ok());
}

// Megatron-LM's --cross-entropy-loss-fusion as released 2024-2025 (fused_cross_entropy.py with
// each step compiled whole): the in-place exp/sum of the forward and the scatter of the backward
// each run over a fresh fp32 copy of the logits that Inductor writes back. GPT-2 XL as above:
// forward holds the 16-bit logits (2 B), the kept fp32 softmax (4 B) and that copy (4 B) =
// 10 B an entry; backward the softmax, its copy and the 16-bit gradient = 10 B too.
TEST(PredictMemory, MegatronFusedLossCopiesTheLogitsOnceMore) {
  ModelSpec m = *ResolveModel("gpt2-xl");
  TrainingSpec t = MegatronGpt2XlSpec();
  t.megatron_fused_ce = true;
  ParallelPlan p;
  MemoryEstimate fused = Predict(m, t, p);
  EXPECT_EQ(fused.stages[0].breakdown.logits, 10 * kEntries);
  t.megatron_fused_ce = false;
  MemoryEstimate plain = Predict(m, t, p);
  EXPECT_EQ(fused.stages[0].peak_bytes - plain.stages[0].peak_bytes, 4 * kEntries);
  // Megatron's own loss only, and not the 2023 one.
  t.megatron_fused_ce = true;
  t.megatron_legacy = true;
  EXPECT_FALSE(PredictMemory(m, t, p).ok());
  t.megatron_legacy = false;
  t.framework = Framework::kHf;
  EXPECT_FALSE(PredictMemory(m, t, p).ok());
}

// Gradient accumulation. Llama-2-7B (Ψ = 6,738,415,616, see ZeroStagesShardAsThePaperSays) in
// pure bf16 under FSDP over 8 ranks, 2 sequences of 1 per rank a step, so 2 micro-batches: the
// second runs its forward beside the gradients the first left, which zero_grad frees only after
// the optimizer step. Reduced every micro-batch (FSDP2's default) they are the rank's bf16 shard,
// 2Ψ/8 bytes; under no_sync they are the whole model's, 2Ψ. One micro-batch a step holds none
// before backward: at its peak (the start of the layers' backward) only the output layer's and
// the last layer's first gradients exist, a few percent of the shard.
TEST(PredictMemory, AccumulationKeepsTheGradientsThroughTheNextForward) {
  constexpr int64_t kPsi = 6'738'415'616;
  ModelSpec m = Zoo("llama-2-7b");
  TrainingSpec t;
  t.framework = Framework::kFsdp;
  t.precision = Precision::kBf16Pure;
  t.seq_len = 1024;
  t.micro_batch = 1;
  t.fsdp_wrap_embeddings = true;  // no root unit here (FsdpRootUnitStaysGatheredThroughTheStep)
  ParallelPlan p;
  p.dp = 8;
  p.zero = 3;
  t.global_batch = 8;  // one micro-batch a step
  MemoryEstimate one = Predict(m, t, p);
  ASSERT_EQ(std::string(one.stages[0].peak_phase), "backward");
  EXPECT_LT(one.stages[0].breakdown.gradients, 2 * kPsi / 8 / 20);
  t.global_batch = 16;  // two
  MemoryEstimate two = Predict(m, t, p);
  EXPECT_EQ(std::string(two.stages[0].peak_phase), "backward");
  EXPECT_EQ(two.stages[0].breakdown.gradients, 2 * kPsi / 8);
  t.accumulate_unsharded = true;
  MemoryEstimate nosync = Predict(m, t, p);
  EXPECT_EQ(nosync.stages[0].breakdown.gradients, 2 * kPsi);
  EXPECT_EQ(nosync.peak_bytes - two.peak_bytes, 2 * kPsi - 2 * kPsi / 8);
  // One micro-batch a step has nothing to keep unsharded.
  t.global_batch = 8;
  EXPECT_EQ(Predict(m, t, p).peak_bytes, one.peak_bytes);
  // A LoRA fine-tune's unsharded gradients are its adapters' alone: r = 8 on all seven linears
  // of 32 layers, 8 x ((4,096 + 4,096) x 4 + (4,096 + 11,008) x 3) = 624,640 a layer,
  // 19,988,480 in all, fp32.
  TrainingSpec lora = t;
  lora.global_batch = 16;
  lora.precision = Precision::kBf16;
  lora.finetune = FineTune::kLora;
  EXPECT_EQ(Predict(m, lora, p).stages[0].breakdown.gradients, int64_t{19'988'480} * 4);
  // no_sync is FSDP's: other frameworks refuse it by name.
  t.global_batch = 16;
  t.framework = Framework::kHf;
  auto refused = PredictMemory(m, t, p);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().ToString().find("accumulate_unsharded"), std::string::npos);
}

// FSDP's root unit. Wrapping only the layers (litgpt, Accelerate, torchtitan until 2025) leaves
// the embedding, the final norm and the output layer in the root unit, which FSDP1 and FSDP2
// keep gathered from forward to backward, and whose unsharded gradient waits for the root's
// reduce-scatter at the end of backward. By hand: Llama-3.1-8B has 128,256 x 4,096 =
// 525,336,576 parameters in each of its untied embedding and output layer, and a 4,096 final
// norm: 1,050,677,248 outside the layers, 2,101,354,496 bytes gathered in bf16. Llama-2-7B:
// 2 x 32,000 x 4,096 + 4,096 = 262,148,096; its output layer and norm 131,076,096, whose fp32
// gradient shard over 8 ranks (4 / 8 bytes each) the root's unsharded gradient replaces.
TEST(PredictMemory, FsdpRootUnitStaysGatheredThroughTheStep) {
  TrainingSpec t;
  t.framework = Framework::kFsdp;
  t.seq_len = 4096;
  ParallelPlan p;
  p.dp = 8;
  p.zero = 3;
  // At the loss (before the head's gradient), the gathered root alone.
  ModelSpec l3 = Zoo("llama-3.1-8b");
  MemoryEstimate root = Predict(l3, t, p);
  TrainingSpec own = t;
  own.fsdp_wrap_embeddings = true;
  MemoryEstimate wrapped = Predict(l3, own, p);
  ASSERT_EQ(std::string(root.stages[0].peak_phase), "loss");
  ASSERT_EQ(std::string(wrapped.stages[0].peak_phase), "loss");
  EXPECT_EQ(root.stages[0].breakdown.temporary - wrapped.stages[0].breakdown.temporary,
            2 * int64_t{1'050'677'248});
  // In backward, also the root's unsharded bf16 gradient, instead of the head's fp32 shard.
  ModelSpec l2 = Zoo("llama-2-7b");
  t.micro_batch = 2;
  t.recompute = Recompute::kFull;
  t.loss_fp32 = false;
  own = t;
  own.fsdp_wrap_embeddings = true;
  root = Predict(l2, t, p);
  wrapped = Predict(l2, own, p);
  ASSERT_EQ(std::string(root.stages[0].peak_phase), "backward");
  ASSERT_EQ(std::string(wrapped.stages[0].peak_phase), "backward");
  EXPECT_EQ(root.stages[0].breakdown.temporary - wrapped.stages[0].breakdown.temporary,
            2 * 2 * int64_t{262'148'096});
  EXPECT_EQ(wrapped.stages[0].breakdown.gradients - root.stages[0].breakdown.gradients,
            int64_t{131'076'096} * 4 / 8);
  // Unsharded FSDP has no root to gather; other frameworks refuse the flag by name.
  p.zero = 0;
  EXPECT_EQ(Predict(l2, t, p).peak_bytes, Predict(l2, own, p).peak_bytes);
  own.framework = Framework::kMegatron;
  auto refused = PredictMemory(l2, own, p);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().ToString().find("fsdp_wrap_embeddings"), std::string::npos);
}

}  // namespace
}  // namespace frenzy

namespace frenzy {
namespace {

// Llama-2-7B (32 layers) in two stages of 20 and 12 layers. By hand: a layer holds 4 h^2
// (attention, h = 4096, 32 key/value heads) + 3 h f (gated MLP, f = 11008) + 2 h (norms) =
// 202,383,360 parameters; the embedding and the untied output layer 32,000 x 4,096 =
// 131,072,000 each; the final norm 4,096. Stage 0: embedding + 20 layers = 4,178,739,200; stage
// 1: 12 layers + final norm + output layer = 2,559,676,416 (together the model's 6,738,415,616).
// Megatron keeps 2 bytes of bf16 weights for each.
TEST(PredictMemory, AnUnevenSplitPutsItsLayersOnEachStage) {
  ModelSpec m = test::Zoo("llama-2-7b");
  TrainingSpec t;
  t.seq_len = 1024;
  t.global_batch = 8;
  ParallelPlan p;
  p.pp = 2;
  p.stage_layers = {20, 12};
  MemoryEstimate e = test::Predict(m, t, p);
  ASSERT_EQ(e.stages.size(), 2u);
  EXPECT_EQ(e.stages[0].num_layers, 20);
  EXPECT_EQ(e.stages[1].first_layer, 20);
  EXPECT_EQ(e.stages[1].num_layers, 12);
  EXPECT_EQ(e.stages[0].params, 4'178'739'200);
  EXPECT_EQ(e.stages[1].params, 2'559'676'416);
  EXPECT_EQ(e.stages[0].breakdown.weights, 2 * 4'178'739'200);
  // The even split (16 + 16) is what an empty list means, and the worst-stages shortcut gives
  // the uneven split's peak too.
  ParallelPlan even = p;
  even.stage_layers = {16, 16};
  ParallelPlan implicit = p;
  implicit.stage_layers.clear();
  EXPECT_EQ(test::Predict(m, t, even).peak_bytes, test::Predict(m, t, implicit).peak_bytes);
  auto worst = PredictMemory(m, t, p, StageDetail::kWorst);
  ASSERT_TRUE(worst.ok());
  EXPECT_EQ(worst->peak_bytes, e.peak_bytes);
}

TEST(PredictMemory, AnUnevenSplitMustCoverTheLayersOnce) {
  ModelSpec m = test::Zoo("llama-2-7b");
  TrainingSpec t;
  ParallelPlan p;
  p.pp = 2;
  for (std::vector<int64_t> bad : std::vector<std::vector<int64_t>>{{20, 11}, {32}, {32, 0}}) {
    p.stage_layers = bad;
    auto r = PredictMemory(m, t, p);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().field(), "stage_layers") << r.status().ToString();
  }
  p.stage_layers = {20, 12};
  p.vpp = 2;
  EXPECT_FALSE(PredictMemory(m, t, p).ok());
}

}  // namespace
}  // namespace frenzy
