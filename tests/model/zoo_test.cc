#include "model/zoo.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "common/json_reader.h"
#include "model/hf_config.h"
#include "model/param_count.h"

namespace frenzy {
namespace {

const std::vector<ZooEntry>& Zoo() {
  static const auto* zoo = [] {
    auto r = LoadZoo();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return new std::vector<ZooEntry>(r.ok() ? *r : std::vector<ZooEntry>{});
  }();
  return *zoo;
}

TEST(Zoo, HasTheRequiredModels) {
  std::set<std::string> names;
  for (const auto& e : Zoo()) names.insert(e.name);
  EXPECT_GE(names.size(), 25u);
  for (const char* want :
       {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "opt-125m", "opt-350m", "opt-1.3b",
        "opt-2.7b", "opt-6.7b", "opt-13b", "opt-30b", "opt-66b", "pythia-1.4b", "gpt-neox-20b",
        "bloom", "falcon-7b", "falcon-40b", "llama-2-7b", "llama-2-13b", "llama-2-70b",
        "llama-3-8b", "llama-3-70b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b",
        "mistral-7b", "mixtral-8x7b", "mixtral-8x22b", "qwen2-7b", "qwen2-72b", "gemma-7b",
        "phi-3-mini-4k", "bert-base-uncased", "bert-large-uncased",
        // 2026 families (issue 16)
        "llama-3.2-1b", "llama-3.2-3b", "llama-3.3-70b", "qwen2.5-7b", "qwen2.5-72b", "qwen3-0.6b", "qwen3-1.7b",
        "qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b",
        "gemma-2-9b", "gemma-2-27b", "gemma-3-1b", "gemma-3-4b", "gemma-3-12b", "gemma-3-27b",
        "deepseek-v2-lite", "deepseek-v3", "gpt-oss-20b", "gpt-oss-120b", "olmo-2-7b", "phi-4",
        "mistral-nemo-12b", "mistral-small-3.1-24b", "smollm2-135m", "smollm2-360m",
        "smollm2-1.7b", "starcoder2-3b", "starcoder2-7b", "starcoder2-15b"}) {
    EXPECT_TRUE(names.count(want)) << "zoo lacks " << want;
  }
}

TEST(Zoo, EveryEntryNamesItsSource) {
  for (const auto& e : Zoo()) {
    EXPECT_TRUE(e.source.starts_with("https://")) << e.name;
    if (e.published_params) {
      EXPECT_FALSE(e.params_source.empty()) << e.name;
    }
  }
}

// The heart of the model catalog: our count equals the published exact count.
TEST(Zoo, CountsEqualPublishedExactCounts) {
  int compared = 0;
  for (const auto& e : Zoo()) {
    if (!e.published_params) continue;
    EXPECT_EQ(TotalParams(e.spec), *e.published_params) << e.name << " (" << e.params_source
                                                         << ")";
    ++compared;
  }
  EXPECT_GE(compared, 50);
}

// Configs of the supported families that are not in the zoo, as a new user would bring them.
TEST(Zoo, CountsOfConfigsOutsideTheZoo) {
  auto dir = std::filesystem::path(FRENZY_SOURCE_DIR) / "tests/data/hf_configs";
  std::set<std::string> types;
  int compared = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    if (f.path().extension() != ".json") continue;
    auto text = ReadFileToString(f.path().string());
    ASSERT_TRUE(text.ok());
    auto doc = ParseJson(*text, f.path().string());
    ASSERT_TRUE(doc.ok()) << doc.status().ToString();
    auto spec = LoadHfConfigFile(f.path().string());
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    ASSERT_TRUE((*doc)["params"].is_number_integer()) << f.path();
    EXPECT_EQ(TotalParams(*spec), (*doc)["params"].get<int64_t>()) << f.path();
    types.insert(spec->model_type);
    ++compared;
  }
  EXPECT_GE(compared, 10);
  EXPECT_GE(types.size(), 9u);
}

TEST(Zoo, MoeActiveParamsAreAFraction) {
  for (const auto& e : Zoo()) {
    ParamCounts c = CountParams(e.spec);
    if (e.spec.moe.enabled()) {
      EXPECT_LT(c.active, c.total / 2) << e.name;
    } else {
      EXPECT_EQ(c.active, c.total) << e.name;
    }
  }
}

TEST(ResolveModel, ByZooNameHfIdOrPath) {
  auto a = ResolveModel("Llama-2-7B");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->name, "llama-2-7b");
  auto b = ResolveModel("meta-llama/Llama-2-7b-hf");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(TotalParams(*b), TotalParams(*a));
  auto c = ResolveModel(std::string(FRENZY_SOURCE_DIR) + "/data/models/gpt2.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(TotalParams(*c), 124439808);
}

TEST(ResolveModel, UnknownNameSuggestsClosest) {
  auto r = ResolveModel("llama-2-7");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("llama-2-7b"), std::string::npos) << r.status().ToString();
}

}  // namespace
}  // namespace frenzy
