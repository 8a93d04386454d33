// Runs the real `frenzy` binary as a user would and checks its output and exit codes.
#include <gtest/gtest.h>

#include "cli_run.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

using frenzy::testing::CliRun;
using frenzy::testing::Frenzy;

std::string TempFile(const std::string& name, const std::string& contents) {
  auto path = std::filesystem::temp_directory_path() / ("frenzy-cli-test-" + name);
  std::ofstream(path) << contents;
  return path.string();
}

TEST(Cli, InspectJsonHasExactParams) {
  CliRun r = Frenzy("inspect --model llama-2-7b --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["params"].get<int64_t>(), 6738415616);
  EXPECT_EQ(j["num_layers"], 32);
  EXPECT_EQ(j["params_breakdown"]["total"].get<int64_t>(), 6738415616);
}

TEST(Cli, InspectAConfigFile) {
  std::string path = TempFile("tiny.json", R"({"model_type": "gpt2", "vocab_size": 50,
      "n_positions": 8, "n_embd": 12, "n_layer": 1, "n_head": 3})");
  CliRun r = Frenzy("inspect --model " + path + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["params"].get<int64_t>(), 2604);
  CliRun text = Frenzy("inspect --model " + path);
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.out.find("2,604"), std::string::npos) << text.out;
}

TEST(Cli, BadInputExitsTwoNamingFileAndField) {
  std::string path = TempFile("bad.json", R"({"model_type": "llama", "num_hidden_layers": 0})");
  CliRun r = Frenzy("inspect --model " + path);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find(path), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("num_hidden_layers"), std::string::npos) << r.out;

  std::string broken = TempFile("broken.json", "{\"model_type\": ");
  CliRun b = Frenzy("inspect --model " + broken);
  EXPECT_EQ(b.exit_code, 2);
  EXPECT_NE(b.out.find("invalid JSON at line 1"), std::string::npos) << b.out;

  CliRun missing = Frenzy("inspect --model /no/such/config.json");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.out.find("/no/such/config.json"), std::string::npos) << missing.out;

  CliRun unknown = Frenzy("inspect --model t5-small");
  EXPECT_EQ(unknown.exit_code, 2);
  CliRun usage = Frenzy("inspect");
  EXPECT_EQ(usage.exit_code, 2);
}

TEST(Cli, ModelsListsTheZoo) {
  CliRun r = Frenzy("models --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_GE(j.size(), 25u);
  EXPECT_NE(Frenzy("models").out.find("llama-3.1-405b"), std::string::npos);
}

TEST(Cli, GpusJsonIsShapedAsTheCatalog) {
  CliRun r = Frenzy("gpus --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  for (const auto& g : j) {
    for (const char* key : {"name", "memory_gib", "bf16_tflops", "fp16_tflops", "fp32_tflops",
                            "mem_bw_gbs", "link", "link_gbs", "source"}) {
      EXPECT_TRUE(g.contains(key)) << key;
    }
  }
}

TEST(Cli, ClusterShow) {
  CliRun r = Frenzy("cluster show cluster2048 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["total_gpus"], 2048);
  EXPECT_EQ(j["gpu_types"].size(), 5u);
  std::string bad = TempFile("badcluster.json", R"({"name": "x", "node_groups": [
      {"prefix": "a", "count": 1, "gpu": "Z9000", "gpus_per_node": 8, "network_gbs": 1}]})");
  CliRun b = Frenzy("cluster show " + bad);
  EXPECT_EQ(b.exit_code, 2);
  EXPECT_NE(b.out.find("node_groups[0].gpu"), std::string::npos) << b.out;
}

