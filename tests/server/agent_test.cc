// The node agent's GPU discovery: nvidia-smi CSV and inventory parsing, the fallback chain when
// NVML and nvidia-smi are absent, the catalog names of driver GPU names, and the heartbeat body.
#include "server/agent.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fake_runner.h"
#include "hardware/gpu.h"
#include "server/process.h"
#include "server_test_util.h"

namespace frenzy::server {
namespace {

using test_util::Exited;
using test_util::FakeRunner;
using test_util::Printed;
using test_util::TempDir;

using nlohmann::json;
namespace fs = std::filesystem;

constexpr int64_t kMiB = 1024 * 1024;
constexpr int64_t kGiB = 1024 * kMiB;

void WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

// ---- nvidia-smi ------------------------------------------------------------------------------

TEST(AgentNvidiaSmi, ParsesCsvInMiB) {
  auto gpus = ParseNvidiaSmiCsv(
      "0, NVIDIA A100-SXM4-80GB, 81920, 1024, 37\n"
      "1, NVIDIA A100-SXM4-80GB, 81920, 0, 0\n");
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 2u);
  const GpuReading& g = (*gpus)[0];
  EXPECT_EQ(g.index, 0);
  EXPECT_EQ(g.name, "NVIDIA A100-SXM4-80GB");
  EXPECT_EQ(g.memory_total_bytes, 81920 * kMiB);
  EXPECT_EQ(g.memory_used_bytes, 1024 * kMiB);
  ASSERT_TRUE(g.utilization_pct.has_value());
  EXPECT_DOUBLE_EQ(*g.utilization_pct, 37);
  EXPECT_FALSE(g.uuid.has_value());
  EXPECT_EQ((*gpus)[1].index, 1);
}

TEST(AgentNvidiaSmi, NotAvailableFields) {
  // Utilization and memory.used unreported (e.g. some GeForce cards); memory.total unreported on
  // a GPU the catalog knows takes the catalog's figure.
  auto gpus = ParseNvidiaSmiCsv(
      "0, NVIDIA GeForce RTX 3090, 24576, [N/A], [N/A]\r\n"
      "\n"
      "1, Tesla V100-SXM2-32GB, [N/A], 12, [Not Supported]\n");
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[0].memory_total_bytes, 24576 * kMiB);
  EXPECT_EQ((*gpus)[0].memory_used_bytes, 0);
  EXPECT_FALSE((*gpus)[0].utilization_pct.has_value());
  EXPECT_EQ((*gpus)[1].memory_total_bytes, GpuCatalog::Default().Find("V100-32GB")->memory_bytes);
  EXPECT_EQ((*gpus)[1].memory_used_bytes, 12 * kMiB);
  EXPECT_FALSE((*gpus)[1].utilization_pct.has_value());

  auto unknown = ParseNvidiaSmiCsv("0, Mystery GPU, [N/A], 0, 0\n");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("Mystery GPU"), std::string::npos);
  EXPECT_EQ(unknown.status().field(), "memory.total");
}

