#include "cli/mixed_layouts.h"

#include <algorithm>
#include <cstdlib>

#include <fmt/core.h>

#include "cli/commands.h"
#include "memory/memory_json.h"

#include "hardware/cluster.h"
#include "hardware/gpu.h"

namespace frenzy::cli {

Result<std::vector<StageGpus>> ParseStageGpus(const std::string& text, int64_t pp) {
  auto bad = [](const std::string& msg) { return InvalidArgument(msg, {}, "--stage-gpus"); };
  std::vector<StageGpus> parts;
  int64_t stages = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string part = text.substr(start, end - start);
    const size_t colon = part.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == part.size()) {
      return bad("expected TYPE:STAGES, found '" + part + "'");
    }
    const std::string count = part.substr(colon + 1);
    char* stop = nullptr;
    const long long n = std::strtoll(count.c_str(), &stop, 10);
    if (stop == nullptr || *stop != '\0' || n < 1 || n > (1 << 20)) {
      return bad("'" + count + "' is not a number of stages (1 or more)");
    }
    auto gpu = GpuCatalog::Default().Lookup(part.substr(0, colon));
    if (!gpu.ok()) return gpu.status().WithWhere("--stage-gpus");
    parts.push_back(StageGpus{*gpu, Network{}, static_cast<int64_t>(n)});
    stages += n;
    start = end + 1;
  }
  if (stages != pp) {
    return bad("names " + std::to_string(stages) + " stages; the layout has --pp " +
               std::to_string(pp));
  }
  return parts;
}

Result<std::vector<DataGroup>> ParseDataGroups(const std::string& text, int64_t micro_batch) {
  auto bad = [](const std::string& msg) { return InvalidArgument(msg, {}, "--data-groups"); };
  std::vector<DataGroup> groups;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string group = text.substr(start, end - start);
    std::vector<std::string> f;
    for (size_t a = 0;;) {
      size_t b = group.find(':', a);
      f.push_back(group.substr(a, b == std::string::npos ? std::string::npos : b - a));
      if (b == std::string::npos) break;
      a = b + 1;
    }
    if (f.size() < 3 || f.size() > 4 || f[0].empty()) {
      return bad("expected TYPE:REPLICAS:BATCH[:MICRO], found '" + group + "'");
    }
    int64_t n[3] = {0, 0, micro_batch};
    const char* what[3] = {"replicas", "batch", "micro-batch"};
    for (size_t k = 1; k < f.size(); ++k) {
      char* stop = nullptr;
      const long long v = std::strtoll(f[k].c_str(), &stop, 10);
      if (f[k].empty() || stop == nullptr || *stop != '\0' || v < 1 || v > (1 << 24)) {
        return bad("'" + f[k] + "' in '" + group + "' is not a number of " + what[k - 1] +
                   " (1 or more)");
      }
      n[k - 1] = v;
    }
    auto gpu = GpuCatalog::Default().Lookup(f[0]);
    if (!gpu.ok()) return gpu.status().WithWhere("--data-groups");
    if (n[1] % (n[0] * n[2]) != 0) {
      return bad("'" + group + "': the batch must be a multiple of replicas x micro-batch");
    }
    groups.push_back(DataGroup{*gpu, Network{}, n[0], n[2], n[1]});
    start = end + 1;
  }
  if (groups.size() < 2) return bad("name two groups or more");
  return groups;
}

nlohmann::json StageFits(const MemoryEstimate& est, const std::vector<StageGpus>& parts) {
  nlohmann::json out = nlohmann::json::array();
  size_t stage = 0;  // est holds every stage (StageDetail::kAll), in order
  for (const StageGpus& part : parts) {
    const GpuType& gpu = *part.gpu;
    for (int64_t k = 0; k < part.stages && stage < est.stages.size(); ++k, ++stage) {
      const StageEstimate& s = est.stages[stage];
      const int64_t resident = s.device_bytes - s.pageable_bytes;
      out.push_back({{"stage", s.stage},
                     {"gpu", gpu.name},
                     {"gpu_memory_bytes", gpu.memory_bytes},
                     {"resident_bytes", resident},
                     {"headroom_bytes", gpu.memory_bytes - resident},
                     {"fits", resident <= gpu.memory_bytes}});
    }
  }
  return out;
}

// The network of `gpu` nodes in `cluster`, or the class's default (DefaultNetwork); `why`
// names the one assumed.
Result<Network> NetworkFor(const std::string& cluster, const GpuType& gpu, int64_t gpus,
                           std::string* why) {
  Network net;
  if (cluster.empty()) return DefaultNetwork(gpu, gpus, why);
  ASSIGN_OR_RETURN(Cluster c, ResolveCluster(cluster, GpuCatalog::Default()));
  bool found = false;
  for (const auto& node : c.nodes) {
    if (node.gpu != gpu.name) continue;
    if (!found || node.gpus > net.gpus_per_node) net.gpus_per_node = node.gpus;
    net.inter_node_gbs = found ? std::min(net.inter_node_gbs, node.network_gbs) : node.network_gbs;
    found = true;
  }
  if (!found) return InvalidArgument("cluster " + c.name + " has no " + gpu.name, {}, "--gpu");
  *why = fmt::format("{}'s {} nodes: {} GPUs each, {:g} GB/s per node", c.name, gpu.name,
                     net.gpus_per_node, net.inter_node_gbs);
  return net;
}

