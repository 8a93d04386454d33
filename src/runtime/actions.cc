#include "runtime/actions.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "sched/placement.h"

namespace frenzy::runtime {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

double Capacity(const ClusterView& c, int type) {
  return static_cast<double>(c.gpu_memory_bytes[static_cast<size_t>(type)]);
}

// The fastest layout of `option` whose device memory x factor fits, or -1.
int FittingLayout(const RunOption& o, double factor, double capacity) {
  if (static_cast<double>(o.plan.device_bytes) * factor <= capacity) return 0;
  for (size_t k = 0; k < o.leaner.size(); ++k) {
    if (static_cast<double>(o.leaner[k].device_bytes) * factor <= capacity) {
      return static_cast<int>(k) + 1;
    }
  }
  return -1;
}

// Whether the cluster has the GPUs of every part of `o` (up nodes; in use or not). A mixed
// option's memory is its tightest part's (`type`, plan.device_bytes): the fit tests below hold.
bool Holdable(const RunOption& o, const ClusterView& c) {
  if (!o.mixed()) return o.gpus <= c.TotalOfType(o.type);
  for (const auto& [type, gpus] : o.parts) {
    if (gpus > c.TotalOfType(type)) return false;
  }
  return true;
}

const Plan& LayoutPlan(const RunOption& o, int layout) {
  return layout <= 0 ? o.plan : o.leaner[static_cast<size_t>(layout - 1)];
}

std::string Describe(const ClusterView& c, const RunOption& o, const Plan& p) {
  return fmt::format("{} x {} (tp {}, pp {}, micro-batch {}, zero {}{})", o.gpus,
                     c.types[static_cast<size_t>(o.type)], p.tp, p.pp, p.micro_batch, p.zero,
                     p.recompute == Recompute::kNone ? "" : ", recomputation");
}

}  // namespace

const char* ActionKindName(ActionKind k) {
  switch (k) {
    case ActionKind::kReplan:
      return "replan";
    case ActionKind::kMove:
      return "move";
    case ActionKind::kRequeue:
      return "requeue";
  }
  return "requeue";
}

double TimeToOom(const JobView& j, const JobMemory& m, const ClusterView& c, double now_s) {
  const Plan& plan = j.PlanOf(j.alloc.option, j.layout);
  double capacity = Capacity(c, j.option(j.alloc.option).type);
  double device = static_cast<double>(plan.device_bytes);
  if (device <= 0 || j.total_tokens <= 0) return kInf;
  double p_now = j.DoneAt(now_s) / j.total_tokens;
  double ratio_now = m.ProjectedRatio(p_now);
  double limit = capacity / device;
  if (ratio_now >= limit) return 0;
  if (m.slope <= 0) return kInf;
  double p_crash = p_now + (limit - ratio_now) / m.slope;
  if (p_crash >= 1) return kInf;
  double rate = j.rate_tokens_per_s > 0 ? j.rate_tokens_per_s : plan.tokens_per_s;
  if (rate <= 0) return kInf;
  double pause = std::max(0.0, j.progress_since_s - now_s);
  return pause + (p_crash - p_now) * j.total_tokens / rate;
}

