// ModelSpec: a transformer architecture, exactly enough to count its parameters and (in the
// memory and performance models) the tensors and FLOPs of training it.
//
// A ModelSpec is an immutable value, built once (from a HuggingFace config.json or the zoo) and
// validated once: `Validate()` returns every problem with its field. It knows nothing of GPUs.
//
// Shapes follow HuggingFace's modules: attention projects `hidden_size` to `num_heads * head_dim`
// queries and `num_kv_heads * head_dim` keys and values (head_dim need not be hidden/heads, e.g.
// Gemma), and back to `hidden_size`. A 2-matrix MLP is up/down (GELU/ReLU); a gated 3-matrix MLP
// is gate/up/down (SwiGLU, GeGLU). MoE layers replace the MLP by `num_experts` expert MLPs of
// `moe_ffn_hidden_size`, a router, and optionally shared experts.
#ifndef FRENZY_MODEL_MODEL_SPEC_H_
#define FRENZY_MODEL_MODEL_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace frenzy {

enum class ArchKind { kDecoder, kEncoder };
enum class NormKind { kLayerNorm, kRmsNorm };
// Activation of the MLP. Gated MLPs apply it to the gate branch.
enum class Activation { kGelu, kGeluTanh, kRelu, kSilu };
enum class PositionKind { kLearned, kRotary, kAlibi };

// A norm on the queries and keys before rotary: over each head's head_dim (Qwen3, Gemma-3) or
// over the whole projection (OLMo-2).
enum class QkNorm { kNone, kPerHead, kFull };

const char* ArchKindName(ArchKind k);
const char* NormKindName(NormKind k);
const char* ActivationName(Activation a);
const char* PositionKindName(PositionKind p);

// Where the layer norms of a block sit and how many there are.
enum class NormPlacement {
  kPreNorm,   // x + Attn(LN(x)); x + MLP(LN(x)): two norms a layer, final norm (GPT-2, Llama)
  kPostNorm,  // LN(x + Attn(x)); LN(x + MLP(x)): two norms a layer, no final norm (BERT)
  // x + LN(Attn(x)); x + LN(MLP(x)): norms on the sublayers' outputs, final norm (OLMo-2)
  kPostSublayer,
};

const char* NormPlacementName(NormPlacement p);

struct MoeSpec {
  int64_t num_experts = 0;          // 0: dense model
  int64_t experts_per_token = 0;    // top-k
  int64_t ffn_hidden_size = 0;      // each routed expert's intermediate size
  int64_t num_shared_experts = 0;   // experts every token goes through
  int64_t shared_ffn_hidden_size = 0;  // intermediate size of the shared expert(s), total
  bool shared_expert_gate = false;  // sigmoid gate on the shared expert (Qwen2-MoE)
  bool router_bias = false;         // the router Linear has a bias (GPT-OSS)
  bool expert_bias = false;         // expert matrices have biases (GPT-OSS)
  // The experts are slices of stacked parameters and run a clamped SwiGLU (GPT-OSS's
  // GptOssExperts), not a list of MLP modules.
  bool stacked_experts = false;
  // The router runs in fp32 on fp32 copies of its input and weight, and the routed outputs are
  // accumulated in fp32 (DeepSeek-V3's DeepseekV3MoE).
  bool fp32_router = false;

  // Layer i is an MoE layer iff (i + 1) % layer_freq == 0 and i is not in dense_layers.
  int64_t layer_freq = 1;
  std::vector<int64_t> dense_layers;

  bool enabled() const { return num_experts > 0; }
};

// Multi-head latent attention (DeepSeek-V2/V3): queries through an optional low-rank
// bottleneck, keys and values through one shared compressed latent of kv_lora_rank plus a
// rotary key part shared by all heads, each up-projected per head.
struct MlaSpec {
  int64_t q_lora_rank = 0;   // 0: queries projected directly from the hidden state
  int64_t kv_lora_rank = 0;  // 0: no MLA
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;

  bool enabled() const { return kv_lora_rank > 0; }
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

struct ModelSpec {
  std::string name;        // zoo name or a name derived from the config file
  std::string model_type;  // HuggingFace model_type, e.g. "llama"
  ArchKind arch = ArchKind::kDecoder;

  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // == num_heads for MHA, 1 for MQA, in between for GQA
  int64_t head_dim = 0;
  int64_t ffn_hidden_size = 0;  // MLP intermediate size of dense layers
  int64_t vocab_size = 0;
  int64_t max_positions = 0;  // longest sequence the model was built for

