// A step's tensors one by one (memory/step_events.h): the sliced HF loss chains against an
// independent implementation (tools/fsdp_init_replay.py) and cases derived by hand, the
// allocator's release-and-retry at the device's memory, transformers releases mapped to their
// chains, and the account's loss phase under each chain worked out by hand.
#include "memory/step_events.h"

#include <gtest/gtest.h>

#include "memory/caching_allocator.h"
#include "memory/memory_model.h"
#include "zoo_model.h"

namespace frenzy {
namespace {

using test::Predict;
using test::Zoo;

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(HfLoss, TransformersReleasesMapToTheirChains) {
  EXPECT_EQ(HfLossOfTransformers("4.38"), HfLoss::kModelUpcastSliced);
  EXPECT_EQ(HfLossOfTransformers("4.45.2"), HfLoss::kModelUpcastSliced);
  EXPECT_EQ(HfLossOfTransformers("3.5.1"), HfLoss::kModelUpcastSliced);
  EXPECT_EQ(HfLossOfTransformers("4.46"), HfLoss::kLossUpcastSliced);
  EXPECT_EQ(HfLossOfTransformers("4.48.3"), HfLoss::kLossUpcastSliced);
  EXPECT_EQ(HfLossOfTransformers("4.49.0"), HfLoss::kPadded);
  EXPECT_EQ(HfLossOfTransformers("4.49.0.dev0"), HfLoss::kPadded);
  EXPECT_EQ(HfLossOfTransformers("5.0"), HfLoss::kPadded);
  for (const char* bad : {"", "4", "4.", ".38", "-4.38", "four", "4.x", "4.38 x", "4.38;rm",
                          "99999.1"}) {
    EXPECT_FALSE(HfLossOfTransformers(bad).has_value()) << bad;
  }
}

// transformers 4.38's chain alone, the logits kept: the same bytes as the independent replay
// (`hf_loss_chain(b, 2048, 32000)` in tools/fsdp_init_replay.py: 4,718,592,000 at b = 4 and
// 11,796,480,000 at b = 10).
OutputActivations LlamaChain(int64_t b) {
  OutputActivations o;
  o.chain = HfLoss::kModelUpcastSliced;
  o.logits_elems = b * 2048 * 32000;
  o.shifted_elems = b * 2047 * 32000;
  o.logit_bytes = 2;
  o.loss_bytes = 4;
  return o;
}

TEST(StepEvents, SlicedChainAsTheIndependentReplay) {
  // Most allocated at once, by hand: the fp32 logits, the log-softmax and its two gradients.
  // At b = 4 the logits are 1,048,576,000 bytes (500 x 2 MiB) and a shorter tensor 512,000
  // bytes less: its segment rounds up to the logits' size and what would be left is under
  // 1 MiB, so it takes (and counts) the whole block. At b = 10 the 1,280,000 bytes left are
  // split off: 2,621,440,000 + 3 x 2,620,160,000.
  const std::pair<int64_t, int64_t> peak[] = {{4'718'592'000, 4 * int64_t{1'048'576'000}},
                                              {11'796'480'000, 2'621'440'000 + 3 * int64_t{2'620'160'000}}};
  int i = 0;
  for (int64_t b : {4, 10}) {
    StepEvents ev;
    AppendOutputEvents(LlamaChain(b), /*logits_freed=*/false, ev);
    const StepReplay r = ReplaySteps(ev.events(), 1);
    EXPECT_EQ(r.reserved, peak[i].first) << b;
    EXPECT_EQ(r.peak_allocated, peak[i].second) << b;
    EXPECT_FALSE(r.out_of_memory);
    ++i;
  }
}

TEST(CachingAllocator, ReleasesWholeFreeSegmentsAtTheLimitThenRetries) {
  CachingAllocatorModel a;
  a.set_limit(100 * kMiB);
  a.Free(a.Malloc(60 * kMiB));     // one free 60 MiB segment cached
  const auto y = a.Malloc(70 * kMiB);  // 60 + 70 > 100: the free segment goes, then 70 fits
  EXPECT_EQ(a.reserved(), 70 * kMiB);
  EXPECT_EQ(a.peak_reserved(), 70 * kMiB);
  EXPECT_FALSE(a.out_of_memory());
  a.Malloc(40 * kMiB);  // nothing free to release: 110 > 100
  EXPECT_TRUE(a.out_of_memory());
  a.Free(y);
  // A segment holding a live block stays, even with free space in it.
  CachingAllocatorModel b;
  b.set_limit(100 * kMiB);
  b.Free(b.Malloc(60 * kMiB));
  b.Malloc(30 * kMiB);  // splits the 60 MiB block: 30 live, 30 free in the same segment
  EXPECT_EQ(b.reserved(), 60 * kMiB);
  b.Malloc(50 * kMiB);  // 60 + 50 > 100 and no whole segment is free
  EXPECT_TRUE(b.out_of_memory());
  // Without a limit nothing is released: the peak is the end.
  CachingAllocatorModel c;
  c.Free(c.Malloc(60 * kMiB));
  c.Malloc(70 * kMiB);
  EXPECT_EQ(c.reserved(), 130 * kMiB);
  EXPECT_EQ(c.peak_reserved(), 130 * kMiB);
}

TEST(StepEvents, ALimitedReplayReleasesWhatTheStepLeftCached) {
  // A 64 MiB tensor, then a 96 MiB one after it is freed: 160 MiB without a limit, 96 within
  // 120 MiB (the first segment released before the second is reserved).
  const std::vector<StepEvent> ev = {{64 * kMiB, -1}, {0, 0}, {96 * kMiB, -1}, {0, 2}};
  EXPECT_EQ(ReplaySteps(ev, 2).reserved, 160 * kMiB);
  const StepReplay r = ReplaySteps(ev, 2, 120 * kMiB);
  EXPECT_EQ(r.reserved, 96 * kMiB);
  EXPECT_FALSE(r.out_of_memory);
  EXPECT_TRUE(ReplaySteps(ev, 2, 90 * kMiB).out_of_memory);
}

// Answer.AI's fsdp_qlora setting (Llama-2-7B LoRA, FSDP over 2 GPUs, full checkpointing), one
// sequence of 2,048: the loss phase is the peak under both chains.
TrainingSpec FsdpLora(int64_t micro_batch) {
  TrainingSpec t;
  t.framework = Framework::kFsdp;
  t.precision = Precision::kBf16Pure;
  t.recompute = Recompute::kFull;
  t.finetune = FineTune::kLora;
  t.lora.rank = 64;
  t.lora.adapter_bytes = 2;  // bf16 adapters, as the rows run them (--lora-dtype bf16)
  t.micro_batch = micro_batch;
  t.seq_len = 2048;
  return t;
}

ParallelPlan FsdpOverTwo() {
  ParallelPlan p;
  p.dp = 2;
  p.zero = 3;
  return p;
}

TEST(StepEvents, SlicedChainChangesTheLossPhaseAsDerivedByHand) {
  const ModelSpec m = Zoo("llama-2-7b");
  const ParallelPlan p = FsdpOverTwo();
  TrainingSpec padded = FsdpLora(1);
  TrainingSpec sliced = padded;
  sliced.hf_loss = HfLoss::kModelUpcastSliced;
  const MemoryEstimate a = Predict(m, padded, p), b = Predict(m, sliced, p);
  ASSERT_EQ(a.stages.size(), 1u);
  ASSERT_EQ(b.stages.size(), 1u);
  ASSERT_STREQ(a.stages[0].peak_phase, "loss");
  ASSERT_STREQ(b.stages[0].peak_phase, "loss");
  // Padded: 16-bit logits kept, fp32 log-softmax and two fp32 gradients, all s x V: 14 bytes an
  // element. Sliced (before 4.46): fp32 logits kept (4 s V) and the other three one position
  // short (12 (s - 1) V). The difference is V (2 s - 12) = 32,000 x 4,084.
  EXPECT_EQ(a.stages[0].breakdown.logits, 14 * 2048 * 32000);
  EXPECT_EQ(b.stages[0].breakdown.logits - a.stages[0].breakdown.logits, 32000 * 4084);
  // Only the sliced chain is replayed; its reserve is at least the peak and the replay's excess.
  EXPECT_EQ(a.stages[0].step_excess_bytes, 0);
  EXPECT_GE(b.stages[0].peak_reserved_bytes,
            b.stages[0].peak_bytes + b.stages[0].step_excess_bytes);
}

TEST(StepEvents, TheDevicesMemoryCapsTheReplayedReserve) {
  // Four sequences of 1,024 tokens, every activation kept: the shorter blocks leave more than
  // 1 MiB when the full-size gradient is cut from them, so the step reserves above its peak; on
  // a GPU whose memory the uncapped reading passes, the allocator releases its free segments
  // and the reading stays within it. (With whole-layer recomputation the layers' forward
  // intermediates split every segment, none is free as a whole at the peak, and a GPU below
  // the uncapped reading runs out of memory: the reading stands, as below. At 512 tokens the
  // layers' own tensors, MLP-wide and score-sized, leave no segment free as a whole either.)
  const ModelSpec m = Zoo("llama-2-7b");
  const ParallelPlan p = FsdpOverTwo();
  TrainingSpec t = FsdpLora(4);
  t.recompute = Recompute::kNone;
  t.seq_len = 1024;
  t.hf_loss = HfLoss::kModelUpcastSliced;
  const MemoryEstimate free = Predict(m, t, p);
  ASSERT_GT(free.stages[0].step_excess_bytes, 0);
  t.device_memory_bytes = free.stages[0].device_bytes - free.stages[0].step_excess_bytes / 2;
  const MemoryEstimate capped = Predict(m, t, p);
  EXPECT_LE(capped.stages[0].device_bytes, t.device_memory_bytes);
  EXPECT_LT(capped.stages[0].peak_reserved_bytes, free.stages[0].peak_reserved_bytes);
  EXPECT_GE(capped.stages[0].peak_reserved_bytes, capped.stages[0].peak_bytes);
  // Memory below the allocated peak: the replay cannot be served and the reading stands.
  t.device_memory_bytes = free.stages[0].peak_bytes / 2;
  EXPECT_EQ(Predict(m, t, p).stages[0].device_bytes, free.stages[0].device_bytes);
}

TEST(StepEvents, TheLossHoldsItsFp32CopyBesideTheLogSoftmax) {
  // Padded chain, 16-bit logits: `logits.float()` makes a 4-byte copy of all b x s x V
  // elements, alive while log_softmax writes its output; in the model's dtype there is none.
  const ModelSpec m = Zoo("llama-2-7b");
  TrainingSpec t = FsdpLora(2);
  t.seq_len = 512;
  const OutputActivations upcast = OutputActivationBytes(m, t, ParallelPlan{});
  EXPECT_EQ(upcast.loss_forward_transient, int64_t{4} * 2 * 512 * 32000);
  EXPECT_EQ(upcast.loss_saved, int64_t{4} * 2 * 512 * 32000);
  t.loss_fp32 = false;
  EXPECT_EQ(OutputActivationBytes(m, t, ParallelPlan{}).loss_forward_transient, 0);
  // Sliced before 4.46: the contiguous slice (one position short) instead; the model's fp32
  // logits are the kept ones.
  t.loss_fp32 = true;
  t.hf_loss = HfLoss::kModelUpcastSliced;
  const OutputActivations sliced = OutputActivationBytes(m, t, ParallelPlan{});
  EXPECT_EQ(sliced.loss_forward_transient, int64_t{4} * 2 * 511 * 32000);
  EXPECT_EQ(sliced.logits_held, int64_t{4} * 2 * 512 * 32000);
  // 4.46-4.48: the loss's own fp32 copy of the 16-bit logits as well.
  t.hf_loss = HfLoss::kLossUpcastSliced;
  EXPECT_EQ(OutputActivationBytes(m, t, ParallelPlan{}).loss_forward_transient,
            int64_t{4} * 2 * 511 * 32000 + int64_t{4} * 2 * 512 * 32000);
}

TEST(StepEvents, TheChainIsRefusedOutsideHfCausalModels) {
  const ModelSpec m = Zoo("llama-2-7b");
  TrainingSpec t = FsdpLora(1);
  t.hf_loss = HfLoss::kLossUpcastSliced;
  t.framework = Framework::kMegatron;
  t.finetune = FineTune::kFull;
  t.precision = Precision::kBf16;
  auto r = PredictMemory(m, t, ParallelPlan{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().field(), "transformers");
}

// Each step's tensors at its own size: 12 MiB the MLP keeps as 8 MiB tensors (its width) and
// 18 MiB the attention keeps as stream-sized ones (10 MiB), allocated in forward order (the
// attention's first) and freed by the backward step that was keeping them.
TEST(StepEvents, EachStepKeepsTensorsOfItsOwnSize) {
  LayerActivations a;
  a.saved = 30 * kMiB;
  a.backward[0] = {8 * kMiB, 12 * kMiB, BackwardStep::Params::kMlp, 0.0, 8 * kMiB};
  a.backward[1] = {0, 18 * kMiB, BackwardStep::Params::kNone, 0.0, 0};
  StepShape shape;
  shape.stream = 10 * kMiB;
  shape.layers.push_back({&a, {}});
  const std::vector<StepEvent> ev = BuildStepEvents(shape);
  const int64_t M = kMiB;
  const std::vector<std::pair<int64_t, int64_t>> want = {
      {10 * M, -1}, {8 * M, -1},  // forward: the attention's 18 MiB
      {8 * M, -1}, {4 * M, -1},   // the MLP's 12 MiB
      {8 * M, -1}, {0, 4},        // the MLP's backward: one 8 MiB buffer
      {0, 2}, {0, 3},             // and what it kept
      {0, 0}, {0, 1}};            // the attention's
  ASSERT_EQ(ev.size(), want.size());
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i].bytes, want[i].first) << "event " << i;
    EXPECT_EQ(ev[i].free_of, want[i].second) << "event " << i;
  }
}

// A Llama-style layer's gradients by backward step, worked by hand: hidden 4,096, 32 heads, 8 of
// them for k and v (q 4,096 x 4,096; k and v 1,024 x 4,096 each), a gated MLP of width 11,008,
// fp32 gradients (4 bytes a parameter).
TEST(StepEvents, ALayersGradientTensorsByBackwardStep) {
  LayerActivations a;
  a.backward[0] = {0, 0, BackwardStep::Params::kMlp, 0.0};
  a.backward[1] = {0, 0, BackwardStep::Params::kNone, 0.0};
  a.backward[2] = {0, 0, BackwardStep::Params::kAttnQkv, 0.0};
  a.backward[3] = {0, 0, BackwardStep::Params::kNorm, 0.0};
  LayerParamSplit p;
  p.mlp = 3 * 4096 * 11008;
  p.attn_qkv = 4096 * 4096 + 2 * 1024 * 4096;
  p.attn_out = 4096 * 4096;
  p.norm = 4096;
  p.mlp_matrices = 3;
  p.q_share = 32.0 / (32 + 2 * 8);
  const BackwardGrads g = LayerStepGrads(a, p, 4.0);
  const std::vector<int64_t> mlp(3, int64_t{4096} * 11008 * 4);
  EXPECT_EQ(g[0], mlp);
  EXPECT_TRUE(g[1].empty());
  const std::vector<int64_t> qkv = {int64_t{4096} * 4096 * 4, 1024 * 4096 * 4, 1024 * 4096 * 4};
  EXPECT_EQ(g[2], qkv);
  EXPECT_EQ(g[3], std::vector<int64_t>{4096 * 4});
  // Gradients that persist between steps (0 bytes a parameter) are not step events.
  for (const auto& step : LayerStepGrads(a, p, 0.0)) EXPECT_TRUE(step.empty());
  // Adam: a temporary a gradient in the parameters' order, the embeddings' (200) first, the
  // layers', the head's (100) last; foreach Adam allocates them at once, single-tensor Adam one
  // parameter at a time; SGD none.
  StepShape shape;
  shape.layers.push_back({&a, g});
  AddOutsideGrads(shape, 100, 200, AdamTemps::kForeach);
  EXPECT_EQ(shape.head_grads, std::vector<int64_t>{100});
  EXPECT_EQ(shape.first_grads, std::vector<int64_t>{200});
  std::vector<int64_t> temp = {200};
  temp.insert(temp.end(), mlp.begin(), mlp.end());
  temp.insert(temp.end(), qkv.begin(), qkv.end());
  temp.push_back(4096 * 4);
  temp.push_back(100);
  EXPECT_EQ(shape.optimizer_temp, temp);
  EXPECT_FALSE(shape.optimizer_one_at_a_time);
  StepShape single;
  single.layers.push_back({&a, g});
  AddOutsideGrads(single, 100, 200, AdamTemps::kOneAtATime);
  EXPECT_EQ(single.optimizer_temp, temp);
  EXPECT_TRUE(single.optimizer_one_at_a_time);
  StepShape plain;
  AddOutsideGrads(plain, 100, 0, AdamTemps::kNone);
  EXPECT_EQ(plain.head_grads, std::vector<int64_t>{100});
  EXPECT_TRUE(plain.first_grads.empty());
  EXPECT_TRUE(plain.optimizer_temp.empty());
}

}  // namespace
}  // namespace frenzy

