// The node agent's GPU discovery: the NVML reader against a fake libnvidia-ml (exact readings,
// every error path, init/shutdown pairing), nvidia-smi CSV and inventory parsing, the fallback
// chain, the catalog names of driver GPU names and the heartbeat body. Two tests read this
// machine's own GPUs: one compares NVML with nvidia-smi where a driver is installed, the other
// checks the inventory fallback where none is; each skips on the other kind of machine.
#include "server/agent.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fake_runner.h"
#include "hardware/gpu.h"
#include "backend/process.h"
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

// ---- NVML, against the fake library (fake_nvml/fake_nvml.h) --------------------------------

// fake_nvml.h's GPUs, written out here rather than read from the fake. Total, free and used
// differ, so a field read in the wrong order shows: free is total - used.
constexpr int64_t kFakeTotal = 85899345920;  // 80 GiB
constexpr int64_t kFakeUsed0 = 3221237817;   // 3 GiB + 12345 (free: 82678108103)
constexpr int64_t kFakeUsed1 = 7516192768;   // 7 GiB (free: 78383153152)
constexpr const char* kFakeName = "NVIDIA A100-SXM4-80GB";
constexpr const char* kFakeUuid0 = "GPU-fa4e0000-0000-4000-8000-000000000000";
constexpr const char* kFakeUuid1 = "GPU-fa4e0000-0000-4000-8000-000000000001";
constexpr const char* kFakeInitFailure = "nvmlInit_v2 failed: Driver Not Loaded (NVML error 9)";

// One of the fake libraries, held open for the test so that its counters outlive the agent's
// dlopen/dlclose; its environment (FAKE_NVML_GPUS, FAKE_NVML_FAIL) is cleared on both ends.
class FakeNvml {
 public:
  explicit FakeNvml(std::string path) : path_(std::move(path)) {
    ClearEnv();
    handle_ = dlopen(path_.c_str(), RTLD_NOW);
    if (handle_ == nullptr) {
      const char* why = dlerror();
      ADD_FAILURE() << "cannot load the fake NVML " << path_ << ": " << (why ? why : "?");
      return;
    }
    Reset();
  }
  ~FakeNvml() {
    ClearEnv();
    if (handle_ != nullptr) dlclose(handle_);
  }
  FakeNvml(const FakeNvml&) = delete;
  FakeNvml& operator=(const FakeNvml&) = delete;

  const std::string& path() const { return path_; }
  // FAKE_NVML_FAIL: "entry" or "entry@device"; "" fails nothing.
  void Fail(const std::string& entry) { Set("FAKE_NVML_FAIL", entry); }
  void Gpus(int n) { Set("FAKE_NVML_GPUS", std::to_string(n)); }

  int init_calls() const { return Counter("fake_nvml_init_calls"); }
  int shutdown_calls() const { return Counter("fake_nvml_shutdown_calls"); }
  int live_inits() const { return Counter("fake_nvml_live_inits"); }
  int uninitialized_calls() const { return Counter("fake_nvml_uninitialized_calls"); }
  void Reset() {
    auto reset = handle_ != nullptr
                     ? reinterpret_cast<void (*)()>(dlsym(handle_, "fake_nvml_reset"))
                     : nullptr;
    if (reset == nullptr) {
      ADD_FAILURE() << path_ << ": no fake_nvml_reset";
      return;
    }
    reset();
  }

  // `calls` inits, each shut down exactly once, and no device call outside init/shutdown.
  void ExpectEachInitShutDownOnce(int calls) const {
    EXPECT_EQ(init_calls(), calls) << path_;
    EXPECT_EQ(shutdown_calls(), calls) << path_;
    EXPECT_EQ(live_inits(), 0) << path_;
    EXPECT_EQ(uninitialized_calls(), 0) << path_;
  }

 private:
  static void ClearEnv() {
    ::unsetenv("FAKE_NVML_GPUS");
    ::unsetenv("FAKE_NVML_FAIL");
  }
  static void Set(const char* name, const std::string& value) {
    if (value.empty()) {
      ::unsetenv(name);
    } else {
      ::setenv(name, value.c_str(), 1);
    }
  }
  int Counter(const char* symbol) const {
    auto fn = handle_ != nullptr ? reinterpret_cast<int (*)()>(dlsym(handle_, symbol)) : nullptr;
    if (fn == nullptr) {
      ADD_FAILURE() << path_ << ": no " << symbol;
      return -1;
    }
    return fn();
  }

  std::string path_;
  void* handle_ = nullptr;
};

