// The daemon on the sim backend with an injected clock: jobs are planned on GPUs that hold
// them, run, finish; a restarted daemon re-attaches to running jobs; bad specs change nothing.
#include "server/daemon.h"

#include <fmt/core.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon_fixture.h"
#include "server/api.h"

namespace frenzy::server {
namespace {

using nlohmann::json;
using test_util::Fixture;
using test_util::Spec;

TEST(Daemon, JobsArePlannedOnFittingGpusRunAndFinish) {
  Fixture f("flow");
  auto d = f.Make();
  auto a = d->Submit(Spec("llama-2-7b", 1e9));
  auto b = d->Submit(Spec("opt-30b", 1e9));
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  ASSERT_TRUE(d->Tick().ok());
  // The shorter job (llama-2-7b) runs at once; opt-30b fits only on the A100-80GB server of the
  // lab, which the shorter job may hold first (shortest remaining time first).
  EXPECT_EQ((*d->GetJob("j-000001"))["state"], "running");
  auto fits = [&](const char* id) {
    auto j = d->GetJob(id);
    ASSERT_TRUE(j.ok());
    const json& plan = (*j)["plan"];
    // The plan fits: predicted device memory within the GPU's memory.
    EXPECT_LE(plan["device_bytes"].get<int64_t>(), plan["gpu_memory_bytes"].get<int64_t>());
    EXPECT_FALSE((*j)["why"].get<std::string>().empty());
  };
  fits("j-000001");
  for (int i = 0; i < 10; ++i) {
    f.now += 3 * 24 * 3600 / 3600.0;  // long enough at 3600x
    ASSERT_TRUE(d->Tick().ok());
  }
  for (const char* id : {"j-000001", "j-000002"}) {
    auto j = d->GetJob(id);
    EXPECT_EQ((*j)["state"], "succeeded") << id << " " << (*j).dump();
    EXPECT_DOUBLE_EQ((*j)["progress"]["fraction"].get<double>(), 1.0);
    EXPECT_GT((*j)["memory"]["observed_bytes"].get<int64_t>(), 0);
    fits(id);
  }
  EXPECT_EQ((*d->GetJob("j-000002"))["plan"]["gpu"], "A100-80GB");
}

TEST(Daemon, BundledEntryPointJobsGetDataParallelPlansShardedWhereNeeded) {
  Fixture f("bundled");
  f.bundled = true;
  auto d = f.Make();
  // llama-2-13b's weights, gradients and Adam states in mixed precision are 13e9 x 16 bytes =
  // 208 GB: more than any lab GPU holds unless they are sharded over data-parallel ranks (the
  // bundled entry point's ZeRO-2/3), never split by TP or PP, which it cannot run.
  auto j = d->Submit(Spec("llama-2-13b", 1e9));
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  ASSERT_TRUE(d->Tick().ok());
  auto job = d->GetJob("j-000001");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ((*job)["spec"]["modelled_as"], "fsdp");
  const json& plan = (*job)["plan"];
  ASSERT_EQ((*job)["state"], "running") << job->dump();
  EXPECT_EQ(plan["tp"], 1);
  EXPECT_EQ(plan["pp"], 1);
  EXPECT_EQ(plan["cp"], 1);
  EXPECT_EQ(plan["offload"], "none");
  EXPECT_GE(plan["zero"].get<int64_t>(), 2);
  EXPECT_GE(plan["gpus"].get<int64_t>() * plan["gpu_memory_bytes"].get<int64_t>(), 208e9);
  // llama-2-70b: 70e9 x 16 bytes = 1120 GB of states, 140 GB per GPU even sharded over all 8
  // A100-80GB of the lab, and nothing else the bundled entry point runs shrinks them: refused.
  auto big = d->Submit(Spec("llama-2-70b", 1e9));
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kFailedPrecondition);
}

TEST(Daemon, FrameworkJobsArePlannedWithTheFrameworksLayoutsAndLaunchedThroughIt) {
  Fixture f("framework");
  f.bundled = true;
  f.frameworks = {Launcher::kTorchtitan, Launcher::kMegatron};
  auto d = f.Make();
  // opt-30b needs TP or PP on the lab (above): Megatron-LM runs them.
  json spec = Spec("opt-30b", 1e9);
  spec["framework"] = "megatron";
  spec["entry"] = "/opt/megatron/pretrain_gpt.py";
  spec["entry_args"] = {"--data-path", "/data/corpus", "--tensor-model-parallel-size", "8"};
  auto j = d->Submit(spec);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  ASSERT_TRUE(d->Tick().ok());
  auto job = d->GetJob("j-000001");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ((*job)["spec"]["framework"], "megatron");
  EXPECT_EQ((*job)["spec"]["modelled_as"], "megatron");
  ASSERT_EQ((*job)["state"], "running") << job->dump();
  const json& plan = (*job)["plan"];
  EXPECT_GT(plan["tp"].get<int64_t>() * plan["pp"].get<int64_t>(), 1);
  // The launch the run got: Megatron's flags with the plan's layout, the user's own TP flag
  // dropped for Frenzy's, their data path kept.
  const json& launch = plan["launch"];
  ASSERT_TRUE(launch.is_object()) << plan.dump();
  EXPECT_EQ(launch["framework"], "megatron");
  std::vector<std::string> argv = launch["argv"].get<std::vector<std::string>>();
  auto value_of = [&](const std::string& flag) -> std::string {
    auto it = std::find(argv.begin(), argv.end(), flag);
    return it != argv.end() && it + 1 != argv.end() ? *(it + 1) : "";
  };
  EXPECT_EQ(value_of("--tensor-model-parallel-size"), std::to_string(plan["tp"].get<int64_t>()));
  EXPECT_EQ(value_of("--pipeline-model-parallel-size"), std::to_string(plan["pp"].get<int64_t>()));
  EXPECT_EQ(value_of("--data-path"), "/data/corpus");
  EXPECT_EQ(std::count(argv.begin(), argv.end(), "--tensor-model-parallel-size"), 1);
  EXPECT_NE(std::find(argv.begin(), argv.end(), "/opt/megatron/pretrain_gpt.py"), argv.end());

  // A framework the operator did not allow, and entry fields without a framework: refused.
  spec["framework"] = "deepspeed";
  auto refused = d->Submit(spec);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.status().field(), "framework");
  EXPECT_NE(refused.status().message().find("torchtitan, megatron"), std::string::npos);
  json bare = Spec("llama-2-7b", 1e9);
  bare["entry"] = "train.py";
  auto no_framework = d->Submit(bare);
  ASSERT_FALSE(no_framework.ok());
  EXPECT_EQ(no_framework.status().field(), "entry");
  // What the framework cannot do at all: LoRA under torchtitan.
  json lora = Spec("llama-2-7b", 1e9);
  lora["framework"] = "torchtitan";
  lora["finetune"] = "lora";
  auto no_lora = d->Submit(lora);
  ASSERT_FALSE(no_lora.ok());
  EXPECT_EQ(no_lora.status().field(), "finetune");
  // Hostile entry fields: named, refused, nothing stored.
  for (const auto& [key, value] : std::vector<std::pair<std::string, json>>{
           {"entry", std::string("a\nb")},
           {"entry", 7},
           {"entry", std::string(2000, 'x')},
           {"entry_args", "--not-an-array"},
           {"entry_args", json::array({1})},
           {"entry_args", json(std::vector<std::string>(300, "a"))},
           {"config_file", std::string("x\0y", 3)}}) {
    json bad = Spec("llama-2-7b", 1e9);
    bad["framework"] = "torchtitan";
    bad[key] = value;
    auto r = d->Submit(bad);
    ASSERT_FALSE(r.ok()) << key << " " << value.dump();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    EXPECT_EQ(r.status().field().substr(0, key.size()), key) << r.status().ToString();
  }
  auto listed = d->ListJobs("", 100);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ((*listed)["jobs"].size(), 1u);
}

