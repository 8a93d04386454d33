#include "cli/commands.h"

#include "cli/finetune_flags.h"
#include "cli/fp8_flags.h"
#include "cli/length_flags.h"
#include "cli/recompute_flags.h"
#include "cli/mixed_layouts.h"

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>

#include <fmt/core.h>

#include "common/status.h"
#include "common/strings.h"
#include "hardware/cluster.h"
#include "hardware/gpu.h"
#include "memory/error_bands.h"
#include "memory/finetune.h"
#include "memory/memory_json.h"
#include "memory/memory_model.h"
#include "perf/perf_model.h"
#include "planner/explain.h"
#include "planner/planner.h"
#include "model/model_json.h"
#include "model/param_count.h"
#include "model/zoo.h"

namespace frenzy::cli {

namespace {
int g_exit_code = 0;
}  // namespace

void Fail(const Status& s) {
  std::cerr << "frenzy: error: " << s.ToString() << "\n";
  g_exit_code = s.code() == StatusCode::kInternal ? 1 : 2;
}

void SetExitCode(int code) { g_exit_code = code; }

void PrintJson(const nlohmann::json& j) { std::cout << j.dump(2) << "\n"; }

std::string Gib(int64_t bytes) {
  return fmt::format("{:.2f}", static_cast<double>(bytes) / static_cast<double>(1LL << 30));
}

std::string FlagOf(std::string field) {
  std::replace(field.begin(), field.end(), '_', '-');
  return "--" + field;
}

namespace {

// ---- predict -------------------------------------------------------------------------------

struct PredictOptions {
  std::string model;
  std::string gpu;
  std::string stage_gpus;  // a heterogeneous pipeline: TYPE:STAGES,... (cli/mixed_layouts.h)
  std::string data_groups;  // heterogeneous data parallelism: TYPE:REPLICAS:BATCH[:MICRO],...
  std::string precision = "bf16";
  std::string optimizer = "adamw";
  RecomputeFlags rc;
  std::string framework = "megatron";
  std::string head;
  std::string device = "cuda";
  bool no_flash = false;
  bool no_dropout = false;
  bool no_foreach = false;
  bool keep_grads = false;
  bool accumulate_unsharded = false;
  bool fsdp_orig_params = false;
  bool fsdp_wrap_embeddings = false;
  std::string fsdp_init = "none";
  bool drop_logits = false;
  bool loss_in_model_dtype = false;
  std::string transformers;  // the transformers release of an HF model (its loss chain)
  std::string torch;         // the PyTorch release (what autograd keeps), default: current
  double cuda_context_mib = 512;
  FineTuneFlags ft;
  std::string offload = "none";
  std::string fp8_recipe;  // default: the framework's (DefaultFp8Recipe)
  std::string moe_dispatcher = "alltoall";
  std::string length_file;  // predict's --length-file
  bool json = false;
  TrainingSpec train;
  ParallelPlan plan;
};


// Turns the layout flags into specs; fails with the flag that is wrong.
Status ResolveLayout(PredictOptions& o, const ModelSpec& spec) {
  auto bad = [](const std::string& flag, const std::string& value, const char* allowed) {
    return InvalidArgument("unknown value '" + value + "' (expected " + allowed + ")", {}, flag);
  };
  auto precision = ParsePrecision(o.precision);
  if (!precision) return bad("--precision", o.precision, "fp32, fp16, bf16, bf16-pure or fp8");
  auto optimizer = ParseOptimizer(o.optimizer);
  if (!optimizer) {
    return bad("--optimizer", o.optimizer, "adamw, adam, sgd, sgdm, adafactor, adam8bit, paged-adamw or paged-adamw8bit");
  }
  auto framework = ParseFramework(o.framework);
  if (!framework) return bad("--framework", o.framework, "megatron, deepspeed, fsdp or hf");
  if (o.head.empty()) o.head = spec.arch == ArchKind::kEncoder ? "masked-lm" : "causal-lm";
  auto head = ParseHeadType(o.head);
  if (!head) return bad("--head", o.head, "causal-lm, masked-lm or classification");
  if (o.device != "cuda" && o.device != "cpu") return bad("--device", o.device, "cuda or cpu");
  o.train.precision = *precision;
  o.train.optimizer = *optimizer;
  RETURN_IF_ERROR(ResolveRecompute(o.rc, &o.train));
  o.train.framework = *framework;
  o.train.head = *head;
  o.train.flash_attn = !o.no_flash;
  o.train.dropout = !o.no_dropout;
  o.train.device = o.device == "cpu" ? DeviceKind::kCpu : DeviceKind::kCuda;
  o.train.foreach_optimizer = !o.no_foreach;
  o.train.zero_grad_keeps = o.keep_grads;
  o.train.accumulate_unsharded = o.accumulate_unsharded;
  o.train.fsdp_orig_params = o.fsdp_orig_params;
  o.train.fsdp_wrap_embeddings = o.fsdp_wrap_embeddings;
  o.train.drop_logits = o.drop_logits;
  o.train.loss_fp32 = !o.loss_in_model_dtype;
  if (o.train.litgpt_rmsnorm_in_dtype) o.train.litgpt_model = true;
  if (!(o.cuda_context_mib >= 0) || o.cuda_context_mib > 1 << 20) {
    return InvalidArgument("must be between 0 and 1048576", {}, "--cuda-context-mib");
  }
  o.train.cuda_context_bytes = static_cast<int64_t>(o.cuda_context_mib * (1 << 20));
  auto fsdp_init = ParseFsdpInit(o.fsdp_init);
  if (!fsdp_init) return bad("--fsdp-init", o.fsdp_init, "none, host or host-sync");
  o.train.fsdp_init = *fsdp_init;
  if (!o.transformers.empty()) {
    ASSIGN_OR_RETURN(o.train.hf_loss, ParseTransformersRelease(o.transformers, "--transformers"));
  }
  if (!o.torch.empty()) {
    ASSIGN_OR_RETURN(o.train.mean_keeps_input, ParseTorchRelease(o.torch, "--torch"));
  }
  auto offload = ParseOffload(o.offload);
  if (!offload) return bad("--offload", o.offload, "none, optimizer or params");
  o.plan.offload = *offload;
  std::optional<Fp8Recipe> recipe;
  RETURN_IF_ERROR(ResolveFp8Recipe(o.fp8_recipe, o.train.precision, &recipe));
  o.train.fp8_recipe = recipe ? *recipe : DefaultFp8Recipe(*framework);
  auto dispatcher = ParseMoeDispatcher(o.moe_dispatcher);
  if (!dispatcher) return bad("--moe-dispatcher", o.moe_dispatcher, "alltoall or deepep");
  o.train.moe_dispatcher = *dispatcher;
  return ResolveFineTune(o.ft, &o.train.finetune, &o.train.lora);
}

// What the step does with gradients and FSDP's root unit, where it changes the account.
void PrintGradientsAndRoot(const PredictOptions& o) {
  const bool sharded_fsdp =
      o.train.framework == Framework::kFsdp && o.plan.zero >= 3 && o.plan.shard_size() > 1;
  if (const int64_t micro = MicroBatchesPerStep(o.train, o.plan);
      micro > 1 && (o.train.framework == Framework::kHf || o.train.framework == Framework::kFsdp)) {
    fmt::print("  gradient accumulation: {} micro-batches a step, the gradients held from the "
               "second on{}\n",
               micro,
               o.train.framework != Framework::kFsdp || o.plan.zero < 2 ? ""
               : o.train.accumulate_unsharded ? " (unsharded: FSDP's no_sync)"
                                              : " (the rank's shard: a reduce-scatter each)");
  }
  if (o.train.litgpt_model) {
    fmt::print("  model code: litgpt's GPT (fused q/k/v for every model, its LoRA on it, RMSNorm "
               "{})\n",
               o.train.litgpt_rmsnorm_in_dtype ? "in the activation dtype, as in 2023"
                                               : "upcast to fp32, as since 2024");
  }
  if (sharded_fsdp) {
    fmt::print("  {}\n", o.train.fsdp_wrap_embeddings
                            ? "embeddings and output layer: FSDP units of their own"
                            : "embeddings, final norm and output layer in FSDP's root unit: "
                              "gathered through the step (--fsdp-wrap-embeddings if not)");
  }
}

// What FSDP1's initialisation from host memory left in the allocator's cache, where accounted;
// the loss chain a transformers release was mapped to, with its replay's excess; and what the
// PyTorch release changes.
void PrintFsdpInit(const PredictOptions& o, const MemoryEstimate& est) {
  const StageEstimate& w = est.stages.at(static_cast<size_t>(est.worst_stage));
  if (!o.transformers.empty()) {
    fmt::print("  transformers {}: causal-LM loss as {}", o.transformers,
               HfLossName(o.train.hf_loss));
    const StageEstimate& last = est.stages.back();
    if (last.step_excess_bytes > 0) {
      fmt::print("; a step replayed through the allocator reserves {} GiB above its peak",
                 Gib(last.step_excess_bytes));
    }
    fmt::print("\n");
  }
  if (!o.torch.empty()) {
    const char* what = "torch.mean keeps no input for backward, as since 2.2";
    if (o.train.mean_keeps_input) {
      what = "torch.mean keeps its input for backward (an RMSNorm keeps x^2), as before 2.2";
    }
    if (o.train.framework == Framework::kMegatron) {
      what = "Megatron-LM's fused norms keep the same on every release";
    }
    fmt::print("  torch {}: {}\n", o.torch, what);
  }
  if (w.init_reserved_bytes <= 0) return;
  fmt::print("  FSDP1 initialised from host memory ({}): {} GiB reserved after wrapping, {} GiB "
             "of it free for the step; reserved is at least that plus what the step needs "
             "beyond the free blocks and the gathered units\n",
             FsdpInitName(o.train.fsdp_init), Gib(w.init_reserved_bytes),
             Gib(w.init_free_bytes));
}

void RunPredict(PredictOptions o) {
  auto spec = ResolveModel(o.model);
  if (!spec.ok()) return Fail(spec.status());
  if (Status s = ResolveLayout(o, *spec); !s.ok()) return Fail(s);
  if (Status s = ResolveLengthFile(o.length_file, &o.train.lengths); !s.ok()) return Fail(s);
  const GpuType* gpu = nullptr;
  if (!o.gpu.empty()) {
    auto g = GpuCatalog::Default().Lookup(o.gpu);
    if (!g.ok()) return Fail(g.status().WithWhere("--gpu"));
    gpu = *g;
    o.train.device_memory_bytes = gpu->memory_bytes;
  }
  auto est = PredictMemory(*spec, o.train, o.plan);
  if (!est.ok()) {
    Status s = est.status();
    return Fail(InvalidArgument("impossible layout for " + spec->name + ": " + s.message(),
                                FlagOf(s.field())));
  }
  if (gpu != nullptr) CapLengthReadings(est.value(), gpu->memory_bytes);
  nlohmann::json stage_fits;
  if (!o.stage_gpus.empty() && gpu != nullptr) {
    return Fail(InvalidArgument("give the GPU types with --stage-gpus only", {}, "--gpu"));
  }
  if (!o.data_groups.empty()) {
    if (gpu != nullptr || !o.stage_gpus.empty()) {
      return Fail(InvalidArgument("give the GPU types with --data-groups only", {},
                                  gpu != nullptr ? "--gpu" : "--stage-gpus"));
    }
    return PredictDataGroups(o.data_groups, *spec, o.train, o.plan, o.json);
  }
  if (!o.stage_gpus.empty()) {
    auto parts = ParseStageGpus(o.stage_gpus, o.plan.pp);
    if (!parts.ok()) return Fail(parts.status());
    stage_fits = StageFits(*est, *parts);
  }
  const std::optional<ErrorBand> band = PublishedErrorBand(o.train.framework);
  if (o.json) {
    nlohmann::json j = MemoryEstimateToJson(*est, gpu);
    if (!stage_fits.is_null()) {
      j["stage_gpus"] = stage_fits;
      j["fits"] = std::all_of(stage_fits.begin(), stage_fits.end(),
                              [](const nlohmann::json& f) { return f["fits"].get<bool>(); });
    }
    j["model"] = spec->name;
    j["layout"] = LayoutToJson(o.train, o.plan);
    j["error_band"] = band ? nlohmann::json{{"framework", FrameworkName(o.train.framework)},
                                            {"rows", band->rows},
                                            {"min_error", band->min_error},
                                            {"max_error", band->max_error},
                                            {"mean_abs_error", band->mean_abs_error}}
                           : nlohmann::json(nullptr);
    return PrintJson(j);
  }
  fmt::print("{}: {} params, {} on {} GPU(s) (tp {} pp {} dp {} cp {} ep {}), {} {}, "
             "micro-batch {} x {} tokens\n",
             spec->name, HumanCount(est->params), FrameworkName(o.train.framework), o.plan.gpus(),
             o.plan.tp, o.plan.pp, o.plan.dp, o.plan.cp, o.plan.ep,
             PrecisionName(o.train.precision),
             OptimizerName(o.train.optimizer), o.train.micro_batch, o.train.seq_len);
  fmt::print("  recompute {}, {} attention, ZeRO {}{}\n", RecomputeName(o.train.recompute),
             o.train.flash_attn ? "flash" : "eager", o.plan.zero,
             o.plan.sequence_parallel ? ", sequence parallel" : "");
  if (o.train.finetune != FineTune::kFull) {
    const LoraSpec run = LoraAsRun(o.train, o.plan);
    fmt::print("  fine-tune {}\n", DescribeFineTune(o.train.finetune, run));
    if (run.upcast_rest != o.train.lora.upcast_rest) {
      fmt::print("  sharded QLoRA: 4-bit layers in 16-bit storage, the rest kept 16-bit (FSDP and "
                 "ZeRO-3 need one dtype; TRL skips prepare_model_for_kbit_training)\n");
    }
  }
  if (o.train.fp8()) fmt::print("  {}\n", DescribeFp8(o.train));
  if (auto words = DescribeRecompute(o.rc, o.train); !words.empty()) {
    fmt::print("  {}\n", words);
  }
  PrintGradientsAndRoot(o);
  fmt::print("\n  {:<6} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  {}\n",
             "stage", "layers", "weights", "grads", "optim", "activ", "logits", "temp",
             "overhead", "peak", "device", "peak in");
  for (const auto& s : est->stages) {
    const auto& b = s.breakdown;
    fmt::print("  {:<6} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  {}\n",
               s.stage, s.num_layers, Gib(b.weights), Gib(b.gradients), Gib(b.optimizer),
               Gib(b.activations), Gib(b.logits), Gib(b.temporary), Gib(b.overhead),
               Gib(s.peak_bytes), Gib(s.device_bytes), s.peak_phase);
  }
  fmt::print("  (GiB; `peak` = max allocated, `device` = what nvidia-smi shows)\n\n");
  fmt::print("  peak allocated {} GiB, reserved {} GiB, device {} GiB (stage {})\n",
             Gib(est->peak_bytes), Gib(est->peak_reserved_bytes), Gib(est->device_bytes),
             est->worst_stage);
  PrintFsdpInit(o, *est);
  PrintLengthReserve(o.train, *est);
  if (band) {
    fmt::print("  expected error {:+.1f}% to {:+.1f}% (mean {:.1f}%): MARP against {} published "
               "{} run(s) (data/measurements/error_bands.json)\n",
               100 * band->min_error, 100 * band->max_error, 100 * band->mean_abs_error,
               band->rows, FrameworkName(o.train.framework));
  }
  if (est->resident_bytes < est->device_bytes) {
    fmt::print("  of which {} GiB are paged optimizer states the driver may move to host memory: "
               "{} GiB must stay on the GPU\n",
               Gib(est->device_bytes - est->resident_bytes), Gib(est->resident_bytes));
  }
  if (est->host_bytes > 0) {
    fmt::print("  offloaded to host memory: {} GiB per GPU ({})\n", Gib(est->host_bytes),
               OffloadName(o.plan.offload));
  }
  for (const auto& f : stage_fits) {
    fmt::print("  stage {} on {} ({} GiB): {}, headroom {} GiB\n", f["stage"].get<int64_t>(),
               f["gpu"].get<std::string>(), Gib(f["gpu_memory_bytes"].get<int64_t>()),
               f["fits"].get<bool>() ? "fits" : "does NOT fit",
               Gib(f["headroom_bytes"].get<int64_t>()));
  }
  if (gpu != nullptr) {
    int64_t headroom = gpu->memory_bytes - est->resident_bytes;
    fmt::print("  {} on {} ({} GiB): headroom {} GiB\n",
               headroom >= 0 ? "fits" : "does NOT fit", gpu->name, Gib(gpu->memory_bytes),
               Gib(headroom));
  }
}


// ---- perf ----------------------------------------------------------------------------------

struct PerfOptions : PredictOptions {
  int64_t gpus = 0;
  std::string cluster;
  bool uncalibrated = false;
};

void RunPerf(PerfOptions o) {
  auto spec = ResolveModel(o.model);
  if (!spec.ok()) return Fail(spec.status());
  if (Status s = ResolveLayout(o, *spec); !s.ok()) return Fail(s);
  if (!o.data_groups.empty()) {
    if (!o.gpu.empty() || !o.stage_gpus.empty()) {
      return Fail(InvalidArgument("give the GPU types with --data-groups only", {},
                                  o.gpu.empty() ? "--stage-gpus" : "--gpu"));
    }
    return PerfDataGroups(o.data_groups, *spec, o.train, o.plan, o.cluster, o.json);
  }
  if (!o.stage_gpus.empty()) {
    if (!o.gpu.empty()) {
      return Fail(InvalidArgument("give the GPU types with --stage-gpus only", {}, "--gpu"));
    }
    return PerfStageGpus(o.stage_gpus, *spec, o.train, o.plan, o.cluster, o.json);
  }
  if (o.gpu.empty()) {
    return Fail(InvalidArgument("a GPU type is needed (or --stage-gpus)", {}, "--gpu"));
  }
  auto g = GpuCatalog::Default().Lookup(o.gpu);
  if (!g.ok()) return Fail(g.status().WithWhere("--gpu"));
  if (o.gpus > 0) {
    int64_t fixed = o.plan.tp * o.plan.pp * o.plan.cp;
    if (o.gpus % fixed != 0) {
      return Fail(InvalidArgument("must be a multiple of tp x pp x cp (" + std::to_string(fixed) +
                                  ")", {}, "--gpus"));
    }
    o.plan.dp = o.gpus / fixed;
  }
  std::string network;
  auto net = NetworkFor(o.cluster, **g, o.plan.gpus(), &network);
  if (!net.ok()) return Fail(net.status());
  GpuEfficiency raw = EfficiencyOf(**g);
  raw.training_scale = 1.0;  // MAMF alone: what tools/fit_perf_calibration.py fits against
  raw.h0 = 0;
  auto perf = PredictPerf(*spec, o.train, o.plan, **g, *net, o.uncalibrated ? &raw : nullptr);
  if (!perf.ok()) {
    Status s = perf.status();
    return Fail(InvalidArgument("impossible layout for " + spec->name + ": " + s.message(),
                                FlagOf(s.field())));
  }
  const auto& b = perf->breakdown;
  nlohmann::json breakdown = {{"compute_s", b.compute_s},     {"recompute_s", b.recompute_s},
                              {"tp_comm_s", b.tp_comm_s},     {"pp_bubble_s", b.pp_bubble_s},
                              {"pp_p2p_s", b.pp_p2p_s},       {"dp_comm_s", b.dp_comm_s},
                              {"cp_comm_s", b.cp_comm_s},     {"optimizer_s", b.optimizer_s},
                              {"ep_comm_s", b.ep_comm_s},     {"offload_s", b.offload_s}};
  if (o.json) {
    nlohmann::json j = PerfFiguresJson(spec->name, *perf);
    j["gpu"] = (*g)->name;
    j["breakdown"] = breakdown;
    j["network"] = {{"gpus_per_node", net->gpus_per_node},
                    {"inter_node_gbs", net->inter_node_gbs},
                    {"assumed", network}};
    j["layout"] = LayoutToJson(o.train, o.plan);
    return PrintJson(j);
  }
  fmt::print("{} on {} x {} (tp {} pp {} dp {} cp {} ep {}), micro-batch {} x {} tokens, {}\n",
             spec->name, perf->gpus, (*g)->name, o.plan.tp, o.plan.pp, o.plan.dp, o.plan.cp,
             o.plan.ep,
             o.train.micro_batch, o.train.seq_len, FrameworkName(o.train.framework));
  fmt::print("  iteration {:.3f} s, {:.0f} tokens/s ({:.0f} per GPU), {:.0f} TFLOP/s per GPU, "
             "MFU {:.1f}%\n",
             perf->iteration_s, perf->tokens_per_s, perf->tokens_per_s_per_gpu,
             perf->tflops_per_gpu, 100 * perf->mfu);
  for (const auto& [k, v] : breakdown.items()) {
    fmt::print("    {:<12} {:>9.4f} s\n", k, v.get<double>());
  }
  fmt::print("  network: {}\n", network);
}

// What the framework's release and its training loop do (optimizer kernels, gradients, FSDP's
// wrapping, the loss), besides the layout.
void AddLoopOptions(CLI::App* cmd, PredictOptions* o) {
  cmd->add_flag("--no-foreach", o->no_foreach,
                "Optimizer updates one tensor at a time (PyTorch < 2.0, transformers.AdamW)");
  cmd->add_flag("--keep-grads", o->keep_grads,
                "zero_grad keeps the gradients allocated between steps (set_to_none=False, "
                "PyTorch < 2.0's default)");
  cmd->add_flag("--accumulate-unsharded", o->accumulate_unsharded,
                "FSDP gradient accumulation under no_sync (Lightning's no_backward_sync, "
                "Accelerate): unsharded gradients kept between micro-batches");
  cmd->add_flag("--fsdp-use-orig-params", o->fsdp_orig_params,
                "FSDP1 use_orig_params=True (Lightning's default): a fine-tune's layers get "
                "whole gradients, frozen weights included");
  cmd->add_flag("--fsdp-wrap-embeddings", o->fsdp_wrap_embeddings,
                "FSDP units of their own for the embeddings and the output layer (torchtitan "
                "since 2025); default: they sit in the root unit, gathered through the step");
  cmd->add_option("--fsdp-init", o->fsdp_init,
                  "How FSDP's units reach the GPU: none (not accounted; FSDP2 materialises "
                  "them sharded), host (FSDP1 wraps a model held in host memory: each unit "
                  "moved, flattened and sharded) or host-sync (the same, broadcast from rank 0: "
                  "sync_module_states, Accelerate's fsdp_cpu_ram_efficient_loading)")
      ->capture_default_str();
  cmd->add_flag("--drop-logits", o->drop_logits,
                "The loop keeps only the loss when backward starts: the logits are freed "
                "before it (HF Trainer, torchtune)");
  cmd->add_flag("--loss-in-model-dtype", o->loss_in_model_dtype,
                "Loss computed on 16-bit logits (older HF models run in 16 bits)");
  cmd->add_option("--transformers", o->transformers,
                  "transformers release of an HF causal LM (e.g. 4.38): sets its loss's "
                  "tensors (sliced before 4.49, fp32 logits kept before 4.46); default: "
                  "current");
  cmd->add_option("--torch", o->torch,
                  "PyTorch release the job runs (e.g. 2.1): before 2.2 torch.mean kept its "
                  "input for backward, so an eager RMSNorm kept its fp32 x^2; default: current");
  cmd->add_flag("--megatron-legacy", o->train.megatron_legacy,
                "Megatron-LM as released through 2023: its own layers (no Transformer Engine "
                "workspace) and a second fp32 copy of the logits while the loss runs");
  cmd->add_flag("--cross-entropy-loss-fusion", o->train.megatron_fused_ce,
                "Megatron-LM's fused loss (native impl) as released 2024-2025: a second fp32 "
                "copy of the logits while its compiled forward and backward steps run");
  cmd->add_flag("--litgpt-model", o->train.litgpt_model,
                "The model as litgpt's own GPT class builds it (one fused q/k/v projection "
                "whatever the model, its LoRA on it)");
  cmd->add_flag("--litgpt-bf16-rmsnorm", o->train.litgpt_rmsnorm_in_dtype,
                "lit-gpt as of 2023: its RMSNorm in the activation dtype, not upcast to fp32 "
                "(implies --litgpt-model)");
  cmd->add_option("--cuda-context-mib", o->cuda_context_mib,
                  "CUDA context and kernels (512: lazy loading; 1343 measured on CUDA 11.2)")
      ->capture_default_str();
  AddFineTuneFlags(cmd, &o->ft);
}

void AddLayoutOptions(CLI::App* cmd, PredictOptions* o) {
  cmd->add_option("--seq-len", o->train.seq_len, "Sequence length")->capture_default_str();
  cmd->add_option("--micro-batch", o->train.micro_batch, "Micro-batch size per GPU")
      ->capture_default_str();
  cmd->add_option("--global-batch", o->train.global_batch,
                  "Global batch (default micro-batch x dp)");
  cmd->add_option("--tp", o->plan.tp, "Tensor parallel size")->capture_default_str();
  cmd->add_option("--pp", o->plan.pp, "Pipeline stages")->capture_default_str();
  cmd->add_option("--dp", o->plan.dp, "Data parallel size")->capture_default_str();
  cmd->add_option("--vpp", o->plan.vpp, "Virtual (interleaved) stages per rank")
      ->capture_default_str();
  cmd->add_option("--data-groups", o->data_groups,
                  "Heterogeneous data parallelism: TYPE:REPLICAS:BATCH[:MICRO],... (each "
                  "group's replicas, its sequences of every global batch, its micro-batch)");
  cmd->add_option("--stage-gpus", o->stage_gpus,
                  "A heterogeneous pipeline: TYPE:STAGES,... first to last (e.g. "
                  "A100-40GB:2,V100-32GB:2); each stage judged on its own type");
  cmd->add_option("--stage-layers", o->plan.stage_layers,
                  "Layers of each pipeline stage, first to last, comma-separated: an uneven "
                  "split (default: as even as possible)")
      ->delimiter(',');
  cmd->add_option("--cp", o->plan.cp, "Context parallel size")->capture_default_str();
  cmd->add_option("--ep", o->plan.ep, "Expert parallel size (MoE: experts split over ep of "
                                     "the tp x dp x cp / etp ranks)")
      ->capture_default_str();
  cmd->add_option("--etp", o->plan.etp,
                  "Expert tensor parallel size (Megatron --expert-tensor-parallel-size; "
                  "default: tp)");
  cmd->add_option("--moe-capacity-factor", o->train.moe_capacity_factor,
                  "MoE routing: 0 dropless (default), else Megatron's capacity factor with "
                  "padded expert inputs");
  cmd->add_flag("--moe-grouped-gemm", o->train.moe_grouped_gemm,
                "Megatron-LM's --moe-grouped-gemm: the experts as Transformer Engine grouped "
                "GEMMs (four more cuBLAS workspaces)");
  cmd->add_option("--moe-dispatcher", o->moe_dispatcher,
                  "alltoall (NCCL all-to-all of routed rows) or deepep (once per node, "
                  "forwarded over NVLink)")
      ->capture_default_str();
  cmd->add_flag("--sequence-parallel", o->plan.sequence_parallel, "Megatron sequence parallel");
  cmd->add_option("--zero", o->plan.zero,
                  "ZeRO stage 0-3 (fsdp: 3 full shard, 2 shard grads+optimizer)")
      ->capture_default_str();
  cmd->add_flag("--distributed-optimizer", o->plan.distributed_optimizer,
                "Megatron's distributed optimizer");
  cmd->add_option("--offload", o->offload,
                  "none|optimizer|params: model states in host memory (DeepSpeed "
                  "offload_optimizer/offload_param, FSDP CPUOffload)")
      ->capture_default_str();
  cmd->add_flag("--offload-activations", o->train.offload_activations,
                "torchtune's activation offloading: saved tensors in pinned host memory, the "
                "last 5 kept on the GPU");
  cmd->add_option("--shard-group", o->plan.shard_group,
                  "Hybrid sharding group size (default: all of dp)");
  cmd->add_option("--recompute", o->rc.recompute, "none|selective|op|full")
      ->capture_default_str();
  cmd->add_option("--recompute-every", o->rc.every,
                  "With --recompute full: checkpoint every Nth layer only")
      ->capture_default_str();
  cmd->add_option("--ac-mode", o->rc.ac_mode,
                  "torchtitan's activation_checkpoint mode: none|selective|full");
  cmd->add_option("--selective-ac-option", o->rc.ac_option,
                  "torchtitan's selective_ac_option: op, or N (every Nth layer; default 2)");
  cmd->add_option("--precision", o->precision, "bf16|fp16|fp32|bf16-pure|fp8")
      ->capture_default_str();
  cmd->add_option("--fp8-recipe", o->fp8_recipe,
                  "delayed|current|mxfp8 (Transformer Engine) or tensorwise|rowwise "
                  "(torchao.float8); default: tensorwise under fsdp, delayed elsewhere");
  cmd->add_flag("--fp8-param-gather", o->train.fp8_param_gather,
                "FP8 weights where they are gathered (Megatron --fp8-param-gather; torchao "
                "enable_fsdp_float8_all_gather)");
  cmd->add_option("--optimizer", o->optimizer, "adamw|adam|sgd|sgdm|adafactor|adam8bit|paged-adamw|paged-adamw8bit")
      ->capture_default_str();
  cmd->add_flag("--no-flash-attn{true},--flash-attn{false}", o->no_flash,
                "Eager attention (keeps the s x s scores) or fused attention (default)");
  cmd->add_flag("--no-dropout", o->no_dropout, "Train without dropout");
  cmd->add_option("--framework", o->framework, "megatron|deepspeed|fsdp|hf")
      ->capture_default_str();
  cmd->add_option("--head", o->head, "causal-lm|masked-lm|classification");
  cmd->add_option("--num-labels", o->train.num_labels, "Labels of a classification head")
      ->capture_default_str();
  cmd->add_option("--device", o->device,
                  "cuda, or cpu to model PyTorch's CPU kernels (ground-truth tests)")
      ->capture_default_str();
  AddLoopOptions(cmd, o);
}

}  // namespace

int ExitCode() { return g_exit_code; }

int Main(CLI::App& app, int argc, char** argv, const char* program) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    // The library returns statuses; anything thrown here is a bug, reported rather than a crash.
    std::cerr << program << ": internal error: " << e.what() << "\n";
    return 1;
  }
  return ExitCode();
}

