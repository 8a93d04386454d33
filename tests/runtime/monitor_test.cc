// The memory monitor on hand-computed reports: ratios, least-squares trends, factors, OOM floors
// and what it learns across the jobs of a class.
#include "runtime/monitor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "../sched/sched_fixtures.h"

namespace frenzy::runtime {
namespace {

using frenzy::testing::kGiB;

constexpr int64_t kCapacity = 40 * kGiB;

// A report of `peak_gib` against a prediction of `predicted_gib` at `progress`, on 40 GiB GPUs.
MemoryReport At(double progress, double peak_gib, double predicted_gib = 32) {
  MemoryReport r;
  r.t_s = 100 * progress;
  r.progress = progress;
  r.peak_bytes = static_cast<int64_t>(peak_gib * static_cast<double>(kGiB));
  r.predicted_bytes = static_cast<int64_t>(predicted_gib * static_cast<double>(kGiB));
  r.capacity_bytes = kCapacity;
  return r;
}

// A job of `job_class` whose one report says it ends at `ratio` x the prediction (32 GiB).
void FinishWith(MemoryMonitor& m, int64_t job, const std::string& job_class, double ratio) {
  m.Track(job, job_class);
  m.Report(job, At(1.0, 32 * ratio));
  m.Finish(job);
}

TEST(MonitorReport, RatioAndSlopeOfTwoReports) {
  MemoryMonitor m;
  m.Track(1, "llama/megatron");
  m.Report(1, At(0.25, 32));  // 1.0x
  m.Report(1, At(0.5, 36));   // 1.125x
  const JobMemory* j = m.Find(1);
  ASSERT_NE(j, nullptr);
  EXPECT_DOUBLE_EQ(j->ratio, 1.125);
  // Two points: the slope is the line through them, 0.125 / 0.25.
  EXPECT_DOUBLE_EQ(j->slope, 0.5);
  EXPECT_EQ(j->reports, 2);
  EXPECT_EQ(j->peak_bytes, 36 * kGiB);
  EXPECT_EQ(j->predicted_bytes, 32 * kGiB);
  EXPECT_EQ(j->capacity_bytes, kCapacity);
  EXPECT_EQ(j->headroom_bytes(), 4 * kGiB);
  EXPECT_DOUBLE_EQ(j->progress, 0.5);
  EXPECT_EQ(j->job_class, "llama/megatron");
}

TEST(MonitorReport, LeastSquaresSlopeOfThreeReports) {
  MemoryMonitor m;
  m.Report(1, At(0.1, 32));  // 1.0
  m.Report(1, At(0.2, 40));  // 1.25
  m.Report(1, At(0.5, 40));  // 1.25
  // In tenths of progress x = 1, 2, 5 (mean 8/3), y mean 7/6: dx = -5/3, -2/3, 7/3,
  // dy = -1/6, 1/12, 1/12; sum dx dy = 5/12, sum dx^2 = 26/3: 5/104 per tenth, 25/52 per unit
  // (the ends alone would give 0.625, the last pair 0).
  const JobMemory* j = m.Find(1);
  ASSERT_NE(j, nullptr);
  EXPECT_NEAR(j->slope, 25.0 / 52.0, 1e-9);
  EXPECT_DOUBLE_EQ(j->ratio, 1.25);
  // Projected from the latest sample: 1.25 + 25/52 x 0.5.
  EXPECT_NEAR(j->ProjectedRatio(1.0), 1.25 + 25.0 / 104.0, 1e-9);
}

TEST(MonitorReport, LeastSquaresIsNotTheLastPairOnly) {
  MemoryMonitor m;
  m.Report(1, At(0.2, 32));  // 1.0
  m.Report(1, At(0.4, 40));  // 1.25
  m.Report(1, At(0.6, 40));  // 1.25
  m.Report(1, At(0.8, 48));  // 1.5
  // x mean 0.5, y mean 1.25; dx = -0.3, -0.1, 0.1, 0.3; dy = -0.25, 0, 0, 0.25:
  // sum dx dy = 0.15, sum dx^2 = 0.2: slope 0.75 (the last pair alone would give 1.25).
  EXPECT_NEAR(m.Find(1)->slope, 0.75, 1e-9);
}

TEST(MonitorReport, SlopeIsNeverNegative) {
  MemoryMonitor m;
  m.Report(1, At(0.2, 40));  // 1.25
  m.Report(1, At(0.4, 32));  // 1.0: the fit falls, the slope stays 0
  const JobMemory* j = m.Find(1);
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(j->slope, 0.0);
  EXPECT_DOUBLE_EQ(j->ratio, 1.0);
  EXPECT_DOUBLE_EQ(j->ProjectedRatio(1.0), 1.0);
}

TEST(MonitorReport, OneReportHasNoTrend) {
  MemoryMonitor m;
  m.Report(1, At(0.5, 36));
  EXPECT_EQ(m.Find(1)->slope, 0.0);
  EXPECT_DOUBLE_EQ(m.Find(1)->ProjectedRatio(1.0), 1.125);
}

TEST(MonitorReport, WindowKeepsTheLatestReports) {
  MonitorOptions o;
  o.window = 3;
  MemoryMonitor m(o);
  m.Report(1, At(0.1, 64));  // 2.0: outside the window by the end
  m.Report(1, At(0.2, 64));  // 2.0: outside the window by the end
  m.Report(1, At(0.3, 32));  // 1.0
  m.Report(1, At(0.4, 40));  // 1.25
  m.Report(1, At(0.5, 48));  // 1.5
  const JobMemory* j = m.Find(1);
  ASSERT_NE(j, nullptr);
  ASSERT_EQ(j->samples.size(), 3u);
  EXPECT_DOUBLE_EQ(j->samples.front().first, 0.3);
  EXPECT_DOUBLE_EQ(j->samples.back().first, 0.5);
  // Over the window the ratio rises 0.25 per 0.1 of progress; with the two early 2.0x reports
  // the fit would fall and be clamped to 0.
  EXPECT_NEAR(j->slope, 2.5, 1e-9);
  EXPECT_EQ(j->reports, 5);
}

TEST(MonitorReport, ReportAtEarlierProgressReplacesLaterSamples) {
  MemoryMonitor m;
  m.Report(1, At(0.2, 32));
  m.Report(1, At(0.4, 36));
  m.Report(1, At(0.6, 40));
  // A restart from a checkpoint at 0.4: the samples at 0.4 and 0.6 are replaced.
  m.Report(1, At(0.4, 32));
  const JobMemory* j = m.Find(1);
  ASSERT_NE(j, nullptr);
  ASSERT_EQ(j->samples.size(), 2u);
  EXPECT_DOUBLE_EQ(j->samples[0].first, 0.2);
  EXPECT_DOUBLE_EQ(j->samples[1].first, 0.4);
  EXPECT_DOUBLE_EQ(j->samples[1].second, 1.0);
  EXPECT_EQ(j->slope, 0.0);
}

TEST(MonitorReport, ZeroPredictionIsIgnored) {
  MemoryMonitor m;
  m.Report(1, At(0.5, 36, 0));
  EXPECT_EQ(m.Find(1), nullptr);  // not even created
  m.Track(2, "c");
  m.Report(2, At(0.5, 36, 0));
  ASSERT_NE(m.Find(2), nullptr);
  EXPECT_EQ(m.Find(2)->reports, 0);
  EXPECT_TRUE(m.Find(2)->samples.empty());
  EXPECT_FALSE(m.Factor(2).has_value());
}

TEST(MonitorProjection, ExtrapolatesTheTrendToTheEnd) {
  MemoryMonitor m;
  m.Report(1, At(0.25, 32));
  m.Report(1, At(0.5, 36));
  const JobMemory& j = *m.Find(1);
  // 1.125 at 0.5, +0.5 per unit of progress.
  EXPECT_DOUBLE_EQ(j.ProjectedRatio(1.0), 1.375);
  EXPECT_DOUBLE_EQ(j.ProjectedRatio(0.75), 1.25);
  // Before the latest sample: no extrapolation backwards.
  EXPECT_DOUBLE_EQ(j.ProjectedRatio(0.3), 1.125);
}

TEST(MonitorFactor, ProjectedRatioTimesMargin) {
  MemoryMonitor m;
  m.Report(1, At(0.25, 32));
  m.Report(1, At(0.5, 36));
  ASSERT_TRUE(m.Factor(1).has_value());
  EXPECT_NEAR(*m.Factor(1), 1.375 * 1.03, 1e-12);

  MonitorOptions o;
  o.margin = 0.1;
  MemoryMonitor m2(o);
  m2.Report(1, At(0.5, 40));  // 1.25, no trend
  EXPECT_NEAR(*m2.Factor(1), 1.375, 1e-12);
}

TEST(MonitorFactor, BoundedByMinAndMax) {
  MonitorOptions o;
  o.min_factor = 0.5;
  o.max_factor = 1.2;
  MemoryMonitor m(o);
  m.Report(1, At(0.5, 8));  // 0.25 x 1.03 = 0.2575 < 0.5
  EXPECT_DOUBLE_EQ(*m.Factor(1), 0.5);
  m.Report(2, At(0.5, 40));  // 1.25 x 1.03 > 1.2
  EXPECT_DOUBLE_EQ(*m.Factor(2), 1.2);
  m.Report(3, At(0.5, 32));  // 1.03: inside the bounds
  EXPECT_NEAR(*m.Factor(3), 1.03, 1e-12);
}

TEST(MonitorFactor, NoneWithoutObservationOrEvidence) {
  MemoryMonitor m;
  EXPECT_FALSE(m.Factor(7).has_value());  // not tracked
  m.Track(7, "unknown/class");
  EXPECT_FALSE(m.Factor(7).has_value());
  EXPECT_EQ(m.tracked(), 1u);
}

TEST(MonitorOom, FloorIsCapacityOverPrediction) {
  MemoryMonitor m;
  m.Report(1, At(0.5, 32));  // 1.0, flat
  m.ReportOom(1, 32 * kGiB, 40 * kGiB);
  const JobMemory* j = m.Find(1);
  ASSERT_NE(j, nullptr);
  ASSERT_TRUE(j->floor.has_value());
  EXPECT_DOUBLE_EQ(*j->floor, 1.25);
  EXPECT_EQ(j->ooms, 1);
  EXPECT_DOUBLE_EQ(j->ProjectedRatio(1.0), 1.25);  // the floor beats the 1.0 trend
  EXPECT_NEAR(*m.Factor(1), 1.25 * 1.03, 1e-12);
  // A later crash of a layout predicted bigger gives a lower bound: the floor keeps the max.
  m.ReportOom(1, 36 * kGiB, 40 * kGiB);
  EXPECT_DOUBLE_EQ(*m.Find(1)->floor, 1.25);
  EXPECT_EQ(m.Find(1)->ooms, 2);
  // A crash of a leaner layout raises it.
  m.ReportOom(1, 20 * kGiB, 40 * kGiB);
  EXPECT_DOUBLE_EQ(*m.Find(1)->floor, 2.0);
  EXPECT_NEAR(*m.Factor(1), 2.0 * 1.03, 1e-12);
}

TEST(MonitorOom, FloorAloneGivesAFactor) {
  MemoryMonitor m;
  m.Track(3, "c");
  m.ReportOom(3, 32 * kGiB, 40 * kGiB);
  EXPECT_EQ(m.Find(3)->reports, 0);
  ASSERT_TRUE(m.Factor(3).has_value());
  EXPECT_NEAR(*m.Factor(3), 1.25 * 1.03, 1e-12);
  // A zero prediction says nothing.
  m.ReportOom(4, 0, 40 * kGiB);
  EXPECT_EQ(m.Find(4), nullptr);
}

TEST(MonitorOom, TrendAboveTheFloorWins) {
  MemoryMonitor m;
  m.ReportOom(1, 32 * kGiB, 40 * kGiB);  // at least 1.25
  m.Report(1, At(0.25, 40));             // 1.25
  m.Report(1, At(0.5, 44));              // 1.375: +0.5 per unit
  EXPECT_DOUBLE_EQ(m.Find(1)->ProjectedRatio(1.0), 1.625);
  EXPECT_NEAR(*m.Factor(1), 1.625 * 1.03, 1e-12);
}

TEST(MonitorClass, CorrectionAfterMinEvidence) {
  MemoryMonitor m;  // min_evidence 3
  const std::string k = "llama-2-7b/megatron";
  FinishWith(m, 1, k, 1.0);
  EXPECT_FALSE(m.Correction(k).has_value());
  EXPECT_EQ(m.Find(1), nullptr);  // forgotten
  FinishWith(m, 2, k, 1.25);
  EXPECT_FALSE(m.Correction(k).has_value());
  ASSERT_EQ(m.classes().count(k), 1u);
  EXPECT_EQ(m.classes().at(k).jobs, 2);
  EXPECT_DOUBLE_EQ(m.classes().at(k).mean_ratio, 1.125);
  FinishWith(m, 3, k, 1.5);
  auto c = m.Correction(k);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->jobs, 3);
  EXPECT_NEAR(c->mean_ratio, 1.25, 1e-12);
  // Sample standard deviation: sqrt((0.25^2 + 0 + 0.25^2) / 2) = 0.25.
  EXPECT_NEAR(c->stddev, 0.25, 1e-12);
  EXPECT_DOUBLE_EQ(c->max_ratio, 1.5);
  // mean + 2 sd = 1.75 is more than ever seen: the largest ratio.
  EXPECT_NEAR(c->Ratio(), 1.5, 1e-12);
  EXPECT_EQ(m.tracked(), 0u);
}

TEST(MonitorClass, FinalRatioIsTheProjection) {
  MemoryMonitor m;
  m.Track(1, "k");
  m.Report(1, At(0.25, 32));
  m.Report(1, At(0.5, 36));  // projected 1.375 at the end
  m.Finish(1);
  EXPECT_DOUBLE_EQ(m.classes().at("k").mean_ratio, 1.375);
  EXPECT_DOUBLE_EQ(m.classes().at("k").max_ratio, 1.375);
  EXPECT_EQ(m.classes().at("k").stddev, 0.0);
}

TEST(MonitorClass, UnobservedOrClasslessJobsTeachNothing) {
  MemoryMonitor m;
  m.Track(1, "k");
  m.Finish(1);  // never reported
  m.Report(2, At(0.5, 40));
  m.Finish(2);  // no class
  m.Finish(3);  // never seen
  EXPECT_TRUE(m.classes().empty());
  EXPECT_EQ(m.tracked(), 0u);
}

TEST(MonitorClass, RatioIsMeanPlusTwoSdAtMostMax) {
  ClassCorrection c;
  c.mean_ratio = 1.1;
  c.stddev = 0.05;
  c.max_ratio = 1.5;
  EXPECT_NEAR(c.Ratio(), 1.2, 1e-12);
  c.max_ratio = 1.15;
  EXPECT_DOUBLE_EQ(c.Ratio(), 1.15);
}

TEST(MonitorClass, NewJobOfALearnedClassStartsWithItsCorrection) {
  MemoryMonitor m;
  for (int64_t j = 1; j <= 3; ++j) FinishWith(m, j, "k", 1.0 + 0.25 * static_cast<double>(j - 1));
  m.Track(10, "k");
  ASSERT_TRUE(m.Factor(10).has_value());
  EXPECT_NEAR(*m.Factor(10), 1.5 * 1.03, 1e-12);
  // Another class learned nothing.
  m.Track(11, "other");
  EXPECT_FALSE(m.Factor(11).has_value());
  // Once the job reports, its own observation wins over the class.
  m.Report(10, At(0.5, 32));
  EXPECT_NEAR(*m.Factor(10), 1.03, 1e-12);
}

TEST(MonitorClass, ClassCorrectionIsBounded) {
  MonitorOptions o;
  o.max_factor = 1.2;
  MemoryMonitor m(o);
  for (int64_t j = 1; j <= 3; ++j) FinishWith(m, j, "k", 1.5);
  m.Track(10, "k");
  EXPECT_DOUBLE_EQ(*m.Factor(10), 1.2);
}

TEST(MonitorExplain, MentionsTheNumbers) {
  MemoryMonitor m;
  EXPECT_EQ(m.Explain(1), "not watched");
  m.Track(1, "k");
  EXPECT_NE(m.Explain(1).find("no observation yet"), std::string::npos);
  m.Report(1, At(0.5, 12, 10));  // 1.2x at 50%, no trend
  std::string s = m.Explain(1);
  EXPECT_NE(s.find("observed 1.20x"), std::string::npos) << s;
  EXPECT_NE(s.find("at 50% progress"), std::string::npos) << s;
  EXPECT_NE(s.find("expected 1.20x by the end"), std::string::npos) << s;
  EXPECT_NE(s.find("planned with 1.24x"), std::string::npos) << s;  // 1.2 x 1.03 = 1.236
  EXPECT_EQ(s.find("out of memory"), std::string::npos) << s;
  m.ReportOom(1, 10 * kGiB, 16 * kGiB);  // at least 1.6x
  s = m.Explain(1);
  EXPECT_NE(s.find("out of memory 1 time(s): at least 1.60x"), std::string::npos) << s;
  EXPECT_NE(s.find("expected 1.60x by the end"), std::string::npos) << s;
  EXPECT_NE(s.find("planned with 1.65x"), std::string::npos) << s;  // 1.6 x 1.03 = 1.648
}

TEST(MonitorExplain, MentionsTheClass) {
  MonitorOptions o;
  o.margin = 0.1;
  MemoryMonitor m(o);
  for (int64_t j = 1; j <= 3; ++j)
    FinishWith(m, j, "gpt/ds", 1.0 + 0.25 * static_cast<double>(j - 1));
  m.Track(10, "gpt/ds");
  std::string s = m.Explain(10);
  EXPECT_NE(s.find("class gpt/ds: 1.25x"), std::string::npos) << s;
  EXPECT_NE(s.find("sd 0.25"), std::string::npos) << s;
  EXPECT_NE(s.find("max 1.50"), std::string::npos) << s;
  EXPECT_NE(s.find("over 3 jobs"), std::string::npos) << s;
  EXPECT_NE(s.find("planned with 1.65x"), std::string::npos) << s;  // 1.5 x 1.1
}

}  // namespace
}  // namespace frenzy::runtime