// The plan of a LoRA fine-tune of Llama-2-7B, the first job of a daemon set up by `setup`,
// and `spec_extra` on its spec.
json PlanOfTheFirstLoraJob(const char* name, const std::function<void(Fixture&)>& setup,
                           const json& spec_extra) {
  Fixture f(name);
  setup(f);
  auto d = f.Make();
  json spec = Spec("llama-2-7b", 1e9);
  spec["finetune"] = "lora";
  spec.update(spec_extra);
  EXPECT_TRUE(d->Submit(spec).ok());
  EXPECT_TRUE(d->Tick().ok());
  auto job = d->GetJob("j-000001");
  EXPECT_TRUE(job.ok());
  return job.ok() ? (*job)["plan"] : json();
}

// Two plans of the same job on the same layout, the second holding more.
void ExpectSameLayoutMoreMemory(const json& now, const json& old) {
  ASSERT_TRUE(now.contains("peak_bytes")) << now.dump();
  ASSERT_TRUE(old.contains("peak_bytes")) << old.dump();
  ASSERT_EQ(now["gpu"], old["gpu"]);
  ASSERT_EQ(now["gpus"], old["gpus"]);
  ASSERT_EQ(now["micro_batch"], old["micro_batch"]) << now.dump() << "\n" << old.dump();
  EXPECT_GT(old["peak_bytes"].get<int64_t>(), now["peak_bytes"].get<int64_t>());
  EXPECT_GT(old["device_bytes"].get<int64_t>(), now["device_bytes"].get<int64_t>());
}

