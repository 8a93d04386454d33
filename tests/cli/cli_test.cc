// Runs the real `frenzy` binary as a user would and checks its output and exit codes.
#include <fmt/core.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli_run.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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

TEST(Cli, PlanWithLaunchAddsEachPlansLaunchOrSaysWhyNot) {
  CliRun r = Frenzy("plan --model llama-2-7b --tokens 2e9 --global-batch 64 --top 3 "
                    "--launch deepspeed --entry train.py --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_FALSE(j["plans"].empty());
  EXPECT_EQ(j["framework"], "deepspeed");
  for (const auto& p : j["plans"]) {
    const auto& l = p["launch"];
    EXPECT_EQ(l["framework"], "deepspeed");
    ASSERT_TRUE(l.contains("argv")) << l.dump();
    EXPECT_EQ(l["argv"][0], "torchrun");
    // The config the argv names is among the files, and splits the plan's batch.
    const auto ds = nlohmann::json::parse(l["files"]["ds_config.json"].get<std::string>());
    EXPECT_EQ(ds["train_batch_size"].get<int64_t>(),
              ds["train_micro_batch_size_per_gpu"].get<int64_t>() * p["dp"].get<int64_t>() *
                  ds["gradient_accumulation_steps"].get<int64_t>());
  }
  // Without the user's script there is nothing to run: every launch is refused, with why.
  CliRun no_entry = Frenzy("plan --model llama-2-7b --tokens 2e9 --global-batch 64 --top 1 "
                           "--launch deepspeed --json");
  ASSERT_EQ(no_entry.exit_code, 0) << no_entry.out;
  auto n = nlohmann::json::parse(no_entry.out);
  EXPECT_NE(n["plans"][0]["launch"]["refused"].get<std::string>().find("entry point"),
            std::string::npos);
  CliRun bad = Frenzy("plan --model llama-2-7b --tokens 2e9 --global-batch 64 --launch slurm");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("--launch"), std::string::npos) << bad.out;
  CliRun lora = Frenzy("plan --model llama-2-7b --tokens 2e9 --global-batch 64 --launch megatron "
                       "--finetune lora");
  EXPECT_EQ(lora.exit_code, 2);
  EXPECT_NE(lora.out.find("finetune"), std::string::npos) << lora.out;
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
  CliRun bad = Frenzy("predict --model gpt2 --precision fp4");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("--precision"), std::string::npos) << bad.out;
  // The error names the flag as it is typed (a field with an underscore has a dash there).
  CliRun mb = Frenzy("predict --model gpt2 --micro-batch 0");
  EXPECT_EQ(mb.exit_code, 2);
  EXPECT_NE(mb.out.find("--micro-batch:"), std::string::npos) << mb.out;
  CliRun split = Frenzy("predict --model llama-2-7b --pp 2 --stage-layers 20,11");
  EXPECT_EQ(split.exit_code, 2);
  EXPECT_NE(split.out.find("--stage-layers:"), std::string::npos) << split.out;
  EXPECT_NE(split.out.find("32 layers"), std::string::npos) << split.out;
  // A flag that describes another framework's releases is refused with the framework to use.
  CliRun legacy = Frenzy("predict --model gpt2 --seq-len 1024 --framework hf --megatron-legacy");
  EXPECT_EQ(legacy.exit_code, 2);
  EXPECT_NE(legacy.out.find("--megatron-legacy:"), std::string::npos) << legacy.out;
  EXPECT_NE(legacy.out.find("--framework megatron"), std::string::npos) << legacy.out;
  CliRun fused =
      Frenzy("predict --model gpt2 --seq-len 1024 --framework hf --cross-entropy-loss-fusion");
  EXPECT_EQ(fused.exit_code, 2);
  EXPECT_NE(fused.out.find("--cross-entropy-loss-fusion:"), std::string::npos) << fused.out;
}

// A LoRA fine-tune of Llama-2-7B on two RTX 3090s (FSDP, four sequences a GPU): its peak is the
// loss's, with the activations held.
constexpr const char* kLoraPlan =
    "plan --model llama-2-7b --tokens 1e7 --global-batch 16 --cluster lab --finetune lora "
    "--lora-dtype bf16 --framework fsdp --gpu RTX-3090 --gpus 2 --micro-batch 4 --json";

// The plan of kLoraPlan with `release` (an older library) holds more than the current one's.
void ExpectTheReleasePlansMore(const std::string& release) {
  CliRun now = Frenzy(kLoraPlan), old = Frenzy(kLoraPlan + release);
  ASSERT_EQ(now.exit_code, 0) << now.out;
  ASSERT_EQ(old.exit_code, 0) << old.out;
  auto jn = nlohmann::json::parse(now.out), jo = nlohmann::json::parse(old.out);
  ASSERT_FALSE(jn["plans"].empty()) << now.out;
  ASSERT_FALSE(jo["plans"].empty()) << old.out;
  EXPECT_GT(jo["plans"][0]["peak_bytes"].get<int64_t>(),
            jn["plans"][0]["peak_bytes"].get<int64_t>());
}

