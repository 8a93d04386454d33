#include "sched/apply.h"

#include <fmt/core.h>

#include <algorithm>
#include <set>
#include <string>

namespace frenzy {
namespace {

// The free GPUs of every node as the decisions so far leave them.
class Ledger {
 public:
  explicit Ledger(const ClusterView& c) : cluster_(c) {
    free_.reserve(c.nodes.size());
    for (const NodeView& n : c.nodes) free_.push_back(n.up ? n.free : 0);
  }
  void Release(const Allocation& a) {
    for (const auto& [n, g] : a.placement) {
      if (n >= 0 && static_cast<size_t>(n) < free_.size() && cluster_.nodes[static_cast<size_t>(n)].up) {
        free_[static_cast<size_t>(n)] += g;
      }
    }
  }
  // Why `a` cannot be placed for `job`, or "" when it can (then its GPUs are taken).
  std::string Take(const JobView& job, const Allocation& a) {
    if (a.option < 0 || static_cast<size_t>(a.option) >= job.options->options.size()) {
      return fmt::format("no such option {}", a.option);
    }
    const RunOption& o = job.option(a.option);
    int64_t sum = 0;
    std::set<int> seen;
    // A mixed option's GPUs per type must be its parts'; a single-type option's all of its type.
    std::vector<int64_t> left(cluster_.types.size(), 0);
    if (o.mixed()) {
      for (const auto& [t, g] : o.parts) {
        if (t >= 0 && static_cast<size_t>(t) < left.size()) left[static_cast<size_t>(t)] += g;
      }
    } else if (o.type >= 0 && static_cast<size_t>(o.type) < left.size()) {
      left[static_cast<size_t>(o.type)] = o.gpus;
    }
    for (const auto& [n, g] : a.placement) {
      if (n < 0 || static_cast<size_t>(n) >= free_.size()) return fmt::format("no such node {}", n);
      const NodeView& node = cluster_.nodes[static_cast<size_t>(n)];
      if (!seen.insert(n).second) return fmt::format("node {} named twice", n);
      if (left[static_cast<size_t>(node.type)] < g) {
        return fmt::format("node {} is of another GPU type, or more of its type than the option "
                           "has", n);
      }
      left[static_cast<size_t>(node.type)] -= g;
      if (!node.up) return fmt::format("node {} is down", n);
      if (g < 1 || g > free_[static_cast<size_t>(n)]) {
        return fmt::format("node {} has {} free GPUs, not {}", n, free_[static_cast<size_t>(n)], g);
      }
      sum += g;
    }
    if (sum != o.gpus) return fmt::format("placement has {} GPUs, the option {}", sum, o.gpus);
    for (const auto& [n, g] : a.placement) free_[static_cast<size_t>(n)] -= g;
    return "";
  }

 private:
  const ClusterView& cluster_;
  std::vector<int64_t> free_;
};

}  // namespace

std::string CheckAllocation(const JobView& job, const Allocation& alloc, const ClusterView& cluster) {
  return Ledger(cluster).Take(job, alloc);
}

int ChooseLayout(const JobView& v, const Allocation& a, const ClusterView& cluster) {
  const RunOption& o = v.option(a.option);
  int layout = std::max(0, v.Layout(a.option, cluster));
  auto keeps_groups = [&](int k) {
    int64_t tp = v.PlanOf(a.option, k).tp;
    return std::all_of(a.placement.begin(), a.placement.end(),
                       [&](const auto& np) { return np.second % tp == 0; });
  };
  while (layout > 0 && !keeps_groups(layout) && static_cast<size_t>(layout) < o.leaner.size()) {
    ++layout;
  }
  return layout;
}

Status ApplyDecisions(const Decisions& d, const ClusterView& cluster, std::string_view policy,
                      double now_s, DecisionTarget& target) {
  auto bad = [&](int64_t key, const std::string& why) {
    const JobView* v = target.Find(key);
    return Status(StatusCode::kInternal,
                  fmt::format("policy '{}' made an invalid decision for job '{}' at t={:.0f} s: {}",
                              policy, v != nullptr ? v->id : fmt::format("key {}", key), now_s,
                              why));
  };
  Ledger ledger(cluster);
  std::set<int64_t> stopped, started;
  for (int64_t key : d.stop) {
    const JobView* v = target.Find(key);
    if (v == nullptr) return bad(key, "stopped a job it was not shown");
    if (!v->running || stopped.count(key)) return bad(key, "stopped a job that is not running");
    ledger.Release(v->alloc);
    stopped.insert(key);
    RETURN_IF_ERROR(target.Stop(*v, now_s, /*move=*/false));
  }
  // Moves free their GPUs before any start takes some: a decision may move a job onto GPUs that
  // another job moved in the same decision leaves.
  std::set<int64_t> moving;
  for (const auto& [key, alloc] : d.start) {
    const JobView* v = target.Find(key);
    if (v == nullptr) return bad(key, "started a job it was not shown");
    if (!v->running || stopped.count(key) || !moving.insert(key).second) continue;
    ledger.Release(v->alloc);
    RETURN_IF_ERROR(target.Stop(*v, now_s, /*move=*/true));
  }
  for (const auto& [key, alloc] : d.start) {
    const JobView* v = target.Find(key);
    if (!started.insert(key).second) return bad(key, "started the same job twice");
    if (std::string why = ledger.Take(*v, alloc); !why.empty()) return bad(key, why);
    RETURN_IF_ERROR(target.Start(*v, alloc, now_s));
  }
  return Status::Ok();
}

const JobView* ViewsTarget::Find(int64_t key) const {
  for (const JobView& j : jobs_) {
    if (j.key == key) return &j;
  }
  return nullptr;
}

JobView& ViewsTarget::Mutable(const JobView& job) {
  return jobs_[static_cast<size_t>(&job - jobs_.data())];
}

Status ViewsTarget::Stop(const JobView& job, double now_s, bool /*move*/) {
  JobView& j = Mutable(job);
  for (const auto& [n, g] : j.alloc.placement) cluster_.nodes[static_cast<size_t>(n)].free += g;
  (void)now_s;  // progress and service stay as the test set them
  j.running = false;
  j.alloc = Allocation{};
  return Status::Ok();
}

Status ViewsTarget::Start(const JobView& job, const Allocation& alloc, double now_s) {
  JobView& j = Mutable(job);
  for (const auto& [n, g] : alloc.placement) cluster_.nodes[static_cast<size_t>(n)].free -= g;
  if (j.first_start_s >= 0) ++j.restarts;
  if (j.first_start_s < 0) j.first_start_s = now_s;
  j.running = true;
  j.alloc = alloc;
  j.layout = 0;
  j.run_start_s = now_s;
  j.progress_since_s = now_s;
  return Status::Ok();
}

}  // namespace frenzy
