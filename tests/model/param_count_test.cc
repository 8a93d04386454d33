#include "model/param_count.h"

#include <gtest/gtest.h>

#include "model/hf_config.h"
#include "parse_config.h"

namespace frenzy {
namespace {

using test::Parse;

// Hand-derived counts of tiny models, matrix by matrix.

TEST(ParamCount, TinyLlamaByHand) {
  ModelSpec s = Parse(R"({"model_type": "llama", "vocab_size": 100, "hidden_size": 16,
      "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2})");
  ParamCounts c = CountParams(s);
  // q 16x16, k and v 16x8 each, o 16x16.
  EXPECT_EQ(c.layers[0].attention, 256 + 128 + 128 + 256);
  EXPECT_EQ(c.layers[0].mlp, 3 * 16 * 40);
  EXPECT_EQ(c.layers[0].norms, 2 * 16);  // RMSNorm: weight only
  EXPECT_EQ(c.token_embedding, 1600);
  EXPECT_EQ(c.lm_head, 1600);  // untied
  EXPECT_EQ(c.final_norm, 16);
  EXPECT_EQ(c.total, 2 * (768 + 1920 + 32) + 1600 + 1600 + 16);
  EXPECT_EQ(c.active, c.total);
}

TEST(ParamCount, TyingEmbeddingsRemovesTheHead) {
  const char* base = R"({"model_type": "llama", "vocab_size": 100, "hidden_size": 16,
      "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
      "tie_word_embeddings": %s})";
  char tied[512], untied[512];
  std::snprintf(tied, sizeof tied, base, "true");
  std::snprintf(untied, sizeof untied, base, "false");
  EXPECT_EQ(TotalParams(Parse(untied)) - TotalParams(Parse(tied)), 100 * 16);
}

TEST(ParamCount, TinyGpt2ByHand) {
  ModelSpec s = Parse(R"({"model_type": "gpt2", "vocab_size": 50, "n_positions": 8,
      "n_embd": 12, "n_layer": 1, "n_head": 3})");
  ParamCounts c = CountParams(s);
  EXPECT_EQ(c.token_embedding, 600);
  EXPECT_EQ(c.position_embedding, 96);
  EXPECT_EQ(c.layers[0].attention, (12 * 36 + 36) + (12 * 12 + 12));
  EXPECT_EQ(c.layers[0].mlp, (12 * 48 + 48) + (48 * 12 + 12));
  EXPECT_EQ(c.layers[0].norms, 2 * 24);
  EXPECT_EQ(c.final_norm, 24);
  EXPECT_EQ(c.lm_head, 0);  // tied
  EXPECT_EQ(c.total, 2604);
}

TEST(ParamCount, OptKeepsTwoExtraPositionRowsAndProjections) {
  ModelSpec s = Parse(R"({"model_type": "opt", "vocab_size": 10, "hidden_size": 8,
      "word_embed_proj_dim": 4, "ffn_dim": 16, "num_hidden_layers": 1,
      "num_attention_heads": 2, "max_position_embeddings": 6, "do_layer_norm_before": false})");
  ParamCounts c = CountParams(s);
  EXPECT_EQ(c.token_embedding, 10 * 4);
  EXPECT_EQ(c.position_embedding, (6 + 2) * 8);
  EXPECT_EQ(c.embedding_proj, 2 * 4 * 8);
  EXPECT_EQ(c.final_norm, 0);  // post-norm OPT has no decoder final norm
}

TEST(ParamCount, MixtralActiveParamsUseTopK) {
  ModelSpec s = Parse(R"({"model_type": "mixtral", "vocab_size": 10, "hidden_size": 8,
      "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
      "num_key_value_heads": 1, "num_local_experts": 4, "num_experts_per_tok": 2})");
  ParamCounts c = CountParams(s);
  int64_t expert = 3 * 8 * 16;
  EXPECT_EQ(c.layers[0].mlp, 4 * expert);
  EXPECT_EQ(c.layers[0].router, 8 * 4);
  EXPECT_EQ(c.total - c.active, 2 * expert);
}

