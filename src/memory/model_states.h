// The model states of one rank: weights, gradients, optimizer states and what the frameworks
// keep beside them (buckets, gathered layers, autocast caches, offloaded shares), per
// framework, precision, optimizer and sharding. Internal to MARP (memory_model.cc).
#ifndef FRENZY_MEMORY_MODEL_STATES_H_
#define FRENZY_MEMORY_MODEL_STATES_H_

#include <cstdint>

#include "memory/training.h"

namespace frenzy::memory_detail {

// Parameters held by one rank of one stage.
struct StageParams {
  int64_t total = 0;            // parameters on this rank
  int64_t matmul = 0;           // of which in matrices multiplied in forward (autocast casts them)
  int64_t largest_tensor = 0;   // elements of the largest single tensor (optimizer temporaries)
  int64_t adafactor_state = 0;  // Adafactor's factored second moment (elements)
  int64_t per_layer_max = 0;    // largest layer (ZeRO-3/FSDP gather unit)
  int64_t head = 0;             // output layer + final norm (their grads appear first)
  int64_t head_matmul = 0;      // of `matmul`, the output layer's matrix
  int64_t adapters = 0;         // fine-tuning: trainable adapter parameters (in `total`)
  int64_t quantized = 0;        // ... base weights stored in 4 bits (in `total`)
  int64_t experts = 0;          // routed experts' parameters (in `total`)
  int64_t outside_layers = 0;   // embeddings, final norm and output layer on this rank
};

struct States {
  int64_t weights = 0;
  int64_t grads = 0;           // gradients alive at the end of backward
  bool grads_persist = false;  // kept across steps (flat buffers) vs freed by zero_grad
  int64_t optimizer = 0;       // optimizer states (with fp32 master weights where kept)
  int64_t optimizer_temp = 0;  // transient of the optimizer step
  int64_t buckets = 0;         // communication buffers
  // The buffers are alive at the optimizer step (DDP's gradient buckets); DeepSpeed's ZeRO-1/2
  // reduce buckets are released when backward ends (_release_ipg_buffers).
  bool buckets_at_step = true;
  int64_t gather = 0;          // ZeRO-3/FSDP unsharded parameters while computing
  int64_t gather_grad = 0;     // ... and the unsharded gradient before reduce-scatter
  int64_t unsharded_grads = 0;  // fine-tuning: every gradient before sharding (FSDP's no_sync)
  // FSDP's root unit (what no wrapped layer holds: embeddings, final norm, output layer) stays
  // gathered from the start of forward to the end of backward (in `gather`), and its unsharded
  // gradient, which the output layer's backward starts, waits for the root's reduce-scatter at
  // the end of backward.
  int64_t root_gather = 0;  // of `gather`, the root unit's
  int64_t root_grad = 0;
  int64_t autocast_cache = 0;  // 16-bit copies of fp32 weights under torch.autocast
  int64_t host = 0;            // offloaded states in host memory (this rank's share)
  int64_t pageable = 0;        // of `optimizer`, what a paged optimizer lets the driver evict
};

// What every framework's account of the model states starts from.
struct StateInputs {
  double n = 0;             // parameters on the rank
  int64_t z = 1;            // ranks sharding the states
  // What sharded states divide by: z, or less under expert parallelism, whose experts are
  // sharded over the expert-data-parallel ranks only (z x tp / (etp x ep)): n / (dense / z +
  // experts / expert-DP).
  double z_eff = 1;
  int64_t compute = 2;      // bytes of the working weights (16-bit, or fp32)
  bool pure = false;        // pure bf16: no master copy, bf16 states
  bool mixed = false;       // 16-bit compute over fp32 master weights
  int64_t state_bytes = 4;  // bytes of one optimizer-state element
  double opt_bytes = 0;     // optimizer states, without master weights
};

// Bytes per parameter of optimizer state (excluding master weights), by precision of states.
double OptimizerStateBytes(OptimizerKind o, int64_t state_bytes);

int64_t CeilBytes(double v);

StateInputs MakeStateInputs(const TrainingSpec& t, const ParallelPlan& p, const StageParams& sp);

// The states of a rank of a stage holding `sp`.
States ModelStates(const TrainingSpec& t, const ParallelPlan& p, const StageParams& sp);

}  // namespace frenzy::memory_detail

#endif  // FRENZY_MEMORY_MODEL_STATES_H_
