// The simulated world's speed truth: drawn per (model, GPU type) or per (job, GPU type) from the
// throughput model's measured errors, or a normal error, or none; on its own random stream.
#include "sim/world.h"

#include <gtest/gtest.h>

#include <cmath>

namespace frenzy {
namespace {

TEST(World, NoPerfErrorMeansPredictedSpeedEverywhere) {
  WorldOptions o;
  o.perf_error_pct = 0;
  World w(o);
  JobTruth t = w.DrawJob(3);
  EXPECT_TRUE(t.speed.empty());
  EXPECT_DOUBLE_EQ(t.Speed(0), 1.0);
  EXPECT_DOUBLE_EQ(t.Speed(2), 1.0);
}

// By default every (job, type) gets predicted / measured of one held-out published run: within
// the measured range (0.57x to 4.3x: errors from +74.6% to -76.6%), and not all alike.
TEST(World, MeasuredPerfErrorsByDefault) {
  World w(WorldOptions{});
  double lo = 10, hi = 0;
  for (int i = 0; i < 200; ++i) {
    JobTruth t = w.DrawJob(3);
    ASSERT_EQ(t.speed.size(), 3u);
    for (double s : t.speed) {
      lo = std::min(lo, s);
      hi = std::max(hi, s);
    }
  }
  EXPECT_GE(lo, 1 / 1.747);
  EXPECT_LE(hi, 1 / (1 - 0.767));
  EXPECT_LT(lo, 0.9);
  EXPECT_GT(hi, 1.1);
}

// The speed draws do not move the memory draws: the same seed gives the same memory truths with
// the speed truth on or off.
TEST(World, SpeedTruthLeavesTheMemoryDrawsAlone) {
  WorldOptions on, off;
  off.perf_error_pct = 0;
  on.perf_error_pct = 20;
  World a(on), b(off);
  for (int i = 0; i < 50; ++i) {
    JobTruth x = a.DrawJob(2), y = b.DrawJob(2);
    EXPECT_DOUBLE_EQ(x.factor, y.factor);
    ASSERT_EQ(x.speed.size(), 2u);
    for (double s : x.speed) EXPECT_TRUE(s >= 0.2 && s <= 5.0) << s;
  }
}

// A wide normal error: an error under -80% would be a negative or tiny speed; it folds to the
// fast bound (5x, an error of -80%), and a large positive one to the slow bound (0.2x).
TEST(World, WideNormalErrorsStayWithinBoundsOnTheRightSide) {
  WorldOptions o;
  o.perf_error_pct = 90;
  World w(o);
  double lo = 10, hi = 0;
  for (int i = 0; i < 300; ++i) {
    for (double s : w.DrawJob(2).speed) {
      lo = std::min(lo, s);
      hi = std::max(hi, s);
    }
  }
  EXPECT_DOUBLE_EQ(hi, 5.0);  // P(error < -0.8) is about 19% per draw at a 90% spread
  EXPECT_GE(lo, 0.2);
  EXPECT_LT(lo, 0.6);         // errors over +67% (P about 23%) run under 0.6x
}

// Per model (the default): every job of a model gets the speed truth its model's first job drew
// (the same kernels on the same GPU), another model its own; the memory truth stays per job.
// Per job: two jobs of one model draw apart.
TEST(World, SpeedTruthIsTheModelsUnlessDrawnPerJob) {
  World w(WorldOptions{});
  JobTruth a = w.DrawJob(3, "llama-2-7b");
  JobTruth b = w.DrawJob(3, "gpt2");
  JobTruth c = w.DrawJob(3, "llama-2-7b");
  ASSERT_EQ(a.speed.size(), 3u);
  EXPECT_EQ(c.speed, a.speed);
  EXPECT_NE(b.speed, a.speed);
  EXPECT_NE(c.factor, a.factor);
  WorldOptions per_job;
  per_job.perf_error_per_model = false;
  World v(per_job);
  JobTruth x = v.DrawJob(3, "llama-2-7b");
  JobTruth y = v.DrawJob(3, "llama-2-7b");
  EXPECT_EQ(x.speed, a.speed);  // the first draw of a stream is the same either way
  EXPECT_NE(y.speed, x.speed);
}

}  // namespace
}  // namespace frenzy
