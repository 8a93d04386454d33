// Applying a policy's decisions: the one place that checks them and turns them into stops,
// starts and moves, for the simulator's engine, the daemon and the tests alike.
//
// ApplyDecisions validates every decision against the snapshot the policy decided on — the job
// exists and (for a stop) runs, the option exists, the nodes exist, are up, are of the option's
// GPU type and have the GPUs free once the decisions before it are applied, the placement adds
// up to the option's GPU count, no job is started twice — and hands each one to a
// DecisionTarget in order: stops first, then the moves' stops (a start of a running job is a
// move: all movers leave their GPUs before any start, so a job may move onto GPUs another mover
// leaves), then the starts in order. A decision that fails validation is a policy bug: kInternal, naming the policy,
// the job and what is wrong, and nothing after it is applied.
//
// What a stop or start means is the target's: the engine advances its simulated world, the
// daemon cancels and launches runs (and may find a decision stale because the world moved on
// while the policy thought; it skips those), the tests update plain JobViews (ViewsTarget).
#ifndef FRENZY_SCHED_APPLY_H_
#define FRENZY_SCHED_APPLY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sched/policy.h"

namespace frenzy {

class DecisionTarget {
 public:
  virtual ~DecisionTarget() = default;
  // The job as the policy saw it; nullptr when the snapshot had no such job.
  virtual const JobView* Find(int64_t key) const = 0;
  // Stops a running job gracefully: it checkpoints and returns to the queue (`move`: to be
  // started again in this decision, by a Start that follows).
  virtual Status Stop(const JobView& job, double now_s, bool move) = 0;
  // Starts a queued job (a running one was stopped just before: a move).
  virtual Status Start(const JobView& job, const Allocation& alloc, double now_s) = 0;
};

// REQUIRES: `cluster` is the snapshot's cluster (what the policy decided on).
Status ApplyDecisions(const Decisions& decisions, const ClusterView& cluster,
                      std::string_view policy, double now_s, DecisionTarget& target);

// Why `alloc` cannot be placed for `job` on `cluster` as it is now (its free GPUs), or "" when it
// can: the check ApplyDecisions makes of each start, for callers placing a job themselves (the
// runtime's memory actions).
std::string CheckAllocation(const JobView& job, const Allocation& alloc, const ClusterView& cluster);

// The layout a start runs when nobody chose one: the fastest the job's memory factor allows
// (JobView::Layout, 0 without a factor or when none fits) whose TP groups stay inside the nodes
// of the placement. The engine and the daemon launch with it.
int ChooseLayout(const JobView& job, const Allocation& alloc, const ClusterView& cluster);

// A target over plain views (what a test or a benchmark of a policy needs): a stop frees the
// job's GPUs in `cluster`; a start takes them and sets the view as the engine does (running,
// allocation, run start, first start, restarts). Progress, rates and attained service are left
// as the caller set them: there is no clock.
class ViewsTarget : public DecisionTarget {
 public:
  ViewsTarget(ClusterView& cluster, std::vector<JobView>& jobs) : cluster_(cluster), jobs_(jobs) {}
  const JobView* Find(int64_t key) const override;
  Status Stop(const JobView& job, double now_s, bool move) override;
  Status Start(const JobView& job, const Allocation& alloc, double now_s) override;

 private:
  JobView& Mutable(const JobView& job);
  ClusterView& cluster_;
  std::vector<JobView>& jobs_;
};

}  // namespace frenzy

#endif  // FRENZY_SCHED_APPLY_H_