// Batches of varying length: the epoch's readings beside the fixed-length ones, and bad
// statistics named by their flag.
TEST(Cli, PredictSaysWhatATransformersReleaseMapsTo) {
  const std::string base =
      "predict --model llama-2-7b --framework fsdp --dp 2 --zero 3 --precision bf16-pure "
      "--recompute full --finetune lora --lora-dtype bf16 --micro-batch 10 --seq-len 2048";
  CliRun text = Frenzy(base + " --transformers 4.38");
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_NE(text.out.find("transformers 4.38: causal-LM loss as fp32 logits from the model"),
            std::string::npos) << text.out;
  EXPECT_NE(text.out.find("reserves"), std::string::npos) << text.out;
  CliRun now = Frenzy(base + " --json"), old = Frenzy(base + " --transformers 4.46.1 --json");
  ASSERT_EQ(now.exit_code, 0) << now.out;
  ASSERT_EQ(old.exit_code, 0) << old.out;
  auto jn = nlohmann::json::parse(now.out), jo = nlohmann::json::parse(old.out);
  EXPECT_FALSE(jn["layout"].contains("hf_loss"));
  EXPECT_EQ(jo["layout"]["hf_loss"], "fp32 copy in the loss, sliced (transformers 4.46-4.48)");
  EXPECT_GT(jo["ranks"][0]["step_excess_bytes"].get<int64_t>(), 0);
  CliRun bad = Frenzy(base + " --transformers latest");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("'--transformers': unknown value 'latest'"), std::string::npos)
      << bad.out;
  // Four sequences a GPU, as Answer.AI's LoRA runs on two RTX 3090s (up to six): both plans fit.
  ExpectTheReleasePlansMore(" --transformers 4.38");
  CliRun titan = Frenzy("plan --model llama-2-7b --tokens 1e7 --global-batch 16 --cluster lab "
                        "--launch torchtitan --transformers 4.38");
  EXPECT_EQ(titan.exit_code, 2);
  EXPECT_NE(titan.out.find("'--transformers'"), std::string::npos) << titan.out;
  CliRun megatron = Frenzy("predict --model gpt2 --seq-len 1024 --transformers 4.38");
  EXPECT_EQ(megatron.exit_code, 2);
  EXPECT_NE(megatron.out.find("--transformers:"), std::string::npos) << megatron.out;
}

TEST(Cli, PredictReportsWhatVaryingLengthsReserve) {
  const std::string base =
      "predict --model llama-3.2-1b --framework hf --recompute full --seq-len 2048 "
      "--finetune lora --drop-logits --length-mean 3234.4 --length-sd 2547.5 --length-min 91 "
      "--length-samples 2000 --drop-long";
  CliRun r = Frenzy(base + " --gpu A100-80GB --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["length_reserved_bytes"].get<int64_t>(), j["peak_reserved_bytes"].get<int64_t>());
  EXPECT_GT(j["length_device_bytes"].get<int64_t>(), j["device_bytes"].get<int64_t>());
  EXPECT_TRUE(j["fits"].get<bool>());  // judged on the fixed-length figures
  EXPECT_EQ(j["layout"]["lengths"]["longer"], "dropped");
  EXPECT_TRUE(j["ranks"][0].contains("length_reserve_bytes"));
  CliRun text = Frenzy(base);
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_NE(text.out.find("varying lengths"), std::string::npos) << text.out;
  CliRun bad = Frenzy("predict --model gpt2 --seq-len 1024 --framework hf --length-mean 1000");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("--length-sd:"), std::string::npos) << bad.out;
  CliRun cpu = Frenzy("predict --model gpt2 --seq-len 1024 --framework hf --device cpu "
                      "--length-mean 1000 --length-sd 10");
  EXPECT_EQ(cpu.exit_code, 2);
  EXPECT_NE(cpu.out.find("--length-mean:"), std::string::npos) << cpu.out;
  // The dataset's own lengths, from a file; a bad line is named with its number.
  const std::string dir = ::testing::TempDir();
  {
    std::ofstream(dir + "/lengths.txt") << "# my dataset\n300\n900\n2048\n";
    std::ofstream(dir + "/bad_lengths.txt") << "300\nthree hundred\n";
  }
  CliRun file = Frenzy(
      "predict --model llama-3.2-1b --framework hf --recompute full --seq-len 2048 --json "
      "--length-file " + dir + "/lengths.txt");
  ASSERT_EQ(file.exit_code, 0) << file.out;
  auto fj = nlohmann::json::parse(file.out);
  EXPECT_EQ(fj["layout"]["lengths"]["file_samples"], 3);
  EXPECT_EQ(fj["ranks"][0]["length_reserve_bytes"]["orders"], 1);
  CliRun badfile = Frenzy("predict --model llama-3.2-1b --framework hf --length-file " + dir +
                          "/bad_lengths.txt");
  EXPECT_EQ(badfile.exit_code, 2);
  EXPECT_NE(badfile.out.find("bad_lengths.txt:2"), std::string::npos) << badfile.out;
  CliRun missing = Frenzy("predict --model llama-3.2-1b --framework hf --length-file " + dir +
                          "/no_such_file.txt");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.out.find("no_such_file.txt"), std::string::npos) << missing.out;
}

// A heterogeneous pipeline: each stage judged on its own GPU type, and bad parts named.
TEST(Cli, PredictJudgesEachStageOnItsOwnGpuType) {
  CliRun r = Frenzy("predict --model llama-2-7b --precision fp16 --pp 2 --stage-layers 16,16 "
                    "--stage-gpus A100-80GB:1,T4:1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["stage_gpus"].size(), 2u);
  EXPECT_EQ(j["stage_gpus"][0]["gpu"], "A100-80GB");
  EXPECT_EQ(j["stage_gpus"][1]["gpu"], "T4");
  EXPECT_EQ(j["layout"]["stage_layers"], nlohmann::json::array({16, 16}));
  // Each stage holds 16 layers and the embedding or the head: 3.37e9 parameters, at Megatron's
  // 18 bytes a parameter about 56.5 GiB of model states. They fit an 80 GB A100, not a 16 GB T4.
  EXPECT_TRUE(j["stage_gpus"][0]["fits"].get<bool>());
  EXPECT_FALSE(j["stage_gpus"][1]["fits"].get<bool>());
  EXPECT_FALSE(j["fits"].get<bool>());
  CliRun sum = Frenzy("predict --model llama-2-7b --pp 2 --stage-gpus A100-80GB:1");
  EXPECT_EQ(sum.exit_code, 2);
  EXPECT_NE(sum.out.find("--stage-gpus"), std::string::npos) << sum.out;
  CliRun unknown = Frenzy("predict --model llama-2-7b --pp 2 --stage-gpus A100-80GB:1,Z9:1");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.out.find("--stage-gpus"), std::string::npos) << unknown.out;
  CliRun malformed = Frenzy("perf --model llama-2-7b --pp 2 --stage-gpus A100-80GB:x,T4:1");
  EXPECT_EQ(malformed.exit_code, 2);
  EXPECT_NE(malformed.out.find("--stage-gpus"), std::string::npos) << malformed.out;
}

