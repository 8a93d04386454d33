// SolveLp: LinearProgram -> COIN-OR. Pure LPs go straight to CLP (dual simplex through
// OsiClpSolverInterface): Gavel's allocation LP has thousands of columns and needs no branch and
// bound. Programs with integer columns go to CBC's branch and bound (CbcModel on the same CLP
// interface) with a time limit and a relative optimality gap.
//
// Both solvers are silenced (log level 0 on every message handler). Infinite bounds in the
// program (std::numeric_limits<double>::infinity()) become COIN_DBL_MAX. No I/O: a caller that
// wants to keep the programs it solves (to replay a solver failure) writes them itself.
#include "sched/lp.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "CbcHeuristic.hpp"
#include "CbcHeuristicFPump.hpp"
#include "CbcModel.hpp"
#include "ClpSimplex.hpp"
#include "CoinFinite.hpp"
#include "CoinMessageHandler.hpp"
#include "CoinPackedMatrix.hpp"
#include "OsiClpSolverInterface.hpp"

namespace frenzy {

int LinearProgram::AddVariable(double lo, double hi, double obj, bool is_integer) {
  lower.push_back(lo);
  upper.push_back(hi);
  objective.push_back(obj);
  integer.push_back(is_integer);
  return static_cast<int>(lower.size()) - 1;
}

void LinearProgram::AddRow(std::vector<std::pair<int, double>> terms, double lo, double hi) {
  rows.push_back(Row{std::move(terms), lo, hi});
}

namespace {

// Relative gap at which branch and bound stops (Sia's artifact solves its ILP to 1e-4).
constexpr double kRelativeGap = 1e-4;

double Finite(double v) {
  if (v >= COIN_DBL_MAX) return COIN_DBL_MAX;  // also +infinity
  if (v <= -COIN_DBL_MAX) return -COIN_DBL_MAX;
  return v;
}

// The constraint matrix in compressed sparse column form (what both solvers load).
struct Csc {
  std::vector<CoinBigIndex> start;
  std::vector<int> index;
  std::vector<double> value;
};

Csc ToCsc(const LinearProgram& lp) {
  const size_t n = lp.lower.size();
  std::vector<CoinBigIndex> count(n + 1, 0);
  for (const auto& row : lp.rows) {
    for (const auto& [col, coef] : row.terms) {
      (void)coef;
      ++count[static_cast<size_t>(col) + 1];
    }
  }
  Csc m;
  m.start.assign(n + 1, 0);
  for (size_t c = 0; c < n; ++c) m.start[c + 1] = m.start[c] + count[c + 1];
  m.index.resize(static_cast<size_t>(m.start[n]));
  m.value.resize(static_cast<size_t>(m.start[n]));
  std::vector<CoinBigIndex> next(m.start.begin(), m.start.end() - 1);
  for (size_t r = 0; r < lp.rows.size(); ++r) {
    for (const auto& [col, coef] : lp.rows[r].terms) {
      CoinBigIndex k = next[static_cast<size_t>(col)]++;
      m.index[static_cast<size_t>(k)] = static_cast<int>(r);
      m.value[static_cast<size_t>(k)] = coef;
    }
  }
  return m;
}

Status Validate(const LinearProgram& lp) {
  const size_t n = lp.lower.size();
  if (lp.upper.size() != n || lp.objective.size() != n || lp.integer.size() != n) {
    return InvalidArgument("linear program: variable arrays differ in length");
  }
  // CLP asserts (aborts) on inverted bounds instead of reporting them: check them here.
  for (size_t c = 0; c < n; ++c) {
    if (std::isnan(lp.lower[c]) || std::isnan(lp.upper[c]) || lp.lower[c] > lp.upper[c] ||
        !std::isfinite(lp.objective[c])) {
      return InvalidArgument("linear program: variable " + std::to_string(c) + " has bounds [" +
                             std::to_string(lp.lower[c]) + ", " + std::to_string(lp.upper[c]) +
                             "] or a non-finite objective");
    }
  }
  for (size_t r = 0; r < lp.rows.size(); ++r) {
    const auto& row = lp.rows[r];
    if (std::isnan(row.lower) || std::isnan(row.upper) || row.lower > row.upper) {
      return InvalidArgument("linear program: row " + std::to_string(r) + " has bounds [" +
                             std::to_string(row.lower) + ", " + std::to_string(row.upper) + "]");
    }
    for (const auto& [col, coef] : row.terms) {
      if (col < 0 || static_cast<size_t>(col) >= n || !std::isfinite(coef)) {
        return InvalidArgument("linear program: row " + std::to_string(r) +
                               " names unknown variable " + std::to_string(col) +
                               " or has a non-finite coefficient");
      }
    }
  }
  return Status::Ok();
}

// Loads `lp` into a silenced CLP interface: matrix, bounds (infinite ones as COIN_DBL_MAX),
// objective and sense, integer columns.
void Load(const LinearProgram& lp, OsiClpSolverInterface& solver) {
  const int ncols = static_cast<int>(lp.lower.size());
  const int nrows = static_cast<int>(lp.rows.size());
  const Csc m = ToCsc(lp);
  std::vector<double> col_lo, col_hi, row_lo, row_hi;
  col_lo.reserve(lp.lower.size());
  col_hi.reserve(lp.lower.size());
  for (size_t c = 0; c < lp.lower.size(); ++c) {
    col_lo.push_back(Finite(lp.lower[c]));
    col_hi.push_back(Finite(lp.upper[c]));
  }
  for (const auto& row : lp.rows) {
    row_lo.push_back(Finite(row.lower));
    row_hi.push_back(Finite(row.upper));
  }
  CoinPackedMatrix matrix(true, nrows, ncols, m.start.back(), m.value.data(), m.index.data(),
                          m.start.data(), nullptr);
  solver.messageHandler()->setLogLevel(0);
  solver.getModelPtr()->setLogLevel(0);
  solver.loadProblem(matrix, col_lo.data(), col_hi.data(), lp.objective.data(), row_lo.data(),
                     row_hi.data());
  for (int c = 0; c < ncols; ++c) {
    if (lp.integer[static_cast<size_t>(c)]) solver.setInteger(c);
  }
  solver.setObjSense(lp.maximize ? -1.0 : 1.0);
}

Result<LpSolution> SolveContinuous(const LinearProgram& lp, double time_limit_s) {
  const int ncols = static_cast<int>(lp.lower.size());
  OsiClpSolverInterface solver;
  Load(lp, solver);
  solver.getModelPtr()->setMaximumSeconds(time_limit_s);
  solver.initialSolve();
  if (solver.isProvenPrimalInfeasible()) {
    return Status(StatusCode::kFailedPrecondition, "linear program is infeasible");
  }
  if (solver.isProvenDualInfeasible()) {
    return Status(StatusCode::kFailedPrecondition, "linear program is unbounded");
  }
  LpSolution out;
  out.optimal = solver.isProvenOptimal();
  out.objective = solver.getObjValue();
  const double* x = solver.getColSolution();
  out.values.assign(x, x + ncols);
  return out;
}

// Branch and bound with CbcModel on CLP, without the stand-alone driver's preprocessing (the
// driver, Cbc_solve, aborted on a CLP assertion on a few of Sia's small programs with Debian's
// CBC 2.10.8 / CLP 1.17.6; plain branch and bound solves the same programs).
Result<LpSolution> SolveInteger(const LinearProgram& lp, double time_limit_s) {
  const int ncols = static_cast<int>(lp.lower.size());
  OsiClpSolverInterface solver;
  Load(lp, solver);
  CbcModel model(solver);
  model.setLogLevel(0);
  model.messageHandler()->setLogLevel(0);
  model.solver()->messageHandler()->setLogLevel(0);
  model.setMaximumSeconds(std::max(time_limit_s, 0.01));
  model.setAllowableFractionGap(kRelativeGap);
  model.initialSolve();
  if (model.isProvenInfeasible() || model.solver()->isProvenPrimalInfeasible()) {
    return Status(StatusCode::kFailedPrecondition, "integer program is infeasible");
  }
  if (model.solver()->isProvenDualInfeasible()) {
    return Status(StatusCode::kFailedPrecondition, "integer program is unbounded");
  }
  // Primal heuristics, so that a large program has an incumbent before the time limit: simple
  // rounding of the relaxation and the feasibility pump (the driver's defaults include both).
  CbcRounding rounding(model);
  model.addHeuristic(&rounding);
  CbcHeuristicFPump pump(model);
  model.addHeuristic(&pump);
  model.branchAndBound();
  if (model.isProvenInfeasible()) {
    return Status(StatusCode::kFailedPrecondition, "integer program is infeasible");
  }
  const double* x = model.bestSolution();
  if (x == nullptr) {
    // Time ran out before any integer solution: an answer the caller can act on (keep what
    // runs), not a crash.
    return Status(StatusCode::kFailedPrecondition,
                  "integer program: no feasible solution found within " +
                      std::to_string(time_limit_s) + " s");
  }
  LpSolution out;
  out.optimal = model.isProvenOptimal();
  out.objective = model.getObjValue();
  out.values.assign(x, x + ncols);
  return out;
}

}  // namespace

Result<LpSolution> SolveLp(const LinearProgram& lp, double time_limit_s) {
  RETURN_IF_ERROR(Validate(lp));
  if (lp.lower.empty()) return LpSolution{true, 0, {}};
  bool any_integer = false;
  for (bool b : lp.integer) any_integer = any_integer || b;
  return any_integer ? SolveInteger(lp, time_limit_s) : SolveContinuous(lp, time_limit_s);
}

}  // namespace frenzy
