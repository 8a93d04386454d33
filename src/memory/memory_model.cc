#include "memory/memory_model.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "memory/activations.h"
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
  int64_t total = 0;           // parameters on this rank
  int64_t matmul = 0;          // of which in matrices multiplied in forward (autocast casts them)
  int64_t largest_tensor = 0;  // elements of the largest single tensor (optimizer temporaries)
  int64_t adafactor_state = 0;  // Adafactor's factored second moment (elements)
  int64_t per_layer_max = 0;    // largest layer (ZeRO-3/FSDP gather unit)
  int64_t head = 0;             // output layer + final norm (their grads appear first)
};

StageParams ParamsOnRank(const ModelSpec& m, const ParamCounts& c, const ParallelPlan& p,
                         const RankLayer& dense, const RankLayer& moe, int64_t n_dense,
                         int64_t n_moe, bool first_stage, bool last_stage) {
  StageParams s;
  for (auto [layer, n] : {std::pair{&dense, n_dense}, std::pair{&moe, n_moe}}) {
    if (n == 0) continue;
    s.total += n * layer->total;
    s.matmul += n * layer->matmul;
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
    s.matmul += c.head() / p.tp + (m.tied_embeddings ? c.token_embedding / p.tp : 0);
    s.largest_tensor = std::max(s.largest_tensor, vocab_matrix);
    s.adafactor_state += m.vocab_size / p.tp + m.embedding_width();
  }
  return s;
}

// ---- model states -----------------------------------------------------------------------------

struct States {
  int64_t weights = 0;
  int64_t grads = 0;             // gradients alive at the end of backward
  bool grads_persist = false;    // kept across steps (flat buffers) vs freed by zero_grad
  int64_t optimizer = 0;         // optimizer states (with fp32 master weights where kept)
  int64_t optimizer_temp = 0;    // transient of the optimizer step
  int64_t buckets = 0;           // persistent communication buffers
  int64_t gather = 0;            // ZeRO-3/FSDP unsharded parameters while computing
  int64_t gather_grad = 0;       // ... and the unsharded gradient before reduce-scatter
  int64_t autocast_cache = 0;    // 16-bit copies of fp32 weights under torch.autocast
};

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
      // bitsandbytes blockwise 8-bit Adam: two uint8 states plus one fp32 absmax per 2048-value
      // block of each (Dettmers et al., "8-bit Optimizers via Block-wise Quantization", 2022).
      return 2.0 + 2.0 * 4.0 / 2048.0;
  }
  return 0;
}

