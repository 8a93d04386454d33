// Policy: a scheduler reads a snapshot of the cluster and of the active jobs and returns
// decisions (which queued jobs start where, which running jobs stop); the caller — the
// simulator's engine or the daemon — applies them. A policy never does I/O, never reads a
// clock and never draws randomness it was not given, so the same code runs under the
// simulated clock and in production, and runs are deterministic.
//
// Jobs choose among RunOptions (sched/job_options.h): a GPU type, a GPU count and the layout
// the planner found for them. Which option table a job's view carries depends on the policy
// (options_kind): Frenzy offers MARP's memory-safe table; baselines that run what users ask for
// get the hand-tuned one.
#ifndef FRENZY_SCHED_POLICY_H_
#define FRENZY_SCHED_POLICY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "sched/job_options.h"

namespace frenzy {

struct Cluster;
class GpuCatalog;

// A node as policies see it.
struct NodeView {
  int type = 0;      // index into ClusterView::types
  int64_t gpus = 0;  // GPUs on the node
  int64_t free = 0;  // GPUs not allocated (0 when down)
  bool up = true;
};

// Where a job runs: one of its options, and how many GPUs on which nodes.
struct Allocation {
  int option = -1;                                 // index into JobOptions::options
  std::vector<std::pair<int, int64_t>> placement;  // (node index, GPUs on it)
};

struct ClusterView;

struct JobView {
  int64_t key = 0;  // stable handle (the job's index in the workload)
  std::string id;
  double submit_s = 0;
  int64_t priority = 0;
  const JobOptions* options = nullptr;  // the table this policy chooses from
  // The user's own request (GPU type and count) as an option of `options`; -1 when the job
  // has none or the cluster lacks the type or count.
  int requested_option = -1;
  // The known ratio of the job's real peak memory to MARP's prediction, when something knows
  // it: a profiling run (policies with uses_profiled_memory) or the runtime's memory monitor,
  // which learns it from the job's own memory reports (policies with uses_runtime). Unset:
  // unknown, the option table's margin is all there is.
  std::optional<double> memory_factor;
  // Per GPU type (cluster order): the job's real speed over the throughput model's prediction,
  // as the runtime learned it from the job's progress (runtime/speed.h; policies with
  // uses_runtime); 0 or absent: not known there.
  std::vector<double> speed_factor;

  double total_tokens = 0;
  double done_tokens = 0;        // progress kept at `progress_since_s` (checkpointed or not)
  double progress_since_s = 0;   // when the current rate began (after the restart pause)
  double rate_tokens_per_s = 0;  // 0 when not running (or while restarting)

  bool running = false;
  Allocation alloc;                 // valid when running
  int layout = 0;                   // valid when running: 0 = the option's plan, k = leaner[k-1]
  double run_start_s = -1;          // start of the current run
  double first_start_s = -1;        // -1 until the job first ran
  double attained_gpu_s = 0;        // GPU-seconds of service received so far (without current run)
  int restarts = 0;                 // times it was stopped and started again
  int ooms = 0;                     // out-of-memory crashes so far
  std::vector<int> failed_options;  // options that crashed out of memory; never offer again

