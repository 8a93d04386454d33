// TrainingSpec and ParallelPlan: how a model is trained, and how the work is split over GPUs.
//
// Both are immutable values. `ValidateLayout` checks a layout against a model and says why an
// impossible one is impossible (TP not dividing heads, PP more than layers, DP not dividing
// the global batch, ...). Defaults follow the command-line contract (DESIGN.md §2).
#ifndef FRENZY_MEMORY_TRAINING_H_
#define FRENZY_MEMORY_TRAINING_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "memory/variable_lengths.h"
#include "model/model_spec.h"

namespace frenzy {

// kBf16/kFp16: mixed precision (16-bit compute, fp32 master weights). kBf16Pure: everything in
// bf16, no master copy. kFp8: bf16 mixed precision whose linear layers multiply in FP8 (the
// recipe below says whose kernels and what they keep); the output layer and the attention core
// stay in bf16, as Transformer Engine under Megatron-LM and torchao's converter (which skips
// `output`) leave them.
enum class Precision { kFp32, kFp16, kBf16, kBf16Pure, kFp8 };
// How FP8 scales are found, and so whose library runs the linear layers:
//  kDelayed, kCurrent, kMxfp8: Transformer Engine (delayed scaling from an amax history, the
//    default "hybrid" recipe of Megatron-LM's --fp8-format; per-tensor current scaling; MXFP8
//    blocks of 32 on Blackwell). TE's Linear keeps its FP8-cast input for the weight gradient
//    and caches FP8 copies of its weight (and their transposes) across micro-batches.
//  kTensorwise, kRowwise: torchao.float8's Float8Linear (torchtitan), which keeps the
//    high-precision input and weight and casts them again in backward.
enum class Fp8Recipe { kDelayed, kCurrent, kMxfp8, kTensorwise, kRowwise };
inline bool TransformerEngineRecipe(Fp8Recipe r) {
  return r == Fp8Recipe::kDelayed || r == Fp8Recipe::kCurrent || r == Fp8Recipe::kMxfp8;
}
// kPagedAdamW / kPagedAdamW8bit: bitsandbytes' paged AdamW (32-bit or 8-bit states in CUDA
// unified memory, which the driver may page out to host memory under pressure).
enum class OptimizerKind {
  kAdamW, kAdam, kSgd, kSgdMomentum, kAdafactor, kAdam8bit, kPagedAdamW, kPagedAdamW8bit
};
// kSelective: Megatron's — the attention core is recomputed. kOp: torchtitan's per-op selective
// checkpointing — every other matmul output and the attention output are kept, the rest of the
// layer is recomputed in backward. kFull: only each layer's input is kept.
enum class Recompute { kNone, kSelective, kOp, kFull };
// Whose implementation runs the step: its kernels decide what is saved for backward, its
// optimizer and sharding decide the model states.
enum class Framework { kMegatron, kDeepSpeed, kFsdp, kHf };
enum class HeadType { kCausalLm, kMaskedLm, kClassification };
// kCpu models PyTorch's CPU kernels (dropout masks in the activation dtype, no CUDA context);
// it exists so that predictions can be checked against exact CPU measurements.
enum class DeviceKind { kCuda, kCpu };

// Whether backward reruns each layer's forward (full and per-op checkpointing do; selective
// recomputes only the attention core).
inline bool RecomputesLayerForward(Recompute r) {
  return r == Recompute::kFull || r == Recompute::kOp;
}

// How MoE layers move tokens to their experts' ranks. kAllToAll: NCCL all-to-all of every
// routed row (Megatron-LM's alltoall dispatcher, torchtitan's default): a token picking two
// experts on one rank is sent twice. kDeepEp: DeepEP's kernels (Megatron's flex dispatcher,
// torchtitan's deepep): a token crosses the network once per node that holds any of its
// experts and is forwarded over NVLink inside it (DeepSeek-V3 report, §3.2.2; DeepEP README).
enum class MoeDispatcher { kAllToAll, kDeepEp };
const char* MoeDispatcherName(MoeDispatcher d);
std::optional<MoeDispatcher> ParseMoeDispatcher(std::string_view s);

const char* PrecisionName(Precision p);
const char* Fp8RecipeName(Fp8Recipe r);
std::optional<Fp8Recipe> ParseFp8Recipe(std::string_view s);
// The recipe a framework's users get when they ask for FP8 without naming one: torchao's
// tensorwise under FSDP (torchtitan's float8 converter), Transformer Engine's delayed scaling
// elsewhere (Megatron-LM's --fp8-format hybrid, Accelerate's TE backend).
Fp8Recipe DefaultFp8Recipe(Framework f);
const char* OptimizerName(OptimizerKind o);
const char* RecomputeName(Recompute r);
const char* FrameworkName(Framework f);
const char* HeadTypeName(HeadType h);
std::optional<Precision> ParsePrecision(std::string_view s);
std::optional<OptimizerKind> ParseOptimizer(std::string_view s);
std::optional<Recompute> ParseRecompute(std::string_view s);
std::optional<Framework> ParseFramework(std::string_view s);
std::optional<HeadType> ParseHeadType(std::string_view s);

// What is trained. kLora: frozen 16-bit base (the compute dtype) with LoRA adapters (PEFT's
// lora.Linear, adapters in fp32); kQlora: the layers' linear weights frozen in 4-bit NF4
// (bitsandbytes Linear4bit, blockwise absmax per 64 values), every other weight upcast to fp32
// (peft.prepare_model_for_kbit_training), fp32 adapters.
enum class FineTune { kFull, kLora, kQlora };
const char* FineTuneName(FineTune f);
std::optional<FineTune> ParseFineTune(std::string_view s);

// The linear layers a LoRA adapter can wrap, as PEFT names them in Llama-style blocks, and the
// output layer (`lm_head`; litgpt's `lora_head`), which PEFT's "all-linear" leaves out.
enum LoraTarget : unsigned {
  kLoraQ = 1, kLoraK = 2, kLoraV = 4, kLoraO = 8, kLoraGate = 16, kLoraUp = 32, kLoraDown = 64,
  kLoraHead = 128,
  kLoraAttention = kLoraQ | kLoraK | kLoraV | kLoraO,
  kLoraAllLinear = kLoraAttention | kLoraGate | kLoraUp | kLoraDown,
};
// "attention", "all-linear", or module names separated by commas ("q_proj,v_proj"); nullopt
// names the first word it does not know in `bad`.
std::optional<unsigned> ParseLoraTargets(std::string_view s, std::string* bad = nullptr);
std::string LoraTargetsName(unsigned targets);

// What lives in host memory instead of the GPU's. kOptimizer: the optimizer step runs on the CPU
// over fp32 master weights, fp32 gradients and the optimizer states kept in host memory
// (DeepSpeed ZeRO-Offload, `offload_optimizer`); the GPU keeps its 16-bit weights. kParams: the
// 16-bit weights too, fetched layer by layer (DeepSpeed ZeRO-Infinity's `offload_param` with
// ZeRO-3; FSDP's CPUOffload(offload_params=True), which also keeps the gradients on the host).
// How FSDP's units come to the GPU (memory/fsdp_init.h): not accounted (FSDP2 materialises
// them sharded), or FSDP1 wrapping a model held in host memory, each unit moved, flattened and
// sharded in turn, with (kHostSync) or without a broadcast from rank 0 (sync_module_states).
enum class FsdpInit { kNone, kHost, kHostSync };
const char* FsdpInitName(FsdpInit f);
std::optional<FsdpInit> ParseFsdpInit(std::string_view s);

// How a HuggingFace causal LM computes its loss, which sets the sizes of its vocabulary-wide
// tensors (memory/activations.cc), by the transformers release that runs it:
//  * kPadded (4.49 on, the default): ForCausalLMLoss casts the logits to an fp32 copy and pads the
//    labels instead of slicing the logits (transformers PR 35646, January 2025), so every tensor
//    of the chain has the logits' shape;
//  * kLossUpcastSliced (4.46 to 4.48): the loss casts the logits to fp32 and makes the slice one
//    position short contiguous (`logits[..., :-1, :].contiguous()`): the log-softmax and its
//    gradients are one position shorter than the logits and the slice's gradient;
//  * kModelUpcastSliced (before 4.46): the model itself returns fp32 logits (Llama and the models
//    copied from it: `logits = logits.float()` in forward, removed by PR 33902 for 4.46), which
//    the loop keeps through backward, and the loss slices that copy.
// Models that never cast (GPT-2, Qwen's remote code of 2023) slice their 16-bit logits: a sliced
// chain with loss_fp32 off.
enum class HfLoss { kPadded, kLossUpcastSliced, kModelUpcastSliced };
const char* HfLossName(HfLoss h);
// The chain of a transformers release given as MAJOR.MINOR[.PATCH][suffix] ("4.38", "4.46.1",
// "4.49.0.dev0"); nullopt when it is not a version.
std::optional<HfLoss> HfLossOfTransformers(std::string_view version);
// The same, or an error naming `field` (the flag or config key that gave it).
Result<HfLoss> ParseTransformersRelease(std::string_view version, const std::string& field);
// Whether a PyTorch release ("2.1", "2.2.0+cu121") keeps torch.mean's input for backward
// (TrainingSpec::mean_keeps_input: before 2.2; a 2.2 nightly built before the change on
// 2023-09-23 counts as 2.2); nullopt for a malformed release.
std::optional<bool> MeanKeepsInputInTorch(std::string_view version);
// The same, or an error naming `field`.
Result<bool> ParseTorchRelease(std::string_view version, const std::string& field);

enum class Offload { kNone, kOptimizer, kParams };
const char* OffloadName(Offload o);
std::optional<Offload> ParseOffload(std::string_view s);

struct LoraSpec {
  int64_t rank = 8;     // PEFT LoraConfig defaults: r = 8, lora_alpha = 8, lora_dropout = 0
  double alpha = 8.0;   // scaling alpha / r: no memory of its own
  double dropout = 0.0;
  unsigned targets = kLoraAllLinear;
  bool double_quant = true;  // QLoRA: the absmax values quantised again (8-bit, fp32 per 256)
  // Bytes of an adapter weight (and its gradient): 4, PEFT's default (adapters kept in fp32), or
  // 2 when the adapters are cast to the 16-bit compute dtype (artidoro/qlora's qlora.py does).
  int64_t adapter_bytes = 4;
  // QLoRA: PEFT's prepare_model_for_kbit_training upcasts every weight left unquantised
  // (embeddings, norms, head) to fp32, and the layers' norms then hand fp32 tensors to the MLP;
  // false: they stay in the 16-bit dtype, as litgpt (BitsandbytesPrecision) and torchtune run
  // QLoRA.
  bool upcast_rest = true;
};

// torchtune's OffloadActivations(max_fwd_stash_size = 5): saved tensors kept on the GPU at once.
inline constexpr int64_t kOffloadStash = 5;

struct TrainingSpec {
  int64_t seq_len = 2048;
  int64_t micro_batch = 1;
  int64_t global_batch = 0;  // 0: micro_batch * dp (no gradient accumulation)
  Precision precision = Precision::kBf16;
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  Recompute recompute = Recompute::kNone;
  // With kFull, every recompute_every-th layer is checkpointed (1: every layer): torchtitan's
  // layer-wise selective AC (`mode = "selective"`, `selective_ac_option = "N"` wraps the blocks
  // whose 1-based count is a multiple of N).
  int64_t recompute_every = 1;
  // torchtune's activation offloading (OffloadActivations, a saved-tensors hook): every saved
  // tensor of 1 KiB or more goes to pinned host memory as forward produces it; the last
  // kOffloadStash stay on the GPU until backward starts; backward brings each back for its node.
  bool offload_activations = false;
  // Whether layer `i` (0-based, over the whole model) is recomputed in backward.
  bool RecomputesLayer(int64_t i) const {
    return recompute != Recompute::kNone && CheckpointedLayer(i, recompute_every);
  }
  // Whether layer `i` is one of the checkpointed ones when every `every`-th is (all when
  // every <= 1).
  static bool CheckpointedLayer(int64_t i, int64_t every) {
    return every <= 1 || (i + 1) % every == 0;
  }
  Framework framework = Framework::kMegatron;
  HeadType head = HeadType::kCausalLm;
  int64_t num_labels = 2;   // classification head
  bool flash_attn = true;   // fused attention: no s x s matrices kept
  bool dropout = true;      // apply the model's dropout probabilities
  DeviceKind device = DeviceKind::kCuda;
  FineTune finetune = FineTune::kFull;
  LoraSpec lora;
  // precision fp8: the recipe, and whether the weights themselves are FP8 where they are
  // gathered (Megatron-LM's --fp8-param-gather: TE's FP8 primary weights, all-gathered by the
  // distributed optimizer; torchao's enable_fsdp_float8_all_gather under FSDP).
  Fp8Recipe fp8_recipe = Fp8Recipe::kDelayed;
  bool fp8_param_gather = false;
  // MoE routing (Megatron-LM): 0 routes dropless (each expert takes what the router sends it;
  // balanced on average); > 0 is --moe-expert-capacity-factor with the experts' inputs padded
  // to capacity (--moe-pad-expert-input-to-capacity): every expert computes ceil(cf x tokens x
  // top-k / experts) rows, so cf x the balanced rows in all.
  double moe_capacity_factor = 0;
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllToAll;
  // Megatron-LM's --moe-grouped-gemm: each MoE layer's local experts run as one Transformer
  // Engine grouped GEMM (TEGroupedMLP), which splits the GEMMs over TE's four compute streams,
  // each with a cuBLAS workspace of its own (memory_model.cc). Off: Megatron's default
  // (SequentialMLP, one TE Linear per expert, the shared workspace).
  bool moe_grouped_gemm = false;
  // Rows the routed experts of one rank compute per token of its input: top-k, x the capacity
  // factor when there is one.
  double moe_routed_per_token(int64_t top_k) const {
    return static_cast<double>(top_k) * (moe_capacity_factor > 0 ? moe_capacity_factor : 1.0);
  }

