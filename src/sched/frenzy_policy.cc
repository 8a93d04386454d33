// frenzy (HAS): see frenzy_policy.h and docs/scheduling.md.
//
// One decision, for Q waiting and R running jobs with at most K options each, T GPU types and
// N nodes:
//   1. per waiting job, its predicted remaining time on its fastest option and its relative
//      per-GPU speed on each type; from these, each type's value (how much the waiting jobs,
//      on average, get out of one of its GPUs): O(Q K);
//   2. order: jobs past their starvation limit first (by arrival), then shortest predicted
//      remaining time first: O(Q log Q);
//   3. per job in that order, the option to start now, among options that have not crashed and
//      whose type has room (free GPUs minus reservations): while other jobs wait, the cheapest
//      in value-weighted GPU-seconds (GPUs x run time x the type's value: every job lands where
//      it has a comparative advantage and takes no more GPUs than scale well); when it is the
//      last one waiting, the fastest whose per-GPU speed is still efficient. Never an option
//      more than max_slowdown x slower than its best (it could not move later for free). Then
//      the shared gang placement (fewest nodes, TP groups inside a node): O(Q (K + N));
//   4. if nobody is left waiting, running jobs move to free GPUs where they finish much sooner
//      (restart included): O(R (K + N)).
// No solver, no iteration to convergence: O((Q + R)(K + N) + Q log Q) per decision.
#include "sched/frenzy_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <vector>

#include "sched/placement.h"

namespace frenzy {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

class FrenzyPolicy final : public Policy {
 public:
  FrenzyPolicy(FrenzyKnobs k, std::string name) : k_(k), name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  OptionKind options_kind() const override {
    return k_.memory_aware ? OptionKind::kMarp : OptionKind::kHand;
  }
  double round_s() const override { return k_.round_s; }
  bool uses_runtime() const override { return k_.dynamic_memory; }

