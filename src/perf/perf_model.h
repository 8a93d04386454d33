// The throughput model: how long one training iteration of a layout takes on a GPU type.
//
// PredictPerf is a pure function of (ModelSpec, TrainingSpec, ParallelPlan, GpuType, Network).
// Time of one iteration on the most loaded pipeline stage =
//   compute (matmul FLOPs at the GPU's achievable matmul rate, plus recomputation's extra
//   forward, plus memory-bound elementwise work at the memory bandwidth)
//   + tensor-parallel collectives on the intra-node link (not overlapped, as in Megatron-LM)
//   + the pipeline bubble ((p - 1) / (m v) of the compute) and the exposed point-to-point sends
//   + the data-parallel gradient reduction (or ZeRO-3/FSDP gathers) not hidden behind backward
//   + the optimizer step (memory-bound).
// Every constant names its source; docs/perf-model.md derives the terms.
#ifndef FRENZY_PERF_PERF_MODEL_H_
#define FRENZY_PERF_PERF_MODEL_H_

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "hardware/gpu.h"
#include "memory/training.h"
#include "model/model_spec.h"

namespace frenzy {

// The links a job's GPUs talk over.
struct Network {
  int64_t gpus_per_node = 8;
  double inter_node_gbs = 25;  // per node, GB/s (unidirectional, what one node can send)
};

// The network a job of `gpus` GPUs of type `gpu` gets when no cluster is named: the node a
// cloud or an on-premise cluster of that class is built from. Server GPUs with NVLink or
// Infinity Fabric come 8 to a node with a NIC per GPU (DGX/HGX-class); PCIe cards 8 to a node
// behind a 200 Gb/s Ethernet pair. `why` says which (printed by `frenzy perf`).
Network DefaultNetwork(const GpuType& gpu, int64_t gpus, std::string* why = nullptr);

struct PerfBreakdown {
  double compute_s = 0;      // matmuls and elementwise work of forward + backward
  double recompute_s = 0;    // extra forward of activation recomputation
  double tp_comm_s = 0;      // tensor/sequence-parallel collectives
  double pp_bubble_s = 0;    // pipeline fill and drain
  double pp_p2p_s = 0;       // exposed point-to-point activation sends
  double dp_comm_s = 0;      // exposed gradient reduction / parameter gathers
  double cp_comm_s = 0;      // exposed context-parallel key/value exchange
  double ep_comm_s = 0;      // expert-parallel all-to-alls (token dispatch and combine)
  double optimizer_s = 0;    // optimizer step
  double offload_s = 0;      // exposed host-link traffic and the CPU's optimizer step (offload)
};

struct PerfEstimate {
  double iteration_s = 0;
  double tokens_per_s = 0;          // whole job
  double tokens_per_s_per_gpu = 0;
  double tflops_per_gpu = 0;        // model FLOPs (PaLM's definition, no recomputation)
  double mfu = 0;                   // model FLOPs utilisation against the dense peak
  double model_flops_per_token = 0;
  int64_t gpus = 0;
  PerfBreakdown breakdown;
};

// The fraction of the dense peak a GPU type reaches on large matmuls (data/perf_calibration.json
// names the source of each value), and the fraction of its memory bandwidth that elementwise
// kernels reach.
struct GpuEfficiency {
  double matmul = 0.75;
  double memory = 0.8;
  // Real training reaches matmul x training_scale x h / (h + h0) of the peak (h: hidden size
  // per tensor-parallel rank), fitted on measured training throughput (perf_calibration.json).
  double training_scale = 1.0;
  double h0 = 0;
  // FP8 GEMMs reach this fraction of the FP8 peak where bf16 GEMMs reach `matmul` of theirs
  // (before training_scale and h0); 0: the same fraction as bf16.
  double fp8_matmul = 0;
  bool measured = false;  // false: a default for GPUs without a published measurement
};
GpuEfficiency EfficiencyOf(const GpuType& gpu);

// The dense peak TFLOP/s of `gpu` in precision `p` (TF32 for fp32 where it has TF32 tensor
// cores; the bf16 peak for fp8's non-FP8 parts); 0 when it has none (bf16 on a V100).
double PeakTflops(const GpuType& gpu, Precision p);

// Model FLOPs per token of training (forward + backward, no recomputation): 6 x matmul
// parameters used per token plus 12 x layers x q-width x sequence for attention (PaLM,
// Chowdhery et al. 2022, Appendix B).
double ModelFlopsPerToken(const ModelSpec& m, int64_t seq_len);

// REQUIRES: model.Validate().ok(). Impossible layouts return ValidateLayout's error; a GPU
// without the requested precision (bf16 on V100) returns InvalidArgument.
// `efficiency` overrides the calibration (e.g. uncalibrated MAMF-only predictions for fitting).
// `pace_stage` >= 0 gives the iteration at that stage's pace (its layers, the output layer only
// on the last) rather than the most loaded stage's.
Result<PerfEstimate> PredictPerf(const ModelSpec& model, const TrainingSpec& train,
                                 const ParallelPlan& plan, const GpuType& gpu, const Network& net,
                                 const GpuEfficiency* efficiency = nullptr,
                                 int64_t pace_stage = -1);

// Bytes of one gradient element in the data-parallel reduction: Megatron reduces bf16 and fp8
// runs' gradients in fp32 (its main grads), fp32 runs reduce fp32, the others 16 bits.
double GradReduceBytes(const TrainingSpec& t);

}  // namespace frenzy

#endif  // FRENZY_PERF_PERF_MODEL_H_
