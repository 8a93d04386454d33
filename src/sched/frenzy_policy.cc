// frenzy (HAS): see frenzy_policy.h, sched/has_core.h and docs/scheduling.md.
//
// One decision, for J active jobs (waiting and running) with at most K options each, T GPU types
// and N nodes:
//   1. per job, the speed of each option it may run (memory-safe with what the runtime learned,
//      not crashed), its remaining tokens and what it holds: O(J K);
//   2. the allocation core re-plans every job's option from scratch, the GPUs of running jobs
//      included, restarts priced in (has_core.h): O(J K + S (K + log J)), twice when a fallback
//      pass runs, then the type swap, O(P K log P + M) for P jobs holding GPUs;
//   3. jobs whose option is unchanged keep their GPUs; the others are stopped, and the new
//      options placed with the shared gang placement, largest first; one that cannot be placed
//      (fragmentation) takes the largest smaller option of its type that can, and a running job
//      that would get nothing keeps its old GPUs if they are still free: O(J (K + N)).
// Jobs in a restart pause keep their GPUs (another change would pay a second pause).
#include "sched/frenzy_policy.h"

#include <algorithm>
#include <map>
#include <vector>

#include "sched/placement.h"

namespace frenzy {
namespace {

class FrenzyPolicy final : public Policy {
 public:
  FrenzyPolicy(FrenzyKnobs k, std::string name) : k_(k), name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  OptionKind options_kind() const override {
    return k_.memory_aware ? OptionKind::kMarp : OptionKind::kHand;
  }
  double round_s() const override { return k_.round_s; }
  bool uses_runtime() const override { return k_.dynamic_memory; }
  bool mixed_options() const override { return k_.mixed && k_.memory_aware; }

  Decisions Schedule(const Snapshot& s) override {
    const std::vector<int64_t> capacity = Describe(s);
    return Place(s, core_engine_.Allocate(core_, capacity, k_.core));
  }

