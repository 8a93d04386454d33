#include "model/model_spec.h"

#include <algorithm>

namespace frenzy {

const char* ArchKindName(ArchKind k) {
  return k == ArchKind::kDecoder ? "decoder" : "encoder";
}

const char* NormKindName(NormKind k) { return k == NormKind::kLayerNorm ? "layernorm" : "rmsnorm"; }

const char* ActivationName(Activation a) {
  switch (a) {
    case Activation::kGelu:
      return "gelu";
    case Activation::kGeluTanh:
      return "gelu_tanh";
    case Activation::kRelu:
      return "relu";
    case Activation::kSilu:
      return "silu";
  }
  return "?";
}

const char* NormPlacementName(NormPlacement p) {
  switch (p) {
    case NormPlacement::kPreNorm:
      return "pre";
    case NormPlacement::kPostNorm:
      return "post";
    case NormPlacement::kPostSublayer:
      return "post-sublayer";
  }
  return "?";
}

const char* PositionKindName(PositionKind p) {
  switch (p) {
    case PositionKind::kLearned:
      return "learned";
    case PositionKind::kRotary:
      return "rotary";
    case PositionKind::kAlibi:
      return "alibi";
  }
  return "?";
}

bool ModelSpec::IsMoeLayer(int64_t layer) const {
  if (!moe.enabled()) return false;
  // dense_layers is sorted without repeats (Problems() checks it).
  if (std::binary_search(moe.dense_layers.begin(), moe.dense_layers.end(), layer)) return false;
  return moe.layer_freq > 0 && (layer + 1) % moe.layer_freq == 0;
}

int64_t ModelSpec::num_moe_layers() const {
  if (!moe.enabled()) return 0;
  int64_t n = 0;
  for (int64_t i = 0; i < num_layers; ++i) n += IsMoeLayer(i) ? 1 : 0;
  return n;
}

bool ModelSpec::fused_qkv() const {
  return model_type == "gpt2" || model_type == "gpt_neox" || model_type == "bloom" ||
         model_type == "falcon" || model_type == "phi3";
}

std::vector<ModelSpec::Problem> ModelSpec::Problems() const {
  std::vector<Problem> problems;
  auto add = [&](std::string field, std::string message) {
    problems.push_back({std::move(field), std::move(message)});
  };
  auto need_positive = [&](const char* field, int64_t v) {
    if (v <= 0) add(field, "must be positive, found " + std::to_string(v));
  };
  need_positive("num_layers", num_layers);
  need_positive("hidden_size", hidden_size);
  need_positive("num_heads", num_heads);
  need_positive("num_kv_heads", num_kv_heads);
  need_positive("head_dim", head_dim);
  need_positive("ffn_hidden_size", ffn_hidden_size);
  need_positive("vocab_size", vocab_size);
  if (position == PositionKind::kLearned) need_positive("max_positions", max_positions);
  if (max_positions < 0) add("max_positions", "must not be negative");
  if (num_heads > 0 && num_kv_heads > 0 && num_heads % num_kv_heads != 0) {
    add("num_kv_heads", "must divide num_heads (" + std::to_string(num_heads) +
                                              "), found " + std::to_string(num_kv_heads));
  }
  if (num_kv_heads > num_heads && num_heads > 0) {
    add("num_kv_heads", "must not exceed num_heads");
  }
  if (norms_per_layer < 0 || norms_per_layer > 4 || norms_per_layer == 3) {
    add("norms_per_layer", "must be 0, 1, 2 or 4");
  }
  if (mla.enabled()) {
    need_positive("mla.qk_rope_head_dim", mla.qk_rope_head_dim);
    need_positive("mla.v_head_dim", mla.v_head_dim);
    if (mla.qk_nope_head_dim < 0) add("mla.qk_nope_head_dim", "must not be negative");
    if (mla.q_lora_rank < 0) add("mla.q_lora_rank", "must not be negative");
  } else if (mla.kv_lora_rank < 0) {
    add("mla.kv_lora_rank", "must not be negative");
  }
  if (sliding_window < 0) add("sliding_window", "must not be negative");
  if (sliding_layers < 0 || sliding_layers > num_layers) {
    add("sliding_layers", "must be between 0 and num_layers");
  }
  if (mtp_layers < 0) add("mtp_layers", "must not be negative");
  if (type_vocab_size < 0) add("type_vocab_size", "must not be negative");
  if (embedding_proj_dim < 0) add("embedding_proj_dim", "must not be negative");
  if (position_offset < 0) add("position_offset", "must not be negative");
  if (hidden_dropout < 0 || hidden_dropout >= 1) add("hidden_dropout", "must be in [0, 1)");
  if (attention_dropout < 0 || attention_dropout >= 1) {
    add("attention_dropout", "must be in [0, 1)");
  }
  if (moe.enabled()) {
    need_positive("moe.experts_per_token", moe.experts_per_token);
    need_positive("moe.ffn_hidden_size", moe.ffn_hidden_size);
    need_positive("moe.layer_freq", moe.layer_freq);
    if (moe.experts_per_token > moe.num_experts) {
      add("moe.experts_per_token", "must not exceed the number of experts (" +
                                                         std::to_string(moe.num_experts) + ")");
    }
    if (moe.num_shared_experts < 0) {
      add("moe.num_shared_experts", "must not be negative");
    }
    if (moe.num_shared_experts > 0) need_positive("moe.shared_ffn_hidden_size",
                                                  moe.shared_ffn_hidden_size);
    if (!std::is_sorted(moe.dense_layers.begin(), moe.dense_layers.end()) ||
        std::adjacent_find(moe.dense_layers.begin(), moe.dense_layers.end()) !=
            moe.dense_layers.end()) {
      add("moe.dense_layers", "must list layers in ascending order without repeats");
    }
    if (!moe.dense_layers.empty() &&
        (moe.dense_layers.front() < 0 || moe.dense_layers.back() >= num_layers)) {
      add("moe.dense_layers", "must list layers between 0 and num_layers - 1 (" +
                                  std::to_string(num_layers - 1) + ")");
    }
  } else if (moe.num_experts < 0) {
    add("moe.num_experts", "must not be negative");
  }
  // Overflow guard: the largest matrices must stay far below 2^63 elements.
  constexpr int64_t kMaxDim = int64_t{1} << 24;
  constexpr int64_t kMaxLayers = 1 << 16;
  auto need_sane = [&](const char* field, int64_t v, int64_t limit) {
    if (v > limit) add(field, "implausibly large: " + std::to_string(v));
  };
  need_sane("num_layers", num_layers, kMaxLayers);
  need_sane("hidden_size", hidden_size, kMaxDim);
  need_sane("num_heads", num_heads, kMaxDim);
  need_sane("num_kv_heads", num_kv_heads, kMaxDim);
  need_sane("head_dim", head_dim, kMaxDim);
  need_sane("ffn_hidden_size", ffn_hidden_size, kMaxDim);
  need_sane("vocab_size", vocab_size, kMaxDim);
  need_sane("max_positions", max_positions, kMaxDim);
  need_sane("type_vocab_size", type_vocab_size, kMaxDim);
  need_sane("embedding_proj_dim", embedding_proj_dim, kMaxDim);
  need_sane("moe.num_experts", moe.num_experts, 1 << 14);
  need_sane("moe.ffn_hidden_size", moe.ffn_hidden_size, kMaxDim);
  need_sane("moe.shared_ffn_hidden_size", moe.shared_ffn_hidden_size, kMaxDim);
  need_sane("moe.num_shared_experts", moe.num_shared_experts, 1 << 14);
  need_sane("mla.q_lora_rank", mla.q_lora_rank, kMaxDim);
  need_sane("mla.kv_lora_rank", mla.kv_lora_rank, kMaxDim);
  need_sane("mla.qk_nope_head_dim", mla.qk_nope_head_dim, kMaxDim);
  need_sane("mla.qk_rope_head_dim", mla.qk_rope_head_dim, kMaxDim);
  need_sane("mla.v_head_dim", mla.v_head_dim, kMaxDim);
  need_sane("mtp_layers", mtp_layers, 1 << 8);
  if (problems.empty() && UpperBoundParams() > kMaxParams) {
    add("num_layers", "implausibly large model: more than 10^15 parameters");
  }
  return problems;
}

double ModelSpec::UpperBoundParams() const {
  // Every term of CountParams, each rounded up, in floating point so it cannot overflow.
  double h = static_cast<double>(hidden_size);
  double q = static_cast<double>(q_size()), kv = static_cast<double>(kv_size());
  double ffn = static_cast<double>(ffn_hidden_size);
  double moe_ffn = static_cast<double>(moe.ffn_hidden_size);
  double shared_ffn = static_cast<double>(moe.shared_ffn_hidden_size);
  double experts = static_cast<double>(moe.num_experts);
  double width = static_cast<double>(std::max(hidden_size, embedding_proj_dim));
  double layer = h * (q + 2 * kv) + (q + 2 * kv) + q * h + h + 4 * h + 3 * h * ffn + 2 * ffn +
                 h + experts * (3 * h * moe_ffn + 2 * moe_ffn + h) + h * experts +
                 3 * h * shared_ffn + 2 * shared_ffn + 2 * h + 4 * h + 2 * q + 2 * experts +
                 static_cast<double>(num_heads);
  if (mla.enabled()) {
    // MLA's projections (the standard ones above use head_dim = nope + rope, an overestimate
    // of neither): q_a, q_a norm, q_b, kv_a with the rope part, kv_a norm, kv_b, o.
    double heads = static_cast<double>(num_heads);
    double ql = static_cast<double>(mla.q_lora_rank), kl = static_cast<double>(mla.kv_lora_rank);
    double qk = static_cast<double>(mla.qk_head_dim()), v = static_cast<double>(mla.v_head_dim);
    layer += (h + 1) * ql + ql + (ql + h) * heads * qk +
             (h + 1) * (kl + static_cast<double>(mla.qk_rope_head_dim)) + kl +
             kl * heads * (static_cast<double>(mla.qk_nope_head_dim) + v) + (heads * v + 1) * h;
  }
  double outside = 2 * static_cast<double>(vocab_size) * width +
                   static_cast<double>(max_positions + position_offset) * h +
                   static_cast<double>(type_vocab_size) * h + 2 * width * h + 6 * h + h * h +
                   static_cast<double>(vocab_size);
  return static_cast<double>(num_layers + mtp_layers) * layer + outside +
         static_cast<double>(mtp_layers) * (2 * h * h + 3 * h + outside);
}

Status ModelSpec::Validate(const std::string& where) const {
  auto problems = Problems();
  if (problems.empty()) return Status::Ok();
  std::string msg = problems[0].message;
  for (size_t i = 1; i < problems.size(); ++i) {
    msg += "; also field '" + problems[i].field + "': " + problems[i].message;
  }
  return InvalidArgument(msg, where, problems[0].field);
}

}  // namespace frenzy