// Before transformers 4.46 the model keeps fp32 logits and the loss slices them: on the same
// layout (the lab's A100s, one sequence a rank) the plan holds more.
TEST(Daemon, AccelerateJobsArePlannedWithTheEnvironmentsTransformersRelease) {
  const json accelerate = {{"framework", "accelerate"}, {"entry", "train.py"}};
  auto planned = [&](HfLoss chain, const char* name) {
    return PlanOfTheFirstLoraJob(
        name,
        [&](Fixture& f) {
          f.frameworks = {Launcher::kAccelerate};
          f.hf_loss = chain;
        },
        accelerate);
  };
  ExpectSameLayoutMoreMemory(planned(HfLoss::kPadded, "hf-now"),
                             planned(HfLoss::kModelUpcastSliced, "hf-old"));
}

// The cluster's PyTorch (frenzyd --torch): before 2.2 every eager RMSNorm also keeps its fp32
// x^2, so the daemon's own training command (an HF Llama) is planned with more memory on it.
TEST(Daemon, JobsArePlannedWithTheEnvironmentsTorchRelease) {
  auto planned = [](bool old_torch, const char* name) {
    return PlanOfTheFirstLoraJob(
        name, [&](Fixture& f) { f.mean_keeps_input = old_torch; }, {{"framework", "hf"}});
  };
  ExpectSameLayoutMoreMemory(planned(false, "torch-now"), planned(true, "torch-old"));
}

// A 70B model no lab GPU can train in full is a QLoRA fine-tune one A100-80GB holds (a 4-bit
// base of about 37 GB): it is planned data parallel under PEFT, and the run is told so.
TEST(Daemon, QloraJobsArePlannedWhereFullTrainingIsNot) {
  Fixture f("qlora");
  auto d = f.Make();
  json spec{{"model", "llama-2-70b"}, {"tokens", 1e7}, {"global_batch", 8}, {"seq_len", 2048}};
  auto full = d->Submit(spec);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), StatusCode::kFailedPrecondition);
  spec["finetune"] = {{"method", "qlora"}, {"rank", 16}};
  auto q = d->Submit(spec);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  ASSERT_TRUE(d->Tick().ok());
  auto j = d->GetJob("j-000001");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ((*j)["state"], "running") << j->dump();
  const json& plan = (*j)["plan"];
  EXPECT_EQ(plan["gpu"], "A100-80GB");
  EXPECT_EQ(plan["tp"], 1);
  EXPECT_EQ(plan["pp"], 1);
  EXPECT_LE(plan["device_bytes"].get<int64_t>(), plan["gpu_memory_bytes"].get<int64_t>());
  EXPECT_EQ((*j)["spec"]["modelled_as"], "hf") << j->dump();
}

