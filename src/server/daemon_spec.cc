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
const std::set<std::string> kSpecFields = {
    "name",     "model",     "tokens",     "global_batch", "seq_len",    "precision",
    "priority", "user",      "framework",  "optimizer",    "finetune",   "fp8_recipe",
    "entry",    "entry_args", "config_file"};

// Text a launch carries to the cluster (an entry point, a config file's path, an argument):
// bounded, one line, no NUL byte. Never evaluated by a shell (see NodeAgentArgv).
Status CheckLaunchText(const json& v, const std::string& where, size_t max, bool may_be_empty) {
  if (!v.is_string()) return InvalidArgument("must be a string", {}, where);
  const std::string& s = v.get_ref<const std::string&>();
  if ((s.empty() && !may_be_empty) || s.size() > max) {
    return InvalidArgument(fmt::format("must be {} to {} characters", may_be_empty ? 0 : 1, max),
                           {}, where);
  }
  if (s.find_first_of(std::string("\0\n\r", 3)) != std::string::npos) {
    return InvalidArgument("may not hold a NUL byte or a line break", {}, where);
  }
  return Status::Ok();
}

// "framework" naming a framework Frenzy launches: its entry point and arguments, checked.
Status ParseLaunchInput(const json& spec, LaunchInput* in) {
  if (spec.contains("entry")) {
    RETURN_IF_ERROR(CheckLaunchText(spec["entry"], "entry", 1024, false));
    in->entry = spec["entry"].get<std::string>();
  }
  if (spec.contains("config_file")) {
    RETURN_IF_ERROR(CheckLaunchText(spec["config_file"], "config_file", 1024, false));
    in->config_file = spec["config_file"].get<std::string>();
  }
  if (spec.contains("entry_args")) {
    const json& a = spec["entry_args"];
    if (!a.is_array() || a.size() > 256) {
      return InvalidArgument("must be an array of at most 256 strings", {}, "entry_args");
    }
    for (size_t i = 0; i < a.size(); ++i) {
      RETURN_IF_ERROR(CheckLaunchText(a[i], fmt::format("entry_args[{}]", i), 4096, true));
      in->args.push_back(a[i].get<std::string>());
    }
  }
  return Status::Ok();
}
const std::set<std::string> kFineTuneFields = {"method", "rank",    "alpha",
                                               "dropout", "targets", "dtype", "double_quant"};

// "finetune": "lora", or {"method": "qlora", "rank": 64, "alpha": 16, "dropout": 0.05,
// "targets": "all-linear", "dtype": "bf16", "double_quant": true}; every field checked.
Status ParseFineTuneSpec(const json& v, JobSpec* job) {
  const json* method = &v;
  if (v.is_object()) {
    for (const auto& [key, value] : v.items()) {
      if (!kFineTuneFields.count(key)) return InvalidArgument("unknown field", {}, "finetune." + key);
    }
    if (!v.contains("method")) return InvalidArgument("missing: full, lora or qlora", {}, "finetune.method");
    method = &v["method"];
  }
  const std::string where = v.is_object() ? "finetune.method" : "finetune";
  if (!method->is_string()) return InvalidArgument("must be full, lora or qlora", {}, where);
  auto m = ParseFineTune(method->get<std::string>());
  if (!m) return InvalidArgument("unknown method (full, lora or qlora)", {}, where);
  job->finetune = *m;
  if (!v.is_object()) return Status::Ok();
  LoraSpec& l = job->lora;
  if (v.contains("rank")) {
    const json& r = v["rank"];
    if (!r.is_number_integer() || r.get<int64_t>() < 1 || r.get<int64_t>() > 65536) {
      return InvalidArgument("must be an integer in [1, 65536]", {}, "finetune.rank");
    }
    l.rank = r.get<int64_t>();
  }
  for (auto [key, lo, hi, out] : {std::tuple{"alpha", 0.0, 1e6, &l.alpha},
                                  std::tuple{"dropout", 0.0, 0.99, &l.dropout}}) {
    if (!v.contains(key)) continue;
    const json& x = v[key];
    if (!x.is_number() || !(x.get<double>() >= lo && x.get<double>() <= hi)) {
      return InvalidArgument(fmt::format("must be a number in [{:g}, {:g}]", lo, hi), {},
                             std::string("finetune.") + key);
    }
    *out = x.get<double>();
  }
  if (v.contains("targets")) {
    const json& t = v["targets"];
    std::string bad;
    auto targets = t.is_string() && t.get<std::string>().size() <= 256
                       ? ParseLoraTargets(t.get<std::string>(), &bad)
                       : std::nullopt;
    if (!targets) {
      return InvalidArgument("must be attention, all-linear or module names (q_proj,v_proj,...)",
                             {}, "finetune.targets");
    }
    l.targets = *targets;
  }
  if (v.contains("dtype")) {
    const json& d = v["dtype"];
    std::string name = d.is_string() ? d.get<std::string>() : "";
    if (name != "fp32" && name != "bf16" && name != "fp16") {
      return InvalidArgument("must be fp32, bf16 or fp16", {}, "finetune.dtype");
    }
    l.adapter_bytes = name == "fp32" ? 4 : 2;
  }
  if (v.contains("double_quant")) {
    if (!v["double_quant"].is_boolean()) {
      return InvalidArgument("must be true or false", {}, "finetune.double_quant");
    }
    l.double_quant = v["double_quant"].get<bool>();
  }
  return Status::Ok();
}
const std::set<std::string> kGpuFields = {
    "gpu", "gpus", "gpu_type", "gpu_count", "requested_gpu", "requested_gpus", "nodes",    "tp",
    "pp",  "dp",   "cp",       "ep",        "micro_batch",   "zero",           "recompute"};

}  // namespace

