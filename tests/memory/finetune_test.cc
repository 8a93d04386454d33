// LoRA and QLoRA model states against published figures and hand-derived sums.
#include "memory/finetune.h"

#include <gtest/gtest.h>

#include "memory/activations.h"
#include "memory/memory_model.h"
#include "zoo_model.h"

namespace frenzy {
namespace {

using test::Zoo;

TEST(FineTune, AdaptersOfLlama3_8bAsPeftPrintsThem) {
  // PEFT's print_trainable_parameters for Meta-Llama-3-8B with r = 16 on all seven linear
  // layers, as published in many fine-tuning write-ups: "trainable params: 41,943,040 ||
  // all params: 8,072,204,288". By hand per layer: q, o 16 x (4096 + 4096); k, v
  // 16 x (4096 + 1024); gate, up, down 16 x (4096 + 14336): 1,310,720; x 32 layers.
  ModelSpec m = Zoo("llama-3-8b");
  LoraSpec l;
  l.rank = 16;
  EXPECT_EQ(LayerAdapterParams(m, l, false), 1'310'720);
  EXPECT_EQ(ModelAdapterParams(m, l), 41'943'040);
  TrainingSpec t;
  t.framework = Framework::kHf;
  t.finetune = FineTune::kLora;
  t.lora = l;
  auto est = PredictMemory(m, t, ParallelPlan{});
  ASSERT_TRUE(est.ok()) << est.status().ToString();
  EXPECT_EQ(est->params, 8'072'204'288);
  // Attention only (q, k, v, o): 16 x (8192 x 2 + 5120 x 2) x 32.
  l.targets = kLoraAttention;
  EXPECT_EQ(ModelAdapterParams(m, l), int64_t{16} * (8192 * 2 + 5120 * 2) * 32);
}

TEST(FineTune, Nf4StorageIsTheQloraPapersFigure) {
  // QLoRA §3: 4 bits a weight plus 32/64 = 0.5 bits of fp32 absmax, or with double
  // quantisation 8/64 + 32/(64 x 256) = 0.127 bits.
  EXPECT_DOUBLE_EQ((Nf4BytesPerWeight(false) - 0.5) * 8, 0.5);
  EXPECT_NEAR((Nf4BytesPerWeight(true) - 0.5) * 8, 0.127, 0.0005);
}

TEST(FineTune, FrozenBaseHasNoGradientsOrOptimizerStates) {
  // Llama-3-8B, LoRA r = 16, bf16 base: weights 2 x 8,030,261,248 + 4 x 41,943,040 bytes;
  // gradients and AdamW states only for the adapters (4 + 8 bytes each).
  ModelSpec m = Zoo("llama-3-8b");
  TrainingSpec t;
  t.framework = Framework::kHf;
  t.finetune = FineTune::kLora;
  t.lora.rank = 16;
  t.seq_len = 512;
  t.recompute = Recompute::kFull;
  auto est = PredictMemory(m, t, ParallelPlan{});
  ASSERT_TRUE(est.ok());
  const MemoryBreakdown& b = est->stages[0].breakdown;
  EXPECT_EQ(b.weights, 2 * int64_t{8'030'261'248} + 4 * int64_t{41'943'040});
  EXPECT_EQ(b.optimizer, 8 * int64_t{41'943'040});
  EXPECT_LE(b.gradients, 4 * int64_t{41'943'040});
  // QLoRA: the layers' linear weights in NF4, embeddings, norms and head in fp32.
  t.finetune = FineTune::kQlora;
  est = PredictMemory(m, t, ParallelPlan{});
  ASSERT_TRUE(est.ok());
  const int64_t linear = int64_t{32} * (4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336);
  const int64_t rest = int64_t{8'030'261'248} - linear;
  const double expected = static_cast<double>(linear) * Nf4BytesPerWeight(true) +
                          4.0 * static_cast<double>(rest) + 4.0 * 41'943'040;
  EXPECT_NEAR(static_cast<double>(est->stages[0].breakdown.weights), expected, 1.0);
}

// LoRA under full sharding: the frozen base is sharded over the ranks too, so a layer is gathered
// to compute (the layer computing and the prefetched one), and under FSDP the root unit with the
// embeddings and output layer for the whole step. Llama-3-8B with bf16 adapters (2 bytes a
// weight, base and adapters alike) over 8 ranks: the 4,096 x 128,256 embedding and output layer
// and the 4,096 final norm are 1,050,677,248 weights outside the layers, 2,101,354,496 bytes.
TEST(FineTune, ShardedBaseIsGatheredToCompute) {
  ModelSpec m = Zoo("llama-3-8b");
  TrainingSpec t;
  t.framework = Framework::kFsdp;
  t.finetune = FineTune::kLora;
  t.lora.adapter_bytes = 2;
  t.seq_len = 512;
  t.recompute = Recompute::kFull;
  ParallelPlan p;
  p.dp = 8;
  p.zero = 3;
  auto root = PredictMemory(m, t, p);
  TrainingSpec own = t;
  own.fsdp_wrap_embeddings = true;
  auto wrapped = PredictMemory(m, own, p);
  ASSERT_TRUE(root.ok() && wrapped.ok());
  const MemoryBreakdown& b = wrapped->stages[0].breakdown;
  // Two layers of 218,112,000 base weights (plus their adapters) at 2 bytes, at least.
  EXPECT_GE(b.temporary, 2 * 2 * int64_t{218'112'000});
  ASSERT_EQ(std::string(root->stages[0].peak_phase), std::string(wrapped->stages[0].peak_phase));
  EXPECT_EQ(root->stages[0].breakdown.temporary - b.temporary, int64_t{2'101'354'496});
  // Sharding the base never costs more than holding it whole.
  p.zero = 2;
  auto whole = PredictMemory(m, t, p);
  ASSERT_TRUE(whole.ok());
  EXPECT_LT(root->peak_bytes, whole->peak_bytes);
}

// Sharded QLoRA (PEFT's Llama-2-70B recipe over two GPUs with FSDP or ZeRO-3): the 4-bit layers
// and every other weight in 16 bits, sharded. By hand for Llama-2-70B: 80 layers of q, o 8,192 x
// 8,192, k, v 8,192 x 1,024 and gate, up, down 8,192 x 28,672 make 68,451,041,280 NF4 weights;
// embeddings, output layer and norms 525,606,912 in bf16; r = 8 on all linears 80 x 8 x
// (16,384 x 2 + 9,216 x 2 + 36,864 x 3) = 103,546,880 fp32 adapters. Half of it on each rank.
TEST(FineTune, ShardedQloraKeepsOneDtypeAndShardsIt) {
  ModelSpec m = Zoo("llama-2-70b");
  TrainingSpec t;
  t.framework = Framework::kFsdp;
  t.finetune = FineTune::kQlora;
  t.lora.rank = 8;
  t.seq_len = 2048;
  t.recompute = Recompute::kFull;
  ParallelPlan p;
  p.dp = 2;
  p.zero = 3;
  auto fsdp = PredictMemory(m, t, p);
  ASSERT_TRUE(fsdp.ok()) << fsdp.status().ToString();
  const double nf4 = 0.5 + 1.0 / 64 + 4.0 / (64 * 256);
  const double whole = 68'451'041'280.0 * nf4 + 2.0 * 525'606'912 + 4.0 * 103'546'880;
  EXPECT_NEAR(static_cast<double>(fsdp->stages[0].breakdown.weights), whole / 2, 2.0);
  // prepare_model_for_kbit_training does not run on it: the flag changes nothing.
  TrainingSpec no_upcast = t;
  no_upcast.lora.upcast_rest = false;
  EXPECT_EQ(PredictMemory(m, no_upcast, p)->peak_bytes, fsdp->peak_bytes);
  // ZeRO-3 shards it alike; one GPU with the HF loop keeps the upcast fp32 rest.
  t.framework = Framework::kDeepSpeed;
  auto ds = PredictMemory(m, t, p);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_NEAR(static_cast<double>(ds->stages[0].breakdown.weights), whole / 2, 2.0);
  t.framework = Framework::kHf;
  auto one = PredictMemory(m, t, ParallelPlan{});
  ASSERT_TRUE(one.ok());
  EXPECT_NEAR(static_cast<double>(one->stages[0].breakdown.weights), whole + 2.0 * 525'606'912,
              2.0);
}

TEST(FineTune, SixteenBitAdaptersWithAPagedOptimizer) {
  // The QLoRA reference script's setting: adapters cast to bf16 (2 bytes, gradients too) and
  // bitsandbytes' paged 32-bit AdamW (two fp32 moments whatever the weights' dtype); no
  // autocast copies of 16-bit adapters. Llama-3-8B, r = 16: 41,943,040 adapters.
  ModelSpec m = Zoo("llama-3-8b");
  TrainingSpec t;
  t.framework = Framework::kHf;
  t.finetune = FineTune::kLora;
  t.lora.rank = 16;
  t.lora.adapter_bytes = 2;
  t.optimizer = OptimizerKind::kPagedAdamW;
  t.seq_len = 512;
  t.recompute = Recompute::kFull;
  auto est = PredictMemory(m, t, ParallelPlan{});
  ASSERT_TRUE(est.ok()) << est.status().ToString();
  const MemoryBreakdown& b = est->stages[0].breakdown;
  EXPECT_EQ(b.weights, 2 * int64_t{8'030'261'248} + 2 * int64_t{41'943'040});
  EXPECT_EQ(b.optimizer, 8 * int64_t{41'943'040});
  EXPECT_LE(b.gradients, 2 * int64_t{41'943'040});
  t.lora.adapter_bytes = 4;
  auto fp32 = PredictMemory(m, t, ParallelPlan{});
  ASSERT_TRUE(fp32.ok());
  // fp32 adapters cost 2 more bytes each as weights (at every moment), as gradients (after
  // backward) and autocast's 2-byte copy (while a layer runs): between 2 and 6 bytes an adapter
  // more at the peak (here the loss, with no gradients alive and the layers checkpointed).
  const int64_t more = fp32->peak_bytes - est->peak_bytes;
  EXPECT_GE(more, 2 * int64_t{41'943'040}) << more;
  EXPECT_LE(more, 6 * int64_t{41'943'040} + (int64_t{64} << 20)) << more;
  t.lora.adapter_bytes = 3;
  EXPECT_EQ(PredictMemory(m, t, ParallelPlan{}).status().field(), "lora_dtype");
}

// Pure bf16 LoRA under FSDP (Answer.AI's fsdp_qlora: the model cast to bf16, no autocast): the
// adapters, their gradients and AdamW's two moments are bf16 (2 + 2 + 4 bytes an adapter), and
// full sharding over 2 ranks halves everything. Llama-2-7B, r = 64 on q, k, v, gate, up, down
// (no o_proj), by hand per layer: 3 x 64 x (4096 + 4096) + 3 x 64 x (4096 + 11008) = 4,472,832;
// x 32 layers = 143,130,624 adapters over 6,738,415,616 base weights. With FSDP's
// CPUOffload(offload_params=True) all three move to host memory; the GPU keeps the gathered
// layers only.
TEST(FineTune, PureBf16AdaptersAndTheirOffloadUnderFsdp) {
  ModelSpec m = Zoo("llama-2-7b");
  TrainingSpec t;
  t.framework = Framework::kFsdp;
  t.finetune = FineTune::kLora;
  t.precision = Precision::kBf16Pure;
  t.lora.rank = 64;
  t.lora.targets = *ParseLoraTargets("q_proj,k_proj,v_proj,gate_proj,up_proj,down_proj");
  t.lora.adapter_bytes = 2;
  t.seq_len = 2048;
  t.recompute = Recompute::kFull;
  ParallelPlan p;
  p.dp = 2;
  p.zero = 3;
  const int64_t adapters = 143'130'624;
  ASSERT_EQ(ModelAdapterParams(m, t.lora), adapters);
  auto est = PredictMemory(m, t, p);
  ASSERT_TRUE(est.ok()) << est.status().ToString();
  const MemoryBreakdown& b = est->stages[0].breakdown;
  EXPECT_EQ(b.weights, (2 * int64_t{6'738'415'616} + 2 * adapters) / 2);
  EXPECT_EQ(b.optimizer, 4 * adapters / 2);
  EXPECT_LE(b.gradients, 2 * adapters / 2);
  EXPECT_EQ(est->stages[0].host_bytes, 0);
  p.offload = Offload::kParams;
  auto off = PredictMemory(m, t, p);
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  const MemoryBreakdown& o = off->stages[0].breakdown;
  EXPECT_EQ(o.weights, 0);
  EXPECT_EQ(o.optimizer, 0);
  EXPECT_EQ(o.gradients, 0);
  EXPECT_EQ(off->stages[0].host_bytes,
            (2 * int64_t{6'738'415'616} + 2 * adapters) / 2 + 2 * adapters / 2 + 4 * adapters / 2);
  // What stays is the same gathered layers and activations: the peak falls by at least the
  // states that left.
  EXPECT_GE(est->peak_bytes - off->peak_bytes, b.weights + b.optimizer);
  // fp32 adapters (PEFT's default) on the bf16 model, without autocast: the adapters, their
  // gradients and both moments are fp32 (4 + 4 + 8 bytes an adapter), the base stays bf16.
  t.lora.adapter_bytes = 4;
  p.offload = Offload::kNone;
  auto wide = PredictMemory(m, t, p);
  ASSERT_TRUE(wide.ok()) << wide.status().ToString();
  const MemoryBreakdown& w = wide->stages[0].breakdown;
  EXPECT_EQ(w.weights, (2 * int64_t{6'738'415'616} + 4 * adapters) / 2);
  EXPECT_EQ(w.optimizer, 8 * adapters / 2);
  EXPECT_LE(w.gradients, 4 * adapters / 2);
}

// FSDP1 with use_orig_params=True (Lightning Fabric's default): every layer unit mixes frozen
// weights with adapters, so its flat parameter requires grad and backward materialises the
// whole gradient. Llama-2-7B in pure bf16, r = 8 on q and v, 2 ranks, by hand: a layer has
// 4 x 4096^2 + 3 x 4096 x 11008 + 2 x 4096 = 202,383,360 weights and 2 x 8 x (4096 + 4096) =
// 131,072 adapter weights; x 32 layers = 6,480,461,824 at 2 bytes = 12,960,923,648 bytes of
// gradient, 6,480,461,824 a rank once reduce-scattered (the root unit, all frozen, has none).
// Under no_sync the unsharded 12,960,923,648 bytes stay between micro-batches.
TEST(FineTune, OrigParamsGiveFrozenWeightsInMixedUnitsGradients) {
  ModelSpec m = Zoo("llama-2-7b");
  TrainingSpec t;
  t.framework = Framework::kFsdp;
  t.finetune = FineTune::kLora;
  t.precision = Precision::kBf16Pure;
  t.lora.targets = *ParseLoraTargets("q_proj,v_proj");
  t.lora.adapter_bytes = 2;
  t.seq_len = 1024;
  t.recompute = Recompute::kFull;
  ParallelPlan p;
  p.dp = 2;
  p.zero = 3;
  auto adapters_only = PredictMemory(m, t, p);
  t.fsdp_orig_params = true;
  auto whole = PredictMemory(m, t, p);
  ASSERT_TRUE(adapters_only.ok() && whole.ok()) << whole.status().ToString();
  EXPECT_LE(adapters_only->stages[0].breakdown.gradients, 2 * 4'194'304 / 2 + 2 * 131'072);
  const int64_t sharded = int64_t{6'480'461'824};
  const int64_t one_layer = 2 * (202'383'360 + 131'072);  // before its reduce-scatter
  // The peak is in backward, at the first layer's: the other 31 layers' shards are there.
  EXPECT_STREQ(whole->stages[0].peak_phase, "backward");
  EXPECT_GE(whole->stages[0].breakdown.gradients, sharded / 32 * 31);
  EXPECT_LE(whole->stages[0].breakdown.gradients, sharded + one_layer);
  // Accumulating 4 micro-batches under no_sync: the unsharded gradients, from the start.
  t.accumulate_unsharded = true;
  t.global_batch = 8;
  auto no_sync = PredictMemory(m, t, p);
  ASSERT_TRUE(no_sync.ok()) << no_sync.status().ToString();
  EXPECT_GE(no_sync->stages[0].breakdown.gradients, 2 * sharded);
  EXPECT_LE(no_sync->stages[0].breakdown.gradients, 2 * sharded + one_layer);
  // Only FSDP has it.
  t.framework = Framework::kDeepSpeed;
  t.accumulate_unsharded = false;
  EXPECT_EQ(PredictMemory(m, t, p).status().field(), "fsdp_orig_params");
}

// lit-gpt's own Llama block as of 2023 (--litgpt-model --litgpt-bf16-rmsnorm, PyTorch 2.1) under
// LoRA on q and v, dropout 0.05, pure bf16 on a GPU, one layer's activations by hand, per token
// (h = 4096, f = 11008, 32 heads, r = 8):
//   RMSNorm x 2 (litgpt's, in bf16): x, x * x (kept by mean), the per-token rsqrt   2 x (4h + 2)
//   dropout's bool mask and output (A's input)                                       3h
//   A's output, two adapted parts of rank 8                                          2 x 2r
//   zero_pad's index_copy source: B's output for q and v, 2h wide                    4h
//   the fused q/k/v output (kept through v's view), the rotated q and k              6h + 4h
//   the kernel's output and fp32 log-sum-exp per head                                2h + 4 x 32
//   SwiGLU: gate and up outputs, the activation's output                             6f
// = 27h + 6f + 164 = 176,804 bytes; the frozen projections keep no inputs.
TEST(FineTune, LitgptLlamaLayerKeepsItsFusedProjectionAndZeroPadSource) {
  ModelSpec m = Zoo("llama-2-7b");
  TrainingSpec t;
  t.framework = Framework::kFsdp;
  t.finetune = FineTune::kLora;
  t.precision = Precision::kBf16Pure;
  t.lora.targets = *ParseLoraTargets("q_proj,v_proj");
  t.lora.adapter_bytes = 2;
  t.lora.dropout = 0.05;
  t.seq_len = 1024;
  t.litgpt_model = true;
  t.litgpt_rmsnorm_in_dtype = true;  // lit-gpt of 2023, as above
  t.mean_keeps_input = true;         // on PyTorch 2.1, whose mean kept x * x
  auto per_layer = [&](ModelSpec model) {
    model.num_layers = 2;
    auto two = PredictMemory(model, t, ParallelPlan{});
    model.num_layers = 4;
    auto four = PredictMemory(model, t, ParallelPlan{});
    EXPECT_TRUE(two.ok() && four.ok());
    return (four->stages[0].activations_per_microbatch -
            two->stages[0].activations_per_microbatch) / 2;
  };
  EXPECT_EQ(per_layer(m), int64_t{176'804} * 1024);
  // All of q, k and v adapted: nothing to zero-pad, and A has three parts.
  t.lora.targets = *ParseLoraTargets("q_proj,k_proj,v_proj");
  EXPECT_EQ(per_layer(m), int64_t{176'804 - 4 * 4096 + 2 * 8} * 1024);
  const int64_t qkv = 176'804 - 4 * 4096 + 2 * 8;
  // litgpt since 2024 upcasts in its RMSNorm as HF does: x.float() and x.float()^2 kept in fp32,
  // and the rsqrt, instead of x and x^2 in bf16: 2 x (8h + 4) in place of 2 x (4h + 2).
  t.litgpt_rmsnorm_in_dtype = false;
  EXPECT_EQ(per_layer(m), int64_t{qkv + 8 * 4096 + 4} * 1024);
  // From PyTorch 2.2 mean keeps no input: x.float() and the rsqrt alone, 2 x (4h + 4).
  t.mean_keeps_input = false;
  EXPECT_EQ(per_layer(m), int64_t{qkv + 4} * 1024);
  // Megatron-LM runs its own layers, not litgpt's.
  t.framework = Framework::kMegatron;
  t.finetune = FineTune::kFull;
  EXPECT_EQ(PredictMemory(m, t, ParallelPlan{}).status().field(), "litgpt_model");
}

TEST(FineTune, ImpossibleSettingsSayWhy) {
  ModelSpec m = Zoo("llama-3-8b");
  TrainingSpec t;
  t.finetune = FineTune::kLora;
  t.framework = Framework::kMegatron;
  EXPECT_FALSE(PredictMemory(m, t, ParallelPlan{}).ok());
  t.framework = Framework::kDeepSpeed;  // QLoRA under ZeRO-1/2: not modelled
  t.finetune = FineTune::kQlora;
  ParallelPlan z2;
  z2.dp = 2;
  z2.zero = 2;
  EXPECT_EQ(PredictMemory(m, t, z2).status().field(), "finetune");
  t.framework = Framework::kHf;
  t.precision = Precision::kFp32;  // QLoRA computes in 16 bits
  EXPECT_EQ(PredictMemory(m, t, ParallelPlan{}).status().field(), "precision");
  t.precision = Precision::kBf16;
  t.lora.rank = 0;
  EXPECT_FALSE(PredictMemory(m, t, ParallelPlan{}).ok());
  std::string bad;
  EXPECT_FALSE(ParseLoraTargets("q_proj,w9", &bad));
  EXPECT_EQ(bad, "w9");
  EXPECT_EQ(*ParseLoraTargets("q_proj,v_proj"), unsigned{kLoraQ | kLoraV});
  EXPECT_EQ(LoraTargetsName(kLoraQ | kLoraV), "q_proj,v_proj");
  // The output layer, alone or beside a group ("all-linear" leaves it out, as PEFT's does).
  EXPECT_EQ(*ParseLoraTargets("all-linear,lm_head"), unsigned{kLoraAllLinear | kLoraHead});
  EXPECT_EQ(LoraTargetsName(kLoraAllLinear | kLoraHead), "all-linear,lm_head");
  EXPECT_EQ(*ParseLoraTargets("q_proj,lm_head"), unsigned{kLoraQ | kLoraHead});
  EXPECT_EQ(LoraTargetsName(kLoraQ | kLoraHead), "q_proj,lm_head");
  EXPECT_EQ((*ParseLoraTargets("all-linear") & kLoraHead), 0u);
}

TEST(FineTune, AnAdaptedOutputLayerAddsItsAdapterAndItsVocabularySizedTensors) {
  // Llama-3-8B, r = 16 on every linear layer and lm_head: the head's A is 16 x 4096 and its B
  // 128,256 x 16, so 41,943,040 + 16 x (4096 + 128,256) = 44,060,672 trainable parameters.
  ModelSpec m = Zoo("llama-3-8b");
  LoraSpec l;
  l.rank = 16;
  l.targets = kLoraAllLinear | kLoraHead;
  EXPECT_EQ(HeadAdapterParams(m, l), 2'117'632);
  EXPECT_EQ(ModelAdapterParams(m, l), 44'060'672);
  TrainingSpec t;
  t.framework = Framework::kHf;
  t.finetune = FineTune::kLora;
  t.lora = l;
  t.seq_len = 512;
  t.precision = Precision::kBf16Pure;  // a bf16 model, fp32 adapters: x.to(fp32) and back
  // Forward, where the outputs meet: B's output scaled (fp32, 4 bytes) and the fp32 sum (4)
  // beside the frozen layer's bf16 output; backward: the bf16 gradient of the logits, its fp32
  // cast (the sum's) and the scaled gradient (4). 512 tokens x 128,256.
  const int64_t tv = int64_t{512} * 128'256;
  OutputActivations out = OutputActivationBytes(m, t, ParallelPlan{});
  EXPECT_EQ(out.head_forward_transient, tv * (4 + 4));
  EXPECT_EQ(out.head_backward_transient, tv * (2 + 4 + 4));
  // Under autocast the adapter's output is bf16 and so is the sum: 2 + 2 and 2 + 2.
  t.precision = Precision::kBf16;
  out = OutputActivationBytes(m, t, ParallelPlan{});
  EXPECT_EQ(out.head_forward_transient, tv * (2 + 2));
  EXPECT_EQ(out.head_backward_transient, tv * (2 + 2));
  // Not adapted: nothing of the kind, and the model's parameters drop by the head's adapter.
  auto adapted = PredictMemory(m, t, ParallelPlan{});
  t.lora.targets = kLoraAllLinear;
  EXPECT_EQ(OutputActivationBytes(m, t, ParallelPlan{}).head_forward_transient, 0);
  auto plain = PredictMemory(m, t, ParallelPlan{});
  ASSERT_TRUE(adapted.ok() && plain.ok());
  EXPECT_EQ(adapted->params - plain->params, 2'117'632);
}

}  // namespace
}  // namespace frenzy
