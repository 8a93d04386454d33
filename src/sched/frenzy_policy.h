// frenzy: Frenzy's heterogeneity-aware scheduling (HAS). Event-driven, no solver in the loop.
// It uses what only Frenzy has: MARP's memory-safe option table per job (every (GPU type,
// count) where the job fits with the safety margin, with its predicted speed) and the job's
// predicted remaining time. The algorithm, its complexity and its knobs: docs/scheduling.md.
#ifndef FRENZY_SCHED_FRENZY_POLICY_H_
#define FRENZY_SCHED_FRENZY_POLICY_H_

#include <memory>
#include <string>

#include "sched/policy.h"

namespace frenzy {

// Each ingredient can be switched off (for the ablation in bench/RESULTS.md).
struct FrenzyKnobs {
  // Choose among MARP's memory-safe options; off: among the hand-tuned ones (what users would
  // run, which may crash out of memory), to measure what memory awareness is worth.
  bool memory_aware = true;
  // Run with Frenzy's runtime (src/runtime): jobs' memory reports correct their memory factor,
  // jobs projected to run out of memory are re-planned, moved or requeued before they crash,
  // and a crash is recovered with a safer plan. Off: an out-of-memory crash only marks the
  // option that crashed as failed.
  bool dynamic_memory = true;
  // Order waiting jobs by predicted remaining time (shortest first); off: arrival order.
  bool shortest_first = true;
  // Choose the GPU type by predicted speed and by what the choice costs other waiting jobs
  // (scarce GPU types are kept for jobs that fit nowhere else); off: first type with room.
  bool hetero_choice = true;
  double value_weight = 1.0;  // exponent of a type's value in the choice
  // Choose the GPU count: as many as still scale well (per-GPU speed at least
  // `efficiency_floor` of the best per-GPU speed); off: the fewest GPUs that fit.
  bool elastic_count = true;
  // Start every job on its most GPU-efficient option even when nobody else waits (it grows by
  // moving when GPUs stay free).
  bool start_small = true;
  double efficiency_floor = 0.8;
  // Start any waiting job that fits now, behind a blocked one (backfilling); a job waiting longer
  // than `starve_factor` x its predicted run time (at least `starve_min_s`) reserves GPUs so
  // that later jobs cannot starve it. Off: strict order, the first blocked job stops the round.
  bool backfill = true;
  double starve_factor = 2.0;
  double starve_min_s = 3600;
  // > 0: do not start a job on an option more than `max_slowdown` x slower than its fastest
  // one unless it has waited that long already. Off by default: waiting for fast GPUs instead of
  // starting now raised the average JCT on lab-synthetic from 5.8 h to 9.2 h (bench/RESULTS.md).
  double max_slowdown = 0;
  // Move a running job to free GPUs where it finishes sooner when nobody is waiting for them and
  // the remaining time drops below `move_gain` x the current one, restart included.
  bool move = true;
  // Also move while jobs wait, onto GPUs none of them could take in this decision.
  bool move_while_waiting = true;
  double move_gain = 0.7;
  // > 0: also decide every round_s seconds (moves and preemptions need no event to pay off).
  double round_s = 0;
  // Preempt (shortest remaining time first): a waiting job that fits nowhere now may shrink or
  // stop running jobs whose remaining time is over `preempt_ratio` x its own run time and that have
  // run at least `preempt_min_run_s` since they last started; they checkpoint and wait.
  bool preempt = true;
  double preempt_ratio = 4.0;
  double shrink_ratio = 1.0;  // a running job shrinks (to its next smaller count) for a shorter one
  double preempt_min_run_s = 1800;
};

// `name` is what reports call it ("frenzy", or an ablation's name).
std::unique_ptr<Policy> MakeFrenzyPolicy(FrenzyKnobs knobs = {}, std::string name = "frenzy");

}  // namespace frenzy

#endif  // FRENZY_SCHED_FRENZY_POLICY_H_
