#include "memory/finetune.h"

#include <algorithm>

namespace frenzy {
namespace {

void AddMlp(std::vector<LinearWeight>& out, const ModelSpec& m, int64_t ffn, int64_t count,
            double rows) {
  const int64_t h = m.hidden_size;
  if (m.gated_mlp) out.push_back({kLoraGate, h, ffn, count, rows});
  out.push_back({kLoraUp, h, ffn, count, rows});
  out.push_back({kLoraDown, ffn, h, count, rows});
}

}  // namespace

std::vector<LinearWeight> LayerLinearWeights(const ModelSpec& m, bool moe_layer,
                                             bool fused_qkv) {
  std::vector<LinearWeight> out;
  const int64_t h = m.hidden_size;
  if (m.mla.enabled()) {
    // DeepSeek's q_a/q_b (or q_proj), kv_a_proj_with_mqa, kv_b_proj, o_proj.
    const MlaSpec& l = m.mla;
    const int64_t q = m.num_heads * l.qk_head_dim();
    if (l.q_lora_rank > 0) {
      out.push_back({kLoraQ, h, l.q_lora_rank});
      out.push_back({kLoraQ, l.q_lora_rank, q});
    } else {
      out.push_back({kLoraQ, h, q});
    }
    out.push_back({kLoraK | kLoraV, h, l.kv_lora_rank + l.qk_rope_head_dim});
    out.push_back({kLoraK | kLoraV, l.kv_lora_rank, m.num_heads * (l.qk_nope_head_dim + l.v_head_dim)});
    out.push_back({kLoraO, m.num_heads * l.v_head_dim, h});
  } else if (fused_qkv || m.fused_qkv()) {
    out.push_back({kLoraQ | kLoraK | kLoraV, h, m.q_size() + 2 * m.kv_size()});
    out.push_back({kLoraO, m.q_size(), h});
  } else {
    out.push_back({kLoraQ, h, m.q_size()});
    out.push_back({kLoraK, h, m.kv_size()});
    out.push_back({kLoraV, h, m.kv_size()});
    out.push_back({kLoraO, m.q_size(), h});
  }
  if (!moe_layer) {
    AddMlp(out, m, m.ffn_hidden_size, 1, 1.0);
    return out;
  }
  const MoeSpec& e = m.moe;
  // The router is a linear layer (quantised by bitsandbytes) that PEFT's names do not select.
  out.push_back({0, h, e.num_experts});
  if (!e.stacked_experts) {
    // Each expert sees an even share of the top-k routed tokens.
    const double rows = static_cast<double>(e.experts_per_token) /
                        static_cast<double>(std::max<int64_t>(1, e.num_experts));
    AddMlp(out, m, e.ffn_hidden_size, e.num_experts, rows);
  }
  if (e.num_shared_experts > 0) AddMlp(out, m, e.shared_ffn_hidden_size, 1, 1.0);
  return out;
}

int64_t LayerAdapterParams(const ModelSpec& m, const LoraSpec& lora, bool moe_layer) {
  int64_t n = 0;
  for (const LinearWeight& w : LayerLinearWeights(m, moe_layer)) {
    if ((w.target & lora.targets) != 0) n += w.count * lora.rank * (w.in + w.out);
  }
  return n;
}

int64_t LayerLinearElements(const ModelSpec& m, bool moe_layer) {
  int64_t n = 0;
  for (const LinearWeight& w : LayerLinearWeights(m, moe_layer)) n += w.count * w.in * w.out;
  return n;
}

bool ShardedQlora(const TrainingSpec& t, const ParallelPlan& p) {
  return t.finetune == FineTune::kQlora &&
         (t.framework == Framework::kFsdp || (t.framework == Framework::kDeepSpeed && p.zero >= 3));
}

LoraSpec LoraAsRun(const TrainingSpec& t, const ParallelPlan& p) {
  LoraSpec l = t.lora;
  if (ShardedQlora(t, p)) l.upcast_rest = false;
  return l;
}

double Nf4BytesPerWeight(bool double_quant) {
  return double_quant ? 0.5 + 1.0 / 64.0 + 4.0 / (64.0 * 256.0) : 0.5 + 4.0 / 64.0;
}

int64_t HeadAdapterParams(const ModelSpec& m, const LoraSpec& lora) {
  if ((lora.targets & kLoraHead) == 0) return 0;
  return lora.rank * (m.embedding_width() + m.vocab_size);
}

int64_t ModelAdapterParams(const ModelSpec& m, const LoraSpec& lora) {
  const int64_t n_moe = m.num_moe_layers();
  const int64_t sparse = n_moe > 0 ? n_moe * LayerAdapterParams(m, lora, true) : 0;
  return (m.num_layers - n_moe) * LayerAdapterParams(m, lora, false) + sparse +
         HeadAdapterParams(m, lora);
}

double ModelActiveAdapterParams(const ModelSpec& m, const LoraSpec& lora) {
  auto layer = [&](bool moe) {
    double n = 0;
    for (const LinearWeight& w : LayerLinearWeights(m, moe)) {
      if ((w.target & lora.targets) == 0) continue;
      n += static_cast<double>(w.count) * w.rows_per_token *
           static_cast<double>(lora.rank * (w.in + w.out));
    }
    return n;
  };
  const int64_t n_moe = m.num_moe_layers();
  return static_cast<double>(m.num_layers - n_moe) * layer(false) +
         (n_moe > 0 ? static_cast<double>(n_moe) * layer(true) : 0.0) +
         static_cast<double>(HeadAdapterParams(m, lora));
}

int64_t ModelLinearElements(const ModelSpec& m) {
  const int64_t n_moe = m.num_moe_layers();
  return (m.num_layers - n_moe) * LayerLinearElements(m, false) +
         (n_moe > 0 ? n_moe * LayerLinearElements(m, true) : 0);
}

}  // namespace frenzy
