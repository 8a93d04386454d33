// Reports of a simulation: the table names every policy; CSV and SVG are well formed.
#include "sim/report.h"

#include <gtest/gtest.h>

#include <algorithm>

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
