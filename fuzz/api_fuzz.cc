// libFuzzer target: the whole HTTP/JSON API (server::Handle) on a live daemon (sim backend, the
// bundled "lab" cluster, a real SQLite store in a fresh temporary folder, an injected clock).
//
// Decoding of one input (every input decodes to some request):
//   byte 0  method:  % 8 -> GET POST DELETE PUT PATCH HEAD "" <aux>
//   byte 1  path:    % 16 -> kPaths below; "<seg>" is replaced by the fuzzed segment
//   byte 2  bits 0-2 Authorization: 0-3 "Bearer fuzz-token-123" (the right one), 4 none,
//                    5 "Bearer fuzz-token-124" (wrong), 6 "Bearer " + aux, 7 aux
//           bits 3-5 all set: the API runs without a token (frenzyd on loopback: Host, Origin
//                    and Content-Type are checked instead); otherwise its token is
//                    "fuzz-token-123"
//   byte 3  headers and query, two bits each:
//           bits 0-1 Content-Type: "application/json", "application/json; charset=utf-8",
//                                  "text/plain", none
//           bits 2-3 Host:   none, "127.0.0.1:8470", "evil.example", aux
//           bits 4-5 Origin: none, "http://localhost:8470", "https://evil.example", aux
//           bits 6-7 query:  none, limit=aux, state=aux, limit=aux and state=running
//   rest    seg NUL aux NUL body. With a single NUL: seg NUL body (aux ""); with none: all body.
// Inputs under 4 bytes are padded with zeros (GET /healthz, right token, JSON).
// Bodies of /v1/jobs and /v1/plan naming a model over 8B parameters are not sent (see
// NamesAHugeModel): planning what fits nowhere takes seconds.
//
// The daemon lives across inputs: it starts with one job (gpt2, seq_len 1024: its position
// table) submitted and launched; the clock advances 0.25 s per input and the control loop ticks
// (and checkpoints) every 16 inputs.
// Once it holds over 16 jobs or agents, and every 2,048 inputs, it is rebuilt in a new folder
// (so each input stays cheap and the seeded job is found running again).
//
// Violations abort (libFuzzer reports them):
//   - Handle throws;
//   - the status is outside [200, 599], or is 500 (with a healthy store and the sim backend,
//     an internal error is a bug; set FRENZY_FUZZ_ALLOW_500=1 to let it pass);
//   - a response of status >= 400 is not a JSON object with string error.code,
//     error.message and error.field; a 2xx application/json response is not JSON;
//   - a request answered with status >= 400, or any GET, changed the stored state: a
//     fingerprint of the store (every column of every job, its latest event and run-token
//     hash, every agent row) is taken before (kept from the last allowed change) and after,
//     and the two must be byte-equal;
//   - a control-loop tick (or checkpoint) fails or throws.
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/json_limits.h"
#include "hardware/cluster.h"
#include "hardware/gpu.h"
#include "model/hf_config.h"
#include "model/param_count.h"
#include "model/zoo.h"
#include "server/api.h"
#include "server/daemon.h"
#include "backend/sim_backend.h"
#include "server/store.h"

