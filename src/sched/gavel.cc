// gavel: heterogeneity-aware max-min fairness ("LAS", max_min_fairness_perf) after Narayanan et
// al., "Heterogeneity-Aware Cluster Scheduling Policies for Deep Learning Workloads" (OSDI 2020).
//
// Allocation (§3–4 of the paper). X[j][t] is the fraction of time job j should spend on GPU type
// t. Every time the set of jobs or of usable GPUs changes (Snapshot::change_seq) the policy solves
//     maximise  min_j  sum_t  T[j][t] * s_j * X[j][t] / (w_j * T_eq[j])
//     s.t.      0 <= X[j][t] <= 1,   sum_t X[j][t] <= 1               (a job runs on one type)
//               sum_j s_j * X[j][t] <= N_t                            (type t has N_t GPUs)
// as a linear program (epigraph variable z <= each job's term) with CLP. s_j is the job's scale
// factor: the GPU count its user asked for, which Gavel never changes. T[j][t] is the job's
// throughput on s_j GPUs of type t: plan.tokens_per_s of the job's (fastest) option for
// (t, s_j); 0 where that option does not exist, exceeds the type's GPUs, crashed out of memory
// (JobView::Failed), or does not fit once the profiled memory factor is applied (Gavel profiles
// jobs, so it knows which layouts really fit: device_bytes x memory_factor <= GPU
// memory). Jobs that run nowhere are left out of the LP (they would pin the minimum at 0).
// Normalisation is Gavel's: T_eq[j] is the job's throughput under the "proportional" equal share,
// X_eq[j][t] = N_t / sum_t' N_t' (Gavel's ProportionalPolicy, cluster split evenly across types and
// rows rescaled to sum to 1), i.e. T_eq[j] = sum_t T[j][t] N_t / N. All priority weights w_j are 1
// (the trace's priorities are not Gavel weights). Multiplying by s_j follows Gavel: a 1-GPU job
// gets s_j times the time of an s_j-GPU job with the same normalised throughput.
//
// Mechanism (§5, round-based scheduling). Rounds are 6 minutes. Each round every (job, type)
// pair gets priority X[j][t] / f[j][t], f being the fraction of its time since arrival the job
// has run on t (f = 0: priority "infinite", ordered by X); pairs are sorted by (priority,
// deficit X*age - received, X) and taken greedily: a job is granted s_j GPUs of type t if t still
// has s_j unassigned GPUs and the job has not been granted another type this round. A job granted
// the (type, count) it already runs on keeps its GPUs (no restart); others are stopped, and the
// granted ones are placed with the shared gang placement (FreeMap), highest priority first.
//
// Simplified, and why:
//  * no space sharing / packing (Gavel's packed variants): the compared systems run one job per
//    GPU;
//  * the paper's lease-extension and worker-id stickiness are reduced to "same (type, count) keeps
//    its GPUs": the engine models a restart only when the allocation changes;
//  * received time is credited per round from the job views (a job running on t at a round's
//    start is credited the round on t), counted since the job's arrival rather than since the last
//    re-solve, so a steady stream of arrivals does not reset the round-robin and starve low-X jobs;
//  * placement failures caused by node boundaries (a granted job whose TP groups do not fit on
//    the free nodes) leave that job waiting for the round; Gavel's simulator has no node
//    boundaries for single-type grants;
//  * a requested count that profiling shows fits on no type is replaced by the smallest larger
//    count that fits somewhere (what the user would resubmit with); taken literally, such a job
//    would never run and would vanish from the JCT statistics;
//  * if the LP fails (it should not: X = 0 is always feasible), every X is 0 and the greedy
//    order degenerates to arrival order for the round.
#include "sched/gavel.h"

#include <algorithm>
#include <limits>
#include <unordered_map>
#include <vector>

#include "sched/lp.h"
#include "sched/placement.h"