TEST(AgentNvml, ReadsEveryGpuExactly) {
  FakeNvml fake(FRENZY_FAKE_NVML);
  auto gpus = ReadGpusNvml(fake.path());
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 2u);
  const GpuReading& a = (*gpus)[0];
  const GpuReading& b = (*gpus)[1];
  EXPECT_EQ(a.index, 0);
  EXPECT_EQ(b.index, 1);
  EXPECT_EQ(a.name, kFakeName);  // the driver's name, as NVML gives it
  EXPECT_EQ(b.name, kFakeName);
  EXPECT_EQ(CatalogGpuName(a.name), "A100-80GB");
  EXPECT_EQ(a.memory_total_bytes, kFakeTotal);
  EXPECT_EQ(b.memory_total_bytes, kFakeTotal);
  // Used, not free: 82678108103 or 78383153152 here would be a field-order bug.
  EXPECT_EQ(a.memory_used_bytes, kFakeUsed0);
  EXPECT_EQ(b.memory_used_bytes, kFakeUsed1);
  EXPECT_EQ(a.uuid.value_or("(none)"), kFakeUuid0);
  EXPECT_EQ(b.uuid.value_or("(none)"), kFakeUuid1);
  // The GPU's utilization (37, 64), not the memory controller's (11, 5).
  EXPECT_EQ(a.utilization_pct.value_or(-1), 37);
  EXPECT_EQ(b.utilization_pct.value_or(-1), 64);
  fake.ExpectEachInitShutDownOnce(1);
}

TEST(AgentNvml, ReportsAsManyGpusAsTheLibraryCounts) {
  FakeNvml fake(FRENZY_FAKE_NVML);
  fake.Gpus(1);
  auto one = ReadGpusNvml(fake.path());
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].memory_used_bytes, kFakeUsed0);

  fake.Gpus(0);
  auto none = ReadGpusNvml(fake.path());
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->empty());

  // No GPUs from NVML is a reason to try nvidia-smi, recorded as such.
  FakeRunner runner;
  runner.Push(Printed("0, NVIDIA H100 80GB HBM3, 81559, 2, 0\n"));
  AgentOptions o;
  o.nvml_library = fake.path();
  o.runner = &runner;
  GpuSourceInfo info;
  auto gpus = ReadGpus(o, &info);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_EQ(info.source, "nvidia-smi");
  EXPECT_EQ(info.skipped, std::vector<std::string>{"nvml: no GPUs"});
  EXPECT_EQ(runner.calls().size(), 1u);
  fake.ExpectEachInitShutDownOnce(3);
}

TEST(AgentNvml, DefaultChainAnswersFromNvmlAndRunsNoNvidiaSmi) {
  TempDir dir;
  FakeNvml fake(FRENZY_FAKE_NVML);
  FakeRunner runner;  // nothing scripted: running nvidia-smi would fail the test
  AgentOptions o;
  o.nvml_library = fake.path();
  o.runner = &runner;
  o.inventory_path = (dir.path() / "never-read.json").string();  // missing: reading it fails
  GpuSourceInfo info;
  auto gpus = ReadGpus(o, &info);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_EQ(info.source, "nvml");
  EXPECT_TRUE(info.skipped.empty());
  EXPECT_EQ(info.node, "");
  EXPECT_TRUE(runner.calls().empty());
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[0].memory_used_bytes, kFakeUsed0);
  EXPECT_EQ((*gpus)[1].memory_used_bytes, kFakeUsed1);

  json hb = HeartbeatJson("n1", *gpus, info.source);
  EXPECT_EQ(hb["source"], "nvml");
  ASSERT_EQ(hb["gpus"].size(), 2u);
  EXPECT_EQ(hb["gpus"][1]["name"], kFakeName);
  EXPECT_EQ(hb["gpus"][1]["gpu"], "A100-80GB");
  EXPECT_EQ(hb["gpus"][1]["memory_total_bytes"], kFakeTotal);
  EXPECT_EQ(hb["gpus"][1]["memory_used_bytes"], kFakeUsed1);
  fake.ExpectEachInitShutDownOnce(1);
}

