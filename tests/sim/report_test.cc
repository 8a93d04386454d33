// Reports of a simulation: the table names every policy; CSV and SVG are well formed.
#include "sim/report.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "sim/metrics.h"

namespace frenzy {
namespace {

SimResult Result(const std::string& policy, double jct_h) {
  SimResult r;
  r.metrics.policy = policy;
  r.metrics.finished = 2;
  r.metrics.avg_jct_s = jct_h * 3600;
  for (int i = 0; i < 2; ++i) {
    JobRecord j;
    j.id = "j" + std::to_string(i);
    j.model = "gpt2";
    j.submit_s = 0;
    j.first_start_s = 10;
    j.finish_s = (i + 1) * jct_h * 3600;
    j.outcome = JobOutcome::kFinished;
    r.jobs.push_back(j);
  }
  r.timeline = {{0, 2, 0, 0}, {10, 0, 2, 8}, {jct_h * 3600, 1, 1, 4}};
  return r;
}

TEST(Report, TableHasARowPerPolicyWithItsAverageJct) {
  std::string t = ComparisonTable({Result("fifo-static", 2), Result("frenzy", 1)});
  EXPECT_NE(t.find("fifo-static"), std::string::npos);
  EXPECT_NE(t.find("frenzy"), std::string::npos);
  EXPECT_NE(t.find("2.00"), std::string::npos);
  EXPECT_NE(t.find("1.00"), std::string::npos);
}

TEST(Report, JobsCsvHasOneLinePerJobAndPolicy) {
  std::string csv = JobsCsv({Result("a", 1), Result("b", 1)});
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 4);
  EXPECT_EQ(csv.rfind("policy,job_id,", 0), 0u);
}

TEST(Report, SvgPlotsAreCompleteDocumentsWithOneLinePerPolicy) {
  std::vector<SimResult> rs = {Result("a", 1), Result("b", 3)};
  for (const std::string& svg : {JctCdfSvg(rs), TimelineSvg(rs, 8)}) {
    EXPECT_EQ(svg.rfind("<svg", 0), 0u);
    EXPECT_NE(svg.find("</svg>"), std::string::npos);
    size_t lines = 0;
    for (size_t p = svg.find("<polyline"); p != std::string::npos;
         p = svg.find("<polyline", p + 1)) {
      ++lines;
    }
    EXPECT_GE(lines, 2u);
  }
  // Utilisation as a step line: busy 8 of 8 GPUs from t=10 s holds until the next sample.
  std::string tl = TimelineSvg(rs, 8);
  EXPECT_NE(tl.find("utilisation"), std::string::npos);
}

}  // namespace
}  // namespace frenzy

namespace frenzy {
namespace {

// Policy A finishes jobs 0, 1, 2 in 1, 2 and 10 h; policy B finishes 0 and 1 in 2 and 3 h and
// loses job 2 (its longest). On their own finished jobs A averages 13/3 = 4.33 h and B 2.5 h;
// over the 2 jobs both finished, A 1.5 h and B 2.5 h.
TEST(CommonFigures, ComparePoliciesOnTheJobsAllOfThemFinished) {
  auto result = [](std::vector<double> jct_h, std::vector<bool> done) {
    SimResult r;
    for (size_t i = 0; i < jct_h.size(); ++i) {
      JobRecord j;
      j.submit_s = 100;
      j.finish_s = done[i] ? 100 + jct_h[i] * 3600 : -1;
      j.outcome = done[i] ? JobOutcome::kFinished : JobOutcome::kGivenUp;
      j.gpu_s = 3600 * static_cast<double>(i + 1);  // 1, 2, 3 GPU-hours
      r.jobs.push_back(j);
    }
    return r;
  };
  const std::vector<SimResult> results = {result({1, 2, 10}, {true, true, true}),
                                          result({2, 3, 0}, {true, true, false})};
  const CommonFigures c = ComputeCommon(results);
  EXPECT_EQ(c.jobs, 2);
  ASSERT_EQ(c.avg_jct_s.size(), 2u);
  EXPECT_DOUBLE_EQ(c.avg_jct_s[0], 1.5 * 3600);
  EXPECT_DOUBLE_EQ(c.avg_jct_s[1], 2.5 * 3600);
  EXPECT_DOUBLE_EQ(c.gpu_hours[0], 3);  // jobs 0 and 1: 1 + 2 GPU-hours
  EXPECT_DOUBLE_EQ(c.gpu_hours[1], 3);
  // p99 of two values by linear interpolation: lo + 0.99 (hi - lo).
  EXPECT_DOUBLE_EQ(c.p99_jct_s[0], (1 + 0.99 * (2 - 1)) * 3600);
  EXPECT_NE(ComparisonTable(results).find("Over the 2 jobs every policy finished"),
            std::string::npos);
}

}  // namespace
}  // namespace frenzy

namespace frenzy {
namespace {

// Four jobs, the clock stopped at 10,000 s: job 0 finished in 1 h (submitted at 0); job 1
// (submitted at 1,000 s) was given up, so it counts 10,000 - 1,000 = 9,000 s; job 2 (submitted
// at 4,000 s) never ran and counts 6,000 s; job 3, due at 12,000 s, never arrived and does not
// count. All jobs: (3,600 + 9,000 + 6,000) / 3 = 6,200 s; the finished one alone: 3,600 s.
TEST(Metrics, TheAllJobsAverageCountsALostJobToWhenTheClockStopped) {
  std::vector<JobRecord> jobs(4);
  jobs[0].submit_s = 0;
  jobs[0].first_start_s = 0;
  jobs[0].finish_s = 3600;
  jobs[0].outcome = JobOutcome::kFinished;
  jobs[1].submit_s = 1000;
  jobs[1].first_start_s = 1000;
  jobs[1].outcome = JobOutcome::kGivenUp;
  jobs[2].submit_s = 4000;
  jobs[2].outcome = JobOutcome::kUnfinished;
  jobs[3].submit_s = 12000;
  jobs[3].outcome = JobOutcome::kUnfinished;
  RunTotals t;
  t.first_arrival_s = 0;
  t.last_finish_s = 3600;
  t.end_s = 10000;
  t.cluster_gpus = 8;
  PolicyMetrics m = ComputeMetrics(PolicyMetrics{}, jobs, {}, t);
  EXPECT_DOUBLE_EQ(m.avg_jct_s, 3600);
  EXPECT_DOUBLE_EQ(m.avg_jct_all_s, 6200);
  EXPECT_EQ(m.finished, 1);
}

}  // namespace
}  // namespace frenzy
