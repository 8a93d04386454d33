// sia: heterogeneity-aware, goodput-optimised allocation after Jayaram Subramanya et al., "Sia:
// Heterogeneity-aware, goodput-optimized ML-cluster scheduling" (SOSP 2023), with the constants of
// the authors' released simulator where the paper leaves them open.
//
// Every 60-second round Sia solves one integer linear program over binary x[j][c], c = a
// configuration (GPU type, GPU count) taken from the job's option table:
//  * configurations: power-of-two counts up to the type's usable GPUs, whose option exists, has
//    not crashed out of memory (JobView::Failed) and fits once the profiled memory factor is
//    applied (Sia profiles jobs: device_bytes x memory_factor <= GPU memory);
//  * scale-up limit (as in Sia, after Pollux): a job may grow to at most twice its current GPU
//    count per round; a job that holds nothing is offered the smallest configuration of each
//    type (Sia starts every job at its minimum and doubles from there). The current configuration
//    of a running job is always offered;
//  * goodput G[j][c] = throughput of c / throughput of the job's slowest usable configuration
//    (Sia normalises every row so that its minimum is 1);
//  * restart penalty (Sia's re-allocation factor, Pollux's formula, which Sia's simulator uses by
//    default): for a running job every configuration other than its current one has its goodput
//    multiplied by r_j = max(age - restarts * delta, 0) / (age + delta), and r_j = 1 while
//    age < delta; age = time since submission, delta = 60 s (the simulator's restart pause; Sia
//    measures 25–250 s per model);
//  * objective (Sia's p-norm form with p < 0): minimise sum x[j][c] * (r G[j][c])^p +
//    lambda_n * (number of jobs left without an allocation), written here as the equivalent
//    maximisation of sum x[j][c] * (lambda_n - (r G[j][c])^p). p = -0.5 and lambda_n = 1.1 are
//    the defaults of Sia's released simulator (|lambda_n| > 1 so that any allocation beats none);
//  * constraints: at most one configuration per job; per type, the GPUs of chosen configurations
//    <= the type's usable GPUs; a running job that is in the middle of a checkpoint-restore
//    (restart pause) must keep its configuration (Sia's non-preemptible hard constraint). No
//    other job is guaranteed an allocation: lambda_n only rewards giving one.
// The program is solved with CBC (relative gap 1e-4 as in Sia's artifact, 5 s limit, best
// incumbent used). Jobs whose chosen configuration equals their current one keep their GPUs;
// the others are stopped and the new configurations placed with the shared gang placement,
// largest first (as Sia's placer does).
//
// Simplified, and why:
//  * goodput = throughput: our jobs train with a fixed global batch, so Sia's batch-size
//    adaptation (statistical efficiency) does not apply;
//  * throughputs come from the option table (the perf model) instead of Sia's bootstrapped
//    throughput models: the simulator's truth is the same perf model, so a profiling run would
//    reveal exactly these numbers;
//  * configurations are power-of-two counts rather than Sia's (nodes, GPUs) list (1, 2, 4, 8 on
//    one node, then whole nodes): with 8-GPU nodes the two coincide up to 16 GPUs;
//  * Sia's allocation-change penalty lambda_a is defined but unused in its solver; left out,
//    except for a 1e-6 bonus on the current configuration that breaks exact ties without churn;
//  * placement does not evict other jobs to defragment (Sia's "smart placement" is also off in
//    its simulator); a configuration that cannot be placed on the free nodes waits a round.
#include "sched/sia.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "sched/lp.h"
#include "sched/placement.h"