namespace frenzy {
namespace {

constexpr double kRoundS = 360;           // Gavel's default round length (§5)
constexpr double kSolverTimeLimitS = 30;  // the LP is far faster; a guard against pathologies
constexpr double kInfinity = std::numeric_limits<double>::infinity();

// The fastest usable option for exactly (type, gpus), or -1. (A hand-tuned table may hold two
// layouts for one pair: the tuned one and the plain data-parallel fallback.)
int BestOption(const JobView& j, int type, int64_t gpus, const ClusterView& c) {
  int best = -1;
  for (size_t i = 0; i < j.options->options.size(); ++i) {
    const RunOption& o = j.options->options[i];
    if (o.type != type || o.gpus != gpus || !j.Runnable(static_cast<int>(i), c)) continue;
    if (best < 0 || o.plan.tokens_per_s > j.option(best).plan.tokens_per_s) {
      best = static_cast<int>(i);
    }
  }
  return best;
}

// The scale factor: the user's GPU count. When profiling shows that count fits on no type (or
// the job names none), the smallest larger count that fits somewhere — what the user resubmits
// with; Gavel itself never changes a job's count.
int64_t ScaleFactor(const JobView& j, const ClusterView& c) {
  const int64_t requested = j.requested_option >= 0 ? j.option(j.requested_option).gpus : 0;
  int64_t best = 0;
  for (size_t i = 0; i < j.options->options.size(); ++i) {
    const RunOption& o = j.options->options[i];
    if (o.gpus < requested || !j.Runnable(static_cast<int>(i), c)) continue;
    if (o.gpus > c.TotalOfType(o.type)) continue;
    if (best == 0 || o.gpus < best) best = o.gpus;
  }
  return best;
}

class Gavel final : public Policy {
 public:
  std::string_view name() const override { return "gavel"; }
  OptionKind options_kind() const override { return OptionKind::kHand; }
  bool uses_profiled_memory() const override { return true; }
  bool event_driven() const override { return false; }
  double round_s() const override { return kRoundS; }

  Decisions Schedule(const Snapshot& s) override {
    const ClusterView& c = *s.cluster;
    const size_t types = c.types.size();
    std::vector<int64_t> capacity(types);
    for (size_t t = 0; t < types; ++t) capacity[t] = c.TotalOfType(static_cast<int>(t));

    // Per job and type: the option Gavel would run (the user's count on that type) or -1.
    std::vector<int64_t> scale(s.jobs.size());
    std::vector<std::vector<int>> option(s.jobs.size(), std::vector<int>(types, -1));
    for (size_t i = 0; i < s.jobs.size(); ++i) {
      const JobView& j = s.jobs[i];
      scale[i] = ScaleFactor(j, c);
      if (scale[i] <= 0) continue;
      for (size_t t = 0; t < types; ++t) {
        if (scale[i] > capacity[t]) continue;
        option[i][t] = BestOption(j, static_cast<int>(t), scale[i], c);
      }
    }

    UpdateReceived(s);
    bool stale = s.change_seq != solved_seq_;
    for (size_t i = 0; i < s.jobs.size() && !stale; ++i) {
      stale = !allocation_.contains(s.jobs[i].key);
    }
    if (stale) {
      SolveAllocation(s, capacity, scale, option);
      solved_seq_ = s.change_seq;
    }

    // Priorities of every (job, type) pair the job can run on.
    struct Entry {
      size_t job;
      int type;
      double priority, deficit, x;
    };
    std::vector<Entry> entries;
    for (size_t i = 0; i < s.jobs.size(); ++i) {
      const JobView& j = s.jobs[i];
      const auto alloc_it = allocation_.find(j.key);
      const Usage& u = usage_[j.key];
      for (size_t t = 0; t < types; ++t) {
        if (option[i][t] < 0) continue;
        double x = alloc_it == allocation_.end() ? 0.0 : alloc_it->second[t];
        double received = u.received_s.empty() ? 0.0 : u.received_s[t];
        double priority;
        if (received > 0 && u.age_s > 0) {
          priority = x / (received / u.age_s);
        } else {
          priority = x > 0 ? kInfinity : 0.0;
        }
        entries.push_back({i, static_cast<int>(t), priority, x * u.age_s - received, x});
      }
    }
    std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
      if (a.priority != b.priority) return a.priority > b.priority;
      if (a.deficit != b.deficit) return a.deficit > b.deficit;
      return a.x > b.x;
    });

    // Greedy grants against per-type GPU counts.
    std::vector<int64_t> left = capacity;
    std::vector<int> granted(s.jobs.size(), -1);  // option index
    std::vector<size_t> order;                    // granted jobs, highest priority first
    for (const Entry& e : entries) {
      if (granted[e.job] >= 0) continue;
      const size_t t = static_cast<size_t>(e.type);
      if (scale[e.job] > left[t]) continue;
      left[t] -= scale[e.job];
      granted[e.job] = option[e.job][t];
      order.push_back(e.job);
    }

    // Keep unchanged grants, stop the rest, place the new ones.
    Decisions d;
    FreeMap free(c);
    for (size_t i = 0; i < s.jobs.size(); ++i) {
      const JobView& j = s.jobs[i];
      if (!j.running) continue;
      if (granted[i] >= 0 && granted[i] == j.alloc.option) continue;
      d.stop.push_back(j.key);
      free.Release(j.alloc.placement);
    }
    for (size_t i : order) {
      const JobView& j = s.jobs[i];
      if (j.running && granted[i] == j.alloc.option) continue;
      const RunOption& o = j.option(granted[i]);
      if (auto placement = free.Place(o.type, o.gpus, std::max<int64_t>(1, o.plan.tp))) {
        d.start.push_back({j.key, Allocation{granted[i], std::move(*placement)}});
      }
    }
    return d;
  }

