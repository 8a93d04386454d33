#include "memory/activations.h"

#include <algorithm>
#include <utility>

#include "memory/activation_rules.h"
#include "memory/finetune.h"

namespace frenzy {
namespace {

using activation_rules::AdapterBytes;
using activation_rules::AdapterMaskBytes;
using activation_rules::EagerNormSaved;
using activation_rules::IsAutocast;
using activation_rules::kF32;
using activation_rules::MaskBytes;
using activation_rules::UsesMegatronKernels;

// Bytes per element of what a linear layer keeps of its input for the weight gradient: the
// activation dtype, or one byte for Transformer Engine's FP8 linears (TE's Linear saves its
// FP8-cast input; MXFP8's per-32 scales add 1/32, rounded away). torchao's Float8Linear keeps
// the high-precision input and casts it again in backward.
int64_t LinearInputBytes(const TrainingSpec& t, int64_t e) { return t.te_fp8() ? 1 : e; }

// Per-rank widths.
struct Widths {
  int64_t h, q, kv, f, heads, d;
};

Widths LocalWidths(const ModelSpec& m, const ParallelPlan& p, int64_t ffn) {
  Widths w;
  w.h = m.hidden_size;
  w.d = m.head_dim;
  w.heads = m.num_heads / p.tp;
  w.q = w.heads * w.d;
  // With tp above the kv-head count each rank keeps one replicated kv head (Megatron, vLLM).
  w.kv = std::max<int64_t>(1, m.num_kv_heads / p.tp) * w.d;
  w.f = ffn / p.tp;
  return w;
}

// Active dropout probability (0 when dropout is off for this job).
double HiddenDropout(const ModelSpec& m, const TrainingSpec& t) {
  return t.dropout ? m.hidden_dropout : 0.0;
}
double AttnDropout(const ModelSpec& m, const TrainingSpec& t) {
  return t.dropout ? m.attention_dropout : 0.0;
}

// Bytes a norm keeps when nothing else keeps its input and its output goes to an op that does
// not keep it (the rotation after a q/k norm, the residual add after a norm on a sublayer's
// output): EagerNormSaved with its input and without its output, over `rows` of `width`.
int64_t UnkeptNormSaved(const ModelSpec& m, int64_t rows, int64_t width, int64_t e,
                        bool mean_keeps_input) {
  return EagerNormSaved(m, rows, e, /*include_input=*/true, mean_keeps_input, width) -
         rows * width * e;
}

// Transient bytes of a norm's backward (gradients of x_norm, x^2, x in fp32 with the input
// gradient being accumulated; in the activation dtype for litgpt's RMSNorm).
int64_t EagerNormBackward(const ModelSpec& m, int64_t tokens, int64_t e, bool in_dtype) {
  int64_t th = tokens * m.hidden_size;
  if (m.norm == NormKind::kLayerNorm) return 2 * th * e;
  return 3 * th * (in_dtype ? e : kF32);
}

// The sizes one eager layer's account works with, on one rank and one micro-batch.
struct EagerShape {
  ActivationShape sh;
  int64_t tokens = 0;       // b x s
  int64_t e = 2;            // bytes per activation element
  int64_t norm_tokens = 0;  // tokens of the norm/dropout regions (split by tp under SP)
  int64_t att = 0;          // elements of one s x s score tensor set
  Widths w;
  // Under torch.autocast (the HF Trainer's mixed precision) the weights and the residual
  // stream stay fp32: norms run in fp32 and every Linear keeps its own 16-bit cast of its
  // input (activations are not cached, only weights).
  bool autocast = false;
  // Bytes per element a linear layer keeps of its input (1 for TE's FP8 linears, which keep
  // their own FP8 cast each; else the activation dtype, one tensor shared by its readers).
  int64_t le = 2;
  bool litgpt = false;  // litgpt's model code (TrainingSpec::litgpt_model)
  bool norm_in_dtype = false;  // its 2023 RMSNorm, in the activation dtype
  bool mean_keeps = false;     // PyTorch < 2.2: an RMSNorm's mean keeps x^2
};

EagerShape MakeEagerShape(const ModelSpec& m, const TrainingSpec& t, const ParallelPlan& p,
                          bool moe_layer) {
  EagerShape x;
  x.sh = MakeActivationShape(t, p);
  x.tokens = x.sh.b * x.sh.s;
  x.e = x.sh.e;
  x.w = LocalWidths(m, p, moe_layer ? m.moe.ffn_hidden_size : m.ffn_hidden_size);
  x.norm_tokens = x.sh.sp ? x.tokens / x.sh.tp : x.tokens;
  x.att = x.sh.b * x.w.heads * x.sh.s * x.sh.s;
  x.autocast = IsAutocast(t);
  x.le = LinearInputBytes(t, x.e);
  x.litgpt = t.litgpt_model;
  x.norm_in_dtype = t.litgpt_model && t.litgpt_rmsnorm_in_dtype;
  x.mean_keeps = t.mean_keeps_input;
  return x;
}

struct EagerNorms {
  int64_t norm1 = 0;  // the attention's norm (or the layer input, without norms)
  int64_t norm2 = 0;  // the MLP's norm
  // Norms on the attention's and the MLP's outputs (Gemma-2/3, GLM-4, OLMo-2): their backward
  // runs first in their sublayer's.
  int64_t post1 = 0, post2 = 0;
};

// The linear layers that read the attention's and the MLP's norm output: under autocast each
// keeps its own 16-bit cast of it. An MoE layer's norm feeds the router (the experts read
// gathered copies).
struct NormConsumers {
  int64_t attn = 1, mlp = 1;
};
NormConsumers NormConsumersOf(const ModelSpec& m, bool moe_layer, bool fused_qkv) {
  return {fused_qkv || m.fused_qkv() ? 1 : 3, moe_layer ? 1 : m.gated_mlp ? 2 : 1};
}

EagerNorms EagerNormsSaved(const ModelSpec& m, const EagerShape& x, bool moe_layer) {
  auto norm_saved = [&](bool include_input, int64_t consumers) {
    if (!x.autocast) {
      return EagerNormSaved(m, x.norm_tokens, x.e, include_input, x.mean_keeps, 0,
                            x.norm_in_dtype);
    }
    int64_t th = x.norm_tokens * x.w.h;
    int64_t kept = include_input ? th * kF32 : 0;
    if (m.norm == NormKind::kLayerNorm) {
      kept += 2 * x.norm_tokens * kF32;  // mean, rstd
    } else {
      kept += (x.mean_keeps ? th * kF32 : 0) /*x^2*/ + x.norm_tokens * kF32 /*rsqrt*/ +
              th * kF32 /*x_norm*/;
    }
    return kept + consumers * th * x.le;  // the consumers' 16-bit (or FP8) casts of the output
  };
  // Outside autocast the norm's output is one tensor its readers share, unless TE's FP8
  // linears each keep an FP8 cast of their own instead.
  auto plain_norm_saved = [&](bool include_input, int64_t consumers) {
    int64_t kept = norm_saved(include_input, consumers);
    if (x.autocast || x.le == x.e) return kept;
    const int64_t th = x.norm_tokens * x.w.h;
    return kept - th * x.e + consumers * th * x.le;
  };
  const NormConsumers consumers = NormConsumersOf(m, moe_layer, x.litgpt);
  const int64_t attn_consumers = consumers.attn, mlp_consumers = consumers.mlp;
  // The layer input is kept by the first norm (pre-norm) or by the residual's norm.
  EagerNorms n;
  const int64_t th = x.norm_tokens * x.w.h;
  if (m.norm_placement == NormPlacement::kPostSublayer) {
    // x + Norm(Sublayer(x)) (OLMo-2): the projections keep the stream itself (under autocast,
    // their 16-bit casts), and each norm works on a sublayer's output.
    auto input = [&](int64_t consumers) {
      if (x.le != x.e) return consumers * th * x.le;  // TE's FP8 casts, one per projection
      return x.autocast ? consumers * th * x.e : th * x.e;
    };
    n.norm1 = input(attn_consumers);
    n.norm2 = input(mlp_consumers);
    n.post1 = n.post2 = UnkeptNormSaved(m, x.norm_tokens, x.w.h, x.e, x.mean_keeps);
    return n;
  }
  n.norm1 = plain_norm_saved(true, attn_consumers);
  if (m.norms_per_layer >= 2) n.norm2 = plain_norm_saved(!m.parallel_attn_mlp, mlp_consumers);
  if (m.norms_per_layer == 0) n.norm1 = x.norm_tokens * x.w.h * (x.autocast ? kF32 : x.e);
  if (m.norms_per_layer == 4) {
    // Gemma-2/3, GLM-4: a norm on each sublayer's output too, before the residual add.
    n.post1 = n.post2 = UnkeptNormSaved(m, x.norm_tokens, x.w.h, x.e, x.mean_keeps);
  }
  return n;
}

struct EagerCore {
  int64_t saved = 0;     // what the attention core (scores to output) keeps
  int64_t backward = 0;  // its backward's transient gradients
};

EagerCore EagerCoreSaved(const ModelSpec& m, const TrainingSpec& t, const EagerShape& x) {
  const int64_t att = x.att, e = x.e;
  EagerCore c;
  if (t.flash_attn) {
    // Fused attention keeps its output and the per-row log-sum-exp (fp32).
    c.saved = x.tokens * x.w.q * e + x.sh.b * x.w.heads * x.sh.s * kF32;
    c.backward = 3 * x.tokens * x.w.q * e;  // dq, dk, dv
    return c;
  }
  // Eager: softmax(dtype=float32) keeps its fp32 output; the cast back to the activation dtype
  // is kept by the next op unless dropout replaces it (dropout keeps its mask and hands the
  // masked copy to the matmul with v).
  double attn_p = AttnDropout(m, t);
  if (m.attention_sinks && !x.autocast) {
    // GPT-OSS: the sink column joins the scores (cat), the row max is subtracted (max keeps
    // its int64 indices) and softmax runs in the scores' dtype, keeping its output, whose view
    // without the sink column is what the matmul with v keeps.
    const int64_t rows = x.sh.b * x.w.heads * x.sh.s;
    c.saved = (att + rows) * e + rows * 8 + (attn_p > 0 ? att * (x.sh.mask + e) : 0);
    c.backward = att * (kF32 + e);
    return c;
  }
  c.saved = att * kF32;
  // Soft-capping (Gemma-2: cap x tanh(scores / cap)) keeps tanh's output.
  if (m.attn_softcap > 0) c.saved += att * e;
  if (x.autocast) {
    // The scores come out fp32 (the fp32 mask promotes them); the matmul with v keeps its
    // own 16-bit cast of the (dropped-out) probabilities.
    // Rotation by fp32 cos/sin promotes q to fp32, so the softmax output stays fp32 through
    // dropout; without rotation it is cast back to the 16-bit q's dtype first.
    int64_t dropout_input = m.position == PositionKind::kRotary ? kF32 : e;
    c.saved += att * e + (attn_p > 0 ? att * MaskBytes(t, dropout_input) : 0);
  } else if (attn_p > 0) {
    c.saved += att * x.sh.mask + att * e;
  } else if (e != kF32) {
    c.saved += att * e;
  }
  // Backward, two score-sized gradients at a time: (dropout) output and probabilities, then
  // the fp32 probabilities' gradient with the scores' gradient (in the activation dtype),
  // then that with the scaling's copy: (4 + e) bytes per score at most.
  c.backward = att * (kF32 + e);
  return c;
}

struct EagerAttention {
  int64_t qkv = 0;  // what the core keeps of q, k and v
  EagerCore core;
  int64_t attn_out = 0;  // the attention output made contiguous, kept by o_proj
};

EagerAttention EagerAttentionSaved(const ModelSpec& m, const TrainingSpec& t, const EagerShape& x) {
  const int64_t tokens = x.tokens, e = x.e;
  const Widths& w = x.w;
  bool gqa = w.kv < w.q;
  EagerAttention a;
  // What the attention core keeps of q, k and v. Rotation makes new q and k (cos/sin need no
  // gradient, so the pre-rotation tensors are not kept); repeat_kv materialises k and v at the
  // full head count for GQA; a transposed view (v, or q/k without rotation) is copied when the
  // batched matmul folds its batch dimensions, and the copy is what is kept. So the fused
  // projection output itself is never kept.
  int64_t kv_kept = gqa ? w.q : w.kv;
  a.qkv = tokens * (w.q + 2 * kv_kept) * e;
  if (m.qk_norm != QkNorm::kNone) {
    // RMSNorms on the projected queries and keys, before rotation (which keeps neither their
    // inputs nor their outputs): per head (rows = tokens x heads) or over the whole width.
    if (m.qk_norm == QkNorm::kPerHead) {
      const int64_t kv_heads = w.kv / std::max<int64_t>(1, w.d);
      a.qkv += UnkeptNormSaved(m, tokens * w.heads, w.d, e, x.mean_keeps) +
               UnkeptNormSaved(m, tokens * kv_heads, w.d, e, x.mean_keeps);
    } else {
      a.qkv += UnkeptNormSaved(m, tokens, w.q, e, x.mean_keeps) +
               UnkeptNormSaved(m, tokens, w.kv, e, x.mean_keeps);
    }
  }
  a.core = EagerCoreSaved(m, t, x);
  // Fused q/k/v projections whose q and k are rotated (new tensors) while v stays a view
  // (GPT-NeoX, Phi-3, Falcon; litgpt's for every model).
  const bool selective = t.recompute == Recompute::kSelective;
  const bool fused_view_v = (selective || t.flash_attn) && !gqa &&
                            m.position == PositionKind::kRotary && (x.litgpt || m.fused_qkv());
  // A core that keeps its inputs themselves keeps all of the fused output alive through v's
  // view, instead of the folded copy of v that the eager matmul keeps: a checkpoint of the core,
  // and the fused kernels (SDPA's flash and memory-efficient kernels, flash-attn's
  // flash_attn_func), which save q, k and v as they are handed over — HF's GPT-NeoX, Phi-3 and
  // Falcon pass v as a view of the projection (transformers' sdpa_attention_forward makes no
  // copy), and so does litgpt. Under GQA litgpt expands k and v and reshapes them: copies, and
  // the projection output is not kept.
  if (fused_view_v) a.qkv += tokens * (w.q + w.kv) * e;
  if (selective && !t.flash_attn) {
    // The core is recomputed in backward: its saved tensors (and the folded copy of a
    // transposed v) come back before its gradients.
    int64_t copies = gqa ? 0 : tokens * w.kv * e;
    if (m.position != PositionKind::kRotary) copies += 2 * tokens * w.q * e;  // q and k too
    a.core.backward += a.core.saved + copies;
  }
  a.attn_out = tokens * w.q * x.le;
  if (m.mla.enabled()) {
    // MLA (transformers' DeepseekV3Attention): the core keeps q and k of nope + rope (cat
    // makes new tensors) and a copy of v (v_head_dim, a view of kv_b's output); o_proj keeps
    // heads x v_head_dim. The latents' RMSNorms keep what a norm keeps, the query latent its
    // input too (q_a's output, nothing else holds it), the kv latent in fp32 the whole
    // kv_a output (its input is a view of it); both outputs are kept by the up-projections.
    const MlaSpec& l = m.mla;
    const int64_t v = w.heads * l.v_head_dim;
    a.qkv = tokens * (2 * w.q + v) * e;
    if (l.q_lora_rank > 0) {
      a.qkv += EagerNormSaved(m, tokens, e, true, x.mean_keeps, l.q_lora_rank);
    }
    a.qkv += EagerNormSaved(m, tokens, e, false, x.mean_keeps, l.kv_lora_rank) +
             (e == kF32 ? tokens * (l.kv_lora_rank + l.qk_rope_head_dim) * kF32 : 0);
    a.attn_out = tokens * v * x.le;
  }
  return a;
}

struct EagerMlp {
  int64_t saved = 0;
  int64_t backward = 0;  // transient gradients at the MLP backward's peak
};

EagerMlp EagerMlpSaved(const ModelSpec& m, const ParallelPlan& p, const EagerShape& x,
                       bool moe_layer) {
  // GELU/SiLU keep their input, ReLU its output (which fc2 also keeps).
  int64_t tf = x.tokens * x.w.f * x.e;
  EagerMlp mlp;
  if (m.gated_mlp) {
    // gate output, act(gate), up output, product; backward holds the product's gradient and
    // both factors' gradients once the product itself is freed.
    mlp.saved = 4 * tf;
    mlp.backward = 2 * tf;
    // TE's FP8 down projection keeps its own FP8 cast of the product instead.
    if (x.le != x.e && !moe_layer) mlp.saved += x.tokens * x.w.f * x.le - tf;
  } else {
    // Backward holds the gradients of the activation's output and input together; with GELU
    // the output (kept by fc2) is freed by then, with ReLU it is the tensor ReLU itself keeps.
    bool relu = m.activation == Activation::kRelu;
    mlp.saved = (relu ? 1 : 2) * tf;
    mlp.backward = relu ? 2 * tf : tf;
    // TE's FP8 fc2 keeps an FP8 cast of the activation's output (ReLU keeps its own output).
    if (x.le != x.e && !moe_layer) mlp.saved += x.tokens * x.w.f * x.le - (relu ? 0 : tf);
  }
  if (moe_layer) {
    // transformers' eager sparse block (Mixtral, Qwen-MoE; DeepSeek as below): each token
    // visits top-k experts; per routed token the expert keeps its gathered input, its MLP tensors, its
    // output (kept by the multiply with the routing weight) and the weighted output
    // (index_add_ keeps its source), the weight itself and the token's index; per token the
    // router's fp32 softmax and the top-k indices.
    // Under autocast the stream is fp32: each expert matrix that reads the gathered input keeps
    // its own 16-bit cast (nothing keeps the fp32 gather) and the weighted output is fp32.
    const int64_t k = m.moe.experts_per_token;
    const int64_t routed = x.tokens * k;
    const int64_t h = x.w.h;
    if (m.moe.stacked_experts) {
      // GPT-OSS's experts (GptOssExperts, looped): the clamped SwiGLU keeps seven
      // intermediate-wide tensors per routed token (both clamps' inputs, gate x alpha, the
      // sigmoid, glu, up + 1 and their product), plus the gathered input, the expert output
      // and the weighted output; the router keeps the top-k indices and their softmax only.
      mlp.saved = routed * (7 * x.w.f * x.e + 3 * h * x.e + x.e + 8) + routed * (x.e + 8);
      // Under autocast each expert's matmuls keep 16-bit casts of its weight slices (only
      // whole parameters are cached); the router's and the stream's tensors stay fp32.
      if (x.autocast) {
        mlp.saved += m.moe.num_experts / p.ep * 3 * h * x.w.f * x.e +
                     routed * 2 * h * (kF32 - x.e);
      }
      // Its experts are slices of one stacked parameter: each slice's backward allocates a
      // zero-filled gradient of the whole stack to add to the stack's (whole) gradient. (The
      // block input's gradient added no peak of its own in the CPU measurements.)
      const int64_t stack = m.moe.num_experts / p.ep * (3 * h * x.w.f + 2 * x.w.f + h);
      mlp.backward = mlp.backward * k / std::max<int64_t>(1, m.moe.num_experts) + stack * x.e;
      return mlp;
    }
    const int64_t per_routed =
        x.autocast ? h * ((m.gated_mlp ? 2 : 1) * x.e + x.e + kF32) + kF32 + 8
                   : 3 * h * x.e + x.e + 8;
    mlp.saved = mlp.saved * k + routed * per_routed + x.tokens * m.moe.num_experts * kF32 +
                routed * 8;
    if (m.moe.fp32_router && !x.autocast && x.e != kF32) {
      // DeepSeek-V3 (transformers' DeepseekV3MoE, read, not measured): the router runs in
      // fp32 on fp32 copies of its input and weight, and the routed outputs are accumulated
      // in the fp32 routing weights' dtype.
      mlp.saved += routed * h * (kF32 - x.e) + x.tokens * h * kF32 +
                   m.moe.num_experts * h * kF32;
    }
    // Backward runs expert by expert (an even share of the routed tokens each), accumulating
    // the gradient of the block's input.
    mlp.backward = mlp.backward * k / std::max<int64_t>(1, m.moe.num_experts) +
                   x.tokens * h * (x.autocast ? kF32 : x.e);
    if (m.moe.num_shared_experts > 0) {
      int64_t shared = x.tokens * (m.moe.shared_ffn_hidden_size / p.tp) * x.e;
      mlp.saved += (m.gated_mlp ? 4 : 2) * shared;
    }
  }
  return mlp;
}

// Full and per-op recomputation: the layer keeps `stream` (its input) and what the policy
// caches; everything else it saved comes back just before its backward.
void ApplyLayerRecompute(const ModelSpec& m, const TrainingSpec& t, const EagerShape& x,
                         int64_t stream, LayerActivations& out) {
  // The layer is recomputed just before its backward: all it saves comes back at once,
  // with the recomputed output; its input is the checkpoint's own saved tensor (shared).
  int64_t input = (m.norm == NormKind::kRmsNorm && x.e != kF32 && !x.autocast) ? 0 : stream;
  out.recomputed = out.saved - input + stream;
  out.backward.back().frees -= input;
  if (t.recompute == Recompute::kOp) {
    // torchtitan's policy (torchtitan/models/llama/parallelize: _save_list and every other
    // aten.mm) keeps the outputs of the 1st, 3rd, 5th and 7th matmul of a Llama block —
    // q, v, the first MLP matrix and the MLP output — and the attention kernel's output
    // and statistics; recomputation reuses them instead of allocating them again.
    const Widths& w = x.w;
    int64_t cached = x.tokens * x.e * (w.q + w.kv + w.f + w.h) + x.tokens * w.q * x.e +
                     x.sh.b * w.heads * x.sh.s * kF32;
    out.recompute_saved = stream + cached;
    out.recomputed -= cached;
  }
  out.saved = out.recompute_saved;
}

// What a frozen norm does not keep: nothing needs the normalised x for a weight gradient, and
// the frozen linear layers it feeds keep no input. `fed` counts the 16-bit casts that autocast
// made for those layers (QLoRA) or 1 for the output itself (LoRA).
int64_t FrozenNormSaving(const ModelSpec& m, const EagerShape& x, int64_t fed) {
  const int64_t th = x.norm_tokens * x.w.h;
  const int64_t out = fed * th * x.e;
  if (m.norm == NormKind::kLayerNorm) return out;  // native_layer_norm keeps x, mean, rstd
  const int64_t x_norm = x.autocast || m.gemma_norm ? kF32 : x.e;
  return th * x_norm + out;
}

// LoRA and QLoRA (PEFT's lora.Linear over a frozen base): frozen linear layers keep no input,
// frozen norms no normalised x; each targeted layer's adapter keeps its 16-bit cast of the input
// under autocast (a copy per adapter), else its x.to(adapter dtype) (x, or a copy), and A's
// output; lora_dropout keeps a mask. QLoRA's 4-bit layers cast their outputs back to the fp32
// stream, so the MLP's tensors are fp32. An MoE layer's sparse block and norms keep their full
// fine-tuning account plus the adapters' tensors (an over-estimate).
struct LoraExtras {
  int64_t qkv = 0, attn_out = 0, mlp = 0;  // kept for backward, by step
  // Backward: each adapter's input-cast (and dropout) gradients, QLoRA's dequantised weight.
  int64_t qkv_bwd = 0, attn_out_bwd = 0, mlp_bwd = 0;
};

void ApplyLora(const ModelSpec& m, const TrainingSpec& t, const EagerShape& x, bool moe_layer,
               EagerNorms& norms, EagerAttention& attn, EagerMlp& mlp, LoraExtras& ex) {
  const LoraSpec& l = t.lora;
  const bool copies = t.mixed();
  // Without autocast an adapter reads x.to(its dtype): x itself, or (fp32 adapters on a bf16
  // model) a copy its A keeps, whose gradient its backward casts back.
  const bool cast = !copies && l.adapter_bytes != x.e;
  const int64_t T = x.tokens, e = x.e, ea = AdapterBytes(t, e);
  const int64_t drop_mask = AdapterMaskBytes(t, e);
  const bool qlora = t.finetune == FineTune::kQlora;
  constexpr unsigned kQkv = kLoraQ | kLoraK | kLoraV;
  // What a frozen norm no longer feeds: the frozen layers' casts (autocast), or its output.
  const NormConsumers fed =
      x.autocast ? NormConsumersOf(m, moe_layer, x.litgpt) : NormConsumers{};
  // Each adapter keeps its own copy (a cast, or dropout's output), else they share the input.
  const bool own_copy = copies || cast || l.dropout > 0;
  auto adapter_input = [&](int64_t width, bool& shared_kept) {
    const int64_t mask = T * width * drop_mask;
    if (!own_copy && shared_kept) return mask;
    shared_kept = true;
    return mask + T * width * ea;
  };
  bool attn_in = false, mlp_in = false;
  for (const LinearWeight& w : LayerLinearWeights(m, moe_layer, x.litgpt)) {
    const bool attention = (w.target & kLoraAttention) != 0;
    int64_t& bwd = w.target == kLoraO ? ex.attn_out_bwd : attention ? ex.qkv_bwd : ex.mlp_bwd;
    const auto rows_in = static_cast<int64_t>(static_cast<double>(T) * w.rows_per_token);
    // A 4-bit layer's backward: its dequantised weight, and in the fp32 stream the fp32
    // gradient of its input's cast.
    if (qlora) bwd = std::max(bwd, w.in * w.out * e + (x.autocast ? rows_in * w.in * kF32 : 0));
    if ((w.target & l.targets) == 0) continue;
    if (copies || cast) {
      // Dropout's backward holds its output's and its input's gradients (not under QLoRA: a
      // CPU case with dropout and checkpointing fits without); fp32 under autocast.
      const int64_t g = (l.dropout > 0 && !qlora ? 2 : 1) * (copies ? kF32 : ea);
      bwd = std::max(bwd, rows_in * w.in * g + (qlora ? w.in * w.out * e : 0));
    }
    int64_t kept = static_cast<int64_t>(w.count) * rows_in * l.rank * ea;  // A's output
    if (x.litgpt && w.target == kQkv) {
      // litgpt's LoRAQKVLinear: A has rank rows per adapted part (its output is kept by the
      // grouped conv1d that applies B), and when some of q, k and v are not adapted
      // zero_pad's index_copy keeps its source, B's output for the adapted parts, reshaped (a
      // copy) to tokens x their width.
      const unsigned picked = l.targets & kQkv;
      int64_t parts = 0, width = 0;
      for (const auto& [bit, part_width] : {std::pair{kLoraQ, x.w.q}, std::pair{kLoraK, x.w.kv},
                                           std::pair{kLoraV, x.w.kv}}) {
        if ((picked & bit) == 0) continue;
        ++parts;
        width += part_width;
      }
      kept = rows_in * (parts * l.rank + (picked == kQkv ? 0 : width)) * ea;
    }
    if (moe_layer && !attention) {
      ex.mlp += kept;
      continue;
    }
    if (w.target == kLoraO || w.target == kLoraDown) {
      // What the adapter keeps of its input (a cast, dropout's output, or x) replaces the
      // input the full account counts (the frozen layer keeps none), plus dropout's mask; a
      // 4-bit layer keeps that input itself, so the adapter's own copy comes on top (for
      // down_proj over an upcast rest, the MLP's account below counts both).
      kept += T * w.in * drop_mask;
      const bool upcast_down = qlora && l.upcast_rest && w.target == kLoraDown;
      if (own_copy && !copies) kept += T * w.in * (qlora && !upcast_down ? ea : ea - e);
      // Under autocast o_proj's 4-bit layer keeps the attention output, and with dropout on
      // the adapter keeps dropout's 16-bit output beside it (PEFT's bnb layer casts nothing
      // under autocast, so without dropout A keeps the attention output itself).
      if (copies && qlora && w.target == kLoraO && l.dropout > 0) kept += T * w.in * e;
    } else {
      kept += adapter_input(w.in, attention ? attn_in : mlp_in);
    }
    (w.target == kLoraO ? ex.attn_out : attention ? ex.qkv : ex.mlp) += kept;
  }
  // bitsandbytes' MatMul4Bit keeps its input whenever that input needs a gradient
  // (`ctx.tensors = (A, B)`), frozen weight or not: QLoRA's 4-bit layers keep the attention
  // output o_proj reads, and their compute-dtype inputs. In the fp32 stream (upcast rest) each
  // 4-bit layer's x.to(bf16) is a copy of its own — the casts `fed` counts; in a 16-bit stream
  // they all keep the one normalised tensor.
  if (!(l.targets & kLoraO) && !qlora) attn.attn_out = 0;
  if (moe_layer) return;
  // A frozen norm keeps no normalised x; its output (or the casts of it) goes only to frozen
  // layers, which keep none, except QLoRA's 4-bit layers, which keep it (their casts of it in
  // the fp32 stream are counted apart). A parallel block's second norm (GPT-NeoX) reads the
  // input the first one keeps.
  const NormConsumers kept_casts = qlora ? NormConsumers{0, 0} : fed;
  norms.norm1 -= FrozenNormSaving(m, x, kept_casts.attn);
  if (m.norms_per_layer >= 2) norms.norm2 -= FrozenNormSaving(m, x, kept_casts.mlp);
  if (norms.post1 > 0) norms.post1 -= FrozenNormSaving(m, x, 0);
  if (norms.post2 > 0) norms.post2 -= FrozenNormSaving(m, x, 0);
  const int64_t tf = T * x.w.f * e;
  const bool down = (l.targets & kLoraDown) != 0;
  if (qlora && l.upcast_rest) {
    // fp32 gate/up outputs, their activation and product; the 4-bit down_proj's 16-bit copy
    // of that product, and the down adapter's own.
    mlp.saved = (m.gated_mlp ? 3 : 1) * T * x.w.f * kF32 + tf + (down ? tf : 0);
    mlp.backward = (m.gated_mlp ? 2 : 1) * T * x.w.f * kF32;  // their fp32 gradients
  } else if (!down && !qlora && (m.gated_mlp || m.activation != Activation::kRelu)) {
    mlp.saved -= tf;  // the product (or activation output) only the frozen down kept
  }
}

LayerActivations EagerLayer(const ModelSpec& m, const TrainingSpec& t, const ParallelPlan& p,
                            bool moe_layer) {
  const EagerShape x = MakeEagerShape(m, t, p, moe_layer);
  EagerNorms norms = EagerNormsSaved(m, x, moe_layer);
  EagerAttention attn = EagerAttentionSaved(m, t, x);
  EagerMlp mlp = EagerMlpSaved(m, p, x, moe_layer);
  LoraExtras lora;
  if (t.finetune != FineTune::kFull) ApplyLora(m, t, x, moe_layer, norms, attn, mlp, lora);
  const int64_t tokens = x.tokens, e = x.e;
  double hid_p = HiddenDropout(m, t);
  int64_t dropout_mask = hid_p > 0 ? x.norm_tokens * x.w.h * x.sh.mask : 0;
  int64_t norm_bwd = EagerNormBackward(m, x.norm_tokens, e, x.norm_in_dtype);
  int64_t stream = x.norm_tokens * x.w.h * (x.autocast ? kF32 : e);
  int64_t core_backward = attn.core.backward;
  if (m.parallel_attn_mlp) {
    // Parallel blocks: the MLP branch's gradient of the shared input waits in autograd's
    // input buffer while the attention branch runs backward.
    core_backward += stream;
  }
  using P = BackwardStep::Params;
  const bool selective = t.recompute == Recompute::kSelective;
  const int64_t q_bytes = tokens * x.w.q * e;
  LayerActivations out;
  double down_share = m.gated_mlp ? 1.0 / 3.0 : 0.5;
  // Stacked experts (GPT-OSS): the first expert's backward makes the whole stack's gradient.
  if (moe_layer && m.moe.stacked_experts) down_share = 1.0;
  out.backward = {{
      {norms.post2 > 0 ? norm_bwd : 0, norms.post2, P::kNone, 0.0},
      {mlp.backward + lora.mlp_bwd, mlp.saved + lora.mlp + dropout_mask, P::kMlp, down_share},
      {norm_bwd, norms.norm2, P::kNorm, 0.0},
      {norms.post1 > 0 ? norm_bwd : 0, norms.post1, P::kNone, 0.0},
      {q_bytes + lora.attn_out_bwd, attn.attn_out + lora.attn_out + dropout_mask, P::kAttnOut,
       1.0},
      {core_backward, selective ? 0 : attn.core.saved, P::kNone, 0.0},
      {3 * q_bytes + stream + lora.qkv_bwd, attn.qkv + lora.qkv, P::kAttnQkv, 0.0},
      {norm_bwd, norms.norm1, P::kNorm, 0.0},
  }};
  for (const auto& st : out.backward) out.saved += st.frees;
  out.backward[1].piece = tokens * x.w.f * e;
  out.backward[4].piece = q_bytes;
  out.backward[5].piece = t.flash_attn ? q_bytes : x.att * kF32;
  out.backward[6].piece = q_bytes;
  out.recompute_saved = stream;  // the checkpointed layer input
  if (RecomputesLayerForward(t.recompute)) ApplyLayerRecompute(m, t, x, stream, out);
  return out;
}

// Megatron-LM (Korthikanti et al. 2023, §4.1, Table 2), bytes for one layer and micro-batch:
// attention 11sbh + 5as^2b, MLP 19sbh, two LayerNorms 4sbh; with TP t the parts inside the TP
// region divide by t, with SP the rest too. Generalised here to GQA (k/v widths), gated MLPs
// (SwiGLU keeps the 2f-wide fc1 output and the f-wide product), RMSNorm, fused flash attention
// (Transformer Engine keeps q, k, v, output and the fp32 softmax statistics) and dropout off.
LayerActivations MegatronLayer(const ModelSpec& m, const TrainingSpec& t, const ParallelPlan& p,
                               bool moe_layer) {
  ActivationShape sh = MakeActivationShape(t, p);
  int64_t sb = sh.b * sh.s;
  int64_t e = sh.e;
  int64_t ffn = moe_layer ? m.moe.ffn_hidden_size : m.ffn_hidden_size;
  Widths w = LocalWidths(m, p, ffn);
  int64_t outside = sh.sp ? sh.tp : 1;  // divisor of the non-TP regions
  double attn_p = AttnDropout(m, t);
  double hid_p = HiddenDropout(m, t);

  // Transformer Engine's FP8 linears keep their inputs cast to FP8 (one byte; TE's
  // LayerNormLinear keeps the normalised input in FP8 too) where 16-bit ones were kept.
  const int64_t le = LinearInputBytes(t, e);
  int64_t norms = 2 * (sb * w.h * e) / outside;  // 2 x norm input (2sbh)
  int64_t qkv_in = sb * w.h * le / outside;      // QKV input (2sbh)
  int64_t qkv = sb * (w.q + 2 * w.kv) * e;       // Q, K (4sbh) and V (2sbh)
  // qk_layernorm: the norms keep their inputs (the projected q and k) and fp32 statistics.
  if (m.qk_norm != QkNorm::kNone) qkv += sb * (w.q + w.kv) * e + 2 * sb * w.heads * kF32;
  // Norms on the sublayers' outputs keep those outputs.
  if (m.norms_per_layer == 4) norms += 2 * (sb * w.h * e) / outside;
  int64_t att = sh.b * w.heads * sh.s * sh.s;
  int64_t core = 0;
  if (t.flash_attn) {
    core = sb * w.q * e + sh.b * w.heads * sh.s * kF32;
  } else {
    core = 2 * att /*softmax out*/ + (attn_p > 0 ? att * sh.mask + 2 * att : 0);
    core = core * e / 2;  // the paper's figures are for 2-byte activations
  }
  int64_t proj_in = sb * w.q * le;  // linear projection input (2sbh)
  if (m.mla.enabled()) {
    // Megatron-Core's MLASelfAttention: the down-projections are duplicated on every TP rank
    // and read the (sequence-parallel) norm output that qkv_in counts; each latent's RMSNorm
    // keeps its input and fp32 rstd, and its up-projection the gathered normed latent. The
    // core keeps q and k of nope + rope width and v of v_head_dim; its output and the output
    // projection's input are v_head_dim wide.
    const MlaSpec& l = m.mla;
    const int64_t v = w.heads * l.v_head_dim;
    qkv = sb * (2 * w.q + v) * e;
    for (int64_t rank : {l.q_lora_rank, l.kv_lora_rank}) {
      if (rank == 0) continue;
      qkv += (sb * rank * e + sb * kF32) / outside + sb * rank * e;
    }
    if (t.flash_attn) core = sb * v * e + sh.b * w.heads * sh.s * kF32;
    proj_in = sb * v * le;
  }
  int64_t attn_mask = hid_p > 0 ? sb * w.h * sh.mask / outside : 0;
  int64_t mlp_in = sb * w.h * le / outside;            // fc1 input (2sbh)
  int64_t fc1 = sb * w.f * e * (m.gated_mlp ? 2 : 1);  // activation input (8sbh)
  int64_t fc2_in = sb * w.f * le;                      // fc2 input (8sbh)
  int64_t mlp_mask = hid_p > 0 ? sb * w.h * sh.mask / outside : 0;
  int64_t mlp = fc1 + fc2_in;
  // The MLP's backward holds the gradients of fc1's output: of every routed row in an MoE layer.
  int64_t mlp_grad = 2 * sb * w.f * e;
  if (moe_layer) {
    // Per routed row the grouped fc1 keeps its input (the permuted tokens, h wide; its weight
    // gradient needs them) besides fc1's output and fc2's input, ffn / etp wide, and the
    // combine keeps the experts' output (h wide): Megatron-core's unpermute multiplies it by the
    // routing probabilities before scattering it back (moe_utils.unpermute), and that multiply
    // keeps it for the probabilities' gradient. The router keeps its input (mlp_in) and fp32
    // logits and probabilities. A rank computes the rows of its sequence-parallel tokens
    // gathered over the expert-TP ranks (all its tokens' rows when etp = tp, Megatron's
    // default). Expert parallelism moves rows between ranks but not their number (balanced
    // routing).
    const int64_t etp = p.expert_tp();
    const int64_t f = ffn / etp;
    const int64_t tokens = sh.sp ? sb * etp / sh.tp : sb;
    const double rows =
        static_cast<double>(tokens) * t.moe_routed_per_token(m.moe.experts_per_token);
    const int64_t per_row = f * e * (m.gated_mlp ? 2 : 1) + f * le + w.h * le + w.h * e;
    mlp = static_cast<int64_t>(rows * static_cast<double>(per_row)) +
          sb / outside * m.moe.num_experts * kF32 * 2;  // each rank routes its own tokens
    mlp_grad = static_cast<int64_t>(rows * static_cast<double>(2 * f * e));
    if (m.moe.num_shared_experts > 0) {
      int64_t sf = m.moe.shared_ffn_hidden_size / p.tp;
      mlp += sb * sf * e * (m.gated_mlp ? 3 : 2);
    }
  }
  using P = BackwardStep::Params;
  bool selective = t.recompute == Recompute::kSelective;
  int64_t stream = sb * w.h * e / outside;
  LayerActivations out;
  out.backward = {{
      {0, 0, P::kNone, 0.0},  // (norms on the sublayers' outputs: counted in `norms`)
      {mlp_grad, mlp + mlp_mask + mlp_in, P::kMlp, 0.5},
      {2 * stream, norms / 2, P::kNorm, 0.0},
      {0, 0, P::kNone, 0.0},
      {sb * w.q * e, proj_in + attn_mask, P::kAttnOut, 1.0},
      {t.flash_attn ? 3 * sb * w.q * e : 2 * att * e + (selective ? core : 0), selective ? 0 : core,
       P::kNone, 0.0},
      {3 * sb * w.q * e + stream, qkv + qkv_in, P::kAttnQkv, 0.0},
      {2 * stream, norms / 2, P::kNorm, 0.0},
  }};
  for (const auto& st : out.backward) out.saved += st.frees;
  out.backward[1].piece = sb * w.f * e;
  out.backward[4].piece = sb * w.q * e;
  out.backward[5].piece = t.flash_attn ? sb * w.q * e : att * e;
  out.backward[6].piece = sb * w.q * e;
  out.recompute_saved = stream;
  if (t.recompute == Recompute::kFull) {
    out.recomputed = out.saved + stream;
    out.saved = out.recompute_saved;
  }
  return out;
}

}  // namespace

int64_t LayerActivations::backward_transient() const {
  int64_t t = 0;
  for (const auto& st : backward) t = std::max(t, st.transient);
  return t;
}

ActivationShape MakeActivationShape(const TrainingSpec& t, const ParallelPlan& p) {
  ActivationShape sh;
  sh.b = t.micro_batch;
  sh.s = t.seq_len / p.cp;
  sh.tp = p.tp;
  sh.sp = p.sequence_parallel;
  sh.e = t.act_bytes();
  // PyTorch's CUDA dropout keeps a bool mask; the CPU kernel multiplies by a mask tensor of
  // the input's dtype and keeps that.
  sh.mask = t.device == DeviceKind::kCpu ? sh.e : 1;
  return sh;
}

LayerActivations LayerActivationBytes(const ModelSpec& m, const TrainingSpec& t,
                                      const ParallelPlan& p, bool moe_layer) {
  return UsesMegatronKernels(t) ? MegatronLayer(m, t, p, moe_layer)
                                : EagerLayer(m, t, p, moe_layer);
}

int64_t EmbeddingActivationBytes(const ModelSpec& m, const TrainingSpec& t, const ParallelPlan& p) {
  ActivationShape sh = MakeActivationShape(t, p);
  int64_t tokens = sh.b * sh.s;
  int64_t bytes = 0;
  // Embedding dropout (GPT-2's embd_pdrop) keeps its mask.
  int64_t stream_bytes = IsAutocast(t) ? kF32 : sh.e;  // embeddings stay fp32 under autocast
  if (t.dropout && m.hidden_dropout > 0 && m.position == PositionKind::kLearned &&
      !UsesMegatronKernels(t)) {
    bytes += tokens * m.hidden_size * MaskBytes(t, stream_bytes);
  }
  if (m.position == PositionKind::kRotary && !UsesMegatronKernels(t)) {
    // cos and sin tables, computed once per forward and kept by every layer's rotation.
    const int64_t rotated = m.mla.enabled() ? m.mla.qk_rope_head_dim : m.head_dim;
    bytes += 2 * sh.s * rotated * stream_bytes;
  }
  if (t.recompute != Recompute::kNone && !t.flash_attn && !UsesMegatronKernels(t)) {
    // The causal mask is an input of every checkpointed function, so it stays saved.
    bytes += sh.s * sh.s * stream_bytes;
  }
  return bytes;
}

}  // namespace frenzy
