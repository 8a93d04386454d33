// HF Accelerate: `accelerate launch --config_file accelerate.yaml` with the user's script (an HF
// Trainer or Accelerate loop: model, data and optimizer are theirs) on FSDP (FSDP1 sharding
// strategies) or DDP. Pinned to huggingface/accelerate 6891c57072295eec14d9866ca34472d59708db9c
// (commands/launch.py; the config keys of commands/config/config_args.py;
// tests/data/launch/accelerate.schema lists every flag and key with its source).
#include <fmt/core.h>

#include "launch/adapters.h"

namespace frenzy::launch {
namespace {

constexpr const char* kVersion =
    "accelerate@6891c57072295eec14d9866ca34472d59708db9c (1.x, 2025; commands/launch.py)";

}  // namespace

LaunchOutcome Accelerate(const JobSpec& job, const Plan& p, const Shape& s, const LaunchInput& in) {
  if (in.entry.empty()) {
    return Refused{"Accelerate runs the user's training script: give its entry point"};
  }
  if (p.precision == Precision::kFp8) return Refused{"FP8 under Accelerate is not modelled"};
  const char* mixed = p.precision == Precision::kBf16   ? "bf16"
                      : p.precision == Precision::kFp16 ? "fp16"
                                                        : "no";
  const int64_t accumulation = Accumulation(job, p);
  // The YAML `accelerate config` writes. zero 0 is DDP; 2 and 3 are FSDP1's SHARD_GRAD_OP and
  // FULL_SHARD, named explicitly (launch.py passes a strategy, FULL_SHARD by default, which
  // wins over fsdp_reshard_after_forward under FSDP1). Transformer blocks are the wrapping unit.
  std::string yaml = "compute_environment: LOCAL_MACHINE\n";
  yaml += fmt::format("distributed_type: {}\n", p.zero == 0 ? "MULTI_GPU" : "FSDP");
  yaml += fmt::format("mixed_precision: {}\n", mixed);
  yaml += fmt::format("num_machines: {}\nnum_processes: {}\n", s.nodes, p.gpus);
  yaml += "rdzv_backend: c10d\nsame_network: true\nmain_training_function: main\n";
  if (p.zero > 0) {
    yaml += "fsdp_config:\n";
    yaml += "  fsdp_version: 1\n";
    yaml += fmt::format("  fsdp_sharding_strategy: {}\n", p.zero >= 3 ? "FULL_SHARD" : "SHARD_GRAD_OP");
    yaml += "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n";
    yaml += "  fsdp_backward_prefetch: BACKWARD_PRE\n";
    yaml += "  fsdp_state_dict_type: SHARDED_STATE_DICT\n";
    yaml += "  fsdp_use_orig_params: true\n";
    yaml += fmt::format("  fsdp_offload_params: {}\n", p.offload == Offload::kParams);
    yaml += fmt::format("  fsdp_activation_checkpointing: {}\n", p.recompute == Recompute::kFull);
  } else if (p.recompute != Recompute::kNone) {
    return Refused{"Accelerate switches activation checkpointing on through its FSDP plugin "
                   "only; under DDP it is the user's script's (gradient_checkpointing)"};
  }
  Launch l = Start(Launcher::kAccelerate, kVersion, s);
  l.files["accelerate.yaml"] = yaml;
  l.argv = {"accelerate",
            "launch",
            "--config_file",
            "accelerate.yaml",
            fmt::format("--num_machines={}", s.nodes),
            fmt::format("--num_processes={}", p.gpus),
            "--machine_rank=$NODE_RANK",
            "--main_process_ip=$MASTER_ADDR",
            "--main_process_port=$MASTER_PORT",
            fmt::format("--gradient_accumulation_steps={}", accumulation),
            in.entry};
  for (const std::string& a : in.args) l.argv.push_back(a);
  // The per-device batch is the script's DataLoader's: Frenzy's contract is this variable (an
  // HF Trainer script passes it as --per_device_train_batch_size).
  l.env["FRENZY_MICRO_BATCH"] = std::to_string(p.micro_batch);
  l.env["FRENZY_GRAD_ACCUM"] = std::to_string(accumulation);
  return l;
}

}  // namespace frenzy::launch
