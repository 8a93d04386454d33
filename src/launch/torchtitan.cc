// torchtitan: torchrun -m torchtitan.train with the user's TOML job config, and Frenzy's layout
// as command-line overrides (torchtitan applies `--section.key value` over the file). Pinned to
// pytorch/torchtitan 000204a4a8bf3d0f31adc44fc29855fbb6ea13d8 (torchtitan/config/job_config.py,
// a 2025 main-branch snapshot; tests/data/launch/torchtitan.schema lists every key).
#include <fmt/core.h>

#include "launch/adapters.h"

namespace frenzy::launch {
namespace {

constexpr const char* kVersion =
    "torchtitan@000204a4a8bf3d0f31adc44fc29855fbb6ea13d8 (main, 2025; job_config.py)";

std::variant<std::vector<std::string>, Refused> Recomputation(const Plan& p) {
  // activation_checkpoint.mode none|selective|full; selective_ac_option "op" (per-op SAC) or
  // an integer N (every Nth block).
  switch (p.recompute) {
    case Recompute::kNone:
      return std::vector<std::string>{"--activation_checkpoint.mode", "none"};
    case Recompute::kOp:
      return std::vector<std::string>{"--activation_checkpoint.mode", "selective",
                                      "--activation_checkpoint.selective_ac_option", "op"};
    case Recompute::kFull:
      if (p.recompute_every > 1) {
        return std::vector<std::string>{"--activation_checkpoint.mode", "selective",
                                        "--activation_checkpoint.selective_ac_option",
                                        std::to_string(p.recompute_every)};
      }
      return std::vector<std::string>{"--activation_checkpoint.mode", "full"};
    case Recompute::kSelective:
      break;
  }
  return Refused{"torchtitan has no attention-core-only recomputation (Megatron's selective); "
                 "its selective mode is per-op or every Nth layer"};
}

}  // namespace

LaunchOutcome Torchtitan(const JobSpec& job, const Plan& p, const Shape& s, const LaunchInput& in) {
  if (in.config_file.empty()) {
    return Refused{"torchtitan reads the model, data and optimizer from the user's TOML job "
                   "config: give it (--config-file)"};
  }
  if (job.model.moe.enabled() && p.ep > 1 && p.tp > 1 && p.etp != p.tp) {
    return Refused{"torchtitan at this version runs experts with the dense layers' TP (it has no "
                   "expert_tensor_parallel_degree)"};
  }
  if (p.precision == Precision::kFp16) return Refused{"torchtitan has no fp16 mixed precision"};
  auto rc = Recomputation(p);
  if (auto* r = std::get_if<Refused>(&rc)) return *r;
  Launch l = Start(Launcher::kTorchtitan, kVersion, s);
  l.argv = Torchrun(s);
  l.argv.push_back("-m");
  l.argv.push_back(in.entry.empty() ? "torchtitan.train" : in.entry);
  l.argv.push_back("--job.config_file");
  l.argv.push_back(in.config_file);
  // The user's own overrides, less those Frenzy sets (whole sections, and the batch, sequence
  // and precision keys of [training]); each Frenzy key takes one value.
  std::set<std::string> owned = {"--training.local_batch_size", "--training.global_batch_size",
                                 "--training.seq_len", "--training.mixed_precision_param",
                                 "--training.enable_cpu_offload",
                                 "--training.no_enable_cpu_offload", "--model.converters"};
  for (const std::string& a : in.args) {
    const std::string key = a.substr(0, a.find('='));
    for (const char* section : {"--parallelism.", "--activation_checkpoint.", "--float8."}) {
      if (key.rfind(section, 0) == 0) owned.insert(key);
    }
  }
  for (const std::string& a : WithoutOwned(in.args, owned, {})) l.argv.push_back(a);
  auto set = [&](const std::string& key, const std::string& v) {
    l.argv.push_back("--" + key);
    l.argv.push_back(v);
  };
  // Booleans are switches on torchtitan's command line (`--section.key`; `--section.no_key`
  // turns one off), not `key true`.
  auto on = [&](const std::string& key) { l.argv.push_back("--" + key); };
  auto num = [](int64_t v) { return std::to_string(v); };
  // FSDP2 over the data-parallel ranks, or HSDP: shards within a group (a node's ranks),
  // replicated over dp / group groups (torchtitan's dp_replicate x dp_shard mesh).
  const int64_t shard = p.shard_group > 0 ? p.shard_group : p.dp;
  set("parallelism.data_parallel_replicate_degree", num(p.dp / shard));
  set("parallelism.data_parallel_shard_degree", num(shard));
  set("parallelism.fsdp_reshard_after_forward", p.zero >= 3 ? "always" : "never");
  set("parallelism.tensor_parallel_degree", num(p.tp));
  set("parallelism.pipeline_parallel_degree", num(p.pp));
  set("parallelism.context_parallel_degree", num(p.cp));
  if (job.model.moe.enabled()) set("parallelism.expert_parallel_degree", num(p.ep));
  if (p.pp > 1) {
    // One step runs the rank's whole batch as global / (dp x mb) micro-batches through the
    // stages (1F1B, the schedule the speed model assumes).
    set("parallelism.pipeline_parallel_schedule", "1F1B");
    set("parallelism.pipeline_parallel_microbatch_size", num(p.micro_batch));
    set("training.local_batch_size", num(job.global_batch / p.dp));
  } else {
    set("training.local_batch_size", num(p.micro_batch));  // accumulation reaches the global
  }
  set("training.global_batch_size", num(job.global_batch));
  set("training.seq_len", num(job.seq_len));
  set("training.mixed_precision_param",
      p.precision == Precision::kFp32 ? "float32" : "bfloat16");
  if (p.offload == Offload::kParams) on("training.enable_cpu_offload");
  for (const std::string& a : std::get<std::vector<std::string>>(rc)) l.argv.push_back(a);
  if (p.precision == Precision::kFp8) {
    const Fp8Recipe r = job.fp8_recipe_or_default();
    set("model.converters", "float8");
    // Tensorwise is torchao's default and the only recipe its FP8 all-gather runs with
    // (torchtitan's float8 converter refuses a recipe_name beside the all-gather).
    if (r == Fp8Recipe::kRowwise) set("float8.recipe_name", "rowwise");
    if (job.fp8_param_gather) {
      if (r != Fp8Recipe::kTensorwise) {
        return Refused{"torchao's FP8 all-gather under FSDP is for tensorwise scaling only"};
      }
      on("float8.enable_fsdp_float8_all_gather");
    }
  }
  return l;
}

}  // namespace frenzy::launch
