// The 2026 families (issue 16): parsing with each config class's defaults, exact counts derived
// by hand for tiny configs, published totals decomposed, multimodal wrappers, refused types,
// and names as users type them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "model/hf_config.h"
#include "model/param_count.h"
#include "model/zoo.h"
#include "parse_config.h"

namespace frenzy {
namespace {

using test::Parse;

std::string Error(const std::string& text) { return test::ParseError(text).ToString(); }

ModelSpec Zoo(const std::string& name) {
  auto s = FindZooModel(name);
  EXPECT_TRUE(s.has_value()) << name;
  return s.value_or(ModelSpec{});
}

TEST(NewFamilies, Qwen3CountsItsPerHeadQkNorms) {
  // By hand: embed 100x64 = 6,400; a layer: q 64x64 + k 64x32 + v 64x32 + o 64x64 = 12,288,
  // q/k norms 2 x 16, MLP 3 x 64 x 128 = 24,576, norms 2 x 64: 37,024; two layers 74,048;
  // final norm 64; untied head 6,400: 86,912.
  ModelSpec s = Parse(R"({"model_type": "qwen3", "vocab_size": 100, "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 16, "tie_word_embeddings": false})");
  EXPECT_EQ(s.qk_norm, QkNorm::kPerHead);
  EXPECT_EQ(TotalParams(s), 86912);
  // Without head_dim, Qwen3Config's default is 128 (not hidden / heads).
  EXPECT_EQ(Parse(R"({"model_type": "qwen3", "hidden_size": 64, "num_attention_heads": 4,
                      "num_key_value_heads": 4})")
                .head_dim,
            128);
  // Qwen3MoeConfig has no head_dim default: hidden / heads.
  EXPECT_EQ(Parse(R"({"model_type": "qwen3_moe"})").head_dim, 2048 / 32);
}

TEST(NewFamilies, GptOssCountsSinksAndBiasedExperts) {
  // By hand: attention q 32x32+32, k 32x16+16, v 32x16+16, o 32x32+32 = 3,168 and 4 sinks;
  // router 32x4+4 = 132; an expert: gate_up 32x32+32, down 16x32+32 = 1,600, four 6,400;
  // norms 64: a layer 9,768, two 19,536; embed and head 50x32 each, final norm 32: 22,768.
  ModelSpec s = Parse(R"({"model_type": "gpt_oss", "vocab_size": 50, "hidden_size": 32,
      "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 8, "num_local_experts": 4,
      "num_experts_per_tok": 2, "sliding_window": 128,
      "layer_types": ["sliding_attention", "full_attention"]})");
  EXPECT_TRUE(s.attention_sinks);
  EXPECT_EQ(s.sliding_layers, 1);
  EXPECT_EQ(TotalParams(s), 22768);
}

