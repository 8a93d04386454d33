// Launch adapters (src/launch): hand-checked launches of hand-written plans, the planner's limits
// per framework, and every emitted flag and key against the frameworks' pinned schemas.
#include "launch/launch.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "launch/schema.h"
#include "memory/memory_model.h"
#include "model/zoo.h"

namespace frenzy {
namespace {

Cluster Bundled(const char* name) { return *ResolveCluster(name, GpuCatalog::Default()); }

JobSpec Job(const char* model, int64_t gb, int64_t seq = 4096) {
  JobSpec j;
  j.model = *ResolveModel(model);
  j.tokens = 1e10;
  j.global_batch = gb;
  j.seq_len = seq;
  return j;
}

// A plan on cluster64's A100-80GB nodes (8 per node).
Plan A100(int64_t gpus, int64_t tp, int64_t pp, int64_t dp, int64_t mb) {
  Plan p;
  p.gpu = "A100-80GB";
  p.gpus = gpus;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  p.micro_batch = mb;
  return p;
}

// The user's torchtitan job config (model, data, optimizer).
LaunchInput Toml() {
  LaunchInput in;
  in.config_file = "job.toml";
  return in;
}

Launch Expect(const LaunchOutcome& o) {
  if (const auto* r = std::get_if<Refused>(&o)) ADD_FAILURE() << "refused: " << r->reason;
  return std::holds_alternative<Launch>(o) ? std::get<Launch>(o) : Launch{};
}

// Whether `argv` holds `seq` as consecutive words.
bool Has(const std::vector<std::string>& argv, std::vector<std::string> seq) {
  return std::search(argv.begin(), argv.end(), seq.begin(), seq.end()) != argv.end();
}

void Conforms(const Launch& l) {
  const auto problems =
      testing::Check(l, testing::LoadSchema(LauncherName(l.framework)));
  for (const auto& p : problems) ADD_FAILURE() << p << "\n  " << CommandLine(l);
}

TEST(Launch, MegatronTakesTheLayoutAndKeepsTheUsersOwnArguments) {
  JobSpec job = Job("llama-3.1-8b", 256);
  ASSERT_TRUE(PrepareJob(Launcher::kMegatron, &job).ok());
  Plan p = A100(16, 2, 2, 4, 1);
  p.distributed_optimizer = true;
  p.recompute = Recompute::kFull;
  LaunchInput in;
  in.args = {"--tensor-model-parallel-size", "8", "--lr", "3e-4", "--fp16", "--seq-length=2048"};
  const Launch l = Expect(MakeLaunch(Launcher::kMegatron, job, p, Bundled("cluster64"), in));
  // 16 GPUs on 8-GPU nodes: two nodes of eight.
  EXPECT_EQ(l.nodes, 2);
  EXPECT_EQ(l.procs_per_node, 8);
  EXPECT_EQ(l.argv[0], "torchrun");
  EXPECT_TRUE(Has(l.argv, {"--nnodes=2", "--nproc-per-node=8"}));
  EXPECT_TRUE(Has(l.argv, {"pretrain_gpt.py", "--lr", "3e-4"}));  // the user's, their value kept
  EXPECT_TRUE(Has(l.argv, {"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size",
                           "2", "--context-parallel-size", "1"}));
  EXPECT_TRUE(Has(l.argv, {"--micro-batch-size", "1", "--global-batch-size", "256",
                           "--seq-length", "4096"}));
  EXPECT_TRUE(Has(l.argv, {"--recompute-granularity", "full", "--recompute-method", "uniform",
                           "--recompute-num-layers", "1"}));
  // The user's TP 8, fp16 and sequence length are Frenzy's to set: gone.
  EXPECT_FALSE(Has(l.argv, {"--tensor-model-parallel-size", "8"}));
  EXPECT_FALSE(Has(l.argv, {"--fp16"}));
  EXPECT_FALSE(Has(l.argv, {"--seq-length=2048"}));
  EXPECT_TRUE(Has(l.argv, {"--sequence-parallel"}));
  EXPECT_TRUE(Has(l.argv, {"--use-distributed-optimizer"}));
  EXPECT_TRUE(Has(l.argv, {"--bf16"}));
  EXPECT_EQ(l.env.at("CUDA_DEVICE_MAX_CONNECTIONS"), "1");  // TP 2: Megatron asks for it
  in.args.clear();
  Conforms(Expect(MakeLaunch(Launcher::kMegatron, job, p, Bundled("cluster64"), in)));
}

TEST(Launch, MegatronRunsTransformerEngineFp8AndRefusesWhatItLacks) {
  JobSpec job = Job("llama-3.1-8b", 256);
  job.precision = Precision::kFp8;
  job.fp8_recipe = Fp8Recipe::kCurrent;
  ASSERT_TRUE(PrepareJob(Launcher::kMegatron, &job).ok());
  Plan p = A100(8, 1, 1, 8, 2);
  p.precision = Precision::kFp8;
  const Launch l = Expect(MakeLaunch(Launcher::kMegatron, job, p, Bundled("cluster64"), {}));
  // TE's per-tensor current scaling is Megatron's "tensorwise" recipe.
  EXPECT_TRUE(Has(l.argv, {"--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"}));
  EXPECT_FALSE(l.env.count("CUDA_DEVICE_MAX_CONNECTIONS"));  // no TP, no CP
  Conforms(l);
  p.precision = Precision::kBf16;
  p.recompute = Recompute::kOp;  // torchtitan's per-op checkpointing
  EXPECT_TRUE(std::holds_alternative<Refused>(
      MakeLaunch(Launcher::kMegatron, job, p, Bundled("cluster64"), {})));
  JobSpec lora = Job("llama-3.1-8b", 256);
  lora.finetune = FineTune::kLora;
  const Status s = PrepareJob(Launcher::kMegatron, &lora);
  EXPECT_EQ(s.field(), "finetune");
}

TEST(Launch, TorchtitanOverridesTheUsersConfigWithTheLayout) {
  JobSpec job = Job("llama-3.1-8b", 256, 8192);
  ASSERT_TRUE(PrepareJob(Launcher::kTorchtitan, &job).ok());
  EXPECT_EQ(job.framework, Framework::kFsdp);
  Plan p = A100(16, 2, 2, 4, 1);
  p.zero = 2;
  p.recompute = Recompute::kFull;
  p.recompute_every = 2;
  LaunchInput in;
  in.config_file = "llama3_8b.toml";
  in.args = {"--parallelism.tensor_parallel_degree", "8", "--parallelism.disable_loss_parallel",
             "--training.steps", "1000"};
  const Launch l = Expect(MakeLaunch(Launcher::kTorchtitan, job, p, Bundled("cluster64"), in));
  EXPECT_TRUE(Has(l.argv, {"-m", "torchtitan.train", "--job.config_file", "llama3_8b.toml"}));
  EXPECT_TRUE(Has(l.argv, {"--training.steps", "1000"}));
  EXPECT_FALSE(Has(l.argv, {"--parallelism.tensor_parallel_degree", "8"}));
  // A switch of a section Frenzy sets goes, without taking the next argument with it.
  EXPECT_FALSE(Has(l.argv, {"--parallelism.disable_loss_parallel"}));
  EXPECT_TRUE(std::holds_alternative<Refused>(  // no job config: no model to train
      MakeLaunch(Launcher::kTorchtitan, job, p, Bundled("cluster64"), {})));
  EXPECT_TRUE(Has(l.argv, {"--parallelism.data_parallel_shard_degree", "4"}));
  // ZeRO-2: the gathered weights stay until backward.
  EXPECT_TRUE(Has(l.argv, {"--parallelism.fsdp_reshard_after_forward", "never"}));
  EXPECT_TRUE(Has(l.argv, {"--parallelism.tensor_parallel_degree", "2"}));
  // PP 2: each of the 4 data-parallel ranks runs 256 / 4 = 64 sequences a step, in
  // micro-batches of 1 through the 1F1B schedule.
  EXPECT_TRUE(Has(l.argv, {"--parallelism.pipeline_parallel_microbatch_size", "1"}));
  EXPECT_TRUE(Has(l.argv, {"--training.local_batch_size", "64"}));
  EXPECT_TRUE(Has(l.argv, {"--activation_checkpoint.mode", "selective",
                           "--activation_checkpoint.selective_ac_option", "2"}));
  in.args.clear();
  Conforms(Expect(MakeLaunch(Launcher::kTorchtitan, job, p, Bundled("cluster64"), in)));
  // Without PP the micro-batch is the local batch and accumulation reaches the global one.
  p = A100(8, 1, 1, 8, 2);
  p.zero = 3;
  const Launch flat =
      Expect(MakeLaunch(Launcher::kTorchtitan, job, p, Bundled("cluster64"), Toml()));
  EXPECT_TRUE(Has(flat.argv, {"--training.local_batch_size", "2"}));
  EXPECT_TRUE(Has(flat.argv, {"--parallelism.fsdp_reshard_after_forward", "always"}));
  EXPECT_TRUE(Has(flat.argv, {"--activation_checkpoint.mode", "none"}));
}

TEST(Launch, TorchtitanRunsTorchaoFp8Only) {
  JobSpec job = Job("llama-3.1-8b", 256);
  job.precision = Precision::kFp8;
  job.fp8_param_gather = true;
  ASSERT_TRUE(PrepareJob(Launcher::kTorchtitan, &job).ok());  // default recipe: tensorwise
  Plan p = A100(8, 1, 1, 8, 1);
  p.zero = 3;
  p.precision = Precision::kFp8;
  const Launch l = Expect(MakeLaunch(Launcher::kTorchtitan, job, p, Bundled("cluster64"), Toml()));
  // Tensorwise is torchao's default, and its FP8 all-gather refuses a recipe_name beside it.
  EXPECT_TRUE(Has(l.argv, {"--model.converters", "float8", "--float8.enable_fsdp_float8_all_gather"}));
  EXPECT_FALSE(Has(l.argv, {"--float8.recipe_name"}));
  Conforms(l);
  JobSpec te = Job("llama-3.1-8b", 256);
  te.precision = Precision::kFp8;
  te.fp8_recipe = Fp8Recipe::kDelayed;
  EXPECT_EQ(PrepareJob(Launcher::kTorchtitan, &te).field(), "fp8_recipe");
}

TEST(Launch, DeepSpeedWritesItsConfigWithTheBatchSplitByHand) {
  JobSpec job = Job("llama-2-7b", 64);
  ASSERT_TRUE(PrepareJob(Launcher::kDeepSpeed, &job).ok());
  Plan p = A100(4, 1, 1, 4, 2);
  p.zero = 3;
  p.offload = Offload::kParams;
  LaunchInput in;
  in.entry = "train.py";
  in.args = {"--deepspeed_config", "mine.json", "--epochs", "1"};
  const Launch l = Expect(MakeLaunch(Launcher::kDeepSpeed, job, p, Bundled("cluster64"), in));
  const auto ds = nlohmann::json::parse(l.files.at("ds_config.json"));
  EXPECT_EQ(ds["train_batch_size"], 64);
  EXPECT_EQ(ds["train_micro_batch_size_per_gpu"], 2);
  EXPECT_EQ(ds["gradient_accumulation_steps"], 8);  // 64 / (2 x 4)
  EXPECT_EQ(ds["zero_optimization"]["stage"], 3);
  EXPECT_EQ(ds["zero_optimization"]["offload_param"]["device"], "cpu");
  EXPECT_EQ(ds["zero_optimization"]["offload_optimizer"]["device"], "cpu");
  EXPECT_TRUE(ds["bf16"]["enabled"].get<bool>());
  EXPECT_TRUE(Has(l.argv, {"train.py", "--epochs", "1", "--deepspeed", "--deepspeed_config",
                           "ds_config.json"}));
  EXPECT_FALSE(Has(l.argv, {"mine.json"}));
  EXPECT_EQ(l.nodes, 1);  // 4 GPUs on one 8-GPU node
  in.args.clear();
  Conforms(Expect(MakeLaunch(Launcher::kDeepSpeed, job, p, Bundled("cluster64"), in)));
  // Parameters leave the GPU under ZeRO-3 only; a pipeline is the model code's.
  p.zero = 2;
  EXPECT_TRUE(std::holds_alternative<Refused>(
      MakeLaunch(Launcher::kDeepSpeed, job, p, Bundled("cluster64"), in)));
  p = A100(8, 1, 2, 4, 1);
  EXPECT_TRUE(std::holds_alternative<Refused>(
      MakeLaunch(Launcher::kDeepSpeed, job, p, Bundled("cluster64"), in)));
  EXPECT_TRUE(std::holds_alternative<Refused>(  // no entry point: nothing to run
      MakeLaunch(Launcher::kDeepSpeed, job, A100(4, 1, 1, 4, 2), Bundled("cluster64"), {})));
}

TEST(Launch, AccelerateWritesFsdpConfigAndSplitsNodesEvenly) {
  JobSpec job = Job("llama-2-7b", 96);
  ASSERT_TRUE(PrepareJob(Launcher::kAccelerate, &job).ok());
  Plan p = A100(12, 1, 1, 12, 2);
  p.zero = 2;
  p.recompute = Recompute::kFull;
  LaunchInput in;
  in.entry = "train.py";
  const Launch l = Expect(MakeLaunch(Launcher::kAccelerate, job, p, Bundled("cluster64"), in));
  // 12 GPUs on 8-GPU nodes: two nodes of six.
  EXPECT_EQ(l.nodes, 2);
  EXPECT_EQ(l.procs_per_node, 6);
  const std::string& y = l.files.at("accelerate.yaml");
  EXPECT_NE(y.find("distributed_type: FSDP\n"), std::string::npos);
  EXPECT_NE(y.find("  fsdp_sharding_strategy: SHARD_GRAD_OP\n"), std::string::npos);
  EXPECT_NE(y.find("  fsdp_activation_checkpointing: true\n"), std::string::npos);
  EXPECT_NE(y.find("num_processes: 12\n"), std::string::npos);
  EXPECT_EQ(l.env.at("FRENZY_GRAD_ACCUM"), "4");  // 96 / (2 x 12)
  EXPECT_EQ(l.env.at("FRENZY_MICRO_BATCH"), "2");
  Conforms(l);
  // 15 GPUs cannot run as the same number of processes on each of two nodes.
  EXPECT_TRUE(std::holds_alternative<Refused>(
      MakeLaunch(Launcher::kAccelerate, job, A100(15, 1, 1, 15, 1), Bundled("cluster64"), in)));
  JobSpec tp = Job("llama-2-7b", 96);
  tp.tp = 2;
  EXPECT_EQ(PrepareJob(Launcher::kAccelerate, &tp).field(), "parallelism");
}

// Accelerate accumulates under no_sync (accumulate() without sync_each_batch), so FSDP holds
// the unsharded gradient between micro-batches, and the planner prices that. Llama-2-7B (Ψ =
// 6,738,415,616) on 8 A100s, FULL_SHARD, micro-batch 1, 64 sequences a step: 8 micro-batches. By
// hand, from the second on every rank holds the bf16 gradient of the whole model (2Ψ) beside its
// fp32 weight shard and AdamW moments (12Ψ / 8): at least 23.6 GB, where accumulating the shards
// (torchtitan's way) holds 4Ψ / 8 of gradients and peaks at 18.3 GB.
TEST(Launch, AcceleratePlansPriceTheUnshardedGradientsOfNoSync) {
  constexpr int64_t kPsi = 6'738'415'616;
  JobSpec job = Job("llama-2-7b", 64);
  ASSERT_TRUE(PrepareJob(Launcher::kAccelerate, &job).ok());
  EXPECT_TRUE(job.limits.accumulate_unsharded);
  job.gpu = "A100-80GB";
  job.gpus = 8;
  job.micro_batch = 1;
  job.zero = 3;
  job.recompute = Recompute::kFull;
  auto r = PlanJob(job, Bundled("cluster64"), GpuCatalog::Default(), PlannerOptions{});
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->plans.empty());
  const Plan& p = r->plans.front();
  ASSERT_EQ(p.dp, 8);
  EXPECT_GE(p.peak_bytes, 2 * kPsi + 12 * kPsi / 8);
  JobSpec titan = Job("llama-2-7b", 64);
  ASSERT_TRUE(PrepareJob(Launcher::kTorchtitan, &titan).ok());
  EXPECT_FALSE(titan.limits.accumulate_unsharded);
  titan.gpu = job.gpu;
  titan.gpus = job.gpus;
  titan.micro_batch = job.micro_batch;
  titan.zero = job.zero;
  titan.recompute = job.recompute;
  auto t = PlanJob(titan, Bundled("cluster64"), GpuCatalog::Default(), PlannerOptions{});
  ASSERT_TRUE(t.ok());
  ASSERT_FALSE(t->plans.empty());
  EXPECT_LT(t->plans.front().peak_bytes, 2 * kPsi + 12 * kPsi / 8);
}

// Frenzy's Accelerate config loads the model on every rank in host memory (no
// fsdp_cpu_ram_efficient_loading) and FSDP1 wraps it unit by unit: the planner prices what that
// initialisation leaves in the allocator's cache, as `predict --fsdp-init host` does for the
// same layout. A LoRA fine-tune of Llama-2-7B at short sequences over 2 GPUs, where the step
// adds little to the states, so the initialisation's cache sets the reserved peak.
TEST(Launch, AcceleratePlansPriceWhatFsdp1sInitialisationCaches) {
  JobSpec job = Job("llama-2-7b", 2, 512);
  job.finetune = FineTune::kLora;
  job.lora.rank = 64;
  job.lora.adapter_bytes = 2;
  ASSERT_TRUE(PrepareJob(Launcher::kAccelerate, &job).ok());
  EXPECT_EQ(job.limits.fsdp_init, FsdpInit::kHost);
  job.gpu = "A100-80GB";
  job.gpus = 2;
  job.micro_batch = 1;
  job.zero = 3;
  job.recompute = Recompute::kFull;
  auto r = PlanJob(job, Bundled("cluster64"), GpuCatalog::Default(), PlannerOptions{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->plans.empty());
  const Plan& plan = r->plans.front();
  ASSERT_EQ(plan.dp, 2);
  TrainingSpec t;
  t.framework = Framework::kFsdp;
  t.finetune = FineTune::kLora;
  t.lora = job.lora;
  t.seq_len = 512;
  t.global_batch = 2;
  t.recompute = Recompute::kFull;
  t.precision = job.precision;
  ParallelPlan p;
  p.dp = 2;
  p.zero = 3;
  t.fsdp_init = FsdpInit::kHost;
  auto with = PredictMemory(job.model, t, p);
  t.fsdp_init = FsdpInit::kNone;
  auto without = PredictMemory(job.model, t, p);
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_EQ(plan.reserved_bytes, with->peak_reserved_bytes);
  EXPECT_GT(with->peak_reserved_bytes, without->peak_reserved_bytes);
  EXPECT_GT(with->stages[0].init_reserved_bytes, 0);
}

// Hybrid sharding (a shard group of one node's 8 ranks, replicated over 2 nodes): torchtitan's
// dp_replicate x dp_shard mesh, Accelerate's HYBRID_SHARD strategies (which shard over a node's
// processes, so a group of any other size is refused); Megatron-LM and DeepSpeed have none.
TEST(Launch, HybridShardingIsEachFrameworksOwnMeshOrRefused) {
  Plan p = A100(16, 1, 1, 16, 1);
  p.zero = 3;
  p.shard_group = 8;
  JobSpec titan = Job("llama-2-13b", 64);
  ASSERT_TRUE(PrepareJob(Launcher::kTorchtitan, &titan).ok());
  const Launch t = Expect(MakeLaunch(Launcher::kTorchtitan, titan, p, Bundled("cluster64"), Toml()));
  EXPECT_TRUE(Has(t.argv, {"--parallelism.data_parallel_replicate_degree", "2"}));
  EXPECT_TRUE(Has(t.argv, {"--parallelism.data_parallel_shard_degree", "8"}));
  Conforms(t);
  JobSpec acc = Job("llama-2-13b", 64);
  ASSERT_TRUE(PrepareJob(Launcher::kAccelerate, &acc).ok());
  LaunchInput in;
  in.entry = "train.py";
  Launch a = Expect(MakeLaunch(Launcher::kAccelerate, acc, p, Bundled("cluster64"), in));
  EXPECT_NE(a.files.at("accelerate.yaml").find("  fsdp_sharding_strategy: HYBRID_SHARD\n"),
            std::string::npos);
  Conforms(a);
  p.zero = 2;
  a = Expect(MakeLaunch(Launcher::kAccelerate, acc, p, Bundled("cluster64"), in));
  EXPECT_NE(a.files.at("accelerate.yaml").find("  fsdp_sharding_strategy: HYBRID_SHARD_ZERO2\n"),
            std::string::npos);
  p.shard_group = 4;  // half a node
  EXPECT_TRUE(std::holds_alternative<Refused>(
      MakeLaunch(Launcher::kAccelerate, acc, p, Bundled("cluster64"), in)));
  p.shard_group = 8;
  JobSpec ds = Job("llama-2-13b", 64);
  ASSERT_TRUE(PrepareJob(Launcher::kDeepSpeed, &ds).ok());
  EXPECT_TRUE(std::holds_alternative<Refused>(
      MakeLaunch(Launcher::kDeepSpeed, ds, p, Bundled("cluster64"), in)));
}

TEST(Launch, ThePlannerOnlyPlansWhatTheFrameworkCanRun) {
  const Cluster c = Bundled("cluster64");
  for (Launcher l : {Launcher::kAccelerate, Launcher::kDeepSpeed, Launcher::kTorchtitan}) {
    JobSpec job = Job("llama-2-13b", 128);
    ASSERT_TRUE(PrepareJob(l, &job).ok());
    PlannerOptions o;
    o.top = 1000;
    auto r = PlanJob(job, c, GpuCatalog::Default(), o);
    ASSERT_TRUE(r.ok());
    ASSERT_FALSE(r->plans.empty()) << LauncherName(l);
    for (const Plan& p : r->plans) {
      SCOPED_TRACE(LauncherName(l));
      if (l != Launcher::kTorchtitan) {
        EXPECT_EQ(p.tp * p.pp * p.cp, 1);  // data parallel only
      }
      if (l != Launcher::kDeepSpeed) {
        EXPECT_NE(p.zero, 1);  // FSDP has no ZeRO-1
      } else {
        EXPECT_EQ(p.recompute, Recompute::kNone);  // the model code's to switch on
      }
      if (l == Launcher::kTorchtitan) {
        EXPECT_GE(p.zero, 2);
      }
      if (l == Launcher::kAccelerate) {
        EXPECT_EQ(p.recompute_every, 1);
      }
      // torchrun's rule: the same number of processes on each node (RTX-3090 nodes hold 4,
      // the others 8).
      const int64_t per_node = p.gpu == "RTX-3090" ? 4 : 8;
      const int64_t nodes = (p.gpus + per_node - 1) / per_node;
      EXPECT_EQ(p.gpus % nodes, 0) << p.gpus << " x " << p.gpu;
    }
  }
}

TEST(Launch, TorchtitanRunsFp32WhereTheGpuHasNoBf16) {
  // sia64's V100s and T4s have no bf16 tensor cores; torchtitan's mixed precision has no fp16,
  // so its plans there train in fp32 (and launch), where Megatron's train in fp16.
  const Cluster c = Bundled("sia64");
  for (Launcher l : {Launcher::kTorchtitan, Launcher::kMegatron}) {
    JobSpec job = Job("llama-3.2-1b", 64, 2048);
    ASSERT_TRUE(PrepareJob(l, &job).ok());
    job.gpu = "V100-32GB";
    auto r = PlanJob(job, c, GpuCatalog::Default(), {});
    ASSERT_TRUE(r.ok());
    ASSERT_FALSE(r->plans.empty());
    EXPECT_EQ(r->plans[0].precision,
              l == Launcher::kTorchtitan ? Precision::kFp32 : Precision::kFp16);
    const Launch x = Expect(MakeLaunch(l, job, r->plans[0], c, Toml()));
    if (l == Launcher::kTorchtitan) {
      EXPECT_TRUE(Has(x.argv, {"--training.mixed_precision_param", "float32"}));
    } else {
      EXPECT_TRUE(Has(x.argv, {"--fp16"}));
    }
  }
}

}  // namespace
}  // namespace frenzy
