// The planner: the serverless decision. Given a job (model and training goals, never GPUs) and
// a cluster, it enumerates every layout on every GPU type the cluster has — GPU count, TP
// (within a node), PP (dividing the layers), DP, CP, micro-batch (with gradient accumulation
// reaching the global batch), ZeRO / distributed optimizer, recomputation — keeps those whose
// predicted per-GPU memory fits with a safety margin (MARP), predicts their speed (perf), and
// ranks them by completion time, cost or a mix. It also returns the Pareto set over
// (GPUs used, time). "No plan fits" is an answer, not an error: a typed `Infeasible` that says
// why (no layout possible, goals unmet, too little memory per GPU type) and what would fit.
// The planner writes no prose; planner/explain.h renders an outcome for the CLI and the API.
//
// Pure function of its inputs; the scheduler calls it for every job it sees.
#ifndef FRENZY_PLANNER_PLANNER_H_
#define FRENZY_PLANNER_PLANNER_H_

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "hardware/cluster.h"
#include "hardware/gpu.h"
#include "memory/training.h"
#include "model/model_spec.h"

namespace frenzy {

enum class Objective { kTime, kCost, kMix };

// The memory reading a plan's fit is judged on, as users take it: PyTorch's
// max_memory_allocated (kAllocated), max_memory_reserved (kReserved: what the caching allocator
// holds), or the device's own reading (kDevice, nvidia-smi: reserved plus the CUDA context and
// NCCL's buffers, less paged optimizer states; the default, and the only one that is safe: a
// run can fit its allocated bytes and still run out of device memory).
enum class Reading { kAllocated, kReserved, kDevice };
const char* ReadingName(Reading r);  // "allocated", "reserved", "device"
std::optional<Reading> ParseReading(std::string_view s);

// The layouts the job's framework can run (launch/launch.h fills it for each framework Frenzy
// launches): the planner searches only those, so that every plan it returns is runnable. The
// default allows everything the memory and speed models know.
struct LayoutLimits {
  bool tp = true, pp = true, cp = true, ep = true;
  std::vector<int64_t> zeros;  // ZeRO stages / FSDP sharding it has; empty: all
  bool recompute = true;       // whole-layer recomputation
  bool recompute_every = true; // of every Nth layer only (torchtitan's selective_ac_option N)
  std::vector<Offload> offloads;  // state offload modes it has; empty: all the memory model has
  bool offload_activations = true;
  bool fp16 = true;  // fp16 mixed precision where the GPU lacks bf16 (else fp32)
  // Hybrid sharding (FSDP's HYBRID_SHARD, HSDP): ZeRO-2/3 states sharded within a node's ranks,
  // replicated across nodes. Only PyTorch FSDP's frameworks (Framework::kFsdp) have it.
  bool hybrid_shard = true;
  // The GPUs run as the same number of processes on each node (torchrun's rule): EvenOverNodes.
  bool even_nodes = false;
  // Gradient accumulation under FSDP without a reduction per micro-batch (Accelerate's
  // accumulate(), FSDP's no_sync): unsharded gradients between micro-batches
  // (TrainingSpec::accumulate_unsharded).
  bool accumulate_unsharded = false;
  // How FSDP's units reach the GPU (TrainingSpec::fsdp_init): FSDP1 wrapping a model held in
  // host memory leaves its initialisation's blocks in the allocator's cache.
  FsdpInit fsdp_init = FsdpInit::kNone;
  // The transformers release the environment runs HF causal LMs with (TrainingSpec::hf_loss):
  // its loss chain; the current one unless the user or the operator says otherwise.
  HfLoss hf_loss = HfLoss::kPadded;
  // The PyTorch release is older than 2.2, whose torch.mean keeps no input
  // (TrainingSpec::mean_keeps_input); current PyTorch unless the user or the operator says.
  bool mean_keeps_input = false;
  bool Allows(int64_t zero) const;
  bool Allows(Offload o) const;
};

// Whether `gpus` GPUs run as the same number of processes on each of the fewest nodes of
// `per_node` GPUs that hold them, each node holding whole TP groups (a TP group's ranks are
// consecutive).
bool EvenOverNodes(int64_t gpus, int64_t per_node, int64_t tp);

// What a user submits. Every optional field is a pin the planner respects.
struct JobSpec {
  ModelSpec model;
  double tokens = 0;         // tokens to train on
  int64_t global_batch = 0;  // sequences per iteration
  int64_t seq_len = 2048;
  // fp8 runs FP8 linears on GPUs with FP8 tensor cores and bf16 mixed precision on the others
  // (each plan says which); fp8_recipe unset: the framework's default (DefaultFp8Recipe).
  Precision precision = Precision::kBf16;
  std::optional<Fp8Recipe> fp8_recipe;
  bool fp8_param_gather = false;
  Framework framework = Framework::kMegatron;
  // The FP8 recipe the job runs: the one it names, or its framework's default.
  Fp8Recipe fp8_recipe_or_default() const {
    return fp8_recipe ? *fp8_recipe : DefaultFp8Recipe(framework);
  }
  // Full training, or adapters over a frozen base (then data parallel only, with ZeRO/FSDP
  // sharding where the framework has it: PEFT's layouts).
  FineTune finetune = FineTune::kFull;
  LoraSpec lora;
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  std::optional<std::string> gpu;  // pin a GPU type (users normally do not)
  std::optional<int64_t> gpus, tp, pp, dp, cp, ep, micro_batch, zero;
  // MoE routing: 0 dropless; else Megatron's capacity factor (TrainingSpec).
  double moe_capacity_factor = 0;
  std::optional<Recompute> recompute;
  // Offload pinned (kNone forbids it); unset: tried only when nothing fits without it.
  std::optional<Offload> offload;
  // Activation offload (torchtune's, frameworks hf and fsdp) pinned; unset: tried only when
  // nothing fits without it, as state offload is.
  std::optional<bool> offload_activations;
  LayoutLimits limits;
  std::optional<double> deadline_s;  // finish within this many seconds
  std::optional<double> budget;      // spend at most this (USD)
};

struct PlannerOptions {
  // Headroom kept above the predicted device memory: MARP's worst error on its ground truth is
  // 2.8% (CPU) and 8.1% on published Megatron reserved memory (bench/RESULTS.md); 10% covers
  // both.
  double memory_margin = 0.10;
  // Headroom kept above the offloaded states in host memory: DeepSpeed's own estimators
  // multiply them by additional_buffer_factor = 1.5 "to be conservative" (pinned buffers,
  // the CPU optimizer's working copies, the dataloaders and the OS share the node's memory).
  double host_margin = 0.5;
  Objective objective = Objective::kTime;
  Reading reading = Reading::kDevice;  // what `fits` is judged on, with the margin above
  int64_t top = 10;
};

struct Plan {
  std::string gpu;
  int64_t gpus = 0;
  int64_t tp = 1, pp = 1, dp = 1, cp = 1, micro_batch = 1, zero = 0;
  // ZeRO-2/3 hybrid sharding: the ranks one copy of the sharded states spans (a node's), the
  // copies replicated over dp / shard_group nodes; 0: sharded over all dp ranks.
  int64_t shard_group = 0;
  int64_t ep = 1;  // expert parallel (MoE): experts split over ep of the dp x cp ranks
  int64_t etp = 1;  // MoE: the experts' tensor parallel size (tp, or 1 under Megatron-LM)
  bool distributed_optimizer = false;
  Recompute recompute = Recompute::kNone;
  int64_t recompute_every = 1;  // with kFull: every Nth layer (torchtitan's layer-wise AC)
  Offload offload = Offload::kNone;
  bool offload_activations = false;  // saved activations in host memory (torchtune's)
  Precision precision = Precision::kBf16;  // what the GPU type runs (see JobSpec::precision)
  int64_t peak_bytes = 0;       // allocated
  int64_t reserved_bytes = 0;   // the caching allocator's peak reservation
  int64_t device_bytes = 0;
  int64_t resident_bytes = 0;   // what must stay on the GPU (device less paged states)
  int64_t host_bytes_per_node = 0;  // offloaded states on one node's host memory
  int64_t gpu_memory_bytes = 0;
  double iteration_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  double total_s = 0;
  std::optional<double> cost;  // USD; absent when the GPU has no price
  bool pareto = false;
};

// "none", "full", ... or "full/2" (every 2nd layer recomputed).
std::string RecomputeText(const Plan& p);
// The plan's bytes of reading r (peak_bytes, reserved_bytes or resident_bytes).
int64_t JudgedBytes(const Plan& p, Reading r);
// The bytes of reading r among a layout's three (the device one less paged states).
int64_t ReadingBytes(Reading r, int64_t allocated, int64_t reserved, int64_t resident);

// Why a job got no plan. In the order the planner tests them:
enum class InfeasibleKind {
  kGoalsUnmet,       // some layouts fit in memory, but none meets the deadline or budget
  kNoLayout,         // the pins allow no layout, or every layout they allow is impossible
  kTooLittleMemory,  // every possible layout needs more memory per GPU than the GPUs have
};
const char* InfeasibleKindName(InfeasibleKind k);  // "goals_unmet", "no_layout", ...

// Why a layout is impossible (a MARP validation error), e.g. field "seq_len" with "the model's
// learned position table holds 1024 positions; ...".
struct LayoutError {
  std::string field;
  std::string message;
};

// One GPU type on which no layout fits: the layout that needs the least device memory per GPU.
struct Shortfall {
  std::string gpu;
  int64_t gpu_memory_bytes = 0;
  int64_t least_bytes = 0;  // that layout's device memory x (1 + margin), truncated: > GPU memory
  Plan least;               // the layout and its memory fields; no speed, time or cost
};

// What would fit: the plan with the fewest GPUs of the cluster's largest-memory type that holds
// the job, found by planning on a hypothetical cluster of that type's nodes multiplied.
struct WouldFit {
  Plan plan;                 // a full plan (speed, time, cost) on the hypothetical cluster
  int64_t cluster_gpus = 0;  // GPUs of plan.gpu this cluster has
};

struct Infeasible {
  InfeasibleKind kind = InfeasibleKind::kNoLayout;
  // kNoLayout: the first impossible layout's error; absent when the pins allow no layout.
  std::optional<LayoutError> error;
  // kTooLittleMemory: one per GPU type on which some layout is possible, in cluster order.
  std::vector<Shortfall> shortfalls;
  // kTooLittleMemory: absent when the GPU count is pinned or nothing up to 4,096 GPUs fits.
  std::optional<WouldFit> would_fit;
  // kTooLittleMemory, when offload was tried (DeepSpeed or FSDP, full training, not pinned
  // off): the cluster's GPU types whose nodes give no host memory, and of the offloaded
  // layouts that fit the GPUs, the least host memory per node one needs (with the host
  // margin) against what its nodes have; 0 when none fit the GPUs either.
  bool offload_tried = false;  // on at least one GPU type (its nodes' host memory known)
  std::vector<std::string> host_memory_unknown;
  int64_t offload_least_host_bytes = 0;
  int64_t offload_host_memory_bytes = 0;
};

// Placed (pareto non-empty, infeasible absent) or Infeasible (plans and pareto empty,
// infeasible set): exactly one. Placed with `top` 0 has an empty `plans`.
struct PlanResult {
  std::vector<Plan> plans;         // ranked, best first, at most `top`
  std::vector<Plan> pareto;        // over (gpus, total_s), fewest GPUs first
  int64_t layouts_considered = 0;  // memory predictions made (both outcomes)
  int64_t layouts_fitting = 0;     // of those, fitting in memory, before deadline and budget
  std::optional<Infeasible> infeasible;
};

// One GPU type of a cluster as the planner sees it: how many GPUs, the largest node (the TP
// limit) and the slowest node's network. In order of first appearance in the cluster; nodes
// whose type is not in the catalog are left out.
struct ClusterGpuType {
  const GpuType* gpu = nullptr;
  int64_t count = 0;
  int64_t gpus_per_node = 0;
  double network_gbs = 0;
  int64_t host_memory_bytes = 0;  // the smallest node's system memory; 0: some node's unknown
};
std::vector<ClusterGpuType> ClusterGpuTypes(const Cluster& cluster, const GpuCatalog& catalog);

// The training spec of the job on one GPU type, micro-batch and recomputation left to the
// layout: an encoder trains its masked-LM head; fp8 falls back to bf16 mixed precision on GPUs
// without FP8 tensor cores (before Hopper and Ada), and bf16 to fp16 on GPUs without bf16
// tensor cores (V100, T4).
TrainingSpec TrainingFor(const JobSpec& job, const GpuType& gpu);

// A plan as JSON (the fields of Plan; `cost` null when unknown).
nlohmann::json PlanToJson(const Plan& p);

Result<PlanResult> PlanJob(const JobSpec& job, const Cluster& cluster, const GpuCatalog& catalog,
                           const PlannerOptions& options);

}  // namespace frenzy

#endif  // FRENZY_PLANNER_PLANNER_H_