std::vector<MemoryAction> PlanMemoryActions(const Snapshot& s, const MemoryMonitor& monitor,
                                            const RuntimeOptions& opt) {
  const ClusterView& c = *s.cluster;
  struct Urgent {
    const JobView* job;
    double tto;
    double factor;
  };
  std::vector<Urgent> urgent;
  std::vector<MemoryAction> out;
  for (const JobView& j : s.jobs) {
    if (!j.running || j.alloc.option < 0) continue;
    const JobMemory* m = monitor.Find(j.key);
    auto factor = monitor.Factor(j.key);
    if (m == nullptr || m->reports == 0 || !factor) continue;
    double tto = TimeToOom(j, *m, c, s.now_s);
    if (tto < opt.act_horizon_s) {
      urgent.push_back({&j, tto, *factor});
      continue;
    }
    // The reverse: a faster layout of the same option fits what the job really uses.
    if (j.layout <= 0 || tto < kInf) continue;
    const RunOption& o = j.option(j.alloc.option);
    int faster = FittingLayout(o, *factor, Capacity(c, o.type));
    if (faster < 0 || faster >= j.layout) continue;
    double left = std::max(0.0, j.total_tokens - j.DoneAt(s.now_s));
    const Plan& cur = LayoutPlan(o, j.layout);
    const Plan& next = LayoutPlan(o, faster);
    if (cur.tp != next.tp) continue;  // a different TP may not fit the same nodes
    double saved = left / cur.tokens_per_s - left / next.tokens_per_s;
    if (saved < opt.reverse_gain * s.costs.restart.Of(j.options->checkpoint_bytes)) continue;
    MemoryAction a;
    a.job = j.key;
    a.kind = ActionKind::kReplan;
    a.alloc = j.alloc;
    a.layout = faster;
    a.factor = *factor;
    a.time_to_oom_s = tto;
    a.expected_left_s = s.costs.restart.Of(j.options->checkpoint_bytes) + left / next.tokens_per_s;
    a.why = fmt::format("uses {:.2f}x the prediction: back to the faster {}, saving {:.0f} s",
                        m->ProjectedRatio(1.0), Describe(c, o, next), saved);
    out.push_back(std::move(a));
  }
  std::sort(urgent.begin(), urgent.end(), [](const Urgent& a, const Urgent& b) {
    return a.tto != b.tto ? a.tto < b.tto : a.job->key < b.job->key;
  });
  FreeMap free(c);
  for (const Urgent& u : urgent) {
    const JobView& j = *u.job;
    const JobMemory& m = *monitor.Find(j.key);
    double left = std::max(0.0, j.total_tokens - j.DoneAt(s.now_s));
    const RunOption& cur = j.option(j.alloc.option);
    MemoryAction best;
    best.job = j.key;
    best.factor = u.factor;
    best.time_to_oom_s = u.tto;
    best.expected_left_s = kInf;
    // Re-plan in place: same GPUs, a leaner layout.
    int lean = FittingLayout(cur, u.factor, Capacity(c, cur.type));
    if (lean > j.layout && LayoutPlan(cur, lean).tokens_per_s > 0) {
      const Plan& p = LayoutPlan(cur, lean);
      // The GPUs are the job's own; a layout with more TP must still keep groups in a node.
      bool keeps_groups = std::all_of(j.alloc.placement.begin(), j.alloc.placement.end(),
                                      [&](const auto& np) { return np.second % p.tp == 0; });
      if (keeps_groups) {
        best.kind = ActionKind::kReplan;
        best.alloc = j.alloc;
        best.layout = lean;
        best.expected_left_s = s.costs.restart.Of(j.options->checkpoint_bytes) + left / p.tokens_per_s;
        best.why = fmt::format("re-plan on its GPUs to {}", Describe(c, cur, p));
      }
    }
    // Move (or grow) to GPUs free now.
    free.Release(j.alloc.placement);
    std::optional<std::vector<std::pair<int, int64_t>>> best_place;
    for (size_t i = 0; i < j.options->options.size(); ++i) {
      int oi = static_cast<int>(i);
      const RunOption& o = j.options->options[i];
      if (oi == j.alloc.option || j.Failed(oi) || o.mixed()) continue;  // mixed: the policy's
      int layout = FittingLayout(o, u.factor, Capacity(c, o.type));
      if (layout < 0) continue;
      const Plan& p = LayoutPlan(o, layout);
      if (p.tokens_per_s <= 0) continue;
      double t = s.costs.restart.Of(j.options->checkpoint_bytes) + left / p.tokens_per_s;
      if (t >= best.expected_left_s || o.gpus > free.FreeOfType(o.type)) continue;
      auto place = free.Place(o.type, o.gpus, p.tp);
      if (!place) continue;
      free.Release(*place);  // only tried; taken below for the winner
      best.kind = ActionKind::kMove;
      best.alloc = Allocation{oi, *place};
      best.layout = layout;
      best.expected_left_s = t;
      best.why = fmt::format("move to {}", Describe(c, o, p));
      best_place = std::move(place);
    }
    if (best.expected_left_s == kInf) {
      best.kind = ActionKind::kRequeue;
      best.alloc = Allocation{};
      best.why = "no GPUs with room free now: checkpoint and wait for a fitting option";
      // Its GPUs stay released: the scheduler may give them to someone else.
    } else {
      free.Take(best.alloc.placement);
    }
    best.why = fmt::format(
        "projected out of memory in {:.0f} s ({:.2f}x the prediction now, {:.2f}x by the end, "
        "{:.1f} of {:.1f} GiB): {}",
        u.tto, m.ProjectedRatio(j.DoneAt(s.now_s) / std::max(1.0, j.total_tokens)),
        m.ProjectedRatio(1.0),
        static_cast<double>(j.PlanOf(j.alloc.option, j.layout).device_bytes) *
            m.ProjectedRatio(1.0) / kGiB,
        Capacity(c, cur.type) / kGiB, best.why);
    out.push_back(std::move(best));
  }
  return out;
}