// torchtitan's words: [activation_checkpoint] mode and selective_ac_option, mapped and said.
TEST(Cli, PredictTakesTorchtitansCheckpointingWords) {
  const std::string base = "predict --model llama-3-8b --framework fsdp --zero 3 --dp 8 ";
  CliRun every = Frenzy(base + "--ac-mode selective --selective-ac-option 2 --json");
  ASSERT_EQ(every.exit_code, 0) << every.out;
  auto j = nlohmann::json::parse(every.out);
  EXPECT_EQ(j["layout"]["recompute"], "full");
  EXPECT_EQ(j["layout"]["recompute_every"], 2);
  CliRun op = Frenzy(base + "--ac-mode selective --selective-ac-option op --json");
  ASSERT_EQ(op.exit_code, 0) << op.out;
  EXPECT_EQ(nlohmann::json::parse(op.out)["layout"]["recompute"], "op");
  CliRun text = Frenzy(base + "--ac-mode selective");
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_NE(text.out.find("selective_ac_option = \"2\" (torchtitan's default) -> full "
                          "recomputation of every 2nd layer"),
            std::string::npos)
      << text.out;
  // Between no and full recomputation of every layer.
  auto peak = [&](const std::string& flags) {
    CliRun r = Frenzy(base + flags + " --json");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out)["peak_bytes"].get<int64_t>() : 0;
  };
  const int64_t none = peak("--recompute none"), full = peak("--recompute full");
  const int64_t half = peak("--recompute full --recompute-every 2");
  EXPECT_LT(full, half);
  EXPECT_LT(half, none);
  for (const char* bad : {"--ac-mode selective --selective-ac-option x",
                          "--ac-mode selective --selective-ac-option 0",
                          "--ac-mode partial", "--ac-mode full --recompute full",
                          "--selective-ac-option 2", "--recompute selective --recompute-every 2",
                          "--recompute full --recompute-every 0"}) {
    CliRun r = Frenzy(base + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.out;
    EXPECT_NE(r.out.find("--"), std::string::npos) << r.out;
  }
}

// litgpt's model code: said in the text and the JSON. For Llama-2 at q and v, bytes a token per
// hidden unit a layer: the fused q/k/v output and zero_pad's copy add 8 to the HF modules'
// account and its one dropout on the fused input keeps 3 less than PEFT's two, so more is kept;
// with lit-gpt's 2023 RMSNorm in bf16 on the PyTorch of then (2.1, whose mean kept x^2), 8 less
// again than HF's fp32 one there, so less is kept.
// Refused where Megatron-LM runs its own layers.
TEST(Cli, PredictTakesLitgptsModelCode) {
  const std::string base = "predict --model llama-2-7b --framework fsdp --precision bf16-pure "
                           "--finetune lora --lora-targets q_proj,v_proj --lora-dtype bf16 "
                           "--lora-dropout 0.05 --seq-len 1024";
  CliRun text = Frenzy(base + " --litgpt-model");
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_NE(text.out.find("model code: litgpt's GPT"), std::string::npos) << text.out;
  CliRun lit = Frenzy(base + " --litgpt-model --json");
  CliRun hf = Frenzy(base + " --json");
  ASSERT_EQ(lit.exit_code, 0) << lit.out;
  ASSERT_EQ(hf.exit_code, 0) << hf.out;
  auto jl = nlohmann::json::parse(lit.out), jh = nlohmann::json::parse(hf.out);
  EXPECT_EQ(jl["layout"]["litgpt_model"], true);
  EXPECT_FALSE(jh["layout"].contains("litgpt_model"));
  EXPECT_EQ(jl["params"], jh["params"]);  // the same weights, differently computed
  auto acts = [](const nlohmann::json& j) {
    return j["ranks"][0]["activations_per_microbatch"].get<int64_t>();
  };
  EXPECT_GT(acts(jl), acts(jh));
  CliRun old = Frenzy(base + " --litgpt-bf16-rmsnorm --torch 2.1 --json");  // implies --litgpt-model
  CliRun hf21 = Frenzy(base + " --torch 2.1 --json");
  ASSERT_EQ(old.exit_code, 0) << old.out;
  ASSERT_EQ(hf21.exit_code, 0) << hf21.out;
  auto jo = nlohmann::json::parse(old.out);
  EXPECT_EQ(jo["layout"]["litgpt_model"], true);
  EXPECT_EQ(jo["layout"]["litgpt_bf16_rmsnorm"], true);
  EXPECT_LT(acts(jo), acts(nlohmann::json::parse(hf21.out)));
  CliRun bad = Frenzy("predict --model llama-2-7b --framework megatron --litgpt-model");
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--litgpt-model"), std::string::npos) << bad.out;
}