TEST(ParamCount, Qwen2MoeSharedExpertAndGate) {
  ModelSpec s = Parse(R"({"model_type": "qwen2_moe", "vocab_size": 10, "hidden_size": 8,
      "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
      "num_key_value_heads": 2, "num_experts": 4, "num_experts_per_tok": 2,
      "moe_intermediate_size": 4, "shared_expert_intermediate_size": 12,
      "mlp_only_layers": [0]})");
  ParamCounts c = CountParams(s);
  EXPECT_FALSE(c.layers[0].moe);
  EXPECT_EQ(c.layers[0].mlp, 3 * 8 * 32);  // dense layer uses intermediate_size
  EXPECT_TRUE(c.layers[1].moe);
  EXPECT_EQ(c.layers[1].mlp, 4 * 3 * 8 * 4);
  EXPECT_EQ(c.layers[1].shared_experts, 3 * 8 * 12 + 8);  // shared MLP + sigmoid gate
}

TEST(ParamCount, MaskedLmHeadReplacesThePooler) {
  ModelSpec s = Parse(R"({"model_type": "bert"})");
  ParamCounts base = CountParams(s);
  ParamCounts mlm = CountParams(s, HeadKind::kMaskedLm);
  int64_t pooler = 768 * 768 + 768;
  int64_t transform = 768 * 768 + 768 + 2 * 768 + 30522;  // dense, LayerNorm, decoder bias
  EXPECT_EQ(mlm.total - base.total, transform - pooler);
}

TEST(ParamCount, GrowsWithEveryDimension) {
  ModelSpec s = Parse(R"({"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4,
      "num_hidden_layers": 2, "intermediate_size": 512, "vocab_size": 1000})");
  int64_t base = TotalParams(s);
  for (auto mutate : std::vector<void (*)(ModelSpec&)>{
           [](ModelSpec& m) { m.num_layers += 1; },
           [](ModelSpec& m) { m.ffn_hidden_size += 1; },
           [](ModelSpec& m) { m.vocab_size += 1; },
           [](ModelSpec& m) { m.qkv_bias = true; },
       }) {
    ModelSpec m = s;
    mutate(m);
    EXPECT_GT(TotalParams(m), base);
  }
}

// Megatron-LM's GPT with --disable-bias-linear and --num-experts 4 --moe-router-topk 1, as a
// GPT-2 config with LlamaConfig's bias keys and MixtralConfig's expert keys (hidden 16, FFN 64,
// vocabulary 100, 8 positions, 2 layers). By hand: attention 4 x 16 x 16 = 1,024 with no bias;
// each expert 16 x 64 + 64 x 16 = 2,048 with no bias, four of them 8,192; the router 16 x 4 = 64;
// two LayerNorms with weight and bias 64; embeddings 1,600 + 128; final norm 32; tied head.
TEST(ParamCount, MegatronGptWithoutLinearBiasesAndWithExperts) {
  ModelSpec s = Parse(R"({"model_type": "gpt2", "n_embd": 16, "n_layer": 2, "n_head": 4,
      "n_inner": 64, "vocab_size": 100, "n_positions": 8, "attention_bias": false,
      "mlp_bias": false, "num_local_experts": 4, "num_experts_per_tok": 1})");
  ParamCounts c = CountParams(s);
  EXPECT_EQ(c.layers[0].attention, 1024);
  EXPECT_EQ(c.layers[0].mlp, 8192);
  EXPECT_EQ(c.layers[0].router, 64);
  EXPECT_EQ(c.layers[0].norms, 64);
  EXPECT_EQ(c.total, 2 * (1024 + 8192 + 64 + 64) + 1600 + 128 + 32);
  // Per token: one expert of four.
  EXPECT_EQ(c.active, 2 * (1024 + 2048 + 64 + 64) + 1600 + 128 + 32);
  // Without the keys it is GPT-2: biases on every linear, one dense MLP.
  ModelSpec d = Parse(R"({"model_type": "gpt2", "n_embd": 16, "n_layer": 2, "n_head": 4,
      "n_inner": 64, "vocab_size": 100, "n_positions": 8})");
  ParamCounts dc = CountParams(d);
  EXPECT_EQ(dc.layers[0].attention, 1024 + 3 * 16 + 16);
  EXPECT_EQ(dc.layers[0].mlp, 2048 + 64 + 16);
  EXPECT_EQ(dc.layers[0].router, 0);
}

}  // namespace
}  // namespace frenzy
