#include "model/zoo.h"

#include <algorithm>
#include <filesystem>

#include "common/json_reader.h"
#include "common/strings.h"
#include "data/embedded.h"
#include "model/hf_config.h"

namespace frenzy {

namespace {

Result<std::vector<ZooEntry>> ParseZoo() {
  std::vector<ZooEntry> zoo;
  for (const auto& file : EmbeddedFiles()) {
    if (!file.path.starts_with("models/")) continue;
    std::string where = "data/" + std::string(file.path);
    ASSIGN_OR_RETURN(nlohmann::json doc, ParseJson(file.contents, where));
    JsonReader r(doc, where);
    ZooEntry e;
    e.name = r.String("name");
    e.hf_id = r.String("hf_id", "");
    e.source = r.String("source");
    e.published_params = r.OptInt("params");
    e.params_source = r.String("params_source", "");
    RETURN_IF_ERROR(r.Finish());
    ASSIGN_OR_RETURN(e.spec, ParseHfConfig(doc, where, e.name));
    zoo.push_back(std::move(e));
  }
  std::sort(zoo.begin(), zoo.end(),
            [](const ZooEntry& a, const ZooEntry& b) { return a.name < b.name; });
  return zoo;
}

}  // namespace

Result<std::vector<ZooEntry>> LoadZoo() {
  // The embedded files never change while the process runs: parse them once.
  static const auto* kZoo = new Result<std::vector<ZooEntry>>(ParseZoo());
  return *kZoo;
}

std::optional<ModelSpec> FindZooModel(const std::string& name) {
  static const auto* kZoo = new Result<std::vector<ZooEntry>>(LoadZoo());  // no copy per call
  const auto& zoo = *kZoo;
  if (!zoo.ok()) return std::nullopt;
  const std::string want = ToLower(name);
  for (const auto& e : *zoo) {
    if (ToLower(e.name) == want || (!e.hf_id.empty() && ToLower(e.hf_id) == want)) return e.spec;
  }
  return std::nullopt;
}

Result<ModelSpec> ResolveModel(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p(name_or_path);
  if (fs::is_directory(p, ec)) return LoadHfConfigFile((p / "config.json").string());
  if (fs::exists(p, ec)) return LoadHfConfigFile(name_or_path);
  ASSIGN_OR_RETURN(std::vector<ZooEntry> zoo, LoadZoo());
  std::string want = ToLower(name_or_path);
  std::vector<std::string> names;
  for (const auto& e : zoo) {
    if (ToLower(e.name) == want || (!e.hf_id.empty() && ToLower(e.hf_id) == want)) return e.spec;
    names.push_back(e.name);
  }
  bool looks_like_path = name_or_path.find('/') != std::string::npos ||
                         name_or_path.ends_with(".json");
  std::string msg = looks_like_path ? "no such file, and no zoo model of that name"
                                    : "unknown model: not a zoo name or an existing file";
  auto close = ClosestMatches(name_or_path, names, 3);
  if (!close.empty()) msg += " (did you mean " + Join(close, ", ") + "?)";
  msg += "; `frenzy models` lists the zoo";
  return NotFound(msg, name_or_path, "model");
}

}  // namespace frenzy