// --torch: before 2.2 torch.mean kept its input, so each of the two RMSNorms of Llama-2-7B's 32
// layers kept its fp32 x^2 as well: 64 x 1024 tokens x 4096 x 4 bytes = 1 GiB more of the layers'
// activations on 2.1, by hand; the release is said in the text and the JSON, and a malformed one
// is refused naming the flag.
TEST(Cli, PredictTakesTheTorchRelease) {
  const std::string base = "predict --model llama-2-7b --framework hf --precision bf16-pure "
                           "--seq-len 1024 --json";
  CliRun now = Frenzy(base);
  CliRun old = Frenzy(base + " --torch 2.1.1");
  CliRun recent = Frenzy(base + " --torch 2.2.0+cu121");
  ASSERT_EQ(now.exit_code, 0) << now.out;
  ASSERT_EQ(old.exit_code, 0) << old.out;
  ASSERT_EQ(recent.exit_code, 0) << recent.out;
  auto jn = nlohmann::json::parse(now.out), jo = nlohmann::json::parse(old.out),
       jr = nlohmann::json::parse(recent.out);
  auto acts = [](const nlohmann::json& j) {
    return j["ranks"][0]["activations_per_microbatch"].get<int64_t>();
  };
  EXPECT_EQ(acts(jo) - acts(jn), int64_t{64} * 1024 * 4096 * 4);
  EXPECT_EQ(acts(jr), acts(jn));
  EXPECT_EQ(jo["layout"]["torch_mean_keeps_input"], true);
  EXPECT_FALSE(jn["layout"].contains("torch_mean_keeps_input"));
  // plan takes it too: the same LoRA job (its peak is the loss's, activations held) planned for
  // PyTorch 2.1 needs more memory, by the norms.
  ExpectTheReleasePlansMore(" --torch 2.1");
  CliRun p_bad = Frenzy(std::string(kLoraPlan) + " --torch 2.x");
  EXPECT_EQ(p_bad.exit_code, 2) << p_bad.out;
  EXPECT_NE(p_bad.out.find("'--torch'"), std::string::npos) << p_bad.out;
  CliRun text = Frenzy("predict --model llama-2-7b --torch 2.1 --framework hf");
  EXPECT_NE(text.out.find("torch 2.1: torch.mean keeps its input"), std::string::npos) << text.out;
  CliRun bad = Frenzy("predict --model llama-2-7b --torch two");
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--torch"), std::string::npos) << bad.out;
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
  // Model FLOPs per token by PaLM's definition (Chowdhery et al. 2022, appendix B), by hand for
  // Llama-2-7B at 4,096 tokens: 6 x the non-embedding parameters (6,738,415,616 less the
  // 32,000 x 4,096 input embedding) + 12 x layers x hidden x sequence (12 x 32 x 4096 x 4096)
  // = 39,644,061,696 + 6,442,450,944.
  EXPECT_NEAR(j["model_flops_per_token"].get<double>(), 46086512640.0, 1.0);
  // MFU is against the A100's dense BF16 peak, 312 TFLOPS (NVIDIA A100 datasheet).
  EXPECT_NEAR(j["mfu"].get<double>(), j["tflops_per_gpu"].get<double>() / 312, 1e-9);
  // An iteration trains the global batch: 64 sequences of 4,096 tokens.
  EXPECT_NEAR(j["tokens_per_s"].get<double>() * j["iteration_s"].get<double>(), 64.0 * 4096,
              1e-6);
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
  double previous_s = 0;
  for (const auto& p : j["plans"]) {
    for (const char* key : {"gpu", "gpus", "tp", "pp", "dp", "micro_batch", "zero", "recompute",
                            "peak_bytes", "iteration_s", "total_s", "cost"}) {
      EXPECT_TRUE(p.contains(key)) << key;
    }
    // Fits with the default 10% margin, uses every GPU it names, reaches the global batch.
    EXPECT_LE(p["device_bytes"].get<double>() * 1.1, p["gpu_memory_bytes"].get<double>());
    EXPECT_EQ(p["tp"].get<int64_t>() * p["pp"].get<int64_t>() * p["dp"].get<int64_t>() *
                  p["cp"].get<int64_t>(),
              p["gpus"].get<int64_t>());
    EXPECT_EQ(256 % (p["micro_batch"].get<int64_t>() * p["dp"].get<int64_t>()), 0);
    // 2e10 tokens at 256 x 4,096 tokens per iteration: 19,073.5 iterations.
    EXPECT_NEAR(p["total_s"].get<double>(), 2e10 / (256.0 * 4096) * p["iteration_s"].get<double>(),
                1e-9 * p["total_s"].get<double>());
    EXPECT_GE(p["total_s"].get<double>(), previous_s);  // ranked by time
    previous_s = p["total_s"].get<double>();
  }
  // The Pareto set: more GPUs only when strictly faster.
  ASSERT_FALSE(j["pareto"].empty());
  for (size_t i = 1; i < j["pareto"].size(); ++i) {
    EXPECT_GT(j["pareto"][i]["gpus"].get<int64_t>(), j["pareto"][i - 1]["gpus"].get<int64_t>());
    EXPECT_LT(j["pareto"][i]["total_s"].get<double>(),
              j["pareto"][i - 1]["total_s"].get<double>());
  }
  EXPECT_TRUE(j["infeasible"].is_null());
  EXPECT_FALSE(j["explanation"].get<std::string>().empty());
  CliRun text = Frenzy("plan --model llama-2-7b --tokens 2e10 --global-batch 256 --cluster lab");
  EXPECT_EQ(text.exit_code, 0) << text.out;
  EXPECT_NE(text.out.find("fastest plan:"), std::string::npos) << text.out;
}

