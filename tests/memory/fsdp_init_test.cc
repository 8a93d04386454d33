// The caching-allocator model and FSDP1's initialisation from host memory, against cases
// derived by hand from the allocator's rules (memory/caching_allocator.h), an independent
// implementation (tools/fsdp_init_replay.py) and a published reading.
#include "memory/fsdp_init.h"

#include <gtest/gtest.h>

#include "memory/caching_allocator.h"
#include "memory/memory_model.h"
#include "zoo_model.h"

namespace frenzy {
namespace {

using test::Predict;
using test::Zoo;

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(CachingAllocator, RoundsRequestsAndReservesSegmentsBySize) {
  CachingAllocatorModel a;
  a.Malloc(100);  // 512 bytes out of a 2 MiB small-pool segment
  EXPECT_EQ(a.allocated(), 512);
  EXPECT_EQ(a.reserved(), 2 * kMiB);
  a.Malloc(3 * kMiB);  // a large request under 10 MiB: a 20 MiB segment, 17 MiB split off
  EXPECT_EQ(a.reserved(), 22 * kMiB);
  a.Malloc(3 * kMiB);  // served from the 17 MiB left
  EXPECT_EQ(a.reserved(), 22 * kMiB);
  EXPECT_EQ(a.allocated(), 512 + 6 * kMiB);
  // 11 MiB + 1 byte rounds to 11 MiB + 512 and fits the 14 MiB still free: split again.
  a.Malloc(11 * kMiB + 1);
  EXPECT_EQ(a.reserved(), 22 * kMiB);
  EXPECT_EQ(a.allocated(), 512 + 17 * kMiB + 512);
  EXPECT_EQ(a.CachedFree(0), (2 * kMiB - 512) + (3 * kMiB - 512));
  // With nothing cached its segment is rounded to 12 MiB; what would be left (1 MiB - 512) is
  // not more than 1 MiB, so the whole 12 MiB block is handed out and counted.
  CachingAllocatorModel b;
  b.Malloc(11 * kMiB + 1);
  EXPECT_EQ(b.reserved(), 12 * kMiB);
  EXPECT_EQ(b.allocated(), 12 * kMiB);
  EXPECT_EQ(b.CachedFree(0), 0);
}

TEST(CachingAllocator, BestFitSplitsAndFreedNeighboursMerge) {
  CachingAllocatorModel a;
  auto x = a.Malloc(12 * kMiB);
  auto y = a.Malloc(24 * kMiB);
  a.Free(x);
  a.Free(y);
  a.Malloc(12 * kMiB);  // the 12 MiB block fits exactly: the 24 MiB one stays whole
  EXPECT_EQ(a.reserved(), 36 * kMiB);
  EXPECT_EQ(a.LargestFree(0), 24 * kMiB);
  auto c = a.Malloc(4 * kMiB);  // split from the 24 MiB block: 4 + 20
  auto d = a.Malloc(4 * kMiB);  // from the 20 left: 4 + 16
  EXPECT_EQ(a.reserved(), 36 * kMiB);
  EXPECT_EQ(a.LargestFree(0), 16 * kMiB);
  a.Free(c);
  a.Free(d);  // merges with c before it and the 16 MiB after it
  EXPECT_EQ(a.LargestFree(0), 24 * kMiB);
  EXPECT_EQ(a.CachedFree(0), 24 * kMiB);
  a.Free(d);  // a second free is ignored
  EXPECT_EQ(a.allocated(), 12 * kMiB);
}

TEST(CachingAllocator, AStreamReusesOnlyItsOwnBlocks) {
  CachingAllocatorModel a;
  a.Free(a.Malloc(12 * kMiB, /*stream=*/1));
  a.Malloc(12 * kMiB, /*stream=*/0);
  EXPECT_EQ(a.reserved(), 24 * kMiB);
  EXPECT_EQ(a.CachedFree(1), 12 * kMiB);
  EXPECT_EQ(a.CachedFree(0), 0);
}

// Two units of two 12 MiB tensors on one of two ranks. Unit 1: the tensors take new 12 MiB
// segments A and B, the flat copy a 24 MiB segment C, the shard (12 MiB, allocated while all
// three live) a segment D; then C, A and B are freed: 60 MiB reserved. Unit 2 reuses A, B and C
// and needs a fifth segment for its shard: 72 MiB reserved, 24 live, 48 free.
TEST(FsdpInit, EachShardLandsBesideTheCopiesItWasClonedFrom) {
  const std::vector<FsdpInitUnit> units = {{{12 * kMiB, 12 * kMiB}, {}},
                                           {{12 * kMiB, 12 * kMiB}, {}}};
  const FsdpInitReplay r = ReplayFsdpInit(units, 2, /*broadcast=*/false, false);
  EXPECT_EQ(r.reserved, 72 * kMiB);
  EXPECT_EQ(r.live, 24 * kMiB);
  EXPECT_EQ(r.cached_free, 48 * kMiB);
  // Their shards back in host memory (CPUOffload): the same reserve, nothing live.
  const FsdpInitReplay off = ReplayFsdpInit(units, 2, false, /*offload_params=*/true);
  EXPECT_EQ(off.live, 0);
  EXPECT_EQ(off.cached_free, off.reserved);
}

// One unit of three 200 MiB tensors on one of two ranks. Without the broadcast: 600 MiB moved,
// a 600 MiB flat copy and a 300 MiB shard in new segments, 1,500 MiB. With it, the first two
// tensors make a 400 MiB bucket (it closes at >= 250 MiB) flattened into a copy, the third a
// bucket of its own (a view); the copy's segment, freed, then holds the shard (300 of its 400
// MiB): 1,600 MiB reserved, 300 live.
TEST(FsdpInit, TheBroadcastFlattensBucketsOfSeveralTensors) {
  const std::vector<FsdpInitUnit> units = {{{200 * kMiB, 200 * kMiB, 200 * kMiB}, {}}};
  const FsdpInitReplay plain = ReplayFsdpInit(units, 2, false, false);
  EXPECT_EQ(plain.reserved, 1500 * kMiB);
  EXPECT_EQ(plain.live, 300 * kMiB);
  const FsdpInitReplay sync = ReplayFsdpInit(units, 2, /*broadcast=*/true, false);
  EXPECT_EQ(sync.reserved, 1600 * kMiB);
  EXPECT_EQ(sync.live, 300 * kMiB);
  EXPECT_EQ(sync.cached_free, 1300 * kMiB);
}

TrainingSpec AnswerAiQlora() {  // Answer.AI fsdp_qlora's Llama-2-7B benchmark (held-out ho022)
  TrainingSpec t;
  t.framework = Framework::kFsdp;
  t.precision = Precision::kBf16Pure;
  t.finetune = FineTune::kQlora;
  t.lora.rank = 64;
  t.lora.targets = kLoraQ | kLoraK | kLoraV | kLoraGate | kLoraUp | kLoraDown;
  t.lora.adapter_bytes = 2;
  t.lora.upcast_rest = false;
  t.seq_len = 512;
  t.recompute = Recompute::kFull;
  t.fsdp_init = FsdpInit::kHostSync;
  return t;
}

// tools/fsdp_init_replay.py (Python, written apart from this code, units built from the HF
// config) prints 3,477,078,016 bytes reserved and 1,349,742,592 free after wrapping Llama-2-7B
// QLoRA (r 64 on six linears, NF4 in bf16 storage) on one of two ranks; the source reads "about
// 3.72GiB (see `reserved_after_model_wrap`)". The replay leaves out holders it does not know of
// (rotary buffers, the adapters' own buckets), so it may read less, not more.
TEST(FsdpInit, Llama2_7bQloraAsTheIndependentReplayAndUnderThePublishedReading) {
  const ModelSpec m = Zoo("llama-2-7b");
  ParallelPlan p;
  p.dp = 2;
  p.zero = 3;
  const FsdpInitReplay r = ReplayFsdpInit(FsdpInitUnits(m, AnswerAiQlora(), p), 2, true, false);
  EXPECT_EQ(r.reserved, 3'477'078'016);
  EXPECT_EQ(r.cached_free, 1'349'742'592);
  const double published = 3.72 * (int64_t{1} << 30);
  EXPECT_LE(static_cast<double>(r.reserved), published);
  EXPECT_GE(static_cast<double>(r.reserved), 0.85 * published);

  const MemoryEstimate with = Predict(m, AnswerAiQlora(), p);
  TrainingSpec t = AnswerAiQlora();
  t.fsdp_init = FsdpInit::kNone;
  const MemoryEstimate without = Predict(m, t, p);
  EXPECT_EQ(with.peak_bytes, without.peak_bytes);  // the allocated account is unchanged
  EXPECT_EQ(with.stages[0].init_reserved_bytes, r.reserved);
  EXPECT_GT(with.peak_reserved_bytes, r.reserved);
  EXPECT_EQ(with.device_bytes - without.device_bytes,
            with.peak_reserved_bytes - without.peak_reserved_bytes);
  // Source (`benchmarks_03_2024.md`): 4.98 GiB at the peak. Still under, but by less.
  const double measured = 4.98 * (int64_t{1} << 30);
  EXPECT_LT(static_cast<double>(without.peak_reserved_bytes), 0.75 * measured);
  EXPECT_GT(static_cast<double>(with.peak_reserved_bytes), 0.75 * measured);
}

// Sharded QLoRA's root unit holds the embeddings and the output layer unquantised: by hand for
// Llama-2-70B, 2 x 32,000 x 8,192 + 8,192 (final norm) = 524,296,192 weights in bf16,
// 1,048,592,384 bytes gathered through the step (the layers' NF4 average would give a fifth).
TEST(FsdpInit, ShardedQloraGathersItsRootIn16Bits) {
  const ModelSpec m = Zoo("llama-2-70b");
  TrainingSpec t;
  t.framework = Framework::kFsdp;
  t.finetune = FineTune::kQlora;
  t.lora.rank = 8;
  t.seq_len = 2048;
  t.recompute = Recompute::kFull;
  ParallelPlan p;
  p.dp = 2;
  p.zero = 3;
  const MemoryEstimate root = Predict(m, t, p);
  t.fsdp_wrap_embeddings = true;
  const MemoryEstimate wrapped = Predict(m, t, p);
  ASSERT_EQ(std::string(root.stages[0].peak_phase), std::string(wrapped.stages[0].peak_phase));
  EXPECT_EQ(root.stages[0].breakdown.temporary - wrapped.stages[0].breakdown.temporary,
            int64_t{1'048'592'384});
}

TEST(FsdpInit, IsRefusedOutsideFsdpOverDataParallelRanks) {
  const ModelSpec m = Zoo("llama-2-7b");
  TrainingSpec t = AnswerAiQlora();
  ParallelPlan p;
  p.dp = 2;
  p.zero = 3;
  p.tp = 2;
  auto r = PredictMemory(m, t, p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("fsdp_init"), std::string::npos) << r.status().ToString();
  p.tp = 1;
  t.framework = Framework::kDeepSpeed;
  EXPECT_FALSE(PredictMemory(m, t, p).ok());
  t.framework = Framework::kFsdp;
  p.zero = 0;
  EXPECT_FALSE(PredictMemory(m, t, p).ok());
}

}  // namespace
}  // namespace frenzy