namespace {

using frenzy::server::ApiOptions;
using frenzy::server::Daemon;
using frenzy::server::HttpRequest;
using frenzy::server::HttpResponse;
using nlohmann::json;

constexpr const char* kToken = "fuzz-token-123";
constexpr int kTickEvery = 16;
constexpr size_t kMaxJobs = 16, kMaxAgents = 16;  // then the daemon is rebuilt
constexpr uint64_t kRebuildEvery = 2048;          // inputs; and so is it this often

constexpr const char* kPaths[16] = {
    "/healthz",
    "/metrics",
    "/v1/jobs",
    "/v1/jobs/j-000001",
    "/v1/jobs/j-000001/report",
    "/v1/jobs/<seg>",
    "/v1/jobs/<seg>/report",
    "/v1/plan",
    "/v1/cluster",
    "/v1/nodes/<seg>/heartbeat",
    "/v1/nodes/a100-0/heartbeat",
    "<seg>",
    "/v1/jobs/j-000002",
    "/v1/jobs/j-000002/report",
    "/v1/jobs",
    "/v1/<seg>",
};

// The daemon's folder, removed before aborting too (the input alone reproduces a failure).
std::filesystem::path g_scratch;

void RemoveScratch() {
  std::error_code ec;
  if (!g_scratch.empty()) std::filesystem::remove_all(g_scratch, ec);
  g_scratch.clear();
}

[[noreturn]] void Fail(const char* what, const HttpRequest& r, const std::string& detail) {
  std::fprintf(stderr,
               "api_fuzz: %s\n  request: %s %s (auth '%s', type '%s', host '%s', "
               "origin '%s', %zu body bytes)\n  detail: %.2000s\n",
               what, r.method.c_str(), r.path.substr(0, 300).c_str(),
               r.authorization.substr(0, 100).c_str(), r.content_type.substr(0, 100).c_str(),
               r.host.substr(0, 100).c_str(), r.origin.substr(0, 100).c_str(), r.body.size(),
               detail.c_str());
  RemoveScratch();
  std::abort();
}

struct World {
  double now = 1000;
  std::filesystem::path dir;
  std::unique_ptr<Daemon> daemon;
  frenzy::server::Store* store = nullptr;  // owned by the daemon
  ApiOptions api, tokenless;               // tokenless: as on a loopback address
  uint64_t inputs = 0;
  // The fingerprint of the stored state since the last change allowed to happen (an accepted
  // mutating request, a tick, a rebuild), with its job and agent counts; "" when stale. Nothing
  // else changes the state: no thread runs beside the fuzzer.
  std::string known;
  size_t jobs = 0, agents = 0;

  World() {
    api.token = kToken;
    api.max_body_bytes = 64 << 10;
    tokenless = api;
    tokenless.token.clear();
    Build();
  }
  ~World() { Destroy(); }

  void Destroy() {
    daemon.reset();
    store = nullptr;
    RemoveScratch();
    dir.clear();
  }

