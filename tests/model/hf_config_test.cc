#include "model/hf_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "model/param_count.h"
#include "parse_config.h"

namespace frenzy {
namespace {

using test::Parse;
using test::ParseError;

TEST(HfConfig, LlamaDefaultsFollowLlamaConfig) {
  // Only model_type given: every field takes LlamaConfig's default.
  ModelSpec s = Parse(R"({"model_type": "llama"})");
  EXPECT_EQ(s.vocab_size, 32000);
  EXPECT_EQ(s.hidden_size, 4096);
  EXPECT_EQ(s.ffn_hidden_size, 11008);
  EXPECT_EQ(s.num_layers, 32);
  EXPECT_EQ(s.num_heads, 32);
  EXPECT_EQ(s.num_kv_heads, 32);  // defaults to num_attention_heads
  EXPECT_EQ(s.head_dim, 128);
  EXPECT_EQ(s.norm, NormKind::kRmsNorm);
  EXPECT_TRUE(s.gated_mlp);
  EXPECT_FALSE(s.tied_embeddings);
  EXPECT_FALSE(s.qkv_bias);
  // That is exactly Llama-2-7B.
  EXPECT_EQ(TotalParams(s), 6738415616);
}

TEST(HfConfig, NullKvHeadsMeansMultiHead) {
  ModelSpec s = Parse(R"({"model_type": "llama", "num_attention_heads": 8,
                          "num_key_value_heads": null, "hidden_size": 64})");
  EXPECT_EQ(s.num_kv_heads, 8);
}

TEST(HfConfig, MistralDefaultsToGroupedQueryAttention) {
  ModelSpec s = Parse(R"({"model_type": "mistral"})");
  EXPECT_EQ(s.num_kv_heads, 8);
  EXPECT_EQ(s.ffn_hidden_size, 14336);
  EXPECT_EQ(s.max_positions, 131072);
}

TEST(HfConfig, Qwen2HasQkvBiasOnly) {
  ModelSpec s = Parse(R"({"model_type": "qwen2"})");
  EXPECT_TRUE(s.qkv_bias);
  EXPECT_FALSE(s.attn_out_bias);
  EXPECT_FALSE(s.mlp_bias);
}

TEST(HfConfig, GemmaUsesItsOwnHeadDim) {
  ModelSpec s = Parse(R"({"model_type": "gemma"})");
  EXPECT_EQ(s.head_dim, 256);
  EXPECT_EQ(s.q_size(), 16 * 256);
  EXPECT_NE(s.q_size(), s.hidden_size);
  EXPECT_TRUE(s.tied_embeddings);
  EXPECT_EQ(s.activation, Activation::kGeluTanh);
}

TEST(HfConfig, Gpt2FieldNamesAndDefaults) {
  ModelSpec s = Parse(R"({"model_type": "gpt2", "n_embd": 12, "n_layer": 1, "n_head": 3,
                          "n_positions": 8, "vocab_size": 50})");
  EXPECT_EQ(s.ffn_hidden_size, 48);  // n_inner = 4 * n_embd
  EXPECT_EQ(s.position, PositionKind::kLearned);
  EXPECT_TRUE(s.tied_embeddings);
  EXPECT_EQ(s.activation, Activation::kGeluTanh);  // gelu_new
}

TEST(HfConfig, OptPostNormAndProjection) {
  // OPT-350m's shape: post-norm, 512-wide embeddings projected to 1024.
  ModelSpec s = Parse(R"({"model_type": "opt", "hidden_size": 1024, "word_embed_proj_dim": 512,
                          "do_layer_norm_before": false, "num_hidden_layers": 24,
                          "num_attention_heads": 16, "ffn_dim": 4096})");
  EXPECT_EQ(s.embedding_proj_dim, 512);
  EXPECT_FALSE(s.final_norm);
  EXPECT_EQ(s.norm_placement, NormPlacement::kPostNorm);
  EXPECT_EQ(s.position_offset, 2);
}

TEST(HfConfig, BloomReadsNEmbed) {
  ModelSpec s = Parse(R"({"model_type": "bloom", "n_embed": 1024, "n_layer": 24, "n_head": 16})");
  EXPECT_EQ(s.hidden_size, 1024);
  EXPECT_EQ(s.ffn_hidden_size, 4096);
  EXPECT_EQ(s.position, PositionKind::kAlibi);
  EXPECT_TRUE(s.embedding_norm);
}

TEST(HfConfig, FalconVariants) {
  // Falcon-7B: multi-query, parallel attention with a single shared norm.
  ModelSpec f7 = Parse(R"({"model_type": "falcon"})");
  EXPECT_EQ(f7.num_kv_heads, 1);
  EXPECT_EQ(f7.norms_per_layer, 1);
  // New decoder architecture: configured kv heads and two norms.
  ModelSpec f40 = Parse(R"({"model_type": "falcon", "new_decoder_architecture": true,
                            "hidden_size": 8192, "num_attention_heads": 128, "num_kv_heads": 8,
                            "num_hidden_layers": 60})");
  EXPECT_EQ(f40.num_kv_heads, 8);
  EXPECT_EQ(f40.norms_per_layer, 2);
  // Sequential attention/MLP (falcon-rw-1b): two norms, full MHA, ALiBi.
  ModelSpec rw = Parse(R"({"model_type": "falcon", "parallel_attn": false, "multi_query": false,
                           "alibi": true, "bias": true, "hidden_size": 2048,
                           "num_attention_heads": 32, "num_hidden_layers": 24})");
  EXPECT_EQ(rw.num_kv_heads, 32);
  EXPECT_EQ(rw.norms_per_layer, 2);
  EXPECT_EQ(rw.position, PositionKind::kAlibi);
  EXPECT_TRUE(rw.mlp_bias);
}

