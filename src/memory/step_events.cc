#include "memory/step_events.h"

#include <algorithm>

#include "memory/caching_allocator.h"

namespace frenzy {

int64_t StepEvents::Alloc(int64_t bytes) {
  if (bytes <= 0) return -1;
  ev_.push_back({bytes, -1});
  return static_cast<int64_t>(ev_.size()) - 1;
}

void StepEvents::Free(int64_t index) {
  if (index >= 0 && static_cast<size_t>(index) < ev_.size() &&
      ev_[static_cast<size_t>(index)].bytes > 0) {
    ev_.push_back({0, index});
  }
}

namespace {

// transformers' sliced chain (training.h, HfLoss): LlamaForCausalLM.forward and its loss, then
// the autograd nodes of the loss's backward in the order the engine runs them.
void AppendSlicedChain(const OutputActivations& o, bool logits_freed, StepEvents& ev) {
  const int64_t full = o.logits_elems, shifted = o.shifted_elems;
  const int64_t lb = o.loss_bytes;
  const bool copy = o.loss_bytes != o.logit_bytes;  // logits.float() copies
  const bool model_casts = o.chain == HfLoss::kModelUpcastSliced;
  // The output layer's 16-bit logits; before 4.46 the model casts them and returns the copy,
  // the 16-bit ones dying with forward's locals (ToCopyBackward saves nothing).
  int64_t logits = ev.Alloc(full * o.logit_bytes);
  int64_t upcast = -1;
  if (copy) {
    upcast = ev.Alloc(full * lb);
    if (model_casts) {
      ev.Free(logits);
      logits = upcast;
      upcast = -1;
    }
  }
  const int64_t slice = ev.Alloc(shifted * lb);  // logits[..., :-1, :].contiguous()
  const int64_t logp = ev.Alloc(shifted * lb);   // log_softmax's output, saved for backward
  ev.Free(slice);
  ev.Free(upcast);  // the loss's own copy (4.46-4.48) dies as the loss returns
  if (logits_freed) {
    ev.Free(logits);
    logits = -1;
  }
  const int64_t g_nll = ev.Alloc(shifted * lb);    // nll_loss's backward
  const int64_t g_logp = ev.Alloc(shifted * lb);   // log_softmax's backward
  ev.Free(g_nll);
  ev.Free(logp);
  const int64_t g_full = ev.Alloc(full * lb);      // the slice's backward: zeros, logits' size
  ev.Free(g_logp);
  if (copy) {
    const int64_t g_half = ev.Alloc(full * o.logit_bytes);  // the cast's backward
    ev.Free(g_full);
    ev.Free(g_half);  // after the output layer's backward
  } else {
    ev.Free(g_full);
  }
  ev.Free(logits);
}

}  // namespace

void AppendOutputEvents(const OutputActivations& o, bool logits_freed, StepEvents& ev) {
  const int64_t head = ev.Alloc(o.saved);
  if (o.chain != HfLoss::kPadded && o.logits_elems > 0) {
    AppendSlicedChain(o, logits_freed, ev);
    ev.Free(head);
    return;
  }
  const int64_t loss = ev.Alloc(o.loss_saved);
  int64_t logits = ev.Alloc(o.logits_held);
  ev.Free(ev.Alloc(o.loss_forward_transient));
  if (logits_freed) {
    ev.Free(logits);
    logits = -1;
  }
  const int64_t g1 = ev.Alloc(o.loss_backward_transient / 2);
  const int64_t g2 = ev.Alloc(o.loss_backward_transient - o.loss_backward_transient / 2);
  for (int64_t i : {g1, g2, loss, head, logits}) ev.Free(i);
}

StepReplay ReplaySteps(const std::vector<StepEvent>& events, int steps, int64_t limit) {
  StepReplay r;
  CachingAllocatorModel a;
  a.set_limit(limit);
  std::vector<int64_t> handles;
  for (int step = 0; step < steps; ++step) ReplayStep(events, a, handles, &r.peak_allocated);
  r.reserved = a.peak_reserved();
  r.out_of_memory = a.out_of_memory();
  return r;
}

}  // namespace frenzy