  NormKind norm = NormKind::kLayerNorm;
  NormPlacement norm_placement = NormPlacement::kPreNorm;
  bool norm_bias = true;  // LayerNorm with a bias (false for RMSNorm)
  // RMSNorm in Gemma's form, (x_norm * (1 + w.float())).to(dtype): x_norm stays fp32.
  bool gemma_norm = false;
  Activation activation = Activation::kGelu;
  bool gated_mlp = false;  // 3-matrix gate/up/down MLP

  bool qkv_bias = false;       // bias on the query/key/value projections
  bool attn_out_bias = false;  // bias on the attention output projection
  bool mlp_bias = false;       // bias on the MLP matrices

  // Attention and MLP read the same input and are summed (GPT-J, GPT-NeoX, Falcon, PaLM).
  bool parallel_attn_mlp = false;
  // Layer norms per block: 2 usually; 1 when a parallel block shares its input norm (Falcon-7B);
  // 4 with norms before and after both sublayers (Gemma-2/3, GLM-4).
  int64_t norms_per_layer = 2;
  bool final_norm = true;  // a norm after the last block (false for BERT-style post-norm)

  PositionKind position = PositionKind::kRotary;
  // Rows of the learned position table: max_positions + offset (OPT keeps 2 extra rows).
  int64_t position_offset = 0;
  bool tied_embeddings = false;  // the LM head reuses the token embedding matrix

  // Embedding extras.
  int64_t type_vocab_size = 0;        // token-type (segment) embeddings (BERT)
  bool embedding_norm = false;        // a norm right after the embeddings (BERT, BLOOM)
  int64_t embedding_proj_dim = 0;     // OPT-350m: embeddings of this width, projected in/out
  bool pooler = false;                // BERT/RoBERTa pooler (dense hidden x hidden + bias)

  // Dropout probabilities in training (from the config). Attention dropout makes eager
  // attention keep a mask of the score matrix for backward.
  double hidden_dropout = 0.0;
  double attention_dropout = 0.0;

  MoeSpec moe;
  MlaSpec mla;  // with MLA, head_dim is the query/key head width (nope + rope)
  QkNorm qk_norm = QkNorm::kNone;
  bool attention_sinks = false;  // a learned logit per head joins every softmax (GPT-OSS)
  bool lm_head_bias = false;     // the LM head has a bias (Phi-3.5-MoE)
  // Sliding-window attention: `sliding_layers` of the layers attend to the last
  // `sliding_window` tokens only (0: none). No parameters, and no memory term (the masked
  // scores have the full shape); the perf model does not yet use it.
  int64_t sliding_window = 0;
  int64_t sliding_layers = 0;
  double attn_softcap = 0;   // tanh soft-capping of attention logits (Gemma-2); 0: none
  double final_softcap = 0;  // ... and of the output logits (Gemma-2: 30); 0: none
  // Multi-token-prediction modules a checkpoint carries beside the model (DeepSeek-V3); the
  // HuggingFace model does not build them, so they are counted apart.
  int64_t mtp_layers = 0;
  // What a multimodal wrapper's config had that this spec leaves out (its text model is what
  // is trained), e.g. "vision tower (siglip_vision_model) and multimodal projector".
  std::string left_out;

  // Derived sizes.
  int64_t q_size() const { return num_heads * head_dim; }
  int64_t kv_size() const { return num_kv_heads * head_dim; }
  int64_t embedding_width() const {
    return embedding_proj_dim > 0 ? embedding_proj_dim : hidden_size;
  }
  bool IsMoeLayer(int64_t layer) const;
  int64_t num_moe_layers() const;
  // q, k and v come from one fused projection (GPT-2's c_attn, GPT-NeoX's query_key_value,
  // BLOOM, Falcon, Phi-3's qkv_proj): one linear layer reads the attention's norm output.
  bool fused_qkv() const;

  // Every problem with the ModelSpec field it concerns (empty when none).
  struct Problem {
    std::string field;
    std::string message;
  };
  std::vector<Problem> Problems() const;
  // An upper bound of the parameter count, computed without overflow. Models above
  // kMaxParams are rejected so that every exact count fits comfortably in int64_t.
  double UpperBoundParams() const;
  static constexpr double kMaxParams = 1e15;
  // OK, or InvalidArgument naming `where`, the first bad field and every problem.
  Status Validate(const std::string& where = {}) const;
};

}  // namespace frenzy

#endif  // FRENZY_MODEL_MODEL_SPEC_H_
