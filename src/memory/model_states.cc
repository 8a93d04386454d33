#include "memory/model_states.h"

#include <algorithm>
#include <cmath>

#include "memory/finetune.h"

namespace frenzy::memory_detail {

bool PagedOptimizer(OptimizerKind o) {
  return o == OptimizerKind::kPagedAdamW || o == OptimizerKind::kPagedAdamW8bit;
}

int64_t Div(int64_t bytes, int64_t by) { return by > 1 ? (bytes + by - 1) / by : bytes; }

double OptimizerStateBytes(OptimizerKind o, int64_t state_bytes) {
  switch (o) {
    case OptimizerKind::kAdamW:
    case OptimizerKind::kAdam:
      return 2.0 * static_cast<double>(state_bytes);  // exp_avg, exp_avg_sq
    case OptimizerKind::kSgd:
      return 0;
    case OptimizerKind::kSgdMomentum:
      return static_cast<double>(state_bytes);  // momentum buffer
    case OptimizerKind::kAdafactor:
      return 0;  // factored: computed from matrix shapes
    case OptimizerKind::kAdam8bit:
    case OptimizerKind::kPagedAdamW8bit:
      // bitsandbytes blockwise 8-bit Adam: two uint8 states plus one fp32 absmax per 2048-value
      // block of each (Dettmers et al., "8-bit Optimizers via Block-wise Quantization", 2022).
      return 2.0 + 2.0 * 4.0 / 2048.0;
    case OptimizerKind::kPagedAdamW:
      // bitsandbytes' 32-bit optimizers keep both moments in fp32 whatever the weights' dtype.
      return 8.0;
  }
  return 0;
}


int64_t CeilBytes(double v) { return static_cast<int64_t>(std::ceil(v)); }

StateInputs MakeStateInputs(const TrainingSpec& t, const ParallelPlan& p, const StageParams& sp) {
  StateInputs in;
  in.n = static_cast<double>(sp.total);
  in.z = p.shard_size();
  in.z_eff = static_cast<double>(in.z);
  if (sp.experts > 0 && p.expert_shard_size() != in.z) {
    const double experts = static_cast<double>(sp.experts);
    const double expert_dp = static_cast<double>(p.expert_shard_size());
    in.z_eff = in.n / ((in.n - experts) / static_cast<double>(in.z) + experts / expert_dp);
  }
  in.compute = t.precision == Precision::kFp32 ? 4 : 2;
  in.pure = t.precision == Precision::kBf16Pure;
  in.mixed = t.mixed();
  // States are fp32 except in pure bf16 (no master copy, bf16 states).
  in.state_bytes = in.pure ? 2 : 4;
  in.opt_bytes = OptimizerStateBytes(t.optimizer, in.state_bytes) * in.n;
  if (t.optimizer == OptimizerKind::kAdafactor) {
    in.opt_bytes = static_cast<double>(sp.adafactor_state) * static_cast<double>(in.state_bytes);
  }
  return in;
}

States MegatronStates(const TrainingSpec& t, const ParallelPlan& p, const StateInputs& in) {
  // Megatron-LM: 16-bit params, fp32 main_grad buffer (accumulate_allreduce_grads_in_fp32),
  // fp32 master params + Adam states in the optimizer; 18 bytes/param, or 6 + 12/d with the
  // distributed optimizer (Megatron-LM docs, theoretical_memory_usage.py).
  // The grad buffer is fp32 for bf16 (Megatron forces accumulate_allreduce_grads_in_fp32
  // with --bf16) and 16-bit for fp16, where that flag defaults to off (arguments.py).
  States st;
  st.weights = CeilBytes(in.n * static_cast<double>(in.compute));
  bool fp32_grads = t.precision == Precision::kBf16 || t.precision == Precision::kFp32 || t.fp8();
  st.grads = CeilBytes(in.n * (fp32_grads ? 4.0 : 2.0));
  st.grads_persist = true;
  double master = in.mixed ? 4.0 * in.n : 0.0;
  double opt = master + in.opt_bytes;
  const double shard = (p.distributed_optimizer || p.zero >= 1) ? in.z_eff : 1.0;
  st.optimizer = CeilBytes(opt / shard);
  return st;
}

// ZeRO-3 / FSDP full shard: the layers gathered while they compute, at `bytes` a weight: the one
// computing and the prefetched one (DeepSpeed prefetches at most stage3_prefetch_bucket_size, 5e7
// elements); under FSDP also the root unit that no wrapped layer holds (embeddings, final norm,
// output layer), gathered through the step unless they are units of their own.
// `bytes` a weight in the layers, `root_bytes` in the root unit.
void GatherLayers(const TrainingSpec& t, const StageParams& sp, double bytes, double root_bytes,
                  States& st) {
  const double layer = static_cast<double>(sp.per_layer_max);
  const double layers =
      t.framework == Framework::kDeepSpeed ? std::min(2.0 * layer, layer + 5e7) : 2.0 * layer;
  st.gather = CeilBytes(layers * bytes);
  if (t.framework == Framework::kFsdp && !t.fsdp_wrap_embeddings) {
    st.root_gather = CeilBytes(static_cast<double>(sp.outside_layers) * root_bytes);
    st.gather += st.root_gather;
  }
}

States DeepSpeedStates(const TrainingSpec& t, const ParallelPlan& p, const StageParams& sp,
                       const StateInputs& in) {
  // ZeRO (Rajbhandari et al., SC'20, §5): 2 + 2 + K bytes/param with K = 12 for mixed-
  // precision Adam; stage 1 shards K, stage 2 also the gradients, stage 3 also the weights.
  States st;
  const double z = in.z_eff;
  double w = in.n * static_cast<double>(in.compute);
  double g = in.n * static_cast<double>(in.compute);
  double master = in.mixed ? 4.0 * in.n : 0.0;
  double opt = master + in.opt_bytes;
  st.weights = CeilBytes(p.zero >= 3 ? w / z : w);
  st.grads = CeilBytes(p.zero >= 2 ? g / z : g);
  st.grads_persist = true;
  st.optimizer = CeilBytes(p.zero >= 1 ? opt / z : opt);
  if (p.zero >= 1 && p.zero <= 2 && in.z > 1) {
    // reduce_bucket_size and allgather_bucket_size default to 5e8 elements (DeepSpeed
    // config docs); buckets never exceed the partition they serve.
    st.buckets = std::min<int64_t>(CeilBytes(g), 500'000'000 * in.compute) +
                 std::min<int64_t>(CeilBytes(w), 500'000'000 * in.compute);
    st.buckets_at_step = false;
  }
  if (p.zero >= 3) {
    GatherLayers(t, sp, static_cast<double>(in.compute), static_cast<double>(in.compute), st);
    st.gather_grad = sp.per_layer_max * in.compute;
  }
  return st;
}

States FsdpStates(const TrainingSpec& t, const ParallelPlan& p, const StageParams& sp,
                  const StateInputs& in) {
  // FSDP keeps fp32 sharded flat parameters (and fp32 gradients and optimizer states on
  // the shard); MixedPrecision casts an all-gathered unit to 16 bits while it computes,
  // with the next unit prefetched (PyTorch FSDP docs: backward_prefetch=BACKWARD_PRE).
  States st;
  const double z = in.z_eff;
  int64_t master_bytes = in.pure ? 2 : 4;
  double w = in.n * static_cast<double>(master_bytes);
  st.weights = CeilBytes(p.zero >= 3 ? w / z : w);
  st.grads = CeilBytes(p.zero >= 2 ? w / z : w);
  st.optimizer = CeilBytes(p.zero >= 2 ? in.opt_bytes / z : in.opt_bytes);
  if (p.zero >= 3 && in.z > 1) {
    GatherLayers(t, sp, static_cast<double>(in.compute), static_cast<double>(in.compute), st);
    st.gather_grad = sp.per_layer_max * in.compute;
    st.root_grad = st.root_gather;  // the root's unsharded gradient, the same size
  } else if (in.mixed) {
    st.autocast_cache = CeilBytes(static_cast<double>(sp.matmul) * 2.0);
  }
  return st;
}

States HfStates(const ParallelPlan& p, const StageParams& sp, const StateInputs& in) {
  // HF Trainer / plain PyTorch: parameters stay in their dtype (fp32 under AMP, bf16 when
  // pure); gradients match them; torch.autocast caches a 16-bit copy of every weight it
  // casts until the forward ends, and backward keeps them until each layer's backward.
  States st;
  int64_t pbytes = in.pure ? 2 : 4;
  st.weights = CeilBytes(in.n * static_cast<double>(pbytes));
  st.grads = st.weights;
  st.optimizer = CeilBytes(in.opt_bytes);
  if (p.zero >= 1) {
    auto shard = [&](int64_t bytes) {
      return CeilBytes(static_cast<double>(bytes) / in.z_eff);
    };
    st.optimizer = shard(st.optimizer);
    if (p.zero >= 2) st.grads = shard(st.grads);
    if (p.zero >= 3) st.weights = shard(st.weights);
  }
  if (in.mixed) st.autocast_cache = CeilBytes(static_cast<double>(sp.matmul) * 2.0);
  if (p.dp > 1 && p.zero == 0) {
    // DDP's gradient buckets are a second copy of all gradients unless
    // gradient_as_bucket_view=True (PyTorch DDP docs).
    st.buckets = st.grads;
  }
  return st;
}

// DeepSpeed's ZeRO optimizers step on a flat copy of the rank's gradient partition in the master
// dtype, one parameter group at a time: stages 1 and 2 flatten a group's 16-bit gradient
// partition and cast it (stage_1_and_2.py, step: `self.flatten(self.averaged_gradients[i]).to(
// fp32)`), stage 3 does the same one sub-group at a time (stage3.py,
// _prepare_fp32_grad_for_sub_group), a sub-group closing at the first parameter that takes it to
// sub_group_size (1e9 elements by default; bounded here by the largest tensor's partition). The
// flat 16-bit copy dies once cast (a cast to the tensor's own dtype is the tensor itself: fp32
// runs and 16-bit masters hold the flat copy alone); the cast lives through that group's Adam
// step and is dropped before the next group's. Stage 1 first frees the group's gradients outside
// its partition, whose full gradients its states count. The groups: the dense parameters, and
// under DeepSpeed-MoE the experts, a group of their own over the expert-data-parallel ranks;
// the dense group is counted with the no-decay biases and norms a trainer usually splits off
// (a small over-estimate). Stage 0 (DeepSpeed's FP16_Optimizer / BF16_Optimizer, which make
// or keep fp32 gradients their own way) is not accounted.
int64_t DeepSpeedStepTemp(const ParallelPlan& p, const StageParams& sp, const StateInputs& in) {
  if (p.zero < 1) return 0;
  constexpr double kSubGroupSize = 1e9;
  const double experts = static_cast<double>(sp.experts);
  const double expert_dp = static_cast<double>(std::max<int64_t>(1, p.expert_shard_size()));
  const double bytes = static_cast<double>(in.compute) + (in.mixed ? 4.0 : 0.0);
  double temp = 0;
  for (const auto& [group, shards] : {std::pair{in.n - experts, static_cast<double>(in.z)},
                                      std::pair{experts, expert_dp}}) {
    if (group <= 0) continue;
    const double partition = group / shards;
    const double n =
        p.zero >= 3
            ? std::min(partition, kSubGroupSize + static_cast<double>(sp.largest_tensor) / shards)
            : partition;
    double t = n * bytes;
    if (p.zero == 1) t -= static_cast<double>(in.compute) * (group - partition);
    temp = std::max(temp, t);
  }
  return CeilBytes(temp);
}

// Transient bytes of the optimizer step. Megatron's distributed optimizer casts into buffers it
// keeps (none); DeepSpeed's ZeRO flattens the gradient partition (above).
int64_t OptimizerStepTemp(const TrainingSpec& t, const ParallelPlan& p, const StageParams& sp,
                          const StateInputs& in) {
  bool adam = t.optimizer == OptimizerKind::kAdam || t.optimizer == OptimizerKind::kAdamW;
  if (t.framework == Framework::kDeepSpeed) return DeepSpeedStepTemp(p, sp, in);
  if (!adam || (t.framework != Framework::kHf && t.framework != Framework::kFsdp)) return 0;
  if (t.device == DeviceKind::kCuda && t.foreach_optimizer) {
    // torch.optim's default foreach implementation: _foreach_sqrt(exp_avg_sq) materialises
    // a copy of the second moments of all (local) parameters — the rank's shard where ZeRO or
    // FSDP shards the states (FSDP2 steps DTensor shards, FSDP1 flat shards).
    const bool sharded = (t.framework == Framework::kFsdp ? p.zero >= 2 : p.zero >= 1) && in.z > 1;
    return CeilBytes(in.opt_bytes / 2.0 / (sharded ? in.z_eff : 1.0));
  }
  // Single-tensor Adam (the CPU default): exp_avg_sq.sqrt() / bias_correction2_sqrt makes
  // two temporaries the size of the tensor being updated.
  return 2 * sp.largest_tensor * in.state_bytes;
}

// Adapter fine-tuning (PEFT, whichever framework shards it): the base is frozen — 16-bit (LoRA,
// the compute dtype) or 4-bit NF4 layers with every other weight upcast to fp32 (QLoRA, as
// prepare_model_for_kbit_training leaves it); only the fp32 adapters have gradients and
// optimizer states, which ZeRO shards like any others. Autocast caches 16-bit copies of the fp32
// weights it multiplies: the adapters, and QLoRA's output layer.
States FineTuneStates(const TrainingSpec& t, const ParallelPlan& p, const StageParams& sp) {
  States st;
  const int64_t ab = t.lora.adapter_bytes;  // fp32 (PEFT's default) or 16-bit adapters
  StateInputs adapter_inputs;  // the optimizer works on the adapters alone
  adapter_inputs.state_bytes = ab;
  adapter_inputs.opt_bytes =
      OptimizerStateBytes(t.optimizer, ab) * static_cast<double>(sp.adapters);
  StageParams adapter_params;  // single-tensor Adam's temporaries: adapter-sized, negligible
  st.optimizer_temp = OptimizerStepTemp(t, p, adapter_params, adapter_inputs);
  const double adapters = static_cast<double>(sp.adapters);
  const double frozen = static_cast<double>(sp.total - sp.adapters);
  double base = frozen * static_cast<double>(t.act_bytes());
  if (t.finetune == FineTune::kQlora) {
    const double q = static_cast<double>(sp.quantized);
    base = q * Nf4BytesPerWeight(t.lora.double_quant) +
           (frozen - q) * (t.lora.upcast_rest ? 4.0 : static_cast<double>(t.act_bytes()));
  }
  const int64_t z = p.shard_size();
  const double a_bytes = static_cast<double>(ab) * adapters;
  st.weights = CeilBytes((p.zero >= 3 ? (base + a_bytes) / static_cast<double>(z) : base + a_bytes));
  // The flat parameters' gradients: the adapters', or under FSDP's use_orig_params every
  // layer's whole flat parameter (frozen weights too, at their stored bytes).
  const double rest_bytes = t.finetune == FineTune::kQlora && t.lora.upcast_rest
                                ? 4.0
                                : static_cast<double>(t.act_bytes());
  const double layers = static_cast<double>(sp.total - sp.outside_layers);
  const double layers_bytes = base + a_bytes - static_cast<double>(sp.outside_layers) * rest_bytes;
  const double layer_bytes = layers > 0 ? layers_bytes / layers : rest_bytes;  // a weight's
  const bool whole_units = t.framework == Framework::kFsdp && t.fsdp_orig_params;
  st.unsharded_grads = CeilBytes(whole_units ? layers_bytes : a_bytes);
  st.grads = p.zero >= 2 ? Div(st.unsharded_grads, z) : st.unsharded_grads;
  if (whole_units && p.zero >= 2) {  // one layer's unsharded gradient before its reduce-scatter
    st.gather_grad = CeilBytes(static_cast<double>(sp.per_layer_max) * layer_bytes);
  }
  st.optimizer = CeilBytes(adapter_inputs.opt_bytes);
  if (p.zero >= 1) st.optimizer = Div(st.optimizer, z);
  if (t.mixed()) {
    const int64_t head =
        t.finetune == FineTune::kQlora && t.lora.upcast_rest ? sp.head_matmul : 0;
    st.autocast_cache = 2 * ((ab == 4 ? sp.adapters : 0) + head);
  }
  if (p.dp > 1 && p.zero == 0) st.buckets = st.grads;  // DDP's bucket copy
  if (p.zero >= 3 && z > 1 && frozen > 0) {
    // The frozen base is sharded too, so its layers are gathered to compute, as in full
    // training, at the base's bytes a weight (16-bit, or NF4 where quantized).
    // The root unit (embeddings, final norm, output layer) is never quantised: it is gathered
    // at the bytes of the unquantised weights, the layers at their own average.
    GatherLayers(t, sp, layer_bytes, rest_bytes, st);
  }
  if (p.offload == Offload::kParams) {
    // FSDP's CPUOffload(offload_params=True) keeps every flat-parameter shard in host memory —
    // the frozen base and the adapters alike — with the adapters' gradients, and steps the
    // optimizer there; the GPU holds the gathered layers only (CheckOffload: FSDP full shard).
    st.host = st.weights + st.grads + st.optimizer;
    st.weights = st.grads = st.optimizer = st.optimizer_temp = 0;
  }
  return st;
}

// Offload moves states to host memory (this rank's share of the shards). The optimizer's host
// side is fp32 master weights, fp32 gradients and the optimizer states — 16 bytes a parameter
// for mixed-precision Adam, 18 with DeepSpeed's 16-bit parameters offloaded too; this is
// DeepSpeed's own estimate (estimate_zero2/zero3_model_states_mem_needs: 16 and 18 bytes a
// parameter before its 1.5 "additional_buffer_factor", which the planner applies to host
// memory). FSDP's CPUOffload keeps the fp32 flat-parameter shard, its gradient and the
// optimizer states there. On the GPU remain the 16-bit weights (kOptimizer; ZeRO-3 shards
// them), the communication buckets and the gathered layers.
void ApplyOffload(const TrainingSpec& t, const ParallelPlan& p, const StateInputs& in, States& st) {
  if (p.offload == Offload::kNone) return;
  const double z = in.z_eff;
  const double master = in.mixed ? 4.0 : (in.pure ? 2.0 : 0.0);
  double host = (master + 4.0) * in.n + in.opt_bytes;
  if (t.framework == Framework::kDeepSpeed && p.offload == Offload::kParams) {
    host += static_cast<double>(in.compute) * in.n;
    st.weights = 0;
  }
  if (t.framework == Framework::kFsdp) {
    host = (in.pure ? 2.0 : 4.0) * 2.0 * in.n + in.opt_bytes;
    st.weights = 0;
  }
  st.host = CeilBytes(host / z);
  st.grads = 0;
  st.optimizer = 0;
  st.optimizer_temp = 0;
}

States FullTrainingStates(const TrainingSpec& t, const ParallelPlan& p, const StageParams& sp) {
  const StateInputs in = MakeStateInputs(t, p, sp);
  States st;
  switch (t.framework) {
    case Framework::kMegatron:
      st = MegatronStates(t, p, in);
      break;
    case Framework::kDeepSpeed:
      st = DeepSpeedStates(t, p, sp, in);
      break;
    case Framework::kFsdp:
      st = FsdpStates(t, p, sp, in);
      break;
    case Framework::kHf:
      st = HfStates(p, sp, in);
      break;
  }
  st.optimizer_temp = OptimizerStepTemp(t, p, sp, in);
  ApplyOffload(t, p, in, st);
  return st;
}

// FP8 linears (precision fp8). Transformer Engine casts each linear weight to FP8 once per
// step and caches it across micro-batches (`is_first_microbatch`, which Megatron-LM passes),
// with the transposed copy the input gradient's GEMM reads on Hopper (MXFP8 keeps row- and
// column-wise copies likewise): 2 bytes a linear weight on the rank, whatever shards the
// high-precision copy, since every layer's FP8 copy is alive through its backward. With FP8
// primary weights (--fp8-param-gather) those bytes replace the 16-bit weights instead. TE's
// linears bypass autocast's weight cache (they cast the fp32 weight themselves); only the
// bf16 output layer is still cached. The amax histories (1024 fp32 values for each of five
// tensors per linear module) are under 20 KiB a module and left out.
// torchao's Float8Linear casts in every pass and caches nothing; with FP8 all-gather the
// gathered layers of FSDP's full shard hold FP8 linear weights (1 byte) instead of bf16.
void ApplyFp8(const TrainingSpec& t, const ParallelPlan& p, const StageParams& sp, States& st) {
  if (!t.fp8()) return;
  const int64_t linear = sp.matmul - sp.head_matmul;  // the layers' matrices on this rank
  if (t.te_fp8()) {
    if (!t.fp8_param_gather) st.weights += 2 * linear;
    if (st.autocast_cache > 0) st.autocast_cache = 2 * sp.head_matmul;
    return;
  }
  if (t.fp8_param_gather && p.zero >= 3) {
    // The layers' Float8Linear weights; the root unit's embedding and output layer stay 16-bit
    // (torchtitan converts no output layer).
    st.gather = (st.gather - st.root_gather) / 2 + st.root_gather;
  }
}

States ModelStates(const TrainingSpec& t, const ParallelPlan& p, const StageParams& sp) {
  States st;
  if (t.finetune != FineTune::kFull) {
    st = FineTuneStates(t, p, sp);
  } else {
    st = FullTrainingStates(t, p, sp);
  }
  ApplyFp8(t, p, sp, st);
  // zero_grad(set_to_none=False) keeps whatever gradients there are (TrainingSpec).
  if (t.zero_grad_keeps) st.grads_persist = true;
  // bitsandbytes allocates paged states in CUDA unified memory (cudaMallocManaged): resident
  // while the GPU has room, paged to host memory under pressure (Dettmers et al., "QLoRA",
  // 2023, §3 "Paged Optimizers"). Megatron and DeepSpeed run their own optimizers.
  if (PagedOptimizer(t.optimizer) &&
      (t.framework == Framework::kHf || t.framework == Framework::kFsdp)) {
    st.pageable = st.optimizer;
  }
  return st;
}

}  // namespace frenzy::memory_detail