  // size-ok: this pass is replaced whole by HAS v2 (the next issue), which splits it; splitting
  // it now would only be thrown away.
  Decisions Schedule(const Snapshot& s) override {
    const ClusterView& c = *s.cluster;
    const size_t types = c.types.size();
    std::vector<int64_t> total(types);
    for (size_t t = 0; t < types; ++t) total[t] = c.TotalOfType(static_cast<int>(t));

    struct Waiting {
      const JobView* job;
      double best_s;  // predicted remaining run time on its fastest usable option
      bool starving;
      size_t row;  // into per_gpu_of / min_gpus_of
    };
    std::vector<Waiting> waiting;
    // Value of a GPU of each type: the mean, over waiting jobs, of their per-GPU speed on it
    // relative to their best type (0 where they do not fit).
    std::vector<double> value(types, 0);
    // Per waiting job: its best per-GPU speed on each type, and its smallest GPU count.
    std::vector<double> per_gpu_of;
    std::vector<int64_t> min_gpus_of;
    std::vector<const JobView*> running;
    struct TableStats {
      std::vector<double> per_gpu;
      int64_t min_gpus;
      double max_tps;
    };
    std::unordered_map<const JobOptions*, TableStats> stats;
    for (const JobView& j : s.jobs) {
      if (j.running) {
        running.push_back(&j);
        continue;
      }
      double left = std::max(0.0, j.total_tokens - j.done_tokens);
      size_t row = min_gpus_of.size();
      per_gpu_of.resize(per_gpu_of.size() + types, 0.0);
      min_gpus_of.push_back(0);
      double* per_gpu = &per_gpu_of[row * types];
      int64_t& min_gpus = min_gpus_of.back();
      double max_tps = 0;
      // Jobs of one class share a table: its statistics are computed once per decision
      // (unless the job has crashed options or a memory factor of its own).
      bool shared = j.failed_options.empty() && !j.memory_factor;
      auto cached = shared ? stats.find(j.options) : stats.end();
      if (cached != stats.end()) {
        const TableStats& ts = cached->second;
        std::copy(ts.per_gpu.begin(), ts.per_gpu.end(), per_gpu);
        min_gpus = ts.min_gpus;
        max_tps = ts.max_tps;
      } else {
        for (size_t i = 0; i < j.options->options.size(); ++i) {
          const RunOption& o = j.options->options[i];
          if (!Usable(j, i, total, *s.cluster)) continue;
          max_tps = std::max(max_tps, o.plan.tokens_per_s);
          double& p = per_gpu[static_cast<size_t>(o.type)];
          p = std::max(p, o.plan.tokens_per_s / static_cast<double>(o.gpus));
          if (min_gpus == 0 || o.gpus < min_gpus) min_gpus = o.gpus;
        }
        if (shared) {
          stats.emplace(j.options, TableStats{std::vector<double>(per_gpu, per_gpu + types),
                                              min_gpus, max_tps});
        }
      }
      double best = max_tps > 0 ? left / max_tps : kInf;
      if (best == kInf) {  // nothing usable now (e.g. nodes down); waits
        per_gpu_of.resize(row * types);
        min_gpus_of.pop_back();
        continue;
      }
      double top = *std::max_element(per_gpu, per_gpu + types);
      for (size_t t = 0; t < types; ++t) value[t] += per_gpu[t] / top;
      double waited = s.now_s - j.submit_s;
      bool starving = k_.backfill && waited > std::max(k_.starve_min_s, k_.starve_factor * best);
      waiting.push_back({&j, best, starving, row});
    }
    std::vector<double> weight(types, 1.0);
    for (size_t t = 0; t < types; ++t) {
      // An unwanted type is nearly free.
      if (k_.hetero_choice) weight[t] = std::pow(std::max(value[t], 1e-3), k_.value_weight);
    }
    std::stable_sort(waiting.begin(), waiting.end(), [&](const Waiting& a, const Waiting& b) {
      if (a.starving != b.starving) return a.starving;
      if (a.starving || !k_.shortest_first) return a.job->key < b.job->key;
      return a.best_s < b.best_s;
    });

    Decisions d;
    FreeMap free(c);
    std::vector<int64_t> reserved(types, 0);
    std::vector<char> touched(running.size(), 0);
    size_t placed = 0;
    for (size_t w = 0; w < waiting.size(); ++w) {
      const Waiting& wj = waiting[w];
      const JobView& j = *wj.job;
      const auto& opts = j.options->options;
      double left = std::max(0.0, j.total_tokens - j.done_tokens);
      bool others_wait = w + 1 < waiting.size();
      bool patient = k_.max_slowdown > 0 && s.now_s - j.submit_s < k_.max_slowdown * wj.best_s;
      const double* per_gpu = &per_gpu_of[wj.row * types];
      const int64_t min_gpus = min_gpus_of[wj.row];
      int64_t free_total = 0;
      for (size_t t = 0; t < types; ++t) {
        free_total += free.FreeOfType(static_cast<int>(t)) - reserved[t];
      }
      int pick = -1;
      double pick_score = kInf;
      // Options are sorted by (type, GPUs): once a count is too big for a type, so are the
      // rest of that type.
      auto next_type = [&](size_t i) {
        int t = opts[i].type;
        return static_cast<size_t>(
            std::partition_point(opts.begin() + static_cast<std::ptrdiff_t>(i), opts.end(),
                                 [t](const RunOption& o) { return o.type == t; }) -
            opts.begin());
      };
      const double share =
          static_cast<double>(free_total) / static_cast<double>(waiting.size() - w);
      for (size_t i = 0; i < opts.size() && free_total >= min_gpus;) {
        const RunOption& o = opts[i];
        size_t t = static_cast<size_t>(o.type);
        bool fair = !(k_.elastic_count && (others_wait || k_.start_small)) ||
                    static_cast<double>(o.gpus) <= std::max(1.0, share) || o.gpus <= min_gpus;
        if (free.FreeOfType(o.type) - reserved[t] < o.gpus || !fair) {
          i = next_type(i);
          continue;
        }
        ++i;
        if (!Usable(j, i - 1, total, *s.cluster)) continue;
        // The smallest count of a type is always a candidate (it is what fits); larger ones
        // only while they scale.
        bool smallest_of_type = i - 1 == 0 || opts[i - 2].type != o.type;
        bool scales = smallest_of_type || o.plan.tokens_per_s / static_cast<double>(o.gpus) >=
                                              k_.efficiency_floor * per_gpu[t];
        double run_s = left / o.plan.tokens_per_s;
        if (patient && run_s > k_.max_slowdown * wj.best_s) continue;
        double gpus = static_cast<double>(o.gpus);
        double score;
        if (!k_.elastic_count) {
          score = gpus * 1e12 + run_s;  // the fewest GPUs, then the fastest
        } else if (others_wait || k_.start_small) {
          // A fair share of what is free (checked above), the fastest within it, scarce
          // types cost more.
          if (!scales) continue;
          score = run_s * weight[t];
        } else {
          if (!scales) continue;
          score = run_s;
        }
        if (!k_.hetero_choice) score += static_cast<double>(o.type) * 1e15;  // first type
        if (score < pick_score) {
          pick_score = score;
          pick = static_cast<int>(i - 1);
        }
      }
      if (pick >= 0) {
        const RunOption& o = opts[static_cast<size_t>(pick)];
        if (auto placement = free.Place(o.type, o.gpus, o.plan.tp)) {
          d.start.push_back({j.key, Allocation{pick, std::move(*placement)}});
          ++placed;
          continue;
        }
      }
      if (k_.preempt && !running.empty() &&
          Preempt(s, running, touched, j, left, wj.best_s, total, free, d)) {
        ++placed;
        continue;
      }
      if (!k_.backfill) break;  // strict order: the first blocked job ends the round
      if (wj.starving) Reserve(j, total, c, free, reserved);
    }

    // Adaptivity: running jobs take GPUs that no waiting job could take in this decision (with
    // move_while_waiting off: only when nobody is left waiting) where they finish much sooner,
    // least progress first. Nothing to do when no GPU is left free.
    int64_t left_free = 0;
    for (size_t t = 0; t < types; ++t) {
      left_free += free.FreeOfType(static_cast<int>(t)) - reserved[t];
    }
    if (k_.move && left_free > 0 && (k_.move_while_waiting || placed == waiting.size())) {
      std::vector<const JobView*> movable;
      for (size_t r = 0; r < running.size(); ++r) {
        if (!touched[r] && s.now_s >= running[r]->progress_since_s) movable.push_back(running[r]);
      }
      std::stable_sort(movable.begin(), movable.end(), [&](const JobView* a, const JobView* b) {
        return a->DoneAt(s.now_s) / a->total_tokens < b->DoneAt(s.now_s) / b->total_tokens;
      });
      for (const JobView* j : movable) {
        const RunOption& cur = j->option(j->alloc.option);
        double left = std::max(0.0, j->total_tokens - j->DoneAt(s.now_s));
        double now_s = left / cur.plan.tokens_per_s;
        // Its own GPUs count as free for the move.
        free.Release(j->alloc.placement);
        int pick = -1;
        double pick_s = k_.move_gain * now_s;
        for (size_t i = 0; i < j->options->options.size(); ++i) {
          const RunOption& o = j->options->options[i];
          if (static_cast<int>(i) == j->alloc.option || !Usable(*j, i, total, *s.cluster)) continue;
          if (free.FreeOfType(o.type) - reserved[static_cast<size_t>(o.type)] < o.gpus) continue;
          double t = s.costs.restart_s + left / o.plan.tokens_per_s;
          if (t < pick_s) {
            pick_s = t;
            pick = static_cast<int>(i);
          }
        }
        std::optional<std::vector<std::pair<int, int64_t>>> placement;
        if (pick >= 0) {
          const RunOption& o = j->option(pick);
          placement = free.Place(o.type, o.gpus, o.plan.tp);
        }
        if (placement) {
          d.start.push_back({j->key, Allocation{pick, std::move(*placement)}});
        } else {
          free.Take(j->alloc.placement);  // it stays: its GPUs are taken again
        }
      }
    }
    return d;
  }

