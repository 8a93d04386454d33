#include "memory/memory_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "memory/activations.h"
#include "memory/finetune.h"
#include "model/param_count.h"

namespace frenzy {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// ---- parameters held by one rank of one stage -----------------------------------------------

// Parameters of one layer on one rank: attention and MLP divide over TP, experts over EP;
// norms and routers are replicated (Megatron-LM's layout).
struct RankLayer {
  int64_t total = 0;
  int64_t matmul = 0;
  int64_t largest_tensor = 0;
  int64_t adafactor_state = 0;
  // By backward step (see BackwardStep::Params).
  int64_t mlp = 0, attn_out = 0, attn_qkv = 0, norm = 0;
  // Fine-tuning: trainable adapter parameters (in `total`) and 4-bit base weights.
  int64_t adapters = 0, quantized = 0;
};

RankLayer LayerOnRank(const ModelSpec& m, const LayerParams& l, const ParallelPlan& p) {
  RankLayer r;
  int64_t experts = l.moe ? l.mlp / p.ep : l.mlp;
  r.mlp = experts / p.tp + l.router + l.shared_experts / p.tp;
  r.attn_out = m.q_size() * m.hidden_size / p.tp;
  r.attn_qkv = l.attention / p.tp - r.attn_out;
  r.norm = m.norms_per_layer > 0 ? l.norms / m.norms_per_layer : 0;
  r.total = l.attention / p.tp + r.mlp + l.norms;
  r.matmul = r.total - l.norms;
  int64_t h = m.hidden_size;
  auto add_matrix = [&](int64_t rows, int64_t cols) {
    r.largest_tensor = std::max(r.largest_tensor, rows * cols);
    r.adafactor_state += rows + cols;
  };
  add_matrix(h, (m.q_size() + 2 * m.kv_size()) / p.tp);
  add_matrix(m.q_size() / p.tp, h);
  int64_t ffn = l.moe ? m.moe.ffn_hidden_size : m.ffn_hidden_size;
  int64_t mats = (m.gated_mlp ? 3 : 2) * (l.moe ? m.moe.num_experts / p.ep : 1);
  r.largest_tensor = std::max(r.largest_tensor, h * ffn / p.tp);
  r.adafactor_state += mats * (h + ffn / p.tp) + l.norms;
  return r;
}

struct StageParams {
  int64_t total = 0;            // parameters on this rank
  int64_t matmul = 0;           // of which in matrices multiplied in forward (autocast casts them)
  int64_t largest_tensor = 0;   // elements of the largest single tensor (optimizer temporaries)
  int64_t adafactor_state = 0;  // Adafactor's factored second moment (elements)
  int64_t per_layer_max = 0;    // largest layer (ZeRO-3/FSDP gather unit)
  int64_t head = 0;             // output layer + final norm (their grads appear first)
  int64_t head_matmul = 0;      // of `matmul`, the output layer's matrix
  int64_t adapters = 0;         // fine-tuning: trainable adapter parameters (in `total`)
  int64_t quantized = 0;        // ... base weights stored in 4 bits (in `total`)
};

StageParams ParamsOnRank(const ModelSpec& m, const ParamCounts& c, const ParallelPlan& p,
                         const RankLayer& dense, const RankLayer& moe, int64_t n_dense,
                         int64_t n_moe, bool first_stage, bool last_stage) {
  StageParams s;
  for (auto [layer, n] : {std::pair{&dense, n_dense}, std::pair{&moe, n_moe}}) {
    if (n == 0) continue;
    s.total += n * layer->total;
    s.matmul += n * layer->matmul;
    s.adapters += n * layer->adapters;
    s.quantized += n * layer->quantized;
    s.adafactor_state += n * layer->adafactor_state;
    s.largest_tensor = std::max(s.largest_tensor, layer->largest_tensor);
    s.per_layer_max = std::max(s.per_layer_max, layer->total);
  }
  int64_t vocab_matrix = m.vocab_size / p.tp * m.embedding_width();
  if (first_stage) {
    s.total += (c.token_embedding + c.embedding_proj) / p.tp + c.position_embedding +
               c.token_type_embedding + c.embedding_norm;
    s.matmul += c.embedding_proj / p.tp;
    s.largest_tensor = std::max(s.largest_tensor, vocab_matrix);
    s.adafactor_state += m.vocab_size / p.tp + m.embedding_width();
  }
  if (last_stage) {
    int64_t head = c.final_norm + c.head() / p.tp;
    // A tied head on its own stage keeps a copy of the embedding (Megatron-LM's pipeline).
    if (m.tied_embeddings && !first_stage) head += c.token_embedding / p.tp;
    s.total += head;
    s.head = head;
    s.head_matmul = c.head() / p.tp + (m.tied_embeddings ? c.token_embedding / p.tp : 0);
    s.matmul += s.head_matmul;
    s.largest_tensor = std::max(s.largest_tensor, vocab_matrix);
    s.adafactor_state += m.vocab_size / p.tp + m.embedding_width();
  }
  return s;
}

// ---- model states -----------------------------------------------------------------------------

struct States {
  int64_t weights = 0;
  int64_t grads = 0;           // gradients alive at the end of backward
  bool grads_persist = false;  // kept across steps (flat buffers) vs freed by zero_grad
  int64_t optimizer = 0;       // optimizer states (with fp32 master weights where kept)
  int64_t optimizer_temp = 0;  // transient of the optimizer step
  int64_t buckets = 0;         // persistent communication buffers
  int64_t gather = 0;          // ZeRO-3/FSDP unsharded parameters while computing
  int64_t gather_grad = 0;     // ... and the unsharded gradient before reduce-scatter
  int64_t autocast_cache = 0;  // 16-bit copies of fp32 weights under torch.autocast
  int64_t host = 0;            // offloaded states in host memory (this rank's share)
  int64_t pageable = 0;        // of `optimizer`, what a paged optimizer lets the driver evict
};

bool PagedOptimizer(OptimizerKind o) {
  return o == OptimizerKind::kPagedAdamW || o == OptimizerKind::kPagedAdamW8bit;
}

int64_t Div(int64_t bytes, int64_t by) { return by > 1 ? (bytes + by - 1) / by : bytes; }

// Bytes per parameter of optimizer state (excluding master weights), by precision of states.
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

// What every framework's account of the model states starts from.
struct StateInputs {
  double n = 0;             // parameters on the rank
  int64_t z = 1;            // ranks sharding the states
  int64_t compute = 2;      // bytes of the working weights (16-bit, or fp32)
  bool pure = false;        // pure bf16: no master copy, bf16 states
  bool mixed = false;       // 16-bit compute over fp32 master weights
  int64_t state_bytes = 4;  // bytes of one optimizer-state element
  double opt_bytes = 0;     // optimizer states, without master weights
};

int64_t CeilBytes(double v) { return static_cast<int64_t>(std::ceil(v)); }

StateInputs MakeStateInputs(const TrainingSpec& t, const ParallelPlan& p, const StageParams& sp) {
  StateInputs in;
  in.n = static_cast<double>(sp.total);
  in.z = p.shard_size();
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
  int64_t shard = (p.distributed_optimizer || p.zero >= 1) ? in.z : 1;
  st.optimizer = CeilBytes(opt / static_cast<double>(shard));
  return st;
}

States DeepSpeedStates(const ParallelPlan& p, const StageParams& sp, const StateInputs& in) {
  // ZeRO (Rajbhandari et al., SC'20, §5): 2 + 2 + K bytes/param with K = 12 for mixed-
  // precision Adam; stage 1 shards K, stage 2 also the gradients, stage 3 also the weights.
  States st;
  const double z = static_cast<double>(in.z);
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
  }
  if (p.zero >= 3) {
    // stage3_prefetch_bucket_size (5e7) and the layer being computed are unsharded.
    st.gather = std::min<int64_t>(2 * sp.per_layer_max, sp.per_layer_max + 50'000'000) * in.compute;
    st.gather_grad = sp.per_layer_max * in.compute;
  }
  return st;
}

