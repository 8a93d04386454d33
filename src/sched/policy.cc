#include "sched/policy.h"

#include <fmt/core.h>

#include <algorithm>
#include <string_view>
#include <utility>

#include "hardware/cluster.h"
#include "hardware/gpu.h"
#include "sched/baselines.h"
#include "sched/frenzy_policy.h"
#include "sched/gavel.h"
#include "sched/sia.h"

namespace frenzy {

bool JobView::Failed(int option_index) const {
  return std::find(failed_options.begin(), failed_options.end(), option_index) !=
         failed_options.end();
}

int JobView::Layout(int option_index, const ClusterView& cluster) const {
  if (!memory_factor) return 0;
  const RunOption& o = option(option_index);
  double capacity = static_cast<double>(cluster.gpu_memory_bytes[static_cast<size_t>(o.type)]);
  auto fits = [&](const Plan& p) {
    return static_cast<double>(p.device_bytes) * *memory_factor <= capacity;
  };
  if (fits(o.plan)) return 0;
  for (size_t k = 0; k < o.leaner.size(); ++k) {
    if (fits(o.leaner[k])) return static_cast<int>(k) + 1;
  }
  return -1;
}

const Plan& JobView::PlanOf(int option_index, int layout_index) const {
  const RunOption& o = option(option_index);
  return layout_index <= 0 ? o.plan : o.leaner[static_cast<size_t>(layout_index - 1)];
}

bool JobView::Runnable(int option_index, const ClusterView& cluster) const {
  if (option_index < 0 || Failed(option_index)) return false;
  const RunOption& o = option(option_index);
  if (o.plan.tokens_per_s <= 0) return false;
  return Layout(option_index, cluster) >= 0;
}

double JobView::DoneAt(double now_s) const {
  if (!running || rate_tokens_per_s <= 0 || now_s <= progress_since_s) return done_tokens;
  return std::min(total_tokens, done_tokens + rate_tokens_per_s * (now_s - progress_since_s));
}

double JobView::AttainedAt(double now_s) const {
  if (!running || alloc.option < 0 || now_s <= run_start_s) return attained_gpu_s;
  return attained_gpu_s + static_cast<double>(option(alloc.option).gpus) * (now_s - run_start_s);
}

int64_t ClusterView::TotalOfType(int type) const {
  int64_t n = 0;
  for (const auto& node : nodes) {
    if (node.type == type && node.up) n += node.gpus;
  }
  return n;
}

Result<ClusterView> ClusterView::Of(const Cluster& cluster, const GpuCatalog& catalog) {
  ClusterView v;
  for (const auto& node : cluster.nodes) {
    auto it = std::find(v.types.begin(), v.types.end(), node.gpu);
    if (it == v.types.end()) {
      const GpuType* g = catalog.Find(node.gpu);
      if (g == nullptr) {
        return NotFound(fmt::format("unknown GPU type '{}' (node '{}')", node.gpu, node.name),
                        cluster.name);
      }
      v.types.push_back(node.gpu);
      v.gpu_memory_bytes.push_back(g->memory_bytes);
      v.gpus_per_node.push_back(0);
      it = v.types.end() - 1;
    }
    const size_t t = static_cast<size_t>(it - v.types.begin());
    v.gpus_per_node[t] = std::max(v.gpus_per_node[t], node.gpus);
    v.nodes.push_back(NodeView{static_cast<int>(t), node.gpus, node.gpus, true});
  }
  return v;
}

int64_t ClusterView::FreeOfType(int type) const {
  int64_t n = 0;
  for (const auto& node : nodes) {
    if (node.type == type && node.up) n += node.free;
  }
  return n;
}

namespace {

// Frenzy's ablations: one ingredient switched off each (docs/scheduling.md).
struct Ablation {
  std::string_view name;
  void (*off)(FrenzyKnobs&);
};
constexpr Ablation kFrenzyAblations[] = {
    {"frenzy-no-marp", [](FrenzyKnobs& k) { k.memory_aware = false; }},
    {"frenzy-no-srpt", [](FrenzyKnobs& k) { k.core.shortest_first = false; }},
    {"frenzy-no-elastic", [](FrenzyKnobs& k) { k.core.elastic = false; }},
    {"frenzy-no-swap", [](FrenzyKnobs& k) { k.core.swap_types = false; }},
    {"frenzy-no-fallback", [](FrenzyKnobs& k) { k.core.fallback = false; }},
    {"frenzy-no-floor", [](FrenzyKnobs& k) { k.core.growth_floor = 0; }},
    {"frenzy-no-preempt", [](FrenzyKnobs& k) { k.core.preempt = false; }},
    {"frenzy-no-move", [](FrenzyKnobs& k) { k.core.move = false; }},
    {"frenzy-no-tick", [](FrenzyKnobs& k) { k.round_s = 0; }},
    {"frenzy-no-mixed", [](FrenzyKnobs& k) { k.mixed = false; }},
    {"frenzy-no-dynamic", [](FrenzyKnobs& k) { k.dynamic_memory = false; }},
};

}  // namespace

std::vector<std::string> PolicyNames() {
  std::vector<std::string> names = {"fifo-static", "tiresias", "gavel", "sia", "frenzy"};
  for (const Ablation& a : kFrenzyAblations) names.emplace_back(a.name);
  return names;
}

Result<std::unique_ptr<Policy>> MakePolicy(std::string_view name) {
  std::unique_ptr<Policy> p;
  if (name == "fifo-static") p = MakeFifoStaticPolicy();
  if (name == "tiresias") p = MakeTiresiasPolicy();
  if (name == "gavel") p = MakeGavelPolicy();
  if (name == "sia") p = MakeSiaPolicy();
  if (name == "frenzy") p = MakeFrenzyPolicy();
  for (const Ablation& a : kFrenzyAblations) {
    if (name != a.name) continue;
    FrenzyKnobs k;
    a.off(k);
    p = MakeFrenzyPolicy(k, std::string(name));
  }
  if (p == nullptr) {
    std::string known;
    for (const auto& n : PolicyNames()) known += (known.empty() ? "" : ", ") + n;
    return NotFound("unknown policy '" + std::string(name) + "' (known: " + known + ")", {},
                    "policy");
  }
  return p;
}

}  // namespace frenzy
