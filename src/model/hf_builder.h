// The HuggingFace config readers' shared parts (model/hf_config.cc and the readers in files of
// their own): the Builder that reads a config into a ModelSpec with the field names for its
// errors, and the Llama-like skeleton most families start from.
#ifndef FRENZY_MODEL_HF_BUILDER_H_
#define FRENZY_MODEL_HF_BUILDER_H_

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/json_reader.h"
#include "common/status.h"
#include "model/model_spec.h"

namespace frenzy::hf_detail {

// Field defaults below are those of the transformers configuration classes
// (transformers/models/<type>/configuration_<type>.py, v4.40-v4.57) and the module
// constructors in modeling_<type>.py that decide which weights exist.

class Builder {
 public:
  // `prefix` names a nested config in messages ("text_config.").
  Builder(const nlohmann::json& config, const std::string& where, std::string prefix = {})
      : r_(config, where, prefix), where_(where), prefix_(std::move(prefix)) {}

  JsonReader& r() { return r_; }
  ModelSpec& spec() { return spec_; }

  // Reads an int field under any of `keys` (first present wins; HF attribute_map aliases) and
  // remembers which key fed the ModelSpec field `spec_field` for error messages.
  int64_t Int(const std::string& spec_field, std::initializer_list<const char*> keys,
              std::optional<int64_t> fallback) {
    for (const char* key : keys) {
      if (r_.HasValue(key)) {
        keys_[spec_field] = key;
        // Far beyond any real size and small enough that the readers' arithmetic cannot
        // overflow (a product of two fields is bounded first); Validate() bounds each field.
        constexpr int64_t kLimit = int64_t{1} << 40;
        const int64_t v = r_.OptInt(key).value_or(0);
        if (v > kLimit || v < -kLimit) {
          r_.Error(key, "implausibly large: " + std::to_string(v));
          return 0;
        }
        return v;
      }
    }
    keys_[spec_field] = *keys.begin();
    if (!fallback) {
      r_.Error(*keys.begin(), "missing required field");
      return 0;
    }
    return *fallback;
  }

  double Prob(std::initializer_list<const char*> keys, double fallback) {
    for (const char* key : keys) {
      if (r_.HasValue(key)) return r_.OptDouble(key).value_or(fallback);
    }
    return fallback;
  }

  void Activation(std::initializer_list<const char*> keys, const char* fallback) {
    std::string act = fallback;
    std::string key = *keys.begin();
    for (const char* k : keys) {
      if (r_.HasValue(k)) {
        act = r_.String(k, fallback);
        key = k;
        break;
      }
    }
    static const std::map<std::string, frenzy::Activation> kActs = {
        {"gelu", Activation::kGelu},
        {"gelu_python", Activation::kGelu},
        {"gelu_new", Activation::kGeluTanh},
        {"gelu_fast", Activation::kGeluTanh},
        {"gelu_pytorch_tanh", Activation::kGeluTanh},
        {"gelu_accurate", Activation::kGeluTanh},
        {"relu", Activation::kRelu},
        {"silu", Activation::kSilu},
        {"swish", Activation::kSilu},
    };
    auto it = kActs.find(act);
    if (it == kActs.end()) {
      r_.Error(key, "unsupported activation '" + act +
                        "' (supported: gelu, gelu_new, gelu_fast, gelu_pytorch_tanh, relu, "
                        "silu, swish)");
      return;
    }
    spec_.activation = it->second;
  }

  // head_dim: explicit field if given, else hidden / heads, which must divide.
  void HeadDim(bool explicit_allowed) {
    if (explicit_allowed && r_.HasValue("head_dim")) {
      spec_.head_dim = Int("head_dim", {"head_dim"}, std::nullopt);
      return;
    }
    keys_["head_dim"] = keys_["num_heads"];
    if (spec_.num_heads > 0 && spec_.hidden_size > 0) {
      if (spec_.hidden_size % spec_.num_heads != 0) {
        r_.Error(keys_["num_heads"], "must divide " + keys_["hidden_size"] + " (" +
                                         std::to_string(spec_.hidden_size) + "), found " +
                                         std::to_string(spec_.num_heads));
        return;
      }
      spec_.head_dim = spec_.hidden_size / spec_.num_heads;
    }
  }

  void NoteKey(const std::string& spec_field, const std::string& key) { keys_[spec_field] = key; }

  Result<ModelSpec> Finish() {
    RETURN_IF_ERROR(r_.Finish());
    auto problems = spec_.Problems();
    if (problems.empty()) return spec_;
    auto key = [&](const std::string& f) {
      auto it = keys_.find(f);
      return prefix_ + (it == keys_.end() ? f : it->second);
    };
    std::string msg = problems[0].message;
    for (size_t i = 1; i < problems.size(); ++i) {
      msg += "; also field '" + key(problems[i].field) + "': " + problems[i].message;
    }
    return InvalidArgument(msg, where_, key(problems[0].field));
  }

 private:
  JsonReader r_;
  std::string where_;
  std::string prefix_;
  ModelSpec spec_;
  std::map<std::string, std::string> keys_;
};

// A list of layer indices as a sorted set (configs may repeat or reorder them).
inline std::vector<int64_t> SortedLayers(std::vector<int64_t> layers) {
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  return layers;
}

// Llama and its close relatives: RMSNorm, rotary, gated MLP, optional GQA.
struct LlamaLike {
  int64_t vocab, hidden, ffn, layers, heads, max_pos;
  std::optional<int64_t> kv_heads;  // nullopt: = heads
  const char* act;
  bool tied;
  bool qkv_bias;
  // The class's head_dim where the config has none (GLM-4.5: 128, its 96 heads not dividing
  // 4096); nullopt: hidden / heads, which must divide.
  std::optional<int64_t> head_dim = std::nullopt;
};

void ReadLlamaLike(Builder& b, const LlamaLike& d, bool read_bias_flags);
// Sliding-window layers from a `layer_types` list ("sliding_attention" / "full_attention",
// transformers >= 4.53) when the config has one, else from `fallback` (the class's pattern).
void SlidingLayers(Builder& b, int64_t fallback);
// DeepSeek-style shared experts (n_shared_experts, `fallback` where absent): one ungated MLP of
// moe_intermediate_size x n_shared_experts; reads moe.ffn_hidden_size, which must be set first.
void ReadSharedExperts(Builder& b, int64_t fallback);

using Reader = void (*)(Builder&);
// The readers defined outside model/hf_config.cc (model/hf_readers_2025.cc), by model_type.
const std::map<std::string, Reader>& MoreReaders();

}  // namespace frenzy::hf_detail

#endif  // FRENZY_MODEL_HF_BUILDER_H_
