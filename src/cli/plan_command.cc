// `frenzy plan`: the serverless decision for a job, as a table or JSON.
#include <memory>
#include <optional>
#include <string>

#include <fmt/core.h>

#include "cli/commands.h"
#include "cli/finetune_flags.h"
#include "cli/fp8_flags.h"
#include "common/status.h"
#include "hardware/cluster.h"
#include "hardware/gpu.h"
#include "launch/launch.h"
#include "memory/error_bands.h"
#include "memory/training.h"
#include "model/zoo.h"
#include "planner/explain.h"
#include "planner/mixed.h"
#include "planner/planner.h"

namespace frenzy::cli {
namespace {

// ---- plan ----------------------------------------------------------------------------------

struct PlanOptions {
  std::string model;
  double tokens = 0;
  int64_t global_batch = 0;
  int64_t seq_len = 2048;
  std::string cluster = "cluster64";
  int64_t top = 10;
  std::string objective = "time";
  std::string reading = "device";
  std::string framework;  // megatron for full training, hf (PEFT + Trainer) for adapters
  std::string precision = "bf16";
  std::string fp8_recipe;
  bool fp8_param_gather = false;
  std::string optimizer = "adamw";
  FineTuneFlags ft;
  std::string gpu;
  std::string recompute;
  int64_t gpus = 0, tp = 0, pp = 0, dp = 0, cp = 0, ep = 0, micro_batch = 0, zero = -1;
  double moe_capacity_factor = 0;
  double deadline_hours = 0;
  double budget = 0;
  double margin = 0.10;
  bool safe_margin = false;  // at least the framework's worst published under-prediction
  std::string launch;  // torchtitan|megatron|accelerate|deepspeed: add each plan's launch
  std::string transformers;  // the release HF models run with (their loss chain)
  std::string torch;         // the PyTorch release (what autograd keeps); default: current
  LaunchInput entry;
  bool json = false;
};

// --transformers: the release HF causal LMs run with, for the memory model's loss chain.
Status ResolveTransformers(const std::string& release, std::optional<Launcher> launcher,
                           JobSpec* job) {
  if (release.empty()) return Status::Ok();
  ASSIGN_OR_RETURN(HfLoss chain, ParseTransformersRelease(release, "--transformers"));
  if (job->framework == Framework::kMegatron || launcher == Launcher::kTorchtitan) {
    return InvalidArgument(
        "sets a HuggingFace causal LM's loss: Megatron-LM and torchtitan compute their own", {},
        "--transformers");
  }
  job->limits.hf_loss = chain;
  return Status::Ok();
}

// --torch: the PyTorch release the job runs with (before 2.2 an eager RMSNorm keeps x^2).
Status ResolveTorch(const std::string& release, JobSpec* job) {
  if (release.empty()) return Status::Ok();
  ASSIGN_OR_RETURN(job->limits.mean_keeps_input, ParseTorchRelease(release, "--torch"));
  return Status::Ok();
}

// The framework of --launch, checked against --framework; sets the job's memory model to it.
Result<std::optional<Launcher>> LauncherOf(const PlanOptions& o, JobSpec* job) {
  if (o.launch.empty()) return std::optional<Launcher>();
  auto launcher = ParseLauncher(o.launch);
  if (!launcher) {
    return InvalidArgument(
        "unknown framework '" + o.launch + "' (torchtitan, megatron, accelerate or deepspeed)",
        {}, "--launch");
  }
  if (!o.framework.empty() && job->framework != ModelledAs(*launcher)) {
    return InvalidArgument(fmt::format("--framework {} is not how {} runs ({})", o.framework,
                                       o.launch, FrameworkName(ModelledAs(*launcher))),
                           {}, "--framework");
  }
  job->framework = ModelledAs(*launcher);
  return launcher;
}

// A plan's launch under its row of the table: the command line, then each file.
void PrintLaunch(Launcher which, const LaunchOutcome& lo) {
  const auto* l = std::get_if<Launch>(&lo);
  if (l == nullptr) {
    fmt::print("      launch refused by {}: {}\n", LauncherName(which),
               std::get<Refused>(lo).reason);
    return;
  }
  fmt::print("      launch ({}, {} node{}): {}\n", l->version, l->nodes, l->nodes > 1 ? "s" : "",
             CommandLine(*l));
  for (const auto& [name, text] : l->files) {
    fmt::print("      file {}:\n", name);
    for (size_t a = 0, b; a < text.size(); a = b + 1) {
      b = text.find('\n', a);
      if (b == std::string::npos) b = text.size();
      fmt::print("        {}\n", text.substr(a, b - a));
    }
  }
}

// The plans as one JSON document, each with its launch when --launch is given.
void PrintPlanJson(const PlanOptions& o, const JobSpec& job, const Cluster& cluster,
                 const PlanResult& res, const PlannerOptions& popt,
                 std::optional<Launcher> launcher, const MixedResult* mixed) {
  nlohmann::json j;
  j["model"] = job.model.name;
  j["cluster"] = cluster.name;
  j["framework"] = FrameworkName(job.framework);
  j["finetune"] = FineTuneName(job.finetune);
  j["reading"] = ReadingName(popt.reading);  // what each plan's fit was judged on
  j["memory_margin"] = popt.memory_margin;
  j["plans"] = nlohmann::json::array();
  for (const auto& p : res.plans) {
    j["plans"].push_back(PlanToJson(p));
    if (launcher) {
      j["plans"].back()["launch"] =
          LaunchToJson(*launcher, MakeLaunch(*launcher, job, p, cluster, o.entry));
    }
  }
  j["pareto"] = nlohmann::json::array();
  for (const auto& p : res.pareto) j["pareto"].push_back(PlanToJson(p));
  j["layouts_considered"] = res.layouts_considered;
  j["layouts_fitting"] = res.layouts_fitting;
  j["explanation"] = ExplainPlan(res, popt);
  j["infeasible"] = InfeasibleOrNull(res);  // the typed reasons behind the explanation
  if (mixed != nullptr) {
    j["mixed_plans"] = nlohmann::json::array();
    for (const auto& p : mixed->plans) {
      j["mixed_plans"].push_back(MixedPlanToJson(p));
      if (launcher) {
        j["mixed_plans"].back()["launch"] = LaunchToJson(*launcher, RefuseMixed(*launcher, p));
      }
    }
  }
  PrintJson(j);
}

// Plans over several GPU types (planner/mixed.h), fastest first: what no single type holds, or
// what beats every single type (`single` true).
void PrintMixedPlans(const MixedResult& mixed, bool single, std::optional<Launcher> launcher) {
  if (mixed.plans.empty()) {
    if (!single) {
      fmt::print("  no plan over several of the cluster's types holds it either ({} layouts "
                 "considered)\n", mixed.layouts_considered);
    }
    return;
  }
  fmt::print("  {} ({} layouts considered), each part fitting its own type:\n",
             single ? "faster over several GPU types" : "no single GPU type holds it; plans over "
                                                       "several do",
             mixed.layouts_considered);
  int i = 0;
  for (const MixedPlan& p : mixed.plans) {
    const bool data = p.family == MixedFamily::kData;
    std::string parts;
    for (const MixedPart& part : p.parts) {
      parts += data ? fmt::format("{}{} x {} ({} replica{})", parts.empty() ? "" : " + ",
                                  part.gpus, part.gpu, part.dp, part.dp == 1 ? "" : "s")
                    : fmt::format("{}{} x {} ({} stage{})", parts.empty() ? "" : " + ", part.gpus,
                                  part.gpu, part.stages, part.stages == 1 ? "" : "s");
    }
    std::string time = p.total_s < 86400 * 2 ? fmt::format("{:.1f} h", p.total_s / 3600)
                                              : fmt::format("{:.1f} d", p.total_s / 86400);
    fmt::print("  {:<3} {} {}: TP {} PP {} DP {}{}, {}, {} recomputation, {}, MFU {:.1f}%\n", ++i,
               data ? "data parallel" : "pipeline", parts, p.tp, p.pp, p.dp,
               data && p.zero > 0 ? fmt::format(" ZeRO {}", p.zero) : "",
               PrecisionName(p.precision), RecomputeName(p.recompute), time, 100 * p.mfu);
    if (data) {
      for (const MixedPart& part : p.parts) {
        fmt::print("      {}: {} sequences a step, micro-batch {} x {} accumulation, step {:.2f} s, "
                   "{} / {} GiB\n",
                   part.gpu, part.batch, part.micro_batch, part.accumulation, part.step_s,
                   Gib(part.device_bytes), Gib(part.gpu_memory_bytes));
      }
      fmt::print("      gradients exchanged between the groups: {:.2f} s a step\n",
                 p.cross_group_s);
      if (launcher) PrintLaunch(*launcher, RefuseMixed(*launcher, p));
      continue;
    }
    std::string layers, memory;
    for (size_t s = 0; s < p.stage_layers.size(); ++s) {
      layers += fmt::format("{}{}", s ? "," : "", p.stage_layers[s]);
      memory += fmt::format("{}{}/{}", s ? " " : "", Gib(p.stage_device_bytes[s]),
                            Gib(p.stage_gpu_memory_bytes[s]));
    }
    fmt::print("      layers per stage {}; GiB per stage {}\n", layers, memory);
    if (launcher) PrintLaunch(*launcher, RefuseMixed(*launcher, p));
  }
}

// Plans over several types (planner/mixed.h): any that fit when no single type holds the job,
// data-parallel ones faster than the best single-type plan when one does; none when the job is
// infeasible for another reason.
Result<std::optional<MixedResult>> MixedFor(const JobSpec& job, const Cluster& cluster,
                                            const PlanResult& r, const PlannerOptions& popt) {
  const bool too_little = r.plans.empty() && r.infeasible &&
                          r.infeasible->kind == InfeasibleKind::kTooLittleMemory;
  if (!too_little && r.plans.empty()) return std::optional<MixedResult>();
  double best = 0;
  for (const Plan& p : r.plans) best = std::max(best, p.tokens_per_s);
  ASSIGN_OR_RETURN(MixedResult m, PlanMixed(job, cluster, GpuCatalog::Default(), popt, best));
  return std::optional<MixedResult>(std::move(m));
}

// The planner's options from the flags: the objective and reading by name, the margin (raised
// to the job's framework's published error band with --safe-margin).
Result<PlannerOptions> PlannerOptionsOf(const PlanOptions& o, Framework framework) {
  PlannerOptions popt;
  popt.top = o.top;
  popt.memory_margin = o.safe_margin ? SafeMargin(framework, o.margin) : o.margin;
  if (o.objective == "time") {
    popt.objective = Objective::kTime;
  } else if (o.objective == "cost") {
    popt.objective = Objective::kCost;
  } else if (o.objective == "mix") {
    popt.objective = Objective::kMix;
  } else {
    return InvalidArgument("expected time, cost or mix", {}, "--objective");
  }
  auto reading = ParseReading(o.reading);
  if (!reading) return InvalidArgument("expected allocated, reserved or device", {}, "--reading");
  popt.reading = *reading;
  return popt;
}

void RunPlan(const PlanOptions& o) {
  auto spec = ResolveModel(o.model);
  if (!spec.ok()) return Fail(spec.status());
  auto cluster = ResolveCluster(o.cluster, GpuCatalog::Default());
  if (!cluster.ok()) return Fail(cluster.status());
  JobSpec job;
  job.model = *spec;
  job.tokens = o.tokens;
  job.global_batch = o.global_batch;
  job.seq_len = o.seq_len;
  if (Status s = ResolveFineTune(o.ft, &job.finetune, &job.lora); !s.ok()) return Fail(s);
  std::string fw = o.framework;
  if (fw.empty()) fw = job.finetune == FineTune::kFull ? "megatron" : "hf";
  auto precision = ParsePrecision(o.precision);
  auto framework = ParseFramework(fw);
  auto optimizer = ParseOptimizer(o.optimizer);
  if (!precision) return Fail(InvalidArgument("unknown precision '" + o.precision + "'", {}, "--precision"));
  if (!framework) return Fail(InvalidArgument("unknown framework '" + fw + "'", {}, "--framework"));
  if (!optimizer) return Fail(InvalidArgument("unknown optimizer '" + o.optimizer + "'", {}, "--optimizer"));
  job.precision = *precision;
  job.framework = *framework;
  job.optimizer = *optimizer;
  auto launcher = LauncherOf(o, &job);
  if (!launcher.ok()) return Fail(launcher.status());
  if (Status s = ResolveTransformers(o.transformers, *launcher, &job); !s.ok()) return Fail(s);
  if (Status s = ResolveTorch(o.torch, &job); !s.ok()) return Fail(s);
  job.fp8_param_gather = o.fp8_param_gather;
  if (Status s = ResolveFp8Recipe(o.fp8_recipe, job.precision, &job.fp8_recipe); !s.ok()) {
    return Fail(s);
  }
  if (!o.gpu.empty()) job.gpu = o.gpu;
  if (!o.recompute.empty()) {
    auto rc = ParseRecompute(o.recompute);
    if (!rc) return Fail(InvalidArgument("unknown value '" + o.recompute + "'", {}, "--recompute"));
    job.recompute = *rc;
  }
  auto pin = [](int64_t v) { return v > 0 ? std::optional<int64_t>(v) : std::nullopt; };
  job.gpus = pin(o.gpus);
  job.tp = pin(o.tp);
  job.pp = pin(o.pp);
  job.dp = pin(o.dp);
  job.cp = pin(o.cp);
  job.ep = pin(o.ep);
  job.moe_capacity_factor = o.moe_capacity_factor;
  job.micro_batch = pin(o.micro_batch);
  if (o.zero >= 0) job.zero = o.zero;
  if (o.deadline_hours > 0) job.deadline_s = o.deadline_hours * 3600;
  if (o.budget > 0) job.budget = o.budget;
  if (*launcher) {
    if (Status s = PrepareJob(**launcher, &job); !s.ok()) return Fail(s);
  }
  Result<PlannerOptions> planner = PlannerOptionsOf(o, job.framework);
  if (!planner.ok()) return Fail(planner.status());
  const PlannerOptions& popt = *planner;
  auto r = PlanJob(job, *cluster, GpuCatalog::Default(), popt);
  if (!r.ok()) return Fail(r.status());
  auto mixed = MixedFor(job, *cluster, *r, popt);
  if (!mixed.ok()) return Fail(mixed.status());
  if (o.json) {
    PrintPlanJson(o, job, *cluster, *r, popt, *launcher, *mixed ? &**mixed : nullptr);
  } else {
    fmt::print("{} on {} ({}): {} layouts considered, {} fit\n", spec->name, cluster->name,
               FrameworkName(job.framework), r->layouts_considered, r->layouts_fitting);
    if (job.finetune != FineTune::kFull) {
      fmt::print("  fine-tune {}\n", DescribeFineTune(job.finetune, job.lora));
    }
    if (!r->plans.empty()) {
      fmt::print("  {:<3} {:<10} {:>5} {:>3} {:>3} {:>4} {:>3} {:>3} {:>3} {:>9} {:>13} {:>12} "
                 "{:>6} {:>10} {:>9}\n",
                 "#", "GPU", "GPUS", "TP", "PP", "DP", "CP", "EP", "MB", "RECOMP",
                 popt.reading == Reading::kDevice     ? "MEM GiB"
                 : popt.reading == Reading::kReserved ? "RESERVED GiB"
                                                      : "ALLOC GiB",
                 "TIME", "MFU", "COST $", "PARETO");
      bool offload = false;
      for (const auto& p : r->plans) offload = offload || p.offload != Offload::kNone;
      int i = 0;
      for (const auto& p : r->plans) {
        std::string time = p.total_s < 86400 * 2 ? fmt::format("{:.1f} h", p.total_s / 3600)
                                                  : fmt::format("{:.1f} d", p.total_s / 86400);
        fmt::print("  {:<3} {:<10} {:>5} {:>3} {:>3} {:>4} {:>3} {:>3} {:>3} {:>9} {:>6} / {:<4} "
                   "{:>12} {:>5.1f}% {:>10} {:>9}\n",
                   ++i, p.gpu, p.gpus, p.tp, p.pp, p.dp, p.cp, p.ep, p.micro_batch,
                   RecomputeText(p),
                   Gib(popt.reading == Reading::kDevice ? p.device_bytes
                                                        : JudgedBytes(p, popt.reading)),
                   Gib(p.gpu_memory_bytes), time,
                   100 * p.mfu, p.cost ? fmt::format("{:.0f}", *p.cost) : "-",
                   p.pareto ? "yes" : "");
        if (job.precision == Precision::kFp8) {
          if (p.precision == Precision::kFp8) {
            fmt::print("      fp8 linears ({} scaling)\n", Fp8RecipeName(job.fp8_recipe_or_default()));
          } else {
            fmt::print("      {}: this GPU has no FP8 tensor cores\n", PrecisionName(p.precision));
          }
        }
        if (*launcher) PrintLaunch(**launcher, MakeLaunch(**launcher, job, p, *cluster, o.entry));
        if (p.offload_activations) {
          fmt::print("      activations offloaded (torchtune): {} GiB of host memory per node\n",
                     Gib(p.host_bytes_per_node));
        }
        if (offload && p.offload != Offload::kNone) {
          fmt::print("      ZeRO {}, {} offloaded: {} GiB of host memory per node\n", p.zero,
                     OffloadName(p.offload), Gib(p.host_bytes_per_node));
        }
      }
    }
    fmt::print("  {}\n", ExplainPlan(*r, popt));
    if (*mixed) PrintMixedPlans(**mixed, !r->plans.empty(), *launcher);
  }
  // An answer, not an error, when nothing fits.
  if (r->plans.empty() && (!*mixed || (*mixed)->plans.empty())) SetExitCode(3);
}

}  // namespace

void RegisterPlanCommand(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  auto* cmd = app.add_subcommand(
      "plan", "The serverless decision: feasible plans (GPU type, count, layout), best first.");
  cmd->add_option("--model,-m", o->model, "Zoo name, HuggingFace id, or config.json path")
      ->required();
  cmd->add_option("--tokens", o->tokens, "Tokens to train on (e.g. 2e11)")->required();
  cmd->add_option("--global-batch", o->global_batch, "Sequences per iteration")->required();
  cmd->add_option("--seq-len", o->seq_len, "Sequence length")->capture_default_str();
  cmd->add_option("--cluster", o->cluster, "Bundled cluster or cluster file")
      ->capture_default_str();
  cmd->add_option("--top", o->top, "How many plans to list")->capture_default_str();
  cmd->add_option("--objective", o->objective, "time|cost|mix")->capture_default_str();
  cmd->add_option("--reading", o->reading,
                  "The memory reading a plan must fit, with the margin: allocated "
                  "(max_memory_allocated), reserved (max_memory_reserved) or device (nvidia-smi; "
                  "the only safe one)")
      ->capture_default_str();
  cmd->add_option("--framework", o->framework,
                  "megatron|deepspeed|fsdp|hf (default: megatron; hf for --finetune lora/qlora)");
  cmd->add_option("--precision", o->precision,
                  "bf16|fp16|fp32|bf16-pure|fp8 (fp8: FP8 linears on GPUs that have FP8 "
                  "tensor cores, bf16 on the others)")
      ->capture_default_str();
  cmd->add_option("--fp8-recipe", o->fp8_recipe,
                  "delayed|current|mxfp8|tensorwise|rowwise (default: the framework's)");
  cmd->add_flag("--fp8-param-gather", o->fp8_param_gather, "FP8 weights where gathered");
  cmd->add_option("--optimizer", o->optimizer,
                  "adamw|adam|sgd|sgdm|adafactor|adam8bit|paged-adamw|paged-adamw8bit")
      ->capture_default_str();
  AddFineTuneFlags(cmd, &o->ft);
  cmd->add_option("--gpu", o->gpu, "Pin a GPU type (normally left to Frenzy)");
  cmd->add_option("--gpus", o->gpus, "Pin the GPU count");
  cmd->add_option("--tp", o->tp, "Pin tensor parallelism");
  cmd->add_option("--pp", o->pp, "Pin pipeline stages");
  cmd->add_option("--dp", o->dp, "Pin data parallelism");
  cmd->add_option("--cp", o->cp, "Pin context parallelism");
  cmd->add_option("--ep", o->ep, "Pin expert parallelism (MoE)");
  cmd->add_option("--moe-capacity-factor", o->moe_capacity_factor,
                  "MoE routing: 0 dropless (default), else Megatron's capacity factor with "
                  "padded expert inputs");
  cmd->add_option("--micro-batch", o->micro_batch, "Pin the micro-batch");
  cmd->add_option("--zero", o->zero, "Pin the ZeRO stage");
  cmd->add_option("--recompute", o->recompute, "Pin recomputation none|selective|full");
  cmd->add_option("--deadline-hours", o->deadline_hours, "Finish within this many hours");
  cmd->add_option("--budget", o->budget, "Spend at most this many USD");
  cmd->add_flag("--safe-margin", o->safe_margin,
                "Raise the margin to cover the framework's worst published under-prediction "
                "(predict shows the band; data/measurements/error_bands.json)");
  cmd->add_option("--margin", o->margin, "Memory safety margin (fraction)")
      ->capture_default_str();
  cmd->add_option("--launch", o->launch,
                  "torchtitan|megatron|accelerate|deepspeed: plan what that framework can run "
                  "and add each plan's launch (argv, environment, config files)");
  cmd->add_option("--transformers", o->transformers,
                  "transformers release the HF models run with (e.g. 4.38): before 4.49 their "
                  "loss slices the logits, before 4.46 the model keeps them in fp32");
  cmd->add_option("--torch", o->torch,
                  "PyTorch release the jobs run with (e.g. 2.1): before 2.2 an eager RMSNorm "
                  "kept its fp32 x^2 for backward (default: current)");
  cmd->add_option("--entry", o->entry.entry,
                  "The training script or module the launch runs (default: the framework's)");
  cmd->add_option("--entry-arg", o->entry.args,
                  "One of the entry point's own arguments (model, data, optimizer; repeat it); "
                  "those that set parallelism, batch, recomputation or precision are Frenzy's")
      ->allow_extra_args(false);
  cmd->add_option("--config-file", o->entry.config_file,
                  "torchtitan: the user's TOML job config (Frenzy's layout overrides it)");
  cmd->add_flag("--json", o->json, "Machine-readable output");
  cmd->callback([o] { RunPlan(*o); });
}

}  // namespace frenzy::cli