States FsdpStates(const ParallelPlan& p, const StageParams& sp, const StateInputs& in) {
  // FSDP keeps fp32 sharded flat parameters (and fp32 gradients and optimizer states on
  // the shard); MixedPrecision casts an all-gathered unit to 16 bits while it computes,
  // with the next unit prefetched (PyTorch FSDP docs: backward_prefetch=BACKWARD_PRE).
  States st;
  const double z = static_cast<double>(in.z);
  int64_t master_bytes = in.pure ? 2 : 4;
  double w = in.n * static_cast<double>(master_bytes);
  st.weights = CeilBytes(p.zero >= 3 ? w / z : w);
  st.grads = CeilBytes(p.zero >= 2 ? w / z : w);
  st.optimizer = CeilBytes(p.zero >= 2 ? in.opt_bytes / z : in.opt_bytes);
  if (p.zero >= 3 && in.z > 1) {
    st.gather = 2 * sp.per_layer_max * in.compute;
    st.gather_grad = sp.per_layer_max * in.compute;
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
    st.optimizer = Div(st.optimizer, in.z);
    if (p.zero >= 2) st.grads = Div(st.grads, in.z);
    if (p.zero >= 3) st.weights = Div(st.weights, in.z);
  }
  if (in.mixed) st.autocast_cache = CeilBytes(static_cast<double>(sp.matmul) * 2.0);
  if (p.dp > 1 && p.zero == 0) {
    // DDP's gradient buckets are a second copy of all gradients unless
    // gradient_as_bucket_view=True (PyTorch DDP docs).
    st.buckets = st.grads;
  }
  return st;
}

