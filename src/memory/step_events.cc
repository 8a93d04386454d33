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
  // An adapted output layer: its sum's tensors before the loss, its scaled gradient after.
  ev.Free(ev.Alloc(o.head_forward_transient));
  if (o.chain != HfLoss::kPadded && o.logits_elems > 0) {
    AppendSlicedChain(o, logits_freed, ev);
    ev.Free(ev.Alloc(o.head_backward_transient));
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
  for (int64_t i : {g1, g2, loss}) ev.Free(i);
  ev.Free(ev.Alloc(o.head_backward_transient));
  for (int64_t i : {head, logits}) ev.Free(i);
}

namespace {

// Bytes as tensors of `piece` bytes (the residual stream's where 0), the last one the
// remainder: the account sums a layer's tensors, the allocator sees them one by one. At most
// kMaxLayerPieces pieces (larger ones beyond that), which bounds the replay's cost.
constexpr int64_t kMaxLayerPieces = 64;
std::vector<int64_t> AsTensors(int64_t bytes, int64_t piece) {
  std::vector<int64_t> out;
  if (bytes <= 0) return out;
  piece = std::max({int64_t{1}, piece, (bytes + kMaxLayerPieces - 1) / kMaxLayerPieces});
  for (; bytes > piece; bytes -= piece) out.push_back(piece);
  out.push_back(bytes);
  return out;
}

constexpr size_t kForwardAlive = 2;

void AllocAll(const std::vector<int64_t>& sizes, StepEvents& ev, std::vector<int64_t>& into) {
  for (int64_t bytes : sizes) into.push_back(ev.Alloc(bytes));
}

void FreeAll(std::vector<int64_t>& handles, StepEvents& ev) {
  for (int64_t h : handles) ev.Free(h);
  handles.clear();
}

// A backward step's bytes as tensors of its own size.
std::vector<int64_t> StepTensors(const BackwardStep& st, int64_t bytes, int64_t stream) {
  return AsTensors(bytes, st.piece > 0 ? st.piece : stream);
}

// One layer's tensors by backward step, allocated in forward order (the last backward step's
// first), each step's `frees` as tensors of its own size; what the steps do not account (a
// recomputed layer's output) as stream-sized ones into `rest`.
void AllocLayer(const LayerActivations& a, int64_t total, int64_t stream, StepEvents& ev,
                BackwardGrads& by_step, std::vector<int64_t>& rest) {
  int64_t accounted = 0;
  for (size_t k = a.backward.size(); k-- > 0;) {
    const BackwardStep& st = a.backward[k];
    AllocAll(StepTensors(st, st.frees, stream), ev, by_step[k]);
    accounted += st.frees;
  }
  AllocAll(AsTensors(total - accounted, stream), ev, rest);
}

// A checkpointed layer's forward: what its recomputation will bring back comes and goes, each
// tensor freed once the next op has used it (no graph holds them: two alive at a time), around
// the output it passes on, which the next checkpoint keeps; that output lands beyond them and
// splits the blocks they free.
void CheckpointedForward(const LayerActivations& a, int64_t stream, StepEvents& ev,
                         std::vector<int64_t>& kept) {
  std::vector<int64_t> sizes;
  for (size_t k = a.backward.size(); k-- > 0;) {
    const BackwardStep& st = a.backward[k];
    for (int64_t bytes : StepTensors(st, st.frees, stream)) sizes.push_back(bytes);
  }
  std::vector<int64_t> forward;
  for (int64_t bytes : sizes) {
    forward.push_back(ev.Alloc(bytes));
    if (forward.size() > kForwardAlive) ev.Free(forward[forward.size() - kForwardAlive - 1]);
  }
  AllocAll(AsTensors(a.saved, stream), ev, kept);
  for (size_t i = forward.size() > kForwardAlive ? forward.size() - kForwardAlive : 0;
       i < forward.size(); ++i) {
    ev.Free(forward[i]);
  }
}

}  // namespace

std::vector<StepEvent> BuildStepEvents(const StepShape& shape) {
  StepEvents ev;
  const int64_t stream = shape.stream;
  std::vector<BackwardGrads> saved(shape.layers.size());
  std::vector<std::vector<int64_t>> kept(shape.layers.size());
  std::vector<int64_t> grads;
  for (size_t j = 0; j < shape.layers.size(); ++j) {
    const LayerActivations& a = *shape.layers[j].act;
    if (a.recomputed > 0) {
      CheckpointedForward(a, stream, ev, kept[j]);
    } else {
      AllocLayer(a, a.saved, stream, ev, saved[j], kept[j]);
    }
  }
  if (shape.output != nullptr) AppendOutputEvents(*shape.output, shape.logits_freed, ev);
  AllocAll(shape.head_grads, ev, grads);
  for (size_t j = shape.layers.size(); j-- > 0;) {
    const StepLayer& layer = shape.layers[j];
    const LayerActivations& a = *layer.act;
    // Recomputation brings the layer's tensors back, by step, and its output.
    std::vector<int64_t> output;
    if (a.recomputed > 0) AllocLayer(a, a.recomputed, stream, ev, saved[j], output);
    // Each backward step's gradient buffers, its parameters' gradients, then the tensors it
    // was keeping.
    std::vector<int64_t> transient;
    for (size_t k = 0; k < a.backward.size(); ++k) {
      const BackwardStep& st = a.backward[k];
      AllocAll(StepTensors(st, st.transient, stream), ev, transient);
      AllocAll(layer.grads[k], ev, grads);
      FreeAll(transient, ev);
      FreeAll(saved[j][k], ev);
    }
    FreeAll(output, ev);
    for (auto it = kept[j].rbegin(); it != kept[j].rend(); ++it) ev.Free(*it);
  }
  AllocAll(shape.first_grads, ev, grads);
  if (shape.optimizer_one_at_a_time) {
    for (int64_t bytes : shape.optimizer_temp) {
      const int64_t root = ev.Alloc(bytes);
      const int64_t scaled = ev.Alloc(bytes);
      ev.Free(root);
      ev.Free(scaled);
    }
  } else {
    std::vector<int64_t> temp;
    AllocAll(shape.optimizer_temp, ev, temp);
    FreeAll(temp, ev);
  }
  FreeAll(grads, ev);
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
                     AdamTemps adam) {
  if (head_bytes > 0) shape.head_grads.push_back(head_bytes);
  if (first_bytes > 0) shape.first_grads.push_back(first_bytes);
  if (adam == AdamTemps::kNone) return;
  shape.optimizer_one_at_a_time = adam == AdamTemps::kOneAtATime;
  auto& temp = shape.optimizer_temp;
  temp.insert(temp.end(), shape.first_grads.begin(), shape.first_grads.end());
  for (const StepLayer& layer : shape.layers) {
    for (const auto& step : layer.grads) temp.insert(temp.end(), step.begin(), step.end());
  }
  temp.insert(temp.end(), shape.head_grads.begin(), shape.head_grads.end());
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
