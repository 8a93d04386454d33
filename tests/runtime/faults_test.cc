// Faults other than memory: retries with back-off, stragglers and whether to leave them.
#include "runtime/faults.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace frenzy::runtime {
namespace {

TEST(RetryOnCrash, BackoffDoublesAndCaps) {
  RetryOptions o;
  o.backoff_s = 60;
  o.backoff_max_s = 300;
  o.max_attempts = 10;
  RetryState st;
  // 60 x 2^(n-1) for the n-th crash in a row, at most 300.
  const double expected[] = {60, 120, 240, 300, 300};
  for (int n = 0; n < 5; ++n) {
    RetryDecision d = OnCrash(st, 1000, "NCCL timeout", o);
    ASSERT_TRUE(d.retry) << n;
    EXPECT_DOUBLE_EQ(d.delay_s, expected[n]) << n;
    EXPECT_EQ(st.in_a_row, n + 1);
  }
  EXPECT_DOUBLE_EQ(st.progress_at_last_crash, 1000);
  EXPECT_EQ(st.last_log, "NCCL timeout");
}

TEST(RetryOnCrash, DefaultsDoubleFromAMinute) {
  RetryState st;
  RetryDecision d1 = OnCrash(st, 0, "a", {});
  RetryDecision d2 = OnCrash(st, 0, "b", {});
  RetryDecision d3 = OnCrash(st, 0, "loader died", {});
  EXPECT_TRUE(d1.retry && d2.retry && d3.retry);
  EXPECT_DOUBLE_EQ(d1.delay_s, 60);
  EXPECT_DOUBLE_EQ(d2.delay_s, 120);
  EXPECT_DOUBLE_EQ(d3.delay_s, 240);
  EXPECT_NE(d3.message.find("3 in a row"), std::string::npos) << d3.message;
  EXPECT_NE(d3.message.find("240 s"), std::string::npos) << d3.message;
  EXPECT_NE(d3.message.find("loader died"), std::string::npos) << d3.message;
}

TEST(RetryOnCrash, ProgressResetsTheCount) {
  RetryOptions o;
  o.max_attempts = 3;
  RetryState st;
  EXPECT_DOUBLE_EQ(OnCrash(st, 100, "x", o).delay_s, 60);
  EXPECT_DOUBLE_EQ(OnCrash(st, 100, "x", o).delay_s, 120);
  // The job checkpointed more before crashing again: a first crash again, not the third.
  RetryDecision d = OnCrash(st, 200, "x", o);
  EXPECT_TRUE(d.retry);
  EXPECT_DOUBLE_EQ(d.delay_s, 60);
  EXPECT_EQ(st.in_a_row, 1);
  EXPECT_DOUBLE_EQ(st.progress_at_last_crash, 200);
  // Less progress than before (an older checkpoint) is no progress.
  d = OnCrash(st, 150, "x", o);
  EXPECT_TRUE(d.retry);
  EXPECT_EQ(st.in_a_row, 2);
  EXPECT_DOUBLE_EQ(st.progress_at_last_crash, 200);
}

TEST(RetryOnCrash, FailsAfterMaxAttemptsWithTheLog) {
  RetryOptions o;
  o.max_attempts = 3;
  RetryState st;
  EXPECT_TRUE(OnCrash(st, 5, "first", o).retry);
  EXPECT_TRUE(OnCrash(st, 5, "second", o).retry);
  RetryDecision d = OnCrash(st, 5, "CUDA error: an illegal memory access", o);
  EXPECT_FALSE(d.retry);
  EXPECT_EQ(d.delay_s, 0);
  EXPECT_NE(d.message.find("failed"), std::string::npos) << d.message;
  EXPECT_NE(d.message.find("3 times in a row"), std::string::npos) << d.message;
  EXPECT_NE(d.message.find("CUDA error: an illegal memory access"), std::string::npos) << d.message;
  EXPECT_EQ(d.message.find("second"), std::string::npos) << d.message;
  EXPECT_EQ(st.last_log, "CUDA error: an illegal memory access");
}

TEST(StragglerDetector, SingleNodeDeclaredAfterTwoSlowReports) {
  StragglerDetector s;  // slow under 0.75, 2 reports
  EXPECT_TRUE(s.Report({3}, 0.5).empty());
  EXPECT_FALSE(s.IsSlow(3));
  EXPECT_EQ(s.Report({3}, 0.5), std::vector<int>{3});
  EXPECT_TRUE(s.IsSlow(3));
  EXPECT_EQ(s.slow().size(), 1u);
  // Already declared: not declared again.
  EXPECT_TRUE(s.Report({3}, 0.5).empty());
  EXPECT_TRUE(s.IsSlow(3));
}

TEST(StragglerDetector, ReportAtSpeedClearsSuspicion) {
  StragglerDetector s;
  EXPECT_TRUE(s.Report({3}, 0.5).empty());
  EXPECT_TRUE(s.Report({3}, 0.75).empty());  // at the threshold: at speed
  EXPECT_TRUE(s.Report({3}, 0.5).empty());   // suspicion starts again from 0
  EXPECT_FALSE(s.IsSlow(3));
  EXPECT_EQ(s.Report({3}, 0.1), std::vector<int>{3});
}

TEST(StragglerDetector, MultiNodeJobSharesSuspicion) {
  StragglerDetector s;
  // Each slow report adds 1/2 to each of the two nodes: 4 reports to reach 2.
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(s.Report({1, 2}, 0.4).empty()) << i;
    EXPECT_FALSE(s.IsSlow(1));
    EXPECT_FALSE(s.IsSlow(2));
  }
  EXPECT_EQ(s.Report({1, 2}, 0.4), (std::vector<int>{1, 2}));
  EXPECT_TRUE(s.IsSlow(1));
  EXPECT_TRUE(s.IsSlow(2));
}