TEST(Cli, PlanFineTunesUnderPeftDataParallel) {
  CliRun r = Frenzy("plan --model llama-2-70b --tokens 1e7 --global-batch 16 --cluster lab "
                    "--finetune qlora --lora-rank 64 --lora-dtype bf16 --optimizer paged-adamw "
                    "--json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["framework"], "hf");
  EXPECT_EQ(j["finetune"], "qlora");
  ASSERT_FALSE(j["plans"].empty());
  for (const auto& p : j["plans"]) {
    EXPECT_EQ(p["dp"], p["gpus"]);
    EXPECT_EQ(p["tp"], 1);
  }
  CliRun text = Frenzy("plan --model llama-2-70b --tokens 1e7 --global-batch 16 --cluster lab "
                       "--finetune lora --framework fsdp");
  EXPECT_EQ(text.exit_code, 0) << text.out;
  EXPECT_NE(text.out.find("(fsdp)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("fine-tune lora: rank 8 on all-linear"), std::string::npos) << text.out;
  CliRun bad = Frenzy("plan --model gpt2 --tokens 1e7 --global-batch 16 --finetune lora "
                      "--lora-dtype int4");
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--lora-dtype"), std::string::npos) << bad.out;
}

TEST(Cli, PlanSaysWhyNothingFits) {
  // Llama-3.1-405B on the lab cluster (8 GPUs of each of three types): too little memory on
  // every type. Mixed-precision Adam keeps at least 16 bytes per parameter (ZeRO, section
  // 3.1): 16 x 405,853,388,800 / 8 GPUs, x 1.1 for the margin, per GPU at the least.
  CliRun none =
      Frenzy("plan --model llama-3.1-405b --tokens 1e12 --global-batch 64 --cluster lab --json");
  EXPECT_EQ(none.exit_code, 3) << none.out;  // an answer: nothing fits
  auto j = nlohmann::json::parse(none.out);
  EXPECT_TRUE(j["plans"].empty());
  EXPECT_EQ(j["layouts_fitting"], 0);
  const auto& why = j["infeasible"];
  ASSERT_TRUE(why.is_object()) << none.out;
  EXPECT_EQ(why["kind"], "too_little_memory");
  EXPECT_TRUE(why["error"].is_null());
  const std::vector<std::pair<std::string, int64_t>> types = {
      {"A100-80GB", 80}, {"V100-32GB", 32}, {"RTX-3090", 24}};
  ASSERT_EQ(why["shortfalls"].size(), types.size());
  for (size_t i = 0; i < types.size(); ++i) {
    const auto& s = why["shortfalls"][i];
    EXPECT_EQ(s["gpu"], types[i].first);
    EXPECT_EQ(s["gpu_memory_bytes"].get<int64_t>(), types[i].second << 30);
    EXPECT_GE(s["least_bytes"].get<double>(), 1.1 * 16 * 405853388800.0 / 8) << s["gpu"];
    EXPECT_EQ(s["least_layout"]["gpus"], 8) << s["gpu"];
  }
  // What would fit: more A100-80GB (the largest memory), at least 16 x 405.85e9 x 1.1 / 80 GiB
  // = 83.1 of them; the lab has 8.
  ASSERT_TRUE(why["would_fit"].is_object()) << none.out;
  EXPECT_EQ(why["would_fit"]["plan"]["gpu"], "A100-80GB");
  EXPECT_GE(why["would_fit"]["plan"]["gpus"].get<int64_t>(), 84);
  EXPECT_EQ(why["would_fit"]["cluster_gpus"], 8);
  // The prose renders at the edge, in text and JSON alike.
  CliRun text =
      Frenzy("plan --model llama-3.1-405b --tokens 1e12 --global-batch 64 --cluster lab");
  EXPECT_EQ(text.exit_code, 3) << text.out;
  EXPECT_NE(text.out.find("no plan fits"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(j["explanation"].get<std::string>()), std::string::npos) << text.out;

  // A deadline of 36 s (0.01 h) for 2e10 tokens needs 5.6e8 tokens/s; at the A100's peak
  // (312 TFLOPS / (6 x 6.74e9 FLOPs per token) = 7,700 tokens/s per GPU) 24 GPUs make 1.9e5.
  CliRun late = Frenzy("plan --model llama-2-7b --tokens 2e10 --global-batch 256 --cluster lab "
                       "--deadline-hours 0.01 --json");
  EXPECT_EQ(late.exit_code, 3) << late.out;
  auto l = nlohmann::json::parse(late.out);
  EXPECT_EQ(l["infeasible"]["kind"], "goals_unmet");
  EXPECT_GT(l["layouts_fitting"].get<int64_t>(), 0);
  // TP 3 divides neither Llama's 32 heads nor its FFN: no layout at all.
  CliRun pins = Frenzy("plan --model llama-2-7b --tokens 2e10 --global-batch 256 --cluster lab "
                       "--tp 3 --json");
  EXPECT_EQ(pins.exit_code, 3) << pins.out;
  auto p = nlohmann::json::parse(pins.out);
  EXPECT_EQ(p["infeasible"]["kind"], "no_layout");
  EXPECT_EQ(p["infeasible"]["error"]["field"], "tp");
}

// Nothing single-type holds Llama-3.1-70B on sia64 (16 A100-40GB, 24 V100-32GB, 24 T4); a
// pipeline over its types does, and plan answers with it (exit 0), each stage within its GPU.
TEST(Cli, PlanFallsBackToAHeterogeneousPipeline) {
  CliRun r = Frenzy("plan --model llama-3.1-70b --tokens 1e10 --global-batch 64 --cluster sia64 "
                    "--json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["plans"].empty());
  ASSERT_FALSE(j["mixed_plans"].empty()) << r.out;
  const auto& best = j["mixed_plans"][0];
  EXPECT_GE(best["parts"].size(), 2u);
  for (size_t s = 0; s < best["stage_layers"].size(); ++s) {
    EXPECT_LT(best["stage_device_bytes"][s].get<int64_t>(),
              best["stage_gpu_memory_bytes"][s].get<int64_t>());
  }
  CliRun text = Frenzy("plan --model llama-3.1-70b --tokens 1e10 --global-batch 64 "
                       "--cluster sia64 --top 1");
  EXPECT_EQ(text.exit_code, 0) << text.out;
  EXPECT_NE(text.out.find("plans over several do"), std::string::npos) << text.out;
}

// Where a single type holds the job, plan lists the data-parallel mixes that beat it; predict and
// perf take such a layout with --data-groups, and refuse a malformed one naming the flag.
// No framework adapter expresses a plan over several types: with --launch each mixed plan says
// why in that framework's terms, and the single-type plans keep their launches.
TEST(Cli, MixedPlansAreRefusedByTheLaunchAdapters) {
  for (const char* fw : {"megatron", "deepspeed"}) {
    CliRun r = Frenzy(std::string("plan --model llama-2-7b --tokens 1e10 --global-batch 512 "
                                  "--seq-len 1024 --cluster sia64 --json --entry train.py "
                                  "--launch ") + fw);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    auto j = nlohmann::json::parse(r.out);
    ASSERT_FALSE(j["plans"].empty()) << fw;
    EXPECT_TRUE(j["plans"][0]["launch"].contains("argv")) << j["plans"][0]["launch"];
    ASSERT_FALSE(j["mixed_plans"].empty()) << fw << ": " << r.out;
    for (const auto& p : j["mixed_plans"]) {
      ASSERT_TRUE(p["launch"].contains("refused")) << p;
      std::string why = p["launch"]["refused"];
      EXPECT_NE(why.find(fw == std::string("megatron") ? "--micro-batch-size"
                                                       : "train_micro_batch_size_per_gpu"),
                std::string::npos)
          << why;
      EXPECT_NE(why.find("examples/train.py"), std::string::npos) << why;
    }
  }
  // A pipeline over three types: its middle stages differ, which Megatron-LM's two flags cannot
  // say.
  CliRun r = Frenzy("plan --model llama-3.1-70b --tokens 1e10 --global-batch 64 --cluster sia64 "
                    "--launch megatron");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("launch refused by megatron: Megatron-LM sets the layers of the first and "
                       "last stage only"),
            std::string::npos)
      << r.out;
}

TEST(Cli, DataParallelGroupsOverSeveralTypes) {
  CliRun r = Frenzy("plan --model llama-2-7b --tokens 1e10 --global-batch 512 --seq-len 4096 "
                    "--cluster sia64 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_FALSE(j["plans"].empty());
  ASSERT_FALSE(j["mixed_plans"].empty()) << r.out;
  const auto& best = j["mixed_plans"][0];
  EXPECT_EQ(best["family"], "data");
  EXPECT_GT(best["tokens_per_s"].get<double>(), j["plans"][0]["tokens_per_s"].get<double>());
  int64_t batch = 0;
  std::string groups;
  for (const auto& part : best["parts"]) {
    batch += part["batch"].get<int64_t>();
    groups += (groups.empty() ? "" : ",") + part["gpu"].get<std::string>() + ":" +
              std::to_string(part["dp"].get<int64_t>()) + ":" +
              std::to_string(part["batch"].get<int64_t>()) + ":" +
              std::to_string(part["micro_batch"].get<int64_t>());
  }
  EXPECT_EQ(batch, 512);
  // The same layout through perf: the same step.
  std::string layout = fmt::format(
      "--model llama-2-7b --seq-len 4096 --precision {} --tp {} --pp {} {} --cluster sia64 "
      "--data-groups {}",
      best["precision"].get<std::string>(), best["tp"].get<int64_t>(), best["pp"].get<int64_t>(),
      best["distributed_optimizer"].get<bool>() ? "--distributed-optimizer" : "", groups);
  CliRun perf = Frenzy("perf " + layout + " --json", false);
  ASSERT_EQ(perf.exit_code, 0) << perf.out;
  auto pj = nlohmann::json::parse(perf.out);
  EXPECT_NEAR(pj["iteration_s"].get<double>(), best["iteration_s"].get<double>(), 1e-6);
  CliRun bad = Frenzy("perf --model llama-2-7b --data-groups A100-40GB:2");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("--data-groups"), std::string::npos) << bad.out;
  bad = Frenzy("predict --model llama-2-7b --data-groups A100-40GB:2:30,V100-32GB:3:130");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("multiple of replicas x micro-batch"), std::string::npos) << bad.out;
  // Each group is accounted on its own: with the same micro-batch and nothing sharded both need
  // the same bytes, and each fits by its own GPU's memory; with the distributed optimizer the
  // group of 3 replicas shards its optimizer states 3 ways and needs less than the group of 2.
  const std::string groups_flag = "--data-groups A100-40GB:2:380,V100-32GB:3:132";
  for (bool sharded : {false, true}) {
    CliRun pred = Frenzy("predict --model llama-2-7b --seq-len 4096 --pp 8 --precision fp16 " +
                             groups_flag + (sharded ? " --distributed-optimizer" : "") + " --json",
                         false);
    ASSERT_EQ(pred.exit_code, 0) << pred.out;
    auto dj = nlohmann::json::parse(pred.out);
    ASSERT_EQ(dj["data_groups"].size(), 2u);
    const auto& a = dj["data_groups"][0];
    const auto& v = dj["data_groups"][1];
    if (sharded) {
      EXPECT_LT(v["device_bytes"].get<int64_t>(), a["device_bytes"].get<int64_t>());
    } else {
      EXPECT_EQ(v["device_bytes"].get<int64_t>(), a["device_bytes"].get<int64_t>());
    }
    bool all = true;
    for (const auto& g : {a, v}) {
      EXPECT_EQ(g["fits"].get<bool>(),
                g["resident_bytes"].get<int64_t>() <= g["gpu_memory_bytes"].get<int64_t>());
      all = all && g["fits"].get<bool>();
    }
    EXPECT_EQ(dj["fits"].get<bool>(), all);
  }
}

TEST(Cli, HelpForEverySubcommand) {
  for (const char* sub : {"inspect", "models", "gpus", "cluster show", "cluster list", "predict",
                          "perf", "plan"}) {
    CliRun r = Frenzy(std::string(sub) + " --help");
    EXPECT_EQ(r.exit_code, 0) << sub;
    EXPECT_NE(r.out.find("--json"), std::string::npos) << sub;
  }
}

// ---- the client commands against servers that are not (working) frenzyds ------------------

// A TCP server on 127.0.0.1 (a port of the kernel's choosing) that treats every connection the
// same way, from its own thread, until destroyed: answers with fixed bytes, holds it open and
// says nothing, or closes it at once.
class TinyServer {
 public:
  enum class Mode { kAnswer, kSilent, kClose };

  explicit TinyServer(Mode mode, std::string answer = "")
      : mode_(mode), answer_(std::move(answer)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen on 127.0.0.1";
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Loop(); });
  }
  ~TinyServer() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (int fd : held_) ::close(fd);
    if (fd_ >= 0) ::close(fd_);
  }
  TinyServer(const TinyServer&) = delete;
  TinyServer& operator=(const TinyServer&) = delete;

  int port() const { return port_; }
  std::string url(const std::string& scheme = "http") const {
    return scheme + "://127.0.0.1:" + std::to_string(port_);
  }
  int connections() const { return connections_; }

 private:
  void Loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int fd = ::accept(fd_, nullptr, nullptr);
      if (fd < 0) continue;
      ++connections_;
      if (mode_ == Mode::kClose) {
        ::close(fd);
      } else if (mode_ == Mode::kSilent) {
        held_.push_back(fd);  // open until the destructor
      } else {
        ReadRequest(fd);
        for (size_t done = 0; done < answer_.size();) {
          ssize_t n = ::send(fd, answer_.data() + done, answer_.size() - done, MSG_NOSIGNAL);
          if (n <= 0) break;
          done += static_cast<size_t>(n);
        }
        // Close only after the client is done, so that unread bytes do not turn the close into
        // a reset that could beat the answer.
        ::shutdown(fd, SHUT_WR);
        ReadUntilQuiet(fd, 2000);
        ::close(fd);
      }
    }
  }
  // The request's head and body (by Content-Length), or whatever comes until the client pauses
  // (a TLS handshake is no HTTP request).
  static void ReadRequest(int fd) {
    std::string got;
    char buf[4096];
    while (true) {
      size_t head_end = got.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        std::string head = got.substr(0, head_end);
        std::transform(head.begin(), head.end(), head.begin(), ::tolower);
        size_t cl = head.find("content-length:");
        size_t body = cl == std::string::npos ? 0 : std::stoul(head.substr(cl + 15));
        if (got.size() >= head_end + 4 + body) return;
      }
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, got.empty() ? 2000 : 300) <= 0) return;
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) return;
      got.append(buf, static_cast<size_t>(n));
    }
  }
  static void ReadUntilQuiet(int fd, int timeout_ms) {
    char buf[4096];
    pollfd p{fd, POLLIN, 0};
    while (::poll(&p, 1, timeout_ms) > 0 && ::recv(fd, buf, sizeof(buf), 0) > 0) {
    }
  }

  Mode mode_;
  std::string answer_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::vector<int> held_;
  std::thread thread_;
};

