// The allocation core of HAS (Frenzy's scheduler, docs/scheduling.md): from every active job's
// remaining work and its memory-safe options, which option (GPU type and count) each job should
// hold now. No solver: a marginal-gain greedy on one objective.
//
// Objective: maximise the sum over jobs of 1 / T_j, T_j the job's predicted remaining time on the
// option it gets (a job without GPUs contributes 0). With linear speed-up this is shortest
// remaining time first (all GPUs to the shortest job); with concave speed-up it spreads GPUs so
// that the last GPU of every job buys the same gain — the allocation heSRPT and AFS derive for
// mean JCT. Restarts are priced into T_j: an option other than the one a job runs on costs its
// restart, so a running job changes only when that pays over its remaining time (with the
// policy's residence, the only hysteresis: an extra margin on top measured no difference,
// docs/scheduling.md).
//
// Greedy (lazy, with a max-heap): every job proposes its best step — from what it holds to a
// larger option of its type or to an option of another type — scored by the gain in 1 / T per
// GPU the step takes; the best step in the cluster is granted, the job proposes its next one; a
// step that no longer fits is re-proposed against what is left. Each grant raises one job's
// 1 / T, so the loop ends; it makes at most one grant per (job, option). A job's first step on a
// type is its most GPU-efficient option there (the highest gain per GPU); it grows while its
// next GPUs gain more than any other job's, and a running job shrinks or stops when others gain
// more from its GPUs (shortest remaining time first, elastic).
//
// Fallback: a first step's gain counted from nothing overstates what a contended type is worth
// to a job that would run nearly as fast on GPUs nobody else wants. When the greedy leaves GPUs
// free, it runs once more with every first step scored by its gain over the job's fallback (its
// best 1 / T on those free GPUs, on another type): the contended GPUs go to the jobs that lose
// most without them. On a full cluster there is no fallback, and where no step found its GPUs
// taken there was no contention: the first pass stands. A first step's key is its gain over the
// fallback when it was proposed; if others take that fallback later, the key is not raised
// (lazy keys may only fall), so the job may be served later than its gain deserves.
//
// Type swap (comparative advantage): then every job holding GPUs that would run faster on what
// another job holds of another type trades places with the one whose trade shortens the pair's
// summed completion time most (both finish, the first to end leaving its GPUs to the other).
//
// Mixed options (RunOption::parts, after a table's single-type ones): GPUs of several types at
// once. A job holding nothing (or a mixed option) may step to one, scored as any step (gain in
// 1 / T per GPU taken) when every part fits what is left; it does not grow there, and the type
// swap leaves mixed options out.
//
// Cost for J jobs with at most K options: O(J K) for the first proposals, O(S (K + log J)) for S
// grants and re-proposals (S <= J K; in practice a few per job), twice with a fallback pass (only
// when GPUs are left free and some step found its GPUs taken), and O(P K log P + M) for the swap
// (P jobs holding GPUs, M candidate pairs). No iteration to convergence.
#ifndef FRENZY_SCHED_HAS_CORE_H_
#define FRENZY_SCHED_HAS_CORE_H_

#include <compare>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "sched/job_options.h"

namespace frenzy {

// One job as the core sees it.
struct CoreJob {
  const JobOptions* options = nullptr;
  // Per option of `options`: its speed in tokens/s if the job may run it (memory-safe, not
  // crashed), else 0. Owned by the caller.
  std::span<const double> speed;
  double remaining_tokens = 0;
  int current = -1;            // the option it runs on; -1: none
  bool pinned = false;         // keeps `current` whatever happens (e.g. in its restart pause)
  double restart_s = 0;        // added to T on any option but `current` (0: a first start)
  double current_extra_s = 0;  // added to T on `current` (what is left of a restart pause)
  int64_t order = 0;           // ties: lower first (arrival)
  // Jobs with the same class >= 0 have identical `speed` rows (the core then shares work
  // between them); -1: unknown.
  int64_t speed_class = -1;
};

struct CoreKnobs {
  // Weigh steps by the job's remaining time (1 / T); off: by arrival (first come, first served;
  // a job's growth still by its marginal gain).
  bool shortest_first = true;
  // Jobs may hold more than their smallest option of a type; off: only the smallest.
  bool elastic = true;
  // Running jobs may lose their GPUs (stop or shrink) to others; off: they keep at least what
  // they hold.
  bool preempt = true;
  // Running jobs may change option (grow, shrink, change type); off: they keep theirs or stop.
  bool move = true;
  // When the greedy leaves GPUs free, a second pass scores a job's first step by its gain over
  // its fallback, the best it would get on those free GPUs (what taking a contended type is
  // worth to it); off: by its whole gain, as if it had nowhere else to go.
  bool fallback = true;
  // After the greedy, jobs trade GPU types where that shortens the pair's summed completion time
  // (comparative advantage); off: the greedy's choice stands.
  bool swap_types = true;
  // A job grows on its type only by steps whose every added GPU brings at least this fraction
  // of the tokens/s per GPU the job already gets (0: any gain will do). Below it a GPU is worth
  // more left free: the next arrival gets it without waiting for a grown job's residence or a
  // restart, and it would cost GPU-hours for little time saved (docs/scheduling.md measures it).
  double growth_floor = 0.5;
};

// The core with its working memory, kept between decisions (a decision then reallocates little).
class AllocationCore {
 public:
  // The option each job should hold (index into its options, -1: none), given `capacity` GPUs
  // per type (cluster order; pinned jobs' GPUs must not be counted in it). The result is valid
  // until the next call.
  const std::vector<int>& Allocate(std::span<const CoreJob> jobs, std::span<const int64_t> capacity,
                                   const CoreKnobs& knobs);

