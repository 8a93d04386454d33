#include "model/zoo.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
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

// A name as users type it, reduced to the shape it names: lower case, without the organisation
// and without the suffixes of variants that share the base's shape (instruct, chat, base,
// -it/-pt, -hf, a release date such as -2407).
std::string ShapeKey(std::string name) {
  name = ToLower(name);
  if (auto slash = name.rfind('/'); slash != std::string::npos) name = name.substr(slash + 1);
  static const char* kSuffixes[] = {"-instruct", "-chat", "-base", "-it", "-pt", "-hf"};
  for (bool changed = true; changed;) {
    changed = false;
    for (const char* suffix : kSuffixes) {
      if (name.size() > std::strlen(suffix) + 1 && name.ends_with(suffix)) {
        name.resize(name.size() - std::strlen(suffix));
        changed = true;
      }
    }
    // A release date (-2407, -2503, -1124) at the end.
    const size_t n = name.size();
    if (n > 6 && name[n - 5] == '-' &&
        std::all_of(name.end() - 4, name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      name.resize(n - 5);
      changed = true;
    }
  }
  return name;
}

const ZooEntry* Match(const std::vector<ZooEntry>& zoo, const std::string& name) {
  const std::string want = ToLower(name);
  for (const auto& e : zoo) {
    if (ToLower(e.name) == want || (!e.hf_id.empty() && ToLower(e.hf_id) == want)) return &e;
  }
  const std::string key = ShapeKey(name);
  for (const auto& e : zoo) {
    if (ShapeKey(e.name) == key || (!e.hf_id.empty() && ShapeKey(e.hf_id) == key)) return &e;
  }
  return nullptr;
}

// A HuggingFace id's config.json in the local hub cache ($HF_HUB_CACHE, else $HF_HOME/hub,
// else ~/.cache/huggingface/hub), the newest snapshot first; empty when none.
std::string CachedConfig(const std::string& hf_id) {
  namespace fs = std::filesystem;
  const size_t slash = hf_id.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == hf_id.size() ||
      hf_id.find('/', slash + 1) != std::string::npos || hf_id.find("..") != std::string::npos) {
    return {};
  }
  fs::path hub;
  if (const char* c = std::getenv("HF_HUB_CACHE"); c && *c) {
    hub = c;
  } else if (const char* h = std::getenv("HF_HOME"); h && *h) {
    hub = fs::path(h) / "hub";
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    hub = fs::path(home) / ".cache" / "huggingface" / "hub";
  } else {
    return {};
  }
  const fs::path snapshots = hub / ("models--" + hf_id.substr(0, slash) + "--" +
                                    hf_id.substr(slash + 1)) / "snapshots";
  std::error_code ec;
  fs::file_time_type newest{};
  std::string found;
  for (fs::directory_iterator it(snapshots, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path config = it->path() / "config.json";
    if (!fs::is_regular_file(config, ec)) continue;
    const auto t = fs::last_write_time(config, ec);
    if (found.empty() || t > newest) {
      found = config.string();
      newest = t;
    }
  }
  return found;
}

// The embedded files never change while the process runs: parsed once, and read in place by
// every lookup (a simulation resolves each job's model).
const Result<std::vector<ZooEntry>>& ParsedZoo() {
  static const auto* kZoo = new Result<std::vector<ZooEntry>>(ParseZoo());
  return *kZoo;
}

}  // namespace

Result<std::vector<ZooEntry>> LoadZoo() { return ParsedZoo(); }

std::optional<ModelSpec> FindZooModel(const std::string& name) {
  const auto& zoo = ParsedZoo();
  if (!zoo.ok()) return std::nullopt;
  if (const ZooEntry* e = Match(*zoo, name)) return e->spec;
  return std::nullopt;
}

Result<ModelSpec> ResolveModel(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p(name_or_path);
  if (fs::is_directory(p, ec)) return LoadHfConfigFile((p / "config.json").string());
  if (fs::exists(p, ec)) return LoadHfConfigFile(name_or_path);
  const auto& parsed = ParsedZoo();
  if (!parsed.ok()) return parsed.status();
  const std::vector<ZooEntry>& zoo = *parsed;
  if (const ZooEntry* e = Match(zoo, name_or_path)) return e->spec;
  std::vector<std::string> names;
  for (const auto& e : zoo) names.push_back(e.name);
  // A HuggingFace id the zoo lacks: the local hub cache, never the network.
  const bool hf_id = name_or_path.find('/') != std::string::npos && !name_or_path.ends_with(".json") &&
                     std::count(name_or_path.begin(), name_or_path.end(), '/') == 1 &&
                     name_or_path.front() != '/' && name_or_path.front() != '.';
  if (hf_id) {
    if (std::string cached = CachedConfig(name_or_path); !cached.empty()) {
      // Named after the id (a hub config rarely names itself; its folder is a commit hash).
      ASSIGN_OR_RETURN(std::string text, ReadFileToString(cached));
      return ParseHfConfigText(text, cached, name_or_path);
    }
    return NotFound(
        "not in the zoo and not in the local HuggingFace cache ($HF_HUB_CACHE, $HF_HOME/hub or "
        "~/.cache/huggingface/hub); Frenzy never downloads: get its config.json (`huggingface-cli "
        "download " + name_or_path + " config.json`, or https://huggingface.co/" + name_or_path +
            "/blob/main/config.json) and pass the file's path",
        name_or_path, "model");
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
