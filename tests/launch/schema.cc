#include "launch/schema.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace frenzy::testing {

const Entry* Schema::Find(const std::string& part, const std::string& name) const {
  auto p = parts.find(part);
  if (p == parts.end()) return nullptr;
  auto e = p->second.find(name);
  return e == p->second.end() ? nullptr : &e->second;
}

Schema LoadSchema(const std::string& framework) {
  Schema s;
  std::ifstream f(std::string(FRENZY_SOURCE_DIR) + "/tests/data/launch/" + framework + ".schema");
  std::string line, part;
  while (std::getline(f, line)) {
    if (line.rfind("# launcher", 0) == 0) part = "launcher";
    if (line.rfind("# script-args", 0) == 0) part = "script";
    if (line == "# cli") part = "cli";
    if (line == "# config") part = "config";
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string name;
    Entry e;
    in >> name >> e.kind;
    for (std::string c; in >> c;) e.choices.push_back(c);
    s.parts[part][name] = e;
    // torchtitan's keys are `section.key` in TOML and `--section.key` on its command line.
    if (framework == "torchtitan") s.parts[part]["--" + name] = e;
  }
  return s;
}

namespace {

bool Number(const std::string& v, bool integer) {
  if (v.empty()) return false;
  char* end = nullptr;
  if (integer) {
    std::strtoll(v.c_str(), &end, 10);
  } else {
    std::strtod(v.c_str(), &end);
  }
  return *end == '\0';
}

// Whether `v` is a value of kind `e` ("" for a flag given without a value).
std::string BadValue(const Entry& e, const std::string& v) {
  // $PLACEHOLDERS are filled per node by the backend (launch.h).
  if (!v.empty() && v[0] == '$' && e.kind != "flag" && e.kind != "choice") return "";
  const bool ok = e.kind == "int"      ? Number(v, true)
                  : e.kind == "float"  ? Number(v, false)
                  : e.kind == "bool"   ? v == "true" || v == "false" || v.empty()
                  : e.kind == "flag"   ? v.empty()
                  : e.kind == "choice" ? std::find(e.choices.begin(), e.choices.end(), v) !=
                                             e.choices.end()
                                       : true;  // str, list
  if (ok) return "";
  std::string want = e.kind;
  for (const auto& c : e.choices) want += " " + c;
  return fmt::format("'{}' is not {}", v, want);
}

struct Checker {
  std::vector<std::string> problems;
  void One(const Schema& s, const std::string& part, const std::string& name,
           const std::string& value, const std::string& where) {
    const Entry* e = s.Find(part, name);
    if (e == nullptr) {
      problems.push_back(fmt::format("{}: {} is not one of its names", where, name));
      return;
    }
    if (std::string bad = BadValue(*e, value); !bad.empty()) {
      problems.push_back(fmt::format("{}: {} = {}", where, name, bad));
    }
  }
  // Flags from argv[i] on, until the first word that is not a flag (returned) or the end.
  // A flag takes the next word as its value unless it is `--f=v` or its kind takes none.
  size_t Flags(const Schema& s, const std::string& part, const std::vector<std::string>& argv,
               size_t i, const std::string& where, bool stop_at_word) {
    while (i < argv.size()) {
      const std::string& a = argv[i];
      if (a.rfind("-", 0) != 0) {
        if (stop_at_word) return i;
        problems.push_back(fmt::format("{}: stray word '{}'", where, a));
        ++i;
        continue;
      }
      const size_t eq = a.find('=');
      const std::string name = a.substr(0, eq);
      const Entry* e = s.Find(part, name);
      std::string value;
      if (eq != std::string::npos) {
        value = a.substr(eq + 1);
      } else if (e && e->kind != "flag" && e->kind != "bool" && i + 1 < argv.size()) {
        value = argv[++i];
      }
      One(s, part, name, value, where);
      ++i;
      if (name == "-m" || name == "--module") return i;  // torchrun: the module comes next
    }
    return i;
  }
};

void Flatten(const nlohmann::json& j, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>* out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object()) {
      Flatten(*it, key, out);
    } else {
      out->emplace_back(key, it->is_string() ? it->get<std::string>() : it->dump());
    }
  }
}

// The two-level YAML Accelerate's config is ("key: value", and "  key: value" under "parent:").
std::vector<std::pair<std::string, std::string>> YamlKeys(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(text);
  std::string line, parent;
  while (std::getline(in, line)) {
    const bool nested = line.rfind("  ", 0) == 0;
    const size_t colon = line.find(':');
    const std::string key = line.substr(nested ? 2 : 0, colon - (nested ? 2 : 0));
    std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (!nested && value.empty()) {
      parent = key;
      continue;
    }
    out.emplace_back(nested ? parent + "." + key : key, value);
  }
  return out;
}

}  // namespace

std::vector<std::string> Check(const Launch& l, const Schema& s) {
  Checker c;
  const std::string fw = LauncherName(l.framework);
  const std::vector<std::string>& argv = l.argv;
  size_t i = 0;
  if (!argv.empty() && argv[0] == "torchrun") {
    static const Schema torchrun = LoadSchema("torchrun");
    i = c.Flags(torchrun, "", argv, 1, "torchrun", true) + 1;  // past the entry point
    const std::string part = l.framework == Launcher::kDeepSpeed ? "script" : "";
    c.Flags(s, part, argv, i, fw, false);
  } else if (argv.size() > 2 && argv[0] == "accelerate" && argv[1] == "launch") {
    i = c.Flags(s, "cli", argv, 2, "accelerate launch", true);
    if (i >= argv.size()) c.problems.push_back("accelerate launch: no training script");
  } else {
    c.problems.push_back("argv starts with neither torchrun nor accelerate launch");
  }
  for (const auto& [name, text] : l.files) {
    std::vector<std::pair<std::string, std::string>> keys;
    std::string part;
    if (name == "ds_config.json") {
      Flatten(nlohmann::json::parse(text), "", &keys);
    } else if (name == "accelerate.yaml") {
      keys = YamlKeys(text);
      part = "config";
    } else {
      c.problems.push_back("unexpected file " + name);
    }
    for (const auto& [k, v] : keys) c.One(s, part, k, v, name);
  }
  return c.problems;
}

}  // namespace frenzy::testing
