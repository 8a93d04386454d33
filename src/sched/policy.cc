#include "sched/policy.h"

#include <algorithm>

#include "sched/baselines.h"
#include "sched/frenzy_policy.h"
#include "sched/gavel.h"
#include "sched/sia.h"

namespace frenzy {

bool JobView::Failed(int option_index) const {
  return std::find(failed_options.begin(), failed_options.end(), option_index) !=
         failed_options.end();
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

int64_t ClusterView::FreeOfType(int type) const {
  int64_t n = 0;
  for (const auto& node : nodes) {
    if (node.type == type && node.up) n += node.free;
  }
  return n;
}

std::vector<std::string> PolicyNames() {
  return {"fifo-static",       "tiresias",          "gavel",           "sia",
          "frenzy",            "frenzy-no-marp",    "frenzy-no-sjf",   "frenzy-no-hetero",
          "frenzy-no-elastic", "frenzy-no-backfill", "frenzy-no-preempt", "frenzy-no-move"};
}

Result<std::unique_ptr<Policy>> MakePolicy(std::string_view name) {
  std::unique_ptr<Policy> p;
  if (name == "fifo-static") p = MakeFifoStaticPolicy();
  if (name == "tiresias") p = MakeTiresiasPolicy();
  if (name == "gavel") p = MakeGavelPolicy();
  if (name == "sia") p = MakeSiaPolicy();
  // Frenzy and its ablations (one ingredient switched off each; docs/scheduling.md).
  FrenzyKnobs k;
  if (name == "frenzy") p = MakeFrenzyPolicy(k, std::string(name));
  if (name == "frenzy-no-sjf") {
    k.shortest_first = false;
    p = MakeFrenzyPolicy(k, std::string(name));
  }
  if (name == "frenzy-no-hetero") {
    k.hetero_choice = false;
    p = MakeFrenzyPolicy(k, std::string(name));
  }
  if (name == "frenzy-no-elastic") {
    k.elastic_count = false;
    p = MakeFrenzyPolicy(k, std::string(name));
  }
  if (name == "frenzy-no-marp") {
    k.memory_aware = false;
    p = MakeFrenzyPolicy(k, std::string(name));
  }
  if (name == "frenzy-no-preempt") {
    k.preempt = false;
    p = MakeFrenzyPolicy(k, std::string(name));
  }
  if (name == "frenzy-no-move") {
    k.move = false;
    p = MakeFrenzyPolicy(k, std::string(name));
  }
  if (name == "frenzy-no-backfill") {
    k.backfill = false;
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