  const RunOption& option(int i) const { return options->options[static_cast<size_t>(i)]; }
  bool Failed(int option_index) const;
  // The layout of an option this job would run: without a memory_factor, 0 (the option's own
  // plan); with one, the fastest of the option's plan and its leaner layouts whose device memory
  // times the factor fits the GPU, or -1 when none does.
  int Layout(int option_index, const ClusterView& cluster) const;
  // The plan of (option, layout) as returned by Layout.
  const Plan& PlanOf(int option_index, int layout_index) const;
  // An option that can be run: it exists, has not crashed, has a speed, and some layout of it
  // fits the GPU with the job's memory_factor (Layout >= 0).
  bool Runnable(int option_index, const ClusterView& cluster) const;
  // Tokens done by `now` (extrapolating the current run).
  double DoneAt(double now_s) const;
  // GPU-seconds received by `now`, including the current run.
  double AttainedAt(double now_s) const;
};

struct ClusterView {
  std::vector<std::string> types;         // GPU type names, cluster order
  std::vector<int64_t> gpu_memory_bytes;  // per type
  std::vector<int64_t> gpus_per_node;     // per type (largest node)
  std::vector<NodeView> nodes;            // cluster order; all up and free
  int64_t TotalOfType(int type) const;
  int64_t FreeOfType(int type) const;
  // The view of a cluster: its GPU types in order of first appearance (the order of every
  // option table's types), each with its memory from `catalog`. kNotFound names a node whose
  // GPU type the catalog lacks.
  static Result<ClusterView> Of(const Cluster& cluster, const GpuCatalog& catalog);
};

// What a restart costs, from the job: a start after the first pays, without progress, the
// process start-up (launch, NCCL rendezvous, data loader) plus loading its checkpoint (weights and
// optimizer state, JobOptions::checkpoint_bytes) from storage. Defaults (docs/simulator.md):
// 30 s of start-up, and 2.5 GB/s from storage — about the 20 Gb/s per machine to remote
// persistent storage that Gemini (Wang et al., SOSP 2023) reports for training clusters; with
// them a 7B model in bf16 with Adam (98 GB) restarts in 69 s and a 125M one in 31 s, inside the
// 25-250 s that Sia (SOSP 2023) measured per model. The one model: the simulator, the daemon and
// the CLI start from it, and the policies and the runtime read the one in force from the
// snapshot (Snapshot::costs).
inline constexpr double kDefaultStartupS = 30;
inline constexpr double kDefaultStorageGbs = 2.5;
struct RestartModel {
  double startup_s = kDefaultStartupS;
  double storage_gbs = kDefaultStorageGbs;  // GB/s (1e9 bytes) for one job's checkpoint load
  double fixed_s = -1;  // >= 0: every restart costs exactly this, whatever the job
  // Seconds a restart of a job with a checkpoint of `checkpoint_bytes` pays.
  double Of(int64_t checkpoint_bytes) const {
    if (fixed_s >= 0) return fixed_s;
    return startup_s + static_cast<double>(checkpoint_bytes) / (storage_gbs * 1e9);
  }
};

// What the world charges for the decisions a policy prices, from one source: the simulator's
// options or the daemon's.
struct Costs {
  RestartModel restart;
};

// A read-only list of jobs: either a contiguous array of views or an array of pointers to
// views (what the engine keeps, so that finishing a job moves pointers, not views). Indexing
// and iteration yield `const JobView&` either way.
class JobList {
 public:
  JobList() = default;
  JobList(std::span<const JobView> views) : views_(views.data()), n_(views.size()) {}  // NOLINT
  JobList(const std::vector<JobView>& views)  // NOLINT: implicit by design
      : views_(views.data()), n_(views.size()) {}
  JobList(std::span<const JobView* const> pointers)  // NOLINT: implicit by design
      : pointers_(pointers.data()), n_(pointers.size()) {}

  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  const JobView& operator[](size_t i) const { return pointers_ ? *pointers_[i] : views_[i]; }

  class Iterator {
   public:
    Iterator(const JobList* list, size_t i) : list_(list), i_(i) {}
    const JobView& operator*() const { return (*list_)[i_]; }
    const JobView* operator->() const { return &(*list_)[i_]; }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator==(const Iterator& o) const { return i_ == o.i_; }
    bool operator!=(const Iterator& o) const { return i_ != o.i_; }

   private:
    const JobList* list_;
    size_t i_;
  };
  Iterator begin() const { return Iterator(this, 0); }
  Iterator end() const { return Iterator(this, n_); }

 private:
  const JobView* views_ = nullptr;
  const JobView* const* pointers_ = nullptr;
  size_t n_ = 0;
};

struct Snapshot {
  double now_s = 0;
  const ClusterView* cluster = nullptr;
  // Queued and running jobs, in arrival order (then key).
  JobList jobs;
  // Increases whenever the set of jobs or of usable GPUs changes (arrival, completion, crash,
  // failure, repair); policies may cache work done for an unchanged value.
  int64_t change_seq = 0;
  Costs costs;
};

struct Decisions {
  std::vector<int64_t> stop;  // running jobs to stop (they checkpoint and return to the queue)
  // Jobs to start, applied in order after the stops. A running job listed here without being
  // stopped first is moved (stopped and restarted on the new allocation); every mover leaves its
  // GPUs before the first start takes any.
  std::vector<std::pair<int64_t, Allocation>> start;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  virtual OptionKind options_kind() const = 0;
  // True for policies that measure jobs before placing them (Gavel, Sia profile throughput):
  // their job views carry memory_factor.
  virtual bool uses_profiled_memory() const { return false; }
  // True for policies run with Frenzy's runtime (src/runtime): the caller feeds the jobs' memory
  // reports to a memory monitor, sets memory_factor from what it learned, and applies its
  // actions (re-plan, move, requeue before an out-of-memory crash; safer plans after one).
  virtual bool uses_runtime() const { return false; }
  // True for policies that place jobs over several GPU types at once: their kMarp option
  // tables also hold mixed options (RunOption::parts; planner/mixed.h).
  virtual bool mixed_options() const { return false; }
  // Called after every batch of simultaneous events (arrival, completion, crash, failure).
  virtual bool event_driven() const { return true; }
  // > 0: also called every round_s seconds while jobs are active (round-based policies).
  virtual double round_s() const { return 0; }
  virtual Decisions Schedule(const Snapshot& snapshot) = 0;
};

// The policies by name: "fifo-static", "tiresias", "gavel", "sia" (and later ones).
Result<std::unique_ptr<Policy>> MakePolicy(std::string_view name);
std::vector<std::string> PolicyNames();

}  // namespace frenzy

#endif  // FRENZY_SCHED_POLICY_H_