TEST(AgentNvml, InitFailureIsFailedPreconditionAndFallsThroughToNvidiaSmi) {
  FakeNvml fake(FRENZY_FAKE_NVML);
  fake.Fail("nvmlInit_v2");
  auto r = ReadGpusNvml(fake.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(), kFakeInitFailure);
  // A failed init leaves nothing to shut down, and nothing else may be called.
  EXPECT_EQ(fake.init_calls(), 1);
  EXPECT_EQ(fake.shutdown_calls(), 0);
  EXPECT_EQ(fake.uninitialized_calls(), 0);

  FakeRunner runner;
  runner.Push(Printed("0, NVIDIA H100 80GB HBM3, 81559, 2, 0\n"));
  AgentOptions o;
  o.nvml_library = fake.path();
  o.runner = &runner;
  GpuSourceInfo info;
  auto gpus = ReadGpus(o, &info);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_EQ(info.source, "nvidia-smi");
  EXPECT_EQ(info.skipped, std::vector<std::string>{std::string("nvml: ") + kFakeInitFailure});
  EXPECT_EQ(runner.calls().size(), 1u);
  ASSERT_EQ(gpus->size(), 1u);
  EXPECT_EQ((*gpus)[0].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(fake.init_calls(), 2);
  EXPECT_EQ(fake.shutdown_calls(), 0);
}

TEST(AgentNvml, EveryFailureAfterInitShutsDownOnce) {
  struct Case {
    const char* fail;  // FAKE_NVML_FAIL
    const char* message;
  };
  const Case cases[] = {
      {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount_v2 failed: Unknown Error (NVML error 999)"},
      {"nvmlDeviceGetHandleByIndex_v2@1",
       "nvmlDeviceGetHandleByIndex_v2(1) failed: Unknown Error (NVML error 999)"},
      {"nvmlDeviceGetName@0", "nvmlDeviceGetName(0) failed: Unknown Error (NVML error 999)"},
      {"nvmlDeviceGetMemoryInfo@1",
       "nvmlDeviceGetMemoryInfo(1) failed: Unknown Error (NVML error 999)"},
  };
  FakeNvml fake(FRENZY_FAKE_NVML);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.fail);
    fake.Reset();
    fake.Fail(c.fail);
    auto r = ReadGpusNvml(fake.path());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(r.status().message(), c.message);
    fake.ExpectEachInitShutDownOnce(1);
  }

  // In the chain, the reason is recorded and nvidia-smi asked next.
  fake.Reset();
  fake.Fail("nvmlDeviceGetMemoryInfo@1");
  FakeRunner runner;
  runner.Push(Exited(9,
                     "NVIDIA-SMI has failed because it could not communicate with the NVIDIA "
                     "driver.\n"));
  AgentOptions o;
  o.nvml_library = fake.path();
  o.runner = &runner;
  GpuSourceInfo info;
  auto gpus = ReadGpus(o, &info);
  ASSERT_FALSE(gpus.ok());
  EXPECT_EQ(gpus.status().code(), StatusCode::kNotFound);
  ASSERT_EQ(info.skipped.size(), 2u);
  EXPECT_EQ(info.skipped[0],
            "nvml: nvmlDeviceGetMemoryInfo(1) failed: Unknown Error (NVML error 999)");
  EXPECT_NE(gpus.status().message().find(info.skipped[0]), std::string::npos)
      << gpus.status().ToString();
  EXPECT_EQ(runner.calls().size(), 1u);
  fake.ExpectEachInitShutDownOnce(1);
}

TEST(AgentNvml, OptionalEntryPointsMayFail) {
  FakeNvml fake(FRENZY_FAKE_NVML);
  fake.Fail("nvmlDeviceGetUUID@1");
  auto gpus = ReadGpusNvml(fake.path());
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[0].uuid.value_or("(none)"), kFakeUuid0);
  EXPECT_FALSE((*gpus)[1].uuid.has_value());
  EXPECT_EQ((*gpus)[1].utilization_pct.value_or(-1), 64);
  EXPECT_EQ((*gpus)[1].memory_used_bytes, kFakeUsed1);

  fake.Fail("nvmlDeviceGetUtilizationRates");
  gpus = ReadGpusNvml(fake.path());
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_FALSE((*gpus)[0].utilization_pct.has_value());
  EXPECT_FALSE((*gpus)[1].utilization_pct.has_value());
  EXPECT_EQ((*gpus)[1].uuid.value_or("(none)"), kFakeUuid1);
  fake.ExpectEachInitShutDownOnce(2);
}

TEST(AgentNvml, OptionalEntryPointsMayBeAbsent) {
  // No nvmlDeviceGetUUID, nvmlDeviceGetUtilizationRates or nvmlErrorString.
  FakeNvml fake(FRENZY_FAKE_NVML_MINIMAL);
  auto gpus = ReadGpusNvml(fake.path());
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 2u);
  for (const GpuReading& g : *gpus) {
    EXPECT_EQ(g.name, kFakeName);
    EXPECT_EQ(g.memory_total_bytes, kFakeTotal);
    EXPECT_FALSE(g.uuid.has_value());
    EXPECT_FALSE(g.utilization_pct.has_value());
  }
  EXPECT_EQ((*gpus)[0].memory_used_bytes, kFakeUsed0);
  EXPECT_EQ((*gpus)[1].memory_used_bytes, kFakeUsed1);
  fake.ExpectEachInitShutDownOnce(1);

  // Without nvmlErrorString the error gives the bare code.
  fake.Reset();
  fake.Fail("nvmlInit_v2");
  auto r = ReadGpusNvml(fake.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(), "nvmlInit_v2 failed: NVML error 9");
  EXPECT_EQ(fake.shutdown_calls(), 0);
}

