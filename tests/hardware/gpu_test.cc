#include "hardware/gpu.h"

#include <gtest/gtest.h>

namespace frenzy {
namespace {

TEST(GpuCatalog, DefaultHasEveryRequiredGpuWithSources) {
  const GpuCatalog& cat = GpuCatalog::Default();
  for (const char* name : {"V100-16GB", "V100-32GB", "T4", "A10", "A10G", "L4", "L40S", "A40",
                           "RTX-3090", "RTX-4090", "A100-40GB", "A100-80GB", "H100-80GB",
                           "H100-PCIe", "H200", "MI250X", "MI300X",
                           // 2026 (issue 16)
                           "B200", "GB200", "B300", "H20", "H800", "A800", "RTX-5090", "MI325X",
                           "MI355X"}) {
    const GpuType* g = cat.Find(name);
    ASSERT_NE(g, nullptr) << name;
    EXPECT_EQ(g->name, name);
    EXPECT_GT(g->memory_bytes, int64_t{8} << 30) << name;
    EXPECT_GT(g->fp16_tflops, g->fp32_tflops) << name;  // tensor cores beat plain FP32
    EXPECT_GT(g->mem_bw_gbs, 100) << name;
    EXPECT_GT(g->link_gbs, 0) << name;
    EXPECT_NE(g->source.find("https://"), std::string::npos) << name;
  }
}

TEST(GpuCatalog, EveryGpuHasAPriceOrSaysItIsUnknown) {
  for (const GpuType& g : GpuCatalog::Default().gpus()) {
    if (g.price_per_hour) {
      EXPECT_NE(g.price_source.find("https://"), std::string::npos) << g.name;
    } else {
      EXPECT_TRUE(g.price_source.starts_with("unknown") || g.price_source.starts_with("not found"))
          << g.name << ": " << g.price_source;
    }
  }
}

TEST(GpuCatalog, BlackwellFiguresAreDense) {
  // NVIDIA's HGX B200 table: 4.5 PFLOPS FP8 and 9 PFLOPS FP4 per GPU with sparsity halved
  // (its sparse figures are 9 and 18); 2.25 PFLOPS BF16 dense; 180 GB HBM3e at 7.7 TB/s.
  const GpuType* b200 = GpuCatalog::Default().Find("B200");
  ASSERT_NE(b200, nullptr);
  EXPECT_DOUBLE_EQ(*b200->bf16_tflops, 2250);
  EXPECT_DOUBLE_EQ(*b200->fp8_tflops, 4500);
  EXPECT_DOUBLE_EQ(*b200->fp4_tflops, 9000);
  EXPECT_GT(b200->memory_bytes, int64_t{179} << 30);
  // Hopper has no FP4.
  EXPECT_FALSE(GpuCatalog::Default().Find("H100-80GB")->fp4_tflops.has_value());
}

TEST(GpuCatalog, KnownFigures) {
  const GpuCatalog& cat = GpuCatalog::Default();
  const GpuType* a100 = cat.Find("A100-80GB");
  ASSERT_NE(a100, nullptr);
  EXPECT_EQ(a100->memory_bytes, int64_t{80} << 30);
  EXPECT_DOUBLE_EQ(*a100->bf16_tflops, 312);
  EXPECT_EQ(a100->link, LinkKind::kNvlink);
  // V100 has no bf16 tensor cores.
  EXPECT_FALSE(cat.Find("V100-32GB")->bf16_tflops.has_value());
  // Memory sizes order as users expect.
  EXPECT_LT(cat.Find("RTX-3090")->memory_bytes, cat.Find("A100-40GB")->memory_bytes);
  EXPECT_LT(cat.Find("H100-80GB")->memory_bytes, cat.Find("H200")->memory_bytes);
}

TEST(GpuCatalog, AliasesResolve) {
  const GpuCatalog& cat = GpuCatalog::Default();
  struct Case {
    const char* alias;
    const char* name;
  };
  for (auto c : {Case{"a100", "A100-80GB"}, Case{"A100-SXM4-80GB", "A100-80GB"},
                 Case{"NVIDIA A100-SXM4-80GB", "A100-80GB"}, Case{"h100", "H100-80GB"},
                 Case{"NVIDIA H100 80GB HBM3", "H100-80GB"}, Case{"rtx 3090", "RTX-3090"},
                 Case{"mi300x", "MI300X"}, Case{"a10g", "A10G"}}) {
    const GpuType* g = cat.Find(c.alias);
    ASSERT_NE(g, nullptr) << c.alias;
    EXPECT_EQ(g->name, c.name) << c.alias;
  }
  EXPECT_EQ(cat.Find("A10")->name, "A10");  // not confused with A100
}

TEST(GpuCatalog, UnknownGpuSuggests) {
  auto r = GpuCatalog::Default().Lookup("A100-90GB");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("A100-80GB"), std::string::npos) << r.status().message();
}

TEST(GpuCatalog, RejectsBadCatalogs) {
  const char* good = R"({"name": "X1", "memory_gib": 16, "fp16_tflops": 10, "fp32_tflops": 5,
                         "mem_bw_gbs": 100, "link": "pcie", "link_gbs": 32, "source": "http://x"})";
  ASSERT_TRUE(GpuCatalog::Parse(std::string("[") + good + "]", "g.json").ok());
  EXPECT_FALSE(GpuCatalog::Parse("{}", "g.json").ok());
  EXPECT_FALSE(GpuCatalog::Parse("[]", "g.json").ok());
  auto dup = GpuCatalog::Parse(std::string("[") + good + "," + good + "]", "g.json");
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("already names"), std::string::npos);
  auto neg = GpuCatalog::Parse(R"([{"name": "X", "memory_gib": -1, "fp16_tflops": 1,
      "fp32_tflops": 1, "mem_bw_gbs": 1, "link": "pcie", "link_gbs": 1, "source": "s"}])", "g.json");
  ASSERT_FALSE(neg.ok());
  EXPECT_EQ(neg.status().field(), "[0].memory_gib");
  auto link = GpuCatalog::Parse(R"([{"name": "X", "memory_gib": 1, "fp16_tflops": 1,
      "fp32_tflops": 1, "mem_bw_gbs": 1, "link": "carrier-pigeon", "link_gbs": 1,
      "source": "s"}])", "g.json");
  ASSERT_FALSE(link.ok());
  EXPECT_EQ(link.status().field(), "[0].link");
  auto missing = GpuCatalog::Parse(R"([{"name": "X"}])", "g.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().where(), "g.json");
}

TEST(GpuCatalog, ToJsonRoundTrips) {
  const GpuCatalog& cat = GpuCatalog::Default();
  nlohmann::json all = nlohmann::json::array();
  for (const auto& g : cat.gpus()) all.push_back(g.ToJson());
  auto again = GpuCatalog::Parse(all.dump(), "roundtrip");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_EQ(again->gpus().size(), cat.gpus().size());
  for (size_t i = 0; i < cat.gpus().size(); ++i) {
    EXPECT_EQ(again->gpus()[i].ToJson(), cat.gpus()[i].ToJson());
  }
}

}  // namespace
}  // namespace frenzy