std::string HttpAnswer(const std::string& status, const std::string& type,
                       const std::string& body) {
  return "HTTP/1.1 " + status + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         body;
}

// Every client command, with what it needs besides the server.
const std::vector<std::string>& ClientCommands() {
  static const std::vector<std::string> kCommands = {
      "submit --model gpt2 --tokens 1e6 --global-batch 8 --seq-len 128", "jobs", "status j-1",
      "cancel j-1", "cluster status"};
  return kCommands;
}

// A failed client command: exit code 2, one line on stderr (nothing on stdout) naming the server
// and containing `what`, never an internal error.
void ExpectClearError(const CliRun& r, const std::string& command, const std::string& server,
                      const std::string& what) {
  SCOPED_TRACE(command);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_EQ(r.out.rfind("frenzy: error: ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find(server), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(what), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
}

// The client commands read $FRENZY_TOKEN and $FRENZY_SERVER: none from the test's environment.
class CliClient : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv("FRENZY_TOKEN");
    ::unsetenv("FRENZY_SERVER");
  }
};

TEST_F(CliClient, AnHtmlPageIsNotJson) {
  const std::string page =
      "<!DOCTYPE html>\n<html>\n<head><title>Welcome to nginx!</title></head>\n<body>"
      "<h1>Welcome to nginx!</h1><p>If you see this page, the nginx web server is successfully "
      "installed.</p></body></html>\n";
  TinyServer server(TinyServer::Mode::kAnswer, HttpAnswer("200 OK", "text/html", page));
  for (const std::string& cmd : ClientCommands()) {
    CliRun r = Frenzy(cmd + " --server " + server.url() + " --token good-token");
    ExpectClearError(r, cmd, server.url(),
                     "answered with something that is not JSON (HTTP 200, text/html): "
                     "'<!DOCTYPE html> <html> <head><title>Welcome to nginx!</title></head>");
    EXPECT_NE(r.out.find("...'"), std::string::npos) << r.out;  // cut at 80 characters
  }
  EXPECT_EQ(server.connections(), static_cast<int>(ClientCommands().size()));
}