TEST(AgentNvidiaSmi, BadLinesAreErrorsNamingTheLine) {
  auto r = ParseNvidiaSmiCsv("0, NVIDIA A100-SXM4-80GB, 81920, 0, 0\n1, NVIDIA A100-SXM4-80GB\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("line 2"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("got 2"), std::string::npos);
  EXPECT_NE(r.status().message().find("'1, NVIDIA A100-SXM4-80GB'"), std::string::npos);
  EXPECT_EQ(r.status().where(), "nvidia-smi output line 2");

  r = ParseNvidiaSmiCsv("zero, NVIDIA A100-SXM4-80GB, 81920, 0, 0\n");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("line 1: index 'zero'"), std::string::npos)
      << r.status().ToString();

  r = ParseNvidiaSmiCsv("0, NVIDIA A100-SXM4-80GB, 80 GiB, 0, 0\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().field(), "memory.total");

  r = ParseNvidiaSmiCsv("0, NVIDIA A100-SXM4-80GB, 81920, 0, 140\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().field(), "utilization.gpu");

  r = ParseNvidiaSmiCsv("No devices were found\n");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("No devices were found"), std::string::npos);

  auto empty = ParseNvidiaSmiCsv("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

// ---- inventory ---------------------------------------------------------------------------------

TEST(AgentInventory, ParsesNodeGpusCountsAndCatalogMemory) {
  std::string node;
  auto gpus = ParseInventory(R"({
    "node": "n1",
    "gpus": [
      {"name": "A100-80GB", "memory_total_bytes": 85899345920, "memory_used_bytes": 1024,
       "uuid": "GPU-1234", "utilization_pct": 12.5},
      {"name": "H100-80GB", "count": 2},
      {"name": "NVIDIA L4", "index": 7, "memory_total_bytes": 24000000000}
    ]})",
                             "inv.json", &node);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_EQ(node, "n1");
  ASSERT_EQ(gpus->size(), 4u);
  EXPECT_EQ((*gpus)[0].index, 0);
  EXPECT_EQ((*gpus)[0].memory_total_bytes, 80 * kGiB);
  EXPECT_EQ((*gpus)[0].memory_used_bytes, 1024);
  EXPECT_EQ((*gpus)[0].uuid.value_or(""), "GPU-1234");
  EXPECT_DOUBLE_EQ((*gpus)[0].utilization_pct.value_or(-1), 12.5);
  EXPECT_EQ((*gpus)[1].index, 1);
  EXPECT_EQ((*gpus)[2].index, 2);
  EXPECT_EQ((*gpus)[1].name, "H100-80GB");
  EXPECT_EQ((*gpus)[1].memory_total_bytes, GpuCatalog::Default().Find("H100-80GB")->memory_bytes);
  EXPECT_EQ((*gpus)[3].index, 7);
  EXPECT_EQ((*gpus)[3].memory_total_bytes, 24000000000);
}

struct InventoryCase {
  const char* text;
  const char* field;    // expected Status::field()
  const char* message;  // expected in the message
};

TEST(AgentInventory, ErrorsNameTheFileAndField) {
  const InventoryCase cases[] = {
      {"{", "", "not valid JSON"},
      {"[]", "", "JSON object"},
      {R"({"node": "n1"})", "gpus", "non-empty array"},
      {R"({"gpus": []})", "gpus", "non-empty array"},
      {R"({"node": 3, "gpus": [{"name": "A100-80GB"}]})", "node", "non-empty string"},
      {R"({"gpu": [{"name": "A100-80GB"}]})", "gpu", "unknown field"},
      {R"({"gpus": [3]})", "gpus[0]", "must be an object"},
      {R"({"gpus": [{"memory_total_bytes": 1}]})", "gpus[0].name", "required"},
      {R"({"gpus": [{"name": "A100-80GB"}, {"name": "Mystery"}]})", "gpus[1].memory_total_bytes",
       "Mystery"},
      {R"({"gpus": [{"name": "A100-80GB", "memory_total_bytes": "80GB"}]})",
       "gpus[0].memory_total_bytes", "integer"},
      {R"({"gpus": [{"name": "A100-80GB", "memory_total_byte": 1}]})", "gpus[0].memory_total_byte",
       "unknown field"},
      {R"({"gpus": [{"name": "A100-80GB", "memory_total_bytes": 10, "memory_used_bytes": 11}]})",
       "gpus[0].memory_used_bytes", "more than"},
      {R"({"gpus": [{"name": "A100-80GB", "utilization_pct": 101}]})", "gpus[0].utilization_pct",
       "0 to 100"},
      {R"({"gpus": [{"name": "A100-80GB", "count": 0}]})", "gpus[0].count", "integer >= 1"},
      {R"({"gpus": [{"name": "A100-80GB", "count": 2, "uuid": "GPU-1"}]})", "gpus[0].uuid",
       "count"},
      {R"({"gpus": [{"name": "A100-80GB", "count": 2}, {"name": "A100-80GB", "index": 1}]})",
       "gpus[1].index", "appears twice"},
  };
  for (const auto& c : cases) {
    auto r = ParseInventory(c.text, "nodes/n1.json");
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_EQ(r.status().where(), "nodes/n1.json") << c.text;
    EXPECT_EQ(r.status().field(), c.field) << c.text << " -> " << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.message), std::string::npos)
        << c.text << " -> " << r.status().ToString();
  }
}

// ---- the fallback chain ------------------------------------------------------------------------

AgentOptions NoDriver(const fs::path& dir) {
  AgentOptions o;
  // Names that exist nowhere, so the chain falls through even on a machine with a driver.
  o.nvml_library = "libfrenzy-test-no-such-nvml.so.1";
  o.nvidia_smi = (dir / "no-such-nvidia-smi").string();
  return o;
}

