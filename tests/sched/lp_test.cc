#include "sched/lp.h"

#include <gtest/gtest.h>

#include <limits>

namespace frenzy {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// max 3x + 2y  s.t.  x + y <= 4,  x + 3y <= 6,  x <= 3,  x, y >= 0.
// Vertices: (0,0) 0, (3,0) 9, (3,1) 11, (0,2) 4 -> optimum 11 at (3, 1).
TEST(SolveLp, TinyLinearProgramHasHandDerivedOptimum) {
  LinearProgram lp;
  int x = lp.AddVariable(0, 3, 3, false);
  int y = lp.AddVariable(0, kInf, 2, false);
  lp.AddRow({{x, 1}, {y, 1}}, -kInf, 4);
  lp.AddRow({{x, 1}, {y, 3}}, -kInf, 6);
  auto r = SolveLp(lp);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->optimal);
  EXPECT_NEAR(r->objective, 11.0, 1e-7);
  EXPECT_NEAR(r->values[0], 3.0, 1e-7);
  EXPECT_NEAR(r->values[1], 1.0, 1e-7);
}

TEST(SolveLp, MinimizeWithEqualityRow) {
  // min x + 2y  s.t.  x + y = 5,  x <= 2  ->  x = 2, y = 3, objective 8.
  LinearProgram lp;
  lp.maximize = false;
  int x = lp.AddVariable(0, 2, 1, false);
  int y = lp.AddVariable(0, kInf, 2, false);
  lp.AddRow({{x, 1}, {y, 1}}, 5, 5);
  auto r = SolveLp(lp);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NEAR(r->objective, 8.0, 1e-7);
  EXPECT_NEAR(r->values[0], 2.0, 1e-7);
}

// 0/1 knapsack, capacity 10: items (weight, value) = (5,10) (4,40) (6,30) (3,50).
// Best: items 2 and 4 (weight 7, value 90); adding item 1 overflows; {2,3} = 70; {3,4} = 80.
TEST(SolveLp, TinyKnapsackIntegerProgramHasKnownOptimum) {
  LinearProgram lp;
  const double weight[] = {5, 4, 6, 3}, value[] = {10, 40, 30, 50};
  std::vector<std::pair<int, double>> row;
  for (int i = 0; i < 4; ++i) row.emplace_back(lp.AddVariable(0, 1, value[i], true), weight[i]);
  lp.AddRow(row, -kInf, 10);
  auto r = SolveLp(lp, 5.0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->optimal);
  EXPECT_NEAR(r->objective, 90.0, 1e-6);
  EXPECT_EQ(r->values, (std::vector<double>{0, 1, 0, 1}));
}

TEST(SolveLp, InfeasibleProgramIsAnError) {
  LinearProgram lp;
  int x = lp.AddVariable(0, 1, 1, true);
  lp.AddRow({{x, 1}}, 2, kInf);
  EXPECT_FALSE(SolveLp(lp).ok());
  lp.integer[0] = false;
  EXPECT_FALSE(SolveLp(lp).ok());
}

TEST(SolveLp, RowNamingUnknownVariableIsRejected) {
  LinearProgram lp;
  lp.AddVariable(0, 1, 1, false);
  lp.AddRow({{3, 1.0}}, 0, 1);
  auto r = SolveLp(lp);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace frenzy
