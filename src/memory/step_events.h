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

#include <cstdint>
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