TEST(AgentReadGpus, FallsBackToTheInventoryWithoutNvmlOrNvidiaSmi) {
  TempDir dir;
  const fs::path inv = dir.path() / "inventory.json";
  WriteText(inv, R"({"node": "n1", "gpus": [{"name": "A100-80GB", "count": 2}]})");
  AgentOptions o = NoDriver(dir.path());
  o.inventory_path = inv.string();
  GpuSourceInfo info;
  auto gpus = ReadGpus(o, &info);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_EQ(info.source, "inventory");
  EXPECT_EQ(info.node, "n1");
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[1].name, "A100-80GB");
  ASSERT_EQ(info.skipped.size(), 2u);
  EXPECT_EQ(info.skipped[0].rfind("nvml: ", 0), 0u) << info.skipped[0];
  EXPECT_NE(info.skipped[0].find("libfrenzy-test-no-such-nvml.so.1"), std::string::npos);
  EXPECT_EQ(info.skipped[1].rfind("nvidia-smi: ", 0), 0u) << info.skipped[1];

  json hb = HeartbeatJson(info.node, *gpus, info.source);
  EXPECT_EQ(hb["source"], "inventory");
  EXPECT_EQ(hb["gpus"].size(), 2u);
}

TEST(AgentReadGpus, UsesNvidiaSmiWhenNvmlIsMissing) {
  TempDir dir;
  AgentOptions o = NoDriver(dir.path());
  FakeRunner runner;
  runner.Push(Printed("0, NVIDIA H100 80GB HBM3, 81559, 2, 0\n"));
  o.runner = &runner;
  o.nvidia_smi = "/usr/bin/nvidia-smi";
  o.nvidia_smi_timeout_s = 3;
  o.inventory_path = (dir.path() / "never-read.json").string();
  GpuSourceInfo info;
  auto gpus = ReadGpus(o, &info);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_EQ(info.source, "nvidia-smi");
  ASSERT_EQ(gpus->size(), 1u);
  EXPECT_EQ(CatalogGpuName((*gpus)[0].name), "H100-80GB");
  ASSERT_EQ(runner.calls().size(), 1u);
  EXPECT_EQ(runner.calls()[0].argv,
            (std::vector<std::string>{"/usr/bin/nvidia-smi",
                                      "--query-gpu=index,name,memory.total,memory.used,"
                                      "utilization.gpu",
                                      "--format=csv,noheader,nounits"}));
  EXPECT_EQ(runner.calls()[0].timeout_s, 3);
}

TEST(AgentReadGpus, NvidiaSmiFailureFallsThroughWithItsMessage) {
  TempDir dir;
  AgentOptions o = NoDriver(dir.path());
  FakeRunner runner;
  runner.Push(Exited(9,
                     "NVIDIA-SMI has failed because it could not communicate with the NVIDIA "
                     "driver.\n"));
  o.runner = &runner;
  GpuSourceInfo info;
  auto gpus = ReadGpus(o, &info);
  ASSERT_FALSE(gpus.ok());
  EXPECT_EQ(gpus.status().code(), StatusCode::kNotFound);
  EXPECT_NE(gpus.status().message().find("could not communicate with the NVIDIA driver"),
            std::string::npos)
      << gpus.status().ToString();
  EXPECT_NE(gpus.status().message().find("inventory"), std::string::npos);
}

TEST(AgentReadGpus, MissingOrBadInventoryIsAnError) {
  TempDir dir;
  AgentOptions o = NoDriver(dir.path());
  o.inventory_path = (dir.path() / "missing.json").string();
  auto r = ReadGpus(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().where(), o.inventory_path);

  WriteText(dir.path() / "bad.json", R"({"gpus": [{"name": "Mystery"}]})");
  o.inventory_path = (dir.path() / "bad.json").string();
  r = ReadGpus(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().where(), o.inventory_path);
  EXPECT_EQ(r.status().field(), "gpus[0].memory_total_bytes");

  AgentOptions off;
  off.use_nvml = false;
  off.use_nvidia_smi = false;
  EXPECT_EQ(ReadGpus(off).status().code(), StatusCode::kNotFound);
}

