// Batches of varying length (memory/variable_lengths.h): the epoch replay against cases worked
// out by hand from the caching allocator's rules (memory/caching_allocator.h), the length
// draws' stated properties, and MARP's readings with and without them.
#include "memory/variable_lengths.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "memory/memory_model.h"
#include "zoo_model.h"

namespace frenzy {
namespace {

using test::Predict;
using test::Zoo;

constexpr int64_t kMiB = int64_t{1} << 20;

// One tensor of 64 MiB at 2,048 tokens, in proportion at other lengths. Every block is at least
// 10 MiB, so its segment is its size rounded to 2 MiB: 32 MiB at 1,024, 48 MiB at 1,536.
std::vector<StepEvent> OneTensor(int64_t length) {
  return {{64 * kMiB * length / 2048, -1}, {0, 0}};
}

TEST(VariableLengths, ALongerBatchReservesAnewAndAShorterOneReusesTheCache) {
  EXPECT_EQ(ReplayEpoch(OneTensor, {2048}), 64 * kMiB);
  EXPECT_EQ(ReplayEpoch(OneTensor, {2048, 2048, 2048}), 64 * kMiB);
  // The 32 MiB block cannot hold the 64 MiB tensor: both segments stay.
  EXPECT_EQ(ReplayEpoch(OneTensor, {1024, 2048}), 96 * kMiB);
  // The 32 MiB tensor splits the cached 64 MiB block (32 MiB left over 1 MiB) and merges back.
  EXPECT_EQ(ReplayEpoch(OneTensor, {2048, 1024}), 64 * kMiB);
  // Each record length reserves its own segment: 32 + 48 + 64.
  EXPECT_EQ(ReplayEpoch(OneTensor, {1024, 1536, 2048, 1536, 1024}), 144 * kMiB);
}

// Two tensors live together: A of 64 MiB and B of 32 MiB at 2,048 tokens, freed B first.
std::vector<StepEvent> TwoTensors(int64_t length) {
  return {{64 * kMiB * length / 2048, -1}, {32 * kMiB * length / 2048, -1}, {0, 1}, {0, 0}};
}

TEST(VariableLengths, SmallerTensorsOfALaterBatchFitTheLargerCachedBlocks) {
  EXPECT_EQ(ReplayEpoch(TwoTensors, {2048}), 96 * kMiB);
  // At 1,024: A' (32 MiB) takes the best fit, B's 32 MiB block; B' (16 MiB) splits A's 64 MiB
  // block. Nothing new.
  EXPECT_EQ(ReplayEpoch(TwoTensors, {2048, 1024}), 96 * kMiB);
  // The other way: 32 + 16 MiB first; at 2,048 A needs a new 64 MiB segment, B (32 MiB) fits
  // the cached 32 MiB block. 48 + 64.
  EXPECT_EQ(ReplayEpoch(TwoTensors, {1024, 2048}), 112 * kMiB);
}

TEST(VariableLengths, BatchesArePaddedToTheirLongestSample) {
  EXPECT_EQ(BatchLengths({3, 1, 4, 1, 5}, 2), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(BatchLengths({3, 1, 4}, 1), (std::vector<int64_t>{3, 1, 4}));
}

TEST(VariableLengths, DrawsFollowTheStatedMeanAndSpread) {
  LengthSpread s;
  s.mean = 3234.4;
  s.sd = 2547.5;
  s.min = 91;
  s.samples = 100000;
  const std::vector<int64_t> a = DrawLengths(s, int64_t{1} << 40, 7);
  ASSERT_EQ(a.size(), 100000u);
  EXPECT_EQ(a, DrawLengths(s, int64_t{1} << 40, 7));  // the same order for a seed
  EXPECT_NE(a, DrawLengths(s, int64_t{1} << 40, 8));
  const double mean = std::accumulate(a.begin(), a.end(), 0.0) / static_cast<double>(a.size());
  double var = 0;
  for (int64_t x : a) var += (static_cast<double>(x) - mean) * (static_cast<double>(x) - mean);
  const double sd = std::sqrt(var / static_cast<double>(a.size()));
  EXPECT_NEAR(mean, 3234.4, 0.01 * 3234.4);
  EXPECT_NEAR(sd, 2547.5, 0.03 * 2547.5);
  EXPECT_GE(*std::min_element(a.begin(), a.end()), 91);
  // Longer samples dropped, or cut to the longest length.
  s.samples = 5000;
  s.drop_long = true;
  const std::vector<int64_t> dropped = DrawLengths(s, 2048, 7);
  EXPECT_LT(dropped.size(), 5000u);
  EXPECT_LE(*std::max_element(dropped.begin(), dropped.end()), 2048);
  s.drop_long = false;
  const std::vector<int64_t> cut = DrawLengths(s, 2048, 7);
  EXPECT_EQ(cut.size(), 5000u);
  EXPECT_EQ(*std::max_element(cut.begin(), cut.end()), 2048);
}

TEST(VariableLengths, EveryBatchAtTheLongestLengthAddsNothing) {
  LengthSpread s;
  s.mean = 1e6;  // every sample far longer than 2,048: cut to it
  s.sd = 10;
  const VariableLengthReserve r = ReserveOverOrders(OneTensor, s, 2048, 1);
  EXPECT_EQ(r.batches, 1000);
  EXPECT_EQ(r.replayed, 1000);
  EXPECT_EQ(r.orders, kLengthOrders);
  EXPECT_EQ(r.high, 0);
  s.drop_long = true;  // ... or all dropped: no epoch at all
  EXPECT_EQ(ReserveOverOrders(OneTensor, s, 2048, 1).batches, 0);
}

TEST(VariableLengths, ALargeReplayFallsBackToFewerOrdersThenToTheFirstBatches) {
  LengthSpread s;
  s.mean = 1000;
  s.sd = 500;
  s.samples = 1000;
  // OneTensor: 2 events a batch, 1,000 batches. 30,000 events: 15 orders; 10,000: 5 orders;
  // 3,000: the fewest (3), each over its first 3,000 / (2 x 3) = 500 batches.
  VariableLengthReserve r = ReserveOverOrders(OneTensor, s, 2048, 1, 30000);
  EXPECT_EQ(r.orders, 15);
  EXPECT_EQ(r.replayed, r.batches);
  r = ReserveOverOrders(OneTensor, s, 2048, 1, 10000);
  EXPECT_EQ(r.orders, 5);
  EXPECT_EQ(r.replayed, r.batches);
  r = ReserveOverOrders(OneTensor, s, 2048, 1, 3000);
  EXPECT_EQ(r.orders, kMinLengthOrders);
  EXPECT_EQ(r.replayed, 500);
  EXPECT_EQ(r.batches, 1000);
}

TEST(VariableLengths, ALengthFileIsReadLineByLineAndNamesItsBadLine) {
  auto ok = ParseLengthFile("# lengths of my dataset\n100\n\n  200 \r\n", "f.txt");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, (std::vector<int64_t>{100, 200}));
  auto bad = ParseLengthFile("100\nabc\n", "f.txt");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().where(), "f.txt:2");
  auto zero = ParseLengthFile("5\n0\n", "f.txt");
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().where(), "f.txt:2");
  EXPECT_FALSE(ParseLengthFile("# nothing\n", "f.txt").ok());
  EXPECT_FALSE(ParseLengthFile("12 13\n", "f.txt").ok());
}

