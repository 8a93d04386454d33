// The built-in model zoo and model lookup by name or path.
//
// Zoo entries live in data/models/*.json (compiled into the binary): the public HuggingFace
// config, where it came from, and the published exact parameter count with its source.
#ifndef FRENZY_MODEL_ZOO_H_
#define FRENZY_MODEL_ZOO_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/model_spec.h"

namespace frenzy {

struct ZooEntry {
  std::string name;    // what users type, e.g. "llama-2-7b"
  std::string hf_id;   // e.g. "meta-llama/Llama-2-7b-hf"
  std::string source;  // where the config values come from
  std::optional<int64_t> published_params;  // exact published count, when one exists
  std::string params_source;
  ModelSpec spec;
};

// Every zoo entry, sorted by name. An error here means a broken embedded file (a build bug).
Result<std::vector<ZooEntry>> LoadZoo();

// Resolves a model as users name it: a path to a config.json (or a folder holding one), a zoo
// name or a HuggingFace id (case-insensitive). NotFound suggests the closest zoo names.
Result<ModelSpec> ResolveModel(const std::string& name_or_path);

// A zoo name or HuggingFace id only (case-insensitive): never touches the filesystem, so a name
// from an untrusted client cannot reach a file. nullopt when the zoo has no such model.
std::optional<ModelSpec> FindZooModel(const std::string& name);

}  // namespace frenzy

#endif  // FRENZY_MODEL_ZOO_H_
