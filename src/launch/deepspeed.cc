// DeepSpeed: torchrun with the user's script, which calls deepspeed.initialize with the config
// Frenzy writes (ds_config.json: batch split, ZeRO stage, offload, precision) through the
// arguments deepspeed.add_config_arguments adds (--deepspeed --deepspeed_config FILE). Started
// by torchrun rather than DeepSpeed's pdsh/ssh launcher, so that every backend starts it the
// same way. Pinned to DeepSpeed 0.16.x: microsoft/DeepSpeed 03dc2b92f3d31a79ddb99caa7180d06b3379082c
// (deepspeed/runtime/zero/config.py; tests/data/launch/deepspeed.schema lists every key and the
// files each comes from).
#include <fmt/core.h>

#include "launch/adapters.h"

namespace frenzy::launch {
namespace {

constexpr const char* kVersion =
    "DeepSpeed 0.16.x (microsoft/DeepSpeed@03dc2b92f3d31a79ddb99caa7180d06b3379082c, zero/config.py)";

}  // namespace

LaunchOutcome DeepSpeed(const JobSpec& job, const Plan& p, const Shape& s, const LaunchInput& in) {
  if (in.entry.empty()) {
    return Refused{"DeepSpeed runs the user's training script: give its entry point"};
  }
  if (p.precision == Precision::kFp8) return Refused{"FP8 under DeepSpeed is not modelled"};
  if (p.offload == Offload::kParams && p.zero != 3) {
    return Refused{"DeepSpeed offloads parameters under ZeRO-3 only"};
  }
  nlohmann::json ds;
  ds["train_batch_size"] = job.global_batch;
  ds["train_micro_batch_size_per_gpu"] = p.micro_batch;
  ds["gradient_accumulation_steps"] = Accumulation(job, p);
  ds["zero_optimization"]["stage"] = p.zero;
  if (p.offload == Offload::kOptimizer || p.offload == Offload::kParams) {
    ds["zero_optimization"]["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
  }
  if (p.offload == Offload::kParams) {
    ds["zero_optimization"]["offload_param"] = {{"device", "cpu"}, {"pin_memory", true}};
  }
  ds["bf16"]["enabled"] = p.precision == Precision::kBf16;
  ds["fp16"]["enabled"] = p.precision == Precision::kFp16;
  Launch l = Start(Launcher::kDeepSpeed, kVersion, s);
  l.files["ds_config.json"] = ds.dump(2) + "\n";
  l.argv = Torchrun(s);
  l.argv.push_back(in.entry);
  for (const std::string& a : WithoutOwned(in.args, {"--deepspeed_config"}, {"--deepspeed"})) {
    l.argv.push_back(a);
  }
  l.argv.insert(l.argv.end(), {"--deepspeed", "--deepspeed_config", "ds_config.json"});
  return l;
}

}  // namespace frenzy::launch