TEST(Daemon, RestartedDaemonReattachesToRunningJobs) {
  Fixture f("restart");
  f.policy = "frenzy-no-move";  // so that the job stays where it is and attempts count runs
  {
    auto d = f.Make();
    ASSERT_TRUE(d->Submit(Spec("llama-2-7b", 5e9)).ok());
    ASSERT_TRUE(d->Tick().ok());
    EXPECT_EQ((*d->GetJob("j-000001"))["state"], "running");
  }  // the daemon goes away (as if killed): the store has what it had
  f.now += 1;
  auto d = f.Make();
  ASSERT_TRUE(d->Tick().ok());
  auto j = d->GetJob("j-000001");
  EXPECT_EQ((*j)["state"], "running");
  EXPECT_EQ((*j)["attempt"], 1);  // re-attached, not relaunched
  EXPECT_GT((*j)["progress"]["fraction"].get<double>(), 0.0);
  f.now += 1e6;
  ASSERT_TRUE(d->Tick().ok());
  EXPECT_EQ((*d->GetJob("j-000001"))["state"], "succeeded");
}

TEST(Daemon, BadSpecsAreRefusedAndStoreNothing) {
  Fixture f("bad");
  auto d = f.Make();
  struct Case {
    json spec;
    std::string field;
    StatusCode code;
  };
  std::vector<Case> cases = {
      {json::array(), "", StatusCode::kInvalidArgument},
      {json{{"tokens", 1e9}, {"global_batch", 8}}, "model", StatusCode::kInvalidArgument},
      {json{{"model", "no-such-model"}, {"tokens", 1e9}, {"global_batch", 8}}, "model",
       StatusCode::kNotFound},
      // A path is just an unknown name: the API never opens files.
      {json{{"model", "/etc/passwd"}, {"tokens", 1e9}, {"global_batch", 8}}, "model",
       StatusCode::kNotFound},
      {json{{"model", "gpt2"}, {"tokens", -5}, {"global_batch", 8}}, "tokens",
       StatusCode::kInvalidArgument},
      {json{{"model", "gpt2"}, {"tokens", 1e9}, {"global_batch", 8.5}}, "global_batch",
       StatusCode::kInvalidArgument},
      {json{{"model", "gpt2"}, {"tokens", 1e9}, {"global_batch", 8}, {"gpus", 4}}, "gpus",
       StatusCode::kInvalidArgument},
      {json{{"model", "gpt2"}, {"tokens", 1e9}, {"global_batch", 8}, {"gpu", "A100-80GB"}}, "gpu",
       StatusCode::kInvalidArgument},
      {json{{"model", "gpt2"}, {"tokens", 1e9}, {"global_batch", 8}, {"colour", "red"}}, "colour",
       StatusCode::kInvalidArgument},
      {json{{"model", "gpt2"}, {"tokens", 1e9}, {"global_batch", 8}, {"precision", "int3"}},
       "precision", StatusCode::kInvalidArgument},
      // FP8 recipes: a known word, and only with precision fp8.
      {json{{"model", "gpt2"},
            {"tokens", 1e9},
            {"global_batch", 8},
            {"precision", "fp8"},
            {"fp8_recipe", "blockwise"}},
       "fp8_recipe", StatusCode::kInvalidArgument},
      {json{{"model", "gpt2"}, {"tokens", 1e9}, {"global_batch", 8}, {"fp8_recipe", "delayed"}},
       "fp8_recipe", StatusCode::kInvalidArgument},
      // A model no GPU of the lab can hold.
      {json{{"model", "llama-2-70b"}, {"tokens", 1e9}, {"global_batch", 8}, {"seq_len", 4096}},
       "model", StatusCode::kFailedPrecondition},
      // Fine-tuning specs, field by field.
      {json{{"model", "gpt2"}, {"tokens", 1e9}, {"global_batch", 8}, {"finetune", "dora"}},
       "finetune", StatusCode::kInvalidArgument},
      {json{{"model", "gpt2"}, {"tokens", 1e9}, {"global_batch", 8}, {"finetune", 7}}, "finetune",
       StatusCode::kInvalidArgument},
      {json{{"model", "gpt2"}, {"tokens", 1e9}, {"global_batch", 8}, {"finetune", {{"rank", 8}}}},
       "finetune.method", StatusCode::kInvalidArgument},
      {json{{"model", "gpt2"},
            {"tokens", 1e9},
            {"global_batch", 8},
            {"finetune", {{"method", "lora"}, {"rank", -3}}}},
       "finetune.rank", StatusCode::kInvalidArgument},
      {json{{"model", "gpt2"},
            {"tokens", 1e9},
            {"global_batch", 8},
            {"finetune", {{"method", "lora"}, {"rank", 1e300}}}},
       "finetune.rank", StatusCode::kInvalidArgument},
      {json{{"model", "gpt2"},
            {"tokens", 1e9},
            {"global_batch", 8},
            {"finetune", {{"method", "lora"}, {"dropout", 1.5}}}},
       "finetune.dropout", StatusCode::kInvalidArgument},
      {json{{"model", "gpt2"},
            {"tokens", 1e9},
            {"global_batch", 8},
            {"finetune", {{"method", "lora"}, {"targets", "q_proj,nose"}}}},
       "finetune.targets", StatusCode::kInvalidArgument},
      {json{{"model", "gpt2"},
            {"tokens", 1e9},
            {"global_batch", 8},
            {"finetune", {{"method", "lora"}, {"dtype", "int4"}}}},
       "finetune.dtype", StatusCode::kInvalidArgument},
      {json{{"model", "gpt2"},
            {"tokens", 1e9},
            {"global_batch", 8},
            {"finetune", {{"method", "lora"}, {"layers", 3}}}},
       "finetune.layers", StatusCode::kInvalidArgument},
      {json{{"model", "gpt2"}, {"tokens", 1e9}, {"global_batch", 8}, {"framework", "jax"}},
       "framework", StatusCode::kInvalidArgument},
      {json{{"model", "gpt2"}, {"tokens", 1e9}, {"global_batch", 8}, {"optimizer", 3}}, "optimizer",
       StatusCode::kInvalidArgument},
  };
  for (const Case& c : cases) {
    auto r = d->Submit(c.spec);
    ASSERT_FALSE(r.ok()) << c.spec.dump();
    EXPECT_EQ(r.status().code(), c.code) << c.spec.dump() << ": " << r.status().ToString();
    EXPECT_EQ(r.status().field(), c.field) << c.spec.dump();
  }
  auto list = d->ListJobs("", -1);
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE((*list)["jobs"].empty());
}

