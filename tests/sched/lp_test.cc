#include "sched/lp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

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

namespace frenzy {
namespace {

// A program Sia built while replaying philly-64 (written by FRENZY_LP_DUMP): CBC's stand-alone
// driver aborted on a CLP assertion on it. Format: "vars rows maximize", then per variable
// "lower upper objective integer", then per row "lower upper n (col coef)*n".
TEST(Lp, SiaProgramThatAbortedCbcDriverSolves) {
  std::string path = std::string(FRENZY_SOURCE_DIR) + "/tests/data/lp/sia-clp-abort.txt";
  FILE* f = std::fopen(path.c_str(), "r");
  ASSERT_NE(f, nullptr) << path;
  size_t n = 0, r = 0;
  int mx = 0;
  ASSERT_EQ(std::fscanf(f, "%zu %zu %d", &n, &r, &mx), 3);
  LinearProgram lp;
  lp.maximize = mx != 0;
  for (size_t c = 0; c < n; ++c) {
    double lo, hi, ob;
    int in;
    ASSERT_EQ(std::fscanf(f, "%lf %lf %lf %d", &lo, &hi, &ob, &in), 4);
    lp.AddVariable(lo, hi, ob, in != 0);
  }
  for (size_t i = 0; i < r; ++i) {
    double lo, hi;
    size_t k;
    ASSERT_EQ(std::fscanf(f, "%lf %lf %zu", &lo, &hi, &k), 3);
    std::vector<std::pair<int, double>> terms;
    for (size_t q = 0; q < k; ++q) {
      int c;
      double v;
      ASSERT_EQ(std::fscanf(f, "%d %lf", &c, &v), 2);
      terms.emplace_back(c, v);
    }
    lp.AddRow(std::move(terms), lo, hi);
  }
  std::fclose(f);
  auto s = SolveLp(lp, 5);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->optimal);
  EXPECT_NEAR(s->objective, 2.84847, 1e-4);
  // Integral, and every capacity row holds.
  for (double v : s->values) EXPECT_NEAR(v, std::round(v), 1e-6);
  for (const auto& row : lp.rows) {
    double sum = 0;
    for (const auto& [c, coef] : row.terms) sum += coef * s->values[static_cast<size_t>(c)];
    EXPECT_LE(sum, row.upper + 1e-6);
  }
}

}  // namespace
}  // namespace frenzy