TEST(HfConfig, Qwen2MoeSparseStepAndDenseLayers) {
  ModelSpec s = Parse(R"({"model_type": "qwen2_moe", "num_hidden_layers": 4,
                          "decoder_sparse_step": 2, "mlp_only_layers": [3]})");
  EXPECT_FALSE(s.IsMoeLayer(0));
  EXPECT_TRUE(s.IsMoeLayer(1));
  EXPECT_FALSE(s.IsMoeLayer(2));
  EXPECT_FALSE(s.IsMoeLayer(3));  // (3+1) % 2 == 0 but listed as MLP-only
  EXPECT_EQ(s.num_moe_layers(), 1);
  EXPECT_TRUE(s.moe.shared_expert_gate);
}

TEST(HfConfig, BertIsAnEncoderWithPooler) {
  ModelSpec s = Parse(R"({"model_type": "bert"})");
  EXPECT_EQ(s.arch, ArchKind::kEncoder);
  EXPECT_EQ(s.type_vocab_size, 2);
  EXPECT_TRUE(s.pooler);
  EXPECT_FALSE(s.final_norm);
  EXPECT_EQ(TotalParams(s), 109482240);  // bert-base-uncased: BertModel with pooler
}

TEST(HfConfig, ZooEntryWrapperIsAccepted) {
  ModelSpec s = Parse(R"({"name": "tiny", "source": "x", "config": {"model_type": "llama",
                          "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2}})");
  EXPECT_EQ(s.name, "tiny");
  EXPECT_EQ(s.num_layers, 2);
}

// ---- errors name the file and the field as written -----------------------------------------

TEST(HfConfigErrors, UnknownModelTypeListsSupportedOnes) {
  Status s = ParseError(R"({"model_type": "t5"})");
  EXPECT_EQ(s.field(), "model_type");
  EXPECT_EQ(s.where(), "bad.json");
  EXPECT_NE(s.message().find("llama"), std::string::npos);
}

TEST(HfConfigErrors, MissingModelType) {
  EXPECT_EQ(ParseError(R"({"hidden_size": 4})").field(), "model_type");
}

TEST(HfConfigErrors, ZeroLayersNamesTheConfigField) {
  EXPECT_EQ(ParseError(R"({"model_type": "llama", "num_hidden_layers": 0})").field(),
            "num_hidden_layers");
  EXPECT_EQ(ParseError(R"({"model_type": "gpt2", "n_layer": 0})").field(), "n_layer");
}

TEST(HfConfigErrors, HeadsNotDividingHidden) {
  Status s = ParseError(R"({"model_type": "llama", "hidden_size": 100,
                            "num_attention_heads": 3})");
  EXPECT_EQ(s.field(), "num_attention_heads");
  EXPECT_NE(s.message().find("hidden_size"), std::string::npos);
}

TEST(HfConfigErrors, KvHeadsNotDividingHeads) {
  EXPECT_EQ(ParseError(R"({"model_type": "llama", "num_key_value_heads": 5})").field(),
            "num_key_value_heads");
}

TEST(HfConfigErrors, WrongTypeNamesTheField) {
  Status s = ParseError(R"({"model_type": "llama", "hidden_size": "4096"})");
  EXPECT_EQ(s.field(), "hidden_size");
  EXPECT_NE(s.message().find("integer"), std::string::npos);
}

TEST(HfConfigErrors, NegativeAndHugeValues) {
  EXPECT_EQ(ParseError(R"({"model_type": "llama", "vocab_size": -5})").field(), "vocab_size");
  EXPECT_EQ(ParseError(R"({"model_type": "llama", "intermediate_size": 1e300})").field(),
            "intermediate_size");
  EXPECT_EQ(ParseError(R"({"model_type": "llama", "num_hidden_layers": 99999999})").field(),
            "num_hidden_layers");
}

TEST(HfConfigErrors, UnsupportedActivation) {
  EXPECT_EQ(ParseError(R"({"model_type": "llama", "hidden_act": "mish"})").field(), "hidden_act");
}

TEST(HfConfigErrors, InvalidJsonAndNonObjects) {
  EXPECT_NE(ParseError("{\"model_type\": \"llama\",").message().find("invalid JSON"),
            std::string::npos);
  EXPECT_FALSE(ParseHfConfigText("[1, 2]", "x").ok());
  EXPECT_FALSE(ParseHfConfigText("", "x").ok());
  EXPECT_FALSE(ParseHfConfigText("null", "x").ok());
}

TEST(HfConfigErrors, TopKAboveExperts) {
  EXPECT_EQ(ParseError(R"({"model_type": "mixtral", "num_local_experts": 2,
                           "num_experts_per_tok": 3})")
                .field(),
            "num_experts_per_tok");
}

TEST(HfConfigFile, MissingFileIsNotFound) {
  auto r = LoadHfConfigFile("/nonexistent/dir/config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().where(), "/nonexistent/dir/config.json");
}

TEST(HfConfigFile, NamedAfterItsFolder) {
  auto dir = std::filesystem::temp_directory_path() / "frenzy-hf-test" / "My-Model-1b";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "llama", "hidden_size": 64,
                                            "num_attention_heads": 4})";
  auto r = LoadHfConfigFile((dir / "config.json").string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->name, "My-Model-1b");
  std::filesystem::remove_all(dir.parent_path());
}

}  // namespace
}  // namespace frenzy
