#include "model/model_json.h"

namespace frenzy {

const char* MlpKindName(const ModelSpec& s) {
  if (s.gated_mlp) {
    switch (s.activation) {
      case Activation::kSilu:
        return "swiglu";
      case Activation::kGelu:
      case Activation::kGeluTanh:
        return "geglu";
      case Activation::kRelu:
        return "reglu";
    }
  }
  return ActivationName(s.activation);
}

nlohmann::json ModelSpecToJson(const ModelSpec& s) {
  nlohmann::json j;
  j["name"] = s.name;
  j["model_type"] = s.model_type;
  j["arch"] = ArchKindName(s.arch);
  j["num_layers"] = s.num_layers;
  j["hidden_size"] = s.hidden_size;
  j["num_heads"] = s.num_heads;
  j["num_kv_heads"] = s.num_kv_heads;
  j["head_dim"] = s.head_dim;
  j["attention"] = s.num_kv_heads == s.num_heads ? "mha" : (s.num_kv_heads == 1 ? "mqa" : "gqa");
  j["ffn_hidden_size"] = s.ffn_hidden_size;
  j["vocab_size"] = s.vocab_size;
  j["max_positions"] = s.max_positions;
  j["norm"] = NormKindName(s.norm);
  j["norm_placement"] = NormPlacementName(s.norm_placement);
  j["norms_per_layer"] = s.norms_per_layer;
  j["gemma_norm"] = s.gemma_norm;
  j["final_norm"] = s.final_norm;
  j["activation"] = ActivationName(s.activation);
  j["gated_mlp"] = s.gated_mlp;
  j["mlp"] = MlpKindName(s);
  j["bias"] = {{"qkv", s.qkv_bias},
               {"attn_out", s.attn_out_bias},
               {"mlp", s.mlp_bias},
               {"norm", s.norm_bias},
               {"lm_head", s.lm_head_bias}};
  j["qk_norm"] = s.qk_norm == QkNorm::kNone      ? nullptr
                 : s.qk_norm == QkNorm::kPerHead ? nlohmann::json("per_head")
                                                 : nlohmann::json("full");
  j["attention_sinks"] = s.attention_sinks;
  j["sliding_window"] = s.sliding_window;
  j["sliding_layers"] = s.sliding_layers;
  j["attn_softcap"] = s.attn_softcap;
  j["final_softcap"] = s.final_softcap;
  if (s.mla.enabled()) {
    j["mla"] = {{"q_lora_rank", s.mla.q_lora_rank},
                {"kv_lora_rank", s.mla.kv_lora_rank},
                {"qk_nope_head_dim", s.mla.qk_nope_head_dim},
                {"qk_rope_head_dim", s.mla.qk_rope_head_dim},
                {"v_head_dim", s.mla.v_head_dim}};
  }
  if (s.mtp_layers > 0) j["mtp_layers"] = s.mtp_layers;
  j["parallel_attn_mlp"] = s.parallel_attn_mlp;
  j["position_embedding"] = PositionKindName(s.position);
  j["tied_embeddings"] = s.tied_embeddings;
  if (s.type_vocab_size > 0) j["type_vocab_size"] = s.type_vocab_size;
  if (s.embedding_proj_dim > 0) j["embedding_proj_dim"] = s.embedding_proj_dim;
  j["embedding_norm"] = s.embedding_norm;
  j["pooler"] = s.pooler;
  j["hidden_dropout"] = s.hidden_dropout;
  j["attention_dropout"] = s.attention_dropout;
  if (s.moe.enabled()) {
    j["moe"] = {{"num_experts", s.moe.num_experts},
                {"experts_per_token", s.moe.experts_per_token},
                {"ffn_hidden_size", s.moe.ffn_hidden_size},
                {"num_shared_experts", s.moe.num_shared_experts},
                {"shared_ffn_hidden_size", s.moe.shared_ffn_hidden_size},
                {"shared_expert_gate", s.moe.shared_expert_gate},
                {"router_bias", s.moe.router_bias},
                {"expert_bias", s.moe.expert_bias},
                {"stacked_experts", s.moe.stacked_experts},
                {"fp32_router", s.moe.fp32_router},
                {"layer_freq", s.moe.layer_freq},
                {"dense_layers", s.moe.dense_layers},
                {"num_moe_layers", s.num_moe_layers()}};
  } else {
    j["moe"] = nullptr;
  }
  return j;
}

namespace {
bool SameShape(const LayerParams& a, const LayerParams& b) {
  return a.attention == b.attention && a.mlp == b.mlp && a.router == b.router &&
         a.shared_experts == b.shared_experts && a.norms == b.norms && a.moe == b.moe;
}
}  // namespace

nlohmann::json ParamCountsToJson(const ParamCounts& c) {
  nlohmann::json j;
  j["total"] = c.total;
  j["active"] = c.active;
  j["embedding"] = c.embedding();
  j["embedding_detail"] = {{"token", c.token_embedding},
                           {"position", c.position_embedding},
                           {"token_type", c.token_type_embedding},
                           {"norm", c.embedding_norm},
                           {"projection", c.embedding_proj}};
  j["layers_total"] = c.layers_total();
  j["final_norm"] = c.final_norm;
  j["head"] = c.head();
  j["head_detail"] = {{"lm_head", c.lm_head}, {"extra", c.head_extra}};
  auto& groups = j["per_layer"] = nlohmann::json::array();
  size_t i = 0;
  while (i < c.layers.size()) {
    size_t k = i;
    while (k + 1 < c.layers.size() && SameShape(c.layers[k + 1], c.layers[i])) ++k;
    const auto& l = c.layers[i];
    groups.push_back({{"layers", {i, k}},
                      {"count", k - i + 1},
                      {"kind", l.moe ? "moe" : "dense"},
                      {"params", l.total()},
                      {"active", l.active},
                      {"attention", l.attention},
                      {"mlp", l.mlp},
                      {"router", l.router},
                      {"shared_experts", l.shared_experts},
                      {"norms", l.norms}});
    i = k + 1;
  }
  return j;
}

}  // namespace frenzy