OomRecovery RecoverFromOom(const JobView& j, const MemoryMonitor& monitor, const ClusterView& c,
                           const RuntimeOptions& opt) {
  OomRecovery r;
  r.factor = monitor.Factor(j.key).value_or(1.0);
  int ooms = j.ooms + 1;
  // The layout that comes closest to fitting: the least need relative to its GPU's memory.
  double least_need = kInf;
  double closest = kInf;  // need over capacity
  int closest_type = -1;
  bool any = false;
  for (size_t i = 0; i < j.options->options.size(); ++i) {
    const RunOption& o = j.options->options[i];
    if (j.Failed(static_cast<int>(i)) || !Holdable(o, c)) continue;
    double need = static_cast<double>(o.plan.device_bytes);
    for (const Plan& p : o.leaner) need = std::min(need, static_cast<double>(p.device_bytes));
    need *= r.factor;
    least_need = std::min(least_need, need);
    double cap = Capacity(c, o.type);
    if (cap > 0 && need / cap < closest) {
      closest = need / cap;
      closest_type = o.type;
    }
    if (FittingLayout(o, r.factor, cap) >= 0) any = true;
  }
  if (ooms >= opt.max_ooms) {
    r.give_up = true;
    r.message = fmt::format(
        "given up after {} out-of-memory crashes: it uses at least {:.2f}x MARP's prediction; "
        "its leanest layout would need {:.1f} GiB per GPU",
        ooms, r.factor, least_need / kGiB);
  } else if (!any && closest_type < 0) {
    r.give_up = true;
    r.message = fmt::format(
        "given up after {} out-of-memory crash(es): every layout that the cluster can hold has "
        "crashed",
        ooms);
  } else if (!any) {
    r.give_up = true;
    r.message = fmt::format(
        "given up after {} out-of-memory crash(es): it uses at least {:.2f}x MARP's prediction, "
        "so no layout the cluster can hold fits; the closest needs {:.1f} GiB per GPU of {} "
        "({:.1f} GiB)",
        ooms, r.factor, closest * Capacity(c, closest_type) / kGiB, c.types[closest_type],
        Capacity(c, closest_type) / kGiB);
  } else {
    r.message = fmt::format(
        "out of memory ({} of {} allowed): resumes from its last checkpoint planned with {:.2f}x "
        "the prediction, never on the layout that crashed",
        ooms, opt.max_ooms, r.factor);
  }
  return r;
}

}  // namespace frenzy::runtime
