#include "server/daemon.h"

#include <fmt/core.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <functional>
#include <random>
#include <set>
#include <unordered_map>

#include "common/json_limits.h"
#include "common/strings.h"
#include "model/hf_config.h"
#include "model/zoo.h"
#include "planner/explain.h"
#include "runtime/actions.h"

namespace frenzy::server {
namespace {

using nlohmann::json;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Fields a job spec may hold. Jobs never name GPUs or layouts: choosing them is Frenzy's job.
const std::set<std::string> kSpecFields = {"name",    "model",     "tokens",   "global_batch",
                                           "seq_len", "precision", "priority", "user"};
const std::set<std::string> kGpuFields = {
    "gpu", "gpus", "gpu_type", "gpu_count", "requested_gpu", "requested_gpus", "nodes",    "tp",
    "pp",  "dp",   "cp",       "ep",        "micro_batch",   "zero",           "recompute"};

int64_t KeyOf(const std::string& id) {
  // "j-000042" -> 42
  size_t dash = id.find('-');
  return dash == std::string::npos ? -1 : std::strtoll(id.c_str() + dash + 1, nullptr, 10);
}

bool ContainsNoCase(const std::string& text, const std::string& needle) {
  auto it = std::search(text.begin(), text.end(), needle.begin(), needle.end(),
                        [](char a, char b) { return std::tolower(a) == std::tolower(b); });
  return it != text.end();
}

std::string Describe(const Plan& p) {
  return fmt::format("{} x {} (tp {}, pp {}, dp {}, micro-batch {}, zero {}, recompute {})", p.gpus,
                     p.gpu, p.tp, p.pp, p.dp, p.micro_batch, p.zero, RecomputeName(p.recompute));
}

// Stored JSON is read back bounded: a row planted or damaged on disk must not crash a reader.
json ParseOr(const std::string& text, json fallback) {
  return ParseJsonOr(text, std::move(fallback));
}

// Report bounds. A step trains at least one token, so neither may pass the job's tokens; no GPU
// holds a terabyte.
constexpr double kMaxPeakBytes = 1099511627776.0;  // 1 TiB

std::string Sha256Hex(const std::string& text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(text.data(), text.size(), digest, &len, EVP_sha256(), nullptr);
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

// 256 random bits, hex: a run's token.
std::string NewRunToken() {
  std::random_device rd("/dev/urandom");
  std::string t;
  for (int i = 0; i < 8; ++i) t += fmt::format("{:08x}", rd());
  return "run-" + t;
}

// Fields of a heartbeat's GPU that are stored, with their types; anything else is dropped.
Result<json> CleanGpuReading(const json& g, size_t i) {
  const std::string at = fmt::format("gpus[{}]", i);
  if (!g.is_object()) return InvalidArgument("each GPU must be an object", {}, at);
  json out = json::object();
  for (const char* key : {"gpu", "name"}) {
    if (!g.contains(key)) continue;
    if (!g[key].is_string() || g[key].get_ref<const std::string&>().size() > 128) {
      return InvalidArgument("must be a string of at most 128 characters", {}, at + "." + key);
    }
    out[key] = g[key];
  }
  if (g.contains("index")) {
    if (!g["index"].is_number_integer() || g["index"].get<int64_t>() < 0 ||
        g["index"].get<int64_t>() > 1024) {
      return InvalidArgument("must be an integer in [0, 1024]", {}, at + ".index");
    }
    out["index"] = g["index"];
  }
  for (const char* key : {"memory_total_bytes", "memory_used_bytes"}) {
    if (!g.contains(key)) continue;
    if (!g[key].is_number_integer() || g[key].get<int64_t>() < 0 ||
        g[key].get<double>() > kMaxPeakBytes) {
      return InvalidArgument("must be an integer number of bytes in [0, 1 TiB]", {},
                             at + "." + key);
    }
    out[key] = g[key];
  }
  return out;
}

}  // namespace

struct Daemon::Parsed {
  JobSpec spec;
  std::string model_key;   // zoo name, or "inline:<hash>"
  std::string model_name;  // for listings
  json normalized;         // what the store keeps
};

Daemon::Daemon(DaemonOptions o, std::unique_ptr<Store> s, std::unique_ptr<Backend> b,
               std::function<double()> now, Cluster c)
    : opt_(std::move(o)),
      store_(std::move(s)),
      backend_(std::move(b)),
      backend_name_(backend_->name()),
      now_s_(std::move(now)),
      cluster_(std::move(c)),
      catalog_(GpuCatalog::Default()),
      cache_(cluster_, catalog_, opt_.memory_margin) {}

Result<std::unique_ptr<Daemon>> Daemon::Create(DaemonOptions options, std::unique_ptr<Store> store,
                                               std::unique_ptr<Backend> backend,
                                               std::function<double()> now_s) {
  ASSIGN_OR_RETURN(std::vector<BackendNode> nodes, backend->Nodes());
  const GpuCatalog& catalog = GpuCatalog::Default();
  Cluster c;
  c.name = std::string(backend->name());
  for (const BackendNode& n : nodes) {
    const GpuType* g = catalog.Find(n.gpu);
    if (g == nullptr) {
      return NotFound(fmt::format("node '{}' has GPUs of unknown type '{}'", n.name, n.gpu),
                      std::string(backend->name()), "gpu");
    }
    Node node;
    node.name = n.name;
    node.gpu = g->name;
    node.gpus = n.gpus;
    node.network_gbs = 12.5;  // 100 Gb/s Ethernet unless a cluster file says otherwise
    c.nodes.push_back(node);
  }
  if (c.nodes.empty()) {
    return Status(StatusCode::kFailedPrecondition, "the backend reports no nodes with GPUs",
                  std::string(backend->name()));
  }
  auto policy = MakePolicy(options.policy);
  if (!policy.ok()) return policy.status();
  std::unique_ptr<Daemon> d(new Daemon(std::move(options), std::move(store), std::move(backend),
                                       std::move(now_s), std::move(c)));
  d->policy_ = std::move(policy).value();
  for (const Node& n : d->cluster_.nodes) {
    auto it = std::find(d->view_.types.begin(), d->view_.types.end(), n.gpu);
    if (it == d->view_.types.end()) {
      d->view_.types.push_back(n.gpu);
      d->view_.gpu_memory_bytes.push_back(catalog.Find(n.gpu)->memory_bytes);
      d->view_.gpus_per_node.push_back(0);
      it = d->view_.types.end() - 1;
    }
    size_t t = static_cast<size_t>(it - d->view_.types.begin());
    d->view_.gpus_per_node[t] = std::max(d->view_.gpus_per_node[t], n.gpus);
    d->node_index_[n.name] = static_cast<int>(d->view_.nodes.size());
    d->view_.nodes.push_back(NodeView{static_cast<int>(t), n.gpus, n.gpus, true});
  }
  RETURN_IF_ERROR(d->LoadStored());
  return d;
}

Status Daemon::LoadStored() {
  // Stored rows are checked before use: one that cannot be read (damaged, planted, or from a
  // version that accepted what this one refuses) is quarantined and reported, and the daemon
  // runs on with the rest. A queued or running one is ended as failed with the reason; its
  // stored spec stays as it was for an operator to look at.
  auto bad_json = [](const std::string& text, bool object) {
    if (text.empty()) return false;
    json j = ParseJsonOr(text, json());
    return j.is_null() || (object && !j.is_object());
  };
  ASSIGN_OR_RETURN(auto rows, store_->ListJobs());
  const double now = now_s_();
  for (JobRow& r : rows) {
    std::string why;
    if (r.spec.empty() || bad_json(r.spec, true)) {
      why = "its spec is not a JSON object within the limits";
    } else if (bad_json(r.plan, true) || bad_json(r.allocation, false)) {
      why = "its plan or allocation is not JSON within the limits";
    } else if (!Terminal(r.state)) {
      json spec = ParseOr(r.spec, json::object());
      spec.erase("model_key");
      if (auto parsed = ParseSpec(spec); !parsed.ok()) {
        why = "its spec is no longer accepted: " + parsed.status().ToString();
      }
    }
    if (why.empty()) {
      if (!Terminal(r.state)) {
        int64_t key = KeyOf(r.id);
        Hold(key, r);
        active_.emplace(key, std::move(r));
      }
      continue;
    }
    ++quarantined_;
    quarantine_notes_.push_back(fmt::format("job {}: {}", r.id, why));
    if (!Terminal(r.state)) {
      if (r.state == JobState::kRunning && !r.handle.empty()) {
        (void)backend_->Cancel(r.handle);  // nothing can follow it without a readable spec
      }
      r.state = JobState::kFailed;
      r.updated_s = r.finished_s = now;
      r.allocation.clear();
      r.message = "quarantined at start-up: " + why;
      RETURN_IF_ERROR(store_->UpdateJob(r, "quarantined", why));
    }
  }
  ASSIGN_OR_RETURN(auto nodes, store_->Nodes());
  for (const NodeRow& n : nodes) {
    if (bad_json(n.readings, true)) {
      ++quarantined_;
      quarantine_notes_.push_back(
          fmt::format("node {}: its last heartbeat is not JSON within the limits (not shown)",
                      n.name.substr(0, 128)));
    }
  }
  return Status::Ok();
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

Result<json> Daemon::Submit(const json& body) {
  // Parsing and the option table (planning every layout: seconds for a large new model) run
  // without the daemon's lock; only the insert takes it.
  ASSIGN_OR_RETURN(Parsed p, ParseSpec(body));
  ASSIGN_OR_RETURN(auto options, cache_.Get(p.model_key, p.spec, policy_->options_kind()));
  if (options->options.empty()) {
    PlannerOptions po;
    po.memory_margin = opt_.memory_margin;
    auto planned = PlanJob(p.spec, cluster_, catalog_, po);
    std::string why = planned.ok() ? ExplainPlan(*planned, po) : planned.status().message();
    return Status(StatusCode::kFailedPrecondition,
                  "no GPU type and count of this cluster can hold the job: " + why, {}, "model");
  }
  JobRow row;
  row.spec = DumpJson(p.normalized);
  row.model = p.model_name;
  row.state = JobState::kQueued;
  row.total_tokens = p.spec.tokens;
  std::lock_guard<std::mutex> lock(mu_);
  row.submitted_s = row.updated_s = now_s_();
  ASSIGN_OR_RETURN(std::string id, store_->InsertJob(row, p.model_name));
  row.id = id;
  active_.emplace(KeyOf(id), row);
  dirty_ = true;
  ++submissions_;
  return JobJson(row, false);
}

json Daemon::JobJson(const JobRow& r, bool detail) {
  json j = {{"id", r.id},
            {"model", r.model},
            {"state", JobStateName(r.state)},
            {"submitted_s", r.submitted_s},
            {"updated_s", r.updated_s},
            {"attempt", r.attempt},
            {"progress",
             {{"tokens_done", r.done_tokens},
              {"tokens_total", r.total_tokens},
              {"fraction", r.total_tokens > 0 ? r.done_tokens / r.total_tokens : 0.0},
              {"step", r.step}}},
            {"message", r.message}};
  json spec = ParseOr(r.spec, json::object());
  if (spec.contains("name")) j["name"] = spec["name"];
  if (r.started_s >= 0) j["started_s"] = r.started_s;
  if (r.finished_s >= 0) j["finished_s"] = r.finished_s;
  json plan = ParseOr(r.plan, nullptr);
  j["plan"] = plan;
  j["memory"] = {{"predicted_bytes", r.predicted_bytes},
                 {"observed_bytes", r.observed_bytes},
                 {"factor", r.memory_factor > 0 ? json(r.memory_factor) : json(nullptr)},
                 {"note", r.memory_note}};
  if (detail) {
    j["spec"] = spec;
    j["why"] = r.why;
    j["allocation"] = ParseOr(r.allocation, json::array());
    j["handle"] = r.handle;
    json ev = json::array();
    if (auto events = store_->Events(r.id, 50); events.ok()) {
      for (const EventRow& e : *events) {
        ev.push_back({{"t_s", e.t_s}, {"kind", e.kind}, {"detail", e.detail}});
      }
    }
    j["events"] = ev;
  }
  return j;
}

Result<json> Daemon::GetJob(const std::string& id) {
  // The store is thread-safe and has every committed change: no need to wait for the loop.
  ASSIGN_OR_RETURN(auto row, store_->GetJob(id));
  if (!row) return NotFound("no job '" + id + "'", {}, "id");
  return JobJson(*row, true);
}

Result<json> Daemon::ListJobs(const std::string& state_filter, int64_t limit) {
  std::vector<JobState> states;
  if (!state_filter.empty()) {
    auto st = JobStateFromName(state_filter);
    if (!st) return InvalidArgument("unknown state '" + state_filter + "'", {}, "state");
    states.push_back(*st);
  }
  ASSIGN_OR_RETURN(auto rows, store_->ListJobs(states, limit));
  json out = json::array();
  for (const JobRow& r : rows) out.push_back(JobJson(r, false));
  return json{{"jobs", out}};
}

Result<JobRow> Daemon::FindJob(const std::string& id) {
  if (auto it = active_.find(KeyOf(id)); it != active_.end() && it->second.id == id) {
    return it->second;
  }
  ASSIGN_OR_RETURN(auto stored, store_->GetJob(id));  // an ended job
  if (!stored) return NotFound("no job '" + id + "'", {}, "id");
  return *std::move(stored);
}

Result<json> Daemon::Cancel(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(JobRow row, FindJob(id));
  if (Terminal(row.state)) {
    return Status(StatusCode::kFailedPrecondition,
                  fmt::format("job '{}' already {}", id, JobStateName(row.state)), {}, "id");
  }
  if (row.state == JobState::kRunning && !row.handle.empty()) {
    RETURN_IF_ERROR(backend_->Cancel(row.handle));
  }
  RETURN_IF_ERROR(
      End(row, JobState::kCancelled, now_s_(), "cancelled by request", "cancelled", "by request"));
  monitor_.Forget(KeyOf(id));
  return JobJson(row, false);
}

Result<json> Daemon::Report(const std::string& id, const json& body) {
  if (!body.is_object()) return InvalidArgument("a report must be a JSON object", {}, "");
  auto field = [&](const char* key, bool required, bool integer,
                   double hi) -> Result<std::optional<double>> {
    if (!body.contains(key)) {
      if (required) return InvalidArgument("missing", {}, key);
      return std::optional<double>();
    }
    const json& v = body[key];
    double x = v.is_number() ? v.get<double>() : -1;
    if (!v.is_number() || (integer && x != std::floor(x)) || !(x >= 0 && x <= hi)) {
      return InvalidArgument(fmt::format("must be a non-negative {} of at most {:g}",
                                         integer ? "integer" : "number", hi),
                             {}, key);
    }
    return std::optional<double>(x);
  };
  // Types and absolute bounds first (a job has at most 1e15 tokens, see ParseSpec), then the
  // job's own total under the lock.
  ASSIGN_OR_RETURN(auto step, field("step", true, true, 1e15));
  ASSIGN_OR_RETURN(auto tokens, field("tokens", true, false, 1e15));
  ASSIGN_OR_RETURN(auto peak, field("peak_bytes", false, false, kMaxPeakBytes));
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(JobRow row, FindJob(id));
  if (row.state != JobState::kRunning) {
    return Status(StatusCode::kFailedPrecondition,
                  fmt::format("job '{}' is {}, not running", id, JobStateName(row.state)), {},
                  "id");
  }
  // A step trains at least one token: neither passes the job's total.
  RETURN_IF_ERROR(field("step", true, true, row.total_tokens).status());
  RETURN_IF_ERROR(field("tokens", true, false, row.total_tokens).status());
  // Within one run, progress only goes forward (a resumed run is a new attempt and may restart
  // from an earlier checkpoint).
  const int64_t key = KeyOf(id);
  auto& last = last_report_[key];
  if (last.attempt != row.attempt) last = LastReport{row.attempt, 0, 0};
  if (*step < last.step || *tokens < last.tokens) {
    return Status(StatusCode::kFailedPrecondition,
                  fmt::format("progress went back within attempt {}: step {:.0f} after {:.0f}, "
                              "tokens {:.0f} after {:.0f}",
                              row.attempt, *step, last.step, *tokens, last.tokens),
                  {}, *step < last.step ? "step" : "tokens");
  }
  last.step = *step;
  last.tokens = *tokens;
  row.step = static_cast<int64_t>(*step);
  row.done_tokens = std::min(row.total_tokens, std::max(row.done_tokens, *tokens));
  row.updated_s = now_s_();
  if (peak && *peak) {
    row.observed_bytes = static_cast<int64_t>(*peak);
    json plan = ParseOr(row.plan, json::object());
    int64_t predicted = plan.value("device_bytes", int64_t{0});
    int64_t capacity = plan.value("gpu_memory_bytes", int64_t{0});
    if (predicted > 0 && capacity > 0) {
      runtime::MemoryReport r;
      r.t_s = row.updated_s;
      r.progress = row.total_tokens > 0 ? row.done_tokens / row.total_tokens : 0;
      r.peak_bytes = row.observed_bytes;
      r.predicted_bytes = predicted;
      r.capacity_bytes = capacity;
      monitor_.Report(key, r);
      double factor = monitor_.Factor(key).value_or(0.0);
      if (factor != row.memory_factor) dirty_ = true;
      row.memory_factor = factor;
      row.memory_note = monitor_.Explain(key);
    }
  }
  RETURN_IF_ERROR(Save(row, "", ""));
  return json{{"ok", true}, {"memory_factor", row.memory_factor}};
}

Result<json> Daemon::Heartbeat(const std::string& node, const json& body) {
  if (!body.is_object() || !body.contains("gpus") || !body["gpus"].is_array()) {
    return InvalidArgument("a heartbeat needs a 'gpus' array", {}, "gpus");
  }
  if (body["gpus"].size() > 1024) return InvalidArgument("over 1,024 GPUs on a node", {}, "gpus");
  NodeRow n;
  n.name = node;
  n.gpus = static_cast<int64_t>(body["gpus"].size());
  // Only what the daemon reads is stored, with its type checked: the stored heartbeat is served
  // to anyone who asks for the cluster.
  json gpus = json::array();
  for (size_t i = 0; i < body["gpus"].size(); ++i) {
    ASSIGN_OR_RETURN(json g, CleanGpuReading(body["gpus"][i], i));
    if (n.gpu.empty()) n.gpu = g.value("gpu", g.value("name", std::string()));
    gpus.push_back(std::move(g));
  }
  json readings = {{"gpus", gpus}};
  if (body.contains("source") && body["source"].is_string() &&
      body["source"].get_ref<const std::string&>().size() <= 64) {
    readings["source"] = body["source"];
  }
  n.up = true;
  n.readings = DumpJson(readings);
  std::lock_guard<std::mutex> lock(mu_);
  n.last_seen_s = now_s_();
  RETURN_IF_ERROR(store_->UpsertNode(n));
  return json{{"ok", true}};
}

bool Daemon::RunTokenValid(const std::string& id, const std::string& token) {
  if (token.empty()) return false;
  const std::string hash = Sha256Hex(token);
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t key = KeyOf(id);
  auto it = run_token_hash_.find(key);
  if (it == run_token_hash_.end()) {
    auto stored = store_->RunTokenHash(id);  // a run launched before a restart
    if (!stored.ok() || stored->empty()) return false;
    it = run_token_hash_.emplace(key, *stored).first;
  }
  return EqualConstantTime(hash, it->second);
}

Status Daemon::CheckStore() const { return store_->CheckFile(); }

json Daemon::ClusterJson() {
  std::lock_guard<std::mutex> lock(mu_);
  json nodes = json::array();
  for (size_t i = 0; i < cluster_.nodes.size(); ++i) {
    const Node& n = cluster_.nodes[i];
    const NodeView& v = view_.nodes[i];
    nodes.push_back(
        {{"name", n.name}, {"gpu", n.gpu}, {"gpus", n.gpus}, {"free", v.free}, {"up", v.up}});
  }
  json types = json::array();
  for (size_t t = 0; t < view_.types.size(); ++t) {
    types.push_back({{"gpu", view_.types[t]},
                     {"memory_bytes", view_.gpu_memory_bytes[t]},
                     {"gpus", view_.TotalOfType(static_cast<int>(t))},
                     {"free", view_.FreeOfType(static_cast<int>(t))}});
  }
  json agents = json::array();
  if (auto rows = store_->Nodes(); rows.ok()) {
    for (const NodeRow& r : *rows) {
      agents.push_back({{"name", r.name},
                        {"gpu", r.gpu},
                        {"gpus", r.gpus},
                        {"last_seen_s", r.last_seen_s},
                        {"readings", ParseOr(r.readings, nullptr)}});
    }
  }
  return json{{"backend", backend_name_}, {"types", types}, {"nodes", nodes}, {"agents", agents}};
}

Result<json> Daemon::Plan(const json& body) {
  // No lock: the cluster and catalog never change after Create, and a plan of a large model
  // must not hold submissions up.
  ASSIGN_OR_RETURN(Parsed p, ParseSpec(body));
  PlannerOptions po;
  po.memory_margin = opt_.memory_margin;
  po.top = 5;
  ASSIGN_OR_RETURN(PlanResult r, PlanJob(p.spec, cluster_, catalog_, po));
  json plans = json::array();
  for (const auto& pl : r.plans) plans.push_back(PlanToJson(pl));
  return json{{"plans", plans},
              {"explanation", ExplainPlan(r, po)},
              {"infeasible", InfeasibleOrNull(r)}};
}

std::string Daemon::Metrics() {
  std::lock_guard<std::mutex> lock(mu_);
  std::string s;
  s += "# HELP frenzy_jobs Jobs by state.\n# TYPE frenzy_jobs gauge\n";
  const auto running = static_cast<int64_t>(running_.size());
  const auto queued = static_cast<int64_t>(active_.size()) - running;
  s += fmt::format("frenzy_jobs{{state=\"queued\"}} {}\n", queued);
  s += fmt::format("frenzy_jobs{{state=\"running\"}} {}\n", running);
  for (JobState st : {JobState::kSucceeded, JobState::kFailed, JobState::kCancelled}) {
    auto n = store_->CountJobs(st);
    s += fmt::format("frenzy_jobs{{state=\"{}\"}} {}\n", JobStateName(st), n.ok() ? *n : -1);
  }
  s += "# HELP frenzy_quarantined_rows Stored rows that could not be loaded at start-up (see the "
       "log).\n# TYPE frenzy_quarantined_rows gauge\n";
  s += fmt::format("frenzy_quarantined_rows {}\n", quarantined_);
  s += "# HELP frenzy_queue_length Jobs waiting for GPUs.\n# TYPE frenzy_queue_length gauge\n";
  s += fmt::format("frenzy_queue_length {}\n", queued);
  s += "# HELP frenzy_gpus GPUs per type: total and used.\n# TYPE frenzy_gpus gauge\n";
  for (size_t t = 0; t < view_.types.size(); ++t) {
    int64_t total = view_.TotalOfType(static_cast<int>(t));
    int64_t used = total - view_.FreeOfType(static_cast<int>(t));
    s += fmt::format("frenzy_gpus{{type=\"{}\",kind=\"total\"}} {}\n", view_.types[t], total);
    s += fmt::format("frenzy_gpus{{type=\"{}\",kind=\"used\"}} {}\n", view_.types[t], used);
  }
  s += "# HELP frenzy_job_memory_bytes Peak memory per GPU of running jobs: predicted and "
       "observed.\n# TYPE frenzy_job_memory_bytes gauge\n";
  for (const auto& [key, placement] : running_) {
    const JobRow& r = active_.at(key);
    s += fmt::format("frenzy_job_memory_bytes{{job=\"{}\",kind=\"predicted\"}} {}\n", r.id,
                     r.predicted_bytes);
    s += fmt::format("frenzy_job_memory_bytes{{job=\"{}\",kind=\"observed\"}} {}\n", r.id,
                     r.observed_bytes);
  }
  s += "# HELP frenzy_schedule_seconds Time of the control loop's scheduling passes.\n"
       "# TYPE frenzy_schedule_seconds summary\n";
  s += fmt::format("frenzy_schedule_seconds_sum {:.6f}\nfrenzy_schedule_seconds_count {}\n",
                   schedule_s_total_, passes_);
  s += "# HELP frenzy_ticks_total Control-loop ticks (a tick asks the policy only when something "
       "changed or it has not for a while).\n# TYPE frenzy_ticks_total counter\n";
  s += fmt::format("frenzy_ticks_total {}\n", ticks_);
  s += fmt::format(
      "# TYPE frenzy_schedule_last_seconds gauge\nfrenzy_schedule_last_seconds {:.6f}\n",
      last_schedule_s_);
  s += fmt::format(
      "# HELP frenzy_schedule_locked_last_seconds How long the last pass held the daemon's lock "
      "(taking the snapshot and applying the decisions; the policy decides without it).\n"
      "# TYPE frenzy_schedule_locked_last_seconds gauge\nfrenzy_schedule_locked_last_seconds "
      "{:.6f}\n",
      last_locked_s_);
  s += fmt::format("# TYPE frenzy_submissions_total counter\nfrenzy_submissions_total {}\n",
                   submissions_);
  s += fmt::format("# TYPE frenzy_launches_total counter\nfrenzy_launches_total {}\n", launches_);
  return s;
}

Status Daemon::Requeue(JobRow& row, double now, const std::string& kind, const std::string& why) {
  row.state = JobState::kQueued;
  row.updated_s = now;
  row.handle.clear();
  row.allocation.clear();
  row.message = why;
  return Save(row, kind, why);
}

Status Daemon::End(JobRow& row, JobState state, double now, const std::string& message,
                   const std::string& kind, const std::string& detail) {
  row.state = state;
  row.updated_s = row.finished_s = now;
  row.allocation.clear();
  row.message = message;
  return Save(row, kind, detail);
}

Status Daemon::Stop(JobRow row, double now, const std::string& kind, const std::string& why) {
  RETURN_IF_ERROR(backend_->Cancel(row.handle));
  return Requeue(row, now, kind, why);
}

Status Daemon::Save(JobRow& row, const std::string& kind, const std::string& detail) {
  RETURN_IF_ERROR(store_->UpdateJob(row, kind, detail));
  const int64_t key = KeyOf(row.id);
  Hold(key, row);
  if (Terminal(row.state)) {
    active_.erase(key);
    options_of_.erase(key);
  } else {
    active_[key] = row;
  }
  if (!kind.empty()) dirty_ = true;  // an event: a state change the policy should see
  return Status::Ok();
}

void Daemon::Hold(int64_t key, const JobRow& row) {
  if (auto it = running_.find(key); it != running_.end()) {
    for (const auto& [n, g] : it->second) view_.nodes[static_cast<size_t>(n)].free += g;
    running_.erase(it);
  }
  if (row.state != JobState::kRunning) return;
  std::vector<std::pair<int, int64_t>> placement;
  for (const json& p : ParseOr(row.allocation, json::array())) {
    if (!p.is_array() || p.size() != 2 || !p[0].is_string() || !p[1].is_number_integer()) {
      continue;
    }
    auto node = node_index_.find(p[0].get<std::string>());
    if (node == node_index_.end()) continue;  // a node the backend no longer reports
    placement.emplace_back(node->second, p[1].get<int64_t>());
    view_.nodes[static_cast<size_t>(node->second)].free -= placement.back().second;
  }
  running_.emplace(key, std::move(placement));
}

Status Daemon::FollowRuns(double now, const std::unordered_map<int64_t, Polled>& polled,
                          int& changes) {
  std::vector<JobRow> rows;
  for (const auto& [key, placement] : running_) rows.push_back(active_.at(key));
  for (JobRow& row : rows) {
    auto poll = polled.find(KeyOf(row.id));
    // Launched, moved or cancelled since the poll: asked again next tick.
    if (poll == polled.end() || poll->second.handle != row.handle) continue;
    const Result<RunStatus>& st = poll->second.status;
    if (!st.ok()) {
      row.message = "backend: " + st.status().ToString();
      continue;  // asked again next pass
    }
    const int64_t key = KeyOf(row.id);
    json plan = ParseOr(row.plan, json::object());
    bool dirty = false;
    if (st->progress >= 0) {
      double done = std::min(row.total_tokens, st->progress * row.total_tokens);
      if (done > row.done_tokens) {
        row.done_tokens = done;
        dirty = true;
      }
    }
    if (st->peak_bytes > 0 && st->peak_bytes != row.observed_bytes) {
      row.observed_bytes = st->peak_bytes;
      runtime::MemoryReport r;
      r.t_s = now;
      r.progress = row.total_tokens > 0 ? row.done_tokens / row.total_tokens : 0;
      r.peak_bytes = st->peak_bytes;
      r.predicted_bytes = plan.value("device_bytes", int64_t{0});
      r.capacity_bytes = plan.value("gpu_memory_bytes", int64_t{0});
      monitor_.Report(key, r);
      row.memory_factor = monitor_.Factor(key).value_or(0.0);
      row.memory_note = monitor_.Explain(key);
      dirty = true;
    }
    switch (st->state) {
      case RunState::kPending:
      case RunState::kRunning:
        if (dirty) {
          row.updated_s = now;
          RETURN_IF_ERROR(Save(row, "", ""));
        }
        break;
      case RunState::kSucceeded:
        row.done_tokens = row.total_tokens;
        monitor_.Finish(key);
        RETURN_IF_ERROR(End(row, JobState::kSucceeded, now, "finished", "succeeded", st->message));
        ++changes;
        break;
      case RunState::kCancelled:
        monitor_.Forget(key);
        RETURN_IF_ERROR(End(row, JobState::kCancelled, now, "cancelled outside Frenzy", "cancelled",
                            st->message));
        ++changes;
        break;
      case RunState::kLost:
        RETURN_IF_ERROR(
            Requeue(row, now, "lost", "the run disappeared: requeued from its last checkpoint"));
        ++changes;
        break;
      case RunState::kFailed: {
        if (ContainsNoCase(st->message, "out of memory")) {
          // The runtime learns from the crash; the layout that crashed no longer fits.
          monitor_.ReportOom(key, plan.value("device_bytes", int64_t{0}),
                             plan.value("gpu_memory_bytes", int64_t{0}));
          JobView v;
          v.key = key;
          ASSIGN_OR_RETURN(auto options, OptionsFor(row));
          v.options = options.get();
          v.ooms = static_cast<int>(monitor_.Find(key) ? monitor_.Find(key)->ooms - 1 : 0);
          runtime::OomRecovery rec = runtime::RecoverFromOom(v, monitor_, view_, runtime_opt_);
          row.memory_factor = rec.factor;
          row.memory_note = monitor_.Explain(key);
          if (rec.give_up) {
            RETURN_IF_ERROR(End(row, JobState::kFailed, now, rec.message, "failed", rec.message));
          } else {
            RETURN_IF_ERROR(Requeue(row, now, "out_of_memory", rec.message));
          }
          ++changes;
          break;
        }
        runtime::RetryDecision d =
            runtime::OnCrash(retry_[row.id], row.done_tokens, st->message, runtime::RetryOptions{});
        if (d.retry) {
          RETURN_IF_ERROR(Requeue(row, now, "crashed", d.message));
        } else {
          RETURN_IF_ERROR(End(row, JobState::kFailed, now, d.message, "failed", d.message));
        }
        ++changes;
        break;
      }
    }
  }
  return Status::Ok();
}

Status Daemon::Launch(JobRow& row, const JobView& v, const Allocation& alloc, double now) {
  const RunOption& o = v.option(alloc.option);
  int layout = std::max(0, v.Layout(alloc.option, view_));
  frenzy::Plan plan = v.PlanOf(alloc.option, layout);
  double left = std::max(0.0, row.total_tokens - row.done_tokens);
  plan.total_s = plan.tokens_per_s > 0 ? left / plan.tokens_per_s : 0;
  json spec = ParseOr(row.spec, json::object());
  LaunchSpec ls;
  ls.job_id = row.id;
  ls.name = row.model;
  ls.plan = plan;
  ls.attempt = row.attempt;
  json placement = json::array();
  for (const auto& [n, g] : alloc.placement) {
    const std::string& name = cluster_.nodes[static_cast<size_t>(n)].name;
    ls.placement.emplace_back(name, g);
    ls.gpus_per_node = std::max(ls.gpus_per_node, g);
    placement.push_back({name, g});
  }
  ls.nodes = static_cast<int64_t>(alloc.placement.size());
  ls.command = opt_.train_command;
  ls.workdir = (std::filesystem::path(opt_.runs_dir) / row.id).string();
  std::error_code ec;
  std::filesystem::create_directories(ls.workdir, ec);
  if (ec) return InvalidArgument("cannot create " + ls.workdir + ": " + ec.message(), {}, "runs");
  json plan_json = PlanToJson(plan);
  plan_json["option"] = alloc.option;
  plan_json["layout"] = layout;
  plan_json["run_start_s"] = now;
  json train = plan_json;
  train["model"] = row.model;
  train["tokens"] = row.total_tokens;
  train["global_batch"] = spec.value("global_batch", int64_t{1});
  train["seq_len"] = spec.value("seq_len", int64_t{2048});
  train["precision"] = spec.value("precision", std::string("bf16"));
  ls.env["FRENZY_JOB_ID"] = row.id;
  ls.env["FRENZY_PLAN"] = DumpJson(train);
  ls.env["FRENZY_TOKENS"] = fmt::format("{:.0f}", row.total_tokens);
  ls.env["FRENZY_DONE_TOKENS"] = fmt::format("{:.0f}", row.done_tokens);
  if (!opt_.report_base_url.empty()) {
    ls.env["FRENZY_REPORT_URL"] = opt_.report_base_url + "/v1/jobs/" + row.id + "/report";
  }
  // The run reports with a token of its own, good for this job's reports only (never the admin
  // token: a training script can then not cancel or submit jobs); only its hash is stored.
  const std::string run_token = NewRunToken();
  const std::string run_token_hash = Sha256Hex(run_token);
  RETURN_IF_ERROR(store_->SetRunTokenHash(row.id, run_token_hash));
  run_token_hash_[KeyOf(row.id)] = run_token_hash;
  ls.env["FRENZY_TOKEN"] = run_token;
  auto handle = backend_->Launch(ls);
  ++row.attempt;
  row.updated_s = now;
  if (!handle.ok()) {
    std::string why = "the backend could not launch it: " + handle.status().ToString();
    return End(row, JobState::kFailed, now, why, "failed", why);
  }
  // Why this plan: its rank among the job's options that fit, and its memory.
  int runnable = 0, faster = 0;
  for (size_t i = 0; i < v.options->options.size(); ++i) {
    if (!v.Runnable(static_cast<int>(i), view_)) continue;
    ++runnable;
    if (v.options->options[i].plan.tokens_per_s > o.plan.tokens_per_s) ++faster;
  }
  row.why = fmt::format(
      "{} by policy '{}': {:.0f} tokens/s, predicted {:.1f} of {:.0f} GiB per GPU{}; option {} "
      "of the {} memory-safe ones by speed ({} faster ones were busy or worth less to the queue)",
      Describe(plan), policy_->name(), plan.tokens_per_s,
      static_cast<double>(plan.device_bytes) / kGiB,
      static_cast<double>(plan.gpu_memory_bytes) / kGiB,
      layout > 0 ? fmt::format(" (a leaner layout: memory factor {:.2f})", *v.memory_factor) : "",
      faster + 1, runnable, faster);
  row.state = JobState::kRunning;
  row.handle = *handle;
  if (row.started_s < 0) row.started_s = now;
  row.plan = DumpJson(plan_json);
  row.allocation = DumpJson(placement);
  row.predicted_bytes = plan.device_bytes;
  row.message = "running";
  ++launches_;
  return Save(row, "started",
              fmt::format("attempt {}: {} as {}", row.attempt, Describe(plan), *handle));
}

struct Daemon::Pass {
  ClusterView view;  // the cluster as the snapshot saw it (the policy reads it unlocked)
  std::vector<JobView> views;
  std::vector<std::shared_ptr<const JobOptions>> keep;  // the views' option tables
  // Per view: the job's state and attempt at the snapshot. A decision is applied only to a job
  // that still has both (not cancelled, ended or restarted meanwhile).
  std::vector<std::pair<JobState, int64_t>> seen;
  std::unordered_map<int64_t, size_t> index_of;  // job number -> views index
};

Status Daemon::PrepareSchedule(double now, Pass& pass, int& changes) {
  auto build = [&] {
    pass.views.clear();
    pass.keep.clear();
    pass.seen.clear();
    pass.index_of.clear();
    pass.views.reserve(active_.size());
    pass.keep.reserve(active_.size());
    pass.seen.reserve(active_.size());
    pass.index_of.reserve(active_.size());
    for (const auto& [key, r] : active_) {
      auto options = OptionsFor(r);
      if (!options.ok()) continue;
      pass.keep.push_back(*options);
      JobView v;
      v.key = key;
      pass.index_of[key] = pass.views.size();
      v.id = r.id;
      v.submit_s = r.submitted_s;
      v.options = options->get();
      v.total_tokens = r.total_tokens;
      v.done_tokens = r.done_tokens;
      v.progress_since_s = now;
      v.first_start_s = r.started_s;
      v.restarts = static_cast<int>(std::max<int64_t>(0, r.attempt - 1));
      if (r.memory_factor > 0) {
        v.memory_factor = r.memory_factor;
      } else if (auto f = monitor_.Factor(key)) {
        v.memory_factor = f;
      }
      if (!failed_options_.empty()) {
        if (auto it = failed_options_.find(r.id); it != failed_options_.end()) {
          v.failed_options = it->second;
        }
      }
      if (r.state == JobState::kRunning) {
        json plan = ParseOr(r.plan, json::object());
        v.running = true;
        v.alloc.option = plan.value("option", 0);
        v.layout = plan.value("layout", 0);
        v.run_start_s = plan.value("run_start_s", now);
        v.rate_tokens_per_s = plan.value("tokens_per_s", 0.0);
        v.alloc.placement = running_.at(key);
        if (v.alloc.option < 0 ||
            static_cast<size_t>(v.alloc.option) >= v.options->options.size()) {
          v.alloc.option = 0;
        }
      }
      pass.views.push_back(std::move(v));
      pass.seen.emplace_back(r.state, r.attempt);
    }
  };
  build();
  // The runtime first: jobs about to run out of memory checkpoint and are placed again with
  // their corrected memory factor (the policy sees them queued).
  if (policy_->uses_runtime()) {
    Snapshot s;
    s.now_s = now;
    s.cluster = &view_;
    s.jobs = pass.views;
    s.change_seq = passes_;
    s.costs.restart_s = opt_.restart_s;
    std::vector<runtime::MemoryAction> actions =
        runtime::PlanMemoryActions(s, monitor_, runtime_opt_);
    for (const runtime::MemoryAction& a : actions) {
      auto it = active_.find(a.job);
      if (it == active_.end() || it->second.state != JobState::kRunning) continue;
      JobRow row = it->second;
      row.memory_factor = a.factor;
      row.memory_note = monitor_.Explain(a.job);
      RETURN_IF_ERROR(Stop(row, now, "memory", a.why));
      ++changes;
    }
    if (!actions.empty()) build();
  }
  pass.view = view_;
  return Status::Ok();
}

Status Daemon::ApplySchedule(double now, Pass& pass, const Decisions& d, int& changes) {
  // view_ is the cluster now: runs cancelled since the snapshot have given their GPUs back.
  // The job's current row, if the decision still applies to it.
  auto current = [&](int64_t key) -> JobRow* {
    auto vi = pass.index_of.find(key);
    auto it = active_.find(key);
    if (vi == pass.index_of.end() || it == active_.end()) return nullptr;
    const auto& [state, attempt] = pass.seen[vi->second];
    if (it->second.state != state || it->second.attempt != attempt) return nullptr;
    return &it->second;
  };
  for (int64_t key : d.stop) {
    JobRow* row = current(key);
    if (row == nullptr || row->state != JobState::kRunning) continue;
    RETURN_IF_ERROR(
        Stop(*row, now, "preempted", "stopped by the scheduler; resumes from its checkpoint"));
    ++changes;
  }
  for (const auto& [key, alloc] : d.start) {
    JobRow* found = current(key);
    if (found == nullptr) {
      // A move of a job stopped above is still this pass's decision: the stop requeued it.
      auto it = active_.find(key);
      auto vi = pass.index_of.find(key);
      if (it == active_.end() || vi == pass.index_of.end() ||
          it->second.state != JobState::kQueued ||
          it->second.attempt != pass.seen[vi->second].second) {
        continue;
      }
      found = &it->second;
    }
    JobRow row = *found;
    JobView& v = pass.views[pass.index_of[key]];
    if (row.state == JobState::kRunning) {
      RETURN_IF_ERROR(Stop(row, now, "moved", "moved by the scheduler"));  // a move
      ++changes;
      row = active_.at(key);
    }
    bool fits = true;
    for (const auto& [n, g] : alloc.placement) {
      if (n < 0 || static_cast<size_t>(n) >= view_.nodes.size() ||
          view_.nodes[static_cast<size_t>(n)].free < g) {
        fits = false;
      }
    }
    if (!fits) continue;  // GPUs taken meanwhile, or a policy bug: the job stays queued
    v.running = false;
    v.alloc = Allocation{};
    RETURN_IF_ERROR(Launch(row, v, alloc, now));
    ++changes;
  }
  return Status::Ok();
}

Result<int> Daemon::Tick() {
  std::lock_guard<std::mutex> tick_lock(tick_mu_);
  int changes = 0;
  Pass pass;
  double now = 0;
  int64_t seq = 0;
  double locked = 0;  // how long this pass held the daemon's lock
  // The backend is asked about the running jobs without the lock; only its answers are applied
  // under it (tick_mu_ keeps other ticks out meanwhile).
  std::vector<std::pair<int64_t, std::string>> handles;
  {
    std::lock_guard<std::mutex> lock(mu_);
    handles.reserve(running_.size());
    for (const auto& [key, placement] : running_) handles.emplace_back(key, active_.at(key).handle);
  }
  std::unordered_map<int64_t, Polled> polled;
  for (const auto& [key, handle] : handles) {
    polled.emplace(key, Polled{handle, backend_->Status(handle)});
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    now = now_s_();
    ++ticks_;
    RETURN_IF_ERROR(FollowRuns(now, polled, changes));
    if (!dirty_ && changes == 0 && last_pass_s_ >= 0 && now - last_pass_s_ < opt_.idle_pass_s) {
      return changes;  // nothing new for the policy
    }
    if (dirty_ || changes > 0) ++change_seq_;
    seq = change_seq_;
    dirty_ = false;
    last_pass_s_ = now;
    RETURN_IF_ERROR(PrepareSchedule(now, pass, changes));
    locked = now_s_() - now;
  }
  // The policy decides on the snapshot while submissions, reports and reads go on.
  Snapshot s;
  s.now_s = now;
  s.cluster = &pass.view;
  s.jobs = pass.views;
  s.change_seq = seq;
  s.costs.restart_s = opt_.restart_s;
  Decisions d = policy_->Schedule(s);
  std::lock_guard<std::mutex> lock(mu_);
  const double apply_start = now_s_();
  // The pass's own launches and stops are no news to the policy; what arrived meanwhile is.
  const bool news = dirty_;
  Status applied = ApplySchedule(now, pass, d, changes);
  dirty_ = news || !applied.ok();
  RETURN_IF_ERROR(applied);
  double took = now_s_() - now;
  last_locked_s_ = locked + (now_s_() - apply_start);
  last_schedule_s_ = took;
  schedule_s_total_ += took;
  ++passes_;
  return changes;
}

Status Daemon::Checkpoint() {
  // Every checkpoint writes and syncs the database file beside the commits: a few large ones
  // disturb submissions less than one per tick (p99 5.2-5.7 ms against 8.4-10.3 ms at 3,000+
  // submissions/s, bench/RESULTS.md). The frame bound keeps the log's size in check.
  constexpr int64_t kMaxWalFrames = 65536;  // 256 MiB of 4 KiB pages
  const double now = now_s_();
  if (now - last_checkpoint_s_ < opt_.checkpoint_every_s && store_->WalFrames() < kMaxWalFrames) {
    return Status::Ok();
  }
  last_checkpoint_s_ = now;
  return store_->Checkpoint().status();
}

}  // namespace frenzy::server