// Transient bytes of the optimizer step. Megatron's and DeepSpeed's fused Adam make none.
int64_t OptimizerStepTemp(const TrainingSpec& t, const ParallelPlan& p, const StageParams& sp,
                          const StateInputs& in) {
  bool adam = t.optimizer == OptimizerKind::kAdam || t.optimizer == OptimizerKind::kAdamW;
  if (!adam || (t.framework != Framework::kHf && t.framework != Framework::kFsdp)) return 0;
  if (t.device == DeviceKind::kCuda && t.foreach_optimizer) {
    // torch.optim's default foreach implementation: _foreach_sqrt(exp_avg_sq) materialises
    // a copy of the second moments of all (local) parameters — the rank's shard where ZeRO or
    // FSDP shards the states (FSDP2 steps DTensor shards, FSDP1 flat shards).
    const bool sharded = (t.framework == Framework::kFsdp ? p.zero >= 2 : p.zero >= 1) && in.z > 1;
    return CeilBytes(in.opt_bytes / 2.0 / (sharded ? static_cast<double>(in.z) : 1.0));
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
  st.grads = CeilBytes(a_bytes);
  if (p.zero >= 2) st.grads = Div(st.grads, z);
  st.optimizer = CeilBytes(adapter_inputs.opt_bytes);
  if (p.zero >= 1) st.optimizer = Div(st.optimizer, z);
  if (t.mixed()) {
    const int64_t head =
        t.finetune == FineTune::kQlora && t.lora.upcast_rest ? sp.head_matmul : 0;
    st.autocast_cache = 2 * ((ab == 4 ? sp.adapters : 0) + head);
  }
  if (p.dp > 1 && p.zero == 0) st.buckets = st.grads;  // DDP's bucket copy
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
  const double z = static_cast<double>(in.z);
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
      st = DeepSpeedStates(p, sp, in);
      break;
    case Framework::kFsdp:
      st = FsdpStates(p, sp, in);
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
    st.gather = st.gather / 2;
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
  // bitsandbytes allocates paged states in CUDA unified memory (cudaMallocManaged): resident
  // while the GPU has room, paged to host memory under pressure (Dettmers et al., "QLoRA",
  // 2023, §3 "Paged Optimizers"). Megatron and DeepSpeed run their own optimizers.
  if (PagedOptimizer(t.optimizer) &&
      (t.framework == Framework::kHf || t.framework == Framework::kFsdp)) {
    st.pageable = st.optimizer;
  }
  return st;
}

// ---- pipeline ---------------------------------------------------------------------------------

// Micro-batches whose activations stage `stage` holds at once under 1F1B: pp - stage (capped by
// the micro-batch count); interleaving adds (pp - 1) / (pp * vpp) to the first stage (Narayanan
// et al., SC'21, §2.2; Megatron-LM theoretical_memory_usage.py).
double InFlight(const ParallelPlan& p, int64_t stage, int64_t microbatches) {
  double k = static_cast<double>(std::min<int64_t>(p.pp - stage, microbatches));
  if (p.vpp > 1 && p.pp > 1) {
    k *= 1.0 + static_cast<double>(p.pp - 1) / static_cast<double>(p.pp * p.vpp);
  }
  return std::max(1.0, k);
}

// CUDA-only memory outside tensors, per GPU.
// cuBLAS/cuBLASLt workspaces come from the caching allocator: ":4096:8" (8 x 4 MiB) on Hopper,
// ":4096:2:16:8" otherwise (PyTorch docs, CUDA semantics / cuBLAS workspaces).
constexpr int64_t kCublasWorkspace = 32 * kMiB;
// NCCL communicators: NCCL_BUFFSIZE (4 MiB) per channel and peer (NCCL env docs); one
// communicator per parallel group in use.
constexpr int64_t kNcclPerGroup = 128 * kMiB;

// ---- what the stages share -----------------------------------------------------------------

// The parameters of the model as trained: a classification head replaces the LM head.
ParamCounts TrainedParamCounts(const ModelSpec& m, const TrainingSpec& t) {
  HeadKind head_kind = t.head == HeadType::kMaskedLm ? HeadKind::kMaskedLm : HeadKind::kDefault;
  if (m.arch == ArchKind::kDecoder) head_kind = HeadKind::kCausalLm;
  ParamCounts counts = CountParams(m, head_kind, /*per_layer=*/false);
  if (t.head == HeadType::kClassification) {
    counts.total -= counts.head();
    counts.lm_head = 0;
    counts.head_extra = m.hidden_size * t.num_labels + t.num_labels;
    counts.total += counts.head();
  }
  if (t.finetune != FineTune::kFull) counts.total += ModelAdapterParams(m, t.lora);
  return counts;
}

// Every layer is one of two kinds (dense or MoE): each kind is accounted once, for all stages.
struct LayerKinds {
  bool has_moe = false;
  RankLayer dense_params, moe_params;
  LayerActivations dense_act, moe_act;
  int64_t embedding_act = 0;     // first stage, one micro-batch
  OutputActivations output_act;  // last stage, one micro-batch
  int64_t stream_grad = 0;       // the residual stream's gradient, alive through backward
  int64_t workspace = 0;         // cuBLAS workspaces (CUDA)
};

LayerKinds MakeLayerKinds(const ModelSpec& m, const TrainingSpec& t, const ParallelPlan& p) {
  LayerKinds k;
  k.has_moe = m.moe.enabled();
  k.dense_params = LayerOnRank(m, CountLayerParams(m, false), p);
  if (k.has_moe) k.moe_params = LayerOnRank(m, CountLayerParams(m, true), p);
  if (t.finetune != FineTune::kFull) {
    // Adapters are the only trainable (and autocast-cast) matrices; tp = 1 for fine-tuning.
    for (auto [rl, moe] : {std::pair{&k.dense_params, false}, std::pair{&k.moe_params, true}}) {
      if (moe && !k.has_moe) continue;
      rl->adapters = LayerAdapterParams(m, t.lora, moe);
      rl->total += rl->adapters;
      rl->matmul = rl->adapters;
      if (t.finetune == FineTune::kQlora) rl->quantized = LayerLinearElements(m, moe);
    }
  }
  k.dense_act = LayerActivationBytes(m, t, p, false);
  if (k.has_moe) k.moe_act = LayerActivationBytes(m, t, p, true);
  k.embedding_act = EmbeddingActivationBytes(m, t, p);
  k.output_act = OutputActivationBytes(m, t, p);
  const ActivationShape sh = MakeActivationShape(t, p);
  k.stream_grad = sh.b * sh.s * m.hidden_size * sh.e;
  k.workspace = t.device == DeviceKind::kCuda ? kCublasWorkspace : 0;
  return k;
}

// The layers of one pipeline stage.
struct StageLayers {
  int64_t stage = 0;
  int64_t first = 0;  // index of its first layer
  int64_t n_layers = 0;
  int64_t n_dense = 0;
  int64_t n_moe = 0;
  bool first_stage = false;
  bool last_stage = false;
};

StageLayers MakeStageLayers(const ModelSpec& m, const ParallelPlan& p, bool has_moe, int64_t stage,
                            int64_t first, int64_t n_layers) {
  StageLayers l;
  l.stage = stage;
  l.first = first;
  l.n_layers = n_layers;
  l.first_stage = stage == 0;
  l.last_stage = stage == p.pp - 1;
  if (has_moe) {
    for (int64_t i = first; i < first + n_layers; ++i) l.n_moe += m.IsMoeLayer(i) ? 1 : 0;
  }
  l.n_dense = n_layers - l.n_moe;
  return l;
}

// ---- the phases of one step on one stage ---------------------------------------------------

struct Phase {
  const char* name = "";
  MemoryBreakdown b;
};

// What the phases of one stage's step have in common.
struct StageState {
  StageParams sp;
  States st;
  int64_t act = 0;      // activations of one micro-batch
  int64_t act_all = 0;  // ... of all micro-batches in flight
  double in_flight = 1;
  OutputActivations out;       // zero except on the last stage
  int64_t grads_at_start = 0;  // gradients that exist before backward (flat buffers)
  // With whole-layer recomputation the first forward runs without grad, so no graph keeps the
  // autocast cache's weight copies once autocast exits: backward only holds the copies of the
  // layer being recomputed.
  int64_t cache_after_forward = 0;
  bool layer_casts = false;
  // Gradient bytes per parameter that appear during backward (frameworks that free them after
  // each step); 0 where flat buffers hold them throughout.
  double grad_per_param = 0;
};

StageState MakeStageState(const ModelSpec& m, const TrainingSpec& t, const ParallelPlan& p,
                          const ParamCounts& counts, const LayerKinds& k, const StageLayers& l,
                          int64_t microbatches) {
  StageState s;
  s.sp = ParamsOnRank(m, counts, p, k.dense_params, k.moe_params, l.n_dense, l.n_moe, l.first_stage,
                      l.last_stage);
  s.st = ModelStates(t, p, s.sp);
  s.act = l.n_dense * k.dense_act.saved + l.n_moe * k.moe_act.saved;
  if (l.first_stage) s.act += k.embedding_act;
  if (l.last_stage) s.out = k.output_act;
  s.in_flight = InFlight(p, l.stage, microbatches);
  s.act_all = static_cast<int64_t>(std::ceil(static_cast<double>(s.act) * s.in_flight));
  s.grads_at_start = s.st.grads_persist ? s.st.grads : 0;
  const bool recompute_layers = RecomputesLayerForward(t.recompute);
  s.cache_after_forward = recompute_layers ? 0 : s.st.autocast_cache;
  // (TE's FP8 linears are not cast by autocast: only the output layer is, on the last stage.)
  s.layer_casts = recompute_layers && s.st.autocast_cache > 0 && !t.te_fp8();
  s.grad_per_param = s.st.grads_persist || s.sp.total == 0
                         ? 0.0
                         : static_cast<double>(s.st.grads) / static_cast<double>(s.sp.total);
  return s;
}

// End of forward, still inside autocast (its weight cache is alive); and, on the last stage,
// the start of backward, where the loss backward's vocabulary-sized gradients appear.
std::pair<Phase, Phase> ForwardAndLossPhases(const StageState& s, const LayerKinds& k,
                                             bool last_stage) {
  const OutputActivations& out = s.out;
  MemoryBreakdown b;
  b.weights = s.st.weights;
  b.gradients = s.grads_at_start;
  b.optimizer = s.st.optimizer;
  b.activations = s.act_all + out.saved + s.st.autocast_cache;
  b.logits = out.logits_held + out.loss_saved;
  b.temporary = s.st.buckets + s.st.gather;
  b.overhead = k.workspace;
  Phase forward{"forward", b};
  b.activations = s.act_all + out.saved + s.cache_after_forward;
  b.logits = out.logits_held + out.loss_saved + out.loss_backward_transient;
  return {forward, Phase{last_stage ? "loss" : "forward", b}};
}

// Backward, layer by layer from the last: each step of a layer's backward holds its gradient
// buffers, then frees what it saved and adds its parameter gradients. Keeps the largest state.
class BackwardWalk {
 public:
  BackwardWalk(const StageState& s, const LayerKinds& k)
      : fixed_temp_(s.st.buckets + s.st.gather + s.st.gather_grad + k.stream_grad),
        grad_per_param_(s.grad_per_param),
        layer_casts_(s.layer_casts) {
    base_.weights = s.st.weights;
    base_.optimizer = s.st.optimizer;
    base_.logits = s.out.logits_held;
    base_.overhead = k.workspace;
  }

  int64_t GradBytes(int64_t params) const {
    return static_cast<int64_t>(std::ceil(static_cast<double>(params) * grad_per_param_));
  }

  // Walks one layer's backward from (grads, act), leaving the state after it there.
  void Layer(const LayerActivations& la, const RankLayer& rl, int64_t& grads, int64_t& act) {
    int64_t casts = layer_casts_ ? 2 * rl.matmul : 0;
    act += la.recomputed + casts;
    int64_t freed = 0;
    for (const auto& step : la.backward) {
      int64_t g = GradBytes(StepParams(step.params, rl));
      MemoryBreakdown b = base_;
      b.gradients = grads + static_cast<int64_t>(static_cast<double>(g) * step.params_at_peak);
      b.activations = act;
      b.temporary = fixed_temp_ + step.transient;
      if (b.total() > best_.total()) best_ = b;
      grads += g;
      act -= step.frees;
      freed += step.frees;
    }
    // With recomputation, the recomputed output and what the checkpoint kept go now.
    if (la.recomputed > 0) act -= (la.recomputed - freed) + la.recompute_saved;
    act -= casts;
  }

  const MemoryBreakdown& best() const { return best_; }

 private:
  static int64_t StepParams(BackwardStep::Params which, const RankLayer& rl) {
    switch (which) {
      case BackwardStep::Params::kMlp:
        return rl.mlp;
      case BackwardStep::Params::kAttnOut:
        return rl.attn_out;
      case BackwardStep::Params::kAttnQkv:
        return rl.attn_qkv;
      case BackwardStep::Params::kNorm:
        return rl.norm;
      case BackwardStep::Params::kNone:
        break;
    }
    return 0;
  }

  MemoryBreakdown base_;  // what stays fixed through backward
  int64_t fixed_temp_;
  double grad_per_param_;
  bool layer_casts_;
  MemoryBreakdown best_;
};

Phase BackwardPhase(const ModelSpec& m, const ParallelPlan& p, const ParamCounts& counts,
                    const LayerKinds& k, const StageLayers& l, const StageState& s) {
  BackwardWalk walk(s, k);
  // The head's gradients come first; a head tied to the embedding accumulates into the
  // embedding's gradient, which therefore exists from the start of backward.
  int64_t head_params = s.sp.head;
  if (m.tied_embeddings && l.first_stage && l.last_stage) {
    head_params += counts.token_embedding / p.tp;
  }
  const int64_t start_grads = s.grads_at_start + walk.GradBytes(head_params);
  const int64_t start_act = s.act_all + s.cache_after_forward;
  int64_t g = start_grads, a = start_act;
  if (l.n_moe == 0 || l.n_dense == 0) {
    // Identical layers: every layer changes the state by the same amount, so the peak is in
    // the first or the last layer to run backward.
    const LayerActivations& la = l.n_moe == 0 ? k.dense_act : k.moe_act;
    const RankLayer& rl = l.n_moe == 0 ? k.dense_params : k.moe_params;
    if (l.n_layers > 0) walk.Layer(la, rl, g, a);
    if (l.n_layers > 1) {
      int64_t dg = g - start_grads, da = a - start_act;
      g = start_grads + dg * (l.n_layers - 1);
      a = start_act + da * (l.n_layers - 1);
      walk.Layer(la, rl, g, a);
    }
  } else {
    for (int64_t i = l.first + l.n_layers - 1; i >= l.first; --i) {
      bool moe_layer = m.IsMoeLayer(i);
      walk.Layer(moe_layer ? k.moe_act : k.dense_act, moe_layer ? k.moe_params : k.dense_params, g,
                 a);
    }
  }
  return {"backward", walk.best()};
}

// Optimizer step: all gradients, no activations of this micro-batch.
Phase OptimizerPhase(const StageState& s, const LayerKinds& k) {
  MemoryBreakdown b;
  b.weights = s.st.weights;
  b.gradients = s.st.grads;
  b.optimizer = s.st.optimizer;
  b.activations = s.act_all - s.act;  // other in-flight micro-batches (pipelines)
  b.temporary = s.st.buckets + s.st.optimizer_temp;
  b.overhead = k.workspace;
  return {"optimizer", b};
}

// Allocator and device bytes above the allocated peak.
void AddDeviceBytes(const TrainingSpec& t, const ParallelPlan& p, StageEstimate& se) {
  if (t.device != DeviceKind::kCuda) {
    se.peak_reserved_bytes = se.peak_bytes;
    se.device_bytes = se.peak_bytes;
    return;
  }
  // Caching allocator: blocks round up to 2 MiB segments for large tensors and freed blocks
  // are kept; reserved memory sits a few percent above the allocated peak (PyTorch CUDA
  // semantics docs, "Memory management").
  int64_t reserved = static_cast<int64_t>(static_cast<double>(se.peak_bytes) * 1.05);
  se.peak_reserved_bytes = (reserved + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB);
  int64_t groups = (p.dp > 1) + (p.tp > 1) + (p.pp > 1) + (p.cp > 1) + (p.ep > 1);
  se.device_bytes = se.peak_reserved_bytes + t.cuda_context_bytes + groups * kNcclPerGroup;
}

StageEstimate EstimateStage(const ModelSpec& m, const TrainingSpec& t, const ParallelPlan& p,
                            const ParamCounts& counts, const LayerKinds& k, const StageLayers& l,
                            int64_t microbatches) {
  const StageState s = MakeStageState(m, t, p, counts, k, l, microbatches);
  auto [forward, loss] = ForwardAndLossPhases(s, k, l.last_stage);
  // Ties go to the earlier entry.
  const std::array<Phase, 4> phases = {forward, BackwardPhase(m, p, counts, k, l, s),
                                       OptimizerPhase(s, k), loss};
  const Phase* peak = &phases[0];
  for (const auto& ph : phases) {
    if (ph.b.total() > peak->b.total()) peak = &ph;
  }
  StageEstimate se;
  se.stage = l.stage;
  se.first_layer = l.first;
  se.num_layers = l.n_layers;
  se.params = s.sp.total;
  se.microbatches_in_flight = static_cast<int64_t>(std::ceil(s.in_flight));
  se.peak_phase = peak->name;
  se.breakdown = peak->b;
  se.activations_per_microbatch = s.act;
  se.peak_bytes = peak->b.total();
  se.host_bytes = s.st.host;
  se.pageable_bytes = std::min(s.st.pageable, peak->b.optimizer);
  AddDeviceBytes(t, p, se);
  return se;
}

// The job's figures are its worst stage's.
void SummarizeStages(MemoryEstimate& est) {
  for (size_t i = 0; i < est.stages.size(); ++i) {
    const auto& s = est.stages[i];
    est.peak_bytes = std::max(est.peak_bytes, s.peak_bytes);
    est.peak_reserved_bytes = std::max(est.peak_reserved_bytes, s.peak_reserved_bytes);
    est.host_bytes = std::max(est.host_bytes, s.host_bytes);
    if (s.device_bytes > est.device_bytes) {
      est.device_bytes = s.device_bytes;
      est.worst_stage = static_cast<int64_t>(i);
    }
    est.resident_bytes = std::max(est.resident_bytes, s.device_bytes - s.pageable_bytes);
  }
}

}  // namespace

