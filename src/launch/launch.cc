#include "launch/launch.h"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "launch/adapters.h"

namespace frenzy {

const char* LauncherName(Launcher l) {
  switch (l) {
    case Launcher::kTorchtitan:
      return "torchtitan";
    case Launcher::kMegatron:
      return "megatron";
    case Launcher::kAccelerate:
      return "accelerate";
    case Launcher::kDeepSpeed:
      return "deepspeed";
  }
  return "?";
}

std::optional<Launcher> ParseLauncher(std::string_view s) {
  for (Launcher l : AllLaunchers()) {
    if (s == LauncherName(l)) return l;
  }
  return std::nullopt;
}

std::vector<Launcher> AllLaunchers() {
  return {Launcher::kTorchtitan, Launcher::kMegatron, Launcher::kAccelerate, Launcher::kDeepSpeed};
}

Framework ModelledAs(Launcher l) {
  switch (l) {
    case Launcher::kTorchtitan:
    case Launcher::kAccelerate:
      return Framework::kFsdp;
    case Launcher::kMegatron:
      return Framework::kMegatron;
    case Launcher::kDeepSpeed:
      return Framework::kDeepSpeed;
  }
  return Framework::kMegatron;
}

LayoutLimits LimitsOf(Launcher l) {
  LayoutLimits x;
  // Activation offload is torchtune's (OffloadActivations); none of these four has it.
  x.offload_activations = false;
  // torchrun (and accelerate launch) start the same number of processes on every node.
  x.even_nodes = true;
  switch (l) {
    case Launcher::kTorchtitan:
      // FSDP2 (fully_shard) for every data-parallel layout: ZeRO-3 is reshard after forward,
      // ZeRO-2 keeps the gathered weights until backward (fsdp_reshard_after_forward "never").
      // Its DDP path runs without TP/PP/CP only, and ZeRO-1 has no counterpart. CPU offload is
      // FSDP2's CPUOffloadPolicy (training.enable_cpu_offload): parameters and their states.
      x.zeros = {2, 3};
      x.offloads = {Offload::kParams};
      x.fp16 = false;  // training.mixed_precision_param: bfloat16 or float32
      break;
    case Launcher::kMegatron:
      // The distributed optimizer is Megatron's sharding; no ZeRO stages. Recomputation is
      // uniform chunks or the first N layers of each stage (--recompute-method), not every Nth
      // layer. Frenzy's model of Megatron has no state offload.
      x.zeros = {0};
      x.recompute_every = false;
      x.offloads = {Offload::kNone};
      x.hybrid_shard = false;  // the distributed optimizer shards over all data-parallel ranks
      break;
    case Launcher::kAccelerate:
      // Accelerate's FSDP plugin (FSDP1 sharding strategies), data parallel only (its TP/CP go
      // through a parallelism_config that needs FSDP2 and transformers' TP plans, not
      // modelled): SHARD_GRAD_OP = ZeRO-2, FULL_SHARD = ZeRO-3, no ZeRO-1; activation
      // checkpointing of whole layers (fsdp_activation_checkpointing), no interval. DDP is not
      // planned: Accelerate cannot switch activation checkpointing on there, and FSDP's ZeRO-2/3
      // never needs more memory than it.
      x.tp = x.pp = x.cp = x.ep = false;
      x.zeros = {2, 3};
      x.recompute_every = false;
      x.offloads = {Offload::kParams};
      // accelerator.accumulate() runs the micro-batches before the last under the model's
      // no_sync() (GradientAccumulationPlugin's sync_each_batch defaults to False): FSDP keeps
      // unsharded gradients until the step's last micro-batch.
      x.accumulate_unsharded = true;
      // Frenzy's config sets no fsdp_cpu_ram_efficient_loading: every rank holds the model its
      // script loaded in host memory, and FSDP1 moves, flattens and shards it unit by unit
      // (memory/fsdp_init.h), without a broadcast.
      x.fsdp_init = FsdpInit::kHost;
      break;
    case Launcher::kDeepSpeed:
      // ZeRO 0-3 with optimizer/parameter offload from the config file. Pipeline stages,
      // AutoTP and DeepSpeed-MoE's ep_size are set in the user's model code, and so is
      // activation checkpointing (deepspeed.checkpointing in the model's forward): Frenzy
      // cannot set them from a config, so it plans none of them.
      x.tp = x.pp = x.cp = x.ep = false;
      x.recompute = false;
      x.offloads = {Offload::kOptimizer, Offload::kParams};
      // ZeRO++'s hpZ keeps a second copy of the weights per node but shards the optimizer over
      // every rank: not the hybrid sharding of FSDP that the memory model accounts.
      x.hybrid_shard = false;
      break;
  }
  return x;
}

Refused RefuseMixed(Launcher l, const MixedPlan& plan) {
  const std::string script =
      "; run the plan's data_groups with a script that weights each group's loss by its share "
      "(examples/train.py)";
  if (plan.family == MixedFamily::kData) {
    switch (l) {
      case Launcher::kMegatron:
        return {"Megatron-LM takes one --micro-batch-size for every rank and derives the "
                "accumulation from --global-batch-size over all data-parallel ranks: groups "
                "taking different shares of the batch cannot be expressed" + script};
      case Launcher::kTorchtitan:
        return {"torchtitan takes one training.local_batch_size for every rank and derives the "
                "accumulation from training.global_batch_size: groups taking different shares "
                "of the batch cannot be expressed" + script};
      case Launcher::kAccelerate:
        return {"Accelerate runs every process with one per-device batch and one "
                "gradient_accumulation_steps: groups taking different shares of the batch cannot "
                "be expressed" + script};
      case Launcher::kDeepSpeed:
        return {"DeepSpeed's config sets train_micro_batch_size_per_gpu and "
                "gradient_accumulation_steps for every rank alike: groups taking different "
                "shares of the batch cannot be expressed" + script};
    }
  }
  // A heterogeneous pipeline: only Megatron-LM plans pipelines of its own (LimitsOf).
  if (l != Launcher::kMegatron) {
    return {std::string(LauncherName(l)) + " gets no pipeline stages from Frenzy (see its layout "
            "limits), so no pipeline over several GPU types either"};
  }
  const std::vector<int64_t>& layers = plan.stage_layers;
  std::set<int64_t> middle;
  for (size_t s = 1; s + 1 < layers.size(); ++s) middle.insert(layers[s]);
  if (middle.size() > 1) {
    return {"Megatron-LM sets the layers of the first and last stage only "
            "(--decoder-first/last-pipeline-num-layers), the others share the rest evenly; this "
            "split gives " + std::to_string(middle.size()) + " different counts to the middle "
            "stages"};
  }
  return {"Megatron-LM could take this split (--decoder-first/last-pipeline-num-layers), but its "
          "launch starts the same torchrun command on every node, and Frenzy does not yet order "
          "a framework's nodes by GPU type (the Slurm backend runs heterogeneous jobs for scripts "
          "only)"};
}

namespace {

Status Bad(std::string msg, std::string field) {
  return InvalidArgument(std::move(msg), {}, std::move(field));
}

}  // namespace

Status PrepareJob(Launcher l, JobSpec* job) {
  const char* name = LauncherName(l);
  job->framework = ModelledAs(l);
  job->limits = LimitsOf(l);
  const LayoutLimits& x = job->limits;
  if (job->finetune != FineTune::kFull &&
      (l == Launcher::kMegatron || l == Launcher::kTorchtitan)) {
    return Bad(fmt::format("{} trains full models only (adapters are PEFT's, under Accelerate or "
                           "DeepSpeed)", name),
               "finetune");
  }
  auto pinned = [](const std::optional<int64_t>& v) { return v && *v > 1; };
  if ((!x.tp && pinned(job->tp)) || (!x.pp && pinned(job->pp)) || (!x.cp && pinned(job->cp)) ||
      (!x.ep && pinned(job->ep))) {
    return Bad(fmt::format("{} runs data parallelism only here: tensor, pipeline, context and "
                           "expert parallelism are set in the user's model code",
                           name),
               "parallelism");
  }
  if (job->zero && !x.Allows(*job->zero)) {
    return Bad(fmt::format("{} has no ZeRO stage {}", name, *job->zero), "zero");
  }
  if (job->recompute && *job->recompute != Recompute::kNone && !x.recompute) {
    return Bad(fmt::format("{} checkpoints activations in the user's model code; Frenzy cannot "
                           "switch it on",
                           name),
               "recompute");
  }
  if (job->offload && !x.Allows(*job->offload)) {
    return Bad(fmt::format("{} cannot offload {}", name, OffloadName(*job->offload)), "offload");
  }
  if (job->offload_activations.value_or(false)) {
    return Bad(fmt::format("{} has no activation offload (torchtune's)", name),
               "offload_activations");
  }
  const bool torchtitan = l == Launcher::kTorchtitan;
  if (job->precision == Precision::kBf16Pure) {
    return Bad(fmt::format("{} keeps fp32 master weights; pure bf16 is not one of its modes", name),
               "precision");
  }
  if (job->precision == Precision::kFp16 && torchtitan) {
    return Bad("torchtitan's mixed precision is bfloat16 or float32", "precision");
  }
  if (job->precision == Precision::kFp8) {
    const Fp8Recipe r = job->fp8_recipe_or_default();
    if (l == Launcher::kAccelerate || l == Launcher::kDeepSpeed) {
      return Bad(fmt::format("FP8 under {} is not modelled by Frenzy", name), "precision");
    }
    if (torchtitan == TransformerEngineRecipe(r)) {
      return Bad(fmt::format("{} runs FP8 with {}; recipe {} is not one of them", name,
                             torchtitan ? "torchao.float8 (tensorwise, rowwise)"
                                        : "Transformer Engine (delayed, current, mxfp8)",
                             Fp8RecipeName(r)),
                 "fp8_recipe");
    }
  }
  return Status::Ok();
}

LaunchOutcome MakeLaunch(Launcher l, const JobSpec& job, const Plan& plan, const Cluster& cluster,
                         const LaunchInput& in) {
  if (auto r = launch::RefuseCommon(l, job, plan)) return *r;
  auto shape = launch::ShapeOf(plan, cluster);
  if (auto* r = std::get_if<Refused>(&shape)) return *r;
  const launch::Shape& s = std::get<launch::Shape>(shape);
  switch (l) {
    case Launcher::kTorchtitan:
      return launch::Torchtitan(job, plan, s, in);
    case Launcher::kMegatron:
      return launch::Megatron(job, plan, s, in);
    case Launcher::kAccelerate:
      return launch::Accelerate(job, plan, s, in);
    case Launcher::kDeepSpeed:
      return launch::DeepSpeed(job, plan, s, in);
  }
  return Refused{"unknown framework"};
}

nlohmann::json LaunchToJson(Launcher l, const LaunchOutcome& o) {
  nlohmann::json j;
  j["framework"] = LauncherName(l);
  if (const auto* r = std::get_if<Refused>(&o)) {
    j["refused"] = r->reason;
    return j;
  }
  const Launch& x = std::get<Launch>(o);
  j["version"] = x.version;
  j["argv"] = x.argv;
  j["env"] = x.env;
  j["files"] = x.files;
  j["nodes"] = x.nodes;
  j["procs_per_node"] = x.procs_per_node;
  return j;
}

namespace {

// Single-quoted unless it is plain; $PLACEHOLDERS stay expandable (double quotes).
std::string Quote(const std::string& a) {
  const bool plain = !a.empty() && std::all_of(a.begin(), a.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("-_=./:,+@%").find(c) !=
                                                              std::string_view::npos;
  });
  if (plain) return a;
  const bool placeholder = a.find('$') != std::string::npos &&
                           a.find_first_of("\"\\`'") == std::string::npos;
  if (placeholder) return "\"" + a + "\"";
  std::string q = "'";
  for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

std::string CommandLine(const Launch& l) {
  std::string line;
  for (const auto& [k, v] : l.env) line += k + "=" + Quote(v) + " ";
  for (size_t i = 0; i < l.argv.size(); ++i) line += (i ? " " : "") + Quote(l.argv[i]);
  return line;
}

namespace launch {

std::variant<Shape, Refused> ShapeOf(const Plan& plan, const Cluster& cluster) {
  int64_t per_node = 0;
  for (const Node& n : cluster.nodes) {
    if (n.gpu == plan.gpu) per_node = std::max(per_node, n.gpus);
  }
  if (per_node <= 0) return Refused{fmt::format("the cluster has no {} nodes", plan.gpu)};
  Shape s;
  s.nodes = (plan.gpus + per_node - 1) / per_node;
  if (!EvenOverNodes(plan.gpus, per_node, plan.tp)) {
    return Refused{fmt::format("{} GPUs at TP {} do not split into whole TP groups over {} nodes "
                               "of {}: torchrun starts the same number of processes on every node",
                               plan.gpus, plan.tp, s.nodes, per_node)};
  }
  s.per_node = plan.gpus / s.nodes;
  return s;
}

int64_t Accumulation(const JobSpec& job, const Plan& plan) {
  return std::max<int64_t>(1, job.global_batch / std::max<int64_t>(1, plan.micro_batch * plan.dp));
}

Launch Start(Launcher l, const char* version, const Shape& s) {
  Launch x;
  x.framework = l;
  x.version = version;
  x.nodes = s.nodes;
  x.procs_per_node = s.per_node;
  return x;
}

std::vector<std::string> Torchrun(const Shape& s) {
  // torch.distributed.run's flags (tests/data/launch/torchrun.schema).
  return {"torchrun",
          fmt::format("--nnodes={}", s.nodes),
          fmt::format("--nproc-per-node={}", s.per_node),
          "--rdzv-backend=c10d",
          "--rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT",
          "--rdzv-id=$FRENZY_JOB_ID"};
}

std::vector<std::string> WithoutOwned(const std::vector<std::string>& args,
                                      const std::set<std::string>& owned,
                                      const std::set<std::string>& owned_switches) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const std::string flag = a.substr(0, a.find('='));
    if (owned_switches.count(a)) continue;
    if (owned.count(flag)) {
      // `--f v`: the value goes too; a switch (`--f` followed by a flag, or last) has none.
      if (flag == a && i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) ++i;
      continue;
    }
    out.push_back(a);
  }
  return out;
}

std::optional<Refused> RefuseCommon(Launcher l, const JobSpec& job, const Plan& plan) {
  const LayoutLimits x = LimitsOf(l);
  const char* name = LauncherName(l);
  if (job.framework != ModelledAs(l)) {
    return Refused{fmt::format("the plan was made for framework {}, not for {} (plan with "
                               "--launch {})",
                               FrameworkName(job.framework), name, name)};
  }
  if ((!x.tp && plan.tp > 1) || (!x.pp && plan.pp > 1) || (!x.cp && plan.cp > 1) ||
      (!x.ep && plan.ep > 1)) {
    return Refused{fmt::format("{} sets tensor, pipeline, context and expert parallelism in the "
                               "user's model code, not from a launch",
                               name)};
  }
  if (!x.Allows(plan.zero)) return Refused{fmt::format("{} has no ZeRO stage {}", name, plan.zero)};
  if (plan.shard_group > 0 && !x.hybrid_shard) {
    return Refused{fmt::format("{} has no hybrid sharding (a shard group of {} ranks)", name,
                               plan.shard_group)};
  }
  if (!x.Allows(plan.offload)) {
    return Refused{fmt::format("{} cannot offload {}", name, OffloadName(plan.offload))};
  }
  if (plan.offload_activations) {
    return Refused{fmt::format("{} has no activation offload (torchtune's)", name)};
  }
  if (plan.recompute != Recompute::kNone && !x.recompute) {
    return Refused{fmt::format("{} checkpoints activations in the user's model code", name)};
  }
  if (plan.recompute == Recompute::kFull && plan.recompute_every > 1 && !x.recompute_every) {
    return Refused{fmt::format("{} cannot recompute every {}th layer only", name,
                               plan.recompute_every)};
  }
  if (plan.precision == Precision::kBf16Pure) {
    return Refused{fmt::format("{} keeps fp32 master weights", name)};
  }
  return std::nullopt;
}

}  // namespace launch
}  // namespace frenzy
