#include "model/param_count.h"

#include <cassert>

namespace frenzy {
namespace {

int64_t Linear(int64_t in, int64_t out, bool bias) { return in * out + (bias ? out : 0); }

int64_t Norm(const ModelSpec& s) { return s.hidden_size * (s.norm_bias ? 2 : 1); }

// A dense MLP of intermediate size `ffn`: up (+gate) and down projections.
int64_t Mlp(const ModelSpec& s, int64_t ffn, bool bias) {
  int64_t up = Linear(s.hidden_size, ffn, bias) * (s.gated_mlp ? 2 : 1);
  return up + Linear(ffn, s.hidden_size, bias);
}

// Attention: fused or separate q/k/v have the same count.
int64_t Attention(const ModelSpec& s) {
  const int64_t h = s.hidden_size;
  int64_t n = 0;
  if (s.mla.enabled()) {
    // DeepSeek-V2/V3 (modeling_deepseek_v2/v3.py): the low-rank projections carry
    // attention_bias, the up-projections none; an RMSNorm on each latent.
    const MlaSpec& m = s.mla;
    const int64_t q_out = s.num_heads * m.qk_head_dim();
    n += m.q_lora_rank > 0
             ? Linear(h, m.q_lora_rank, s.qkv_bias) + m.q_lora_rank + Linear(m.q_lora_rank, q_out, false)
             : Linear(h, q_out, false);
    n += Linear(h, m.kv_lora_rank + m.qk_rope_head_dim, s.qkv_bias) + m.kv_lora_rank +
         Linear(m.kv_lora_rank, s.num_heads * (m.qk_nope_head_dim + m.v_head_dim), false);
    n += Linear(s.num_heads * m.v_head_dim, h, s.attn_out_bias);
  } else {
    n += Linear(h, s.q_size() + 2 * s.kv_size(), s.qkv_bias) +
         Linear(s.q_size(), h, s.attn_out_bias);
  }
  // q/k norms are RMSNorms (weight only) in every model that has them.
  if (s.qk_norm == QkNorm::kPerHead) n += 2 * s.head_dim;
  if (s.qk_norm == QkNorm::kFull) n += s.q_size() + s.kv_size();
  if (s.attention_sinks) n += s.num_heads;
  return n;
}

LayerParams CountLayer(const ModelSpec& s, bool moe_layer) {
  LayerParams p;
  p.attention = Attention(s);
  p.norms = s.norms_per_layer * Norm(s);
  if (moe_layer) {
    p.moe = true;
    const MoeSpec& m = s.moe;
    int64_t expert = Mlp(s, m.ffn_hidden_size, m.expert_bias);
    p.mlp = m.num_experts * expert;
    // (DeepSeek-V3's e_score_correction_bias is a buffer in transformers, not a parameter.)
    p.router = Linear(s.hidden_size, m.num_experts, m.router_bias);
    if (m.num_shared_experts > 0) {
      p.shared_experts = Mlp(s, m.shared_ffn_hidden_size, false) +
                         (m.shared_expert_gate ? Linear(s.hidden_size, 1, false) : 0);
    }
    p.active = p.attention + p.norms + p.router + p.shared_experts +
               m.experts_per_token * expert;
  } else {
    p.mlp = Mlp(s, s.ffn_hidden_size, s.mlp_bias);
    p.active = p.total();
  }
  return p;
}

}  // namespace

int64_t ParamCounts::layers_total() const {
  int64_t t = 0;
  for (const auto& l : layers) t += l.total();
  return t;
}

LayerParams CountLayerParams(const ModelSpec& spec, bool moe) {
  return CountLayer(spec, moe && spec.moe.enabled());
}

ParamCounts CountParams(const ModelSpec& s, HeadKind head, bool per_layer) {
  assert(s.Validate().ok());
  if (head == HeadKind::kDefault) {
    head = s.arch == ArchKind::kDecoder ? HeadKind::kCausalLm : HeadKind::kNone;
  }
  ParamCounts c;
  c.token_embedding = s.vocab_size * s.embedding_width();
  if (s.position == PositionKind::kLearned) {
    c.position_embedding = (s.max_positions + s.position_offset) * s.hidden_size;
  }
  c.token_type_embedding = s.type_vocab_size * s.hidden_size;
  if (s.embedding_norm) c.embedding_norm = Norm(s);
  if (s.embedding_proj_dim > 0 && s.embedding_proj_dim != s.hidden_size) {
    // OPT: project_in (proj -> hidden) and project_out (hidden -> proj), no bias.
    c.embedding_proj = 2 * s.embedding_proj_dim * s.hidden_size;
  }
  int64_t layers_total = 0, layers_active = 0;
  if (per_layer) {
    c.layers.reserve(static_cast<size_t>(s.num_layers));
    for (int64_t i = 0; i < s.num_layers; ++i) c.layers.push_back(CountLayer(s, s.IsMoeLayer(i)));
    for (const auto& l : c.layers) {
      layers_total += l.total();
      layers_active += l.active;
    }
  } else {
    int64_t moe_layers = s.num_moe_layers();
    LayerParams dense = CountLayer(s, false);
    layers_total = (s.num_layers - moe_layers) * dense.total();
    layers_active = (s.num_layers - moe_layers) * dense.active;
    if (moe_layers > 0) {
      LayerParams moe = CountLayer(s, true);
      layers_total += moe_layers * moe.total();
      layers_active += moe_layers * moe.active;
    }
  }
  if (s.final_norm) c.final_norm = Norm(s);

  switch (head) {
    case HeadKind::kCausalLm:
      c.lm_head = (s.tied_embeddings ? 0 : s.vocab_size * s.embedding_width()) +
                  (s.lm_head_bias ? s.vocab_size : 0);
      break;
    case HeadKind::kMaskedLm:
      // BertForMaskedLM / RobertaForMaskedLM: transform dense + norm, decoder weight tied to
      // the embedding, decoder bias; no pooler.
      c.lm_head = s.tied_embeddings ? 0 : s.vocab_size * s.hidden_size;
      c.head_extra = Linear(s.hidden_size, s.hidden_size, true) + Norm(s) + s.vocab_size;
      break;
    case HeadKind::kNone:
      if (s.pooler) c.head_extra = Linear(s.hidden_size, s.hidden_size, true);
      break;
    case HeadKind::kDefault:
      break;
  }

  int64_t outside_layers = c.embedding() + c.embedding_proj + c.final_norm + c.head();
  c.total = outside_layers + layers_total;
  c.active = outside_layers + layers_active;
  if (s.mtp_layers > 0) {
    // DeepSeek-V3's multi-token-prediction module as its checkpoint stores it: two RMSNorms
    // (enorm, hnorm), eh_proj (2h -> h), one decoder layer (an MoE layer when layers are),
    // the shared head's norm, and its own copies of the embedding and LM head.
    const bool moe = s.IsMoeLayer(s.num_layers - 1);
    c.mtp = s.mtp_layers * (3 * Norm(s) + Linear(2 * s.hidden_size, s.hidden_size, false) +
                            CountLayer(s, moe).total() + 2 * s.vocab_size * s.hidden_size);
  }
  return c;
}

int64_t TotalParams(const ModelSpec& spec) { return CountParams(spec).total; }

}  // namespace frenzy
