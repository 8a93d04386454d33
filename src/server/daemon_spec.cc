// Job specs: what a submission may say, validated field by field, and the option table it gets.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "common/json_limits.h"
#include "common/strings.h"
#include "model/hf_config.h"
#include "model/zoo.h"
#include "planner/explain.h"
#include "runtime/actions.h"
#include "server/daemon.h"
#include "server/daemon_internal.h"

namespace frenzy::server {

using nlohmann::json;
using namespace internal;  // NOLINT: the daemon's own helpers

namespace {

// Fields a job spec may hold. Jobs never name GPUs or layouts: choosing them is Frenzy's job.
const std::set<std::string> kSpecFields = {"name",    "model",     "tokens",   "global_batch",
                                           "seq_len", "precision", "priority", "user"};
const std::set<std::string> kGpuFields = {
    "gpu", "gpus", "gpu_type", "gpu_count", "requested_gpu", "requested_gpus", "nodes",    "tp",
    "pp",  "dp",   "cp",       "ep",        "micro_batch",   "zero",           "recompute"};

}  // namespace

Result<ModelSpec> Daemon::ModelByName(const std::string& name) const {
  if (name.size() > 256) return InvalidArgument("a model name of over 256 characters", {}, "model");
  if (auto m = FindZooModel(name)) return *m;
  // The operator's models folder: its entries are listed and matched by name, never opened by
  // a path built from the request, so no name reaches a file outside it.
  if (!opt_.models_dir.empty()) {
    namespace fs = std::filesystem;
    std::error_code ec;
    for (fs::directory_iterator it(opt_.models_dir, ec), end; !ec && it != end; it.increment(ec)) {
      const fs::path& entry = it->path();
      std::string stem = entry.filename().string();
      if (stem.ends_with(".json")) stem.resize(stem.size() - 5);
      if (stem != name) continue;
      fs::path config = it->is_directory(ec) ? entry / "config.json" : entry;
      if (!fs::is_regular_file(fs::symlink_status(config, ec))) break;
      auto m = LoadHfConfigFile(config.string());
      if (!m.ok()) {
        return Status(StatusCode::kFailedPrecondition,
                      "the models folder's entry '" + name + "' is not a valid config", {},
                      "model");
      }
      return *m;
    }
  }
  // One answer for every unknown name, whatever the filesystem holds.
  return NotFound(fmt::format("unknown model '{}': not a zoo name or HuggingFace id{}; send a "
                              "custom model's config.json inline as \"model\": {{...}} "
                              "(`frenzy models` lists the zoo)",
                              name, opt_.models_dir.empty() ? "" : " nor a models-folder entry"),
                  {}, "model");
}

Result<Daemon::Parsed> Daemon::ParseSpec(const json& spec) const {
  if (!spec.is_object()) return InvalidArgument("a job spec must be a JSON object", {}, "");
  for (const auto& [key, value] : spec.items()) {
    if (kGpuFields.count(key)) {
      return InvalidArgument(
          "jobs never name GPUs or layouts: Frenzy chooses the GPU type, count and layout", {},
          key);
    }
    if (!kSpecFields.count(key)) return InvalidArgument("unknown field", {}, key);
  }
  Parsed p;
  if (!spec.contains("model"))
    return InvalidArgument("missing: a zoo name or a config", {}, "model");
  const json& model = spec["model"];
  if (model.is_string()) {
    std::string name = model.get<std::string>();
    ASSIGN_OR_RETURN(p.spec.model, ModelByName(name));
    p.model_key = name;
    p.model_name = name;
  } else if (model.is_object()) {
    auto m = ParseHfConfig(model, "model");
    if (!m.ok()) return Status(StatusCode::kInvalidArgument, m.status().ToString(), {}, "model");
    p.spec.model = *m;
    p.model_key = fmt::format("inline:{:x}", std::hash<std::string>{}(DumpJson(model)));
    // value() would throw on a field of another type: look before taking.
    for (const char* key : {"_name_or_path", "model_type"}) {
      if (model.contains(key) && model[key].is_string()) {
        p.model_name = model[key].get<std::string>();
        break;
      }
    }
    if (p.model_name.empty()) p.model_name = "inline";
    p.model_name = Utf8Prefix(p.model_name, 256);
  } else {
    return InvalidArgument("must be a zoo name or a config object", {}, "model");
  }
  auto number = [&](const char* key, double lo, double hi, std::optional<double> dflt,
                    bool integer) -> Result<double> {
    if (!spec.contains(key)) {
      if (dflt) return *dflt;
      return InvalidArgument("missing", {}, key);
    }
    const json& v = spec[key];
    if (!v.is_number() || (integer && !v.is_number_integer())) {
      return InvalidArgument(integer ? "must be an integer" : "must be a number", {}, key);
    }
    double x = v.get<double>();
    if (!(x >= lo && x <= hi)) {
      return InvalidArgument(fmt::format("must be in [{:g}, {:g}]", lo, hi), {}, key);
    }
    return x;
  };
  ASSIGN_OR_RETURN(double tokens, number("tokens", 1, 1e15, std::nullopt, false));
  ASSIGN_OR_RETURN(double batch, number("global_batch", 1, 1e7, std::nullopt, true));
  ASSIGN_OR_RETURN(double seq, number("seq_len", 1, 1e7, 2048.0, true));
  ASSIGN_OR_RETURN(double priority, number("priority", -1e6, 1e6, 0.0, true));
  if (opt_.data_parallel_only) {
    p.spec.tp = 1;
    p.spec.pp = 1;
    p.spec.cp = 1;
  }
  p.spec.tokens = tokens;
  p.spec.global_batch = static_cast<int64_t>(batch);
  p.spec.seq_len = static_cast<int64_t>(seq);
  if (spec.contains("precision")) {
    if (!spec["precision"].is_string()) return InvalidArgument("must be a string", {}, "precision");
    auto pr = ParsePrecision(spec["precision"].get<std::string>());
    if (!pr)
      return InvalidArgument("unknown precision (bf16, fp16, fp32, bf16-pure)", {}, "precision");
    p.spec.precision = *pr;
  }
  for (const char* key : {"name", "user"}) {
    if (spec.contains(key) && !spec[key].is_string()) {
      return InvalidArgument("must be a string", {}, key);
    }
  }
  p.normalized = spec;
  p.normalized["seq_len"] = p.spec.seq_len;
  p.normalized["precision"] = PrecisionName(p.spec.precision);
  p.normalized["priority"] = static_cast<int64_t>(priority);
  p.normalized["model_key"] = p.model_key;
  return p;
}

Result<std::shared_ptr<const JobOptions>> Daemon::OptionsFor(const JobRow& row) {
  const int64_t key = KeyOf(row.id);
  if (auto it = options_of_.find(key); it != options_of_.end()) return it->second;
  json spec = ParseOr(row.spec, json::object());
  spec.erase("model_key");
  ASSIGN_OR_RETURN(Parsed p, ParseSpec(spec));
  ASSIGN_OR_RETURN(auto options, cache_.Get(p.model_key, p.spec, policy_->options_kind()));
  options_of_[key] = options;
  return options;
}

}  // namespace frenzy::server
