#include "planner/explain.h"

#include <fmt/core.h>

namespace frenzy {
namespace {

std::string Duration(double s) {
  if (s < 3600) return fmt::format("{:.0f} min", s / 60);
  if (s < 86400 * 2) return fmt::format("{:.1f} h", s / 3600);
  return fmt::format("{:.1f} days", s / 86400);
}

std::string Gib(int64_t b) { return fmt::format("{:.0f}", static_cast<double>(b) / (1 << 30)); }

std::string ExplainWinner(const PlanResult& r, const PlannerOptions& opt) {
  if (r.plans.empty()) return "no plans requested (--top 0)";
  const Plan& w = r.plans.front();
  const char* why = opt.objective == Objective::kCost  ? "cheapest"
                    : opt.objective == Objective::kMix ? "best time x cost"
                                                       : "fastest";
  std::string paged;
  if (w.resident_bytes > 0 && w.resident_bytes < w.device_bytes) {
    paged = fmt::format(" ({} GiB of them paged optimizer states the driver can move to host "
                        "memory)",
                        Gib(w.device_bytes - w.resident_bytes));
  }
  std::string offload;
  if (w.offload != Offload::kNone) {
    offload = fmt::format(
        "; nothing fits the GPUs without offload: {} offloaded to host memory, {} GiB per node",
        w.offload == Offload::kParams ? "parameters, gradients and optimizer states"
                                      : "optimizer states and gradients (CPU optimizer step)",
        Gib(w.host_bytes_per_node));
  } else if (w.offload_activations) {
    offload = fmt::format(
        "; nothing fits the GPUs otherwise: saved activations offloaded to host memory "
        "(torchtune's activation offloading), {} GiB per node",
        Gib(w.host_bytes_per_node));
  }
  return fmt::format(
      "{} plan: {} x {} (TP {}, PP {}, DP {}{}{}, micro-batch {}, {} recomputation) trains in {} "
      "at {:.0f}% MFU; {} of {} GiB per GPU{}",
      why, w.gpus, w.gpu, w.tp, w.pp, w.dp,
      (w.cp > 1 ? fmt::format(", CP {}", w.cp) : "") +
          (w.ep > 1 ? fmt::format(", EP {}", w.ep) : "") +
          (w.etp != w.tp ? fmt::format(", expert TP {}", w.etp) : ""),
      w.zero > 0 ? fmt::format(", ZeRO {}", w.zero) : "", w.micro_batch,
      RecomputeText(w), Duration(w.total_s), 100 * w.mfu, Gib(w.device_bytes),
      Gib(w.gpu_memory_bytes), paged + offload);
}

// What trying offload found, when it was tried and nothing fit.
std::string ExplainOffload(const Infeasible& why) {
  std::string s;
  if (why.offload_tried) {
    s = why.offload_least_host_bytes > 0
            ? fmt::format(" With offload the GPUs would hold it, but it needs {} GiB of host "
                          "memory per node (with the host margin) and the nodes have {} GiB.",
                          Gib(why.offload_least_host_bytes), Gib(why.offload_host_memory_bytes))
            : std::string(" Offload to host memory was tried and does not fit the GPUs either.");
  }
  if (!why.host_memory_unknown.empty()) {
    std::string types;
    for (const auto& t : why.host_memory_unknown) types += (types.empty() ? "" : ", ") + t;
    s += " Offload was not tried on " + types +
         ": the cluster file gives no host_memory_gib for their nodes.";
  }
  return s;
}

std::string ExplainTooLittleMemory(const Infeasible& why) {
  std::string s = "no plan fits this cluster:";
  for (size_t i = 0; i < why.shortfalls.size(); ++i) {
    const Shortfall& f = why.shortfalls[i];
    const Plan& l = f.least;
    s += fmt::format(
        " {} ({} GiB): at least {} GiB per GPU even on {} of them (TP={} PP={} DP={}, {} "
        "recomputation){}",
        f.gpu, Gib(f.gpu_memory_bytes), Gib(f.least_bytes), l.gpus, l.tp, l.pp, l.dp,
        RecomputeName(l.recompute), i + 1 < why.shortfalls.size() ? ";" : ".");
  }
  s += ExplainOffload(why);
  if (!why.would_fit) {
    return s + " More GPUs of a type (to shard further) or GPUs with more memory would fit it.";
  }
  const Plan& f = why.would_fit->plan;
  return s + fmt::format(
                 " It would fit on {} x {} (TP={} PP={} DP={}, {} recomputation); this cluster "
                 "has {}.",
                 f.gpus, f.gpu, f.tp, f.pp, f.dp, RecomputeName(f.recompute),
                 why.would_fit->cluster_gpus);
}

std::string ExplainInfeasible(const Infeasible& why) {
  switch (why.kind) {
    case InfeasibleKind::kGoalsUnmet:
      return "plans fit in memory, but none meets the deadline or budget (a GPU type whose "
             "price is unknown never meets a budget)";
    case InfeasibleKind::kNoLayout:
      return "no layout of this model is possible here" +
             (why.error ? " (" + why.error->field + ": " + why.error->message + ")"
                        : std::string(" with these pins"));
    case InfeasibleKind::kTooLittleMemory:
      return ExplainTooLittleMemory(why);
  }
  return "no plan fits";
}

// A layout without speed: the fields of a Shortfall's least layout.
nlohmann::json LayoutToJson(const Plan& p) {
  nlohmann::json j = PlanToJson(p);
  for (const char* speed : {"gpu", "gpu_memory_bytes", "iteration_s", "tokens_per_s", "mfu",
                            "total_s", "cost", "pareto"}) {
    j.erase(speed);
  }
  return j;
}

}  // namespace

std::string ExplainPlan(const PlanResult& result, const PlannerOptions& options) {
  return result.infeasible ? ExplainInfeasible(*result.infeasible) : ExplainWinner(result, options);
}

nlohmann::json InfeasibleToJson(const Infeasible& why) {
  nlohmann::json j;
  j["kind"] = InfeasibleKindName(why.kind);
  j["error"] = why.error
                   ? nlohmann::json{{"field", why.error->field}, {"message", why.error->message}}
                   : nlohmann::json(nullptr);
  j["offload"] = why.offload_tried
                     ? nlohmann::json{{"host_memory_unknown", why.host_memory_unknown},
                                      {"least_host_bytes_per_node", why.offload_least_host_bytes},
                                      {"host_memory_bytes", why.offload_host_memory_bytes}}
                     : nlohmann::json(nullptr);
  j["shortfalls"] = nlohmann::json::array();
  for (const Shortfall& f : why.shortfalls) {
    j["shortfalls"].push_back({{"gpu", f.gpu},
                               {"gpu_memory_bytes", f.gpu_memory_bytes},
                               {"least_bytes", f.least_bytes},
                               {"least_layout", LayoutToJson(f.least)}});
  }
  j["would_fit"] = why.would_fit ? nlohmann::json{{"plan", PlanToJson(why.would_fit->plan)},
                                                  {"cluster_gpus", why.would_fit->cluster_gpus}}
                                 : nlohmann::json(nullptr);
  return j;
}

nlohmann::json InfeasibleOrNull(const PlanResult& result) {
  return result.infeasible ? InfeasibleToJson(*result.infeasible) : nlohmann::json(nullptr);
}

}  // namespace frenzy
