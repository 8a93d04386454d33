#include "memory/training.h"

#include <array>
#include <cctype>
#include <charconv>
#include <functional>
#include <utility>
#include <vector>

namespace frenzy {
namespace {

template <typename E, size_t N>
const char* NameOf(const std::array<std::pair<E, const char*>, N>& table, E v) {
  for (const auto& [e, name] : table) {
    if (e == v) return name;
  }
  return "?";
}

template <typename E, size_t N>
std::optional<E> Parse(const std::array<std::pair<E, const char*>, N>& table, std::string_view s) {
  for (const auto& [e, name] : table) {
    if (s == name) return e;
  }
  return std::nullopt;
}

constexpr std::array<std::pair<Precision, const char*>, 5> kPrecisions = {{
    {Precision::kFp32, "fp32"},
    {Precision::kFp16, "fp16"},
    {Precision::kBf16, "bf16"},
    {Precision::kBf16Pure, "bf16-pure"},
    {Precision::kFp8, "fp8"},
}};
constexpr std::array<std::pair<Fp8Recipe, const char*>, 5> kFp8Recipes = {{
    {Fp8Recipe::kDelayed, "delayed"},
    {Fp8Recipe::kCurrent, "current"},
    {Fp8Recipe::kMxfp8, "mxfp8"},
    {Fp8Recipe::kTensorwise, "tensorwise"},
    {Fp8Recipe::kRowwise, "rowwise"},
}};
constexpr std::array<std::pair<MoeDispatcher, const char*>, 2> kMoeDispatchers = {{
    {MoeDispatcher::kAllToAll, "alltoall"},
    {MoeDispatcher::kDeepEp, "deepep"},
}};
constexpr std::array<std::pair<OptimizerKind, const char*>, 8> kOptimizers = {{
    {OptimizerKind::kAdamW, "adamw"},
    {OptimizerKind::kAdam, "adam"},
    {OptimizerKind::kSgd, "sgd"},
    {OptimizerKind::kSgdMomentum, "sgdm"},
    {OptimizerKind::kAdafactor, "adafactor"},
    {OptimizerKind::kAdam8bit, "adam8bit"},
    {OptimizerKind::kPagedAdamW, "paged-adamw"},
    {OptimizerKind::kPagedAdamW8bit, "paged-adamw8bit"},
}};
constexpr std::array<std::pair<Recompute, const char*>, 4> kRecomputes = {{
    {Recompute::kNone, "none"},
    {Recompute::kSelective, "selective"},
    {Recompute::kOp, "op"},
    {Recompute::kFull, "full"},
}};
constexpr std::array<std::pair<Framework, const char*>, 4> kFrameworks = {{
    {Framework::kMegatron, "megatron"},
    {Framework::kDeepSpeed, "deepspeed"},
    {Framework::kFsdp, "fsdp"},
    {Framework::kHf, "hf"},
}};
constexpr std::array<std::pair<HeadType, const char*>, 3> kHeads = {{
    {HeadType::kCausalLm, "causal-lm"},
    {HeadType::kMaskedLm, "masked-lm"},
    {HeadType::kClassification, "classification"},
}};

constexpr std::array<std::pair<FineTune, const char*>, 3> kFineTunes = {{
    {FineTune::kFull, "full"},
    {FineTune::kLora, "lora"},
    {FineTune::kQlora, "qlora"},
}};
constexpr std::array<std::pair<Offload, const char*>, 3> kOffloads = {{
    {Offload::kNone, "none"},
    {Offload::kOptimizer, "optimizer"},
    {Offload::kParams, "params"},
}};
constexpr std::array<std::pair<unsigned, const char*>, 8> kLoraModules = {{
    {kLoraQ, "q_proj"},
    {kLoraK, "k_proj"},
    {kLoraV, "v_proj"},
    {kLoraO, "o_proj"},
    {kLoraGate, "gate_proj"},
    {kLoraUp, "up_proj"},
    {kLoraDown, "down_proj"},
    {kLoraHead, "lm_head"},
}};
// The groups a target list may name (the first spelling is the one printed).
constexpr std::array<std::pair<unsigned, const char*>, 3> kLoraGroups = {{
    {kLoraAllLinear, "all-linear"},
    {kLoraAllLinear, "all"},
    {kLoraAttention, "attention"},
}};

}  // namespace

const char* FineTuneName(FineTune f) { return NameOf(kFineTunes, f); }
const char* Fp8RecipeName(Fp8Recipe r) { return NameOf(kFp8Recipes, r); }
const char* MoeDispatcherName(MoeDispatcher d) { return NameOf(kMoeDispatchers, d); }
std::optional<MoeDispatcher> ParseMoeDispatcher(std::string_view s) {
  return Parse(kMoeDispatchers, s);
}
std::optional<Fp8Recipe> ParseFp8Recipe(std::string_view s) { return Parse(kFp8Recipes, s); }
Fp8Recipe DefaultFp8Recipe(Framework f) {
  return f == Framework::kFsdp ? Fp8Recipe::kTensorwise : Fp8Recipe::kDelayed;
}
constexpr std::array<std::pair<FsdpInit, const char*>, 3> kFsdpInits = {{
    {FsdpInit::kNone, "none"},
    {FsdpInit::kHost, "host"},
    {FsdpInit::kHostSync, "host-sync"},
}};

const char* HfLossName(HfLoss h) {
  switch (h) {
    case HfLoss::kPadded: return "padded labels (transformers 4.49 on)";
    case HfLoss::kLossUpcastSliced: return "fp32 copy in the loss, sliced (transformers 4.46-4.48)";
    case HfLoss::kModelUpcastSliced:
      return "fp32 logits from the model, kept, sliced (transformers before 4.46)";
  }
  return "?";
}

namespace {

// "major.minor", optionally followed by a patch number and a pre-release or local suffix
// ("4.46.1", "4.49.0.dev0", "2.2.0+cu121").
std::optional<std::pair<int64_t, int64_t>> ParseRelease(std::string_view version) {
  const char* p = version.data();
  const char* const end = version.data() + version.size();
  auto number = [&](int64_t& out) {
    if (p == end || !std::isdigit(static_cast<unsigned char>(*p))) return false;
    const auto [ptr, ec] = std::from_chars(p, end, out);
    if (ec != std::errc() || ptr - p > 4) return false;
    p = ptr;
    return true;
  };
  int64_t major = 0, minor = 0;
  if (!number(major) || p == end || *p++ != '.' || !number(minor)) return std::nullopt;
  // A patch number and a pre-release suffix may follow ("4.46.1", "4.49.0.dev0").
  for (; p < end; ++p) {
    if (!std::isalnum(static_cast<unsigned char>(*p)) && *p != '.' && *p != '-' && *p != '+') {
      return std::nullopt;
    }
  }
  return std::pair{major, minor};
}

}  // namespace

std::optional<HfLoss> HfLossOfTransformers(std::string_view version) {
  const auto release = ParseRelease(version);
  if (!release) return std::nullopt;
  const auto [major, minor] = *release;
  if (major > 4 || (major == 4 && minor >= 49)) return HfLoss::kPadded;
  if (major == 4 && minor >= 46) return HfLoss::kLossUpcastSliced;
  return HfLoss::kModelUpcastSliced;
}

std::optional<bool> MeanKeepsInputInTorch(std::string_view version) {
  const auto release = ParseRelease(version);
  if (!release) return std::nullopt;
  const auto [major, minor] = *release;
  return major < 2 || (major == 2 && minor < 2);
}

Result<bool> ParseTorchRelease(std::string_view version, const std::string& field) {
  if (auto keeps = MeanKeepsInputInTorch(version)) return *keeps;
  return InvalidArgument("unknown value '" + std::string(version) +
                             "' (expected a release such as 2.1 or 2.5.1)",
                         {}, field);
}

Result<HfLoss> ParseTransformersRelease(std::string_view version, const std::string& field) {
  if (auto chain = HfLossOfTransformers(version)) return *chain;
  return InvalidArgument("unknown value '" + std::string(version) +
                             "' (expected a release such as 4.38 or 4.46.1)",
                         {}, field);
}

const char* FsdpInitName(FsdpInit f) { return NameOf(kFsdpInits, f); }
std::optional<FsdpInit> ParseFsdpInit(std::string_view s) { return Parse(kFsdpInits, s); }
const char* OffloadName(Offload o) { return NameOf(kOffloads, o); }
std::optional<Offload> ParseOffload(std::string_view s) { return Parse(kOffloads, s); }
std::optional<FineTune> ParseFineTune(std::string_view s) { return Parse(kFineTunes, s); }

std::optional<unsigned> ParseLoraTargets(std::string_view s, std::string* bad) {
  unsigned targets = 0;
  while (!s.empty()) {
    const size_t comma = s.find(',');
    const std::string_view word = s.substr(0, comma);
    // A group may be listed with more names ("all-linear,lm_head").
    std::optional<unsigned> bit = Parse(kLoraGroups, word);
    if (!bit) bit = Parse(kLoraModules, word);
    if (!bit) {
      if (bad) *bad = std::string(word);
      return std::nullopt;
    }
    targets |= *bit;
    s = comma == std::string_view::npos ? std::string_view{} : s.substr(comma + 1);
  }
  if (targets == 0) {
    if (bad) bad->clear();
    return std::nullopt;
  }
  return targets;
}

std::string LoraTargetsName(unsigned targets) {
  // A group names the layers it covers; the output layer is never in one.
  const unsigned layers = targets & ~static_cast<unsigned>(kLoraHead);
  const char* group = nullptr;
  for (const auto& [bits, name] : kLoraGroups) {
    if (!group && bits == layers) group = name;
  }
  std::string out = group ? group : "";
  for (const auto& [bit, name] : kLoraModules) {
    if (group && bit != kLoraHead) continue;
    if ((targets & bit) == 0) continue;
    if (!out.empty()) out += ',';
    out += name;
  }
  return out;
}

const char* PrecisionName(Precision p) { return NameOf(kPrecisions, p); }
const char* OptimizerName(OptimizerKind o) { return NameOf(kOptimizers, o); }
const char* RecomputeName(Recompute r) { return NameOf(kRecomputes, r); }
const char* FrameworkName(Framework f) { return NameOf(kFrameworks, f); }
const char* HeadTypeName(HeadType h) { return NameOf(kHeads, h); }
std::optional<Precision> ParsePrecision(std::string_view s) { return Parse(kPrecisions, s); }
std::optional<OptimizerKind> ParseOptimizer(std::string_view s) {
  if (s == "sgd-momentum") return OptimizerKind::kSgdMomentum;
  return Parse(kOptimizers, s);
}
std::optional<Recompute> ParseRecompute(std::string_view s) { return Parse(kRecomputes, s); }
std::optional<Framework> ParseFramework(std::string_view s) { return Parse(kFrameworks, s); }
std::optional<HeadType> ParseHeadType(std::string_view s) { return Parse(kHeads, s); }

int64_t MicroBatchesPerStep(const TrainingSpec& train, const ParallelPlan& plan) {
  int64_t per_step = train.micro_batch * plan.dp;
  if (train.global_batch <= 0 || per_step <= 0) return 1;
  return train.global_batch / per_step;
}

namespace {

using AddProblem = std::function<void(std::string, std::string)>;

void CheckOffload(const TrainingSpec& t, const ParallelPlan& p, const AddProblem& add) {
  if (p.offload != Offload::kNone) {
    const bool params = p.offload == Offload::kParams;
    if (t.framework == Framework::kDeepSpeed) {
      if (params && p.zero != 3) {
        add("offload", "DeepSpeed offloads parameters (offload_param) with ZeRO-3 only: use --zero 3");
      } else if (p.zero < 1) {
        add("offload", "DeepSpeed offloads the optimizer with ZeRO 1-3: use --zero 1, 2 or 3");
      }
    } else if (t.framework == Framework::kFsdp) {
      if (!params || p.zero != 3) {
        add("offload", "FSDP's CPUOffload moves parameters, gradients and the optimizer step "
                       "together: use --offload params with --zero 3 (full shard)");
      }
    } else {
      add("offload", "is modelled as DeepSpeed (ZeRO-Offload/Infinity) and FSDP (CPUOffload) run "
                     "it: use --framework deepspeed or fsdp");
    }
    if (t.finetune != FineTune::kFull && t.framework == Framework::kDeepSpeed) {
      add("offload", "is modelled for fine-tuning under FSDP's CPUOffload: use --framework fsdp");
    }
    if (t.device != DeviceKind::kCuda) add("offload", "needs a GPU to offload from");
  }
}

void CheckFineTune(const TrainingSpec& t, const ParallelPlan& p, const AddProblem& add) {
  auto s = [](int64_t v) { return std::to_string(v); };
  if (t.fsdp_orig_params && t.framework != Framework::kFsdp) {
    add("fsdp_orig_params", "is FSDP1's use_orig_params: use --framework fsdp");
  }
  if (t.finetune != FineTune::kFull) {
    const char* kind = FineTuneName(t.finetune);
    if (t.framework == Framework::kMegatron) {
      add("finetune", std::string(kind) +
                          " is modelled as PEFT runs it: use --framework hf, fsdp or deepspeed");
    } else if (t.finetune == FineTune::kQlora && t.framework == Framework::kDeepSpeed &&
               p.zero > 0 && p.zero < 3) {
      add("finetune", "qlora under DeepSpeed is modelled without ZeRO or with ZeRO-3 (bitsandbytes' "
                      "4-bit storage), found ZeRO " + s(p.zero));
    }
    if (t.finetune == FineTune::kQlora && t.precision == Precision::kFp32) {
      add("precision", "qlora computes in 16 bits: use --precision bf16 or fp16");
    }
    if (t.lora.rank < 1 || t.lora.rank > (int64_t{1} << 16)) {
      add("lora_rank", "must be in [1, 65536], found " + s(t.lora.rank));
    }
    if (!(t.lora.dropout >= 0.0 && t.lora.dropout < 1.0)) {
      add("lora_dropout", "must be in [0, 1)");
    }
    if ((t.lora.targets & kLoraAllLinear) == 0) add("lora_targets", "names no layer");
    if (t.lora.adapter_bytes != 2 && t.lora.adapter_bytes != 4) {
      add("lora_dtype", "adapters are fp32 (4 bytes) or 16-bit (2 bytes)");
    }
    if (t.head != HeadType::kCausalLm) add("head", "fine-tuning is modelled for causal LMs");
    if (p.pp > 1 || p.tp > 1 || p.cp > 1 || p.ep > 1) {
      add("finetune", "PEFT fine-tuning runs data parallel (with ZeRO/FSDP sharding): use "
                      "tp = pp = cp = ep = 1");
    }
  }
}

void CheckHfLoss(const TrainingSpec& t, const AddProblem& add) {
  if (t.hf_loss != HfLoss::kPadded &&
      (t.framework == Framework::kMegatron || t.head != HeadType::kCausalLm)) {
    add("transformers", "sets a HuggingFace causal LM's loss: use --framework hf, fsdp or "
                        "deepspeed with --head causal-lm");
  }
  if (t.device_memory_bytes < 0) add("device_memory_bytes", "must not be negative");
}

void CheckFsdpInit(const TrainingSpec& t, const ParallelPlan& p, const AddProblem& add) {
  if (t.fsdp_init != FsdpInit::kNone &&
      (t.framework != Framework::kFsdp || p.zero < 2 || p.tp > 1 || p.pp > 1 || p.ep > 1)) {
    add("fsdp_init", "is FSDP1's initialisation of a sharded model over data-parallel ranks: "
                     "use --framework fsdp with --zero 2 or 3 and no tp, pp or ep");
  }
}

void CheckLengths(const TrainingSpec& t, const AddProblem& add) {
  const LengthSpread& l = t.lengths;
  if (!l.active()) {
    if (l.mean < 0) add("length_mean", "must be positive");
    return;
  }
  if (!l.order.empty()) {
    if (l.mean > 0 || l.sd > 0) {
      add("length_file", "gives the lengths themselves: not with --length-mean/--length-sd");
    }
    if (t.device != DeviceKind::kCuda) {
      add("length_file", "varying batch lengths change the CUDA caching allocator's readings "
                         "only: not with --device cpu");
    }
    return;
  }
  if (!(l.mean <= 1e8)) add("length_mean", "must be a positive number of tokens up to 1e8");
  if (!(l.sd > 0 && l.sd <= 1e8)) {
    add("length_sd", "must be a positive number of tokens up to 1e8 (with --length-mean)");
  }
  if (l.min < 1) add("length_min", "must be at least 1");
  if (l.samples < 1 || l.samples > kMaxLengthSamples) {
    add("length_samples", "must be between 1 and " + std::to_string(kMaxLengthSamples));
  }
  if (t.device != DeviceKind::kCuda) {
    add("length_mean", "varying batch lengths change the CUDA caching allocator's readings "
                       "only: not with --device cpu");
  }
}

void CheckFp8(const TrainingSpec& t, const ParallelPlan& p, const AddProblem& add) {
  if (!t.fp8()) {
    if (t.fp8_param_gather) add("fp8_param_gather", "needs --precision fp8");
    return;
  }
  const std::string recipe = Fp8RecipeName(t.fp8_recipe);
  if (t.finetune != FineTune::kFull) add("precision", "fp8 is modelled for full training");
  if (TransformerEngineRecipe(t.fp8_recipe)) {
    // (TE's linears also run under FSDP: llm-foundry's amp_fp8.)
    if (t.fp8_param_gather &&
        !(t.framework == Framework::kMegatron && (p.distributed_optimizer || p.zero >= 1))) {
      add("fp8_param_gather", "Transformer Engine's FP8 primary weights are gathered by "
                              "Megatron-LM's distributed optimizer (--fp8-param-gather): use "
                              "--framework megatron --distributed-optimizer");
    }
  } else {
    if (t.framework == Framework::kMegatron || t.framework == Framework::kDeepSpeed) {
      add("fp8_recipe", recipe + " is torchao.float8's; " + FrameworkName(t.framework) +
                            " runs FP8 with Transformer Engine: use --fp8-recipe delayed, "
                            "current or mxfp8");
    }
    if (t.fp8_param_gather && !(t.framework == Framework::kFsdp && p.zero == 3)) {
      add("fp8_param_gather", "torchao gathers FP8 weights under FSDP's full shard "
                              "(enable_fsdp_float8_all_gather): use --framework fsdp --zero 3");
    }
  }
}

// Expert parallelism, expert TP and MoE routing against the model and the framework.
void CheckExperts(const ModelSpec& m, const TrainingSpec& t, const ParallelPlan& p,
                  const AddProblem& add) {
  auto s = [](int64_t v) { return std::to_string(v); };
  if (p.etp != 0 && !m.moe.enabled()) {
    add("etp", "expert tensor parallelism needs an MoE model");
  } else if (p.etp < 0 || (p.etp > 0 && p.tp % p.etp != 0)) {
    add("etp", "expert tensor parallel size " + s(p.etp) + " must divide tp (" + s(p.tp) + ")");
  } else if (m.moe.enabled() && m.moe.ffn_hidden_size % p.expert_tp() != 0) {
    add(p.etp > 0 ? "etp" : "tp", "expert tensor parallel size " + s(p.expert_tp()) +
                                      " must divide the experts' FFN size (" +
                                      s(m.moe.ffn_hidden_size) + ")");
  } else if (p.etp > 0 && p.etp != p.tp && t.framework != Framework::kMegatron) {
    add("etp", "an expert tensor parallel size other than tp is Megatron-LM's "
               "(--expert-tensor-parallel-size)");
  }
  if (m.moe.enabled() && t.framework == Framework::kMegatron && p.tp > 1 &&
      !p.sequence_parallel) {
    // megatron/core/model_parallel_config.py refuses it ("sequence parallelism must be used").
    add("sequence_parallel", "Megatron-LM runs MoE layers with tensor parallelism only under "
                             "sequence parallelism: add --sequence-parallel");
  }
  if (p.ep > 1) {
    if (!m.moe.enabled()) {
      add("ep", "expert parallelism needs an MoE model");
    } else {
      if (m.moe.num_experts % p.ep != 0) {
        add("ep", "expert parallel size " + s(p.ep) + " must divide the number of experts (" +
                      s(m.moe.num_experts) + ")");
      }
      // The expert-parallel groups fold over the ranks of a stage that are not expert-TP
      // ranks (Megatron-core's MoE parallel folding): tp x dp x cp / etp of them; etp = tp
      // leaves dp x cp.
      const int64_t foldable = p.tp * p.dp * p.cp / std::max<int64_t>(1, p.expert_tp());
      if (p.expert_tp() > 0 && p.tp % p.expert_tp() == 0 && foldable % p.ep != 0) {
        add("ep", "expert parallel size " + s(p.ep) + " must divide tp x dp x cp / etp (" +
                      s(foldable) + ")");
      }
      if (p.shard_group > 0 && p.expert_tp() > 0 &&
          (p.shard_group * p.tp / p.expert_tp()) % p.ep != 0) {
        add("ep", "expert parallel size " + s(p.ep) + " must divide the hybrid sharding group x "
                      "tp / etp (" + s(p.shard_group * p.tp / p.expert_tp()) + ")");
      }
      if (t.framework == Framework::kDeepSpeed && p.zero >= 3) {
        // deepspeed/runtime/engine.py asserts "MoE not supported with Stage 3".
        add("ep", "DeepSpeed-MoE does not run under ZeRO-3: use --zero 0, 1 or 2");
      }
    }
  }
  if (!(t.moe_capacity_factor >= 0) || t.moe_capacity_factor > 64) {
    add("moe_capacity_factor", "must be 0 (dropless) or a capacity factor in (0, 64]");
  } else if (t.moe_capacity_factor > 0) {
    if (!m.moe.enabled()) add("moe_capacity_factor", "capacity-factor routing needs an MoE model");
    if (t.framework != Framework::kMegatron) {
      add("moe_capacity_factor", "capacity-factor routing is Megatron-LM's "
                                 "(--moe-expert-capacity-factor); the others route dropless");
    }
  }
  if (t.moe_grouped_gemm && (!m.moe.enabled() || t.framework != Framework::kMegatron)) {
    add("moe_grouped_gemm", "grouped GEMM is Megatron-LM's (--moe-grouped-gemm) for an MoE "
                            "model");
  }
  if (t.moe_dispatcher == MoeDispatcher::kDeepEp && t.framework != Framework::kMegatron &&
      t.framework != Framework::kFsdp) {
    add("moe_dispatcher", "DeepEP is Megatron-LM's (flex dispatcher) and torchtitan's; use "
                          "alltoall");
  }
  if (p.ep > 1 && t.framework == Framework::kHf) {
    add("ep", "HF Trainer has no expert parallelism; use megatron, deepspeed or fsdp "
              "(torchtitan)");
  }
}

// Flags that describe one framework's releases or wrapping.
void CheckFrameworkFlags(const TrainingSpec& t, const AddProblem& add) {
  if (t.accumulate_unsharded && t.framework != Framework::kFsdp) {
    add("accumulate_unsharded", "is FSDP's no_sync accumulation: use --framework fsdp");
  }
  if (t.drop_logits && t.framework == Framework::kMegatron) {
    add("drop_logits", "Megatron-LM's loss keeps its own buffers: use --framework hf, fsdp or "
                       "deepspeed");
  }
  if (t.megatron_legacy && t.framework != Framework::kMegatron) {
    add("megatron_legacy", "describes Megatron-LM releases: use --framework megatron");
  }
  if (t.megatron_fused_ce && (t.framework != Framework::kMegatron || t.megatron_legacy)) {
    add("cross_entropy_loss_fusion",
        "is Megatron-LM's fused loss since 2024: use --framework megatron without "
        "--megatron-legacy");
  }
  if (t.litgpt_model && t.framework == Framework::kMegatron) {
    add("litgpt_model", "is litgpt's model code, which Megatron-LM does not run: use "
                        "--framework fsdp (litgpt's Fabric, one GPU or FSDP)");
  }
  if (t.fsdp_wrap_embeddings && t.framework != Framework::kFsdp) {
    add("fsdp_wrap_embeddings", "is FSDP's wrapping: use --framework fsdp");
  }
}

}  // namespace

Status ValidateLayout(const ModelSpec& m, const TrainingSpec& t, const ParallelPlan& p) {
  std::vector<std::pair<std::string, std::string>> problems;
  AddProblem add = [&](std::string field, std::string msg) {
    problems.emplace_back(std::move(field), std::move(msg));
  };
  auto s = [](int64_t v) { return std::to_string(v); };
  // Every size must lie in [1, 2^24]: below is impossible, above is a typo.
  constexpr int64_t kMaxSize = int64_t{1} << 24;
  for (auto [name, v] : {std::pair{"seq_len", t.seq_len}, std::pair{"micro_batch", t.micro_batch},
                         std::pair{"tp", p.tp}, std::pair{"pp", p.pp}, std::pair{"dp", p.dp},
                         std::pair{"cp", p.cp}, std::pair{"ep", p.ep}, std::pair{"vpp", p.vpp}}) {
    if (v < 1) add(name, "must be at least 1, found " + s(v));
    if (v > kMaxSize) add(name, "implausibly large: " + s(v));
  }
  // The checks below divide by these sizes.
  if (!problems.empty()) {
    return InvalidArgument(problems[0].second, {}, problems[0].first);
  }
  if (p.tp > 1 && m.num_heads % p.tp != 0) {
    add("tp", "tensor parallel size " + s(p.tp) + " must divide the number of attention heads (" +
                  s(m.num_heads) + ")");
  }
  if (p.tp > 1 && m.num_kv_heads % p.tp != 0 && p.tp % m.num_kv_heads != 0) {
    add("tp", "tensor parallel size " + s(p.tp) + " must divide the key/value heads (" +
                  s(m.num_kv_heads) + ") or be a multiple of them");
  }
  if (p.tp > 1 && m.ffn_hidden_size % p.tp != 0) {
    add("tp", "tensor parallel size " + s(p.tp) + " must divide the FFN size (" +
                  s(m.ffn_hidden_size) + ")");
  }
  if (p.pp * p.vpp > m.num_layers) {
    add("pp", "pipeline stages x virtual stages (" + s(p.pp * p.vpp) +
                  ") cannot exceed the number of layers (" + s(m.num_layers) + ")");
  }
  if (p.vpp > 1 && p.pp == 1) add("vpp", "interleaved stages need pp > 1");
  if (!p.stage_layers.empty()) {
    int64_t sum = 0;
    bool each = true;
    for (int64_t n : p.stage_layers) {
      each = each && n >= 1 && n <= m.num_layers;
      sum += n >= 1 && n <= m.num_layers ? n : 0;
    }
    if (static_cast<int64_t>(p.stage_layers.size()) != p.pp) {
      add("stage_layers", "names " + s(static_cast<int64_t>(p.stage_layers.size())) +
                              " stages; the layout has pp = " + s(p.pp));
    } else if (!each || sum != m.num_layers) {
      add("stage_layers", "every stage needs at least one layer and the stages together the "
                          "model's " + s(m.num_layers) + " layers");
    }
    if (p.vpp > 1) add("stage_layers", "an uneven split needs vpp = 1");
  }
  if (t.seq_len % p.cp != 0 || (p.cp > 1 && (t.seq_len / p.cp) % 2 != 0)) {
    add("cp", "context parallel size " + s(p.cp) + " must split the sequence (" + s(t.seq_len) +
                  ") into equal even chunks");
  }
  if (m.max_positions > 0 && m.position == PositionKind::kLearned && t.seq_len > m.max_positions) {
    add("seq_len", "the model's learned position table holds " + s(m.max_positions) +
                       " positions; sequence length " + s(t.seq_len) + " does not fit");
  }
  if (p.sequence_parallel && p.tp == 1) add("sequence_parallel", "needs tp > 1");
  if (p.sequence_parallel && t.seq_len / p.cp % p.tp != 0) {
    add("sequence_parallel", "the sequence per rank must divide by tp");
  }
  if (p.zero < 0 || p.zero > 3) add("zero", "ZeRO stage must be 0, 1, 2 or 3");
  CheckFrameworkFlags(t, add);
  if (t.offload_activations) {
    if (t.framework != Framework::kHf && t.framework != Framework::kFsdp) {
      add("offload_activations", "activation offloading is modelled as torchtune runs it "
                                 "(OffloadActivations): use --framework hf or fsdp");
    }
    if (p.pp > 1) add("offload_activations", "is modelled without pipeline parallelism");
  }
  if (t.recompute_every < 1 || t.recompute_every > kMaxSize) {
    add("recompute_every", "must be at least 1, found " + s(t.recompute_every));
  } else if (t.recompute_every > 1 && t.recompute != Recompute::kFull) {
    add("recompute_every", "checkpointing every Nth layer recomputes whole layers: use "
                           "--recompute full");
  }
  CheckExperts(m, t, p, add);
  if (p.shard_group < 0 || (p.shard_group > 0 && (p.dp * p.cp) % p.shard_group != 0)) {
    add("shard_group", "the hybrid sharding group must divide dp x cp (" + s(p.dp * p.cp) + ")");
  }
  if (t.global_batch > 0 && t.global_batch % (t.micro_batch * p.dp) != 0) {
    add("global_batch", "global batch " + s(t.global_batch) +
                            " must be a multiple of micro-batch x dp (" +
                            s(t.micro_batch * p.dp) + ")");
  }
  if (t.head == HeadType::kCausalLm && m.arch == ArchKind::kEncoder) {
    add("head", "an encoder model needs --head masked-lm or classification");
  }
  if (t.num_labels < 1) add("num_labels", "must be at least 1");
  if (p.distributed_optimizer && t.framework != Framework::kMegatron) {
    add("distributed_optimizer", "is Megatron's; use --zero with other frameworks");
  }
  CheckOffload(t, p, add);
  CheckFineTune(t, p, add);
  CheckFp8(t, p, add);
  CheckFsdpInit(t, p, add);
  CheckHfLoss(t, add);
  CheckLengths(t, add);
  if (problems.empty()) return Status::Ok();
  std::string msg = problems[0].second;
  for (size_t i = 1; i < problems.size(); ++i) {
    msg += "; also " + problems[i].first + ": " + problems[i].second;
  }
  return InvalidArgument(msg, {}, problems[0].first);
}

}  // namespace frenzy