 private:
  // An option the job can use: the cluster has that many GPUs of the type, it has not crashed,
  // and, when the runtime has learned the job's memory factor, some layout of it fits.
  static bool Usable(const JobView& j, size_t i, const std::vector<int64_t>& total,
                     const ClusterView& c) {
    const RunOption& o = j.options->options[i];
    if (o.gpus > total[static_cast<size_t>(o.type)] || j.Failed(static_cast<int>(i))) return false;
    return !j.memory_factor || j.Layout(static_cast<int>(i), c) >= 0;
  }

  // Shortest remaining time first, with hysteresis: stops running jobs (on one GPU type) that
  // have much longer to go than `j`, to start `j` on its most GPU-efficient option there.
  // `touched` flags the running jobs already stopped or moved in this decision (parallel to
  // `running`); Preempt sets it for its victims.
  bool Preempt(const Snapshot& s, const std::vector<const JobView*>& running,
               std::vector<char>& touched, const JobView& j, double left, double best_s,
               const std::vector<int64_t>& total, FreeMap& free, Decisions& d) {
    const auto& opts = j.options->options;
    // Victims: running jobs not already stopped or moved this round that ran long enough and
    // have much longer to go. A victim with a smaller option on its type is shrunk to it (and
    // restarted there) rather than stopped, when it has longer to go than j at all.
    struct Victim {
      double remaining_s;
      const JobView* job;
      size_t index;   // in `running`
      int shrink_to;  // option index, or -1: stop
      int64_t freed;
    };
    std::vector<Victim> victims;
    for (size_t index = 0; index < running.size(); ++index) {
      const JobView& r = *running[index];
      if (touched[index] || s.now_s - r.run_start_s < k_.preempt_min_run_s) continue;
      const RunOption& o = r.option(r.alloc.option);
      double remaining = std::max(0.0, r.total_tokens - r.DoneAt(s.now_s)) / o.plan.tokens_per_s;
      int shrink = -1;
      for (size_t i = 0; i < r.options->options.size(); ++i) {
        const RunOption& so = r.options->options[i];
        if (so.type != o.type || so.gpus >= o.gpus || !Usable(r, i, total, *s.cluster)) continue;
        if (shrink < 0 || so.gpus > r.option(shrink).gpus) shrink = static_cast<int>(i);
      }
      if (shrink >= 0 && remaining > k_.shrink_ratio * best_s) {
        victims.push_back({remaining, &r, index, shrink, o.gpus - r.option(shrink).gpus});
      } else if (remaining > k_.preempt_ratio * best_s) {
        victims.push_back({remaining, &r, index, -1, o.gpus});
      }
    }
    if (victims.empty()) return false;
    std::sort(victims.begin(), victims.end(),
              [](const Victim& a, const Victim& b) { return a.remaining_s > b.remaining_s; });
    // The most GPU-efficient option of j (fewest GPU-seconds) that the victims can make room for.
    int best = -1;
    double best_cost = kInf;
    std::vector<const Victim*> chosen;
    for (size_t i = 0; i < opts.size(); ++i) {
      const RunOption& o = opts[i];
      if (!Usable(j, i, total, *s.cluster)) continue;
      double cost = static_cast<double>(o.gpus) * left / o.plan.tokens_per_s;
      if (cost >= best_cost) continue;
      int64_t room = free.FreeOfType(o.type);
      std::vector<const Victim*> take;
      for (const Victim& v : victims) {
        if (room >= o.gpus) break;
        if (v.job->option(v.job->alloc.option).type != o.type) continue;
        room += v.freed;
        take.push_back(&v);
      }
      if (room < o.gpus) continue;
      best = static_cast<int>(i);
      best_cost = cost;
      chosen = std::move(take);
    }
    if (best < 0) return false;
    for (const Victim* v : chosen) free.Release(v->job->alloc.placement);
    const RunOption& o = opts[static_cast<size_t>(best)];
    auto placement = free.Place(o.type, o.gpus, o.plan.tp);
    if (!placement) {
      for (const Victim* v : chosen) free.Take(v->job->alloc.placement);
      return false;
    }
    d.start.push_back({j.key, Allocation{best, std::move(*placement)}});
    for (const Victim* v : chosen) {
      d.stop.push_back(v->job->key);
      touched[v->index] = 1;
      if (v->shrink_to < 0) continue;
      const RunOption& so = v->job->option(v->shrink_to);
      if (auto p = free.Place(so.type, so.gpus, so.plan.tp)) {
        d.start.push_back({v->job->key, Allocation{v->shrink_to, std::move(*p)}});
      }
    }
    return true;
  }

  // Keeps, for a starving job, the GPUs its most GPU-efficient option needs on that type, so
  // that jobs behind it cannot keep taking them.
  void Reserve(const JobView& j, const std::vector<int64_t>& total, const ClusterView& c,
               const FreeMap& free, std::vector<int64_t>& reserved) const {
    const RunOption* want = nullptr;
    for (size_t i = 0; i < j.options->options.size(); ++i) {
      const RunOption& o = j.options->options[i];
      if (!Usable(j, i, total, c)) continue;
      if (want == nullptr || o.plan.tokens_per_s / static_cast<double>(o.gpus) >
                                 want->plan.tokens_per_s / static_cast<double>(want->gpus)) {
        want = &o;
      }
    }
    if (want == nullptr) return;
    size_t t = static_cast<size_t>(want->type);
    reserved[t] += std::max<int64_t>(
        0, std::min<int64_t>(want->gpus, free.FreeOfType(want->type) - reserved[t]));
  }

  FrenzyKnobs k_;
  std::string name_;
};

}  // namespace

std::unique_ptr<Policy> MakeFrenzyPolicy(FrenzyKnobs knobs, std::string name) {
  return std::make_unique<FrenzyPolicy>(knobs, std::move(name));
}

}  // namespace frenzy