TEST(AgentReadGpus, MissingNvmlLibraryIsNotFound) {
  auto r = ReadGpusNvml("libfrenzy-test-no-such-nvml.so.1");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

// Whatever this machine has: NVML when a driver is installed, else the inventory. The NVML path
// itself is exercised on GPU machines.
TEST(AgentReadGpus, DefaultChainOnThisMachine) {
  TempDir dir;
  const fs::path inv = dir.path() / "inventory.json";
  WriteText(inv, R"({"gpus": [{"name": "T4"}]})");
  AgentOptions o;
  o.inventory_path = inv.string();
  GpuSourceInfo info;
  auto gpus = ReadGpus(o, &info);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_FALSE(gpus->empty());
  EXPECT_TRUE(info.source == "nvml" || info.source == "nvidia-smi" || info.source == "inventory")
      << info.source;
  for (const auto& g : *gpus) {
    EXPECT_FALSE(g.name.empty());
    EXPECT_GT(g.memory_total_bytes, 0);
    EXPECT_LE(g.memory_used_bytes, g.memory_total_bytes);
  }
}

// ---- names and heartbeat -------------------------------------------------------------------

TEST(AgentCatalogName, MapsDriverNamesToCatalogNames) {
  EXPECT_EQ(CatalogGpuName("NVIDIA A100-SXM4-80GB"), "A100-80GB");
  EXPECT_EQ(CatalogGpuName("NVIDIA A100-SXM4-40GB"), "A100-40GB");
  EXPECT_EQ(CatalogGpuName("NVIDIA A100-PCIE-40GB"), "A100-40GB");
  EXPECT_EQ(CatalogGpuName("Tesla V100-SXM2-32GB"), "V100-32GB");
  EXPECT_EQ(CatalogGpuName("Tesla V100-SXM2-16GB"), "V100-16GB");
  EXPECT_EQ(CatalogGpuName("NVIDIA GeForce RTX 3090"), "RTX-3090");
  EXPECT_EQ(CatalogGpuName("NVIDIA GeForce RTX 4090"), "RTX-4090");
  EXPECT_EQ(CatalogGpuName("NVIDIA H100 80GB HBM3"), "H100-80GB");
  EXPECT_EQ(CatalogGpuName("NVIDIA H100 PCIe"), "H100-PCIe");
  EXPECT_EQ(CatalogGpuName("NVIDIA H200"), "H200");
  EXPECT_EQ(CatalogGpuName("Tesla T4"), "T4");
  EXPECT_EQ(CatalogGpuName("NVIDIA L40S"), "L40S");
  EXPECT_EQ(CatalogGpuName("A100-80GB"), "A100-80GB");  // already a catalog name
  // Unknown to the catalog: passed through unchanged.
  EXPECT_EQ(CatalogGpuName("NVIDIA B200"), "NVIDIA B200");
  EXPECT_EQ(CatalogGpuName("NVIDIA A100 80GB PCIe"), "NVIDIA A100 80GB PCIe");
}

TEST(AgentHeartbeat, BodyShape) {
  GpuReading a;
  a.index = 0;
  a.name = "NVIDIA A100-SXM4-80GB";
  a.uuid = "GPU-abc";
  a.memory_total_bytes = 80 * kGiB;
  a.memory_used_bytes = 3 * kGiB;
  a.utilization_pct = 50;
  GpuReading b;
  b.index = 1;
  b.name = "Mystery GPU";
  b.memory_total_bytes = 16 * kGiB;
  json hb = HeartbeatJson("node-7", {a, b}, "nvml");
  json expected = {{"node", "node-7"},
                   {"source", "nvml"},
                   {"gpus",
                    {{{"index", 0},
                      {"name", "NVIDIA A100-SXM4-80GB"},
                      {"gpu", "A100-80GB"},
                      {"memory_total_bytes", 80 * kGiB},
                      {"memory_used_bytes", 3 * kGiB}},
                     {{"index", 1},
                      {"name", "Mystery GPU"},
                      {"gpu", "Mystery GPU"},
                      {"memory_total_bytes", 16 * kGiB},
                      {"memory_used_bytes", 0}}}}};
  EXPECT_EQ(hb, expected) << hb.dump(2);
  EXPECT_EQ(HeartbeatJson("n", {}, "inventory")["gpus"], json::array());
}

}  // namespace
}  // namespace frenzy::server