TEST(AgentNvml, LibraryLackingARequiredEntryPointIsFailedPrecondition) {
  TempDir dir;
  FakeNvml fake(FRENZY_FAKE_NVML_NO_MEMORY_INFO);  // everything but nvmlDeviceGetMemoryInfo
  auto r = ReadGpusNvml(fake.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  const std::string lacks = r.status().message();
  EXPECT_EQ(lacks.rfind(fake.path() + " lacks the NVML entry points needed", 0), 0u) << lacks;
  // Refused before init: nothing to shut down.
  EXPECT_EQ(fake.init_calls(), 0);
  EXPECT_EQ(fake.shutdown_calls(), 0);

  // A library that is not NVML at all.
  r = ReadGpusNvml("libm.so.6");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message().rfind("libm.so.6 lacks the NVML entry points needed", 0), 0u)
      << r.status().ToString();

  // In the chain: recorded, then nvidia-smi, then the inventory.
  const fs::path inv = dir.path() / "inventory.json";
  WriteText(inv, R"({"gpus": [{"name": "T4"}]})");
  FakeRunner runner;
  runner.Push(Exited(9,
                     "NVIDIA-SMI has failed because it could not communicate with the NVIDIA "
                     "driver.\n"));
  AgentOptions o;
  o.nvml_library = fake.path();
  o.runner = &runner;
  o.inventory_path = inv.string();
  GpuSourceInfo info;
  auto gpus = ReadGpus(o, &info);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_EQ(info.source, "inventory");
  ASSERT_EQ(info.skipped.size(), 2u);
  EXPECT_EQ(info.skipped[0], "nvml: " + lacks);
  EXPECT_NE(info.skipped[1].find("could not communicate with the NVIDIA driver"), std::string::npos)
      << info.skipped[1];
  EXPECT_EQ(fake.init_calls(), 0);
}

