#include "memory/memory_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "memory/activations.h"
#include "memory/finetune.h"
#include "memory/fsdp_init.h"
#include "memory/model_states.h"
#include "memory/step_events.h"
#include "memory/variable_lengths.h"
#include "model/param_count.h"

namespace frenzy {
namespace {

using memory_detail::CeilBytes;
using memory_detail::MakeStateInputs;
using memory_detail::ModelStates;
using memory_detail::OptimizerStateBytes;
using memory_detail::StageParams;
using memory_detail::StateInputs;
using memory_detail::States;

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
  int64_t experts = 0;  // routed experts' parameters (in `total`; sharded over expert-DP)
};

RankLayer LayerOnRank(const ModelSpec& m, const LayerParams& l, const ParallelPlan& p) {
  RankLayer r;
  // Routed experts split over EP and expert-TP ranks; the rest of the MLP over TP.
  const int64_t experts = l.moe ? l.mlp / p.ep / p.expert_tp() : l.mlp / p.tp;
  r.mlp = experts + l.router + l.shared_experts / p.tp;
  r.experts = l.moe ? experts : 0;
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
  const int64_t ffn_split = l.moe ? p.expert_tp() : p.tp;
  r.largest_tensor = std::max(r.largest_tensor, h * ffn / ffn_split);
  r.adafactor_state += mats * (h + ffn / ffn_split) + l.norms;
  return r;
}

StageParams ParamsOnRank(const ModelSpec& m, const ParamCounts& c, const ParallelPlan& p,
                         const RankLayer& dense, const RankLayer& moe, int64_t n_dense,
                         int64_t n_moe, bool first_stage, bool last_stage,
                         int64_t head_adapters) {
  StageParams s;
  for (auto [layer, n] : {std::pair{&dense, n_dense}, std::pair{&moe, n_moe}}) {
    if (n == 0) continue;
    s.total += n * layer->total;
    s.matmul += n * layer->matmul;
    s.adapters += n * layer->adapters;
    s.quantized += n * layer->quantized;
    s.experts += n * layer->experts;
    s.adafactor_state += n * layer->adafactor_state;
    s.largest_tensor = std::max(s.largest_tensor, layer->largest_tensor);
    s.per_layer_max = std::max(s.per_layer_max, layer->total);
  }
  const int64_t in_layers = s.total;
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
    // The output layer's adapter (a fine-tune's `lm_head` target): trainable, on this stage.
    s.total += head_adapters;
    s.adapters += head_adapters;
    s.largest_tensor = std::max(s.largest_tensor, vocab_matrix);
    s.adafactor_state += m.vocab_size / p.tp + m.embedding_width();
  }
  s.outside_layers = s.total - in_layers;
  return s;
}

// ---- pipeline ---------------------------------------------------------------------------------

// Micro-batches whose activations stage `stage` holds at once under 1F1B: pp - stage (capped by
// the micro-batch count). Interleaved (vpp model chunks a rank, Megatron-LM's
// forward_backward_pipelining_with_interleaving, schedules.py): rank r runs 2 (pp - r - 1) +
// (vpp - 1) pp chunk forwards before its first backward (all m x vpp when that is more), then
// one more before each backward, so min(m vpp, warmup + 1) chunks hold activations at once, each
// 1/vpp of the rank's layers. For the first rank that is pp + (pp - 1) / vpp micro-batches, the
// (pp - 1) / (pp vpp) increase of Narayanan et al. (SC'21, section 2.2); the last rank holds
// (vpp - 1) pp + 1 chunks, nearly pp micro-batches, not 1.
double InFlight(const ParallelPlan& p, int64_t stage, int64_t microbatches) {
  if (p.vpp > 1 && p.pp > 1) {
    const int64_t total = microbatches * p.vpp;
    const int64_t warmup = std::min(total, 2 * (p.pp - stage - 1) + (p.vpp - 1) * p.pp);
    const int64_t alive = std::min(total, warmup + 1);
    return std::max(1.0, static_cast<double>(alive) / static_cast<double>(p.vpp));
  }
  return static_cast<double>(std::max<int64_t>(1, std::min<int64_t>(p.pp - stage, microbatches)));
}