 private:
  // Fills core_ and of_ (the snapshot's index of each core job); returns the GPUs per type the
  // core may hand out: free ones and those of running jobs that are not pinned.
  std::vector<int64_t> Describe(const Snapshot& s) {
    const ClusterView& c = *s.cluster;
    std::vector<int64_t> capacity(c.types.size(), 0);
    for (const NodeView& n : c.nodes) {
      if (n.up) capacity[static_cast<size_t>(n.type)] += n.free;
    }
    core_.clear();
    of_.clear();
    rows_.clear();
    size_t rows = 0;
    for (const JobView& j : s.jobs) rows += j.options->options.size();
    speed_.resize(rows);  // sized once: the spans into it stay valid (every row is written below)
    size_t row = 0;
    for (size_t i = 0; i < s.jobs.size(); ++i) {
      const JobView& j = s.jobs[i];
      const size_t n = j.options->options.size();
      double* speed = speed_.data() + row;
      row += n;
      CoreJob cj;
      cj.options = j.options;
      cj.order = j.key;
      cj.speed = std::span<const double>(speed, n);
      // What the runtime learned of the job's real speed (or its class's, for a job that has not
      // run there) corrects the prediction, per type.
      auto learned = [&](size_t k) {
        const size_t t = static_cast<size_t>(j.options->options[k].type);
        return t < j.speed_factor.size() && j.speed_factor[t] > 0 ? j.speed_factor[t] : 1.0;
      };
      // Jobs of one option table with the same memory factor and the same learned speeds (e.g.
      // waiting jobs of one model, which start from their class's factors) have the same speeds:
      // the row is computed once per decision and copied.
      const RowKey key{j.options, j.memory_factor.value_or(0), &j.speed_factor};
      // (A running job's row is changed below: it neither shares a class nor is copied from.)
      const bool plain = j.failed_options.empty() && !j.running;
      if (auto it = rows_.find(key); it != rows_.end()) {
        std::copy_n(speed_.data() + it->second, n, speed);
        if (plain) cj.speed_class = static_cast<int64_t>(it->second);
      } else {
        std::fill_n(speed, n, 0.0);
        for (size_t k = 0; k < n; ++k) {
          const int o = static_cast<int>(k);
          if (j.option(o).mixed() && !mixed_options()) continue;  // the ablation's
          const int layout = j.Layout(o, c);  // JobView::Runnable, with its layout kept
          if (layout < 0 || j.option(o).plan.tokens_per_s <= 0) continue;
          speed[k] = j.PlanOf(o, layout).tokens_per_s * learned(k);
        }
        if (plain) {
          cj.speed_class = static_cast<int64_t>(speed - speed_.data());
          rows_.emplace(key, static_cast<size_t>(cj.speed_class));
        }
      }
      for (int o : j.failed_options) {
        if (o >= 0 && static_cast<size_t>(o) < n) speed[static_cast<size_t>(o)] = 0;
      }
      // What it runs now is an option it has, whatever the runtime learned since; but if it is
      // the only one, a stopped job could never start again.
      bool elsewhere = false;
      if (j.running) {
        const size_t cur = static_cast<size_t>(j.alloc.option);
        for (size_t k = 0; k < n && !elsewhere; ++k) elsewhere = speed[k] > 0 && k != cur;
        speed[cur] = j.PlanOf(j.alloc.option, j.layout).tokens_per_s * learned(cur);
      }
      const bool any = std::any_of(speed, speed + n, [](double v) { return v > 0; });
      cj.remaining_tokens = std::max(0.0, j.total_tokens - j.DoneAt(s.now_s));
      const double restart_s = s.costs.restart.Of(j.options->checkpoint_bytes);
      cj.restart_s = j.running || j.first_start_s >= 0 ? restart_s : 0;
      if (j.running) {
        cj.current = j.alloc.option;
        const RunOption& o = j.option(j.alloc.option);
        cj.current_extra_s = std::max(0.0, j.progress_since_s - s.now_s);
        const bool settling = s.now_s - j.run_start_s < k_.residence * restart_s;
        const bool stranded = !elsewhere && !j.Runnable(cj.current, c);
        // On a node that is down (cordoned as slow): whether it leaves is the runtime's call.
        const bool cordoned = std::any_of(j.alloc.placement.begin(), j.alloc.placement.end(),
                                          [&](const auto& ng) {
                                            return !c.nodes[static_cast<size_t>(ng.first)].up;
                                          });
        cj.pinned = settling || stranded || cordoned || cj.current_extra_s > 0 ||
                    speed[static_cast<size_t>(cj.current)] <= 0;
        if (!cj.pinned && o.mixed()) {
          for (const auto& [t, g] : o.parts) capacity[static_cast<size_t>(t)] += g;
        } else if (!cj.pinned) {
          capacity[static_cast<size_t>(o.type)] += o.gpus;
        }
      } else if (!any) {
        continue;  // nothing it can run now (e.g. nodes down); it waits
      }
      core_.push_back(std::move(cj));
      of_.push_back(i);
    }
    return capacity;
  }

  // The decisions that take the cluster from what runs to `target`.
  Decisions Place(const Snapshot& s, const std::vector<int>& target) {
    // Most decisions (the round's ticks on a steady cluster) change nothing: no map to build.
    bool change = false;
    for (size_t i = 0; i < core_.size() && !change; ++i) {
      change = !core_[i].pinned && target[i] != core_[i].current;
    }
    if (!change) return {};
    const ClusterView& c = *s.cluster;
    FreeMap free(c);
    std::vector<char> stop(core_.size(), 0);
    std::vector<size_t> place;  // core indices whose target must be placed
    for (size_t i = 0; i < core_.size(); ++i) {
      const JobView& j = s.jobs[of_[i]];
      if (core_[i].pinned || target[i] == core_[i].current) continue;
      if (j.running) {
        free.Release(j.alloc.placement);
        stop[i] = 1;
      }
      if (target[i] >= 0) place.push_back(i);
    }
    auto gpus = [&](size_t i) {
      return core_[i].options->options[static_cast<size_t>(target[i])].gpus;
    };
    std::stable_sort(place.begin(), place.end(),
                     [&](size_t a, size_t b) { return gpus(a) > gpus(b); });
    Decisions d;
    for (size_t i : place) {
      const JobView& j = s.jobs[of_[i]];
      if (auto alloc = PlaceAtMost(j, core_[i], target[i], c, free)) {
        d.start.emplace_back(j.key, std::move(*alloc));
        stop[i] = 0;  // a running job moves (ApplyDecisions frees all movers' GPUs first)
      } else if (j.running && free.TryTake(j.alloc.placement)) {
        stop[i] = 0;  // it keeps what it had
      }
    }
    for (size_t i = 0; i < core_.size(); ++i) {
      if (stop[i]) d.stop.push_back(s.jobs[of_[i]].key);
    }
    return d;
  }

