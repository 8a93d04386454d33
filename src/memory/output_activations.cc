// The last stage's output layer and loss (OutputActivationBytes, memory/activations.h).
#include <algorithm>

#include "memory/activation_rules.h"
#include "memory/activations.h"

namespace frenzy {

using activation_rules::EagerNormSaved;
using activation_rules::IsAutocast;
using activation_rules::kF32;
using activation_rules::AdapterBytes;
using activation_rules::AdapterMaskBytes;
using activation_rules::UsesMegatronKernels;

namespace {

// LoRA on the output layer (PEFT's lora.Linear on `lm_head`, litgpt's LoRALinear with
// lora_head): `result + lora_B(lora_A(dropout(x))) * scaling`, cast back to the frozen output's
// dtype. Kept for backward, as an adapter of a layer keeps them (ApplyLora): its input (a 16-bit
// cast under autocast, else x.to(adapter dtype): x itself, which the frozen layer no longer
// keeps, or a copy) with dropout's mask, and A's output. Forward, where the two outputs are
// summed: B's output scaled (the adapter's output dtype: 16-bit under autocast, else the
// adapter's) and the sum (the wider of the two) beside the frozen output, which the logits
// count. Backward: the logits' gradient, its cast to the sum's dtype where they differ, and
// the scaled gradient B's backward reads.
void AddHeadAdapter(const ModelSpec& m, const TrainingSpec& t, int64_t tokens, int64_t vocab,
                    int64_t e, OutputActivations& out) {
  const LoraSpec& l = t.lora;
  if (t.finetune == FineTune::kFull || (l.targets & kLoraHead) == 0) return;
  const int64_t ea = AdapterBytes(t, e);  // the adapter's input and output dtype
  const int64_t width = m.embedding_width();
  out.saved += tokens * width * (ea + AdapterMaskBytes(t, e)) + tokens * l.rank * ea;
  const int64_t sum = std::max(e, ea);
  out.head_forward_transient = tokens * vocab * (ea + sum);
  // On the CPU a sum of mixed dtypes first casts its narrower input to a temporary
  // (TensorIterator promotes CPU inputs by copy; CUDA kernels cast as they read).
  if (t.device == DeviceKind::kCpu && sum != e) out.head_forward_transient += tokens * vocab * sum;
  out.head_backward_transient = tokens * vocab * (e + (sum != e ? sum : 0) + ea);
}

}  // namespace

OutputActivations OutputActivationBytes(const ModelSpec& m, const TrainingSpec& t,
                                        const ParallelPlan& p) {
  ActivationShape sh = MakeActivationShape(t, p);
  int64_t tokens = sh.b * sh.s;
  int64_t e = sh.e;
  OutputActivations out;
  int64_t vocab = m.vocab_size / p.tp;  // vocab-parallel output layer
  if (t.head == HeadType::kClassification) {
    // Pooled first token -> dense -> labels; negligible next to the encoder.
    out.saved = sh.b * m.hidden_size * e * 2;
    out.logits_held = sh.b * t.num_labels * e;
    return out;
  }
  int64_t norm_tokens = sh.sp ? tokens / sh.tp : tokens;
  if (UsesMegatronKernels(t)) {
    // Final norm input and the output layer's input; logits in the activation dtype, then
    // vocab_parallel_cross_entropy works on an fp32 copy that it keeps as softmax (its
    // backward reuses that buffer in place, then casts it to the logits' dtype). The model
    // returns the loss alone (GPTModel.forward, legacy post_language_model_processing), so the
    // 16-bit logits are freed when forward ends: backward holds the softmax and its cast.
    out.saved = norm_tokens * m.hidden_size * e + tokens * m.hidden_size * e;
    out.logits_held = tokens * vocab * e;
    out.loss_saved = tokens * vocab * kF32;
    out.loss_backward_transient = tokens * vocab * e;
    // Before 2024 the model passed `output.float()` and the loss subtracted the maximum out of
    // place: the caller's fp32 copy and the shifted one are alive until the loss returns.
    if (t.megatron_legacy) out.loss_forward_transient = tokens * vocab * kF32;
    // The fused loss's compiled steps materialise the mutated fp32 logits once more
    // (TrainingSpec::megatron_fused_ce), in forward and in backward.
    if (t.megatron_fused_ce) {
      out.loss_forward_transient = tokens * vocab * kF32;
      out.loss_backward_transient += tokens * vocab * kF32;
    }
    return out;
  }
  if (m.final_norm) {
    const int64_t th = norm_tokens * m.hidden_size;
    const bool rms = m.norm == NormKind::kRmsNorm;
    const bool frozen = t.finetune != FineTune::kFull;
    if (IsAutocast(t)) {
      out.saved += th * kF32 + 2 * norm_tokens * kF32 + th * e;  // input, stats, head's cast
      // x_norm in fp32, and x^2 where mean keeps it (PyTorch < 2.2); the rsqrt's per-token
      // output replaces the second statistic.
      if (rms) out.saved += (t.mean_keeps_input ? 2 : 1) * th * kF32 - norm_tokens * kF32;
      // Frozen (QLoRA): no normalised x for the weight, no cast kept by the frozen head.
      if (frozen) out.saved -= th * e + (rms ? th * kF32 : 0);
    } else {
      // (lit-gpt of 2023 ran its final RMSNorm in the activation dtype too.)
      out.saved += EagerNormSaved(m, norm_tokens, e, true, t.mean_keeps_input, 0,
                                  t.litgpt_model && t.litgpt_rmsnorm_in_dtype);
      if (frozen) out.saved -= th * e + (rms ? th * (m.gemma_norm ? kF32 : e) : 0);
    }
  }
  AddHeadAdapter(m, t, tokens, vocab, e, out);
  if (t.head == HeadType::kMaskedLm) {
    // Transform dense + activation + norm before the decoder.
    out.saved += 3 * tokens * m.hidden_size * e;
  }
  // The logits stay referenced by the caller until the step ends; cross entropy on fp32
  // logits keeps the log-softmax output. Backward: the NLL gradient and the log-softmax
  // gradient (both fp32 and vocab-wide) are alive together with the saved log-softmax.
  int64_t loss_bytes = t.loss_fp32 ? kF32 : e;
  // Soft-capped logits (Gemma-2: cap x tanh(logits / cap)) keep tanh's output.
  if (m.final_softcap > 0) out.saved += tokens * vocab * e;
  out.logits_held = tokens * vocab * e;
  out.loss_saved = tokens * vocab * loss_bytes;
  out.loss_backward_transient = 2 * tokens * vocab * loss_bytes;
  // The loss's fp32 copy of 16-bit logits (`logits.float()`) lives through the cross entropy,
  // beside the log-softmax output.
  if (loss_bytes != e) out.loss_forward_transient = tokens * vocab * loss_bytes;
  if (t.hf_loss != HfLoss::kPadded && t.head == HeadType::kCausalLm) {
    // A sliced chain (training.h, HfLoss): the log-softmax and the two gradients at the loss
    // backward's peak are one position short; before 4.46 the loop keeps the model's fp32
    // logits instead of its 16-bit ones. Forward holds the contiguous slice beside the
    // log-softmax output, and from 4.46 the loss's own fp32 copy of the logits too.
    const int64_t shifted = sh.b * (sh.s - 1) * vocab;
    const bool copy = loss_bytes != e;
    out.chain = t.hf_loss;
    out.logits_elems = tokens * vocab;
    out.shifted_elems = shifted;
    out.logit_bytes = e;
    out.loss_bytes = loss_bytes;
    if (t.hf_loss == HfLoss::kModelUpcastSliced) out.logits_held = tokens * vocab * loss_bytes;
    out.loss_saved = shifted * loss_bytes;
    out.loss_backward_transient = 2 * shifted * loss_bytes;
    out.loss_forward_transient =
        shifted * loss_bytes +
        (t.hf_loss == HfLoss::kLossUpcastSliced && copy ? tokens * vocab * loss_bytes : 0);
  }
  return out;
}

}  // namespace frenzy