  // The software environment, where it changes memory:
  // PyTorch >= 2.0 runs torch.optim's Adam with the foreach implementation by default on CUDA;
  // older PyTorch (and transformers.AdamW) update one tensor at a time.
  bool foreach_optimizer = true;
  // zero_grad(set_to_none=False), the default of Module.zero_grad and Optimizer.zero_grad
  // before PyTorch 2.0 (its release notes: "set_to_none=True by default"): gradients are zeroed
  // in place and stay allocated from the first backward on, so every later step's forward and
  // backward run beside all of them.
  bool zero_grad_keeps = false;
  // Gradient accumulation without a reduction per micro-batch under FSDP: FSDP1's no_sync()
  // (Lightning Fabric's no_backward_sync, Accelerate's accumulate) or FSDP2's
  // set_requires_gradient_sync(False) keep each rank's gradients unsharded until the last
  // micro-batch's backward reduce-scatters them (PyTorch PR 126166: "(2) avoids the
  // communication but uses more gradient memory (storing the unsharded gradients)"); the
  // default, a reduce-scatter every micro-batch, accumulates the shards.
  bool accumulate_unsharded = false;
  // FSDP1's use_orig_params=True (Lightning Fabric's default, Accelerate's
  // fsdp_use_orig_params) under adapter fine-tuning: a unit holding frozen and trainable
  // parameters has one flat parameter that requires grad, and backward materialises its whole
  // gradient, the frozen weights' included (FSDP's docs: "the gradient memory usage will be
  // higher than expected (namely, equivalent to not freezing those parameters)"). Every layer
  // holds adapters, so every layer's gradient is kept (sharded; unsharded under no_sync).
  bool fsdp_orig_params = false;
  // FSDP's wrapping: by default only the layers are units of their own, and the root unit holds
  // the embeddings, final norm and output layer, which neither FSDP1 nor FSDP2 reshards after
  // forward ("for the root, do not reshard after forward since for training, the parameters
  // would be freed and all-gathered immediately", FSDP2's lazy init; FSDP1 likewise): litgpt's
  // Block policy, Accelerate's transformer-layer policy, torchtitan until 2025. torchtitan since
  // wraps tok_embeddings and [norm, output] as units of their own: gathered only around their use.
  bool fsdp_wrap_embeddings = false;
  // FSDP1 wrapping a model held in host memory (memory/fsdp_init.h): the allocator keeps what
  // the unit-by-unit initialisation cached, and the reserved reading is at least that plus what
  // the step adds beyond it.
  FsdpInit fsdp_init = FsdpInit::kNone;
  // The dataset's sample lengths when batches vary in length (memory/variable_lengths.h):
  // seq_len is then the longest batch (the collator's max_length).
  LengthSpread lengths;
  // The training loop keeps only the loss when backward starts, so the logits are freed
  // before it: the HF Trainer (compute_loss returns the loss alone, the model's outputs go out of
  // scope), torchtune's recipes (`del logits`). A loop that keeps them in a local (litgpt's,
  // `outputs = model(**batch); accelerator.backward(outputs.loss)`) holds them through backward,
  // the default.
  bool drop_logits = false;
  // Megatron-LM as released through 2023: its own transformer layers (no Transformer Engine
  // workspace), and a cross entropy that got fp32 logits from the model (`output.float()`) and
  // subtracted their maximum out of place (a second fp32 copy) before its in-place exp. Since
  // 2024 the layers are Transformer Engine's and, from core_r0.9.0, the cast happens inside the
  // loss and the subtraction is in place ("In-place subtraction reduces memory pressure").
  bool megatron_legacy = false;
  // Megatron-LM's --cross-entropy-loss-fusion as released from 2024 until its 2026 rewrite
  // (megatron/core/fusions/fused_cross_entropy.py): each of the loss's vocab-sized in-place
  // steps is compiled (jit_fuser, torch.compile from PyTorch 2.2) in one graph with a reduction
  // or a scatter over the same tensor, and Inductor then materialises the mutated value in a
  // fresh fp32 buffer that it copies back: one more fp32 logits-sized tensor while the forward's
  // exp/sum runs and while the backward's scatter runs. The rewrite keeps those steps in place.
  bool megatron_fused_ce = false;
  // The model as litgpt's own GPT class builds it (lit_gpt/model.py, lora.py of 2023-2024)
  // instead of the HuggingFace modules: one fused q/k/v projection for every model, whose v the
  // fused attention kernel keeps as a view (so the whole projection output stays alive, beside
  // the rotated q and k); one LoRA adapter on that projection, zero-padded into its output by an
  // index_copy that keeps its source when only some of q, k and v are adapted. Its RMSNorm
  // upcasts to fp32 as HF's does (litgpt since early 2024)...
  bool litgpt_model = false;
  // ... or, in lit-gpt as of 2023 (lit_gpt/rmsnorm.py), runs in the activation dtype.
  bool litgpt_rmsnorm_in_dtype = false;
  // PyTorch before 2.2 kept the input of torch.mean for its backward (MeanBackward's
  // `_saved_self`), so an eager RMSNorm's x.pow(2).mean() kept the fp32 x^2; from 2.2 the
  // backward keeps only the element count (pytorch/pytorch#109935, merged 2023-09-23).
  bool mean_keeps_input = false;
  // Current HuggingFace models upcast logits to fp32 for the loss; older versions (and models run
  // in 16 bits without autocast) computed the loss in the model's dtype.
  bool loss_fp32 = true;
  // The transformers release's causal-LM loss (HfLoss above); HF models only.
  HfLoss hf_loss = HfLoss::kPadded;
  // The GPU's memory where the job is known to run (predict --gpu), 0 if not: the allocator
  // replays release their cached segments within it and retry, as PyTorch does.
  int64_t device_memory_bytes = 0;
  // CUDA context and kernels: about 0.5 GiB with lazy module loading (CUDA >= 11.7, the default
  // of PyTorch >= 1.13); 1343 MiB measured on a V100 with CUDA 11.2 (HF "Model training anatomy").
  int64_t cuda_context_bytes = int64_t{512} << 20;