// CUDA-only memory outside tensors, per GPU.
// cuBLAS/cuBLASLt workspaces come from the caching allocator: ":4096:8" (8 x 4 MiB) on Hopper,
// ":4096:2:16:8" otherwise (PyTorch docs, CUDA semantics / cuBLAS workspaces).
constexpr int64_t kCublasWorkspace = 32 * kMiB;
// PyTorch keeps one workspace per (cuBLAS handle, stream) and hands each thread its own handle
// (getCurrentCUDABlasHandle in aten/src/ATen/cuda/CublasHandlePool.cpp: a thread_local
// PoolWindow, the workspace map keyed by handle and stream). A training step runs its GEMMs on
// two threads: the forward (and the optimizer) on the caller's, the backward, recomputation
// included, on the autograd engine's thread for the device (torch/csrc/autograd/engine.cpp:
// CUDA work goes to the device's ready queue). Two workspaces, both alive from the first step on.
constexpr int64_t kCublasThreads = 2;
// Transformer Engine's GEMMs take their own cuBLASLt workspace, also a torch.empty through the
// caching allocator: 32 MiB on Hopper and later, 4 MiB before (get_cublas_workspace_size_bytes in
// transformer_engine/pytorch); the larger, as above. Megatron-LM's layers are TE's by default
// since 2024 (`--transformer-impl transformer_engine`); 2023 releases ran their own layers.
constexpr int64_t kTransformerEngineWorkspace = 32 * kMiB;
// Transformer Engine's grouped GEMM (Megatron's --moe-grouped-gemm) splits its GEMMs over TE's
// compute streams (num_compute_streams = 4, transformer_engine/common/util/multi_stream.h) and
// gives each its own workspace of the size above (get_multi_stream_cublas_workspace in
// transformer_engine/pytorch/module/base.py: one torch.empty per stream, allocated once).
constexpr int64_t kTransformerEngineComputeStreams = 4;
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
  // Checkpointing every `every`-th layer: what the others keep (recomputing nothing).
  int64_t every = 1;
  LayerActivations dense_plain, moe_plain;
  int64_t embedding_act = 0;     // first stage, one micro-batch
  OutputActivations output_act;  // last stage, one micro-batch
  int64_t stream_grad = 0;       // the residual stream's gradient, alive through backward
  // What layer `i` keeps: its kind's account, checkpointed or (between checkpointed layers)
  // not.
  const LayerActivations& Act(const ModelSpec& m, int64_t i) const {
    const bool moe = has_moe && m.IsMoeLayer(i);
    if (TrainingSpec::CheckpointedLayer(i, every)) return moe ? moe_act : dense_act;
    return moe ? moe_plain : dense_plain;
  }
  const RankLayer& Params(const ModelSpec& m, int64_t i) const {
    return has_moe && m.IsMoeLayer(i) ? moe_params : dense_params;
  }
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
  k.every = t.recompute_every > 1 ? t.recompute_every : 1;
  if (k.every > 1) {
    // Layers between the checkpointed ones keep everything.
    TrainingSpec plain = t;
    plain.recompute = Recompute::kNone;
    plain.recompute_every = 1;
    k.dense_plain = LayerActivationBytes(m, plain, p, false);
    if (k.has_moe) k.moe_plain = LayerActivationBytes(m, plain, p, true);
  }
  k.embedding_act = EmbeddingActivationBytes(m, t, p);
  k.output_act = OutputActivationBytes(m, t, p);
  const ActivationShape sh = MakeActivationShape(t, p);
  k.stream_grad = sh.b * sh.s * m.hidden_size * sh.e;
  if (t.device == DeviceKind::kCuda) {
    const bool te_layers = t.framework == Framework::kMegatron && !t.megatron_legacy;
    k.workspace = kCublasThreads * kCublasWorkspace + (te_layers ? kTransformerEngineWorkspace : 0);
    if (te_layers && k.has_moe && t.moe_grouped_gemm) {
      k.workspace += kTransformerEngineComputeStreams * kTransformerEngineWorkspace;
    }
  }
  return k;
}

// The layers of one pipeline stage.
struct StageLayers {
  int64_t stage = 0;
  int64_t first = 0;  // index of its first layer
  int64_t n_layers = 0;
  int64_t n_dense = 0;
  int64_t n_moe = 0;
  int64_t n_dense_plain = 0, n_moe_plain = 0;  // of them, not checkpointed (recompute_every)
  bool first_stage = false;
  bool last_stage = false;
};