  struct Step {
    double key = 0;
    size_t job = 0;
    int option = -1;
    int64_t version = 0;
    bool operator<(const Step& o) const;  // heap order: higher key, then lower job index, first
  };

 private:
  double T(size_t i, int o) const;
  double Inv(size_t i, int o) const { return inv_t_[first_[i] + static_cast<size_t>(o)]; }
  int64_t Need(size_t i, int o) const;
  bool Fits(size_t i, int o) const;
  bool Mixed(size_t i, int o) const { return static_cast<size_t>(o) >= single_[i]; }
  void Seed();
  void Greedy();
  // One job's side of a pair of jobs in the type swap, on one of its options: what PairSum
  // reads (its T, its run time without pauses, its restart), computed once per (job, option).
  struct Side {
    int option = -2;  // -1: none; -2: not looked up yet (on_slot_)
    double t = 0;
    double run = 0;
    double inv_run = 0;  // 1 / run (0 when run is)
    double restart_s = 0;
  };
  Side SideOf(size_t i, int o) const;
  static double PairSum(const Side& pa, const Side& alt_a, const Side& pb, const Side& alt_b);
  bool Allowed(size_t i, int o) const;
  void Propose(size_t i);
  Step BestStep(size_t i);
  bool GrowthPays(const CoreJob& j, int from, size_t to, int64_t added, int64_t held) const;
  int Same(size_t i, int type, int64_t gpus) const;
  int Row(size_t i, int type, int64_t gpus) const;
  void SwapTypes();
  void Grant(size_t i, int o);

  std::span<const CoreJob> jobs_;
  const CoreKnobs* k_ = nullptr;
  std::vector<int64_t> cap_;
  std::vector<int> choice_;
  std::vector<int64_t> version_;
  std::vector<int64_t> smallest_;  // per (job, type): GPUs of its smallest usable option
  std::vector<size_t> first_;      // per job: its first row in the flat tables below
  std::vector<size_t> single_;     // per job: its single-type options (the mixed ones follow)
  std::vector<double> inv_t_;      // per (job, option): 1 / T, 0 where it may not run
  std::vector<int64_t> gpus_;  // per (job, option): its GPUs
  std::vector<int> type_;      // per (job, option): its type
  struct Columns {
    size_t first;   // its first row in col_type_ and col_gpus_
    size_t single;  // its single-type options
  };
  std::unordered_map<const JobOptions*, Columns> tables_;  // this decision's option tables
  std::vector<int> col_type_;
  std::vector<int64_t> col_gpus_;
  std::vector<size_t> col_run_end_;  // per single-type row: the end of its type's run
  std::vector<size_t> table_col_;    // per job: its table's first row in the columns
  std::vector<Step> heap_;
  bool contended_ = false;  // a step of the last greedy pass found its GPUs taken
  std::vector<int64_t> idle_;        // second pass: the GPUs per type the first pass left free
  std::vector<double> best_on_;      // a proposal's scratch: its best 1 / T per type on them
  struct Holder {  // the type swap's view of a job holding GPUs
    int type;
    int64_t gpus;
    size_t job;
    auto operator<=>(const Holder&) const = default;
  };
  std::vector<Holder> held_;
  struct Slot {  // a (type, GPUs) run of held_ (entries [begin, end))
    int type;
    int64_t gpus;
    size_t begin, end;
  };
  std::vector<Slot> slots_;    // in held_'s order: by type, then GPUs
  std::vector<size_t> slot_;   // per entry of held_: its (type, GPUs) run's number
  std::vector<size_t> holder_;  // per job holding GPUs: its entry in held_ before any trade
  std::vector<Side> on_slot_;  // per (slot, holder): the job's side there (option -1: none)
  std::vector<Side> now_;      // per entry of held_: its job's side on what it holds
  std::unordered_map<int64_t, int> first_step_;  // per speed class: its best first start
};

// One-off form of AllocationCore::Allocate.
std::vector<int> AllocateGpus(std::span<const CoreJob> jobs, std::vector<int64_t> capacity,
                              const CoreKnobs& knobs);

}  // namespace frenzy

#endif  // FRENZY_SCHED_HAS_CORE_H_
