// FP8 linears (precision fp8): Transformer Engine keeps FP8 inputs and caches FP8 weights
// (transformer_engine/pytorch/module/linear.py: the FP8 input is saved column-wise for the
// weight gradient; weight workspaces cached across micro-batches, row-wise and transposed on
// Hopper); torchao.float8 keeps the high-precision tensors (float8_linear.py:
// save_for_backward(input_hp, weight_hp_t)) and gathers FP8 weights under FSDP. Expected values
// are derived by hand from the architectures and Korthikanti et al.'s per-layer table.
#include <gtest/gtest.h>

#include "memory/memory_model.h"
#include "zoo_model.h"

namespace frenzy {
namespace {

using test::Predict;
using test::Zoo;

TrainingSpec Fp8(TrainingSpec t, Fp8Recipe r) {
  t.precision = Precision::kFp8;
  t.fp8_recipe = r;
  return t;
}

TEST(Fp8, TransformerEngineCachesTwoBytesPerLinearWeight) {
  // Llama-3.1-8B's 32 layers hold q 4096x4096, k and v 4096x1024, o 4096x4096 and gate, up,
  // down 3 x 4096x14336: 218,103,808 linear weights a layer, 6,979,321,856 in all; TE keeps an
  // FP8 copy and its transpose of each (2 bytes). Gradients and optimizer states do not change.
  ModelSpec m = Zoo("llama-3.1-8b");
  TrainingSpec t;
  t.seq_len = 4096;
  ParallelPlan p;
  p.dp = 8;
  p.distributed_optimizer = true;
  MemoryEstimate bf16 = Predict(m, t, p);
  MemoryEstimate fp8 = Predict(m, Fp8(t, Fp8Recipe::kDelayed), p);
  const auto& a = bf16.stages[0].breakdown;
  const auto& b = fp8.stages[0].breakdown;
  EXPECT_EQ(b.weights - a.weights, int64_t{2} * 6'979'321'856);
  EXPECT_EQ(b.optimizer, a.optimizer);
  // FP8 primary weights (--fp8-param-gather) replace the 16-bit weights: no extra bytes.
  TrainingSpec gather = Fp8(t, Fp8Recipe::kDelayed);
  gather.fp8_param_gather = true;
  EXPECT_EQ(Predict(m, gather, p).stages[0].breakdown.weights, a.weights);
}

TEST(Fp8, TransformerEngineKeepsOneByteInputsInMegatronsTable) {
  // Korthikanti et al. Table 2 (no recomputation, tp 1): sbh(34 + 5as/h) bytes a layer with
  // 16-bit activations, of which the QKV input (2sbh), the projection input (2sbh), the fc1
  // input (2sbh) and the fc2 input (8sbh) are what the linears keep. In FP8 they take half:
  // 7sbh less a layer, and nothing else changes.
  ModelSpec m = Zoo("gpt2-medium");  // h 1024, 24 layers, GELU MLP of 4h
  TrainingSpec t;
  t.seq_len = 1024;
  t.flash_attn = false;
  ParallelPlan p;
  const int64_t bf16 = Predict(m, t, p).stages[0].activations_per_microbatch;
  const int64_t fp8 =
      Predict(m, Fp8(t, Fp8Recipe::kCurrent), p).stages[0].activations_per_microbatch;
  EXPECT_EQ(bf16 - fp8, int64_t{7} * 1024 * 1024 * 24);
}

TEST(Fp8, EagerTransformerEngineLinearsKeepACastEach) {
  // HF modules with TE's Linear swapped in (Accelerate's TE backend), 16-bit stream
  // (DeepSpeed bf16): Llama's q, k and v projections each keep an FP8 cast of the normalised
  // input (3 x 1 byte instead of one shared 2-byte tensor), gate and up theirs (2 x 1 instead
  // of 2), o_proj its input (1 instead of 2) and down_proj the product (1 instead of 2): per
  // token 4096 x (1 + 0 + 1) + 14336 x 1 bytes less a layer.
  ModelSpec m = Zoo("llama-3.1-8b");
  TrainingSpec t;
  t.framework = Framework::kDeepSpeed;
  t.seq_len = 2048;
  ParallelPlan p;
  const int64_t bf16 = Predict(m, t, p).stages[0].activations_per_microbatch;
  const int64_t fp8 =
      Predict(m, Fp8(t, Fp8Recipe::kDelayed), p).stages[0].activations_per_microbatch;
  const int64_t per_token = 4096 * (-1 + 0 + 1) + 14336;
  EXPECT_EQ(bf16 - fp8, per_token * 2048 * 32);
}

TEST(Fp8, TorchaoKeepsHighPrecisionTensorsAndGathersFp8Weights) {
  // torchtitan: FSDP2 full shard over 8 GPUs. Float8Linear keeps what bf16 kept; FP8 all-gather
  // halves the gathered layers: Llama-3.1-8B's layer holds 218,103,808 linear and 8,192 norm
  // weights, two layers are unsharded at a time (the one computing and the prefetched one), so
  // 2 x 218,112,000 bytes less at 1 byte a weight instead of 2.
  ModelSpec m = Zoo("llama-3.1-8b");
  TrainingSpec t;
  t.framework = Framework::kFsdp;
  t.seq_len = 8192;
  t.recompute = Recompute::kOp;
  ParallelPlan p;
  p.dp = 8;
  p.zero = 3;
  MemoryEstimate bf16 = Predict(m, t, p);
  TrainingSpec f = Fp8(t, Fp8Recipe::kTensorwise);
  MemoryEstimate fp8 = Predict(m, f, p);
  EXPECT_EQ(fp8.stages[0].activations_per_microbatch, bf16.stages[0].activations_per_microbatch);
  EXPECT_EQ(fp8.peak_bytes, bf16.peak_bytes);
  f.fp8_param_gather = true;
  MemoryEstimate gathered = Predict(m, f, p);
  EXPECT_EQ(bf16.peak_bytes - gathered.peak_bytes, int64_t{2} * (218'103'808 + 8'192));
}

TEST(Fp8, RecipesBelongToTheirFrameworks) {
  ModelSpec m = Zoo("llama-3.1-8b");
  TrainingSpec t;
  ParallelPlan p;
  p.dp = 8;
  auto field = [&](const TrainingSpec& tt, const ParallelPlan& pp) {
    auto r = PredictMemory(m, tt, pp);
    return r.ok() ? std::string("ok") : r.status().field();
  };
  TrainingSpec ds_torchao = Fp8(t, Fp8Recipe::kTensorwise);
  ds_torchao.framework = Framework::kDeepSpeed;
  EXPECT_EQ(field(ds_torchao, p), "fp8_recipe");
  EXPECT_EQ(field(Fp8(t, Fp8Recipe::kRowwise), p), "fp8_recipe");  // megatron + torchao
  TrainingSpec gather = Fp8(t, Fp8Recipe::kDelayed);
  gather.fp8_param_gather = true;  // without the distributed optimizer
  EXPECT_EQ(field(gather, p), "fp8_param_gather");
  TrainingSpec not_fp8 = t;
  not_fp8.fp8_param_gather = true;
  EXPECT_EQ(field(not_fp8, p), "fp8_param_gather");
  TrainingSpec lora = Fp8(t, Fp8Recipe::kDelayed);
  lora.framework = Framework::kHf;
  lora.finetune = FineTune::kLora;
  EXPECT_EQ(field(lora, p), "precision");
  TrainingSpec ok = Fp8(t, Fp8Recipe::kTensorwise);
  ok.framework = Framework::kFsdp;
  EXPECT_EQ(field(ok, p), "ok");
}

}  // namespace
}  // namespace frenzy