 private:
  struct Usage {
    std::vector<double> received_s;  // per type, seconds run there since arrival
    double age_s = 0;                // seconds active (queued or running) under this policy
  };

  // Credits the time since the previous round: to every job its age, to running jobs their type.
  void UpdateReceived(const Snapshot& s) {
    const size_t types = s.cluster->types.size();
    const double dt = last_now_s_ >= 0 ? std::max(0.0, s.now_s - last_now_s_) : 0.0;
    std::unordered_map<int64_t, Usage> next;
    next.reserve(s.jobs.size());
    for (const JobView& j : s.jobs) {
      Usage u;
      if (auto it = usage_.find(j.key); it != usage_.end()) {
        u = std::move(it->second);
        u.age_s += dt;
      }
      u.received_s.resize(types, 0.0);
      if (j.running && j.alloc.option >= 0) {
        const double ran = std::min(dt, std::max(0.0, s.now_s - j.run_start_s));
        u.received_s[static_cast<size_t>(j.option(j.alloc.option).type)] += ran;
      }
      next.emplace(j.key, std::move(u));
    }
    usage_ = std::move(next);
    last_now_s_ = s.now_s;
  }

  void SolveAllocation(const Snapshot& s, const std::vector<int64_t>& capacity,
                       const std::vector<int64_t>& scale,
                       const std::vector<std::vector<int>>& option) {
    const size_t types = capacity.size();
    allocation_.clear();
    double total = 0;
    for (int64_t n : capacity) total += static_cast<double>(n);

    LinearProgram lp;
    lp.maximize = true;
    const int z = lp.AddVariable(0, kInfinity, 1, false);
    std::vector<std::vector<std::pair<int, double>>> per_type(types);
    std::vector<std::vector<int>> var(s.jobs.size(), std::vector<int>(types, -1));
    for (size_t i = 0; i < s.jobs.size() && total > 0; ++i) {
      const JobView& j = s.jobs[i];
      double equal_share = 0;
      for (size_t t = 0; t < types; ++t) {
        if (option[i][t] >= 0) {
          equal_share +=
              j.option(option[i][t]).plan.tokens_per_s * static_cast<double>(capacity[t]) / total;
        }
      }
      if (equal_share <= 0) continue;  // runs nowhere: left out (it would pin the min at 0)
      std::vector<std::pair<int, double>> norm_tput, one_type;
      for (size_t t = 0; t < types; ++t) {
        if (option[i][t] < 0) continue;
        const double tput = j.option(option[i][t]).plan.tokens_per_s;
        const int v = lp.AddVariable(0, 1, 0, false);
        var[i][t] = v;
        norm_tput.emplace_back(v, tput * static_cast<double>(scale[i]) / equal_share);
        one_type.emplace_back(v, 1.0);
        per_type[t].emplace_back(v, static_cast<double>(scale[i]));
      }
      norm_tput.emplace_back(z, -1.0);
      lp.AddRow(std::move(norm_tput), 0, kInfinity);  // z <= job's normalised throughput
      lp.AddRow(std::move(one_type), -kInfinity, 1);
    }
    for (size_t t = 0; t < types; ++t) {
      if (!per_type[t].empty()) {
        lp.AddRow(std::move(per_type[t]), -kInfinity, static_cast<double>(capacity[t]));
      }
    }
    auto solved = SolveLp(lp, kSolverTimeLimitS);
    for (size_t i = 0; i < s.jobs.size(); ++i) {
      std::vector<double> x(types, 0.0);
      for (size_t t = 0; t < types && solved.ok(); ++t) {
        if (var[i][t] >= 0) {
          x[t] = std::clamp(solved->values[static_cast<size_t>(var[i][t])], 0.0, 1.0);
        }
      }
      allocation_[s.jobs[i].key] = std::move(x);
    }
  }

  int64_t solved_seq_ = std::numeric_limits<int64_t>::min();
  double last_now_s_ = -1;
  std::unordered_map<int64_t, std::vector<double>> allocation_;  // X per job key, per type
  std::unordered_map<int64_t, Usage> usage_;
};

}  // namespace

std::unique_ptr<Policy> MakeGavelPolicy() { return std::make_unique<Gavel>(); }

}  // namespace frenzy
