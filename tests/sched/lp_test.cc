#include "sched/lp.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// Sia's shape (sched/sia.cc): each job takes at most one configuration, each GPU type has a
// capacity. Types X and Y hold 2 GPUs each; values of (job, type, GPUs):
//   j1: X2 = 9, Y2 = 5;   j2: X2 = 8, Y1 = 4;   j3: X1 = 6, Y1 = 3.
// By what X holds: j1's X2 (9) leaves Y to j2's and j3's Y1 (4 + 3): 16. j2's X2 (8) leaves Y
// to j1's Y2 (5) or j3's Y1 (3): 13. j3's X1 (6; no other 1-GPU X) leaves Y to j1's Y2 or j2's
// Y1: 11. X empty: at most 7. Optimum 16 at (j1 X2, j2 Y1, j3 Y1), unique. The relaxation does
// better — j3 X1 + j1 half X2, half Y2 + j2 Y1 = 6 + 4.5 + 2.5 + 4 = 17 is feasible — so the
// integer answer is branch and bound's, not a rounding of the relaxation.
TEST(SolveLp, SiaShapedIntegerProgramHasHandDerivedOptimum) {
  LinearProgram lp;
  const int j1x2 = lp.AddVariable(0, 1, 9, true), j1y2 = lp.AddVariable(0, 1, 5, true);
  const int j2x2 = lp.AddVariable(0, 1, 8, true), j2y1 = lp.AddVariable(0, 1, 4, true);
  const int j3x1 = lp.AddVariable(0, 1, 6, true), j3y1 = lp.AddVariable(0, 1, 3, true);
  lp.AddRow({{j1x2, 1}, {j1y2, 1}}, -kInf, 1);  // one configuration per job
  lp.AddRow({{j2x2, 1}, {j2y1, 1}}, -kInf, 1);
  lp.AddRow({{j3x1, 1}, {j3y1, 1}}, -kInf, 1);
  lp.AddRow({{j1x2, 2}, {j2x2, 2}, {j3x1, 1}}, -kInf, 2);  // type X's GPUs
  lp.AddRow({{j1y2, 2}, {j2y1, 1}, {j3y1, 1}}, -kInf, 2);  // type Y's GPUs
  auto r = SolveLp(lp, 5.0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->optimal);
  EXPECT_NEAR(r->objective, 16.0, 1e-6);
  EXPECT_EQ(r->values, (std::vector<double>{1, 0, 0, 1, 0, 1}));

  std::fill(lp.integer.begin(), lp.integer.end(), false);
  auto relaxed = SolveLp(lp, 5.0);
  ASSERT_TRUE(relaxed.ok()) << relaxed.status().ToString();
  EXPECT_GE(relaxed->objective, 17.0 - 1e-7);
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

// The optimum of a 0/1 program of Sia's shape by exhaustive search, independent of CBC: every
// variable is binary and in exactly one "pick at most one" row (all coefficients 1, upper 1);
// the other rows are capacities (non-negative coefficients, upper bounds). Tries every choice
// (none or one variable per pick row) and keeps the best that respects every capacity.
double ExhaustiveOptimum(const LinearProgram& lp) {
  std::vector<std::vector<int>> picks;
  std::vector<const LinearProgram::Row*> capacities;
  std::vector<int> owner(lp.lower.size(), 0);
  for (const auto& row : lp.rows) {
    bool pick = row.upper == 1;
    for (const auto& [c, coef] : row.terms) pick = pick && coef == 1;
    if (!pick) {
      for (const auto& [c, coef] : row.terms) EXPECT_GE(coef, 0);
      capacities.push_back(&row);
      continue;
    }
    picks.emplace_back();
    for (const auto& [c, coef] : row.terms) {
      picks.back().push_back(c);
      ++owner[static_cast<size_t>(c)];
    }
  }
  for (size_t c = 0; c < lp.lower.size(); ++c) {
    EXPECT_EQ(owner[c], 1) << "variable " << c << " is not in exactly one pick row";
    EXPECT_TRUE(lp.integer[c] && lp.lower[c] == 0 && lp.upper[c] == 1) << "variable " << c;
  }
  std::vector<double> x(lp.lower.size(), 0);
  double best = -kInf;
  auto search = [&](auto&& self, size_t p) -> void {
    if (p == picks.size()) {
      double value = 0;
      for (size_t c = 0; c < x.size(); ++c) value += lp.objective[c] * x[c];
      for (const LinearProgram::Row* row : capacities) {
        double used = 0;
        for (const auto& [c, coef] : row->terms) used += coef * x[static_cast<size_t>(c)];
        if (used > row->upper) return;
      }
      best = std::max(best, value);
      return;
    }
    self(self, p + 1);  // this job gets nothing
    for (int c : picks[p]) {
      x[static_cast<size_t>(c)] = 1;
      self(self, p + 1);
      x[static_cast<size_t>(c)] = 0;
    }
  };
  search(search, 0);
  return best;
}

// A program Sia built while replaying philly-64 (5 jobs with 3 to 13 configurations each, 3 GPU
// types of 16, 16 and 32 GPUs): CBC's stand-alone driver aborted on a CLP assertion on it.
// Format: "vars rows maximize", then per variable "lower upper objective integer", then per row
// "lower upper n (col coef)*n". The expected optimum comes from exhaustive search over its
// 10 x 5 x 4 x 14 x 12 = 33,600 choices, not from a solver.
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
  const double best = ExhaustiveOptimum(lp);
  // CBC stops within a relative gap of 1e-4 of its bound (sched/lp.cc, as Sia's artifact), so
  // it may report a little less than the optimum, never more.
  EXPECT_GE(s->objective, best * (1 - 1e-4));
  EXPECT_LE(s->objective, best + 1e-9);
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
