// Exact parameter counts of a ModelSpec, as HuggingFace's modules would build it.
//
// The count equals `sum(p.numel() for p in model.parameters())` of the transformers model built
// from the same config: every weight, bias, norm, position table and router is counted, a tied
// LM head once. Non-persistent buffers (rotary inv_freq, causal masks) are not parameters.
// The per-layer breakdown is what the memory model splits across pipeline stages.
#ifndef FRENZY_MODEL_PARAM_COUNT_H_
#define FRENZY_MODEL_PARAM_COUNT_H_

#include <cstdint>
#include <vector>

#include "model/model_spec.h"

namespace frenzy {

// Which head sits on the model. kDefault: causal LM for decoders (the *ForCausalLM class), the
// bare encoder with its pooler for encoders (BertModel/RobertaModel).
enum class HeadKind { kDefault, kCausalLm, kMaskedLm, kNone };

struct LayerParams {
  int64_t attention = 0;       // q, k, v, output projections with biases
  int64_t mlp = 0;             // dense MLP, or all routed experts of an MoE layer
  int64_t router = 0;          // MoE gate
  int64_t shared_experts = 0;  // shared expert(s) and their gate
  int64_t norms = 0;
  // Parameters one token's forward pass uses (routed experts: top-k of them).
  int64_t active = 0;
  bool moe = false;

  int64_t total() const { return attention + mlp + router + shared_experts + norms; }
};

struct ParamCounts {
  int64_t token_embedding = 0;
  int64_t position_embedding = 0;
  int64_t token_type_embedding = 0;
  int64_t embedding_norm = 0;
  int64_t embedding_proj = 0;  // OPT-350m project_in/project_out
  std::vector<LayerParams> layers;
  int64_t final_norm = 0;
  int64_t lm_head = 0;         // 0 when tied to the token embedding
  int64_t head_extra = 0;      // pooler, or the masked-LM transform and output bias
  int64_t total = 0;
  int64_t active = 0;  // parameters used per token (differs from total for MoE)
  // Parameters of modules a checkpoint carries that the HuggingFace model does not build
  // (DeepSeek-V3's multi-token prediction), not in `total`.
  int64_t mtp = 0;

  int64_t embedding() const {
    return token_embedding + position_embedding + token_type_embedding + embedding_norm;
  }
  int64_t layers_total() const;
  int64_t head() const { return lm_head + head_extra; }
};

// REQUIRES: spec.Validate().ok(). With per_layer = false, `layers` stays empty (the totals are
// still exact): the fast path for callers that only need sums.
ParamCounts CountParams(const ModelSpec& spec, HeadKind head = HeadKind::kDefault,
                        bool per_layer = true);

// The parameters of one layer: a dense layer, or an MoE layer when `moe` is true.
LayerParams CountLayerParams(const ModelSpec& spec, bool moe);

// Convenience: CountParams(spec).total.
int64_t TotalParams(const ModelSpec& spec);

}  // namespace frenzy

#endif  // FRENZY_MODEL_PARAM_COUNT_H_
