// Fine-tuning with adapters (LoRA, QLoRA): the linear layers of a block, which of them carry
// adapters, how many parameters the adapters add and how many weights a 4-bit base stores.
//
// The adapters are PEFT's: a targeted linear layer W (in x out) gains A (in x r) and B (r x out),
// r x (in + out) trainable parameters, while W and every other base weight stay frozen.
#ifndef FRENZY_MEMORY_FINETUNE_H_
#define FRENZY_MEMORY_FINETUNE_H_

#include <cstdint>
#include <vector>

#include "memory/training.h"
#include "model/model_spec.h"

namespace frenzy {

// One kind of linear weight in a layer: `count` matrices of in x out, reading `in`-wide inputs
// of `tokens_per_token` rows per token (routed experts: top-k / experts each).
struct LinearWeight {
  unsigned target = 0;  // the LoraTarget bits that select it (0: never adapted)
  int64_t in = 0, out = 0, count = 1;
  double rows_per_token = 1.0;
};

// The linear weights of one layer (a dense or an MoE layer), as the HF modules hold them;
// `fused_qkv` for code that fuses q, k and v in one projection whatever the model (litgpt).
std::vector<LinearWeight> LayerLinearWeights(const ModelSpec& m, bool moe_layer,
                                             bool fused_qkv = false);

// Adapter parameters of one layer for these targets and rank.
int64_t LayerAdapterParams(const ModelSpec& m, const LoraSpec& lora, bool moe_layer);

// Elements of the layer's linear weights (what QLoRA stores in 4 bits; biases excluded).
int64_t LayerLinearElements(const ModelSpec& m, bool moe_layer);

// Bytes per weight of bitsandbytes' NF4: two 4-bit codes a byte and an absmax per 64 values,
// fp32 (4/64 bytes a weight) or, with double quantisation, 8-bit with an fp32 scale
// per 256 absmax values (Dettmers et al., "QLoRA", 2023, §3: 8/64 + 32/(64·256) = 0.127 bits
// of scales a weight).
double Nf4BytesPerWeight(bool double_quant);

// Sharded QLoRA: FSDP (any sharding) or DeepSpeed ZeRO-3 over 4-bit layers. Their flat
// parameters need one dtype, so the 4-bit layers are packed into 16-bit storage
// (bnb_4bit_quant_storage) and every other weight stays 16-bit: TRL's SFTTrainer skips
// prepare_model_for_kbit_training for such a model (the weights it finds on cpu or meta), and
// Answer.AI's FSDP-QLoRA never upcasts. The estimate then keeps the rest 16-bit whatever
// --no-kbit-upcast says.
bool ShardedQlora(const TrainingSpec& t, const ParallelPlan& p);

// The adapters' settings as the layout runs them: `t.lora`, without the upcast under sharded
// QLoRA. What the estimate accounts and `predict` prints.
LoraSpec LoraAsRun(const TrainingSpec& t, const ParallelPlan& p);

// Adapter parameters of the output layer (`lm_head` among the targets): A is rank x its input
// width, B vocabulary x rank; the last stage holds them.
int64_t HeadAdapterParams(const ModelSpec& m, const LoraSpec& lora);

// Adapter parameters of the whole model, the output layer's included.
int64_t ModelAdapterParams(const ModelSpec& m, const LoraSpec& lora);

// Adapter parameters one token passes through (routed experts' adapters count top-k / experts):
// what the adapters' matmul FLOPs scale with.
double ModelActiveAdapterParams(const ModelSpec& m, const LoraSpec& lora);

// Elements of every layer's linear weights (what QLoRA stores in NF4).
int64_t ModelLinearElements(const ModelSpec& m);

}  // namespace frenzy

#endif  // FRENZY_MEMORY_FINETUNE_H_
