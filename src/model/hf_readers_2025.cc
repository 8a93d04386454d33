// HuggingFace config readers for families added after the first wave (model/hf_config.cc):
// Phi-1/1.5/2, IBM Granite, SmolLM3, StableLM 2 / 3B-4E1T, OLMoE and GLM-4.5 (glm4_moe).
// Field defaults are those of each transformers configuration class
// (transformers/models/<type>/configuration_<type>.py, 4.5x releases) and the module
// constructors in modeling_<type>.py that decide which weights exist.
#include <algorithm>
#include <map>
#include <string>

#include "model/hf_builder.h"

namespace frenzy::hf_detail {
namespace {

void ReadPhi(Builder& b) {
  // PhiConfig defaults (microsoft/phi-1's shape). PhiDecoderLayer runs attention and MLP in
  // parallel off one LayerNorm (input_layernorm); q/k/v/dense, the 2-matrix fc1/fc2 MLP and the
  // LM head all carry biases; final_layernorm; rotary on partial_rotary_factor of each head.
  ReadLlamaLike(b, {51200, 2048, 8192, 24, 32, 2048, std::nullopt, "gelu_new", false, false},
                false);
  ModelSpec& s = b.spec();
  s.norm = NormKind::kLayerNorm;
  s.norm_bias = true;
  s.gated_mlp = false;
  s.parallel_attn_mlp = true;
  s.norms_per_layer = 1;
  s.qkv_bias = s.attn_out_bias = s.mlp_bias = s.lm_head_bias = true;
  s.hidden_dropout = b.Prob({"resid_pdrop"}, 0.0);
  if (b.r().Bool("qk_layernorm", false)) {
    b.r().Error("qk_layernorm", "Phi's per-head LayerNorms on queries and keys are not modelled");
  }
}

void ReadGranite(Builder& b) {
  // GraniteConfig defaults: Llama's block; its embedding, residual, attention and logits
  // multipliers are scalars (a product with a Python float keeps no tensor for backward).
  ReadLlamaLike(b, {32000, 4096, 11008, 32, 32, 2048, std::nullopt, "silu", false, false}, true);
}

void ReadSmolLm3(Builder& b) {
  // SmolLM3Config defaults: Llama's block with 4 kv heads and tied embeddings; its NoPE layers
  // (no_rope_layers) skip the rotation, which keeps no tensor anyway.
  ReadLlamaLike(b, {128256, 2048, 11008, 36, 16, 32768, 4, "silu", true, false}, true);
}

void ReadStableLm(Builder& b) {
  // StableLmConfig defaults: LayerNorms with biases, a gated MLP without biases, q/k/v biases
  // with use_qkv_bias (o_proj never), one shared norm with use_parallel_residual, and with
  // qk_layernorm a bias-free LayerNorm per head on queries and keys (each head its own weight).
  ReadLlamaLike(b, {50304, 2560, 6912, 32, 32, 4096, 32, "silu", false, false}, false);
  ModelSpec& s = b.spec();
  s.norm = NormKind::kLayerNorm;
  s.norm_bias = true;
  s.qkv_bias = b.r().Bool("use_qkv_bias", false);
  s.parallel_attn_mlp = b.r().Bool("use_parallel_residual", false);
  s.norms_per_layer = s.parallel_attn_mlp ? 1 : 2;
  if (b.r().Bool("qk_layernorm", false)) s.qk_norm = QkNorm::kFull;
  s.hidden_dropout = b.Prob({"hidden_dropout"}, 0.0);
}

void ReadOlmoe(Builder& b) {
  // OlmoeConfig defaults: 64 experts of intermediate_size, top-8, a bias-free router, no
  // shared expert; RMSNorms over the whole query and key projections (q_norm, k_norm).
  ReadLlamaLike(b, {50304, 2048, 2048, 16, 16, 4096, std::nullopt, "silu", false, false}, false);
  ModelSpec& s = b.spec();
  const bool bias = b.r().Bool("attention_bias", false);
  s.qkv_bias = s.attn_out_bias = bias;
  s.qk_norm = QkNorm::kFull;
  s.moe.num_experts = b.Int("moe.num_experts", {"num_experts", "num_local_experts"}, 64);
  s.moe.experts_per_token = b.Int("moe.experts_per_token", {"num_experts_per_tok"}, 8);
  s.moe.ffn_hidden_size = s.ffn_hidden_size;
  b.NoteKey("moe.ffn_hidden_size", "intermediate_size");
}

void ReadGlm4Moe(Builder& b) {
  // Glm4MoeConfig defaults (GLM-4.5's shape): head_dim 128 (96 heads do not divide 4096), q/k/v
  // biases with attention_bias (o_proj never), per-head q/k RMSNorms with use_qk_norm; from
  // layer first_k_dense_replace on, 128 routed experts of moe_intermediate_size (top-8) and one
  // shared MLP of moe_intermediate_size x n_shared_experts behind an fp32 router whose
  // correction bias is a buffer, as DeepSeek-V3's; the checkpoint's MTP layer is not built.
  ReadLlamaLike(b, {151552, 4096, 10944, 46, 96, 131072, 8, "silu", false, false, 128}, false);
  ModelSpec& s = b.spec();
  s.qkv_bias = b.r().Bool("attention_bias", false);
  if (b.r().Bool("use_qk_norm", false)) s.qk_norm = QkNorm::kPerHead;
  s.moe.num_experts = b.Int("moe.num_experts", {"n_routed_experts", "num_experts"}, 128);
  s.moe.experts_per_token = b.Int("moe.experts_per_token", {"num_experts_per_tok"}, 8);
  s.moe.ffn_hidden_size = b.Int("moe.ffn_hidden_size", {"moe_intermediate_size"}, 1408);
  ReadSharedExperts(b, 1);
  const int64_t first_dense = b.Int("moe.dense_layers", {"first_k_dense_replace"}, 1);
  for (int64_t i = 0; i < std::min(first_dense, s.num_layers) && i < (int64_t{1} << 16); ++i) {
    s.moe.dense_layers.push_back(i);
  }
  if (s.moe.num_experts == 0) s.moe = MoeSpec{};
  s.moe.fp32_router = s.moe.enabled();
  s.mtp_layers = b.Int("mtp_layers", {"num_nextn_predict_layers"}, 0);
}

}  // namespace

const std::map<std::string, Reader>& MoreReaders() {
  static const auto* kReaders = new std::map<std::string, Reader>{
      {"phi", ReadPhi},         {"granite", ReadGranite}, {"smollm3", ReadSmolLm3},
      {"stablelm", ReadStableLm}, {"olmoe", ReadOlmoe},   {"glm4_moe", ReadGlm4Moe},
  };
  return *kReaders;
}

}  // namespace frenzy::hf_detail
