// A training step's allocations one by one, for the replays through the caching allocator model
// (memory/caching_allocator.h): the output layer's and the loss's tensors in the order a step
// allocates and frees them, and the replay of a fixed-length step.
//
// The replay matters where a step asks for blocks its own cached ones cannot serve. HF's sliced
// loss chains (training.h, HfLoss) are the case modelled: the log-softmax and its gradients are
// one position shorter than the logits, so none of their cached blocks can hold the slice's
// full-size gradient, and the layers' recomputed tensors that come next split what they leave.
#ifndef FRENZY_MEMORY_STEP_EVENTS_H_
#define FRENZY_MEMORY_STEP_EVENTS_H_

#include <array>
#include <cstdint>
#include <tuple>
#include <vector>

#include "memory/activations.h"
#include "memory/variable_lengths.h"

namespace frenzy {

// Builds a StepEvent list: Alloc returns the event's index (-1 for no bytes), Free frees it.
class StepEvents {
 public:
  int64_t Alloc(int64_t bytes);
  void Free(int64_t index);
  std::vector<StepEvent>& events() { return ev_; }

 private:
  std::vector<StepEvent> ev_;
};

// The last stage's output tensors: the final norm's and head's saved inputs, the logits and the
// loss chain through forward and the loss's backward, all freed before the layers' backward.
// `logits_freed` when the loop drops the logits before backward (TrainingSpec::
// logits_freed_before_backward). The sliced chains tensor by tensor; the others (the padded
// chain, Megatron's fused loss) as the account's sums: the kept logits, the saved log-softmax,
// a forward transient, and the backward's gradients in two halves.
void AppendOutputEvents(const OutputActivations& o, bool logits_freed, StepEvents& ev);

// One micro-batch's step as the replays see it: the layers' accounts in forward order, each
// with the parameter gradients its backward steps create (bytes per tensor; none where
// gradients persist between steps or live in flat buffers), the output layer's, the first
// stage's, and the optimizer step's temporaries (one per tensor), after which every gradient
// is freed (zero_grad(set_to_none=True)).
// Per backward step of a layer: tensors' bytes (or event handles).
using BackwardGrads =
    std::array<std::vector<int64_t>, std::tuple_size_v<decltype(LayerActivations::backward)>>;
struct StepLayer {
  const LayerActivations* act = nullptr;
  BackwardGrads grads;  // by backward step
};
struct StepShape {
  int64_t stream = 0;  // bytes of a residual-stream tensor (tokens x hidden)
  std::vector<StepLayer> layers;
  const OutputActivations* output = nullptr;  // the last stage's
  bool logits_freed = false;
  std::vector<int64_t> head_grads, first_grads, optimizer_temp;
  // Single-tensor Adam: two temporaries a parameter, one parameter at a time (else foreach:
  // one a parameter, all at once).
  bool optimizer_one_at_a_time = false;
};

// A layer's parameters by the backward step that makes their gradients (BackwardStep::Params).
struct LayerParamSplit {
  int64_t mlp = 0, attn_qkv = 0, attn_out = 0, norm = 0;
  int mlp_matrices = 2;  // 3 for gated MLPs
  double q_share = 1;    // q's share of q/k/v: heads / (heads + 2 kv_heads)
};
// Each backward step's gradient tensors at `bytes_per_param`: the MLP's two or three matrices,
// q, k and v, the output projection, a norm. None for 0 bytes a parameter.
BackwardGrads LayerStepGrads(const LayerActivations& a, const LayerParamSplit& p,
                             double bytes_per_param);
// The gradients outside the layers (the output layer's and final norm's first, the
// embeddings' after the layers), and Adam's temporaries, in the parameters' order (the
// embeddings, the layers, the head), in the gradients' dtype where the states keep it: foreach
// Adam's one a parameter (_foreach_sqrt(exp_avg_sq)), or single-tensor Adam's two
// (exp_avg_sq.sqrt() / bias_correction2_sqrt) one parameter at a time.
enum class AdamTemps { kNone, kForeach, kOneAtATime };
void AddOutsideGrads(StepShape& shape, int64_t head_bytes, int64_t first_bytes,
                     AdamTemps adam);

// The step's allocations and frees in order: forward keeps each layer's saved tensors, by
// backward step at that step's tensor size (BackwardStep::piece; a checkpointed layer's
// intermediates come and go around its kept input), then the output layer's and the loss's
// (AppendOutputEvents), freed by the loss's backward, the output layer's gradients; then layer
// by layer, last first, what recomputation brings back, each backward step's transient and
// gradients, the saved tensors that step kept; then the first stage's gradients, the
// optimizer's temporaries, and the gradients go.
std::vector<StepEvent> BuildStepEvents(const StepShape& shape);

// `steps` replays of one step's events through one allocator: the most it reserved and had
// allocated at once. With a `limit` (bytes the replay's segments may take; 0: none) the
// allocator releases its free segments and retries there (memory/caching_allocator.h), and
// `out_of_memory` says whether a request still could not be served.
struct StepReplay {
  int64_t reserved = 0;
  int64_t peak_allocated = 0;
  bool out_of_memory = false;
};
StepReplay ReplaySteps(const std::vector<StepEvent>& events, int steps, int64_t limit = 0);

}  // namespace frenzy

#endif  // FRENZY_MEMORY_STEP_EVENTS_H_