  void Build() {
    Destroy();
    std::string tmpl = (std::filesystem::temp_directory_path() / "frenzy-api-fuzz-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) Die("set-up: mkdtemp failed");
    dir = g_scratch = tmpl;
    auto cluster = frenzy::ResolveCluster("lab", frenzy::GpuCatalog::Default());
    if (!cluster.ok()) Die("set-up: cluster: " + cluster.status().ToString());
    // Time scale 1: the seeded job runs for hours of fuzzing clock, so reports find it running.
    auto backend =
        std::make_unique<frenzy::server::SimBackend>(*cluster, 1.0, [this] { return now; });
    auto opened = frenzy::server::Store::Open((dir / "frenzy.db").string());
    if (!opened.ok()) Die("set-up: store: " + opened.status().ToString());
    store = opened->get();
    frenzy::server::DaemonOptions o;
    o.runs_dir = (dir / "runs").string();
    o.token = kToken;
    auto d =
        Daemon::Create(o, std::move(opened).value(), std::move(backend), [this] { return now; });
    if (!d.ok()) Die("set-up: daemon: " + d.status().ToString());
    daemon = std::move(d).value();
    auto job = daemon->Submit(
        json{{"model", "gpt2"}, {"tokens", 1e9}, {"global_batch", 8}, {"seq_len", 1024}});
    if (!job.ok()) Die("set-up: seed job: " + job.status().ToString());
    Tick();
  }

  [[noreturn]] static void Die(const std::string& why) {
    std::fprintf(stderr, "api_fuzz: %.2000s\n", why.c_str());
    RemoveScratch();
    std::abort();
  }

  // The control loop must neither fail nor throw (frenzyd's loop thread has no catch).
  void Tick() {
    try {
      auto t = daemon->Tick();
      if (!t.ok()) Die("tick: " + t.status().ToString());
      auto c = daemon->Checkpoint();
      if (!c.ok()) Die("checkpoint: " + c.ToString());
    } catch (const std::exception& e) {
      Die(std::string("the control loop threw: ") + e.what());
    }
  }

  // The stored state a refused request must leave alone, read from the store itself (every
  // column of every job, its latest event and run-token hash, every agent row), and its sizes
  // for the rebuild. Cheaper than the API's listings (no JSON to parse) and more complete.
  std::string Fingerprint(size_t* n_jobs = nullptr, size_t* n_agents = nullptr) {
    auto rows = store->ListJobs();
    if (!rows.ok()) Die("store ListJobs: " + rows.status().ToString());
    auto nodes = store->Nodes();
    if (!nodes.ok()) Die("store Nodes: " + nodes.status().ToString());
    if (n_jobs) *n_jobs = rows->size();
    if (n_agents) *n_agents = nodes->size();
    std::string f;
    auto put = [&f](const auto&... fields) {
      ((f += Field(fields), f += '\x1f'), ...);
      f += '\n';
    };
    for (const frenzy::server::JobRow& r : *rows) {
      put(r.id, r.spec, r.model, static_cast<int64_t>(r.state), r.submitted_s, r.updated_s,
          r.started_s, r.finished_s, r.plan, r.why, r.handle, r.attempt, r.total_tokens,
          r.done_tokens, r.step, r.predicted_bytes, r.observed_bytes, r.memory_factor,
          r.memory_note, r.message, r.allocation);
      auto last = store->Events(r.id, 1);
      auto hash = store->RunTokenHash(r.id);
      if (!last.ok() || !hash.ok()) Die("store Events/RunTokenHash of " + r.id);
      put(last->empty() ? int64_t{-1} : last->back().id, *hash);
    }
    for (const frenzy::server::NodeRow& n : *nodes) {
      put(n.name, n.gpu, n.gpus, static_cast<int64_t>(n.up), n.last_seen_s, n.readings);
    }
    return f;
  }
  static std::string Field(const std::string& s) { return s; }
  static std::string Field(int64_t v) { return std::to_string(v); }
  static std::string Field(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
  }
};

World& TheWorld() {
  static World w;
  return w;
}

std::string_view Take(std::string_view& rest) {
  size_t nul = rest.find('\0');
  if (nul == std::string_view::npos) return {};
  std::string_view field = rest.substr(0, nul);
  rest.remove_prefix(nul + 1);
  return field;
}

HttpRequest Decode(const uint8_t* data, size_t size) {
  uint8_t h[4] = {0, 0, 0, 0};
  for (size_t i = 0; i < 4 && i < size; ++i) h[i] = data[i];
  std::string_view rest;
  if (size > 4) rest = std::string_view(reinterpret_cast<const char*>(data) + 4, size - 4);
  std::string seg, aux;
  if (rest.find('\0') != std::string_view::npos) {
    seg = std::string(Take(rest));
    if (rest.find('\0') != std::string_view::npos) aux = std::string(Take(rest));
  }
  HttpRequest r;
  r.body = std::string(rest);
  r.peer = "127.0.0.1";
  static constexpr const char* kMethods[7] = {"GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", ""};
  r.method = h[0] % 8 == 7 ? aux : kMethods[h[0] % 8];
  std::string path = kPaths[h[1] % 16];
  if (size_t at = path.find("<seg>"); at != std::string::npos) path.replace(at, 5, seg);
  r.path = path;
  switch (h[2] % 8) {
    case 4:
      break;
    case 5:
      r.authorization = "Bearer fuzz-token-124";
      break;
    case 6:
      r.authorization = "Bearer " + aux;
      break;
    case 7:
      r.authorization = aux;
      break;
    default:
      r.authorization = std::string("Bearer ") + kToken;
      break;
  }
  static constexpr const char* kTypes[4] = {"application/json", "application/json; charset=utf-8",
                                            "text/plain", ""};
  r.content_type = kTypes[h[3] & 3];
  static constexpr const char* kHosts[3] = {"", "127.0.0.1:8470", "evil.example"};
  r.host = (h[3] >> 2 & 3) == 3 ? aux : kHosts[h[3] >> 2 & 3];
  static constexpr const char* kOrigins[3] = {"", "http://localhost:8470", "https://evil.example"};
  r.origin = (h[3] >> 4 & 3) == 3 ? aux : kOrigins[h[3] >> 4 & 3];
  switch (h[3] >> 6 & 3) {
    case 1:
      r.query["limit"] = aux;
      break;
    case 2:
      r.query["state"] = aux;
      break;
    case 3:
      r.query["limit"] = aux;
      r.query["state"] = "running";
      break;
    default:
      break;
  }
  return r;
}

// Whether a body names a model over 8B parameters (a zoo name or an inline config). Such jobs
// fit no GPU of the lab cluster with data parallelism alone, and a plan that fits nothing goes
// on to plan on ever bigger copies of the cluster to say what would hold it: seconds per call
// in this build (70B: about 6 s), which would eat the fuzzer's time and brush its timeout.
// Those requests are not sent (the input is rejected).
bool NamesAHugeModel(const std::string& body) try {
  if (frenzy::JsonDepth(body, 64) > 64) return false;
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("model")) return false;
  const json& model = j["model"];
  std::optional<frenzy::ModelSpec> spec;
  if (model.is_string()) {
    spec = frenzy::FindZooModel(model.get<std::string>());
  } else if (model.is_object()) {
    if (auto parsed = frenzy::ParseHfConfig(model, "model"); parsed.ok()) spec = *parsed;
  }
  return spec && frenzy::TotalParams(*spec) > 8'000'000'000;
} catch (...) {
  return false;  // whatever throws here throws in Handle too, where it is caught and reported
}

// A >= 400 body must be {"error": {"code": str, "message": str, "field": str}}.
bool WellFormedError(const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("error") || !j["error"].is_object()) return false;
  const json& e = j["error"];
  for (const char* key : {"code", "message", "field"}) {
    if (!e.contains(key) || !e[key].is_string()) return false;
  }
  return !e["code"].get_ref<const std::string&>().empty() &&
         !e["message"].get_ref<const std::string&>().empty();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = TheWorld();
  static const bool allow_500 = std::getenv("FRENZY_FUZZ_ALLOW_500") != nullptr;
  HttpRequest req = Decode(data, size);
  if ((req.path == "/v1/jobs" || req.path == "/v1/plan") && NamesAHugeModel(req.body)) return -1;
  w.now += 0.25;
  if (w.known.empty()) w.known = w.Fingerprint(&w.jobs, &w.agents);
  HttpResponse resp;
  try {
    const bool without_token = (size > 2 ? data[2] >> 3 & 7 : 0) == 7;
    resp = frenzy::server::Handle(*w.daemon, req, without_token ? w.tokenless : w.api);
  } catch (const std::exception& e) {
    Fail("Handle threw", req, e.what());
  } catch (...) {
    Fail("Handle threw a non-exception", req, "");
  }
  if (resp.status < 200 || resp.status > 599) Fail("status out of range", req, resp.body);
  if (resp.status == 500 && !allow_500) Fail("internal error (500)", req, resp.body);
  if (resp.status >= 400 && !WellFormedError(resp.body)) {
    Fail("malformed error body", req, std::to_string(resp.status) + " " + resp.body);
  }
  if (resp.status < 300 && resp.content_type == "application/json" && !json::accept(resp.body)) {
    Fail("2xx JSON response is not JSON", req, resp.body);
  }
  if (resp.status >= 400 || req.method == "GET") {
    const std::string after = w.Fingerprint();
    if (after != w.known) {
      Fail(resp.status >= 400 ? "a refused request changed the state" : "a GET changed the state",
           req,
           std::to_string(resp.status) + " " + resp.body + "\n  before: " + w.known.substr(0, 800) +
               "\n  after:  " + after.substr(0, 800));
    }
  } else {
    w.known.clear();  // an accepted change: the next input takes the fingerprint again
  }
  if (++w.inputs % kTickEvery == 0) {
    if (w.jobs > kMaxJobs || w.agents > kMaxAgents || w.inputs % kRebuildEvery == 0) {
      w.Build();
    } else {
      w.Tick();
    }
    w.known.clear();
  }
  return 0;
}
