// The op-level account of activation memory: the tensors each block saves for backward, and
// the transient gradients its backward pass allocates, per micro-batch on one rank.
//
// Two implementations are modelled because they save different tensors:
//  * Eager (HuggingFace modules, as run by the HF Trainer, FSDP and DeepSpeed): every PyTorch
//    op saves what its derivative formula needs (tools/derivatives.yaml in PyTorch), e.g.
//    `mean` saves its input, `softmax` its output, a `Linear` its input, `x * w` both operands
//    when both need gradients, dropout its mask. Views share storage and are counted once.
//  * Megatron-LM's fused kernels, following Korthikanti et al., "Reducing Activation
//    Recomputation in Large Transformer Models" (MLSys 2023), §4.1: per layer
//    sbh(34 + 5as/h) bytes for GPT with 16-bit activations, split by TP and SP as in §4.2.
// Pure functions; the equations are derived in docs/memory-model.md.
#ifndef FRENZY_MEMORY_ACTIVATIONS_H_
#define FRENZY_MEMORY_ACTIVATIONS_H_

#include <array>
#include <cstdint>

#include "memory/training.h"
#include "model/model_spec.h"

namespace frenzy {

// One step of a layer's backward pass, in the order backward runs them (MLP first).
struct BackwardStep {
  // Parameter gradients the step produces: the MLP's, the attention output projection's, the
  // q/k/v projections', one norm's, or none (the attention core).
  enum class Params { kNone, kMlp, kAttnOut, kAttnQkv, kNorm };
  int64_t transient = 0;  // gradient buffers alive at this step's peak
  int64_t frees = 0;      // saved activations released when the step ends
  Params params = Params::kNone;
  // Share of those parameter gradients already allocated at the step's peak (e.g. the MLP's
  // peak comes after the down projection's weight gradient, before the up/gate ones).
  double params_at_peak = 0.0;
  // Bytes of the step's typical tensor, for the allocator replays (memory/step_events.h): its
  // saved and transient bytes come as tensors of this size (the MLP's are its width wide,
  // eager attention's are fp32 scores); 0: the residual stream's.
  int64_t piece = 0;
};

struct LayerActivations {
  int64_t saved = 0;            // bytes kept from forward to backward (one micro-batch)
  int64_t recompute_saved = 0;  // with full recomputation: what the layer keeps (its input)
  // With full recomputation: what the recomputed forward brings back just before backward.
  int64_t recomputed = 0;
  std::array<BackwardStep, 8> backward;  // sums of `frees` == saved (or recomputed)
  int64_t backward_transient() const;  // largest transient of the steps
};

struct OutputActivations {
  int64_t saved = 0;         // final norm and head inputs
  int64_t logits_held = 0;   // logits alive from forward to the end of the step
  int64_t loss_saved = 0;    // what the loss keeps (log-softmax output)
  int64_t loss_backward_transient = 0;  // gradients of the loss chain, at their peak
  int64_t loss_forward_transient = 0;   // what the loss's forward holds besides loss_saved
  // An adapted output layer (LoRA's `lm_head` target): vocabulary-sized tensors beside the
  // logits, in forward where its output joins the frozen layer's, and in backward where the
  // logits' gradient is scaled into the adapter (OutputActivationBytes).
  int64_t head_forward_transient = 0, head_backward_transient = 0;
  // A sliced HF chain (TrainingSpec::hf_loss), for the allocator replays, which need its
  // tensors one by one: elements of the logits and of the slice one position short, and the
  // bytes of an element of the logits and of the loss's copy.
  HfLoss chain = HfLoss::kPadded;
  int64_t logits_elems = 0, shifted_elems = 0;
  int64_t logit_bytes = 0, loss_bytes = 0;
};

// Tokens and per-rank sizes shared by the account.
struct ActivationShape {
  int64_t b = 0;       // micro-batch
  int64_t s = 0;       // sequence on this rank (seq_len / cp)
  int64_t tp = 1;
  bool sp = false;     // sequence parallel: norm/dropout regions split by tp
  int64_t e = 2;       // bytes per activation element
  int64_t mask = 1;    // bytes per dropout-mask element (bool on CUDA, e on CPU)
};

ActivationShape MakeActivationShape(const TrainingSpec& train, const ParallelPlan& plan);

// One transformer layer (dense or MoE) on one rank, one micro-batch.
LayerActivations LayerActivationBytes(const ModelSpec& m, const TrainingSpec& t,
                                      const ParallelPlan& p, bool moe_layer);

// Embedding-side tensors on the first stage (embedding output dropout mask, shared rotary
// tables, the causal mask kept by selective recomputation), one micro-batch.
int64_t EmbeddingActivationBytes(const ModelSpec& m, const TrainingSpec& t,
                                 const ParallelPlan& p);

// Final norm, head, logits and loss on the last stage, one micro-batch.
OutputActivations OutputActivationBytes(const ModelSpec& m, const TrainingSpec& t,
                                        const ParallelPlan& p);

}  // namespace frenzy

#endif  // FRENZY_MEMORY_ACTIVATIONS_H_
