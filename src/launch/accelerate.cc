// HF Accelerate: `accelerate launch --config_file accelerate.yaml` with the user's script (an HF
// Trainer or Accelerate loop: model, data and optimizer are theirs) on FSDP (FSDP1 sharding
// strategies). The user's arguments pass unchanged: Accelerate has no flag names of its own in
// the script's command line to recognise. Pinned to huggingface/accelerate
// 6891c57072295eec14d9866ca34472d59708db9c (commands/launch.py; the config keys of
// commands/config/config_args.py; tests/data/launch/accelerate.schema lists every flag and key
// with its source).
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
  if (p.recompute != Recompute::kNone && p.recompute != Recompute::kFull) {
    return Refused{"Accelerate's FSDP plugin checkpoints whole layers only "
                   "(fsdp_activation_checkpointing)"};
  }
  const char* mixed = p.precision == Precision::kBf16   ? "bf16"
                      : p.precision == Precision::kFp16 ? "fp16"
                                                        : "no";
  const int64_t accumulation = Accumulation(job, p);
  // The YAML `accelerate config` writes. ZeRO-2 and -3 are FSDP1's SHARD_GRAD_OP and FULL_SHARD,
  // named explicitly (launch.py passes a strategy, FULL_SHARD by default, which wins over
  // fsdp_reshard_after_forward under FSDP1). Transformer blocks are the wrapping unit.
  std::string yaml = "compute_environment: LOCAL_MACHINE\n";
  yaml += "distributed_type: FSDP\n";
  yaml += fmt::format("mixed_precision: {}\n", mixed);
  yaml += fmt::format("num_machines: {}\nnum_processes: {}\n", s.nodes, p.gpus);
  yaml += "rdzv_backend: c10d\nsame_network: true\nmain_training_function: main\n";
  yaml += "fsdp_config:\n";
  yaml += "  fsdp_version: 1\n";
  // Hybrid sharding is FSDP1's HYBRID_SHARD (ZeRO-3) or HYBRID_SHARD_ZERO2 (ZeRO-2), which
  // shard within a node's processes: the plan's shard group must be exactly those.
  if (p.shard_group > 0 && p.shard_group != s.per_node) {
    return Refused{fmt::format("FSDP's hybrid sharding shards over a node's {} processes, not a "
                               "group of {}",
                               s.per_node, p.shard_group)};
  }
  const bool hybrid = p.shard_group > 0;
  yaml += fmt::format("  fsdp_sharding_strategy: {}\n",
                      p.zero >= 3 ? (hybrid ? "HYBRID_SHARD" : "FULL_SHARD")
                                  : (hybrid ? "HYBRID_SHARD_ZERO2" : "SHARD_GRAD_OP"));
  yaml += "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n";
  yaml += "  fsdp_backward_prefetch: BACKWARD_PRE\n";
  yaml += "  fsdp_state_dict_type: SHARDED_STATE_DICT\n";
  yaml += "  fsdp_use_orig_params: true\n";
  yaml += fmt::format("  fsdp_offload_params: {}\n", p.offload == Offload::kParams);
  yaml += fmt::format("  fsdp_activation_checkpointing: {}\n", p.recompute == Recompute::kFull);
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
            in.entry};
  for (const std::string& a : in.args) l.argv.push_back(a);
  // The per-device batch and the accumulation are the script's (its DataLoader and its
  // Accelerator(gradient_accumulation_steps=...); `accelerate launch` forwards its own
  // --gradient_accumulation_steps to DeepSpeed runs only): Frenzy's contract is these
  // variables (an HF Trainer script passes them as --per_device_train_batch_size and
  // --gradient_accumulation_steps).
  l.env["FRENZY_MICRO_BATCH"] = std::to_string(p.micro_batch);
  l.env["FRENZY_GRAD_ACCUM"] = std::to_string(accumulation);
  return l;
}

}  // namespace frenzy::launch
