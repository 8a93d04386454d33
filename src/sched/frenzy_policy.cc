// frenzy (HAS): see frenzy_policy.h and docs/scheduling.md.
//
// One decision, for Q waiting jobs with at most K options each on T GPU types and N nodes:
//   1. per waiting job, its predicted remaining time on its fastest option: O(Q K);
//   2. order: jobs past their starvation limit first (by arrival), then shortest remaining
//      time first: O(Q log Q);
//   3. per job in that order, the option to start now: among options that have not crashed and
//      whose GPU type has room (free GPUs minus reservations), keep the GPU counts that still
//      scale (per-GPU speed >= efficiency_floor x the type's best per-GPU speed for this job),
//      and pick the one with the least predicted run time x the scarcity of its type; then the
//      shared gang placement (fewest nodes, TP groups inside a node): O(Q (K + N)).
// No solver, no iteration to convergence: O(Q (K + N) + Q log Q) per decision.
#include "sched/frenzy_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "sched/placement.h"

namespace frenzy {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

class FrenzyPolicy final : public Policy {
 public:
  FrenzyPolicy(FrenzyKnobs k, std::string name) : k_(k), name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  OptionKind options_kind() const override { return OptionKind::kMarp; }

  Decisions Schedule(const Snapshot& s) override {
    const ClusterView& c = *s.cluster;
    const size_t types = c.types.size();
    std::vector<int64_t> total(types);
    for (size_t t = 0; t < types; ++t) total[t] = c.TotalOfType(static_cast<int>(t));

    struct Waiting {
      const JobView* job;
      double best_s;   // predicted remaining run time on its fastest option
      bool starving;
      int only_type;   // the one type it can run on, or -1
    };
    std::vector<Waiting> waiting;
    // Demand from jobs that fit on one GPU type only: the scarcity of that type for others.
    std::vector<double> exclusive(types, 0);
    for (const JobView& j : s.jobs) {
      if (j.running) continue;
      double left = std::max(0.0, j.total_tokens - j.done_tokens);
      double best = kInf;
      int only = -2;
      int64_t min_gpus = 0;
      for (size_t i = 0; i < j.options->options.size(); ++i) {
        const RunOption& o = j.options->options[i];
        if (o.gpus > total[static_cast<size_t>(o.type)] || j.Failed(static_cast<int>(i))) {
          continue;
        }
        best = std::min(best, left / o.plan.tokens_per_s);
        only = only == -2 || only == o.type ? o.type : -1;
        if (min_gpus == 0 || o.gpus < min_gpus) min_gpus = o.gpus;
      }
      if (best == kInf) continue;  // nothing left to offer; waits for GPUs to come back
      double waited = s.now_s - j.submit_s;
      bool starving = k_.backfill && waited > std::max(k_.starve_min_s, k_.starve_factor * best);
      waiting.push_back({&j, best, starving, only >= 0 ? only : -1});
      if (only >= 0) exclusive[static_cast<size_t>(only)] += static_cast<double>(min_gpus);
    }
    std::stable_sort(waiting.begin(), waiting.end(), [&](const Waiting& a, const Waiting& b) {
      if (a.starving != b.starving) return a.starving;
      if (a.starving || !k_.shortest_first) return a.job->key < b.job->key;
      return a.best_s < b.best_s;
    });

    Decisions d;
    FreeMap free(c);
    std::vector<int64_t> reserved(types, 0);
    for (const Waiting& w : waiting) {
      const JobView& j = *w.job;
      const auto& opts = j.options->options;
      double left = std::max(0.0, j.total_tokens - j.done_tokens);
      // The best per-GPU speed of this job on each type: the yardstick of scaling.
      std::vector<double> best_per_gpu(types, 0);
      for (size_t i = 0; i < opts.size(); ++i) {
        const RunOption& o = opts[i];
        if (j.Failed(static_cast<int>(i))) continue;
        auto& b = best_per_gpu[static_cast<size_t>(o.type)];
        b = std::max(b, o.plan.tokens_per_s / static_cast<double>(o.gpus));
      }
      int pick = -1;
      double pick_score = kInf;
      for (size_t i = 0; i < opts.size(); ++i) {
        const RunOption& o = opts[i];
        size_t t = static_cast<size_t>(o.type);
        if (j.Failed(static_cast<int>(i))) continue;
        if (free.FreeOfType(o.type) - reserved[t] < o.gpus) continue;
        double per_gpu = o.plan.tokens_per_s / static_cast<double>(o.gpus);
        double score;
        if (k_.elastic_count) {
          if (per_gpu < k_.efficiency_floor * best_per_gpu[t]) continue;
          score = left / o.plan.tokens_per_s;
        } else {
          // The fewest GPUs: rank by count first, speed second.
          score = static_cast<double>(o.gpus) * 1e12 + left / o.plan.tokens_per_s;
        }
        if (k_.hetero_choice) {
          // Taking GPUs that jobs fitting nowhere else are waiting for costs them time.
          double others = exclusive[t] - (w.only_type == o.type ? 1.0 : 0.0);
          double room = static_cast<double>(std::max<int64_t>(1, free.FreeOfType(o.type)));
          if (w.only_type != o.type) score *= 1.0 + std::max(0.0, others) / room;
        } else {
          // Heterogeneity-blind: the first type (cluster order) with room.
          score += static_cast<double>(o.type) * 1e15;
        }
        if (score < pick_score) {
          pick_score = score;
          pick = static_cast<int>(i);
        }
      }
      if (pick >= 0) {
        const RunOption& o = opts[static_cast<size_t>(pick)];
        if (auto placement = free.Place(o.type, o.gpus, o.plan.tp)) {
          d.start.push_back({j.key, Allocation{pick, std::move(*placement)}});
          if (w.only_type == o.type) {
            exclusive[static_cast<size_t>(o.type)] =
                std::max(0.0, exclusive[static_cast<size_t>(o.type)] - static_cast<double>(o.gpus));
          }
          continue;
        }
      }
      if (!k_.backfill) break;  // strict order: the first blocked job stops the round
      if (w.starving) {
        // Reserve for it what its smallest fitting option needs on its fastest type, so that
        // jobs behind it cannot keep taking those GPUs.
        const RunOption* want = nullptr;
        for (size_t i = 0; i < opts.size(); ++i) {
          const RunOption& o = opts[i];
          if (j.Failed(static_cast<int>(i)) || o.gpus > total[static_cast<size_t>(o.type)]) {
            continue;
          }
          if (want == nullptr || o.plan.tokens_per_s / static_cast<double>(o.gpus) >
                                     want->plan.tokens_per_s / static_cast<double>(want->gpus)) {
            want = &o;
          }
        }
        if (want != nullptr) {
          size_t t = static_cast<size_t>(want->type);
          reserved[t] += std::min<int64_t>(want->gpus, free.FreeOfType(want->type) - reserved[t]);
        }
      }
    }
    return d;
  }

 private:
  FrenzyKnobs k_;
  std::string name_;
};

}  // namespace

std::unique_ptr<Policy> MakeFrenzyPolicy(FrenzyKnobs knobs, std::string name) {
  return std::make_unique<FrenzyPolicy>(knobs, std::move(name));
}

}  // namespace frenzy