TEST(Cli, PredictJsonHasTheDocumentedFields) {
  CliRun r = Frenzy("predict --model llama-2-7b --tp 2 --pp 2 --dp 2 --global-batch 16 "
                    "--gpu A100-80GB --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"peak_bytes", "peak_reserved_bytes", "device_bytes", "fits",
                          "headroom_bytes", "breakdown", "ranks", "params"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  for (const char* key : {"weights", "gradients", "optimizer", "activations", "logits",
                          "temporary", "overhead"}) {
    EXPECT_TRUE(j["breakdown"].contains(key)) << key;
  }
  EXPECT_EQ(j["ranks"].size(), 2u);  // one entry per pipeline stage
  EXPECT_EQ(j["params"].get<int64_t>(), 6738415616);
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_GT(j["device_bytes"].get<int64_t>(), j["peak_bytes"].get<int64_t>());
}

TEST(Cli, PredictSaysWhyALayoutIsImpossible) {
  CliRun r = Frenzy("predict --model llama-2-7b --tp 3");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("--tp"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("heads"), std::string::npos) << r.out;
  CliRun pp = Frenzy("predict --model gpt2 --pp 13");
  EXPECT_EQ(pp.exit_code, 2);
  EXPECT_NE(pp.out.find("layers"), std::string::npos) << pp.out;
  CliRun bad = Frenzy("predict --model gpt2 --precision fp8");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("--precision"), std::string::npos) << bad.out;
}

TEST(Cli, PredictTextShowsAStageTable) {
  CliRun r = Frenzy("predict --model llama-3-8b --gpu h100");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("peak allocated"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("H100-80GB"), std::string::npos) << r.out;
}

TEST(Cli, PerfJsonHasTheDocumentedFields) {
  CliRun r = Frenzy("perf --model llama-2-7b --gpu A100-80GB --gpus 8 --seq-len 4096 "
                    "--global-batch 64 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"iteration_s", "tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu",
                          "mfu", "breakdown"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["gpus"], 8);
  EXPECT_GT(j["mfu"].get<double>(), 0.05);
  EXPECT_LT(j["mfu"].get<double>(), 1.0);
  EXPECT_NEAR(j["tokens_per_s"].get<double>(), 8 * j["tokens_per_s_per_gpu"].get<double>(), 1e-6);
  CliRun bad = Frenzy("perf --model gpt2 --gpu v100 --seq-len 1024");  // bf16 on a V100
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("precision"), std::string::npos) << bad.out;
}

TEST(Cli, PlanRanksFeasiblePlansAndExplains) {
  CliRun r = Frenzy("plan --model llama-2-7b --tokens 2e10 --global-batch 256 --seq-len 4096 "
                    "--cluster cluster64 --top 5 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_FALSE(j["plans"].empty());
  EXPECT_LE(j["plans"].size(), 5u);
  for (const auto& p : j["plans"]) {
    for (const char* key : {"gpu", "gpus", "tp", "pp", "dp", "micro_batch", "zero", "recompute",
                            "peak_bytes", "iteration_s", "total_s", "cost"}) {
      EXPECT_TRUE(p.contains(key)) << key;
    }
    EXPECT_LT(p["device_bytes"].get<int64_t>(), p["gpu_memory_bytes"].get<int64_t>());
  }
  EXPECT_FALSE(j["explanation"].get<std::string>().empty());
  CliRun text = Frenzy("plan --model llama-2-7b --tokens 2e10 --global-batch 256 --cluster lab");
  EXPECT_EQ(text.exit_code, 0) << text.out;
  EXPECT_NE(text.out.find("plan:"), std::string::npos) << text.out;
  CliRun none = Frenzy("plan --model llama-3.1-405b --tokens 1e12 --global-batch 64 --cluster lab");
  EXPECT_EQ(none.exit_code, 3) << none.out;  // an answer: nothing fits
  EXPECT_NE(none.out.find("no plan fits"), std::string::npos) << none.out;
}

TEST(Cli, HelpForEverySubcommand) {
  for (const char* sub : {"inspect", "models", "gpus", "cluster show", "cluster list", "predict",
                          "perf", "plan"}) {
    CliRun r = Frenzy(std::string(sub) + " --help");
    EXPECT_EQ(r.exit_code, 0) << sub;
    EXPECT_NE(r.out.find("--json"), std::string::npos) << sub;
  }
}

}  // namespace