TEST(NewFamilies, DeepseekMlaSharedExpertsDenseFirstLayersAndMtp) {
  // By hand, attention: q_a 32x8, its norm 8, q_b 8x(2x6), kv_a 32x(4+2), its norm 4,
  // kv_b 4x(2x(4+4)), o 8x32 = 876. Layer 0 dense: MLP 3x32x40 = 3,840, norms 64: 4,780.
  // Layer 1 MoE: 4 experts of 3x32x8 = 3,072, router 32x4 = 128, one shared expert 768,
  // norms 64: 4,908. Embed and head 20x32 each, final norm 32: 11,000.
  ModelSpec s = Parse(R"({"model_type": "deepseek_v3", "vocab_size": 20, "hidden_size": 32,
      "intermediate_size": 40, "moe_intermediate_size": 8, "num_hidden_layers": 2,
      "num_attention_heads": 2, "num_key_value_heads": 2, "q_lora_rank": 8,
      "kv_lora_rank": 4, "qk_nope_head_dim": 4, "qk_rope_head_dim": 2, "v_head_dim": 4,
      "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2,
      "first_k_dense_replace": 1, "moe_layer_freq": 1, "num_nextn_predict_layers": 1})");
  EXPECT_TRUE(s.mla.enabled());
  EXPECT_FALSE(s.IsMoeLayer(0));
  EXPECT_TRUE(s.IsMoeLayer(1));
  ParamCounts c = CountParams(s);
  EXPECT_EQ(c.total, 11000);
  // MTP apart: enorm, hnorm and the shared head's norm 3x32, eh_proj 64x32 = 2,048, an MoE
  // layer 4,908, its own embedding and head copies 2 x 640: 8,332.
  EXPECT_EQ(c.mtp, 8332);
  // q_lora_rank null (DeepSeek-V2-Lite): queries projected directly, 32 x 12 instead of
  // 256 + 8 + 96.
  ModelSpec lite = Parse(R"({"model_type": "deepseek_v2", "vocab_size": 20, "hidden_size": 32,
      "intermediate_size": 40, "moe_intermediate_size": 8, "num_hidden_layers": 2,
      "num_attention_heads": 2, "q_lora_rank": null, "kv_lora_rank": 4,
      "qk_nope_head_dim": 4, "qk_rope_head_dim": 2, "v_head_dim": 4, "n_routed_experts": 4,
      "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1})");
  EXPECT_EQ(TotalParams(lite), 11000 - 2 * (256 + 8 + 96) + 2 * 32 * 12);
}

TEST(NewFamilies, DeepseekV3MatchesItsPublishedCheckpointTotals) {
  // Published: microsoft/MAI-DS-R1 (DeepSeek-V3's architecture without the MTP module) holds
  // 671,026,419,200 tensors' elements; DeepSeek-R1 (the same with MTP, FP8 scales aside)
  // 684,489,845,504. Both checkpoints also store e_score_correction_bias, a buffer in
  // transformers (not a parameter): 256 per MoE layer, 58 in the model and 1 in the MTP module.
  ParamCounts c = CountParams(Zoo("deepseek-v3"));
  EXPECT_EQ(c.total + 58 * 256, 671026419200);
  EXPECT_EQ(c.total + c.mtp + 59 * 256, 684489845504);
}

TEST(NewFamilies, Gemma3TextModelMatchesKerasHubWithItsVocabulary) {
  // keras-hub's text-only Gemma-3 presets (gemma3_4b_text, gemma3_27b_text) publish
  // 3,880,099,328 and 27,009,002,240 with a 262,144-token vocabulary; HF's is 262,208.
  for (auto [name, keras] : {std::pair{"gemma-3-4b", int64_t{3880099328}},
                             std::pair{"gemma-3-27b", int64_t{27009002240}}}) {
    ModelSpec s = Zoo(name);
    EXPECT_EQ(s.vocab_size, 262208) << name;
    EXPECT_NE(s.left_out.find("vision_config"), std::string::npos) << s.left_out;
    s.vocab_size = 262144;
    EXPECT_EQ(TotalParams(s), keras) << name;
  }
}

TEST(NewFamilies, Gemma2AndGlm4HaveFourNormsOlmo2FullWidthQkNorms) {
  ModelSpec g = Parse(R"({"model_type": "gemma2"})");
  EXPECT_EQ(g.norms_per_layer, 4);
  EXPECT_EQ(g.head_dim, 256);
  EXPECT_TRUE(g.tied_embeddings);
  EXPECT_EQ(g.sliding_layers, 13);  // the even ones of 26
  EXPECT_DOUBLE_EQ(g.attn_softcap, 50.0);
  ModelSpec glm4 = Parse(R"({"model_type": "glm4"})");
  EXPECT_EQ(glm4.norms_per_layer, 4);
  EXPECT_TRUE(glm4.qkv_bias);
  EXPECT_FALSE(glm4.attn_out_bias);
  EXPECT_EQ(Parse(R"({"model_type": "glm"})").norms_per_layer, 2);
  // OLMo-2: q_norm over 4 x 8 and k_norm over 2 x 8 on top of Llama's count; no input norm,
  // two post-norms (the same count as Llama's pair).
  const char* shape = R"("vocab_size": 10, "hidden_size": 32, "intermediate_size": 8,
      "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2})";
  ModelSpec olmo = Parse(std::string(R"({"model_type": "olmo2", )") + shape);
  ModelSpec llama = Parse(std::string(R"({"model_type": "llama", )") + shape);
  EXPECT_EQ(TotalParams(olmo), TotalParams(llama) + 32 + 16);
}

