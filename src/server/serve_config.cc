// frenzyd's settings: the config file, the token and listen checks (serve.h).
#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/json_reader.h"
#include "server/api.h"
#include "server/serve.h"

namespace frenzy::server {
namespace {

using nlohmann::json;

// The settings of a config file, by type, in the order their types are checked: the strings,
// then (after unknown names) the numbers.
struct StringSetting {
  const char* key;
  std::string ServeConfig::*field;
};
struct NumberSetting {
  const char* key;
  double ServeConfig::*field;
};
constexpr StringSetting kStringSettings[] = {
    {"backend", &ServeConfig::backend},
    {"listen", &ServeConfig::listen},
    {"db", &ServeConfig::db},
    {"cluster", &ServeConfig::cluster},
    {"token", &ServeConfig::token},
    {"runs_dir", &ServeConfig::runs_dir},
    {"models_dir", &ServeConfig::models_dir},
    {"train_command", &ServeConfig::train_command},
    {"policy", &ServeConfig::policy},
    {"slurm_conf", &ServeConfig::slurm_conf},
    {"k8s_dir", &ServeConfig::k8s_dir},
    {"inventory", &ServeConfig::inventory},
    {"frameworks", &ServeConfig::frameworks},
    {"transformers", &ServeConfig::transformers},
    {"torch", &ServeConfig::torch},
};
constexpr NumberSetting kNumberSettings[] = {
    {"time_scale", &ServeConfig::time_scale},
    {"tick_s", &ServeConfig::tick_s},
};

// The file as a JSON object; errors name the file (and "config").
Result<json> ReadConfigObject(const std::string& path) {
  std::ifstream f(path);
  if (!f) return NotFound("cannot read the config file", path, "config");
  std::stringstream text;
  text << f.rdbuf();
  Result<json> j = ParseJson(text.str(), path);
  if (!j.ok()) return Status(j.status().code(), j.status().message(), path, "config");
  if (!j->is_object()) return InvalidArgument("not a JSON object", path, "config");
  return j;
}

}  // namespace

const std::vector<std::string>& ServeConfigKeys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (const StringSetting& s : kStringSettings) k.emplace_back(s.key);
    for (const NumberSetting& s : kNumberSettings) k.emplace_back(s.key);
    return k;
  }();
  return keys;
}

Result<ServeConfig> ParseServeConfig(const std::string& path, ServeConfig base,
                                     const std::set<std::string>& keep) {
  ASSIGN_OR_RETURN(json j, ReadConfigObject(path));
  for (const StringSetting& s : kStringSettings) {
    if (!j.contains(s.key) || keep.count(s.key) > 0) continue;
    if (!j[s.key].is_string()) return InvalidArgument("must be a string", path, s.key);
    base.*s.field = j[s.key].get<std::string>();
  }
  const std::vector<std::string>& known = ServeConfigKeys();
  for (const auto& [key, value] : j.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      return InvalidArgument("unknown setting", path, key);
    }
  }
  for (const NumberSetting& s : kNumberSettings) {
    if (!j.contains(s.key) || keep.count(s.key) > 0) continue;
    if (!j[s.key].is_number()) return InvalidArgument("must be a number", path, s.key);
    const double v = j[s.key].get<double>();
    if (!(v > 0)) return InvalidArgument(fmt::format("must be > 0, not {:g}", v), path, s.key);
    base.*s.field = v;
  }
  return base;
}

Result<std::vector<Launcher>> ParseFrameworkList(const std::string& list) {
  if (list == "all") return AllLaunchers();
  std::vector<Launcher> out;
  std::stringstream words(list);
  std::string word;
  while (std::getline(words, word, ',')) {
    word.erase(0, word.find_first_not_of(' '));
    word.erase(word.find_last_not_of(' ') + 1);
    if (word.empty()) continue;
    auto l = ParseLauncher(word);
    if (!l) {
      return InvalidArgument(fmt::format("unknown framework '{}' (torchtitan, megatron, "
                                         "accelerate, deepspeed, or all)",
                                         word),
                             {}, "frameworks");
    }
    if (std::find(out.begin(), out.end(), *l) == out.end()) out.push_back(*l);
  }
  return out;
}

Status CheckToken(const std::string& token, const std::string& from) {
  if (token.empty()) return Status::Ok();
  const bool blank = std::all_of(token.begin(), token.end(), [](char ch) {
    return std::isspace(static_cast<unsigned char>(ch)) != 0;
  });
  if (blank) {
    return InvalidArgument("is blank (from " + from + "): give a real token, or none", {}, "token");
  }
  for (char ch : token) {
    const unsigned char u = static_cast<unsigned char>(ch);
    if (u <= 0x20 || u == 0x7f) {
      return InvalidArgument(
          fmt::format("contains {} (from {}): a token may not contain whitespace or control "
                      "characters",
                      u == ' ' ? std::string("a space") : fmt::format("the byte 0x{:02x}", u),
                      from),
          {}, "token");
    }
  }
  return Status::Ok();
}

Result<ListenAddress> ParseListen(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return InvalidArgument("must be ADDR:PORT", {}, "listen");
  ListenAddress a;
  a.host = listen.substr(0, colon);
  a.port = std::atoi(listen.c_str() + colon + 1);
  if (a.port <= 0 || a.port > 65535) return InvalidArgument("bad port", {}, "listen");
  return a;
}

Status ValidateServeConfig(const ServeConfig& config) {
  RETURN_IF_ERROR(CheckToken(config.token, "the configuration"));
  ASSIGN_OR_RETURN(ListenAddress at, ParseListen(config.listen));
  if (config.token.empty() && !IsLoopback(at.host)) {
    return InvalidArgument(
        "no token configured: refusing to listen on a non-loopback address (set --token or "
        "FRENZY_TOKEN)",
        {}, "token");
  }
  if (!(config.time_scale > 0) || !(config.tick_s > 0)) {
    return InvalidArgument("--time-scale and --tick-s must be > 0", {}, "time-scale");
  }
  RETURN_IF_ERROR(ParseFrameworkList(config.frameworks).status());
  if (!config.transformers.empty()) {
    RETURN_IF_ERROR(ParseTransformersRelease(config.transformers, "transformers").status());
  }
  if (!config.torch.empty()) RETURN_IF_ERROR(ParseTorchRelease(config.torch, "torch").status());
  return Status::Ok();
}

}  // namespace frenzy::server