StageLayers MakeStageLayers(const ModelSpec& m, const TrainingSpec& t, const ParallelPlan& p,
                            bool has_moe, int64_t stage, int64_t first, int64_t n_layers) {
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
  if (t.recompute_every > 1) {
    for (int64_t i = first; i < first + n_layers; ++i) {
      if (!t.RecomputesLayer(i)) ++(has_moe && m.IsMoeLayer(i) ? l.n_moe_plain : l.n_dense_plain);
    }
  }
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
  int64_t logits_in_backward = 0;  // of out.logits_held, what the loop still holds in backward
  int64_t grads_at_start = 0;  // gradients that exist before backward (flat buffers)
  // With whole-layer recomputation the first forward runs without grad, so no graph keeps the
  // autocast cache's weight copies once autocast exits: backward only holds the copies of the
  // layer being recomputed.
  int64_t cache_after_forward = 0;
  bool layer_casts = false;
  // Gradient bytes per parameter that appear during backward (frameworks that free them after
  // each step); 0 where flat buffers hold them throughout.
  double grad_per_param = 0;
  // Activation offloading: the layers' saved bytes in host memory, and the stash of the last
  // saved tensors still on the GPU when backward starts (in `act`).
  int64_t offloaded = 0;
  int64_t stash = 0;
  // FSDP's root unit's unsharded gradient through the layers' backward (0 where the gradients
  // held already count it whole: no_sync accumulation).
  int64_t root_grad = 0;
};

StageState MakeStageState(const ModelSpec& m, const TrainingSpec& t, const ParallelPlan& p,
                          const ParamCounts& counts, const LayerKinds& k, const StageLayers& l,
                          int64_t microbatches) {
  StageState s;
  s.sp = ParamsOnRank(m, counts, p, k.dense_params, k.moe_params, l.n_dense, l.n_moe, l.first_stage,
                      l.last_stage,
                      t.finetune != FineTune::kFull ? HeadAdapterParams(m, t.lora) : 0);
  s.st = ModelStates(t, p, s.sp);
  s.act = (l.n_dense - l.n_dense_plain) * k.dense_act.saved +
          (l.n_moe - l.n_moe_plain) * k.moe_act.saved + l.n_dense_plain * k.dense_plain.saved +
          l.n_moe_plain * k.moe_plain.saved;
  if (t.offload_activations && l.n_layers > 0) {
    // torchtune's OffloadActivations keeps the last kOffloadStash saved tensors on the GPU:
    // with whole-layer checkpointing each layer saves one (its input), else they are the last
    // layer's own (it saves more than five).
    const int64_t layers_act = s.act;
    const int64_t last = k.Act(m, l.first + l.n_layers - 1).saved;
    const bool inputs_only = t.recompute == Recompute::kFull && k.every == 1;
    s.stash = std::min(layers_act, inputs_only ? std::min(l.n_layers, kOffloadStash) * last : last);
    s.offloaded = layers_act - s.stash;
    s.act = s.stash;
  }
  if (l.first_stage) s.act += k.embedding_act;
  if (l.last_stage) s.out = k.output_act;
  s.logits_in_backward = t.logits_freed_before_backward() ? 0 : s.out.logits_held;
  s.in_flight = InFlight(p, l.stage, microbatches);
  s.act_all = static_cast<int64_t>(std::ceil(static_cast<double>(s.act) * s.in_flight));
  // Gradient accumulation (several micro-batches a step on this pipeline): backward adds into
  // the gradients the first micro-batch left, so from the second on every phase holds them,
  // even where zero_grad frees them between steps (PyTorch's AccumulateGrad adds in place).
  const bool grads_held = s.st.grads_persist || microbatches > 1;
  s.grads_at_start = grads_held ? s.st.grads : 0;
  s.root_grad = s.st.root_grad;
  if (t.accumulate_unsharded && microbatches > 1 && p.zero >= 2) {
    // FSDP's no_sync: until the last micro-batch reduces them, the gradients are the whole
    // stage's, in the dtype backward computes them in (the gathered weights'; a fine-tune's
    // flat-parameter gradients as FineTuneStates counts them).
    const double unsharded =
        t.finetune != FineTune::kFull
            ? static_cast<double>(s.st.unsharded_grads)
            : static_cast<double>(s.sp.total) *
                  static_cast<double>(MakeStateInputs(t, p, s.sp).compute);
    s.grads_at_start = std::max(s.grads_at_start, CeilBytes(unsharded));
    s.root_grad = 0;
  }
  const bool recompute_layers = RecomputesLayerForward(t.recompute);
  s.cache_after_forward = recompute_layers ? 0 : s.st.autocast_cache;
  if (recompute_layers && k.every > 1) {
    // Layers run with grad keep their casts through backward; the checkpointed ones do not.
    s.cache_after_forward =
        s.st.autocast_cache > 0
            ? 2 * (l.n_dense_plain * k.dense_params.matmul + l.n_moe_plain * k.moe_params.matmul)
            : 0;
  }
  // (TE's FP8 linears are not cast by autocast: only the output layer is, on the last stage.)
  s.layer_casts = recompute_layers && s.st.autocast_cache > 0 && !t.te_fp8();
  s.grad_per_param = grads_held || s.sp.total == 0
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
  b.logits = out.logits_held + std::max(out.loss_saved + out.loss_forward_transient,
                                        out.head_forward_transient);
  b.temporary = s.st.buckets + s.st.gather;
  b.overhead = k.workspace;
  Phase forward{"forward", b};
  b.activations = s.act_all + out.saved + s.cache_after_forward;
  b.logits = s.logits_in_backward + std::max(out.loss_saved + out.loss_backward_transient,
                                              out.head_backward_transient);
  return {forward, Phase{last_stage ? "loss" : "forward", b}};
}

