// Reading HuggingFace `config.json` files into a ModelSpec.
//
// Each supported `model_type` is read with its own field names and the defaults of its
// transformers configuration class (e.g. LlamaConfig's num_key_value_heads defaults to
// num_attention_heads; GPT-2's n_inner to 4 * n_embd; OPT keeps two extra position rows).
// Errors name the file and the config field as the user wrote it, never the internal name.
//
// A zoo entry (`{"name", "source", "params", "config": {...}}`) is accepted wherever a plain
// config is: its "config" object is read.
#ifndef FRENZY_MODEL_HF_CONFIG_H_
#define FRENZY_MODEL_HF_CONFIG_H_

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "model/model_spec.h"

namespace frenzy {

// The model_type values the parser reads (aliases such as "RefinedWebModel" not listed).
const std::vector<std::string>& SupportedModelTypes();

// Parses a config object. `where` names the source for error messages; `name` becomes
// ModelSpec::name (empty: taken from `_name_or_path`, else "model").
Result<ModelSpec> ParseHfConfig(const nlohmann::json& config, const std::string& where,
                                const std::string& name = {});

// Parses JSON text (a config.json or a zoo entry).
Result<ModelSpec> ParseHfConfigText(std::string_view text, const std::string& where,
                                    const std::string& name = {});

// Reads and parses a file; the model is named after its `_name_or_path` or file stem.
Result<ModelSpec> LoadHfConfigFile(const std::string& path);

}  // namespace frenzy

#endif  // FRENZY_MODEL_HF_CONFIG_H_
