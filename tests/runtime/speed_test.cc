// The runtime's speed learner on hand-computed progress reports.
#include "runtime/speed.h"

#include <gtest/gtest.h>

namespace frenzy::runtime {
namespace {

// Run 1 on type 0, predicted 100 tokens/s: 0 tokens at t = 100 s, 6,000 at 200 s (60/s: 0.6 of
// the prediction), 12,000 at 300 s (0.6 again). Nothing is known from the first report alone.
TEST(SpeedLearner, LearnsObservedOverPredictedFromTwoReportsOfARun) {
  SpeedLearner l;
  EXPECT_FALSE(l.Report(7, 0, 1, 100, 0, 100).has_value());
  EXPECT_DOUBLE_EQ(l.Factor(7, 0), 1.0);  // not known yet
  EXPECT_TRUE(l.Factors(7, 3).empty());
  auto r = l.Report(7, 0, 1, 200, 6000, 100);
  ASSERT_TRUE(r.has_value());
  EXPECT_DOUBLE_EQ(*r, 0.6);
  EXPECT_DOUBLE_EQ(l.Factor(7, 0), 0.6);
  EXPECT_EQ(l.Factors(7, 3), (std::vector<double>{0.6, 0, 0}));
  EXPECT_DOUBLE_EQ(l.PriorFactor(7, 0), 0);  // the current run is the only one
  EXPECT_DOUBLE_EQ(l.Factor(7, 1), 1.0);     // never ran on type 1
  EXPECT_DOUBLE_EQ(l.Factor(8, 0), 1.0);     // another job
}

// A new run (number 2, after a restart) starts its own pair of reports: its first report gives
// nothing (the pause lies before it), and the earlier run becomes the prior. On a slow node it
// runs at 0.3 of the prediction: the learned factor stays at the best run (0.6) and the report
// against the prior says 0.5 (the straggler detector's input).
TEST(SpeedLearner, KeepsTheBestRunAndComparesARunWithTheEarlierOnes) {
  SpeedLearner l;
  l.Report(7, 0, 1, 100, 0, 100);
  l.Report(7, 0, 1, 200, 6000, 100);
  EXPECT_FALSE(l.Report(7, 0, 2, 1000, 6000, 100).has_value());
  EXPECT_DOUBLE_EQ(l.PriorFactor(7, 0), 0.6);
  auto r = l.Report(7, 0, 2, 1100, 9000, 100);  // 3,000 tokens in 100 s
  ASSERT_TRUE(r.has_value());
  EXPECT_DOUBLE_EQ(*r, 0.3);
  EXPECT_DOUBLE_EQ(*r / l.PriorFactor(7, 0), 0.5);
  EXPECT_DOUBLE_EQ(l.Factor(7, 0), 0.6);
  // Run 3 on type 1 at 2x its prediction of 50 tokens/s.
  l.Report(7, 1, 3, 2000, 9000, 50);
  l.Report(7, 1, 3, 2010, 10000, 50);
  EXPECT_EQ(l.Factors(7, 2), (std::vector<double>{0.6, 2.0}));
  l.Forget(7);
  EXPECT_DOUBLE_EQ(l.Factor(7, 0), 1.0);
}

// Across jobs: what jobs of one class (the model) showed on a type is what a job of the class
// that never ran there starts from. Job 7 ("a") runs type 0 at 0.6 of its prediction; job 8
// ("a") has not run: it gets 0.6 on type 0 and nothing on type 1; job 9 ("b") learns nothing
// from "a". Job 10 ("a") shows 0.8 on type 0: the class's factor is their mean, 0.7. Job 8's own
// run (0.5) then wins over the class's; a finished job's evidence stays with its class.
TEST(SpeedLearner, AJobStartsFromWhatItsClassShowedOnAType) {
  SpeedLearner l;
  l.Track(7, "a");
  l.Track(8, "a");
  l.Track(9, "b");
  l.Track(10, "a");
  EXPECT_TRUE(l.Factors(8, 2).empty());
  l.Report(7, 0, 1, 100, 0, 100);
  l.Report(7, 0, 1, 200, 6000, 100);  // 60 tokens/s of 100
  EXPECT_EQ(l.Factors(8, 2), (std::vector<double>{0.6, 0}));
  EXPECT_DOUBLE_EQ(l.Factor(8, 0), 0.6);
  EXPECT_DOUBLE_EQ(l.Factor(8, 1), 1.0);
  EXPECT_TRUE(l.Factors(9, 2).empty());
  EXPECT_DOUBLE_EQ(l.PriorFactor(8, 0), 0);  // the straggler check reads the job's own runs
  l.Report(10, 0, 1, 100, 0, 50);
  l.Report(10, 0, 1, 300, 8000, 50);  // 40 tokens/s of 50
  EXPECT_DOUBLE_EQ(l.Factor(8, 0), 0.7);
  l.Report(8, 0, 1, 100, 0, 100);
  l.Report(8, 0, 1, 200, 5000, 100);
  EXPECT_DOUBLE_EQ(l.Factor(8, 0), 0.5);
  l.Forget(7);
  l.Forget(8);
  l.Forget(10);
  l.Track(11, "a");
  EXPECT_NEAR(l.Factor(11, 0), (0.6 + 0.8 + 0.5) / 3, 1e-12);
}

// A later report of a run replaces that run's evidence in the class (its best so far), rather
// than adding a second sample of the same job.
TEST(SpeedLearner, AJobCountsOnceInItsClass) {
  SpeedLearner l;
  l.Track(1, "a");
  l.Track(2, "a");
  l.Report(1, 0, 1, 0, 0, 100);
  l.Report(1, 0, 1, 100, 5000, 100);   // 0.5
  l.Report(1, 0, 1, 200, 15000, 100);  // 0.75 since the run's first report
  EXPECT_DOUBLE_EQ(l.Factor(2, 0), 0.75);
}

// What a store keeps: job 1 ("a") showed 0.6 on type 0 and ended; job 2 ("a") shows 0.8 and
// runs on. A learner rebuilt from the settled evidence and job 2's own factors answers as the
// first: a new job of "a" starts from (0.6 + 0.8) / 2 = 0.7, and job 2's later report replaces
// its own sample rather than adding one.
TEST(SpeedLearner, WhatItLearnedSurvivesAStore) {
  SpeedLearner l;
  l.Track(1, "a");
  l.Track(2, "a");
  l.Report(1, 0, 1, 0, 0, 100);
  l.Report(1, 0, 1, 100, 6000, 100);  // 0.6
  l.Report(2, 0, 1, 0, 0, 100);
  l.Report(2, 0, 1, 100, 8000, 100);  // 0.8
  l.Forget(1);
  EXPECT_TRUE(l.Own(1).empty());
  EXPECT_EQ(l.Own(2), (std::vector<double>{0.8}));
  const auto settled = l.Settled();
  ASSERT_EQ(settled.count("a"), 1u);
  EXPECT_EQ(settled.at("a").n, (std::vector<int64_t>{1}));
  EXPECT_DOUBLE_EQ(settled.at("a").sum[0], 0.6);

  SpeedLearner r;
  r.Track(2, "a");
  r.Restore(2, l.Own(2));
  for (const auto& [name, e] : settled) r.RestoreSettled(name, e);
  r.Track(3, "a");
  EXPECT_DOUBLE_EQ(r.Factor(3, 0), 0.7);
  EXPECT_DOUBLE_EQ(r.Factor(2, 0), 0.8);
  r.Report(2, 0, 2, 1000, 8000, 100);
  r.Report(2, 0, 2, 1100, 17000, 100);  // 0.9: its sample becomes 0.9, not a third one
  EXPECT_DOUBLE_EQ(r.Factor(3, 0), 0.75);
  // What is settled in "a" is the ended job's sample alone (job 2's is its own to store).
  EXPECT_EQ(r.Settled().at("a").n, (std::vector<int64_t>{1}));
  // A class whose only job is running, after replaced samples: nothing settled, exactly (a store
  // reads a sum without samples as damage).
  r.Forget(2);
  r.Track(4, "b");
  r.Report(4, 1, 1, 0, 0, 30);
  r.Report(4, 1, 1, 10, 70, 30);  // 7/30
  r.Report(4, 1, 1, 20, 230, 30);  // 23/60, replacing 7/30
  const auto b = r.Settled().at("b");
  EXPECT_EQ(b.n, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(b.sum, (std::vector<double>{0, 0}));
}

// A report that implies a job 200x faster than predicted (a counter that jumped) teaches nothing,
// to the job or to its class; nor does one at a hundredth of a hundredth.
TEST(SpeedLearner, ImplausibleReportsAreNotLearnedFrom) {
  SpeedLearner l;
  l.Track(1, "a");
  l.Track(2, "a");
  l.Report(1, 0, 1, 0, 0, 100);
  EXPECT_FALSE(l.Report(1, 0, 1, 10, 200000, 100).has_value());  // 20,000 tokens/s of 100
  EXPECT_TRUE(l.Own(1).empty());
  EXPECT_TRUE(l.Factors(2, 1).empty());
  l.Report(2, 0, 1, 0, 0, 100);
  EXPECT_FALSE(l.Report(2, 0, 1, 10000, 1, 100).has_value());  // 1e-4 of the prediction
  EXPECT_TRUE(l.Own(2).empty());
}

}  // namespace
}  // namespace frenzy::runtime