Result<MemoryEstimate> PredictMemory(const ModelSpec& m, const TrainingSpec& t,
                                     const ParallelPlan& p, StageDetail detail) {
  RETURN_IF_ERROR(ValidateLayout(m, t, p));
  const ParamCounts counts = TrainedParamCounts(m, t);
  const LayerKinds kinds = MakeLayerKinds(m, t, p);
  const int64_t microbatches = MicroBatchesPerStep(t, p);
  MemoryEstimate est;
  est.params = counts.total;

  // Layers per stage: as even as possible, earlier stages take the remainder.
  const int64_t base_layers = m.num_layers / p.pp;
  const int64_t extra_layers = m.num_layers % p.pp;
  // Middle stages after the second never exceed it, unless an irregular MoE layer pattern puts
  // more experts on a later stage.
  bool regular = !kinds.has_moe || (m.moe.layer_freq == 1 && m.moe.dense_layers.empty());
  bool worst_only = detail == StageDetail::kWorst && regular;
  est.stages.reserve(static_cast<size_t>(worst_only ? std::min<int64_t>(3, p.pp) : p.pp));
  int64_t first = 0;
  for (int64_t stage = 0; stage < p.pp; ++stage) {
    int64_t n_layers = base_layers + (stage < extra_layers ? 1 : 0);
    if (!worst_only || stage <= 1 || stage == p.pp - 1) {
      StageLayers layers = MakeStageLayers(m, p, kinds.has_moe, stage, first, n_layers);
      est.stages.push_back(EstimateStage(m, t, p, counts, kinds, layers, microbatches));
    }
    first += n_layers;
  }
  SummarizeStages(est);
  return est;
}

int64_t CheckpointBytes(const ModelSpec& m, const TrainingSpec& t) {
  if (t.finetune != FineTune::kFull) {
    // A fine-tuning checkpoint holds the adapters (fp32 or 16-bit) and their optimizer states.
    const double a = static_cast<double>(ModelAdapterParams(m, t.lora));
    const int64_t ab = t.lora.adapter_bytes;
    return CeilBytes(a * (static_cast<double>(ab) + OptimizerStateBytes(t.optimizer, ab)));
  }
  StageParams whole;
  whole.total = TrainedParamCounts(m, t).total;
  const StateInputs in = MakeStateInputs(t, ParallelPlan{}, whole);
  const double master = in.mixed ? 4.0 * in.n : 0.0;
  return CeilBytes(in.n * static_cast<double>(in.compute) + master + in.opt_bytes);
}

}  // namespace frenzy