TEST(Daemon, CancelAndReports) {
  Fixture f("cancel");
  auto d = f.Make();
  ASSERT_TRUE(d->Submit(Spec("gpt2", 1e12, 1024)).ok());
  ASSERT_TRUE(d->Tick().ok());
  // A report from the run: progress and memory reach the job.
  auto plan = (*d->GetJob("j-000001"))["plan"];
  int64_t predicted = plan["device_bytes"];
  auto rep =
      d->Report("j-000001", json{{"step", 10}, {"tokens", 5000}, {"peak_bytes", predicted * 1.1}});
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  auto j = *d->GetJob("j-000001");
  EXPECT_EQ(j["progress"]["step"], 10);
  EXPECT_NEAR(j["memory"]["factor"].get<double>(), 1.1 * 1.03, 1e-6);
  EXPECT_NE(j["memory"]["note"].get<std::string>().find("1.10x"), std::string::npos);
  EXPECT_FALSE(d->Report("j-000001", json{{"step", -1}, {"tokens", 1}}).ok());
  EXPECT_EQ(d->Report("j-000009", json{{"step", 1}, {"tokens", 1}}).status().code(),
            StatusCode::kNotFound);
  ASSERT_TRUE(d->Cancel("j-000001").ok());
  EXPECT_EQ((*d->GetJob("j-000001"))["state"], "cancelled");
  EXPECT_EQ(d->Cancel("j-000001").status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(d->Tick().ok());
  EXPECT_EQ((*d->GetJob("j-000001"))["state"], "cancelled");
  // Its GPUs are free again.
  int64_t free = 0;
  json cj = d->ClusterJson();
  for (const json& t : cj["types"]) free += t["free"].get<int64_t>();
  EXPECT_EQ(free, d->cluster().total_gpus()) << cj.dump();
}

int64_t MetricValue(const std::string& metrics, const std::string& name) {
  size_t at = metrics.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stoll(metrics.substr(at + name.size() + 2));
}

TEST(Daemon, PolicyIsAskedOnlyWhenSomethingChangedOrEveryRound) {
  Fixture f("idle");
  auto d = f.Make();
  auto passes = [&] { return MetricValue(d->Metrics(), "frenzy_schedule_seconds_count"); };
  ASSERT_TRUE(d->Submit(Spec("llama-2-7b", 1e14)).ok());
  const double t0 = f.now;
  ASSERT_TRUE(d->Tick().ok());
  EXPECT_EQ(passes(), 1);
  EXPECT_EQ((*d->GetJob("j-000001"))["state"], "running");
  // Nothing new: no pass, though the tick follows the run.
  ASSERT_TRUE(d->Tick().ok());
  f.now += 1;  // progress alone is no reason to ask again...
  ASSERT_TRUE(d->Tick().ok());
  EXPECT_EQ(passes(), 1);
  EXPECT_EQ(MetricValue(d->Metrics(), "frenzy_ticks_total"), 3);
  // ...until the policy's round has passed (frenzy decides every round_s too, as in the
  // simulator), counted from the first pass.
  auto policy = MakePolicy(f.policy);
  ASSERT_TRUE(policy.ok());
  const double round = (*policy)->round_s();
  ASSERT_GT(round, 2);
  f.now = t0 + round - 1;
  ASSERT_TRUE(d->Tick().ok());
  EXPECT_EQ(passes(), 1);
  f.now = t0 + round;
  ASSERT_TRUE(d->Tick().ok());
  EXPECT_EQ(passes(), 2);
  // A submission is.
  ASSERT_TRUE(d->Submit(Spec("gpt2", 1e12, 1024)).ok());
  ASSERT_TRUE(d->Tick().ok());
  EXPECT_EQ(passes(), 3);
  EXPECT_EQ((*d->GetJob("j-000002"))["state"], "running");
  // So is a cancel: its GPUs go to nobody else, but the pass runs.
  ASSERT_TRUE(d->Cancel("j-000002").ok());
  ASSERT_TRUE(d->Tick().ok());
  EXPECT_EQ(passes(), 4);
}

// The control loop's checkpoint copies the log into the database file at most every
// checkpoint_every_s (5 s) while the log is small.
TEST(Daemon, CheckpointsAreSpacedOut) {
  Fixture f("checkpoint");
  auto d = f.Make();
  auto submit = [&](int n) {
    for (int i = 0; i < n; ++i) ASSERT_TRUE(d->Submit(Spec("gpt2", 1e12, 1024)).ok());
  };
  auto db_bytes = [&] { return std::filesystem::file_size(f.db); };
  submit(200);
  ASSERT_TRUE(d->Checkpoint().ok());
  const auto first = db_bytes();
  submit(200);
  f.now += 1;
  ASSERT_TRUE(d->Checkpoint().ok());
  EXPECT_EQ(db_bytes(), first);  // 1 s later: still in the log
  f.now += DaemonOptions{}.checkpoint_every_s;
  ASSERT_TRUE(d->Checkpoint().ok());
  EXPECT_GT(db_bytes(), first);  // due: copied into the database file
}

// Submissions, cancels, reports and reads from several threads while the control loop runs
// (its policy decides without the daemon's lock): no GPU is handed out twice, no cancelled job
// runs, and the store agrees with what the daemon said.
TEST(Daemon, ConcurrentCallsDuringControlLoopKeepStateConsistent) {
  Fixture f("concurrent");
  auto d = f.Make();
  constexpr int kJobs = 120;
  std::atomic<bool> done{false};
  std::atomic<int> submitted{0};
  std::vector<std::string> errors;
  std::mutex errors_mu;
  auto error = [&](const std::string& e) {
    std::lock_guard<std::mutex> lock(errors_mu);
    errors.push_back(e);
  };
  std::thread loop([&] {
    while (!done.load()) {
      if (auto t = d->Tick(); !t.ok()) error("tick: " + t.status().ToString());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // frenzyd waits --tick-s
    }
  });
  std::thread submitter([&] {
    for (int i = 0; i < kJobs; ++i) {
      auto r = d->Submit(Spec(i % 3 == 0 ? "opt-30b" : (i % 3 == 1 ? "llama-2-7b" : "gpt2"), 1e13,
                              i % 3 == 2 ? 1024 : 2048));
      if (!r.ok()) error("submit: " + r.status().ToString());
      submitted.store(i + 1);
    }
  });
  std::thread canceller([&] {
    for (int i = 1; i <= kJobs; i += 3) {
      while (submitted.load() < i) std::this_thread::yield();
      auto r = d->Cancel(fmt::format("j-{:06d}", i));
      if (!r.ok() && r.status().code() != StatusCode::kFailedPrecondition) {
        error("cancel: " + r.status().ToString());
      }
    }
  });
  std::thread reader([&] {
    while (!done.load()) {
      auto l = d->ListJobs("running", -1);
      if (!l.ok()) {
        error("list: " + l.status().ToString());
        continue;
      }
      for (const json& j : (*l)["jobs"]) {
        // Reports from running jobs: only progress, so the race is on the row, not the plan.
        auto r = d->Report(j["id"], json{{"step", 1}, {"tokens", 1}});
        if (!r.ok() && r.status().code() != StatusCode::kFailedPrecondition) {
          error("report: " + r.status().ToString());
        }
      }
      json c = d->ClusterJson();
      for (const json& n : c["nodes"]) {
        if (n["free"].get<int64_t>() < 0) error("negative free GPUs: " + n.dump());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  submitter.join();
  canceller.join();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(d->Tick().ok());
  done = true;
  loop.join();
  reader.join();
  EXPECT_TRUE(errors.empty()) << errors.front();

  // No node holds more than it has; free GPUs are what the running jobs leave.
  std::map<std::string, int64_t> used;
  auto running = d->ListJobs("running", -1);
  ASSERT_TRUE(running.ok());
  EXPECT_GT((*running)["jobs"].size(), 0u);
  for (const json& j : (*running)["jobs"]) {
    json full = *d->GetJob(j["id"]);
    EXPECT_FALSE(full["handle"].get<std::string>().empty());
    for (const json& p : full["allocation"]) used[p[0]] += p[1].get<int64_t>();
  }
  const json cluster = d->ClusterJson();  // range-for over a temporary's member would dangle
  for (const json& n : cluster["nodes"]) {
    int64_t gpus = n["gpus"], free = n["free"];
    EXPECT_LE(used[n["name"]], gpus) << n.dump();
    EXPECT_EQ(free, gpus - used[n["name"]]) << n.dump();
  }
  // Every cancelled job stayed cancelled; every job is in the store once.
  auto all = d->ListJobs("", -1);
  ASSERT_EQ((*all)["jobs"].size(), static_cast<size_t>(kJobs));
  for (int i = 1; i <= kJobs; i += 3) {
    EXPECT_EQ((*d->GetJob(fmt::format("j-{:06d}", i)))["state"], "cancelled") << i;
  }
  // A restarted daemon sees the same jobs in the same states.
  std::map<std::string, std::string> before;
  for (const json& j : (*all)["jobs"]) before[j["id"]] = j["state"];
  d.reset();
  auto again = f.Make();
  auto listed = again->ListJobs("", -1);
  ASSERT_TRUE(listed.ok());
  for (const json& j : (*listed)["jobs"]) {
    EXPECT_EQ(before[j["id"]], j["state"].get<std::string>()) << j["id"];
  }
}

TEST(Api, AuthBadRequestsAndMetrics) {
  Fixture f("api");
  auto d = f.Make();
  ApiOptions o;
  o.token = "s3cret";
  o.max_body_bytes = 1000;
  auto call = [&](const std::string& m, const std::string& p, const std::string& body,
                  const std::string& auth) {
    HttpRequest r;
    r.method = m;
    r.path = p;
    r.body = body;
    r.authorization = auth;
    return Handle(*d, r, o);
  };
  std::string spec = Spec("gpt2", 1e9, 1024).dump();
  EXPECT_EQ(call("POST", "/v1/jobs", spec, "").status, 401);
  EXPECT_EQ(call("POST", "/v1/jobs", spec, "Bearer wrong!").status, 401);
  EXPECT_EQ(call("POST", "/v1/jobs", "{not json", "Bearer s3cret").status, 400);
  EXPECT_EQ(call("POST", "/v1/jobs", std::string(2000, ' '), "Bearer s3cret").status, 413);
  HttpResponse bad =
      call("POST", "/v1/jobs", R"({"model":"gpt2","tokens":1,"global_batch":1,"gpus":2})",
           "Bearer s3cret");
  EXPECT_EQ(bad.status, 400);
  json err = json::parse(bad.body);
  EXPECT_EQ(err["error"]["field"], "gpus");
  EXPECT_EQ(err["error"]["code"], "invalid_argument");
  EXPECT_EQ(call("GET", "/v1/jobs/j-000404", "", "").status, 404);
  EXPECT_EQ(call("GET", "/v1/nothing", "", "").status, 404);
  EXPECT_EQ(call("PUT", "/v1/jobs", "", "Bearer s3cret").status, 405);
  HttpRequest q;
  q.method = "GET";
  q.path = "/v1/jobs";
  q.query["limit"] = "x";
  HttpResponse limit = Handle(*d, q, o);
  EXPECT_EQ(limit.status, 400);
  EXPECT_EQ(json::parse(limit.body)["error"]["field"], "limit");
  // Nothing above was stored.
  EXPECT_TRUE(json::parse(call("GET", "/v1/jobs", "", "").body)["jobs"].empty());
  HttpResponse ok = call("POST", "/v1/jobs", spec, "Bearer s3cret");
  EXPECT_EQ(ok.status, 201);
  EXPECT_EQ(json::parse(ok.body)["id"], "j-000001");
  EXPECT_EQ(call("GET", "/healthz", "", "").status, 200);
  HttpResponse m = call("GET", "/metrics", "", "");
  EXPECT_NE(m.body.find("frenzy_jobs{state=\"queued\"} 1"), std::string::npos) << m.body;
  EXPECT_NE(m.body.find("frenzy_gpus{type=\"A100-80GB\",kind=\"total\"} 8"), std::string::npos);
  EXPECT_TRUE(IsLoopback("127.0.0.1"));
  EXPECT_FALSE(IsLoopback("0.0.0.0"));
}

}  // namespace
}  // namespace frenzy::server
