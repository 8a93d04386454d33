// JSON views of a model: the architecture summary and the parameter breakdown that
// `frenzy inspect --json` prints and the daemon serves.
#ifndef FRENZY_MODEL_MODEL_JSON_H_
#define FRENZY_MODEL_MODEL_JSON_H_

#include <nlohmann/json.hpp>

#include "model/model_spec.h"
#include "model/param_count.h"

namespace frenzy {

nlohmann::json ModelSpecToJson(const ModelSpec& spec);

// {"total", "active", "embedding", "final_norm", "head", "layers_total",
//  "per_layer": [{"layers": [first, last], "count", "params", "attention", "mlp", ...}]}
// Consecutive identical layers are grouped.
nlohmann::json ParamCountsToJson(const ParamCounts& counts);

// The MLP kind in the usual words: "gelu", "relu", "swiglu", "geglu", ...
const char* MlpKindName(const ModelSpec& spec);

}  // namespace frenzy

#endif  // FRENZY_MODEL_MODEL_JSON_H_
