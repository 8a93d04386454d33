#include "model/hf_wrappers.h"

#include <map>

namespace frenzy {

std::string WrappedTextType(const std::string& wrapper) {
  static const auto* kMap = new std::map<std::string, std::string>{
      {"gemma3", "gemma3_text"},  // Gemma3Config
      {"mistral3", "mistral"},    // Mistral3Config
  };
  auto it = kMap->find(wrapper);
  return it == kMap->end() ? std::string() : it->second;
}

std::string RefusedReason(const std::string& model_type) {
  static const char* kSsm = "state-space models (selective scan, no attention) have no memory or "
                            "speed model";
  static const char* kHybrid = "hybrid attention/state-space models have no memory or speed model";
  static const auto* kMap = new std::map<std::string, const char*>{
      {"mamba", kSsm},    {"mamba2", kSsm},    {"falcon_mamba", kSsm},
      {"jamba", kHybrid}, {"zamba", kHybrid},  {"zamba2", kHybrid},
      {"bamba", kHybrid}, {"nemotron_h", kHybrid}, {"falcon_h1", kHybrid},
      {"granitemoehybrid", kHybrid}, {"lfm2", kHybrid}, {"plamo2", kHybrid},
      // Qwen3-Next: three Gated DeltaNet (linear attention) layers to each attention layer.
      {"qwen3_next", "hybrid linear-attention (Gated DeltaNet) models have no memory or speed "
                     "model"},
  };
  auto it = kMap->find(model_type);
  return it == kMap->end() ? std::string() : std::string(it->second);
}

std::string WrapperLeftOut(const nlohmann::json& config, const std::string& wrapper) {
  std::string parts;
  for (const auto& [key, value] : config.items()) {
    if (key == "text_config" || !key.ends_with("_config") || !value.is_object()) continue;
    std::string what = key;
    if (auto t = value.find("model_type"); t != value.end() && t->is_string()) {
      what += " (" + t->get<std::string>() + ")";
    }
    parts += (parts.empty() ? "" : ", ") + what;
  }
  return (parts.empty() ? std::string("whatever else ") + wrapper + " adds"
                        : parts + " and the projector into the text model") +
         ": the text model is what is counted and trained";
}

}  // namespace frenzy