TEST(VariableLengths, ADatasetsOwnOrderIsReplayedAsItComes) {
  LengthSpread s;
  s.order = {1024, 2048};
  // One order: the 32 MiB segment of the first batch stays beside the 64 MiB one.
  VariableLengthReserve r = ReserveOverOrders(OneTensor, s, 2048, 1);
  EXPECT_EQ(r.orders, 1);
  EXPECT_EQ(r.median, 32 * kMiB);
  EXPECT_EQ(r.low, r.median);
  EXPECT_EQ(r.high, r.median);
  s.order = {2048, 1024};
  EXPECT_EQ(ReserveOverOrders(OneTensor, s, 2048, 1).median, 0);
  // Longer than 2,048: cut to it (the order {1024, 2048} again), or dropped ({1024}: no
  // 64 MiB segment at all, nothing above the fixed-length epoch).
  s.order = {1024, 4096};
  EXPECT_EQ(ReserveOverOrders(OneTensor, s, 2048, 1).median, 32 * kMiB);
  s.drop_long = true;
  r = ReserveOverOrders(OneTensor, s, 2048, 1);
  EXPECT_EQ(r.batches, 1);
  EXPECT_EQ(r.median, 0);
}

TrainingSpec QwenLikeLora() {
  TrainingSpec t;
  t.framework = Framework::kHf;
  t.seq_len = 2048;
  t.recompute = Recompute::kFull;
  t.finetune = FineTune::kLora;
  t.drop_logits = true;
  return t;
}

