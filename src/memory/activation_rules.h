// Rules the activation accounts share (memory/activations.cc, memory/output_activations.cc):
// which kernels a framework runs, the stream's dtype under autocast, dropout masks, and what an
// eager norm keeps.
#ifndef FRENZY_MEMORY_ACTIVATION_RULES_H_
#define FRENZY_MEMORY_ACTIVATION_RULES_H_

#include <cstdint>

#include "memory/training.h"
#include "model/model_spec.h"

namespace frenzy::activation_rules {

inline constexpr int64_t kF32 = 4;

// Megatron-LM's own kernels (Transformer Engine layers, its vocab-parallel loss).
bool UsesMegatronKernels(const TrainingSpec& t);

// An fp32 stream under autocast (HF Trainer's mixed precision over fp32 weights).
bool IsAutocast(const TrainingSpec& t);

// Bytes per dropout-mask element for an input of `input_bytes`.
int64_t MaskBytes(const TrainingSpec& t, int64_t input_bytes);

// A LoRA adapter over activations of `e` bytes (PEFT's lora.Linear): the bytes of what it keeps
// and outputs (autocast's 16-bit casts under mixed precision, else its own dtype), and of its
// dropout's mask (0 without dropout; an fp32 mask of x.to(fp32) under autocast).
int64_t AdapterBytes(const TrainingSpec& t, int64_t e);
int64_t AdapterMaskBytes(const TrainingSpec& t, int64_t e);

// Bytes a norm keeps for one input of `tokens` x `width` (the hidden size where 0), eager
// PyTorch; `include_input` where nothing else keeps its input; `mean_keeps_input` under
// PyTorch < 2.2 (TrainingSpec::mean_keeps_input: an RMSNorm's mean keeps x^2); `in_dtype` for
// an RMSNorm computed in the activation dtype (litgpt's) instead of HuggingFace's fp32 upcast.
int64_t EagerNormSaved(const ModelSpec& m, int64_t tokens, int64_t e, bool include_input,
                       bool mean_keeps_input, int64_t width = 0, bool in_dtype = false);

}  // namespace frenzy::activation_rules

#endif  // FRENZY_MEMORY_ACTIVATION_RULES_H_
