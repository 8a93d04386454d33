#include "memory/activation_rules.h"

namespace frenzy::activation_rules {

bool UsesMegatronKernels(const TrainingSpec& t) { return t.framework == Framework::kMegatron; }

// The HF Trainer's mixed precision is torch.autocast over fp32 weights (QLoRA's too: its
// non-4-bit weights are fp32). LoRA's base is 16-bit: its stream is 16-bit as in pure bf16.
// An fp32 stream under autocast: HF Trainer's mixed precision over fp32 weights, and QLoRA whose
// unquantised weights prepare_model_for_kbit_training upcast; a 16-bit base (LoRA, QLoRA
// without the upcast) keeps a 16-bit stream.
bool IsAutocast(const TrainingSpec& t) {
  const bool base16 = t.finetune == FineTune::kLora ||
                      (t.finetune == FineTune::kQlora && !t.lora.upcast_rest);
  return t.framework == Framework::kHf && t.mixed() && !base16;
}

// Bytes per dropout-mask element for an input of `input_bytes`: CUDA keeps a bool mask, the
// CPU kernel a mask of the input's dtype.
int64_t MaskBytes(const TrainingSpec& t, int64_t input_bytes) {
  return t.device == DeviceKind::kCpu ? input_bytes : 1;
}

int64_t AdapterBytes(const TrainingSpec& t, int64_t e) {
  return t.mixed() ? e : t.lora.adapter_bytes;
}

int64_t AdapterMaskBytes(const TrainingSpec& t, int64_t e) {
  if (t.lora.dropout <= 0) return 0;
  return MaskBytes(t, t.mixed() ? kF32 : AdapterBytes(t, e));
}

// Bytes a norm keeps for one input of `tokens` x h, eager PyTorch.
//  LayerNorm (native_layer_norm): input, mean and rstd (fp32 per token); its output is kept by
//    the next op and counted there... except that the next op is always a Linear that keeps it,
//    so the output is counted here once.
//  RMSNorm as HuggingFace writes it: x.float(); x.pow(2) keeps x, and mean keeps x^2 under
//    PyTorch < 2.2 only (`mean_keeps_input`; since 2.2 mean's backward keeps the element count,
//    pytorch/pytorch#109935); rsqrt keeps its output (per token); x * rsqrt keeps x;
//    weight * x_norm.to(dtype)
//    keeps x_norm in the activation dtype (fp32 in Gemma's (1 + w) form); the output y is kept
//    by the next Linear. In 16-bit
//    the float() copy of x is new and fp32, and the 16-bit input itself is not kept.
//  RMSNorm computed in the activation dtype (`in_dtype`: lit-gpt's lit_gpt/rmsnorm.py, 2023):
//    the same tensors with no float() copy, x^2 and rsqrt in the activation dtype.
int64_t EagerNormSaved(const ModelSpec& m, int64_t tokens, int64_t e, bool include_input,
                       bool mean_keeps_input, int64_t width, bool in_dtype) {
  int64_t th = tokens * (width > 0 ? width : m.hidden_size);
  if (m.norm == NormKind::kLayerNorm) {
    return (include_input ? th * e : 0) + th * e + 2 * tokens * kF32;
  }
  const int64_t c = in_dtype ? e : kF32;  // the dtype the norm computes in
  int64_t xc = (e == c) ? (include_input ? th * c : 0) : th * c;
  // Gemma's form, (x_norm * (1 + w.float())).to(dtype), keeps x_norm in fp32.
  const int64_t x_norm = m.gemma_norm ? kF32 : e;
  const int64_t x_squared = mean_keeps_input ? th * c : 0;
  return xc + x_squared + tokens * c /*rsqrt*/ + th * x_norm + th * e /*y*/;
}

}  // namespace frenzy::activation_rules