TEST(NewFamilies, PhiMoeAndStarcoder2Biases) {
  const char* shape = R"("vocab_size": 10, "hidden_size": 32, "intermediate_size": 8,
      "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2)";
  // PhiMoE with biases: LayerNorm biases (3 x 32), q/k/v/o biases (32 + 16 + 16 + 32) and
  // the LM head's (10) on top of the bias-free count.
  ModelSpec plain = Parse(std::string(R"({"model_type": "phimoe", "num_local_experts": 2, )") +
                          shape + "}");
  ModelSpec biased = Parse(std::string(R"({"model_type": "phimoe", "num_local_experts": 2,
      "attention_bias": true, "lm_head_bias": true, )") + shape + "}");
  EXPECT_EQ(TotalParams(biased), TotalParams(plain) + 96 + 10);
  // Its three LayerNorms (two in the layer, the final one) less their biases: a Mixtral of
  // this shape.
  EXPECT_EQ(TotalParams(plain) - 3 * 32,
            TotalParams(Parse(std::string(R"({"model_type": "mixtral", "num_local_experts": 2, )") +
                              shape + "}")));
  // StarCoder2: a 2-matrix MLP with biases, LayerNorms with biases, tied embeddings.
  // By hand: embed 320; attention 32x32+32 + 2 x (32x16+16) + 32x32+32 = 3,168; MLP 32x8+8 +
  // 8x32+32 = 552; norms 2 x 64; final norm 64: 4,232.
  EXPECT_EQ(TotalParams(Parse(std::string(R"({"model_type": "starcoder2", )") + shape + "}")),
            4232);
}

TEST(NewFamilies, MultimodalWrappersTrainTheirTextModel) {
  // Gemma3Config with a sparse text_config: Gemma3TextConfig's defaults fill it.
  ModelSpec s = Parse(R"({"model_type": "gemma3", "text_config": {"hidden_size": 2560,
      "intermediate_size": 10240, "num_hidden_layers": 34},
      "vision_config": {"model_type": "siglip_vision_model"}})");
  EXPECT_EQ(s.model_type, "gemma3_text");
  EXPECT_EQ(s.vocab_size, 262208);
  EXPECT_EQ(s.num_heads, 8);
  EXPECT_EQ(s.qk_norm, QkNorm::kPerHead);
  EXPECT_NE(s.left_out.find("vision_config (siglip_vision_model)"), std::string::npos);
  // Mistral3: a text_config without model_type is a MistralConfig.
  EXPECT_EQ(Parse(R"({"model_type": "mistral3", "text_config": {}})").model_type, "mistral");
  // Any wrapper whose text_config names a supported type.
  EXPECT_EQ(Parse(R"({"model_type": "llava", "text_config": {"model_type": "qwen2"}})").model_type,
            "qwen2");
  // Errors name the nested field.
  std::string e = Error(R"({"model_type": "gemma3", "text_config": {"hidden_size": -1}})");
  EXPECT_NE(e.find("text_config.hidden_size"), std::string::npos) << e;
  e = Error(R"({"model_type": "llava", "text_config": {"model_type": "mamba"}})");
  EXPECT_NE(e.find("wraps a text model of type 'mamba'"), std::string::npos) << e;
}

