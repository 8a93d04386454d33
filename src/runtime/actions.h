// Dynamic memory optimisation: what to do with a job whose memory is about to run out, and with
// one that has run out.
//
// Before a crash (PlanMemoryActions): for every running job the monitor projects to exceed its
// GPU's memory within `act_horizon_s` (its trend extrapolated; the job's progress rate gives the
// time), the action that finishes it soonest, restart included:
//   * kReplan — the same GPUs, a leaner layout of the same option (more recomputation, smaller
//     micro-batch, more TP/PP, a higher ZeRO stage) that fits the projected need;
//   * kMove — other GPUs free now where a layout fits: more memory per GPU, or more GPUs of the
//     same type (growing the job);
//   * kRequeue — nothing fits now: the job checkpoints and waits, and the scheduler places it
//     with its corrected memory factor.
// And the reverse: a job running a leaner layout than its observed memory needs goes back to a
// faster layout on the same GPUs when the time saved is worth `reverse_gain` restarts.
//
// After a crash (RecoverFromOom): the monitor raises the job's factor past what crashed, so the
// same layout is never retried; the job is given up, with a message saying what it needs and
// what the cluster has, after `max_ooms` crashes or when no layout on the cluster fits any more.
//
// Pure functions of their inputs, shared by the simulator and the daemon.
#ifndef FRENZY_RUNTIME_ACTIONS_H_
#define FRENZY_RUNTIME_ACTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/monitor.h"
#include "sched/policy.h"

namespace frenzy::runtime {

struct RuntimeOptions {
  double act_horizon_s = 900;  // act when a crash is projected sooner than this
  // What a restart costs is the snapshot's (Snapshot::costs), like every cost a policy prices.
  int max_ooms = 5;            // crashes before a job is given up
  double reverse_gain = 3;     // restarts' worth of time a faster layout must save
};

enum class ActionKind { kReplan, kMove, kRequeue };
const char* ActionKindName(ActionKind k);

struct MemoryAction {
  int64_t job = 0;  // key
  ActionKind kind = ActionKind::kRequeue;
  Allocation alloc;  // kReplan, kMove: where it restarts
  int layout = 0;    // kReplan, kMove: which layout of alloc.option
  double factor = 1;  // the memory factor it was chosen with
  double time_to_oom_s = 0;
  double expected_left_s = 0;  // remaining time with the action, restart included
  std::string why;
};

// Seconds until the job's current run is projected to run out of memory (0: it already has;
// infinity: not before it ends). REQUIRES: the job is running.
double TimeToOom(const JobView& job, const JobMemory& memory, const ClusterView& cluster,
                 double now_s);

// Actions for the running jobs of `snapshot`: the reverse ones (which keep their GPUs) first,
// then the urgent ones, most urgent first. The GPUs a move takes are taken in that order.
std::vector<MemoryAction> PlanMemoryActions(const Snapshot& snapshot, const MemoryMonitor& monitor,
                                            const RuntimeOptions& options);

struct OomRecovery {
  bool give_up = false;
  double factor = 1;    // what the job is planned with from now on
  std::string message;  // why it is given up, or what it will do
};
// Call after MemoryMonitor::ReportOom for the crash. `job` is the job's view (its failed options
// and ooms as before the crash).
OomRecovery RecoverFromOom(const JobView& job, const MemoryMonitor& monitor,
                           const ClusterView& cluster, const RuntimeOptions& options);

}  // namespace frenzy::runtime

#endif  // FRENZY_RUNTIME_ACTIONS_H_