TEST(AgentNvml, ConcurrentReadsPairEveryInitWithOneShutdown) {
  // ReadGpus loads and initialises NVML per call (agent.h), so calls from several threads
  // overlap in the library; each must still shut down its own init.
  FakeNvml fake(FRENZY_FAKE_NVML);
  constexpr int kThreads = 4;
  constexpr int kCalls = 25;
  std::atomic<int> exact{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kCalls; ++i) {
        auto gpus = ReadGpusNvml(fake.path());
        if (gpus.ok() && gpus->size() == 2 && (*gpus)[1].memory_used_bytes == kFakeUsed1) ++exact;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(exact.load(), kThreads * kCalls);
  fake.ExpectEachInitShutDownOnce(kThreads * kCalls);
}

// ---- this machine's own GPUs ---------------------------------------------------------------
// The fake-NVML tests above cover the reader on every machine; these two check the default
// chain against what is really installed, and each skips on the other kind of machine.

// What the test itself, without the agent's code, finds in the system's NVML.
struct SystemNvml {
  bool loaded = false;       // dlopen("libnvidia-ml.so.1") worked
  bool initialised = false;  // and nvmlInit_v2 returned NVML_SUCCESS
  std::string why;           // otherwise: dlerror's text, or what failed
};

SystemNvml ProbeSystemNvml() {
  SystemNvml p;
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (lib == nullptr) {
    const char* why = dlerror();
    p.why = why != nullptr ? why : "unknown";
    return p;
  }
  p.loaded = true;
  auto init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlShutdown"));
  if (init == nullptr || shutdown == nullptr) {
    p.why = "no nvmlInit_v2 or nvmlShutdown";
  } else if (int rc = init(); rc != 0) {
    p.why = "nvmlInit_v2 returned " + std::to_string(rc);
  } else {
    p.initialised = true;
    shutdown();
  }
  dlclose(lib);
  return p;
}

// An inventory the chain must not reach on a GPU machine, and must read exactly on others.
fs::path WriteT4Inventory(const fs::path& dir) {
  const fs::path inv = dir / "inventory.json";
  WriteText(inv, R"({"gpus": [{"name": "T4"}]})");
  return inv;
}

TEST(AgentThisMachine, NvmlAgreesWithNvidiaSmi) {
  const SystemNvml nvml = ProbeSystemNvml();
  if (!nvml.initialised) {
    GTEST_SKIP() << "no working NVIDIA driver here: " << nvml.why;
  }
  TempDir dir;
  AgentOptions o;  // the defaults: libnvidia-ml.so.1, nvidia-smi on PATH
  o.inventory_path = WriteT4Inventory(dir.path()).string();
  GpuSourceInfo info;
  auto gpus = ReadGpus(o, &info);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_EQ(info.source, "nvml");
  EXPECT_TRUE(info.skipped.empty()) << info.skipped.front();

  // nvidia-smi is NVML's own client; the driver installs both.
  auto smi = SystemRunner().Run(CommandSpec{
      {"nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"},
      "",
      60,
      {}});
  ASSERT_TRUE(smi.ok()) << smi.status().ToString();
  ASSERT_TRUE(smi->ok()) << smi->Describe() << ": " << smi->stdout_text << smi->stderr_text;
  struct Row {
    int64_t index;
    std::string name;
    int64_t total_mib;
  };
  std::vector<Row> rows;
  std::istringstream lines(smi->stdout_text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const size_t first = line.find(", ");
    const size_t last = line.rfind(", ");
    ASSERT_TRUE(first != std::string::npos && last != first) << "nvidia-smi said: " << line;
    rows.push_back({std::stoll(line.substr(0, first)), line.substr(first + 2, last - first - 2),
                    std::stoll(line.substr(last + 2))});
  }
  ASSERT_EQ(gpus->size(), rows.size()) << smi->stdout_text;
  for (size_t i = 0; i < rows.size(); ++i) {
    const GpuReading& g = (*gpus)[i];
    SCOPED_TRACE("GPU " + std::to_string(i) + ": " + g.name);
    EXPECT_EQ(g.index, rows[i].index);
    EXPECT_EQ(g.name, rows[i].name);
    EXPECT_LE(std::llabs(g.memory_total_bytes - rows[i].total_mib * kMiB), kMiB)
        << g.memory_total_bytes << " bytes vs " << rows[i].total_mib << " MiB";
    EXPECT_GE(g.memory_used_bytes, 0);
    EXPECT_LE(g.memory_used_bytes, g.memory_total_bytes);
  }
}

TEST(AgentThisMachine, WithoutADriverTheInventoryAnswers) {
  const SystemNvml nvml = ProbeSystemNvml();
  if (nvml.initialised) {
    GTEST_SKIP() << "this machine has a working NVIDIA driver (NvmlAgreesWithNvidiaSmi runs)";
  }
  auto smi = SystemRunner().Run(CommandSpec{{"nvidia-smi", "-L"}, "", 20, {}});
  if (smi.ok() && smi->ok()) {
    GTEST_SKIP() << "nvidia-smi works although libnvidia-ml.so.1 does not (" << nvml.why << ")";
  }
  TempDir dir;
  AgentOptions o;  // the defaults: libnvidia-ml.so.1, nvidia-smi on PATH
  o.inventory_path = WriteT4Inventory(dir.path()).string();
  GpuSourceInfo info;
  auto gpus = ReadGpus(o, &info);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_EQ(info.source, "inventory");
  EXPECT_EQ(info.node, "");
  ASSERT_EQ(gpus->size(), 1u);
  const GpuReading& g = (*gpus)[0];
  EXPECT_EQ(g.index, 0);
  EXPECT_EQ(g.name, "T4");
  EXPECT_EQ(g.memory_total_bytes, GpuCatalog::Default().Find("T4")->memory_bytes);
  EXPECT_EQ(g.memory_used_bytes, 0);
  EXPECT_FALSE(g.uuid.has_value());
  EXPECT_FALSE(g.utilization_pct.has_value());

  ASSERT_EQ(info.skipped.size(), 2u);
  if (!nvml.loaded) {
    EXPECT_EQ(info.skipped[0], "nvml: cannot load libnvidia-ml.so.1: " + nvml.why);
  } else {  // a library without a driver behind it
    EXPECT_EQ(info.skipped[0].rfind("nvml: nvmlInit_v2 failed: ", 0), 0u) << info.skipped[0];
  }
  if (!smi.ok()) {  // not installed: the same answer the agent got
    EXPECT_EQ(info.skipped[1], "nvidia-smi: " + smi.status().message());
  } else {
    EXPECT_EQ(info.skipped[1].rfind("nvidia-smi: ", 0), 0u) << info.skipped[1];
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
  EXPECT_EQ(CatalogGpuName("NVIDIA Z900"), "NVIDIA Z900");  // unknown: as the driver says
  EXPECT_EQ(CatalogGpuName("NVIDIA B200"), "B200");
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