TEST(NewFamilies, HostileSizesAndLayerListsAreErrorsNamingTheField) {
  // Sizes that would overflow the readers' arithmetic, and layer lists the per-layer lookups
  // would crawl through, are refused with the config's own field name.
  std::string e = Error(R"({"model_type": "gemma2", "num_hidden_layers": 9223372036854775807})");
  EXPECT_NE(e.find("'num_hidden_layers': implausibly large"), std::string::npos) << e;
  e = Error(R"({"model_type": "qwen3_moe", "mlp_only_layers": [3, 100000]})");
  EXPECT_NE(e.find("'mlp_only_layers'"), std::string::npos) << e;
  e = Error(R"({"model_type": "deepseek_v3", "kv_lora_rank": 0})");
  EXPECT_NE(e.find("'kv_lora_rank'"), std::string::npos) << e;
  // Repeats and disorder are a set: layers 3 and 5 dense.
  ModelSpec s = Parse(R"({"model_type": "qwen3_moe", "num_hidden_layers": 6,
      "mlp_only_layers": [5, 3, 3]})");
  EXPECT_EQ(s.moe.dense_layers, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(s.num_moe_layers(), 4);
}

TEST(NewFamilies, StateSpaceModelsAreRefusedWithTheReason) {
  for (const char* type : {"mamba", "falcon_mamba", "jamba"}) {
    std::string e = Error(std::string(R"({"model_type": ")") + type + R"("})");
    EXPECT_NE(e.find("not supported yet"), std::string::npos) << e;
    EXPECT_NE(e.find("state-space"), std::string::npos) << e;
  }
}

TEST(NewFamilies, NamesAsUsersTypeThem) {
  EXPECT_EQ(Zoo("Qwen/Qwen3-8B").name, "qwen3-8b");
  EXPECT_EQ(Zoo("meta-llama/Llama-3.1-8B-Instruct").name, "llama-3.1-8b");
  EXPECT_EQ(Zoo("google/gemma-3-27b-pt").name, "gemma-3-27b");
  EXPECT_EQ(Zoo("mistralai/Mistral-Nemo-Instruct-2407").name, "mistral-nemo-12b");
  EXPECT_EQ(Zoo("allenai/OLMo-2-1124-7B").name, "olmo-2-7b");
  EXPECT_FALSE(FindZooModel("Qwen/Qwen3-9B").has_value());
}

TEST(NewFamilies, HuggingFaceIdsComeFromTheLocalCacheOnly) {
  namespace fs = std::filesystem;
  const fs::path home = fs::temp_directory_path() /
                        ("frenzy-hf-cache-test-" + std::to_string(::getpid()));
  fs::remove_all(home);
  const fs::path snap = home / "hub" / "models--acme--tiny-1b" / "snapshots" / "0123abcd";
  fs::create_directories(snap);
  std::ofstream(snap / "config.json") << R"({"model_type": "llama", "vocab_size": 100,
      "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 4})";
  const char* old_home = std::getenv("HF_HOME");
  const std::string saved = old_home ? old_home : "";
  const char* old_hub = std::getenv("HF_HUB_CACHE");
  const std::string saved_hub = old_hub ? old_hub : "";
  unsetenv("HF_HUB_CACHE");
  setenv("HF_HOME", home.c_str(), 1);
  auto found = ResolveModel("acme/tiny-1b");
  auto missing = ResolveModel("acme/other-1b");
  if (old_home) setenv("HF_HOME", saved.c_str(), 1); else unsetenv("HF_HOME");
  if (old_hub) setenv("HF_HUB_CACHE", saved_hub.c_str(), 1);
  fs::remove_all(home);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->hidden_size, 64);
  EXPECT_EQ(found->name, "acme/tiny-1b");  // not the snapshot's hash
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().ToString().find("never downloads"), std::string::npos);
  EXPECT_NE(missing.status().ToString().find("huggingface-cli download acme/other-1b"),
            std::string::npos);
}

}  // namespace
}  // namespace frenzy
