// JobOptions: the ways one job can run on a cluster — for every GPU type and GPU count, the
// fastest layout the planner finds that fits in memory — so that schedulers choose among
// (GPU type, count) pairs without calling the planner in their inner loops.
//
// Two tables are built per job, with different knowledge of memory:
//  * kMarp: layouts whose MARP-predicted device memory fits with the planner's safety margin
//    (what Frenzy offers a scheduler); for a job that fits nowhere with it, those that fit with
//    half the margin, else with none (it would otherwise never run; the runtime watches it);
//  * kHand: what a user tuning by hand would run — the fastest layout whose predicted memory
//    fits with no margin at all, and where nothing fits, the plain data-parallel layout (micro-
//    batch 1, no recomputation, TP = PP = 1) whatever its memory: the job that will crash.
// Whether an option really fits is decided elsewhere (the simulator's memory truth).
//
// Building a table costs two planner passes (milliseconds); OptionCache shares tables between
// jobs with the same (model, global batch, sequence length, precision).
#ifndef FRENZY_SCHED_JOB_OPTIONS_H_
#define FRENZY_SCHED_JOB_OPTIONS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "common/status.h"
#include "hardware/cluster.h"
#include "hardware/gpu.h"
#include "planner/planner.h"

namespace frenzy {

// One way to run a job.
struct RunOption {
  int type = 0;          // index into JobOptions::types (the cluster's GPU types)
  int64_t gpus = 0;      // GPUs used (TP x PP x CP x DP)
  Plan plan;             // the layout; plan.tokens_per_s is the predicted speed
  bool fits_prediction;  // predicted device memory fits the GPU (kHand may hold false ones)
  // kMarp only: slower layouts on the same GPUs that need less device memory (more
  // recomputation, a smaller micro-batch, more TP/PP, a higher ZeRO stage), each leaner than the
  // one before — what the runtime re-plans to when a job needs more memory than predicted.
  std::vector<Plan> leaner;
  // A mixed option (planner/mixed.h, issue 19): the GPUs it takes of each type, (type, GPUs) in
  // the plan's order; empty for a single-type option. Then `type` is the type of its tightest
  // part (the largest share of its GPU's memory predicted), `plan.device_bytes` and
  // `plan.gpu_memory_bytes` that part's, `plan.gpu` the types joined with '+', `plan.tp` the TP
  // every part keeps inside a node, and `gpus` the total.
  std::vector<std::pair<int, int64_t>> parts;
  bool mixed() const { return !parts.empty(); }
};

struct JobOptions {
  std::vector<std::string> types;  // the cluster's GPU types, in cluster order
  // What a checkpoint of the job holds, whatever the layout: its weights in the training
  // precision plus AdamW's state (fp32 master weights in mixed precision, two moments) — what a
  // restart loads (RestartModel).
  int64_t checkpoint_bytes = 0;
  // The single-type options sorted by (type, gpus), at most one per pair; then the mixed ones
  // (RunOption::parts), fastest first. Find, Fastest and OfType see single-type options only.
  std::vector<RunOption> options;

  // The option for exactly (type, gpus), or nullptr.
  const RunOption* Find(int type, int64_t gpus) const;
  // The fastest option of a type (ties: fewer GPUs), or nullptr when the type has none.
  const RunOption* Fastest(int type) const;
  // Options of one type, fewest GPUs first.
  std::vector<const RunOption*> OfType(int type) const;
};

enum class OptionKind { kMarp, kHand };

// The bytes of a checkpoint of `job` (JobOptions::checkpoint_bytes).
int64_t CheckpointBytes(const JobSpec& job);

// The option table of `job` (its model, tokens, batch, sequence length and precision; GPU pins
// are ignored) on `cluster`. Counts are limited to what the cluster has of each type.
// `margin` is the MARP safety margin used for kMarp. With `mixed` (kMarp only) the table also
// holds plans over several types: the fastest heterogeneous data-parallel plan of each
// composition (GPUs per type), and heterogeneous pipelines when no single type holds the job
// with the margin, at most kMaxMixedOptions (found with the whole margin).
inline constexpr size_t kMaxMixedOptions = 12;
Result<JobOptions> BuildJobOptions(const JobSpec& job, const Cluster& cluster,
                                   const GpuCatalog& catalog, OptionKind kind, double margin,
                                   bool mixed = false);

// Caches option tables by (model name, global batch, seq len, precision, kind, and the
// framework with the layouts it can run, optimizer and fine-tuning method with its adapter). Thread-safe: a
// table is built outside the cache's lock (building one can take seconds for a large model), so
// a slow build never holds up lookups of tables already built; two threads building the same
// table both build it and the first to finish is kept.
class OptionCache {
 public:
  OptionCache(const Cluster& cluster, const GpuCatalog& catalog, double margin)
      : cluster_(cluster), catalog_(catalog), margin_(margin) {}
  // `model_key` identifies the architecture (the workload's model column). Tokens only scale
  // total time, so they are not part of the key: callers use plan.tokens_per_s.
  Result<std::shared_ptr<const JobOptions>> Get(const std::string& model_key, const JobSpec& job,
                                                OptionKind kind, bool mixed = false);
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cache_.size();
  }

 private:
  mutable std::mutex mu_;
  const Cluster& cluster_;
  const GpuCatalog& catalog_;
  double margin_;
  std::map<std::tuple<std::string, int64_t, int64_t, int, int, std::string, bool>,
           std::shared_ptr<const JobOptions>>
      cache_;
};

}  // namespace frenzy

#endif  // FRENZY_SCHED_JOB_OPTIONS_H_