  // Bytes of one activation element: 2 for 16-bit compute, 4 for fp32.
  int64_t act_bytes() const { return precision == Precision::kFp32 ? 4 : 2; }
  bool mixed() const {
    return precision == Precision::kBf16 || precision == Precision::kFp16 || fp8();
  }
  bool fp8() const { return precision == Precision::kFp8; }
  // Whether the logits are gone when backward starts: a loop that drops them, or Megatron-LM,
  // whose GPT model returns the loss alone (GPTModel.forward), so they die with forward.
  bool logits_freed_before_backward() const {
    return drop_logits || framework == Framework::kMegatron;
  }
  // Transformer Engine's FP8 linears (FP8 inputs kept, FP8 weight caches).
  bool te_fp8() const { return fp8() && TransformerEngineRecipe(fp8_recipe); }
};

struct ParallelPlan {
  int64_t tp = 1;   // tensor parallel (within a node)
  int64_t pp = 1;   // pipeline stages
  int64_t dp = 1;   // data parallel replicas (ZeRO/FSDP shard over these)
  int64_t cp = 1;   // context parallel: splits the sequence
  int64_t ep = 1;   // expert parallel (MoE): experts split over ep ranks of the dp group
  // Expert tensor parallel (Megatron-LM's --expert-tensor-parallel-size): the TP degree of the
  // experts' matrices; 0: the same as tp (Megatron's default). With etp < tp the experts are
  // not split over all TP ranks, and each rank computes only its own sequence-parallel tokens'
  // rows (no gather over the TP group).
  int64_t etp = 0;
  int64_t vpp = 1;  // virtual stages per rank (interleaved 1F1B)
  bool sequence_parallel = false;
  int zero = 0;                        // ZeRO stage 0-3 (FSDP: 3 full shard, 2 grad+optimizer)
  bool distributed_optimizer = false;  // Megatron's sharded optimizer (like ZeRO-1)
  int64_t shard_group = 0;             // hybrid sharding group size (0: all of dp)
  Offload offload = Offload::kNone;    // model states kept in host memory