TEST_F(CliClient, APlainTextErrorIsNotAFrenzydError) {
  TinyServer server(TinyServer::Mode::kAnswer,
                    HttpAnswer("502 Bad Gateway", "text/plain", "Bad Gateway\n"));
  for (const std::string& cmd : ClientCommands()) {
    CliRun r = Frenzy(cmd + " --server " + server.url());
    ExpectClearError(r, cmd, server.url(),
                     "answered HTTP 502 (text/plain) without a frenzyd error: 'Bad Gateway'");
  }
}

TEST_F(CliClient, JsonOfAnotherShapeIsReportedNotACrash) {
  // JSON, but not frenzyd's: a list, then an object whose fields have other types.
  TinyServer list(TinyServer::Mode::kAnswer, HttpAnswer("200 OK", "application/json", "[1, 2]"));
  for (const std::string& cmd : ClientCommands()) {
    ExpectClearError(Frenzy(cmd + " --server " + list.url()), cmd, list.url(),
                     "answered JSON that is not an object (HTTP 200): '[1, 2]'");
  }
  TinyServer odd(TinyServer::Mode::kAnswer,
                 HttpAnswer("200 OK", "application/json",
                            R"({"jobs": "none", "types": 3, "id": 7, "progress": [1]})"));
  for (const char* cmd : {"jobs", "cluster status"}) {
    ExpectClearError(Frenzy(std::string(cmd) + " --server " + odd.url()), cmd, odd.url(),
                     "answered without a");
  }
  // Fields that are only shown may be odd: they print as they are, and the command succeeds.
  CliRun shown = Frenzy("status j-1 --server " + odd.url());
  EXPECT_EQ(shown.exit_code, 0) << shown.out;
  EXPECT_NE(shown.out.find("job       7"), std::string::npos) << shown.out;
}

TEST_F(CliClient, AServerThatNeverAnswersTimesOut) {
  TinyServer server(TinyServer::Mode::kSilent);
  for (const std::string& cmd : ClientCommands()) {
    const auto start = std::chrono::steady_clock::now();
    CliRun r = Frenzy(cmd + " --server " + server.url() + " --timeout 1");
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ExpectClearError(r, cmd, server.url(), "did not answer within 1 s");
    EXPECT_LT(took, 10) << cmd;
  }
  // Over TLS the handshake is what never ends; it has the connection's 5 s.
  const std::string tls = server.url("https");
  ExpectClearError(Frenzy("jobs --server " + tls + " --timeout 1"), "tls", tls,
                   "did not complete a TLS handshake within 5 s");
  // The default is 30 s, shown in the help.
  EXPECT_NE(Frenzy("jobs --help").out.find("30"), std::string::npos);
}