// The figures of a perf estimate that `perf --json` prints for every layout.
nlohmann::json PerfFiguresJson(const std::string& model, const PerfEstimate& e) {
  return {{"model", model},
          {"gpus", e.gpus},
          {"iteration_s", e.iteration_s},
          {"tokens_per_s", e.tokens_per_s},
          {"tokens_per_s_per_gpu", e.tokens_per_s_per_gpu},
          {"tflops_per_gpu", e.tflops_per_gpu},
          {"mfu", e.mfu},
          {"model_flops_per_token", e.model_flops_per_token}};
}

// predict --data-groups: each group's replicas accounted on its own type with its micro-batch
// and its own ZeRO shards.
void PredictDataGroups(const std::string& text, const ModelSpec& spec,
                       const TrainingSpec& train, const ParallelPlan& plan, bool json) {
  auto groups = ParseDataGroups(text, train.micro_batch);
  if (!groups.ok()) return Fail(groups.status());
  nlohmann::json out = nlohmann::json::array();
  bool all_fit = true;
  for (const DataGroup& g : *groups) {
    TrainingSpec t = train;
    t.micro_batch = g.micro_batch;
    t.global_batch = g.batch;
    ParallelPlan p = plan;
    p.dp = g.dp;
    p.distributed_optimizer = plan.distributed_optimizer && g.dp > 1;
    auto est = PredictMemory(spec, t, p, StageDetail::kWorst);
    if (!est.ok()) {
      Status s = est.status();
      return Fail(InvalidArgument("impossible layout for " + spec.name + " on the " +
                                      g.gpu->name + " group: " + s.message(),
                                  FlagOf(s.field())));
    }
    const bool fits = est->resident_bytes <= g.gpu->memory_bytes;
    all_fit = all_fit && fits;
    out.push_back({{"gpu", g.gpu->name},
                   {"dp", g.dp},
                   {"micro_batch", g.micro_batch},
                   {"batch", g.batch},
                   {"accumulation", g.accumulation()},
                   {"peak_bytes", est->peak_bytes},
                   {"reserved_bytes", est->peak_reserved_bytes},
                   {"device_bytes", est->device_bytes},
                   {"resident_bytes", est->resident_bytes},
                   {"gpu_memory_bytes", g.gpu->memory_bytes},
                   {"headroom_bytes", g.gpu->memory_bytes - est->resident_bytes},
                   {"fits", fits}});
  }
  if (json) {
    return PrintJson({{"model", spec.name},
                      {"layout", LayoutToJson(train, plan)},
                      {"data_groups", out},
                      {"fits", all_fit}});
  }
  fmt::print("{}: heterogeneous data parallelism over {} groups (tp {} pp {} cp {} a replica), "
             "{}, ZeRO {}{}\n",
             spec.name, out.size(), plan.tp, plan.pp, plan.cp,
             PrecisionName(train.precision), plan.zero,
             plan.distributed_optimizer ? ", distributed optimizer" : "");
  for (const auto& g : out) {
    fmt::print("  {:<12} {} replica(s), {} sequences a step (micro-batch {} x {}): peak {} GiB, "
               "device {} GiB of {} GiB: {}\n",
               g["gpu"].get<std::string>(), g["dp"].get<int64_t>(), g["batch"].get<int64_t>(),
               g["micro_batch"].get<int64_t>(), g["accumulation"].get<int64_t>(),
               Gib(g["peak_bytes"].get<int64_t>()), Gib(g["device_bytes"].get<int64_t>()),
               Gib(g["gpu_memory_bytes"].get<int64_t>()),
               g["fits"].get<bool>() ? "fits" : "does NOT fit");
  }
}

