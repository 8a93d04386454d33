// A small linear / mixed-integer program and its solution with COIN-OR CBC (Debian's
// coinor-libcbc): what the solver-based baselines (Gavel: LP, Sia: ILP) solve every round.
// The wall time of Solve is the solver time those policies report.
#ifndef FRENZY_SCHED_LP_H_
#define FRENZY_SCHED_LP_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace frenzy {

struct LinearProgram {
  // Variables: bounds, objective coefficient, integrality.
  std::vector<double> lower, upper, objective;
  std::vector<bool> integer;
  // Rows: lower <= sum(coef * x) <= upper, sparse.
  struct Row {
    std::vector<std::pair<int, double>> terms;
    double lower, upper;
  };
  std::vector<Row> rows;
  bool maximize = true;

  int AddVariable(double lo, double hi, double obj, bool is_integer);
  void AddRow(std::vector<std::pair<int, double>> terms, double lo, double hi);
};

struct LpSolution {
  bool optimal = false;  // false: time limit hit or infeasible (values are the best found)
  double objective = 0;
  std::vector<double> values;
};

// Solves with CBC (CLP for pure LPs); `time_limit_s` bounds the branch and bound.
Result<LpSolution> SolveLp(const LinearProgram& lp, double time_limit_s = 10.0);

}  // namespace frenzy

#endif  // FRENZY_SCHED_LP_H_