void RegisterCommands(CLI::App& app) {
  RegisterInspectCommand(app);
  {
    auto o = std::make_shared<PredictOptions>();
    auto* cmd = app.add_subcommand(
        "predict", "Predict the per-GPU peak memory of one training layout (MARP).");
    cmd->add_option("--model,-m", o->model, "Zoo name, HuggingFace id, or config.json path")
        ->required();
    AddLayoutOptions(cmd, o.get());
    AddLengthOptions(cmd, &o->train.lengths, &o->length_file);
    cmd->add_option("--gpu", o->gpu, "GPU type: also report whether the job fits");
    cmd->add_flag("--json", o->json, "Machine-readable output");
    cmd->callback([o] { RunPredict(*o); });
  }
  {
    auto o = std::make_shared<PerfOptions>();
    auto* cmd = app.add_subcommand("perf", "Predict the speed of one training layout on a GPU type.");
    cmd->add_option("--model,-m", o->model, "Zoo name, HuggingFace id, or config.json path")
        ->required();
    AddLayoutOptions(cmd, o.get());
    cmd->add_option("--gpu", o->gpu, "GPU type (or --stage-gpus)");
    cmd->add_option("--gpus", o->gpus, "GPU count (default tp x pp x dp x cp; sets dp)");
    cmd->add_option("--cluster", o->cluster, "Cluster whose network the job uses");
    cmd->add_flag("--uncalibrated", o->uncalibrated,
                  "Ignore the fitted training efficiency (for fitting it)");
    cmd->add_flag("--json", o->json, "Machine-readable output");
    cmd->callback([o] { RunPerf(*o); });
  }
  RegisterPlanCommand(app);
  RegisterCatalogCommands(app);
  RegisterTraceCommands(app);
  RegisterSimulateCommands(app);
  RegisterServerCommands(app);
}

}  // namespace frenzy::cli
