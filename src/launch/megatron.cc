// Megatron-LM: torchrun pretrain_gpt.py (or the user's entry) with the user's arguments (model,
// data, optimizer) and Frenzy's parallelism, batch, recomputation and precision flags. Pinned
// to NVIDIA/Megatron-LM f069e0db24e59d4c7fe4d2267dd94e56d0a27c8e
// (megatron/training/arguments.py, a 2025 main-branch snapshot of the core 0.13/0.14 line;
// tests/data/launch/megatron.schema lists every flag).
#include <fmt/core.h>

#include "launch/adapters.h"

namespace frenzy::launch {
namespace {

constexpr const char* kVersion =
    "Megatron-LM@f069e0db24e59d4c7fe4d2267dd94e56d0a27c8e (main, 2025; arguments.py)";

// Flags Frenzy sets; a user's copy (and its value) is dropped.
const std::set<std::string>& OwnedWithValue() {
  static const std::set<std::string> s = {
      "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
      "--expert-model-parallel-size", "--expert-tensor-parallel-size", "--micro-batch-size",
      "--global-batch-size", "--seq-length", "--recompute-granularity", "--recompute-method",
      "--recompute-num-layers", "--fp8-format", "--fp8-recipe", "--moe-expert-capacity-factor", "--moe-token-dispatcher-type",
      "--num-layers-per-virtual-pipeline-stage"};
  return s;
}
const std::set<std::string>& OwnedSwitches() {
  static const std::set<std::string> s = {"--sequence-parallel", "--use-distributed-optimizer",
                                          "--bf16", "--fp16", "--fp8-param-gather",
                                          "--recompute-activations"};
  return s;
}

}  // namespace

LaunchOutcome Megatron(const JobSpec& job, const Plan& p, const Shape& s, const LaunchInput& in) {
  if (p.recompute == Recompute::kOp) {
    return Refused{"Megatron-LM has no per-op selective checkpointing (torchtitan's); its "
                   "selective recomputation is the attention core"};
  }
  Launch l = Start(Launcher::kMegatron, kVersion, s);
  l.argv = Torchrun(s);
  l.argv.push_back(in.entry.empty() ? "pretrain_gpt.py" : in.entry);
  for (const std::string& a : WithoutOwned(in.args, OwnedWithValue(), OwnedSwitches())) {
    l.argv.push_back(a);
  }
  auto set = [&](const char* flag, int64_t v) {
    l.argv.push_back(flag);
    l.argv.push_back(std::to_string(v));
  };
  set("--tensor-model-parallel-size", p.tp);
  set("--pipeline-model-parallel-size", p.pp);
  set("--context-parallel-size", p.cp);
  if (job.model.moe.enabled()) {
    set("--expert-model-parallel-size", p.ep);
    set("--expert-tensor-parallel-size", p.etp);
    if (job.moe_capacity_factor > 0) {
      // Megatron's capacity factor works with the all-to-all dispatcher only (its MoE config
      // refuses it beside the default allgather one).
      l.argv.push_back("--moe-expert-capacity-factor");
      l.argv.push_back(fmt::format("{}", job.moe_capacity_factor));
      l.argv.insert(l.argv.end(), {"--moe-token-dispatcher-type", "alltoall"});
    }
  }
  // The planner runs TP with sequence parallelism under Megatron (ParallelPlan). Megatron's
  // validate_args refuses TP or CP (sequence parallelism, in older versions) unless
  // CUDA_DEVICE_MAX_CONNECTIONS=1 before Blackwell: the collectives' kernels must launch in
  // issue order to overlap with compute.
  if (p.tp > 1) l.argv.push_back("--sequence-parallel");
  if (p.tp > 1 || p.cp > 1) l.env.emplace("CUDA_DEVICE_MAX_CONNECTIONS", "1");
  if (p.distributed_optimizer) l.argv.push_back("--use-distributed-optimizer");
  set("--micro-batch-size", p.micro_batch);
  set("--global-batch-size", job.global_batch);
  set("--seq-length", job.seq_len);
  if (p.recompute == Recompute::kFull) {
    // Every layer: uniform chunks of one layer, each keeping only its input.
    l.argv.insert(l.argv.end(), {"--recompute-granularity", "full", "--recompute-method",
                                 "uniform", "--recompute-num-layers", "1"});
  } else if (p.recompute == Recompute::kSelective) {
    l.argv.insert(l.argv.end(), {"--recompute-granularity", "selective"});
  }
  switch (p.precision) {
    case Precision::kBf16:
      l.argv.push_back("--bf16");
      break;
    case Precision::kFp16:
      l.argv.push_back("--fp16");
      break;
    case Precision::kFp8: {
      // Transformer Engine under bf16: hybrid format (E4M3 forward, E5M2 gradients), and the
      // recipe: delayed scaling, per-tensor current scaling ("tensorwise") or MXFP8.
      const Fp8Recipe r = job.fp8_recipe_or_default();
      const char* recipe = r == Fp8Recipe::kDelayed ? "delayed"
                           : r == Fp8Recipe::kCurrent ? "tensorwise"
                                                      : "mxfp8";
      l.argv.insert(l.argv.end(), {"--bf16", "--fp8-format", "hybrid", "--fp8-recipe", recipe});
      if (job.fp8_param_gather) l.argv.push_back("--fp8-param-gather");
      break;
    }
    case Precision::kFp32:
    case Precision::kBf16Pure:
      break;
  }
  return l;
}

}  // namespace frenzy::launch