namespace frenzy {
namespace {

// One layer worked out by hand (stream tensors of 10 MiB): its checkpointed forward brings
// three 10 MiB intermediates, two alive at a time, around the 10 MiB input the next checkpoint
// keeps; backward recomputes them, the first backward step holds a 10 MiB buffer beside the
// 4 MiB gradient it makes and frees two intermediates, the second frees the third; the output
// layer's 6 MiB gradient comes first, foreach Adam's temporaries (4 and 6 MiB) last, and the
// gradients go with zero_grad.
TEST(StepEvents, ALayersForwardBackwardAndGradientsInTheirOrder) {
  LayerActivations a;
  a.saved = 10 * kMiB;
  a.recomputed = 30 * kMiB;
  a.backward[0] = {10 * kMiB, 20 * kMiB, BackwardStep::Params::kMlp, 0.0};
  a.backward[1] = {0, 10 * kMiB, BackwardStep::Params::kNone, 0.0};
  StepShape shape;
  shape.stream = 10 * kMiB;
  shape.layers.push_back({&a, {}});
  shape.layers[0].grads[0] = {4 * kMiB};
  shape.head_grads = {6 * kMiB};
  shape.optimizer_temp = {4 * kMiB, 6 * kMiB};
  const std::vector<StepEvent> ev = BuildStepEvents(shape);
  const int64_t M = kMiB;
  // (bytes, free_of): allocations carry their bytes, frees the index they free.
  const std::vector<std::pair<int64_t, int64_t>> want = {
      {10 * M, -1}, {10 * M, -1}, {10 * M, -1}, {0, 0},  // forward: the first goes
      {10 * M, -1}, {0, 1}, {0, 2},                      // the kept input, then the rest
      {6 * M, -1},                                       // the output layer's gradient
      {10 * M, -1}, {10 * M, -1}, {10 * M, -1},          // recomputation
      {10 * M, -1}, {4 * M, -1}, {0, 11}, {0, 9}, {0, 10},  // step 1: buffer, gradient, and
      {0, 8},                                             // its own tensors; then step 2's
      {0, 4},                                            // the kept input
      {4 * M, -1}, {6 * M, -1}, {0, 18}, {0, 19},        // the optimizer's temporaries
      {0, 7}, {0, 12}};                                  // zero_grad
  ASSERT_EQ(ev.size(), want.size());
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i].bytes, want[i].first) << "event " << i;
    EXPECT_EQ(ev[i].free_of, want[i].second) << "event " << i;
  }
  // Single-tensor Adam: two temporaries a parameter, one parameter at a time, after the same
  // 18 events.
  shape.optimizer_one_at_a_time = true;
  const std::vector<StepEvent> single = BuildStepEvents(shape);
  const std::vector<std::pair<int64_t, int64_t>> tail = {
      {4 * M, -1}, {4 * M, -1}, {0, 18}, {0, 19},
      {6 * M, -1}, {6 * M, -1}, {0, 22}, {0, 23},
      {0, 7}, {0, 12}};
  ASSERT_EQ(single.size(), 18 + tail.size());
  for (size_t i = 0; i < tail.size(); ++i) {
    EXPECT_EQ(single[18 + i].bytes, tail[i].first) << "event " << 18 + i;
    EXPECT_EQ(single[18 + i].free_of, tail[i].second) << "event " << 18 + i;
  }
}

}  // namespace
}  // namespace frenzy