  // Layers of each pipeline stage, first to last, when the split is uneven (a stage on a slower
  // or smaller GPU type holds fewer layers); empty: as even as possible, earlier stages taking
  // the remainder. Needs pp entries of at least 1 layer summing to the model's layers, vpp 1.
  std::vector<int64_t> stage_layers;

  int64_t gpus() const { return tp * pp * dp * cp; }
  // Layers of stage `stage` (0-based) and of the most loaded stage, for `num_layers` in all.
  int64_t LayersOfStage(int64_t stage, int64_t num_layers) const {
    if (!stage_layers.empty()) return stage_layers[static_cast<size_t>(stage)];
    return num_layers / pp + (stage < num_layers % pp ? 1 : 0);
  }
  int64_t MostLayersOnAStage(int64_t num_layers) const {
    if (stage_layers.empty()) return (num_layers + pp - 1) / pp;
    return *std::max_element(stage_layers.begin(), stage_layers.end());
  }
  int64_t expert_tp() const { return etp > 0 ? etp : tp; }
  // Ranks that hold the same experts and reduce their gradients (Megatron-core's expert data
  // parallel group: world / (etp x ep x pp)); and those of them that shard the experts' states
  // (of the shard group's).
  int64_t expert_dp() const { return std::max<int64_t>(1, dp * cp * tp / (expert_tp() * ep)); }
  int64_t expert_shard_size() const {
    return std::max<int64_t>(1, shard_size() * tp / (expert_tp() * ep));
  }
  // Ranks over which model states are sharded by ZeRO/FSDP/distributed optimizer: the data-
  // parallel ranks with the context-parallel ones, which reduce the same gradients (Megatron-
  // core's distributed optimizer uses the data-parallel group with context parallelism;
  // torchtitan's FSDP mesh flattens dp_shard x cp), unless a hybrid group is set.
  int64_t shard_size() const { return shard_group > 0 ? shard_group : dp * cp; }
};

// Every reason the layout cannot run this model, or OK.
Status ValidateLayout(const ModelSpec& model, const TrainingSpec& train, const ParallelPlan& plan);

// Micro-batches per iteration on one pipeline (gradient accumulation steps).
int64_t MicroBatchesPerStep(const TrainingSpec& train, const ParallelPlan& plan);

}  // namespace frenzy

#endif  // FRENZY_MEMORY_TRAINING_H_
