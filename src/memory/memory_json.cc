#include "memory/memory_json.h"

namespace frenzy {

nlohmann::json BreakdownToJson(const MemoryBreakdown& b) {
  return {{"weights", b.weights},         {"gradients", b.gradients},
          {"optimizer", b.optimizer},     {"activations", b.activations},
          {"logits", b.logits},           {"temporary", b.temporary},
          {"overhead", b.overhead}};
}

nlohmann::json LayoutToJson(const TrainingSpec& t, const ParallelPlan& p) {
  nlohmann::json j = {{"seq_len", t.seq_len},
          {"micro_batch", t.micro_batch},
          {"global_batch", t.global_batch > 0 ? t.global_batch : t.micro_batch * p.dp},
          {"precision", PrecisionName(t.precision)},
          {"optimizer", OptimizerName(t.optimizer)},
          {"recompute", RecomputeName(t.recompute)},
          {"recompute_every", t.recompute_every},
          {"offload_activations", t.offload_activations},
          {"framework", FrameworkName(t.framework)},
          {"head", HeadTypeName(t.head)},
          {"flash_attn", t.flash_attn},
          {"dropout", t.dropout},
          {"device", t.device == DeviceKind::kCuda ? "cuda" : "cpu"},
          {"tp", p.tp},
          {"pp", p.pp},
          {"dp", p.dp},
          {"cp", p.cp},
          {"ep", p.ep},
          {"etp", p.expert_tp()},
          {"vpp", p.vpp},
          {"sequence_parallel", p.sequence_parallel},
          {"zero", p.zero},
          {"distributed_optimizer", p.distributed_optimizer},
          {"gpus", p.gpus()}};
  if (t.accumulate_unsharded) j["accumulate_unsharded"] = true;
  if (t.fsdp_orig_params) j["fsdp_orig_params"] = true;
  if (t.fsdp_wrap_embeddings) j["fsdp_wrap_embeddings"] = true;
  if (t.fsdp_init != FsdpInit::kNone) j["fsdp_init"] = FsdpInitName(t.fsdp_init);
  if (t.drop_logits) j["drop_logits"] = true;
  if (t.hf_loss != HfLoss::kPadded) j["hf_loss"] = HfLossName(t.hf_loss);
  if (t.lengths.active()) {
    const LengthSpread& l = t.lengths;
    const char* longer = l.drop_long ? "dropped" : "cut";
    if (l.order.empty()) {
      j["lengths"] = {{"mean", l.mean}, {"sd", l.sd},           {"min", l.min},
                      {"samples", l.samples}, {"longer", longer}};
    } else {
      j["lengths"] = {{"file_samples", l.order.size()}, {"longer", longer}};
    }
  }
  if (t.megatron_legacy) j["megatron_legacy"] = true;
  if (t.megatron_fused_ce) j["cross_entropy_loss_fusion"] = true;
  if (t.litgpt_model) j["litgpt_model"] = true;
  if (t.mean_keeps_input) j["torch_mean_keeps_input"] = true;
  if (t.litgpt_model && t.litgpt_rmsnorm_in_dtype) j["litgpt_bf16_rmsnorm"] = true;
  if (!p.stage_layers.empty()) j["stage_layers"] = p.stage_layers;
  if (t.moe_capacity_factor > 0) j["moe_capacity_factor"] = t.moe_capacity_factor;
  if (t.moe_grouped_gemm) j["moe_grouped_gemm"] = true;
  if (p.ep > 1) j["moe_dispatcher"] = MoeDispatcherName(t.moe_dispatcher);
  if (t.fp8()) {
    j["fp8_recipe"] = Fp8RecipeName(t.fp8_recipe);
    j["fp8_param_gather"] = t.fp8_param_gather;
  }
  return j;
}

nlohmann::json MemoryEstimateToJson(const MemoryEstimate& e, const GpuType* gpu) {
  nlohmann::json j;
  j["params"] = e.params;
  j["peak_bytes"] = e.peak_bytes;
  j["peak_reserved_bytes"] = e.peak_reserved_bytes;
  j["device_bytes"] = e.device_bytes;
  j["resident_bytes"] = e.resident_bytes;  // device less paged optimizer states
  j["host_bytes"] = e.host_bytes;          // offloaded states, per GPU's rank
  j["worst_stage"] = e.worst_stage;
  const StageEstimate& worst = e.stages.at(static_cast<size_t>(e.worst_stage));
  j["breakdown"] = BreakdownToJson(worst.breakdown);
  j["peak_phase"] = worst.peak_phase;
  auto& ranks = j["ranks"] = nlohmann::json::array();
  for (const auto& s : e.stages) {
    ranks.push_back({{"stage", s.stage},
                     {"layers", {s.first_layer, s.first_layer + s.num_layers - 1}},
                     {"params", s.params},
                     {"microbatches_in_flight", s.microbatches_in_flight},
                     {"activations_per_microbatch", s.activations_per_microbatch},
                     {"peak_phase", s.peak_phase},
                     {"peak_bytes", s.peak_bytes},
                     {"peak_reserved_bytes", s.peak_reserved_bytes},
                     {"device_bytes", s.device_bytes},
                     {"breakdown", BreakdownToJson(s.breakdown)}});
    if (s.step_excess_bytes > 0) ranks.back()["step_excess_bytes"] = s.step_excess_bytes;
    if (s.init_reserved_bytes > 0) {
      ranks.back()["init_reserved_bytes"] = s.init_reserved_bytes;
      ranks.back()["init_free_bytes"] = s.init_free_bytes;
    }
    if (s.length_batches > 0) {
      ranks.back()["length_reserve_bytes"] = {{"median", s.length_reserve_bytes},
                                              {"low", s.length_reserve_low},
                                              {"high", s.length_reserve_high},
                                              {"orders", s.length_orders},
                                              {"batches", s.length_batches},
                                              {"replayed", s.length_replayed}};
    }
  }
  if (e.length_reserved_bytes > 0) {
    // Readings over an epoch of batches of varying length (the median data order's); the fit
    // is still judged on the fixed-length figures above.
    j["length_reserved_bytes"] = e.length_reserved_bytes;
    j["length_device_bytes"] = e.length_device_bytes;
  }
  if (gpu != nullptr) {
    j["gpu"] = gpu->name;
    j["gpu_memory_bytes"] = gpu->memory_bytes;
    j["fits"] = e.resident_bytes <= gpu->memory_bytes;
    j["headroom_bytes"] = gpu->memory_bytes - e.resident_bytes;
  }
  return j;
}

}  // namespace frenzy