namespace frenzy {
namespace {

constexpr double kRoundS = 60;           // Sia's scheduling interval
constexpr double kP = -0.5;              // fairness exponent (Sia simulator default)
constexpr double kLambdaNoAlloc = 1.1;   // reward for allocating a job (Sia default)
constexpr double kRestartPenaltyS = 60;  // delta of the re-allocation factor
constexpr double kSolverTimeLimitS = 5;
// Exact ties (e.g. a running and a queued job, both at their smallest configuration) go to the
// current allocation rather than to an arbitrary swap that costs two restarts.
constexpr double kKeepTieBreak = 1e-6;
constexpr double kInfinity = std::numeric_limits<double>::infinity();

bool PowerOfTwo(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

// Pollux's re-allocation factor (the default in Sia's simulator).
double ReallocFactor(const JobView& j, double now_s) {
  const double age = now_s - j.submit_s;
  if (age < kRestartPenaltyS) return 1.0;
  return std::max(age - j.restarts * kRestartPenaltyS, 0.0) / (age + kRestartPenaltyS);
}

class Sia final : public Policy {
 public:
  std::string_view name() const override { return "sia"; }
  OptionKind options_kind() const override { return OptionKind::kHand; }
  bool uses_profiled_memory() const override { return true; }
  bool event_driven() const override { return false; }
  double round_s() const override { return kRoundS; }

  Decisions Schedule(const Snapshot& s) override {
    const ClusterView& c = *s.cluster;
    const size_t types = c.types.size();
    std::vector<int64_t> capacity(types);
    for (size_t t = 0; t < types; ++t) capacity[t] = c.TotalOfType(static_cast<int>(t));

    struct Var {
      size_t job;
      int option;
    };
    // Jobs in their checkpoint-restore pause keep their configuration (Sia's hard constraint).
    // They are taken out of the program (their GPUs out of the capacity) rather than entered as
    // variables fixed to 1: CLP 1.17 can abort on an assertion in branch and bound with fixed
    // integer columns, and the reduced program has the same optimum.
    std::vector<int> chosen(s.jobs.size(), -1);
    for (size_t i = 0; i < s.jobs.size(); ++i) {
      const JobView& j = s.jobs[i];
      if (!j.running || s.now_s >= j.progress_since_s || !j.Runnable(j.alloc.option, c)) continue;
      chosen[i] = j.alloc.option;
      const RunOption& o = j.option(j.alloc.option);
      capacity[static_cast<size_t>(o.type)] -= o.gpus;
    }
    for (auto& cap : capacity) cap = std::max<int64_t>(cap, 0);
    std::vector<Var> vars;
    LinearProgram lp;
    lp.maximize = true;
    std::vector<std::vector<std::pair<int, double>>> per_type(types);
    for (size_t i = 0; i < s.jobs.size(); ++i) {
      const JobView& j = s.jobs[i];
      if (chosen[i] >= 0) continue;  // pinned
      const auto& opts = j.options->options;
      const int current = j.running ? j.alloc.option : -1;
      // Usable configurations and the job's slowest one (the normalisation).
      std::vector<int> usable;
      double min_tput = kInfinity;
      std::vector<int64_t> smallest(types, 0);
      for (size_t k = 0; k < opts.size(); ++k) {
        const RunOption& o = opts[k];
        const size_t t = static_cast<size_t>(o.type);
        const int idx = static_cast<int>(k);
        const bool offered = PowerOfTwo(o.gpus) && o.gpus <= capacity[t];
        if (!j.Runnable(idx, c) || !(offered || idx == current)) continue;
        usable.push_back(idx);
        min_tput = std::min(min_tput, o.plan.tokens_per_s);
        if (smallest[t] == 0 || o.gpus < smallest[t]) smallest[t] = o.gpus;
      }
      if (usable.empty()) continue;
      const int64_t current_gpus = current >= 0 ? j.option(current).gpus : 0;
      const double realloc = j.running ? ReallocFactor(j, s.now_s) : 1.0;
      std::vector<std::pair<int, double>> one_config;
      for (int idx : usable) {
        const RunOption& o = j.option(idx);
        const size_t t = static_cast<size_t>(o.type);
        const int64_t limit = std::max(2 * current_gpus, smallest[t]);
        if (idx != current && o.gpus > limit) continue;  // at most 2x per round
        double goodput = o.plan.tokens_per_s / min_tput;
        if (j.running && idx != current) goodput *= realloc;
        double gain = kLambdaNoAlloc - std::pow(std::max(goodput, 1e-9), kP);
        if (idx == current) gain += kKeepTieBreak;
        const int v = lp.AddVariable(0, 1, gain, true);
        vars.push_back({i, idx});
        one_config.emplace_back(v, 1.0);
        per_type[t].emplace_back(v, static_cast<double>(o.gpus));
      }
      if (one_config.size() > 1) lp.AddRow(std::move(one_config), -kInfinity, 1);
    }
    for (size_t t = 0; t < types; ++t) {
      if (!per_type[t].empty()) {
        lp.AddRow(std::move(per_type[t]), -kInfinity, static_cast<double>(capacity[t]));
      }
    }
    if (vars.empty()) return {};
    auto solved = SolveLp(lp, kSolverTimeLimitS);
    if (!solved.ok()) return {};  // no incumbent in time: everything keeps running as it is

    for (size_t v = 0; v < vars.size(); ++v) {
      if (solved->values[v] > 0.5) chosen[vars[v].job] = vars[v].option;
    }

    Decisions d;
    FreeMap free(c);
    std::vector<size_t> starts;
    for (size_t i = 0; i < s.jobs.size(); ++i) {
      const JobView& j = s.jobs[i];
      if (j.running && chosen[i] == j.alloc.option) continue;
      if (j.running) {
        d.stop.push_back(j.key);
        free.Release(j.alloc.placement);
      }
      if (chosen[i] >= 0) starts.push_back(i);
    }
    std::stable_sort(starts.begin(), starts.end(), [&](size_t a, size_t b) {
      return s.jobs[a].option(chosen[a]).gpus > s.jobs[b].option(chosen[b]).gpus;
    });
    for (size_t i : starts) {
      const JobView& j = s.jobs[i];
      const RunOption& o = j.option(chosen[i]);
      if (auto placement = free.Place(o.type, o.gpus, std::max<int64_t>(1, o.plan.tp))) {
        d.start.push_back({j.key, Allocation{chosen[i], std::move(*placement)}});
      }
    }
    return d;
  }
};

}  // namespace

std::unique_ptr<Policy> MakeSiaPolicy() { return std::make_unique<Sia>(); }

}  // namespace frenzy
