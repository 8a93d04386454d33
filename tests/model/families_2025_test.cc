// The second wave of families (model/hf_readers_2025.cc): each reader's published parameter
// total, decomposed by hand from the released config, and the hybrids refused with a reason.
#include <gtest/gtest.h>

#include <string>

#include "model/hf_config.h"
#include "model/param_count.h"
#include "parse_config.h"

namespace frenzy {
namespace {

using test::Parse;

TEST(Families2025, PhiSharesOneNormAndBiasesEverything) {
  // microsoft/phi-2's config. By hand: embed 51,200 x 2,560 = 131,072,000; a layer: q, k, v,
  // dense 4 x (2,560^2 + 2,560) = 26,224,640, fc1 2,560 x 10,240 + 10,240 = 26,224,640, fc2
  // 10,240 x 2,560 + 2,560 = 26,216,960, one LayerNorm 5,120: 78,671,360, 32 layers
  // 2,517,483,520; final LayerNorm 5,120; LM head with bias 131,123,200: 2,779,683,840, the
  // checkpoint's "2.78B".
  ModelSpec s = Parse(R"({"model_type": "phi", "vocab_size": 51200, "hidden_size": 2560,
      "intermediate_size": 10240, "num_hidden_layers": 32, "num_attention_heads": 32,
      "partial_rotary_factor": 0.4, "resid_pdrop": 0.1, "hidden_act": "gelu_new"})");
  EXPECT_TRUE(s.parallel_attn_mlp);
  EXPECT_EQ(s.norms_per_layer, 1);
  EXPECT_TRUE(s.lm_head_bias);
  EXPECT_DOUBLE_EQ(s.hidden_dropout, 0.1);
  EXPECT_EQ(TotalParams(s), 2'779'683'840);
  // PhiConfig's defaults are phi-1's shape: 1,418,270,720 for phi-1.5 (same sizes) by the same
  // decomposition (a layer 50,354,176).
  EXPECT_EQ(TotalParams(Parse(R"({"model_type": "phi"})")), 1'418'270'720);
  auto qk = ParseHfConfigText(R"({"model_type": "phi", "qk_layernorm": true})", "phi.json");
  ASSERT_FALSE(qk.ok());
  EXPECT_NE(qk.status().ToString().find("qk_layernorm"), std::string::npos);
}

TEST(Families2025, GraniteAndSmolLm3AreLlamaBlocks) {
  // ibm-granite/granite-3.1-8b: embed 49,155 x 4,096 = 201,338,880 (tied); a layer: q and o
  // 4,096^2 each, k and v 4,096 x 1,024 each = 41,943,040, MLP 3 x 4,096 x 12,800 =
  // 157,286,400, two norms 8,192: 199,237,632, 40 layers 7,969,505,280; final norm 4,096:
  // 8,170,848,256 ("8.17B").
  ModelSpec g = Parse(R"({"model_type": "granite", "vocab_size": 49155, "hidden_size": 4096,
      "intermediate_size": 12800, "num_hidden_layers": 40, "num_attention_heads": 32,
      "num_key_value_heads": 8, "tie_word_embeddings": true, "embedding_multiplier": 12.0,
      "residual_multiplier": 0.22, "attention_multiplier": 0.0078125,
      "logits_scaling": 16.0})");
  EXPECT_EQ(TotalParams(g), 8'170'848'256);
  // SmolLM3Config's defaults are SmolLM3-3B: embed 128,256 x 2,048 = 262,668,288 (tied); a
  // layer: q and o 2,048^2 each, k and v 2,048 x 512 each = 10,485,760, MLP 3 x 2,048 x 11,008
  // = 67,633,152, norms 4,096: 78,123,008, 36 layers 2,812,428,288; final norm 2,048:
  // 3,075,098,624 ("3.08B").
  ModelSpec smol = Parse(R"({"model_type": "smollm3"})");
  EXPECT_EQ(smol.num_kv_heads, 4);
  EXPECT_TRUE(smol.tied_embeddings);
  EXPECT_EQ(TotalParams(smol), 3'075'098'624);
}

TEST(Families2025, StableLmLayerNormsQkvBiasAndParallelResidual) {
  // stabilityai/stablelm-2-1_6b: embed 100,352 x 2,048 = 205,520,896; a layer: q, k, v with
  // biases 3 x (2,048^2 + 2,048) = 12,589,056, o 4,194,304, MLP 3 x 2,048 x 5,632 =
  // 34,603,008, two LayerNorms 8,192: 51,394,560, 24 layers 1,233,469,440; final LayerNorm
  // 4,096; untied head 205,520,896: 1,644,515,328.
  ModelSpec s = Parse(R"({"model_type": "stablelm", "vocab_size": 100352, "hidden_size": 2048,
      "intermediate_size": 5632, "num_hidden_layers": 24, "num_attention_heads": 32,
      "num_key_value_heads": 32, "use_qkv_bias": true})");
  EXPECT_EQ(s.norm, NormKind::kLayerNorm);
  EXPECT_EQ(TotalParams(s), 1'644'515'328);
  // With use_parallel_residual one norm a layer; with qk_layernorm a bias-free LayerNorm per
  // head: tiny by hand, embed 10 x 16 = 160; a layer: q, k, v, o 4 x 256 = 1,024, MLP 3 x 16 x
  // 32 = 1,536, q norms 4 heads x 4 + k norms 2 x 4 = 24, one LayerNorm 32: 2,616; final 32;
  // head 160: 2,968.
  ModelSpec p = Parse(R"({"model_type": "stablelm", "vocab_size": 10, "hidden_size": 16,
      "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
      "num_key_value_heads": 2, "use_parallel_residual": true, "qk_layernorm": true})");
  EXPECT_EQ(p.norms_per_layer, 1);
  // k, v at 2 kv heads of 4: 16 x 8 each; so the attention is 2 x 256 + 2 x 128 = 768.
  EXPECT_EQ(TotalParams(p), 160 + (768 + 1'536 + 24 + 32) + 32 + 160);
}

TEST(Families2025, OlmoeRoutesEveryLayerWithFullWidthQkNorms) {
  // allenai/OLMoE-1B-7B-0924: embed 50,304 x 2,048 = 103,022,592; a layer: attention 4 x
  // 2,048^2 = 16,777,216, q and k norms 2 x 2,048, router 64 x 2,048 = 131,072, 64 experts of
  // 3 x 2,048 x 1,024 = 402,653,184, two norms 4,096: 419,569,664, 16 layers 6,713,114,624;
  // final norm 2,048; untied head 103,022,592: 6,919,161,856 ("6.92B").
  ModelSpec s = Parse(R"({"model_type": "olmoe", "intermediate_size": 1024})");
  EXPECT_EQ(s.qk_norm, QkNorm::kFull);
  EXPECT_EQ(s.moe.num_experts, 64);
  EXPECT_EQ(s.moe.experts_per_token, 8);
  EXPECT_EQ(TotalParams(s), 6'919'161'856);
}

TEST(Families2025, Glm45AirDenseFirstLayerSharedExpertAndMtp) {
  // zai-org/GLM-4.5-Air: attention q 4,096 x 12,288 + 12,288 = 50,343,936, k and v 4,096 x
  // 1,024 + 1,024 each = 8,390,656, o 12,288 x 4,096 = 50,331,648: 109,066,240; norms 8,192.
  // Layer 0 dense, MLP 3 x 4,096 x 10,944 = 134,479,872: 243,554,304. The other 45: router
  // 128 x 4,096 = 524,288, 128 experts 3 x 4,096 x 1,408 each = 2,214,592,512, the shared
  // expert 17,301,504: 2,341,492,736 a layer, 105,367,173,120. Embed and head 151,552 x 4,096
  // = 620,756,992 each, final norm 4,096: 106,852,245,504 ("106B total").
  ModelSpec s = Parse(R"({"model_type": "glm4_moe", "attention_bias": true,
      "first_k_dense_replace": 1, "head_dim": 128, "hidden_size": 4096,
      "intermediate_size": 10944, "moe_intermediate_size": 1408, "n_routed_experts": 128,
      "n_shared_experts": 1, "num_attention_heads": 96, "num_experts_per_tok": 8,
      "num_hidden_layers": 46, "num_key_value_heads": 8, "num_nextn_predict_layers": 1,
      "partial_rotary_factor": 0.5, "use_qk_norm": false, "vocab_size": 151552})");
  EXPECT_EQ(s.moe.dense_layers, std::vector<int64_t>{0});
  EXPECT_TRUE(s.moe.fp32_router);
  EXPECT_EQ(s.mtp_layers, 1);
  EXPECT_EQ(TotalParams(s), 106'852'245'504);
}

TEST(Families2025, HybridLinearAttentionModelsAreRefusedWithTheReason) {
  for (const char* type : {"qwen3_next", "nemotron_h", "falcon_h1", "granitemoehybrid"}) {
    Status e = test::ParseError(std::string(R"({"model_type": ")") + type + R"("})");
    EXPECT_NE(e.ToString().find("not supported yet"), std::string::npos) << e.ToString();
    EXPECT_NE(e.ToString().find("hybrid"), std::string::npos) << e.ToString();
  }
}

}  // namespace
}  // namespace frenzy