LayoutLimits BundledTrainLimits() {
  LayoutLimits x;
  x.tp = x.pp = x.cp = x.ep = false;  // train.py refuses them (exit 2)
  x.zeros = {0, 1, 2, 3};             // DDP, ZeroRedundancyOptimizer, sharding.py
  x.offloads = {Offload::kNone};
  x.offload_activations = false;
  return x;
}

LayoutLimits AllTrainLimits() {
  LayoutLimits x;
  x.offload_activations = false;
  return x;
}

// What runs the job: a framework Frenzy launches (its limits, its memory model), or the daemon's
// own training command (the operator's limits and model, PEFT + Trainer for adapters) unless
// "framework" says fsdp or hf.
Status Daemon::ParseFramework(const json& spec, Parsed* p) const {
  p->spec.framework = p->spec.finetune == FineTune::kFull ? opt_.train_framework : Framework::kHf;
  p->spec.limits = opt_.train_limits;
  p->spec.limits.mean_keeps_input = opt_.mean_keeps_input;  // the cluster's PyTorch
  if (spec.contains("framework")) {
    const json& f = spec["framework"];
    const std::string word = f.is_string() ? f.get<std::string>() : "";
    if (auto l = ParseLauncher(word)) {
      if (std::find(opt_.frameworks.begin(), opt_.frameworks.end(), *l) == opt_.frameworks.end()) {
        std::vector<std::string> allowed;
        for (Launcher a : opt_.frameworks) allowed.push_back(LauncherName(a));
        return Status(StatusCode::kFailedPrecondition,
                      fmt::format("this daemon does not launch {} jobs; its operator allows {} "
                                  "(frenzyd --frameworks); without \"framework\" the job runs "
                                  "the daemon's own training command",
                                  word, allowed.empty() ? "none" : Join(allowed, ", ")),
                      {}, "framework");
      }
      p->launcher = *l;
      Status prepared = PrepareJob(*l, &p->spec);
      if (!prepared.ok()) {
        return InvalidArgument(prepared.message(), {},
                               prepared.field().empty() ? "framework" : prepared.field());
      }
      // Accelerate and DeepSpeed run HF models: the environment's transformers sets their loss.
      if (*l == Launcher::kAccelerate || *l == Launcher::kDeepSpeed) {
        p->spec.limits.hf_loss = opt_.hf_loss;
      }
      p->spec.limits.mean_keeps_input = opt_.mean_keeps_input;
      return ParseLaunchInput(spec, &p->launch_input);
    }
    auto fw = frenzy::ParseFramework(word);
    if (!fw || (*fw != Framework::kFsdp && *fw != Framework::kHf)) {
      return InvalidArgument(
          "must be torchtitan, megatron, accelerate or deepspeed (a framework Frenzy launches), "
          "or fsdp or hf (how the daemon's own training command is modelled)",
          {}, "framework");
    }
    p->spec.framework = *fw;
  }
  for (const char* key : {"entry", "entry_args", "config_file"}) {
    if (spec.contains(key)) {
      return InvalidArgument(
          "needs \"framework\": torchtitan, megatron, accelerate or deepspeed (the daemon's own "
          "training command takes no entry point)",
          {}, key);
    }
  }
  return Status::Ok();
}

