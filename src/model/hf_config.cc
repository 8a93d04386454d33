#include "model/hf_config.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "common/json_reader.h"
#include "model/hf_builder.h"
#include "model/hf_wrappers.h"

namespace frenzy {
namespace hf_detail {

void ReadLlamaLike(Builder& b, const LlamaLike& d, bool read_bias_flags) {
  ModelSpec& s = b.spec();
  s.norm = NormKind::kRmsNorm;
  s.norm_bias = false;
  s.position = PositionKind::kRotary;
  s.gated_mlp = true;
  s.vocab_size = b.Int("vocab_size", {"vocab_size"}, d.vocab);
  s.hidden_size = b.Int("hidden_size", {"hidden_size"}, d.hidden);
  s.ffn_hidden_size = b.Int("ffn_hidden_size", {"intermediate_size"}, d.ffn);
  s.num_layers = b.Int("num_layers", {"num_hidden_layers"}, d.layers);
  s.num_heads = b.Int("num_heads", {"num_attention_heads"}, d.heads);
  s.num_kv_heads = b.Int("num_kv_heads", {"num_key_value_heads"}, d.kv_heads.value_or(s.num_heads));
  s.max_positions = b.Int("max_positions", {"max_position_embeddings"}, d.max_pos);
  s.tied_embeddings = b.r().Bool("tie_word_embeddings", d.tied);
  s.qkv_bias = d.qkv_bias;
  if (read_bias_flags) {
    // LlamaConfig.attention_bias covers q, k, v and o; mlp_bias all three MLP matrices.
    bool attn_bias = b.r().Bool("attention_bias", false);
    s.qkv_bias = attn_bias;
    s.attn_out_bias = attn_bias;
    s.mlp_bias = b.r().Bool("mlp_bias", false);
  }
  s.attention_dropout = b.Prob({"attention_dropout"}, 0.0);
  b.Activation({"hidden_act"}, d.act);
  if (d.head_dim && !b.r().HasValue("head_dim")) {
    s.head_dim = *d.head_dim;
  } else {
    b.HeadDim(/*explicit_allowed=*/true);
  }
}

void SlidingLayers(Builder& b, int64_t fallback) {
  ModelSpec& s = b.spec();
  std::vector<std::string> types = b.r().StringList("layer_types");
  if (types.empty()) {
    s.sliding_layers =
        s.sliding_window > 0 ? std::clamp<int64_t>(fallback, 0, std::max<int64_t>(0, s.num_layers))
                             : 0;
    return;
  }
  if (static_cast<int64_t>(types.size()) != s.num_layers) {
    b.r().Error("layer_types", "has " + std::to_string(types.size()) + " entries for " +
                                   std::to_string(s.num_layers) + " layers");
    return;
  }
  s.sliding_layers = std::count(types.begin(), types.end(), std::string("sliding_attention"));
  if (s.sliding_window <= 0) s.sliding_layers = 0;
}

void ReadSharedExperts(Builder& b, int64_t fallback) {
  ModelSpec& s = b.spec();
  s.moe.num_shared_experts = b.Int("moe.num_shared_experts", {"n_shared_experts"}, fallback);
  b.NoteKey("moe.shared_ffn_hidden_size", "n_shared_experts");
  // Bounded first so that the product cannot overflow; Validate() bounds each field.
  if (s.moe.ffn_hidden_size <= (int64_t{1} << 24) && s.moe.num_shared_experts <= (1 << 14)) {
    s.moe.shared_ffn_hidden_size = s.moe.ffn_hidden_size * s.moe.num_shared_experts;
  }
}

}  // namespace hf_detail

namespace {

using hf_detail::Builder;
using hf_detail::ReadLlamaLike;
using hf_detail::ReadSharedExperts;
using hf_detail::Reader;
using hf_detail::SlidingLayers;
using hf_detail::SortedLayers;

void ReadLlama(Builder& b) {
  // LlamaConfig defaults.
  ReadLlamaLike(b, {32000, 4096, 11008, 32, 32, 2048, std::nullopt, "silu", false, false}, true);
}

void ReadMistral(Builder& b) {
  // MistralConfig defaults (max_position_embeddings = 4096 * 32).
  ReadLlamaLike(b, {32000, 4096, 14336, 32, 32, int64_t{4096} * 32, 8, "silu", false, false}, false);
}

void ReadMixtral(Builder& b) {
  // MixtralConfig defaults; every layer is a sparse MoE block with a bias-free router.
  ReadLlamaLike(b, {32000, 4096, 14336, 32, 32, int64_t{4096} * 32, 8, "silu", false, false}, false);
  ModelSpec& s = b.spec();
  s.moe.num_experts = b.Int("moe.num_experts", {"num_local_experts"}, 8);
  s.moe.experts_per_token = b.Int("moe.experts_per_token", {"num_experts_per_tok"}, 2);
  s.moe.ffn_hidden_size = s.ffn_hidden_size;
  b.NoteKey("moe.ffn_hidden_size", "intermediate_size");
}

void ReadQwen2(Builder& b) {
  // Qwen2Config defaults; q/k/v projections carry a bias, o_proj does not.
  ReadLlamaLike(b, {151936, 4096, 22016, 32, 32, 32768, 32, "silu", false, true}, false);
}

void ReadQwen2Moe(Builder& b) {
  // Qwen2MoeConfig defaults.
  ReadLlamaLike(b, {151936, 2048, 5632, 24, 16, 32768, 16, "silu", false, true}, false);
  ModelSpec& s = b.spec();
  s.moe.num_experts = b.Int("moe.num_experts", {"num_experts"}, 60);
  s.moe.experts_per_token = b.Int("moe.experts_per_token", {"num_experts_per_tok"}, 4);
  s.moe.ffn_hidden_size = b.Int("moe.ffn_hidden_size", {"moe_intermediate_size"}, 1408);
  s.moe.shared_ffn_hidden_size =
      b.Int("moe.shared_ffn_hidden_size", {"shared_expert_intermediate_size"}, 5632);
  // One shared expert with its own sigmoid gate (Qwen2MoeSparseMoeBlock).
  s.moe.num_shared_experts = s.moe.shared_ffn_hidden_size > 0 ? 1 : 0;
  s.moe.shared_expert_gate = s.moe.num_shared_experts > 0;
  s.moe.layer_freq = b.Int("moe.layer_freq", {"decoder_sparse_step"}, 1);
  s.moe.dense_layers = SortedLayers(b.r().IntList("mlp_only_layers"));
  b.NoteKey("moe.dense_layers", "mlp_only_layers");
}

void ReadGemma(Builder& b) {
  // GemmaConfig defaults: head_dim 256, tied embeddings, GeGLU MLP.
  ReadLlamaLike(b, {256000, 3072, 24576, 28, 16, 8192, 16, "gelu_pytorch_tanh", true, false},
                true);
  if (!b.r().HasValue("head_dim")) b.spec().head_dim = 256;
  b.spec().gemma_norm = true;
  // Gemma's modeling code prefers hidden_activation when set.
  if (b.r().HasValue("hidden_activation")) b.Activation({"hidden_activation"}, "gelu_pytorch_tanh");
}

void ReadPhi3(Builder& b) {
  // Phi3Config defaults; fused qkv_proj and gate_up_proj have the same counts as separate ones.
  ReadLlamaLike(b, {32064, 3072, 8192, 32, 32, 4096, std::nullopt, "silu", false, false}, false);
  ModelSpec& s = b.spec();
  s.hidden_dropout = b.Prob({"resid_pdrop"}, 0.0);
  s.attention_dropout = b.Prob({"attention_dropout"}, 0.0);
}

void ReadGpt2(Builder& b) {
  // GPT2Config defaults; GPT2LMHeadModel ties lm_head to wte.
  ModelSpec& s = b.spec();
  s.norm = NormKind::kLayerNorm;
  s.position = PositionKind::kLearned;
  s.qkv_bias = s.attn_out_bias = s.mlp_bias = true;
  s.vocab_size = b.Int("vocab_size", {"vocab_size"}, 50257);
  s.max_positions = b.Int("max_positions", {"n_positions", "max_position_embeddings"}, 1024);
  s.hidden_size = b.Int("hidden_size", {"n_embd", "hidden_size"}, 768);
  s.num_layers = b.Int("num_layers", {"n_layer", "num_hidden_layers"}, 12);
  s.num_heads = b.Int("num_heads", {"n_head", "num_attention_heads"}, 12);
  s.num_kv_heads = s.num_heads;
  s.ffn_hidden_size = b.Int("ffn_hidden_size", {"n_inner"}, 4 * s.hidden_size);
  s.tied_embeddings = b.r().Bool("tie_word_embeddings", true);
  s.hidden_dropout = b.Prob({"resid_pdrop"}, 0.1);
  s.attention_dropout = b.Prob({"attn_pdrop"}, 0.1);
  b.Activation({"activation_function"}, "gelu_new");
  b.HeadDim(false);
  // Megatron-LM's GPT is this block; two of its options have no GPT2Config key and are read
  // under the names LlamaConfig and MixtralConfig give them: `--disable-bias-linear`
  // (attention_bias / mlp_bias false; the LayerNorms keep theirs) and MoE MLPs (`--num-experts`
  // as num_local_experts, `--moe-router-topk` as num_experts_per_tok): every layer's MLP becomes
  // that many GeLU experts of n_inner, behind a bias-free router.
  s.qkv_bias = s.attn_out_bias = b.r().Bool("attention_bias", true);
  s.mlp_bias = b.r().Bool("mlp_bias", true);
  if (b.r().HasValue("num_local_experts")) {
    s.moe.num_experts = b.Int("moe.num_experts", {"num_local_experts"}, 0);
    s.moe.experts_per_token = b.Int("moe.experts_per_token", {"num_experts_per_tok"}, 2);
    s.moe.ffn_hidden_size = s.ffn_hidden_size;
    s.moe.expert_bias = s.mlp_bias;
    b.NoteKey("moe.ffn_hidden_size", "n_inner");
  }
}

void ReadGptNeox(Builder& b) {
  // GPTNeoXConfig defaults; two LayerNorms a layer even with the parallel residual; untied
  // embed_out.
  ModelSpec& s = b.spec();
  s.norm = NormKind::kLayerNorm;
  s.position = PositionKind::kRotary;
  s.vocab_size = b.Int("vocab_size", {"vocab_size"}, 50432);
  s.hidden_size = b.Int("hidden_size", {"hidden_size"}, 6144);
  s.num_layers = b.Int("num_layers", {"num_hidden_layers"}, 44);
  s.num_heads = b.Int("num_heads", {"num_attention_heads"}, 64);
  s.num_kv_heads = s.num_heads;
  s.ffn_hidden_size = b.Int("ffn_hidden_size", {"intermediate_size"}, 24576);
  s.max_positions = b.Int("max_positions", {"max_position_embeddings"}, 2048);
  s.parallel_attn_mlp = b.r().Bool("use_parallel_residual", true);
  bool attn_bias = b.r().Bool("attention_bias", true);
  s.qkv_bias = s.attn_out_bias = attn_bias;
  s.mlp_bias = true;
  s.tied_embeddings = b.r().Bool("tie_word_embeddings", false);
  s.hidden_dropout = b.Prob({"hidden_dropout"}, 0.0);
  s.attention_dropout = b.Prob({"attention_dropout"}, 0.0);
  b.Activation({"hidden_act"}, "gelu");
  b.HeadDim(false);
}

void ReadOpt(Builder& b) {
  // OPTConfig defaults. OPTLearnedPositionalEmbedding keeps 2 extra rows; project_in/out exist
  // when word_embed_proj_dim != hidden_size; the decoder's final norm only with pre-norm.
  ModelSpec& s = b.spec();
  s.norm = NormKind::kLayerNorm;
  s.position = PositionKind::kLearned;
  s.position_offset = 2;
  s.vocab_size = b.Int("vocab_size", {"vocab_size"}, 50272);
  s.hidden_size = b.Int("hidden_size", {"hidden_size"}, 768);
  s.num_layers = b.Int("num_layers", {"num_hidden_layers"}, 12);
  s.num_heads = b.Int("num_heads", {"num_attention_heads"}, 12);
  s.num_kv_heads = s.num_heads;
  s.ffn_hidden_size = b.Int("ffn_hidden_size", {"ffn_dim"}, 3072);
  s.max_positions = b.Int("max_positions", {"max_position_embeddings"}, 2048);
  s.embedding_proj_dim = b.Int("embedding_proj_dim", {"word_embed_proj_dim"}, s.hidden_size);
  if (s.embedding_proj_dim == s.hidden_size) s.embedding_proj_dim = 0;
  bool pre_norm = b.r().Bool("do_layer_norm_before", true);
  bool remove_final = b.r().Bool("_remove_final_layer_norm", false);
  s.norm_placement = pre_norm ? NormPlacement::kPreNorm : NormPlacement::kPostNorm;
  s.final_norm = pre_norm && !remove_final;
  bool bias = b.r().Bool("enable_bias", true);
  s.qkv_bias = s.attn_out_bias = s.mlp_bias = bias;
  if (!b.r().Bool("layer_norm_elementwise_affine", true)) s.norms_per_layer = 0;
  s.tied_embeddings = b.r().Bool("tie_word_embeddings", true);
  s.hidden_dropout = b.Prob({"dropout"}, 0.1);
  s.attention_dropout = b.Prob({"attention_dropout"}, 0.0);
  b.Activation({"activation_function"}, "relu");
  b.HeadDim(false);
}

void ReadBloom(Builder& b) {
  // BloomConfig defaults; `n_embed` overrides hidden_size; MLP is 4 * hidden; ALiBi.
  ModelSpec& s = b.spec();
  s.norm = NormKind::kLayerNorm;
  s.position = PositionKind::kAlibi;
  s.embedding_norm = true;
  s.qkv_bias = s.attn_out_bias = s.mlp_bias = true;
  s.vocab_size = b.Int("vocab_size", {"vocab_size"}, 250880);
  s.hidden_size = b.Int("hidden_size", {"n_embed", "hidden_size"}, 64);
  s.num_layers = b.Int("num_layers", {"n_layer", "num_hidden_layers"}, 2);
  s.num_heads = b.Int("num_heads", {"n_head", "num_attention_heads"}, 8);
  s.num_kv_heads = s.num_heads;
  s.ffn_hidden_size = 4 * s.hidden_size;
  b.NoteKey("ffn_hidden_size", b.r().HasValue("n_embed") ? "n_embed" : "hidden_size");
  s.max_positions = b.Int("max_positions", {"seq_length", "max_position_embeddings"}, 2048);
  s.tied_embeddings = b.r().Bool("tie_word_embeddings", true);
  s.hidden_dropout = b.Prob({"hidden_dropout"}, 0.0);
  s.attention_dropout = b.Prob({"attention_dropout"}, 0.0);
  s.activation = Activation::kGeluTanh;  // bloom_gelu_forward: tanh approximation
  b.HeadDim(false);
}

void ReadFalcon(Builder& b) {
  // FalconConfig defaults and FalconDecoderLayer/FalconAttention construction.
  ModelSpec& s = b.spec();
  s.norm = NormKind::kLayerNorm;
  s.vocab_size = b.Int("vocab_size", {"vocab_size"}, 65024);
  s.hidden_size = b.Int("hidden_size", {"hidden_size", "n_embed"}, 4544);
  s.num_layers = b.Int("num_layers", {"num_hidden_layers", "n_layer"}, 32);
  s.num_heads = b.Int("num_heads", {"num_attention_heads", "n_head"}, 71);
  int64_t kv_config = b.Int("num_kv_heads", {"num_kv_heads", "n_head_kv"}, s.num_heads);
  bool new_arch = b.r().Bool("new_decoder_architecture", false);
  bool multi_query = b.r().Bool("multi_query", true);
  s.parallel_attn_mlp = b.r().Bool("parallel_attn", true);
  bool bias = b.r().Bool("bias", false);
  bool alibi = b.r().Bool("alibi", false);
  s.ffn_hidden_size = b.Int("ffn_hidden_size", {"ffn_hidden_size"}, 4 * s.hidden_size);
  s.max_positions = b.Int("max_positions", {"max_position_embeddings"}, 2048);
  s.tied_embeddings = b.r().Bool("tie_word_embeddings", true);
  s.hidden_dropout = b.Prob({"hidden_dropout"}, 0.0);
  s.attention_dropout = b.Prob({"attention_dropout"}, 0.0);
  s.position = alibi ? PositionKind::kAlibi : PositionKind::kRotary;
  s.qkv_bias = s.attn_out_bias = s.mlp_bias = bias;
  // FalconAttention: kv heads as configured with the new architecture, 1 with multi-query,
  // else one per query head.
  s.num_kv_heads = new_arch ? kv_config : (multi_query ? 1 : s.num_heads);
  b.NoteKey("num_kv_heads", new_arch ? "num_kv_heads" : "multi_query");
  // Norms: two unless the attention and MLP run in parallel off a single shared norm.
  std::optional<int64_t> ln_parallel = b.r().OptInt("num_ln_in_parallel_attn");
  if (!ln_parallel && new_arch) ln_parallel = 2;
  s.norms_per_layer = (!s.parallel_attn_mlp || ln_parallel.value_or(1) == 2) ? 2 : 1;
  s.activation = Activation::kGelu;
  if (b.r().HasValue("activation")) b.Activation({"activation"}, "gelu");
  b.HeadDim(false);
}

void ReadBertLike(Builder& b, int64_t default_vocab, int64_t default_type_vocab) {
  // BertConfig / RobertaConfig defaults; post-norm encoder with an embedding LayerNorm and a
  // pooler; RoBERTa's position table size is max_position_embeddings as configured (514).
  ModelSpec& s = b.spec();
  s.arch = ArchKind::kEncoder;
  s.norm = NormKind::kLayerNorm;
  s.norm_placement = NormPlacement::kPostNorm;
  s.final_norm = false;
  s.embedding_norm = true;
  s.pooler = true;
  s.position = PositionKind::kLearned;
  s.qkv_bias = s.attn_out_bias = s.mlp_bias = true;
  s.vocab_size = b.Int("vocab_size", {"vocab_size"}, default_vocab);
  s.hidden_size = b.Int("hidden_size", {"hidden_size"}, 768);
  s.num_layers = b.Int("num_layers", {"num_hidden_layers"}, 12);
  s.num_heads = b.Int("num_heads", {"num_attention_heads"}, 12);
  s.num_kv_heads = s.num_heads;
  s.ffn_hidden_size = b.Int("ffn_hidden_size", {"intermediate_size"}, 3072);
  s.max_positions = b.Int("max_positions", {"max_position_embeddings"}, 512);
  s.type_vocab_size = b.Int("type_vocab_size", {"type_vocab_size"}, default_type_vocab);
  s.tied_embeddings = b.r().Bool("tie_word_embeddings", true);
  s.hidden_dropout = b.Prob({"hidden_dropout_prob"}, 0.1);
  s.attention_dropout = b.Prob({"attention_probs_dropout_prob"}, 0.1);
  b.Activation({"hidden_act"}, "gelu");
  b.HeadDim(false);
}


void ReadQwen3(Builder& b) {
  // Qwen3Config defaults: head_dim 128, an RMSNorm over each head's queries and keys
  // (Qwen3Attention.q_norm / k_norm), no q/k/v bias unless attention_bias.
  ReadLlamaLike(b, {151936, 4096, 22016, 32, 32, 32768, 32, "silu", false, false}, true);
  ModelSpec& s = b.spec();
  if (!b.r().HasValue("head_dim")) s.head_dim = 128;
  s.qk_norm = QkNorm::kPerHead;
  // Sliding windows only with use_sliding_window, above max_window_layers (off in every
  // released Qwen3).
  if (b.r().Bool("use_sliding_window", false)) {
    s.sliding_window = b.Int("sliding_window", {"sliding_window"}, 4096);
    const int64_t full = b.Int("max_window_layers", {"max_window_layers"}, 28);
    SlidingLayers(b, s.num_layers - std::min(full, s.num_layers));
  }
}

void ReadQwen3Moe(Builder& b) {
  // Qwen3MoeConfig defaults: 128 experts, top-8, no shared expert, a bias-free router; no
  // head_dim default (hidden / heads), unlike Qwen3.
  ReadLlamaLike(b, {151936, 2048, 6144, 24, 32, 32768, 4, "silu", false, false}, true);
  ModelSpec& s = b.spec();
  s.qk_norm = QkNorm::kPerHead;
  s.moe.num_experts = b.Int("moe.num_experts", {"num_experts"}, 128);
  s.moe.experts_per_token = b.Int("moe.experts_per_token", {"num_experts_per_tok"}, 8);
  s.moe.ffn_hidden_size = b.Int("moe.ffn_hidden_size", {"moe_intermediate_size"}, 768);
  s.moe.layer_freq = b.Int("moe.layer_freq", {"decoder_sparse_step"}, 1);
  s.moe.dense_layers = SortedLayers(b.r().IntList("mlp_only_layers"));
  b.NoteKey("moe.dense_layers", "mlp_only_layers");
}

// Gemma-2 and Gemma-3 text models: GeGLU, tied embeddings, head_dim 256, and four RMSNorms a
// layer (input, post-attention, pre- and post-feedforward).
void ReadGemmaNext(Builder& b, int64_t vocab, int64_t max_pos) {
  ReadLlamaLike(b, {vocab, 2304, 9216, 26, 8, max_pos, 4, "gelu_pytorch_tanh", true, false}, true);
  ModelSpec& s = b.spec();
  if (!b.r().HasValue("head_dim")) s.head_dim = 256;
  if (b.r().HasValue("hidden_activation")) b.Activation({"hidden_activation"}, "gelu_pytorch_tanh");
  s.norms_per_layer = 4;
  s.gemma_norm = true;
  s.sliding_window = b.Int("sliding_window", {"sliding_window"}, 4096);
}

void ReadGemma2(Builder& b) {
  // Gemma2Config defaults; every other layer (the even ones) slides; attention logits are
  // soft-capped at 50.
  ReadGemmaNext(b, 256000, 8192);
  ModelSpec& s = b.spec();
  s.attn_softcap = b.Prob({"attn_logit_softcapping"}, 50.0);
  s.final_softcap = b.Prob({"final_logit_softcapping"}, 30.0);
  SlidingLayers(b, (s.num_layers + 1) / 2);
}

void ReadGemma3Text(Builder& b) {
  // Gemma3TextConfig defaults; q/k RMSNorms per head; five sliding layers, then a global one
  // (sliding_window_pattern 6), no soft-capping.
  ReadGemmaNext(b, 262208, 131072);
  ModelSpec& s = b.spec();
  s.qk_norm = QkNorm::kPerHead;
  s.attn_softcap = b.Prob({"attn_logit_softcapping"}, 0.0);
  s.final_softcap = b.Prob({"final_logit_softcapping"}, 0.0);
  const int64_t pattern = b.Int("sliding_window_pattern", {"sliding_window_pattern"}, 6);
  SlidingLayers(b, pattern > 0 ? s.num_layers - s.num_layers / pattern : s.num_layers);
}

void ReadDeepseek(Builder& b, bool v3) {
  // DeepseekV2Config / DeepseekV3Config defaults. MLA; shared + routed experts from layer
  // first_k_dense_replace on (every moe_layer_freq-th, as DeepSeek's own code has it; 1 in
  // every released config). V3's routing-score correction bias is a buffer, not a parameter.
  ModelSpec& s = b.spec();
  if (v3) {
    ReadLlamaLike(b, {129280, 7168, 18432, 61, 128, 4096, 128, "silu", false, false}, false);
  } else {
    ReadLlamaLike(b, {32000, 4096, 11008, 32, 32, 2048, std::nullopt, "silu", false, false}, false);
  }
  s.mlp_bias = b.r().Bool("mlp_bias", false);
  const bool bias = b.r().Bool("attention_bias", false);
  s.qkv_bias = s.attn_out_bias = bias;
  MlaSpec& m = s.mla;
  m.q_lora_rank = b.r().HasValue("q_lora_rank") ? b.Int("mla.q_lora_rank", {"q_lora_rank"}, 0)
                  : b.r().Has("q_lora_rank")     ? 0  // null: queries projected directly
                                                 : 1536;
  m.kv_lora_rank = b.Int("mla.kv_lora_rank", {"kv_lora_rank"}, 512);
  if (m.kv_lora_rank <= 0) {
    b.r().Error("kv_lora_rank", "must be positive (DeepSeek attention is latent), found " +
                                    std::to_string(m.kv_lora_rank));
  }
  m.qk_nope_head_dim = b.Int("mla.qk_nope_head_dim", {"qk_nope_head_dim"}, 128);
  m.qk_rope_head_dim = b.Int("mla.qk_rope_head_dim", {"qk_rope_head_dim"}, 64);
  m.v_head_dim = b.Int("mla.v_head_dim", {"v_head_dim"}, 128);
  // Every head has its own keys and values after the up-projection.
  s.head_dim = m.qk_head_dim();
  b.NoteKey("head_dim", "qk_nope_head_dim");
  s.num_kv_heads = s.num_heads;
  s.moe.num_experts = b.Int("moe.num_experts", {"n_routed_experts"}, v3 ? 256 : 64);
  // DeepseekV2Config has no default top-k (None): a config must give it.
  s.moe.experts_per_token = b.Int("moe.experts_per_token", {"num_experts_per_tok"},
                                  v3 ? std::optional<int64_t>(8) : std::nullopt);
  s.moe.ffn_hidden_size = b.Int("moe.ffn_hidden_size", {"moe_intermediate_size"}, v3 ? 2048 : 1407);
  ReadSharedExperts(b, v3 ? 1 : 2);
  const int64_t freq = b.Int("moe.layer_freq", {"moe_layer_freq"}, 1);
  const int64_t first_dense = b.Int("moe.dense_layers", {"first_k_dense_replace"}, v3 ? 3 : 0);
  // DeepSeek: layer i is MoE iff i >= first_k_dense_replace and i % moe_layer_freq == 0.
  s.moe.layer_freq = 1;
  for (int64_t i = 0; i < s.num_layers && i < (int64_t{1} << 16); ++i) {
    if (i < first_dense || (freq > 0 && i % freq != 0)) s.moe.dense_layers.push_back(i);
  }
  if (freq <= 0) b.r().Error("moe_layer_freq", "must be positive, found " + std::to_string(freq));
  if (s.moe.num_experts == 0) s.moe = MoeSpec{};
  s.moe.fp32_router = v3 && s.moe.enabled();
  s.mtp_layers = b.Int("mtp_layers", {"num_nextn_predict_layers"}, 0);
}

void ReadOlmo2(Builder& b) {
  // Olmo2Config defaults: RMSNorms on the whole query and key projections, and the block's
  // norms after each sublayer (post_attention_layernorm, post_feedforward_layernorm).
  ReadLlamaLike(b, {50304, 4096, 11008, 32, 32, 2048, std::nullopt, "silu", false, false}, false);
  ModelSpec& s = b.spec();
  const bool bias = b.r().Bool("attention_bias", false);
  s.qkv_bias = s.attn_out_bias = bias;
  s.qk_norm = QkNorm::kFull;
  s.norm_placement = NormPlacement::kPostSublayer;
}

// GlmConfig / Glm4Config defaults: q/k/v biases (attention_bias; o_proj never), a fused
// gate_up MLP; GLM-4-0414 (glm4) adds post-self-attention and post-MLP RMSNorms to the pair.
void ReadGlm(Builder& b, int64_t norms) {
  ReadLlamaLike(b, {151552, 4096, 13696, 40, 32, 131072, 2, "silu", false, false}, false);
  ModelSpec& s = b.spec();
  if (!b.r().HasValue("head_dim")) s.head_dim = 128;
  s.qkv_bias = b.r().Bool("attention_bias", true);
  s.norms_per_layer = norms;
}

void ReadGptOss(Builder& b) {
  // GptOssConfig defaults: 128 experts of 2880, top-4, biases on the router and the experts,
  // attention with biases and a learned sink per head, every other layer a 128-token window.
  ReadLlamaLike(b, {201088, 2880, 2880, 36, 64, 131072, 8, "silu", false, true}, false);
  ModelSpec& s = b.spec();
  if (!b.r().HasValue("head_dim")) s.head_dim = 64;
  const bool bias = b.r().Bool("attention_bias", true);
  s.qkv_bias = s.attn_out_bias = bias;
  s.attention_sinks = true;
  s.moe.num_experts = b.Int("moe.num_experts", {"num_local_experts"}, 128);
  s.moe.experts_per_token =
      b.Int("moe.experts_per_token", {"num_experts_per_tok", "experts_per_token"}, 4);
  s.moe.ffn_hidden_size = s.ffn_hidden_size;
  b.NoteKey("moe.ffn_hidden_size", "intermediate_size");
  s.moe.router_bias = s.moe.expert_bias = s.moe.stacked_experts = true;
  s.sliding_window = b.Int("sliding_window", {"sliding_window"}, 128);
  SlidingLayers(b, (s.num_layers + 1) / 2);
}

void ReadPhiMoe(Builder& b) {
  // PhimoeConfig defaults: LayerNorms with biases, q/k/v/o biases (attention_bias), bias-free
  // experts and router, an LM head bias (lm_head_bias).
  ReadLlamaLike(b, {32064, 4096, 6400, 32, 32, int64_t{4096} * 32, 8, "silu", false, false}, false);
  ModelSpec& s = b.spec();
  s.norm = NormKind::kLayerNorm;
  s.norm_bias = true;
  const bool bias = b.r().Bool("attention_bias", false);
  s.qkv_bias = s.attn_out_bias = bias;
  s.lm_head_bias = b.r().Bool("lm_head_bias", false);
  s.moe.num_experts = b.Int("moe.num_experts", {"num_local_experts"}, 16);
  s.moe.experts_per_token = b.Int("moe.experts_per_token", {"num_experts_per_tok"}, 2);
  s.moe.ffn_hidden_size = s.ffn_hidden_size;
  b.NoteKey("moe.ffn_hidden_size", "intermediate_size");
  if (b.r().HasValue("sliding_window")) {
    s.sliding_window = b.Int("sliding_window", {"sliding_window"}, 0);
    s.sliding_layers = s.sliding_window > 0 ? s.num_layers : 0;
  }
}

void ReadStarcoder2(Builder& b) {
  // Starcoder2Config defaults: LayerNorms, a 2-matrix GELU MLP (c_fc, c_proj), biases on every
  // projection (use_bias), tied embeddings, a 4096-token sliding window on every layer.
  ModelSpec& s = b.spec();
  s.norm = NormKind::kLayerNorm;
  s.position = PositionKind::kRotary;
  s.vocab_size = b.Int("vocab_size", {"vocab_size"}, 49152);
  s.hidden_size = b.Int("hidden_size", {"hidden_size"}, 3072);
  s.ffn_hidden_size = b.Int("ffn_hidden_size", {"intermediate_size"}, 12288);
  s.num_layers = b.Int("num_layers", {"num_hidden_layers"}, 30);
  s.num_heads = b.Int("num_heads", {"num_attention_heads"}, 24);
  s.num_kv_heads = b.Int("num_kv_heads", {"num_key_value_heads"}, 2);
  s.max_positions = b.Int("max_positions", {"max_position_embeddings"}, 4096);
  s.tied_embeddings = b.r().Bool("tie_word_embeddings", true);
  const bool bias = b.r().Bool("use_bias", true);
  s.qkv_bias = s.attn_out_bias = s.mlp_bias = bias;
  s.hidden_dropout = b.Prob({"residual_dropout"}, 0.0);
  s.attention_dropout = b.Prob({"attention_dropout"}, 0.0);
  if (b.r().HasValue("sliding_window")) {
    s.sliding_window = b.Int("sliding_window", {"sliding_window"}, 0);
    s.sliding_layers = s.sliding_window > 0 ? s.num_layers : 0;
  }
  b.Activation({"hidden_act"}, "gelu_pytorch_tanh");
  b.HeadDim(false);
}

const std::map<std::string, Reader>& Readers() {
  static const auto* kReaders = [] {
    auto* readers = new std::map<std::string, Reader>{
        {"llama", ReadLlama},
        {"mistral", ReadMistral},
        {"mixtral", ReadMixtral},
        {"qwen2", ReadQwen2},
        {"qwen2_moe", ReadQwen2Moe},
        {"gemma", ReadGemma},
        {"gemma2", ReadGemma2},
        {"gemma3_text", ReadGemma3Text},
        {"qwen3", ReadQwen3},
        {"qwen3_moe", ReadQwen3Moe},
        {"deepseek_v2", [](Builder& b) { ReadDeepseek(b, false); }},
        {"deepseek_v3", [](Builder& b) { ReadDeepseek(b, true); }},
        {"olmo2", ReadOlmo2},
        {"glm", [](Builder& b) { ReadGlm(b, 2); }},
        {"glm4", [](Builder& b) { ReadGlm(b, 4); }},
        {"gpt_oss", ReadGptOss},
        {"phimoe", ReadPhiMoe},
        {"starcoder2", ReadStarcoder2},
        {"phi3", ReadPhi3},
        {"gpt2", ReadGpt2},
        {"gpt_neox", ReadGptNeox},
        {"opt", ReadOpt},
        {"bloom", ReadBloom},
        {"falcon", ReadFalcon},
        {"RefinedWebModel", ReadFalcon},  // Falcon's original remote-code configs
        {"RefinedWeb", ReadFalcon},
        {"bert", [](Builder& b) { ReadBertLike(b, 30522, 2); }},
        {"roberta", [](Builder& b) { ReadBertLike(b, 50265, 2); }},
    };
    readers->insert(hf_detail::MoreReaders().begin(), hf_detail::MoreReaders().end());
    return readers;
  }();
  return *kReaders;
}

std::string JoinTypes() {
  std::string out;
  for (const auto& t : SupportedModelTypes()) out += (out.empty() ? "" : ", ") + t;
  return out;
}

}  // namespace

const std::vector<std::string>& SupportedModelTypes() {
  static const auto* kTypes = new std::vector<std::string>{
      "llama",      "mistral",     "mixtral", "qwen2",      "qwen2_moe",   "qwen3",
      "qwen3_moe",  "gemma",       "gemma2",  "gemma3_text", "deepseek_v2", "deepseek_v3",
      "olmo2",      "glm", "glm4",        "gpt_oss", "phimoe",     "starcoder2",  "phi3",
      "gpt2",       "gpt_neox",    "opt",     "bloom",      "falcon",      "bert",
      "roberta",    "phi",         "granite", "smollm3",    "stablelm",    "olmoe",
      "glm4_moe"};
  return *kTypes;
}

Result<ModelSpec> ParseHfConfig(const nlohmann::json& doc, const std::string& where,
                                const std::string& name) {
  const nlohmann::json* config = &doc;
  std::string zoo_name;
  // A zoo entry wraps the HuggingFace config.
  if (doc.is_object() && doc.contains("config") && doc["config"].is_object()) {
    config = &doc["config"];
    if (doc.contains("name") && doc["name"].is_string()) zoo_name = doc["name"].get<std::string>();
  }
  if (!config->is_object()) {
    return InvalidArgument("a config.json must be a JSON object", where);
  }
  std::string model_type;
  {
    JsonReader r(*config, where);
    model_type = r.String("model_type");
    RETURN_IF_ERROR(r.Finish());
  }
  // A multimodal wrapper: its text model (text_config) is what is trained.
  const nlohmann::json* text = config;
  std::string prefix, left_out;
  if (!Readers().contains(model_type) && config->contains("text_config") &&
      (*config)["text_config"].is_object()) {
    text = &(*config)["text_config"];
    prefix = "text_config.";
    std::string text_type;
    if (auto it = text->find("model_type"); it != text->end() && it->is_string()) {
      text_type = it->get<std::string>();
    } else {
      text_type = WrappedTextType(model_type);
    }
    if (!Readers().contains(text_type)) {
      return InvalidArgument("model_type '" + model_type + "' wraps a text model of type '" +
                                 (text_type.empty() ? std::string("(not given)") : text_type) +
                                 "', which is not supported (supported: " + JoinTypes() + ")",
                             where, "text_config.model_type");
    }
    left_out = WrapperLeftOut(*config, model_type);
    model_type = text_type;
  }
  auto it = Readers().find(model_type);
  if (it == Readers().end()) {
    if (std::string why = RefusedReason(model_type); !why.empty()) {
      return InvalidArgument("model_type '" + model_type + "' is not supported yet: " + why, where,
                             "model_type");
    }
    return InvalidArgument("unknown model_type '" + model_type + "' (supported: " + JoinTypes() +
                               ")",
                           where, "model_type");
  }
  Builder b(*text, where, prefix);
  ModelSpec& s = b.spec();
  s.model_type = model_type;
  s.left_out = left_out;
  if (model_type == "RefinedWebModel" || model_type == "RefinedWeb") s.model_type = "falcon";
  it->second(b);
  if (!name.empty()) {
    s.name = name;
  } else if (!zoo_name.empty()) {
    s.name = zoo_name;
  } else {
    JsonReader top(*config, where);
    s.name = top.String("_name_or_path", "model");
    if (s.name.empty()) s.name = "model";
  }
  return b.Finish();
}

Result<ModelSpec> ParseHfConfigText(std::string_view text, const std::string& where,
                                    const std::string& name) {
  ASSIGN_OR_RETURN(nlohmann::json doc, ParseJson(text, where));
  return ParseHfConfig(doc, where, name);
}

Result<ModelSpec> LoadHfConfigFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  ASSIGN_OR_RETURN(nlohmann::json doc, ParseJson(text, path));
  std::string name;
  bool has_name = doc.is_object() && ((doc.contains("_name_or_path") &&
                                       doc["_name_or_path"].is_string() &&
                                       !doc["_name_or_path"].get<std::string>().empty()) ||
                                      (doc.contains("config") && doc.contains("name")));
  if (!has_name) {
    std::filesystem::path p(path);
    name = p.stem().string();
    // ".../Llama-2-7b-hf/config.json" is better named after its folder.
    if (name == "config" && p.has_parent_path() && !p.parent_path().filename().empty()) {
      name = p.parent_path().filename().string();
    }
  }
  return ParseHfConfig(doc, path, name);
}

}  // namespace frenzy