States ModelStates(const TrainingSpec& t, const ParallelPlan& p, const StageParams& sp) {
  States st;
  const double n = static_cast<double>(sp.total);
  const int64_t z = p.shard_size();
  int64_t compute = t.precision == Precision::kFp32 ? 4 : 2;  // bytes of the working weights
  bool pure = t.precision == Precision::kBf16Pure;
  bool mixed = t.mixed();
  // States are fp32 except in pure bf16 (no master copy, bf16 states).
  int64_t state_bytes = pure ? 2 : 4;
  double opt_per_param = OptimizerStateBytes(t.optimizer, state_bytes);
  double opt_bytes = opt_per_param * n;
  if (t.optimizer == OptimizerKind::kAdafactor) {
    opt_bytes = static_cast<double>(sp.adafactor_state) * static_cast<double>(state_bytes);
  }
  auto bytes = [](double v) { return static_cast<int64_t>(std::ceil(v)); };

  switch (t.framework) {
    case Framework::kMegatron: {
      // Megatron-LM: 16-bit params, fp32 main_grad buffer (accumulate_allreduce_grads_in_fp32),
      // fp32 master params + Adam states in the optimizer; 18 bytes/param, or 6 + 12/d with the
      // distributed optimizer (Megatron-LM docs, theoretical_memory_usage.py).
      // The grad buffer is fp32 for bf16 (Megatron forces accumulate_allreduce_grads_in_fp32
      // with --bf16) and 16-bit for fp16, where that flag defaults to off (arguments.py).
      st.weights = bytes(n * static_cast<double>(compute));
      bool fp32_grads = t.precision == Precision::kBf16 || t.precision == Precision::kFp32;
      st.grads = bytes(n * (fp32_grads ? 4.0 : 2.0));
      st.grads_persist = true;
      double master = mixed ? 4.0 * n : 0.0;
      double opt = master + opt_bytes;
      int64_t shard = (p.distributed_optimizer || p.zero >= 1) ? z : 1;
      st.optimizer = bytes(opt / static_cast<double>(shard));
      break;
    }
    case Framework::kDeepSpeed: {
      // ZeRO (Rajbhandari et al., SC'20, §5): 2 + 2 + K bytes/param with K = 12 for mixed-
      // precision Adam; stage 1 shards K, stage 2 also the gradients, stage 3 also the weights.
      double w = n * static_cast<double>(compute);
      double g = n * static_cast<double>(compute);
      double master = mixed ? 4.0 * n : 0.0;
      double opt = master + opt_bytes;
      st.weights = bytes(p.zero >= 3 ? w / static_cast<double>(z) : w);
      st.grads = bytes(p.zero >= 2 ? g / static_cast<double>(z) : g);
      st.grads_persist = true;
      st.optimizer = bytes(p.zero >= 1 ? opt / static_cast<double>(z) : opt);
      if (p.zero >= 1 && p.zero <= 2 && z > 1) {
        // reduce_bucket_size and allgather_bucket_size default to 5e8 elements (DeepSpeed
        // config docs); buckets never exceed the partition they serve.
        st.buckets = std::min<int64_t>(bytes(g), 500'000'000 * compute) +
                     std::min<int64_t>(bytes(w), 500'000'000 * compute);
      }
      if (p.zero >= 3) {
        // stage3_prefetch_bucket_size (5e7) and the layer being computed are unsharded.
        st.gather = std::min<int64_t>(2 * sp.per_layer_max, sp.per_layer_max + 50'000'000) *
                    compute;
        st.gather_grad = sp.per_layer_max * compute;
      }
      break;
    }
    case Framework::kFsdp: {
      // FSDP keeps fp32 sharded flat parameters (and fp32 gradients and optimizer states on
      // the shard); MixedPrecision casts an all-gathered unit to 16 bits while it computes,
      // with the next unit prefetched (PyTorch FSDP docs: backward_prefetch=BACKWARD_PRE).
      int64_t master_bytes = pure ? 2 : 4;
      double w = n * static_cast<double>(master_bytes);
      st.weights = bytes(p.zero >= 3 ? w / static_cast<double>(z) : w);
      st.grads = bytes(p.zero >= 2 ? w / static_cast<double>(z) : w);
      st.optimizer = bytes(p.zero >= 2 ? opt_bytes / static_cast<double>(z) : opt_bytes);
      if (p.zero >= 3 && z > 1) {
        st.gather = 2 * sp.per_layer_max * compute;
        st.gather_grad = sp.per_layer_max * compute;
      } else if (mixed) {
        st.autocast_cache = bytes(static_cast<double>(sp.matmul) * 2.0);
      }
      break;
    }
    case Framework::kHf: {
      // HF Trainer / plain PyTorch: parameters stay in their dtype (fp32 under AMP, bf16 when
      // pure); gradients match them; torch.autocast caches a 16-bit copy of every weight it
      // casts until the forward ends, and backward keeps them until each layer's backward.
      int64_t pbytes = pure ? 2 : 4;
      st.weights = bytes(n * static_cast<double>(pbytes));
      st.grads = st.weights;
      st.optimizer = bytes(opt_bytes);
      if (p.zero >= 1) {
        st.optimizer = Div(st.optimizer, z);
        if (p.zero >= 2) st.grads = Div(st.grads, z);
        if (p.zero >= 3) st.weights = Div(st.weights, z);
      }
      if (mixed) st.autocast_cache = bytes(static_cast<double>(sp.matmul) * 2.0);
      if (p.dp > 1 && p.zero == 0) {
        // DDP's gradient buckets are a second copy of all gradients unless
        // gradient_as_bucket_view=True (PyTorch DDP docs).
        st.buckets = st.grads;
      }
      break;
    }
  }
  // Optimizer step temporaries.
  bool adam = t.optimizer == OptimizerKind::kAdam || t.optimizer == OptimizerKind::kAdamW;
  if (adam && (t.framework == Framework::kHf || t.framework == Framework::kFsdp)) {
    if (t.device == DeviceKind::kCuda && t.foreach_optimizer) {
      // torch.optim's default foreach implementation: _foreach_sqrt(exp_avg_sq) materialises
      // a copy of the second moments of all (local) parameters.
      st.optimizer_temp = bytes(opt_bytes / 2.0);
    } else {
      // Single-tensor Adam (the CPU default): exp_avg_sq.sqrt() / bias_correction2_sqrt makes
      // two temporaries the size of the tensor being updated.
      st.optimizer_temp = 2 * sp.largest_tensor * state_bytes;
    }
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

}  // namespace

Result<MemoryEstimate> PredictMemory(const ModelSpec& m, const TrainingSpec& t,
                                     const ParallelPlan& p, StageDetail detail) {
  RETURN_IF_ERROR(ValidateLayout(m, t, p));
  HeadKind head_kind = t.head == HeadType::kMaskedLm ? HeadKind::kMaskedLm : HeadKind::kDefault;
  if (m.arch == ArchKind::kDecoder) head_kind = HeadKind::kCausalLm;
  ParamCounts counts = CountParams(m, head_kind, /*per_layer=*/false);
  if (t.head == HeadType::kClassification) {
    counts.total -= counts.head();
    counts.lm_head = 0;
    counts.head_extra = m.hidden_size * t.num_labels + t.num_labels;
    counts.total += counts.head();
  }
  MemoryEstimate est;
  est.params = counts.total;
  const int64_t microbatches = MicroBatchesPerStep(t, p);
  const bool cuda = t.device == DeviceKind::kCuda;

  // Every layer is one of two kinds (dense or MoE): account each kind once.
  const bool has_moe = m.moe.enabled();
  const RankLayer dense_params = LayerOnRank(m, CountLayerParams(m, false), p);
  const RankLayer moe_params = has_moe ? LayerOnRank(m, CountLayerParams(m, true), p) : RankLayer{};
  const LayerActivations dense_act = LayerActivationBytes(m, t, p, false);
  const LayerActivations moe_act = has_moe ? LayerActivationBytes(m, t, p, true) : LayerActivations{};
  const int64_t embedding_act = EmbeddingActivationBytes(m, t, p);
  const OutputActivations output_act = OutputActivationBytes(m, t, p);
  const ActivationShape sh = MakeActivationShape(t, p);
  const int64_t stream_grad = sh.b * sh.s * m.hidden_size * sh.e;
  const int64_t workspace = cuda ? kCublasWorkspace : 0;

  // Layers per stage: as even as possible, earlier stages take the remainder.
  const int64_t base_layers = m.num_layers / p.pp;
  const int64_t extra_layers = m.num_layers % p.pp;

  // Middle stages after the second never exceed it, unless an irregular MoE layer pattern puts
  // more experts on a later stage.
  bool regular = !has_moe || (m.moe.layer_freq == 1 && m.moe.dense_layers.empty());
  bool worst_only = detail == StageDetail::kWorst && regular;
  est.stages.reserve(static_cast<size_t>(worst_only ? std::min<int64_t>(3, p.pp) : p.pp));
  int64_t first = 0;
  for (int64_t stage = 0; stage < p.pp; ++stage) {
    int64_t n_layers = base_layers + (stage < extra_layers ? 1 : 0);
    if (worst_only && stage > 1 && stage < p.pp - 1) {
      first += n_layers;
      continue;
    }
    bool first_stage = stage == 0;
    bool last_stage = stage == p.pp - 1;
    int64_t n_moe = 0;
    if (has_moe) {
      for (int64_t i = first; i < first + n_layers; ++i) n_moe += m.IsMoeLayer(i) ? 1 : 0;
    }
    int64_t n_dense = n_layers - n_moe;
    StageParams sp = ParamsOnRank(m, counts, p, dense_params, moe_params, n_dense, n_moe,
                                  first_stage, last_stage);
    States st = ModelStates(t, p, sp);

    // Activations of one micro-batch on this stage.
    int64_t act = n_dense * dense_act.saved + n_moe * moe_act.saved;
    if (first_stage) act += embedding_act;
    OutputActivations out;
    if (last_stage) out = output_act;
    double in_flight = InFlight(p, stage, microbatches);
    int64_t act_all = static_cast<int64_t>(std::ceil(static_cast<double>(act) * in_flight));

    // Phases of one step; each lists what is alive at its peak.
    struct Phase {
      const char* name;
      MemoryBreakdown b;
    };
    std::array<Phase, 4> phases;
    int64_t grads_at_start = st.grads_persist ? st.grads : 0;
    // With whole-layer recomputation the first forward runs without grad, so no graph keeps the
    // autocast cache's weight copies once autocast exits: backward only holds the copies of the
    // layer being recomputed.
    const bool recompute_layers =
        t.recompute == Recompute::kFull || t.recompute == Recompute::kOp;
    const int64_t cache_after_forward = recompute_layers ? 0 : st.autocast_cache;
    const bool layer_casts = recompute_layers && st.autocast_cache > 0;
    // Gradients that appear during backward (frameworks that free them after each step).
    double grad_per_param = st.grads_persist || sp.total == 0
                                ? 0.0
                                : static_cast<double>(st.grads) / static_cast<double>(sp.total);
    auto grad_bytes = [&](int64_t params) {
      return static_cast<int64_t>(std::ceil(static_cast<double>(params) * grad_per_param));
    };
    {
      MemoryBreakdown b;  // end of forward, still inside autocast: its weight cache is alive
      b.weights = st.weights;
      b.gradients = grads_at_start;
      b.optimizer = st.optimizer;
      b.activations = act_all + out.saved + st.autocast_cache;
      b.logits = out.logits_held + out.loss_saved;
      b.temporary = st.buckets + st.gather;
      b.overhead = workspace;
      phases[0] = {"forward", b};
      // Start of backward (last stage): the loss backward's vocabulary-sized gradients.
      b.activations = act_all + out.saved + cache_after_forward;
      b.logits = out.logits_held + out.loss_saved + out.loss_backward_transient;
      phases[3] = {last_stage ? "loss" : "forward", b};
    }
    {
      // Backward, layer by layer from the last: each step of a layer's backward holds its
      // gradient buffers, then frees what it saved and adds its parameter gradients.
      MemoryBreakdown base;
      base.weights = st.weights;
      base.optimizer = st.optimizer;
      base.logits = out.logits_held;
      base.overhead = workspace;
      // The head's gradients come first; a head tied to the embedding accumulates into the
      // embedding's gradient, which therefore exists from the start of backward.
      int64_t head_params = sp.head;
      if (m.tied_embeddings && first_stage && last_stage) head_params += counts.token_embedding / p.tp;
      int64_t fixed_temp = st.buckets + st.gather + st.gather_grad + stream_grad;
      MemoryBreakdown best;
      // Walks one layer's backward from (grads, act); returns the state after it.
      auto walk = [&](const LayerActivations& la, const RankLayer& rl, int64_t& cur_grads,
                      int64_t& cur_act) {
        int64_t casts = layer_casts ? 2 * rl.matmul : 0;
        cur_act += la.recomputed + casts;
        int64_t freed = 0;
        for (const auto& step : la.backward) {
          int64_t params = 0;
          switch (step.params) {
            case BackwardStep::Params::kMlp: params = rl.mlp; break;
            case BackwardStep::Params::kAttnOut: params = rl.attn_out; break;
            case BackwardStep::Params::kAttnQkv: params = rl.attn_qkv; break;
            case BackwardStep::Params::kNorm: params = rl.norm; break;
            case BackwardStep::Params::kNone: break;
          }
          int64_t g = grad_bytes(params);
          MemoryBreakdown b = base;
          b.gradients = cur_grads + static_cast<int64_t>(static_cast<double>(g) *
                                                         step.params_at_peak);
          b.activations = cur_act;
          b.temporary = fixed_temp + step.transient;
          if (b.total() > best.total()) best = b;
          cur_grads += g;
          cur_act -= step.frees;
          freed += step.frees;
        }
        // With recomputation, the recomputed output and what the checkpoint kept go now.
        if (la.recomputed > 0) cur_act -= (la.recomputed - freed) + la.recompute_saved;
        cur_act -= casts;
      };
      int64_t start_grads = grads_at_start + grad_bytes(head_params);
      int64_t start_act = act_all + cache_after_forward;
      if (n_moe == 0 || n_dense == 0) {
        // Identical layers: every layer changes the state by the same amount, so the peak is
        // in the first or the last layer to run backward.
        const LayerActivations& la = n_moe == 0 ? dense_act : moe_act;
        const RankLayer& rl = n_moe == 0 ? dense_params : moe_params;
        int64_t g = start_grads, a = start_act;
        if (n_layers > 0) walk(la, rl, g, a);
        if (n_layers > 1) {
          int64_t dg = g - start_grads, da = a - start_act;
          g = start_grads + dg * (n_layers - 1);
          a = start_act + da * (n_layers - 1);
          walk(la, rl, g, a);
        }
      } else {
        int64_t g = start_grads, a = start_act;
        for (int64_t i = first + n_layers - 1; i >= first; --i) {
          bool moe_layer = m.IsMoeLayer(i);
          walk(moe_layer ? moe_act : dense_act, moe_layer ? moe_params : dense_params, g, a);
        }
      }
      phases[1] = {"backward", best};
    }
    {
      MemoryBreakdown b;  // optimizer step: all gradients, no activations of this micro-batch
      b.weights = st.weights;
      b.gradients = st.grads;
      b.optimizer = st.optimizer;
      b.activations = act_all - act;  // other in-flight micro-batches (pipelines)
      b.temporary = st.buckets + st.optimizer_temp;
      b.overhead = workspace;
      phases[2] = {"optimizer", b};
    }
    const Phase* peak = &phases[0];
    for (const auto& ph : phases) {
      if (ph.b.total() > peak->b.total()) peak = &ph;
    }

    StageEstimate se;
    se.stage = stage;
    se.first_layer = first;
    se.num_layers = n_layers;
    se.params = sp.total;
    se.microbatches_in_flight = static_cast<int64_t>(std::ceil(in_flight));
    se.peak_phase = peak->name;
    se.breakdown = peak->b;
    se.activations_per_microbatch = act;
    se.peak_bytes = peak->b.total();
    if (cuda) {
      // Caching allocator: blocks round up to 2 MiB segments for large tensors and freed blocks
      // are kept; reserved memory sits a few percent above the allocated peak (PyTorch CUDA
      // semantics docs, "Memory management").
      int64_t reserved = static_cast<int64_t>(static_cast<double>(se.peak_bytes) * 1.05);
      se.peak_reserved_bytes = (reserved + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB);
      int64_t groups = (p.dp > 1) + (p.tp > 1) + (p.pp > 1) + (p.cp > 1) + (p.ep > 1);
      se.device_bytes = se.peak_reserved_bytes + t.cuda_context_bytes + groups * kNcclPerGroup;
    } else {
      se.peak_reserved_bytes = se.peak_bytes;
      se.device_bytes = se.peak_bytes;
    }
    est.stages.push_back(se);
    first += n_layers;
  }
  for (size_t i = 0; i < est.stages.size(); ++i) {
    const auto& s = est.stages[i];
    est.peak_bytes = std::max(est.peak_bytes, s.peak_bytes);
    est.peak_reserved_bytes = std::max(est.peak_reserved_bytes, s.peak_reserved_bytes);
    if (s.device_bytes > est.device_bytes) {
      est.device_bytes = s.device_bytes;
      est.worst_stage = static_cast<int64_t>(i);
    }
  }
  return est;
}

}  // namespace frenzy
