// tiresias: discretized two-dimensional least-attained-service (2D-LAS) scheduling, after Gu et
// al., "Tiresias: A GPU Cluster Manager for Distributed Deep Learning" (NSDI 2019), §4.
//
// A job's attained service is GPUs x time received so far. Jobs sit in K priority queues by
// attained service (thresholds below); within a queue, first come first served. Every decision
// walks the queues in priority order and admits jobs while GPUs remain; running jobs that fall
// out of the admitted set are preempted (they checkpoint and wait). Tiresias is heterogeneity-
// unaware: a job gets the GPU count its user asked for, on whichever GPU type has room first
// (in cluster order), with the user's hand-tuned layout for that type — and, with no memory
// model, that layout may crash out of memory on a smaller GPU, after which that (type, count)
// is never retried; when every type has crashed at that count, the user doubles the GPUs.
//
// Simplified: the paper's starvation guard (promotion back to the top queue after waiting
// STARVE_LIMIT x the last run time) and its placement-sensitivity profiling (consolidated vs
// spread placement) are left out; placement is the shared gang placement (fewest nodes).
// Thresholds: two demotions, at 1 and 10 GPU-hours of attained service.
#include <algorithm>

#include "sched/baselines.h"
#include "sched/placement.h"

namespace frenzy {
namespace {

constexpr double kThresholdsGpuS[] = {3600.0, 36000.0};

int QueueOf(double attained_gpu_s) {
  int q = 0;
  for (double t : kThresholdsGpuS) {
    if (attained_gpu_s >= t) ++q;
  }
  return q;
}

// The user's count (or the smallest count that fits in predicted memory when the job names
// none). 0 if unknown.
int64_t RequestedGpus(const JobView& j) {
  if (j.requested_option >= 0) return j.option(j.requested_option).gpus;
  int64_t best = 0;
  for (const auto& o : j.options->options) {
    if (o.fits_prediction && (best == 0 || o.gpus < best)) best = o.gpus;
  }
  return best;
}

// The requested count, or after out-of-memory crashes on every type at that count, the next
// larger count with an option left (what the user does by hand). 0 if none.
int64_t CountToTry(const JobView& j) {
  int64_t want = RequestedGpus(j);
  int64_t best = 0;
  const auto& opts = j.options->options;
  for (size_t i = 0; i < opts.size(); ++i) {
    if (opts[i].gpus < want || j.Failed(static_cast<int>(i))) continue;
    if (best == 0 || opts[i].gpus < best) best = opts[i].gpus;
  }
  return best;
}

class Tiresias final : public Policy {
 public:
  std::string_view name() const override { return "tiresias"; }
  OptionKind options_kind() const override { return OptionKind::kHand; }
  double round_s() const override { return 60; }

  Decisions Schedule(const Snapshot& s) override {
    const ClusterView& c = *s.cluster;
    // Queues first, FIFO within a queue (the snapshot is in arrival order: a stable sort by
    // queue keeps it).
    std::vector<std::pair<int, const JobView*>> queued;
    queued.reserve(s.jobs.size());
    for (const JobView& j : s.jobs) queued.emplace_back(QueueOf(j.AttainedAt(s.now_s)), &j);
    std::stable_sort(queued.begin(), queued.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<const JobView*> order;
    order.reserve(queued.size());
    for (const auto& [q, j] : queued) order.push_back(j);
    // Admit by priority while GPUs remain, counting per GPU type: a running job keeps its
    // type; a waiting one takes the first type (cluster order) with room for its count —
    // heterogeneity-unaware, but never admitting a job no type could hold.
    std::vector<int64_t> room(c.types.size());
    for (size_t t = 0; t < c.types.size(); ++t) room[t] = c.TotalOfType(static_cast<int>(t));
    std::vector<std::pair<const JobView*, int>> admitted;  // job, option
    for (const JobView* j : order) {
      if (j->running) {
        const RunOption& o = j->option(j->alloc.option);
        if (room[static_cast<size_t>(o.type)] >= o.gpus) {
          room[static_cast<size_t>(o.type)] -= o.gpus;
          admitted.push_back({j, j->alloc.option});
        }
        continue;
      }
      int64_t n = CountToTry(*j);
      for (size_t t = 0; t < c.types.size() && n > 0; ++t) {
        const RunOption* o = j->options->Find(static_cast<int>(t), n);
        if (o == nullptr || room[t] < n) continue;
        int idx = static_cast<int>(o - j->options->options.data());
        if (j->Failed(idx)) continue;
        room[t] -= n;
        admitted.push_back({j, idx});
        break;
      }
    }
    Decisions d;
    FreeMap free(c);
    std::vector<const JobView*> kept;
    for (const auto& [j, option] : admitted) {
      if (j->running) kept.push_back(j);
    }
    std::sort(kept.begin(), kept.end());
    for (const JobView& j : s.jobs) {
      if (!j.running) continue;
      if (!std::binary_search(kept.begin(), kept.end(), &j)) {
        d.stop.push_back(j.key);
        free.Release(j.alloc.placement);
      }
    }
    for (const auto& [j, idx] : admitted) {
      if (j->running) continue;
      const RunOption& o = j->option(idx);
      if (auto placement = free.Place(o.type, o.gpus, o.plan.tp)) {
        d.start.push_back({j->key, Allocation{idx, std::move(*placement)}});
      }
    }
    return d;
  }
};

}  // namespace

std::unique_ptr<Policy> MakeTiresiasPolicy() { return std::make_unique<Tiresias>(); }

}  // namespace frenzy