// Specs stored before frameworks were launched held the memory model's word in "framework" and
// no "modelled_as": their "megatron" or "deepspeed" meant the daemon's own training command,
// which they keep running (with its default model) instead of being set aside.
static bool LegacyFrameworkWord(const json& spec) {
  return !spec.contains("modelled_as") && spec.contains("framework") &&
         (spec["framework"] == "megatron" || spec["framework"] == "deepspeed");
}

bool NamesLauncher(const json& stored_spec) {
  const auto f = stored_spec.find("framework");
  return f != stored_spec.end() && f->is_string() && ParseLauncher(f->get<std::string>()) &&
         !LegacyFrameworkWord(stored_spec);
}

Result<Daemon::Parsed> Daemon::ParseStoredSpec(json spec) const {
  if (LegacyFrameworkWord(spec)) spec.erase("framework");
  for (const char* added : {"model_key", "modelled_as"}) spec.erase(added);
  return ParseSpec(spec);
}

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
  p.spec.tokens = tokens;
  p.spec.global_batch = static_cast<int64_t>(batch);
  p.spec.seq_len = static_cast<int64_t>(seq);
  if (spec.contains("precision")) {
    if (!spec["precision"].is_string()) return InvalidArgument("must be a string", {}, "precision");
    auto pr = ParsePrecision(spec["precision"].get<std::string>());
    if (!pr)
      return InvalidArgument("unknown precision (bf16, fp16, fp32, bf16-pure, fp8)", {}, "precision");
    p.spec.precision = *pr;
  }
  if (spec.contains("fp8_recipe")) {
    const json& r = spec["fp8_recipe"];
    auto recipe = r.is_string() ? ParseFp8Recipe(r.get<std::string>()) : std::nullopt;
    if (!recipe) {
      return InvalidArgument("must be delayed, current, mxfp8, tensorwise or rowwise", {},
                             "fp8_recipe");
    }
    if (p.spec.precision != Precision::kFp8) {
      return InvalidArgument("needs \"precision\": \"fp8\"", {}, "fp8_recipe");
    }
    p.spec.fp8_recipe = *recipe;
  }
  if (spec.contains("finetune")) RETURN_IF_ERROR(ParseFineTuneSpec(spec["finetune"], &p.spec));
  if (spec.contains("optimizer")) {
    const json& o = spec["optimizer"];
    auto opt = o.is_string() ? ParseOptimizer(o.get<std::string>()) : std::nullopt;
    if (!opt) {
      return InvalidArgument(
          "must be adamw, adam, sgd, sgdm, adafactor, adam8bit, paged-adamw or paged-adamw8bit",
          {}, "optimizer");
    }
    p.spec.optimizer = *opt;
  }
  RETURN_IF_ERROR(ParseFramework(spec, &p));
  for (const char* key : {"name", "user"}) {
    if (spec.contains(key) && !spec[key].is_string()) {
      return InvalidArgument("must be a string", {}, key);
    }
  }
  p.normalized = spec;
  // "framework" stays as submitted (what runs the job); "modelled_as" is the memory and speed
  // model that was planned with (dropped again when the stored spec is parsed).
  p.normalized["modelled_as"] = FrameworkName(p.spec.framework);
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
  ASSIGN_OR_RETURN(Parsed p, ParseStoredSpec(spec));
  ASSIGN_OR_RETURN(auto options, cache_.Get(p.model_key, p.spec, policy_->options_kind()));
  options_of_[key] = options;
  return options;
}

}  // namespace frenzy::server
