// What FSDP1's initialisation leaves in the caching allocator when it wraps a model held in host
// memory (the FullyShardedDataParallel of PyTorch 2.x, `_init_param_handle_from_module`).
//
// FSDP1 builds its units innermost first (each adapter Linear under fine-tuning wrap policies
// such as PEFT's and Answer.AI's fsdp_qlora's, then each transformer layer, then the root: the
// embeddings, final norm and output layer), and for each unit:
//  1. moves the unit's own tensors to the GPU one by one (`_move_module_to_device`);
//  2. with `sync_module_states` (Accelerate's fsdp_cpu_ram_efficient_loading, fsdp_qlora's
//     low_memory: rank 0 holds the weights, the other ranks empty tensors) broadcasts them from
//     rank 0 in 250 MiB buckets (`dist._broadcast_coalesced`: a bucket closes once it reaches the
//     size, a bucket of several tensors is flattened into a copy, at most two are in flight);
//  3. flattens them into one FlatParameter (a copy of the whole unit), clones this rank's shard,
//     then frees the unsharded flat parameter and, as the function returns, the moved tensors
//     (with CPUOffload(offload_params=True) the shard goes back to host memory).
// The allocator keeps every freed block, and each shard is allocated while its unit's copies
// are alive, so after wrapping the cache holds the shards and the blocks the transients left,
// split around the shards. Under FSDP2 (torchtitan) the model is built on the meta device and
// materialised sharded, with no such transients: not modelled here.
#ifndef FRENZY_MEMORY_FSDP_INIT_H_
#define FRENZY_MEMORY_FSDP_INIT_H_

#include <cstdint>
#include <vector>

#include "memory/training.h"
#include "model/model_spec.h"

namespace frenzy {

struct FsdpInitUnit {
  std::vector<int64_t> params;  // bytes of the unit's own parameters, in the module's order
  // Bytes of other state moved with the module and kept where it is (bitsandbytes' NF4
  // statistics: not parameters, so neither flattened nor sharded).
  std::vector<int64_t> kept;
};

// The units of `m` under `t` in the order FSDP1 initialises them: per layer, one unit per
// adapter matrix (LoRA/QLoRA: A and B of every adapted linear), then the layer (its linear
// weights, then its norms and biases as one tensor); last the root (the output layer, the
// embeddings, the final norm). Parameters in their stored dtype: 16-bit or fp32 (full training:
// fp32 unless pure 16-bit), NF4 packed into 16-bit storage under QLoRA (half a byte a weight,
// with its statistics kept), adapters at `lora.adapter_bytes`.
std::vector<FsdpInitUnit> FsdpInitUnits(const ModelSpec& m, const TrainingSpec& t,
                                        const ParallelPlan& p);

struct FsdpInitReplay {
  int64_t live = 0;         // allocated after wrapping (this rank's shards, kept state)
  int64_t reserved = 0;     // what torch.cuda.memory_reserved reads after wrapping
  int64_t cached_free = 0;  // of `reserved`, free blocks the compute stream may reuse
};

// Replays the initialisation of `units` on one rank of `shards` through the allocator model.
FsdpInitReplay ReplayFsdpInit(const std::vector<FsdpInitUnit>& units, int64_t shards,
                              bool broadcast, bool offload_params);

// The replay of `m` under `t` on one rank of `p` (t.fsdp_init: kHost or kHostSync), kept for
// the next caller: the planner asks for the same model under many layouts.
FsdpInitReplay FsdpInitOf(const ModelSpec& m, const TrainingSpec& t, const ParallelPlan& p);

}  // namespace frenzy

#endif  // FRENZY_MEMORY_FSDP_INIT_H_
