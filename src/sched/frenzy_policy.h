// frenzy: Frenzy's heterogeneity-aware scheduling (HAS). No solver in the loop.
// It uses what only Frenzy has: MARP's memory-safe option table per job (every (GPU type,
// count) where the job fits with the safety margin, with its predicted speed) and the job's
// predicted remaining time. Every decision re-plans every job's GPUs with the allocation core
// (sched/has_core.h: a marginal-gain greedy for the least mean JCT, restarts priced in), keeps
// what did not change, and places the rest. The algorithm, its complexity and the ablation:
// docs/scheduling.md.
#ifndef FRENZY_SCHED_FRENZY_POLICY_H_
#define FRENZY_SCHED_FRENZY_POLICY_H_

#include <memory>
#include <string>

#include "sched/has_core.h"
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
  // Offer jobs mixed options (one job over several GPU types, planner/mixed.h): a job the core
  // leaves waiting starts on the fastest mixed option that the GPUs left free hold, and keeps it
  // until it ends or the runtime moves it. Off: single-type options only.
  bool mixed = true;
  // The allocation core's own switches and constants (sched/has_core.h).
  CoreKnobs core;
  // A running job keeps its option for at least `residence` x the restart cost after it
  // (re)started: what changes cost in restart pauses stays under 1 / residence of the GPU time.
  double residence = 10;
  // Also decide every round_s seconds, not only at events: progress shortens running jobs'
  // remaining time, which can make a re-allocation pay (docs/scheduling.md measures it).
  double round_s = 300;
};

// `name` is what reports call it ("frenzy", or an ablation's name).
std::unique_ptr<Policy> MakeFrenzyPolicy(FrenzyKnobs knobs = {}, std::string name = "frenzy");

}  // namespace frenzy

#endif  // FRENZY_SCHED_FRENZY_POLICY_H_