// Backward, layer by layer from the last: each step of a layer's backward holds its gradient
// buffers, then frees what it saved and adds its parameter gradients. Keeps the largest state.
class BackwardWalk {
 public:
  BackwardWalk(const StageState& s, const LayerKinds& k)
      : fixed_temp_(s.st.buckets + s.st.gather + s.st.gather_grad + s.root_grad + k.stream_grad),
        grad_per_param_(s.grad_per_param),
        layer_casts_(s.layer_casts) {
    base_.weights = s.st.weights;
    base_.optimizer = s.st.optimizer;
    base_.logits = s.logits_in_backward;
    base_.overhead = k.workspace;
  }

  int64_t GradBytes(int64_t params) const {
    return static_cast<int64_t>(std::ceil(static_cast<double>(params) * grad_per_param_));
  }

  // Walks one layer's backward from (grads, act), leaving the state after it there; a
  // recomputed layer under autocast casts its weights again.
  void Layer(const LayerActivations& la, const RankLayer& rl, int64_t& grads, int64_t& act) {
    int64_t casts = layer_casts_ && la.recomputed > 0 ? 2 * rl.matmul : 0;
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
  // Under FSDP's root unit the head's gradient is unsharded until the end of backward (in
  // root_grad), not yet the shard.
  const int64_t start_grads =
      s.grads_at_start + (s.root_grad > 0 ? 0 : walk.GradBytes(head_params));
  const int64_t start_act = s.act_all + s.cache_after_forward;
  int64_t g = start_grads, a = start_act;
  const bool uniform = k.every == 1 && s.stash == 0 && (l.n_moe == 0 || l.n_dense == 0);
  if (uniform) {
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
    // Layers of different kinds (dense and MoE, checkpointed and not): each walked in turn.
    // With offloaded activations the last layer runs on the stash, which is dropped once its
    // first node is done, and every other layer's saved tensors come back for its backward.
    const int64_t last = l.first + l.n_layers - 1;
    for (int64_t i = last; i >= l.first; --i) {
      const LayerActivations& la = k.Act(m, i);
      if (s.stash > 0 && i != last) a += la.saved;
      walk.Layer(la, k.Params(m, i), g, a);
      if (s.stash > 0 && i == last) a -= std::max<int64_t>(0, s.stash - la.saved);
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
  b.temporary = (s.st.buckets_at_step ? s.st.buckets : 0) + s.st.optimizer_temp;
  b.overhead = k.workspace;
  return {"optimizer", b};
}

int64_t RoundUp2Mib(int64_t bytes) { return (bytes + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB); }

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
  se.peak_reserved_bytes = RoundUp2Mib(reserved);
  int64_t groups = (p.dp > 1) + (p.tp > 1) + (p.pp > 1) + (p.cp > 1) + (p.ep > 1);
  se.device_bytes = se.peak_reserved_bytes + t.cuda_context_bytes + groups * kNcclPerGroup;
}

// FSDP1 wrapping a model held in host memory: the allocator keeps what the initialisation
// cached (memory/fsdp_init.h). The step's compute-stream allocations — its peak less the states
// the initialisation left and the gathered units — may reuse the free part of that cache
// (counted whole: the bound errs low where blocks are too small), while the gathered units come
// from FSDP1's unshard stream, whose cached blocks serve that stream alone. The reserved reading
// is at least the initialisation's reserve plus what the step needs beyond its free blocks.
void AddFsdpInitReserve(const ModelSpec& m, const TrainingSpec& t, const ParallelPlan& p,
                        const StageState& s, StageEstimate& se) {
  // ValidateLayout has refused it outside FSDP's ZeRO-2/3 over data-parallel ranks.
  if (t.fsdp_init == FsdpInit::kNone || t.device != DeviceKind::kCuda) return;
  const FsdpInitReplay init = FsdpInitOf(m, t, p);
  se.init_reserved_bytes = init.reserved;
  se.init_free_bytes = init.cached_free;
  const int64_t step = std::max<int64_t>(0, se.peak_bytes - init.live - s.st.gather);
  // The step's own excess (AddStepReserve) sits in blocks too large for the init's fragments.
  const int64_t bound = init.reserved + std::max<int64_t>(0, step - init.cached_free) +
                        RoundUp2Mib(s.st.gather) + se.step_excess_bytes;
  if (bound > se.peak_reserved_bytes) {
    se.device_bytes += bound - se.peak_reserved_bytes;
    se.peak_reserved_bytes = bound;
  }
}

// The parameter gradients a step creates and frees, where they come and go each step: whole
// (not sharded) gradients that zero_grad(set_to_none=True) frees after the optimizer step (HF
// Trainer and plain PyTorch loops on one GPU or DDP; `per_param` is 0 where they persist or
// accumulate over micro-batches), for a full fine-tune (memory/step_events.h, LayerStepGrads).
struct StepGrads {
  double per_param = 0;
  BackwardGrads Of(const ModelSpec& m, const RankLayer& rl, const LayerActivations& a) const {
    const double heads = static_cast<double>(m.num_heads);
    return LayerStepGrads(a,
                          {rl.mlp, rl.attn_qkv, rl.attn_out, rl.norm, m.gated_mlp ? 3 : 2,
                           heads / (heads + 2.0 * static_cast<double>(m.num_kv_heads))},
                          per_param);
  }
};

StepGrads StepGradsOf(const TrainingSpec& t, const ParallelPlan& p, const StageState& s,
                      int64_t microbatches) {
  StepGrads g;
  if (t.finetune == FineTune::kFull && p.zero == 0 && microbatches == 1 &&
      t.framework == Framework::kHf) {
    g.per_param = s.grad_per_param;
  }
  return g;
}

// One micro-batch's allocations and frees at `length` tokens, in the step's order, from MARP's
// account at that length (memory/step_events.h, BuildStepEvents).
std::vector<StepEvent> StepEventsAt(const ModelSpec& m, const TrainingSpec& t,
                                    const ParallelPlan& p, const StageLayers& l, int64_t length,
                                    const StepGrads& grads, const StageState& s) {
  TrainingSpec at = t;
  at.seq_len = length;
  at.lengths = LengthSpread{};
  const LayerKinds k = MakeLayerKinds(m, at, p);
  const ActivationShape sh = MakeActivationShape(at, p);
  StepShape shape;
  shape.stream = sh.b * sh.s * m.hidden_size * sh.e;
  for (int64_t i = l.first; i < l.first + l.n_layers; ++i) {
    const LayerActivations& a = k.Act(m, i);
    shape.layers.push_back({&a, grads.Of(m, k.Params(m, i), a)});
  }
  if (l.last_stage) {
    shape.output = &k.output_act;
    shape.logits_freed = at.logits_freed_before_backward();
  }
  if (grads.per_param > 0) {
    const auto bytes = [&](int64_t params) {
      return static_cast<int64_t>(static_cast<double>(params) * grads.per_param);
    };
    const bool adam = t.optimizer == OptimizerKind::kAdamW || t.optimizer == OptimizerKind::kAdam;
    AddOutsideGrads(shape, bytes(s.sp.head), bytes(s.sp.outside_layers - s.sp.head),
                    !adam                  ? AdamTemps::kNone
                    : t.foreach_optimizer ? AdamTemps::kForeach
                                          : AdamTemps::kOneAtATime);
  }
  return BuildStepEvents(shape);
}

// Where the step asks for blocks its own cached ones cannot serve (the sliced HF loss chains:
// memory/step_events.h), a fixed-length step replayed through the allocator model reserves
// more than it ever holds at once; that excess, over the steps it takes to settle (the second
// step meets the blocks the first one's layers split), sits above the allocated peak. The
// step's states and the other stream's gathered units are not replayed: the bound takes the
// allocated peak as they are plus the replay's excess. Returns the replay's events (empty when
// not replayed) and its reserve, for CapStepReserve.
constexpr int kSettleSteps = 3;
std::pair<std::vector<StepEvent>, int64_t> AddStepReserve(const ModelSpec& m,
                                                          const TrainingSpec& t,
                                                          const ParallelPlan& p,
                                                          const LayerKinds& k,
                                                          const StageLayers& l,
                                                          const StageState& s,
                                                          const StepGrads& grads,
                                                          StageEstimate& se) {
  if (t.device != DeviceKind::kCuda || !l.last_stage || k.output_act.chain == HfLoss::kPadded) {
    return {};
  }
  std::vector<StepEvent> events = StepEventsAt(m, t, p, l, t.seq_len, grads, s);
  const StepReplay r = ReplaySteps(events, kSettleSteps);
  se.step_excess_bytes = std::max<int64_t>(0, r.reserved - r.peak_allocated);
  const int64_t bound = RoundUp2Mib(se.peak_bytes + se.step_excess_bytes);
  if (bound > se.peak_reserved_bytes) {
    se.device_bytes += bound - se.peak_reserved_bytes;
    se.peak_reserved_bytes = bound;
  }
  return {std::move(events), r.reserved};
}

// On a GPU of known memory the allocator does not let its cache pass it: before it reports an
// out-of-memory error it returns its free segments and retries. The step is replayed again
// within what the GPU leaves it (its memory less the context, the communicators' buffers and
// the reserve not replayed); where that replay is served, the reading is its reserve. Where it
// is not, the step does not fit and the uncapped reading stands.
void CapStepReserve(const TrainingSpec& t, const std::vector<StepEvent>& events,
                    int64_t replayed, StageEstimate& se) {
  // A reading within the GPU's memory never met the limit: the capped replay would be the same.
  if (events.empty() || t.device_memory_bytes <= 0 || se.device_bytes <= t.device_memory_bytes) {
    return;
  }
  const int64_t limit = t.device_memory_bytes - se.device_bytes + replayed;
  if (limit <= 0) return;
  const StepReplay r = ReplaySteps(events, kSettleSteps, limit);
  if (r.out_of_memory || r.reserved >= replayed) return;
  // Never below the allocated peak: the reserved and device readings drop by the same bytes.
  const int64_t cut = std::min(replayed - r.reserved, se.peak_reserved_bytes - se.peak_bytes);
  se.peak_reserved_bytes -= cut;
  se.device_bytes -= cut;
  se.step_excess_bytes = std::max<int64_t>(0, se.step_excess_bytes - cut);
}

// Batches of varying length: what an epoch's caching allocator reserves above the fixed-length
// reading (memory/variable_lengths.h). Pipelines' other micro-batches in flight and offloaded
// activations are not replayed.
void AddLengthReserve(const ModelSpec& m, const TrainingSpec& t, const ParallelPlan& p,
                      const StageLayers& l, const StageState& s, const StepGrads& grads,
                      StageEstimate& se) {
  if (!t.lengths.active() || t.device != DeviceKind::kCuda) return;
  const VariableLengthReserve v = ReserveOverOrders(
      [&](int64_t length) { return StepEventsAt(m, t, p, l, length, grads, s); }, t.lengths,
      t.seq_len, t.micro_batch);
  se.length_reserve_bytes = v.median;
  se.length_reserve_low = v.low;
  se.length_reserve_high = v.high;
  se.length_batches = v.batches;
  se.length_replayed = v.replayed;
  se.length_orders = v.orders;
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
  se.host_bytes = s.st.host + s.offloaded;  // offloaded activations sit in pinned host memory
  se.pageable_bytes = std::min(s.st.pageable, peak->b.optimizer);
  AddDeviceBytes(t, p, se);
  const StepGrads grads = StepGradsOf(t, p, s, microbatches);
  const auto [step_events, replayed] = AddStepReserve(m, t, p, k, l, s, grads, se);
  AddFsdpInitReserve(m, t, p, s, se);
  CapStepReserve(t, step_events, replayed, se);
  AddLengthReserve(m, t, p, l, s, grads, se);
  return se;
}

// The job's figures are its worst stage's.
void SummarizeStages(MemoryEstimate& est) {
  for (size_t i = 0; i < est.stages.size(); ++i) {
    const auto& s = est.stages[i];
    est.peak_bytes = std::max(est.peak_bytes, s.peak_bytes);
    est.peak_reserved_bytes = std::max(est.peak_reserved_bytes, s.peak_reserved_bytes);
    if (s.length_batches > 0) {
      est.length_reserved_bytes =
          std::max(est.length_reserved_bytes, s.peak_reserved_bytes + s.length_reserve_bytes);
      est.length_device_bytes =
          std::max(est.length_device_bytes, s.device_bytes + s.length_reserve_bytes);
    }
    est.host_bytes = std::max(est.host_bytes, s.host_bytes);
    if (s.device_bytes > est.device_bytes) {
      est.device_bytes = s.device_bytes;
      est.worst_stage = static_cast<int64_t>(i);
    }
    est.resident_bytes = std::max(est.resident_bytes, s.device_bytes - s.pageable_bytes);
  }
}

}  // namespace

void CapLengthReadings(MemoryEstimate& est, int64_t gpu_memory_bytes) {
  if (est.length_device_bytes <= gpu_memory_bytes) return;
  const int64_t over = est.length_device_bytes - gpu_memory_bytes;
  est.length_device_bytes = gpu_memory_bytes;
  est.length_reserved_bytes =
      std::max(est.peak_reserved_bytes, est.length_reserved_bytes - over);
}

Result<MemoryEstimate> PredictMemory(const ModelSpec& m, const TrainingSpec& t,
                                     const ParallelPlan& p, StageDetail detail) {
  RETURN_IF_ERROR(ValidateLayout(m, t, p));
  if (const LoraSpec run = LoraAsRun(t, p); run.upcast_rest != t.lora.upcast_rest) {
    TrainingSpec as_run = t;  // sharded QLoRA keeps one dtype (ShardedQlora)
    as_run.lora = run;
    return PredictMemory(m, as_run, p, detail);
  }
  const ParamCounts counts = TrainedParamCounts(m, t);
  const LayerKinds kinds = MakeLayerKinds(m, t, p);
  const int64_t microbatches = MicroBatchesPerStep(t, p);
  MemoryEstimate est;
  est.params = counts.total;

  // Layers per stage: as even as possible, earlier stages take the remainder (or the plan's
  // uneven split).
  // Middle stages after the second never exceed it, unless an irregular MoE layer pattern puts
  // more experts on a later stage, or an uneven split more layers.
  bool regular = (!kinds.has_moe || (m.moe.layer_freq == 1 && m.moe.dense_layers.empty())) &&
                 p.stage_layers.empty();
  bool worst_only = detail == StageDetail::kWorst && regular && kinds.every == 1;
  est.stages.reserve(static_cast<size_t>(worst_only ? std::min<int64_t>(3, p.pp) : p.pp));
  int64_t first = 0;
  for (int64_t stage = 0; stage < p.pp; ++stage) {
    const int64_t n_layers = p.LayersOfStage(stage, m.num_layers);
    if (!worst_only || stage <= 1 || stage == p.pp - 1) {
      StageLayers layers = MakeStageLayers(m, t, p, kinds.has_moe, stage, first, n_layers);
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