TEST(VariableLengths, AReadingNotAFit) {
  const ModelSpec m = Zoo("llama-3.2-1b");
  TrainingSpec t = QwenLikeLora();
  const MemoryEstimate fixed = Predict(m, t, ParallelPlan{});
  t.lengths.mean = 3234.4;
  t.lengths.sd = 2547.5;
  t.lengths.min = 91;
  t.lengths.samples = 2000;
  t.lengths.drop_long = true;
  const MemoryEstimate varied = Predict(m, t, ParallelPlan{});
  // The fixed-length figures, which fits are judged on, do not move.
  EXPECT_EQ(varied.peak_bytes, fixed.peak_bytes);
  EXPECT_EQ(varied.peak_reserved_bytes, fixed.peak_reserved_bytes);
  EXPECT_EQ(varied.device_bytes, fixed.device_bytes);
  EXPECT_EQ(fixed.length_reserved_bytes, 0);
  // The epoch's readings rise by the replay's median, at least by its lowest order.
  const StageEstimate& s = varied.stages.at(0);
  EXPECT_GT(s.length_reserve_low, 0);
  EXPECT_LE(s.length_reserve_low, s.length_reserve_bytes);
  EXPECT_LE(s.length_reserve_bytes, s.length_reserve_high);
  EXPECT_EQ(varied.length_reserved_bytes, fixed.peak_reserved_bytes + s.length_reserve_bytes);
  EXPECT_EQ(varied.length_device_bytes, fixed.device_bytes + s.length_reserve_bytes);
}

TEST(VariableLengths, TheReadingsStopAtTheGpusMemory) {
  MemoryEstimate e;
  e.peak_reserved_bytes = 30 * kMiB;
  e.device_bytes = 31 * kMiB;
  e.length_reserved_bytes = 70 * kMiB;
  e.length_device_bytes = 71 * kMiB;
  CapLengthReadings(e, 80 * kMiB);  // under the memory: unchanged
  EXPECT_EQ(e.length_device_bytes, 71 * kMiB);
  CapLengthReadings(e, 60 * kMiB);  // 11 MiB over: both readings lose 11 MiB
  EXPECT_EQ(e.length_device_bytes, 60 * kMiB);
  EXPECT_EQ(e.length_reserved_bytes, 59 * kMiB);
  CapLengthReadings(e, 20 * kMiB);  // never below the fixed-length reserve
  EXPECT_EQ(e.length_reserved_bytes, 30 * kMiB);
}

TEST(VariableLengths, BadLengthsAreRefusedByName) {
  const ModelSpec m = Zoo("llama-3.2-1b");
  TrainingSpec t = QwenLikeLora();
  t.lengths.mean = 1000;
  auto r = PredictMemory(m, t, ParallelPlan{});  // no spread
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().field(), "length_sd");
  t.lengths.sd = 100;
  t.lengths.samples = 0;
  r = PredictMemory(m, t, ParallelPlan{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().field(), "length_samples");
  t.lengths.samples = 100;
  t.device = DeviceKind::kCpu;
  r = PredictMemory(m, t, ParallelPlan{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().field(), "length_mean");
  t.device = DeviceKind::kCuda;
  t.lengths.order = {100, 200};  // the file's lengths and a mean: one or the other
  r = PredictMemory(m, t, ParallelPlan{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().field(), "length_file");
}

}  // namespace
}  // namespace frenzy
