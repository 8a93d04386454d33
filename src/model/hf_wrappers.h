// What the config parser knows of architectures beside the ones it reads: multimodal wrappers
// whose text model it reads instead, and types it recognises but refuses.
#ifndef FRENZY_MODEL_HF_WRAPPERS_H_
#define FRENZY_MODEL_HF_WRAPPERS_H_

#include <string>

#include <nlohmann/json.hpp>

namespace frenzy {

// The model_type a wrapper's text_config has when it names none (Gemma3Config: gemma3_text;
// Mistral3Config: mistral); empty for other wrappers.
std::string WrappedTextType(const std::string& wrapper);

// Why a recognised model_type is not supported (state-space and hybrid models); empty when it
// is not one of those.
std::string RefusedReason(const std::string& model_type);

// What a wrapper's config carries beside its text model (its other *_config objects), for
// ModelSpec::left_out.
std::string WrapperLeftOut(const nlohmann::json& config, const std::string& wrapper);

}  // namespace frenzy

#endif  // FRENZY_MODEL_HF_WRAPPERS_H_
