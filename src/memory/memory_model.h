// MARP, the memory-aware resource predictor: per-GPU peak memory of one training layout.
//
// PredictMemory is a pure function of (ModelSpec, TrainingSpec, ParallelPlan). For every
// pipeline stage it takes the most loaded rank and walks the phases of one training step —
// forward, loss, backward layer by layer, optimizer step — adding what is alive in each: model
// states (weights, gradients, optimizer states, sharded as the framework shards them), the
// activations saved for backward by every in-flight micro-batch (an op-level account of each
// block's saved tensors, see activations.h), logits and loss buffers, and the transient
// buffers of each phase. The peak over phases is `peak_bytes` (what
// torch.cuda.max_memory_allocated shows); the caching allocator's rounding and fragmentation
// give `peak_reserved_bytes`; the CUDA context and communication buffers give `device_bytes`
// (what nvidia-smi shows). docs/memory-model.md derives every term and names its source.
#ifndef FRENZY_MEMORY_MEMORY_MODEL_H_
#define FRENZY_MEMORY_MEMORY_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "memory/training.h"
#include "model/model_spec.h"

namespace frenzy {

// Bytes by kind, at the moment of the peak.
struct MemoryBreakdown {
  int64_t weights = 0;
  int64_t gradients = 0;
  int64_t optimizer = 0;
  int64_t activations = 0;
  int64_t logits = 0;     // output logits and loss buffers
  int64_t temporary = 0;  // transients of the peak phase: backward grads, buckets, gathers
  int64_t overhead = 0;   // library workspaces allocated through the caching allocator

  int64_t total() const {
    return weights + gradients + optimizer + activations + logits + temporary + overhead;
  }
};

struct StageEstimate {
  int64_t stage = 0;
  int64_t first_layer = 0;
  int64_t num_layers = 0;
  int64_t params = 0;                // parameters held by this rank
  int64_t microbatches_in_flight = 0;
  // forward; loss (last stage: the start of backward, while the loss's own backward holds its
  // vocabulary-sized gradients); backward (the layers'); optimizer.
  const char* peak_phase = "";
  MemoryBreakdown breakdown;         // at the peak
  int64_t activations_per_microbatch = 0;
  int64_t peak_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  // FSDP1 initialised from host memory (TrainingSpec::fsdp_init): reserved after wrapping, and
  // of it the free blocks the step may reuse; 0 when not accounted.
  int64_t init_reserved_bytes = 0;
  int64_t init_free_bytes = 0;
  // A fixed-length step replayed through the allocator model where its loss chain is sliced
  // (TrainingSpec::hf_loss): what it reserves above the most it holds; 0 when not replayed.
  int64_t step_excess_bytes = 0;
  int64_t device_bytes = 0;
  // Batches of varying length (TrainingSpec::lengths, memory/variable_lengths.h): an epoch's
  // reserve above the fixed-length reading, median and range over the data orders, and the
  // epoch's micro-batches; 0 when not accounted. A reading, not a fit: peak_reserved_bytes and
  // device_bytes stay the fixed-length ones.
  int64_t length_reserve_bytes = 0, length_reserve_low = 0, length_reserve_high = 0;
  int64_t length_batches = 0;
  int64_t length_replayed = 0;  // of the batches, the first ones replayed (a budget bounds it)
  int length_orders = 0;
  int64_t host_bytes = 0;  // offloaded model states in host memory, this rank's share
  int64_t pageable_bytes = 0;  // paged optimizer states (in device_bytes while resident)
};

struct MemoryEstimate {
  std::vector<StageEstimate> stages;
  int64_t worst_stage = 0;  // index of the stage with the largest device_bytes
  int64_t params = 0;       // whole model
  int64_t peak_bytes = 0;   // max over stages
  int64_t peak_reserved_bytes = 0;
  int64_t device_bytes = 0;
  // With batches of varying length: max over stages of the reserved and device readings an
  // epoch reaches (the median data order's); 0 when not accounted.
  int64_t length_reserved_bytes = 0;
  int64_t length_device_bytes = 0;
  int64_t host_bytes = 0;  // max over stages: host memory one GPU's rank needs (offload)
  // What must stay on the GPU: device bytes less paged optimizer states, which the driver
  // pages to host memory when the GPU runs short (max over stages). What `fits` is judged on.
  int64_t resident_bytes = 0;
};

// Which pipeline stages to account. kWorst computes only the stages that can hold the peak —
// the first, the second (every later middle stage holds no more layers, parameters or
// in-flight micro-batches) and the last — and gives the same peak, reserved and device bytes
// as kAll at a fraction of the cost (the planner's sweeps use it).
enum class StageDetail { kAll, kWorst };

// An epoch of varying lengths on a GPU of `gpu_memory_bytes`: when a request finds no cached
// block and the driver has no memory left, the caching allocator frees its cached blocks and
// retries (CUDACachingAllocator's release_cached_blocks), so the readings stop at the GPU's
// memory. Caps est.length_device_bytes there and the reserved reading by as much.
void CapLengthReadings(MemoryEstimate& est, int64_t gpu_memory_bytes);

// REQUIRES: model.Validate().ok(). Returns the ValidateLayout error for impossible layouts.
Result<MemoryEstimate> PredictMemory(const ModelSpec& model, const TrainingSpec& train,
                                     const ParallelPlan& plan,
                                     StageDetail detail = StageDetail::kAll);

// What a checkpoint of the whole model holds, however it is laid out: the working weights in the
// training precision, the fp32 master copy of mixed precision, and the optimizer's states, with
// the same per-parameter accounting as the model states above (AdamW in bf16 mixed precision:
// 2 + 4 + 8 = 14 bytes per parameter). Adafactor's small factored states are left out.
int64_t CheckpointBytes(const ModelSpec& model, const TrainingSpec& train);

}  // namespace frenzy

#endif  // FRENZY_MEMORY_MEMORY_MODEL_H_
