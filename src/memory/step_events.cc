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

namespace {

// A layer's bytes as tensors of the residual stream's size (tokens x hidden), the last one the
// remainder: the account sums a layer's tensors, the allocator sees them one by one. At most
// kMaxLayerPieces pieces (larger ones beyond that, e.g. eager attention's scores at long
// sequences), which bounds the replay's cost.
constexpr int64_t kMaxLayerPieces = 64;
std::vector<int64_t> AsStreamTensors(int64_t bytes, int64_t stream) {
  std::vector<int64_t> out;
  if (bytes <= 0) return out;
  stream = std::max({int64_t{1}, stream, (bytes + kMaxLayerPieces - 1) / kMaxLayerPieces});
  for (; bytes > stream; bytes -= stream) out.push_back(stream);
  out.push_back(bytes);
  return out;
}

constexpr size_t kForwardAlive = 2;

void AllocAll(const std::vector<int64_t>& sizes, StepEvents& ev, std::vector<int64_t>& into) {
  for (int64_t bytes : sizes) into.push_back(ev.Alloc(bytes));
}

}  // namespace

std::vector<StepEvent> BuildStepEvents(const StepShape& shape) {
  StepEvents ev;
  std::vector<std::vector<int64_t>> kept;
  std::vector<int64_t> forward, grads;
  for (const StepLayer& layer : shape.layers) {
    // A checkpointed layer runs its forward without saving: its intermediates (what its
    // recomputation brings back) come and go, each freed once the next op has used it (no
    // graph holds them: two alive at a time), around the output it passes on, which the next
    // checkpoint keeps; that output lands beyond them and splits the blocks they free.
    forward.clear();
    for (int64_t bytes : AsStreamTensors(layer.act->recomputed, shape.stream)) {
      forward.push_back(ev.Alloc(bytes));
      if (forward.size() > kForwardAlive) ev.Free(forward[forward.size() - kForwardAlive - 1]);
    }
    kept.emplace_back();
    AllocAll(AsStreamTensors(layer.act->saved, shape.stream), ev, kept.back());
    for (size_t i = forward.size() > kForwardAlive ? forward.size() - kForwardAlive : 0;
         i < forward.size(); ++i) {
      ev.Free(forward[i]);
    }
  }
  if (shape.output != nullptr) AppendOutputEvents(*shape.output, shape.logits_freed, ev);
  AllocAll(shape.head_grads, ev, grads);
  for (size_t j = kept.size(); j-- > 0;) {
    const StepLayer& layer = shape.layers[j];
    std::vector<int64_t> back, transient;
    AllocAll(AsStreamTensors(layer.act->recomputed, shape.stream), ev, back);
    // Each backward step's gradient buffers, its parameters' gradients, then what it frees of
    // the layer's saved (or recomputed) tensors, in the order they were kept.
    std::vector<int64_t>& held = back.empty() ? kept[j] : back;
    size_t next = 0;
    for (size_t k = 0; k < layer.act->backward.size(); ++k) {
      const BackwardStep& step = layer.act->backward[k];
      transient.clear();
      AllocAll(AsStreamTensors(step.transient, shape.stream), ev, transient);
      AllocAll(layer.grads[k], ev, grads);
      for (int64_t h : transient) ev.Free(h);
      for (int64_t freed = 0; freed < step.frees && next < held.size(); ++next) {
        freed += ev.events()[static_cast<size_t>(held[next])].bytes;
        ev.Free(held[next]);
        held[next] = -1;
      }
    }
    for (int64_t h : back) ev.Free(h);  // -1 where already freed: ignored
    for (auto it = kept[j].rbegin(); it != kept[j].rend(); ++it) ev.Free(*it);
  }
  AllocAll(shape.first_grads, ev, grads);
  std::vector<int64_t> temp;
  AllocAll(shape.optimizer_temp, ev, temp);
  for (int64_t h : temp) ev.Free(h);
  for (int64_t h : grads) ev.Free(h);
  return std::move(ev.events());
}

BackwardGrads LayerStepGrads(const LayerActivations& a, const LayerParamSplit& p,
                             double bytes_per_param) {
  BackwardGrads out;
  if (bytes_per_param <= 0) return out;
  auto bytes = [&](double params) { return static_cast<int64_t>(params * bytes_per_param); };
  const double qkv = static_cast<double>(p.attn_qkv);
  for (size_t k = 0; k < a.backward.size(); ++k) {
    switch (a.backward[k].params) {
      case BackwardStep::Params::kMlp:
        for (int i = 0; i < p.mlp_matrices; ++i) {
          out[k].push_back(bytes(static_cast<double>(p.mlp) / p.mlp_matrices));
        }
        break;
      case BackwardStep::Params::kAttnQkv:
        out[k].push_back(bytes(qkv * p.q_share));
        out[k].push_back(bytes(qkv * (1 - p.q_share) / 2));
        out[k].push_back(bytes(qkv * (1 - p.q_share) / 2));
        break;
      case BackwardStep::Params::kAttnOut:
        out[k].push_back(bytes(static_cast<double>(p.attn_out)));
        break;
      case BackwardStep::Params::kNorm:
        out[k].push_back(bytes(static_cast<double>(p.norm)));
        break;
      case BackwardStep::Params::kNone:
        break;
    }
  }
  return out;
}

void AddOutsideGrads(StepShape& shape, int64_t head_bytes, int64_t first_bytes,
                     bool foreach_adam) {
  if (head_bytes > 0) shape.head_grads.push_back(head_bytes);
  if (first_bytes > 0) shape.first_grads.push_back(first_bytes);
  if (!foreach_adam) return;
  for (const StepLayer& layer : shape.layers) {
    for (const auto& step : layer.grads) {
      shape.optimizer_temp.insert(shape.optimizer_temp.end(), step.begin(), step.end());
    }
  }
  for (const auto* v : {&shape.head_grads, &shape.first_grads}) {
    shape.optimizer_temp.insert(shape.optimizer_temp.end(), v->begin(), v->end());
  }
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