TEST(StragglerDetector, SuspicionAddsUpAcrossJobs) {
  StragglerDetector s;
  // Node 5 runs a 2-node job with node 6 and a single-node job: 0.5 + 1 + 0.5 = 2.
  EXPECT_TRUE(s.Report({5, 6}, 0.5).empty());
  EXPECT_TRUE(s.Report({5}, 0.5).empty());
  EXPECT_EQ(s.Report({5, 6}, 0.5), std::vector<int>{5});
  EXPECT_FALSE(s.IsSlow(6));  // 1.0 only
}

TEST(StragglerDetector, ThreeNodeSharesAddUp) {
  StragglerDetector s;
  // Thirds do not add up to 2 exactly in floating point: the sixth report must still declare.
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(s.Report({0, 1, 2}, 0.2).empty()) << i;
  EXPECT_EQ(s.Report({0, 1, 2}, 0.2).size(), 3u);
}

TEST(StragglerDetector, ClearUndeclares) {
  StragglerDetector s;
  s.Report({4}, 0.5);
  s.Report({4}, 0.5);
  ASSERT_TRUE(s.IsSlow(4));
  s.Clear(4);
  EXPECT_FALSE(s.IsSlow(4));
  EXPECT_TRUE(s.slow().empty());
  // It starts from no suspicion: one slow report is not enough.
  EXPECT_TRUE(s.Report({4}, 0.5).empty());
  EXPECT_FALSE(s.IsSlow(4));
  EXPECT_EQ(s.Report({4}, 0.5), std::vector<int>{4});
}

TEST(StragglerDetector, ClearForgetsSuspicion) {
  StragglerDetector s;
  EXPECT_TRUE(s.Report({4}, 0.5).empty());  // suspected once
  s.Clear(4);                               // repaired anyway
  EXPECT_TRUE(s.Report({4}, 0.5).empty());  // a first slow report again
  EXPECT_FALSE(s.IsSlow(4));
}

TEST(StragglerDetector, EmptyNodesAndOptions) {
  StragglerOptions o;
  o.slow_ratio = 0.9;
  o.min_reports = 1;
  StragglerDetector s(o);
  EXPECT_TRUE(s.Report({}, 0.1).empty());
  EXPECT_TRUE(s.slow().empty());
  EXPECT_EQ(s.Report({7}, 0.85), std::vector<int>{7});  // slow under 0.9, one report enough
}

TEST(StragglerLeave, LeavesWhenTheSavingBeatsRestarts) {
  // 1e6 tokens: 2000 s at 500 tok/s, 1000 s at 1000 tok/s: 1000 s saved.
  EXPECT_TRUE(ShouldLeaveSlowNode(1e6, 500, 1000, 60));       // 1000 > 2 x 60
  EXPECT_TRUE(ShouldLeaveSlowNode(1e6, 500, 1000, 499));      // 1000 > 998
  EXPECT_FALSE(ShouldLeaveSlowNode(1e6, 500, 1000, 500));     // 1000 = 2 x 500: not more
  EXPECT_FALSE(ShouldLeaveSlowNode(1e6, 500, 1000, 300, 4));  // 1000 < 4 x 300
  EXPECT_FALSE(ShouldLeaveSlowNode(1e4, 500, 1000, 60));      // 10 s saved
  EXPECT_FALSE(ShouldLeaveSlowNode(1e6, 1000, 1000, 1));      // at speed
  EXPECT_FALSE(ShouldLeaveSlowNode(1e6, 1200, 1000, 1));      // faster than predicted
  EXPECT_TRUE(ShouldLeaveSlowNode(1e6, 0, 1000, 1e9));        // stuck: always leave
}

}  // namespace
}  // namespace frenzy::runtime