  // Places option `o` of job `j`, or the largest smaller option of its type that it may run and
  // that places (the free GPUs of a type can be spread over too many nodes for a gang). A
  // running job never falls back to its own option, nor, when it was to grow, below it: that
  // would be a restart for nothing (the caller keeps it where it is).
  static std::optional<Allocation> PlaceAtMost(const JobView& j, const CoreJob& cj, int o,
                                               const ClusterView& c, FreeMap& free) {
    const auto& opts = j.options->options;
    if (opts[static_cast<size_t>(o)].mixed()) return PlaceMixed(j, o, c, free);
    const int type = opts[static_cast<size_t>(o)].type;
    const bool grow = cj.current >= 0 && opts[static_cast<size_t>(cj.current)].type == type &&
                      o > cj.current;
    for (int k = o; k >= 0 && opts[static_cast<size_t>(k)].type == type; --k) {
      if (k == cj.current || (grow && k < cj.current)) break;
      if (cj.speed[static_cast<size_t>(k)] <= 0 || !j.Runnable(k, c)) continue;
      const int64_t tp = std::max<int64_t>(1, j.PlanOf(k, j.Layout(k, c)).tp);
      if (auto p = free.Place(type, opts[static_cast<size_t>(k)].gpus, tp)) {
        return Allocation{k, std::move(*p)};
      }
    }
    return std::nullopt;
  }

  // A mixed option: each part on its type, TP groups inside nodes; all parts or nothing.
  static std::optional<Allocation> PlaceMixed(const JobView& j, int o, const ClusterView& c,
                                              FreeMap& free) {
    if (!j.Runnable(o, c)) return std::nullopt;
    const RunOption& r = j.option(o);
    const int64_t tp = std::max<int64_t>(1, j.PlanOf(o, j.Layout(o, c)).tp);
    Allocation alloc{o, {}};
    for (const auto& [t, g] : r.parts) {
      auto p = free.Place(t, g, tp);
      if (!p) {
        free.Release(alloc.placement);
        return std::nullopt;
      }
      alloc.placement.insert(alloc.placement.end(), p->begin(), p->end());
    }
    return alloc;
  }

  FrenzyKnobs k_;
  std::string name_;
  // Reused between decisions (a decision on a steady state then allocates little).
  std::vector<CoreJob> core_;
  std::vector<size_t> of_;
  std::vector<double> speed_;                           // the core jobs' speeds, one row per option
  // (table, memory factor or 0, learned speed factors: the job view's, compared by value)
  struct RowKey {
    const JobOptions* options;
    double memory_factor;
    const std::vector<double>* speed_factor;
    bool operator<(const RowKey& o) const {
      if (options != o.options) return options < o.options;
      if (memory_factor != o.memory_factor) return memory_factor < o.memory_factor;
      return *speed_factor < *o.speed_factor;
    }
  };
  std::map<RowKey, size_t> rows_;  // where in speed_ the first row of each key is
  AllocationCore core_engine_;
};

}  // namespace

std::unique_ptr<Policy> MakeFrenzyPolicy(FrenzyKnobs knobs, std::string name) {
  return std::make_unique<FrenzyPolicy>(knobs, std::move(name));
}

}  // namespace frenzy