// perf --stage-gpus: every stage on its own type, at the slowest stage's pace.
void PerfStageGpus(const std::string& text, const ModelSpec& spec, const TrainingSpec& train,
                   const ParallelPlan& plan, const std::string& cluster, bool json) {
  auto parsed = ParseStageGpus(text, plan.pp);
  if (!parsed.ok()) return Fail(parsed.status());
  std::vector<StageGpus> parts = *parsed;
  nlohmann::json nets = nlohmann::json::array();
  for (StageGpus& part : parts) {
    std::string why;
    auto net = NetworkFor(cluster, *part.gpu, part.stages * plan.tp * plan.dp * plan.cp,
                          &why);
    if (!net.ok()) return Fail(net.status().WithWhere("--stage-gpus"));
    part.net = *net;
    nets.push_back({{"gpu", part.gpu->name}, {"stages", part.stages}, {"assumed", why}});
  }
  auto mixed = PredictMixedPerf(spec, train, plan, parts);
  if (!mixed.ok()) {
    Status s = mixed.status();
    return Fail(InvalidArgument("impossible layout for " + spec.name + ": " + s.message(),
                                FlagOf(s.field())));
  }
  const PerfEstimate& e = mixed->estimate;
  if (json) {
    nlohmann::json j = PerfFiguresJson(spec.name, e);
    j["stage_iteration_s"] = mixed->stage_iteration_s;
    j["slowest_stage"] = mixed->slowest_stage;
    j["parts"] = nets;
    j["layout"] = LayoutToJson(train, plan);
    return PrintJson(j);
  }
  fmt::print("{} on {} GPUs in a {}-stage pipeline over {} GPU types, micro-batch {} x {} "
             "tokens, {}\n",
             spec.name, e.gpus, plan.pp, parts.size(), train.micro_batch, train.seq_len,
             FrameworkName(train.framework));
  fmt::print("  iteration {:.3f} s at stage {}'s pace, {:.0f} tokens/s ({:.0f} per GPU), MFU "
             "{:.1f}% of the GPUs' summed peaks\n",
             e.iteration_s, mixed->slowest_stage, e.tokens_per_s, e.tokens_per_s_per_gpu,
             100 * e.mfu);
  int64_t stage = 0;
  for (const StageGpus& part : parts) {
    for (int64_t k = 0; k < part.stages; ++k, ++stage) {
      fmt::print("    stage {:<3} {:<12} {:>3} layers  {:.3f} s\n", stage, part.gpu->name,
                 plan.LayersOfStage(stage, spec.num_layers),
                 mixed->stage_iteration_s[static_cast<size_t>(stage)]);
    }
  }
  for (const auto& n : nets) fmt::print("  network: {}\n", n["assumed"].get<std::string>());
}

// perf --data-groups: each group at its own pace, the job at the slowest one's plus the
// exchange of gradients between groups.
void PerfDataGroups(const std::string& text, const ModelSpec& spec, const TrainingSpec& train,
                    const ParallelPlan& plan, const std::string& cluster, bool json) {
  auto parsed = ParseDataGroups(text, train.micro_batch);
  if (!parsed.ok()) return Fail(parsed.status());
  std::vector<DataGroup> groups = *parsed;
  TrainingSpec t = train;
  t.global_batch = 0;
  nlohmann::json nets = nlohmann::json::array();
  for (DataGroup& g : groups) {
    std::string why;
    auto net = NetworkFor(cluster, *g.gpu, g.dp * plan.tp * plan.pp * plan.cp, &why);
    if (!net.ok()) return Fail(net.status().WithWhere("--data-groups"));
    g.net = *net;
    t.global_batch += g.batch;
    nets.push_back({{"gpu", g.gpu->name}, {"assumed", why}});
  }
  auto mixed = PredictMixedDataPerf(spec, t, plan, groups);
  if (!mixed.ok()) {
    Status s = mixed.status();
    return Fail(InvalidArgument("impossible layout for " + spec.name + ": " + s.message(),
                                s.field() == "data_groups" ? "--data-groups" : FlagOf(s.field())));
  }
  const PerfEstimate& e = mixed->estimate;
  if (json) {
    nlohmann::json j = PerfFiguresJson(spec.name, e);
    j["global_batch"] = t.global_batch;
    j["group_step_s"] = mixed->group_step_s;
    j["cross_group_s"] = mixed->cross_group_s;
    j["slowest_group"] = mixed->slowest_group;
    j["groups"] = nets;
    j["layout"] = LayoutToJson(train, plan);
    return PrintJson(j);
  }
  fmt::print("{} on {} GPUs in {} data-parallel groups, global batch {} x {} tokens, {}\n",
             spec.name, e.gpus, groups.size(), t.global_batch, t.seq_len,
             FrameworkName(train.framework));
  fmt::print("  step {:.3f} s (group {}'s {:.3f} s + {:.3f} s exchanging gradients between "
             "groups), {:.0f} tokens/s ({:.0f} per GPU), MFU {:.1f}% of the GPUs' summed peaks\n",
             e.iteration_s, mixed->slowest_group,
             mixed->group_step_s[static_cast<size_t>(mixed->slowest_group)], mixed->cross_group_s,
             e.tokens_per_s, e.tokens_per_s_per_gpu, 100 * e.mfu);
  for (size_t i = 0; i < groups.size(); ++i) {
    const DataGroup& g = groups[i];
    fmt::print("    group {:<2} {:<12} {:>3} replica(s) {:>5} sequences (micro-batch {} x {})  "
               "{:.3f} s\n",
               i, g.gpu->name, g.dp, g.batch, g.micro_batch, g.accumulation(),
               mixed->group_step_s[i]);
  }
  for (const auto& n : nets) fmt::print("  network: {}\n", n["assumed"].get<std::string>());
}

}  // namespace frenzy::cli