TEST_F(CliClient, AServerThatHangsUpAtOnce) {
  TinyServer server(TinyServer::Mode::kClose);
  for (const std::string& cmd : ClientCommands()) {
    ExpectClearError(Frenzy(cmd + " --server " + server.url() + " --timeout 20"), cmd, server.url(),
                     "closed the connection");
  }
}

TEST_F(CliClient, NothingListening) {
  int port = 0;
  {
    TinyServer gone(TinyServer::Mode::kClose);  // a port that was free a moment ago
    port = gone.port();
  }
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  for (const std::string& cmd : ClientCommands()) {
    ExpectClearError(Frenzy(cmd + " --server " + url), cmd, url, "cannot connect");
  }
}

TEST_F(CliClient, WrongSchemes) {
  // https to a server that speaks plain HTTP: the TLS handshake fails.
  TinyServer plain(TinyServer::Mode::kAnswer,
                   HttpAnswer("200 OK", "application/json", R"({"jobs": []})"));
  for (const std::string& cmd : ClientCommands()) {
    ExpectClearError(Frenzy(cmd + " --server " + plain.url("https")), cmd, plain.url("https"),
                     "TLS handshake");
  }
  // Schemes frenzy does not speak, and URLs with parts frenzyd has no use for, fail before any
  // connection.
  for (const std::string& cmd : ClientCommands()) {
    ExpectClearError(Frenzy(cmd + " --server ftp://x"), cmd, "ftp://x",
                     "unsupported scheme 'ftp' (use http://");
  }
  ExpectClearError(Frenzy("jobs --server " + plain.url() + "/api"), "path", plain.url() + "/api",
                   "has a path");
  ExpectClearError(Frenzy("jobs --server http://127.0.0.1:99999"), "port", "http://127.0.0.1:99999",
                   "bad port '99999'");
  ::setenv("FRENZY_SERVER", "gopher://x:70", 1);
  ExpectClearError(Frenzy("jobs"), "env", "gopher://x:70", "(from $FRENZY_SERVER)");
  ::unsetenv("FRENZY_SERVER");
  EXPECT_EQ(plain.connections(), static_cast<int>(ClientCommands().size()));  // https tries only

  // The same server, asked properly, works.
  CliRun ok = Frenzy("jobs --server " + plain.url() + "/");
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_NE(ok.out.find("MODEL"), std::string::npos) << ok.out;
}

TEST_F(CliClient, BlankTokensAndTokensWithWhitespaceAreRefused) {
  TinyServer server(TinyServer::Mode::kAnswer,
                    HttpAnswer("200 OK", "application/json", R"({"jobs": []})"));
  for (const std::string& cmd : ClientCommands()) {
    CliRun blank = Frenzy(cmd + " --server " + server.url() + " --token '   '");
    EXPECT_EQ(blank.exit_code, 2) << blank.out;
    EXPECT_NE(blank.out.find("field 'token': is blank (from --token)"), std::string::npos)
        << blank.out;
    CliRun spaced = Frenzy(cmd + " --server " + server.url() + " --token 'abc def'");
    EXPECT_EQ(spaced.exit_code, 2) << spaced.out;
    EXPECT_NE(spaced.out.find("field 'token': contains a space"), std::string::npos) << spaced.out;
    EXPECT_EQ(spaced.out.find("abc def"), std::string::npos) << "the token is not repeated";
  }
  ::setenv("FRENZY_TOKEN",
           "abc\x01"
           "def",
           1);
  CliRun control = Frenzy("jobs --server " + server.url());
  EXPECT_EQ(control.exit_code, 2) << control.out;
  EXPECT_NE(control.out.find("field 'token': contains the byte 0x01 (from $FRENZY_TOKEN)"),
            std::string::npos)
      << control.out;
  ::setenv("FRENZY_TOKEN", "\t \n", 1);
  CliRun env_blank = Frenzy("jobs --server " + server.url());
  EXPECT_EQ(env_blank.exit_code, 2) << env_blank.out;
  EXPECT_NE(env_blank.out.find("is blank (from $FRENZY_TOKEN)"), std::string::npos)
      << env_blank.out;
  ::unsetenv("FRENZY_TOKEN");
  EXPECT_EQ(server.connections(), 0);  // refused before anything was sent

  // Tokens without whitespace pass, however short; no token at all too.
  for (const char* token : {"x", "tok-3b9d_2e71.c4+/="}) {
    CliRun ok = Frenzy("jobs --server " + server.url() + " --token '" + token + "'");
    EXPECT_EQ(ok.exit_code, 0) << token << ": " << ok.out;
  }
  EXPECT_EQ(Frenzy("jobs --server " + server.url()).exit_code, 0);
}

TEST_F(CliClient, TheDaemonRefusesBlankTokensAndTokensWithWhitespace) {
  const std::string db =
      (std::filesystem::temp_directory_path() / "frenzy-cli-test-token.db").string();
  std::filesystem::remove(db);
  // --listen has a bad port, so that a daemon that took the token would still stop (with an
  // error about the port) rather than serve.
  for (const char* token : {"' '", "'two words'", "\"$(printf 'tab\\there')\""}) {
    CliRun r = Frenzy(std::string("serve --listen 127.0.0.1:0 --db ") + db + " --token " + token);
    EXPECT_EQ(r.exit_code, 2) << token << ": " << r.out;
    EXPECT_NE(r.out.find("field 'token'"), std::string::npos) << r.out;
  }
  ::setenv("FRENZY_TOKEN", "   ", 1);
  CliRun env = Frenzy("serve --listen 127.0.0.1:0 --db " + db);
  ::unsetenv("FRENZY_TOKEN");
  EXPECT_EQ(env.exit_code, 2) << env.out;
  EXPECT_NE(env.out.find("field 'token': is blank"), std::string::npos) << env.out;
  EXPECT_FALSE(std::filesystem::exists(db)) << "refused before opening the database";
}

}  // namespace
