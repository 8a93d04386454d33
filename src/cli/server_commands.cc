// `frenzy serve` (the daemon, also installed as `frenzyd`), the client commands that talk to it
// (`frenzy submit|jobs|status|cancel|cluster`) and the node agent (`frenzy agent`).
#include <fmt/core.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "server/agent.h"
#include "server/api.h"
#include "server/daemon.h"
#include "server/k8s_backend.h"
#include "server/local_backend.h"
#include "server/sim_backend.h"
#include "server/slurm_backend.h"
#include "server/store.h"

namespace frenzy::cli {
namespace {

using nlohmann::json;
using server::Backend;

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void Log(const std::string& level, const std::string& msg, json extra = json::object()) {
  extra["t"] = WallNow();
  extra["level"] = level;
  extra["msg"] = msg;
  std::cerr << extra.dump() << std::endl;
}

struct ServeOptions {
  std::string config;
  std::string backend = "sim";
  std::string listen = "127.0.0.1:8470";
  std::string db = "frenzy.db";
  std::string cluster = "lab";
  std::string token;
  double time_scale = 600;
  double tick_s = 0.5;
  std::string runs_dir = "frenzy-runs";
  std::string train_command = "/usr/bin/python3 examples/train.py";
  std::string policy = "frenzy";
  std::string slurm_conf;
  std::string slurm_partition;
  std::string k8s_dir = "frenzy-k8s";
  bool k8s_apply = false;
  std::string inventory;
  std::string report_url;
  bool all_layouts = false;
};

std::vector<std::string> SplitWords(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// A config file (JSON) may set any flag; flags given on the command line win.
Status ApplyConfig(ServeOptions& o, const CLI::App& cmd) {
  if (o.config.empty()) return Status::Ok();
  std::ifstream f(o.config);
  if (!f) return NotFound("cannot read the config file", o.config, "config");
  json j = json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument("not a JSON object", o.config, "config");
  }
  auto str = [&](const char* key, std::string& field, const char* flag) -> Status {
    if (!j.contains(key) || cmd.count(flag) > 0) return Status::Ok();
    if (!j[key].is_string()) return InvalidArgument("must be a string", o.config, key);
    field = j[key].get<std::string>();
    return Status::Ok();
  };
  RETURN_IF_ERROR(str("backend", o.backend, "--backend"));
  RETURN_IF_ERROR(str("listen", o.listen, "--listen"));
  RETURN_IF_ERROR(str("db", o.db, "--db"));
  RETURN_IF_ERROR(str("cluster", o.cluster, "--cluster"));
  RETURN_IF_ERROR(str("token", o.token, "--token"));
  RETURN_IF_ERROR(str("runs_dir", o.runs_dir, "--runs-dir"));
  RETURN_IF_ERROR(str("train_command", o.train_command, "--train-command"));
  RETURN_IF_ERROR(str("policy", o.policy, "--policy"));
  RETURN_IF_ERROR(str("slurm_conf", o.slurm_conf, "--slurm-conf"));
  RETURN_IF_ERROR(str("k8s_dir", o.k8s_dir, "--k8s-dir"));
  RETURN_IF_ERROR(str("inventory", o.inventory, "--inventory"));
  for (const auto& [key, v] : j.items()) {
    static const std::set<std::string> known = {
        "backend", "listen",     "db",      "cluster",   "token",      "runs_dir", "train_command",
        "policy",  "slurm_conf", "k8s_dir", "inventory", "time_scale", "tick_s"};
    if (!known.count(key)) return InvalidArgument("unknown setting", o.config, key);
  }
  if (j.contains("time_scale") && cmd.count("--time-scale") == 0) {
    if (!j["time_scale"].is_number())
      return InvalidArgument("must be a number", o.config, "time_scale");
    o.time_scale = j["time_scale"].get<double>();
  }
  if (j.contains("tick_s") && cmd.count("--tick-s") == 0) {
    if (!j["tick_s"].is_number()) return InvalidArgument("must be a number", o.config, "tick_s");
    o.tick_s = j["tick_s"].get<double>();
  }
  return Status::Ok();
}

Result<std::unique_ptr<Backend>> MakeBackend(const ServeOptions& o) {
  const GpuCatalog& catalog = GpuCatalog::Default();
  if (o.backend == "sim") {
    ASSIGN_OR_RETURN(Cluster c, ResolveCluster(o.cluster, catalog));
    return std::unique_ptr<Backend>(new server::SimBackend(c, o.time_scale, WallNow));
  }
  if (o.backend == "local") {
    server::AgentOptions ao;
    ao.inventory_path = o.inventory;
    ASSIGN_OR_RETURN(auto nodes, server::LocalBackend::DiscoverLocalNodes(ao));
    server::LocalBackendOptions lo;
    lo.nodes = std::move(nodes);
    return std::unique_ptr<Backend>(new server::LocalBackend(lo));
  }
  if (o.backend == "slurm") {
    server::SlurmOptions so;
    so.slurm_conf = o.slurm_conf;
    so.partition = o.slurm_partition;
    return std::unique_ptr<Backend>(new server::SlurmBackend(so));
  }
  if (o.backend == "k8s") {
    server::K8sOptions ko;
    ko.manifest_dir = o.k8s_dir;
    ko.apply = o.k8s_apply;
    return std::unique_ptr<Backend>(new server::K8sBackend(ko));
  }
  return InvalidArgument("unknown backend '" + o.backend + "' (sim, local, slurm, k8s)", {},
                         "backend");
}

void RunServe(ServeOptions o, const CLI::App& cmd) {
  if (Status st = ApplyConfig(o, cmd); !st.ok()) return Fail(st);
  if (o.token.empty()) {
    if (const char* t = std::getenv("FRENZY_TOKEN")) o.token = t;
  }
  size_t colon = o.listen.rfind(':');
  if (colon == std::string::npos) {
    return Fail(InvalidArgument("must be ADDR:PORT", {}, "listen"));
  }
  std::string host = o.listen.substr(0, colon);
  int port = std::atoi(o.listen.c_str() + colon + 1);
  if (port <= 0 || port > 65535) return Fail(InvalidArgument("bad port", {}, "listen"));
  if (o.token.empty() && !server::IsLoopback(host)) {
    return Fail(InvalidArgument(
        "no token configured: refusing to listen on a non-loopback address (set --token or "
        "FRENZY_TOKEN)",
        {}, "token"));
  }
  if (!(o.time_scale > 0) || !(o.tick_s > 0)) {
    return Fail(InvalidArgument("--time-scale and --tick-s must be > 0", {}, "time-scale"));
  }
  auto backend = MakeBackend(o);
  if (!backend.ok()) return Fail(backend.status());
  auto store = server::Store::Open(o.db);
  if (!store.ok()) return Fail(store.status());
  server::DaemonOptions dopt;
  dopt.policy = o.policy;
  dopt.runs_dir = o.runs_dir;
  dopt.train_command = SplitWords(o.train_command);
  dopt.report_base_url =
      o.report_url.empty()
          ? fmt::format("http://{}:{}", host == "0.0.0.0" ? "127.0.0.1" : host, port)
          : o.report_url;
  dopt.token = o.token;
  // The sim backend runs no training code: it can plan every layout.
  dopt.data_parallel_only = !o.all_layouts && o.backend != "sim";
  auto daemon =
      server::Daemon::Create(dopt, std::move(store).value(), std::move(backend).value(), WallNow);
  if (!daemon.ok()) return Fail(daemon.status());
  server::Daemon& d = **daemon;
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  Log("info", "frenzyd started",
      {{"backend", d.backend_name()},
       {"listen", o.listen},
       {"db", o.db},
       {"gpus", d.cluster().total_gpus()}});
  std::thread loop([&] {
    while (!g_stop.load()) {
      auto changes = d.Tick();
      if (!changes.ok()) {
        Log("error", "control loop: " + changes.status().ToString());
      } else if (*changes > 0) {
        Log("info", "scheduled", {{"changes", *changes}});
      }
      if (Status ck = d.Checkpoint(); !ck.ok()) Log("error", "database: " + ck.ToString());
      std::this_thread::sleep_for(std::chrono::duration<double>(o.tick_s));
    }
  });
  server::ApiOptions api;
  api.token = o.token;
  Status st = server::Serve(d, host, port, api, g_stop);
  g_stop = true;
  loop.join();
  if (!st.ok()) return Fail(st);
  Log("info", "frenzyd stopped");
}

// ---- client ----

struct ClientOptions {
  std::string server;
  std::string token;
  bool json = false;
};

void Resolve(ClientOptions& c) {
  if (c.server.empty()) {
    const char* s = std::getenv("FRENZY_SERVER");
    c.server = s ? s : "http://127.0.0.1:8470";
  }
  if (c.token.empty()) {
    if (const char* t = std::getenv("FRENZY_TOKEN")) c.token = t;
  }
}

// One call; the API's error document becomes a Status naming its field.
Result<json> Call(const ClientOptions& c, const std::string& method, const std::string& path,
                  const json* body = nullptr) {
  httplib::Client cli(c.server);
  cli.set_connection_timeout(5, 0);
  cli.set_read_timeout(30, 0);
  cli.set_tcp_nodelay(true);
  httplib::Headers h;
  if (!c.token.empty()) h.emplace("Authorization", "Bearer " + c.token);
  httplib::Result r = method == "GET" ? cli.Get(path, h)
                      : method == "DELETE"
                          ? cli.Delete(path, h)
                          : cli.Post(path, h, body ? body->dump() : "{}", "application/json");
  if (!r) {
    return Status(
        StatusCode::kFailedPrecondition,
        fmt::format("cannot reach frenzyd at {}: {}", c.server, httplib::to_string(r.error())), {},
        "server");
  }
  json j = json::parse(r->body, nullptr, false);
  if (r->status >= 400) {
    std::string msg =
        j.is_object() && j.contains("error") ? j["error"].value("message", r->body) : r->body;
    std::string field = j.is_object() && j.contains("error") ? j["error"].value("field", "") : "";
    return Status(r->status == 404 ? StatusCode::kNotFound : StatusCode::kInvalidArgument,
                  fmt::format("HTTP {}: {}", r->status, msg), c.server, field);
  }
  if (j.is_discarded()) return json(r->body);
  return j;
}

std::string Gib(int64_t b) { return fmt::format("{:.1f}", static_cast<double>(b) / (1 << 30)); }

std::string PlanLine(const json& plan) {
  if (!plan.is_object()) return "-";
  return fmt::format("{} x {}", plan.value("gpus", 0), plan.value("gpu", std::string("?")));
}

void AddClientFlags(CLI::App* cmd, std::shared_ptr<ClientOptions> c) {
  cmd->add_option("--server", c->server,
                  "frenzyd URL (default $FRENZY_SERVER or http://127.0.0.1:8470)");
  cmd->add_option("--token", c->token, "API token (default $FRENZY_TOKEN)");
  cmd->add_flag("--json", c->json, "Machine-readable output");
}

}  // namespace

void RegisterServeOptions(CLI::App* cmd) {
  auto o = std::make_shared<ServeOptions>();
  cmd->add_option("--config", o->config, "JSON file with any of these settings");
  cmd->add_option("--backend", o->backend, "sim | local | slurm | k8s")->capture_default_str();
  cmd->add_option("--listen", o->listen, "ADDR:PORT")->capture_default_str();
  cmd->add_option("--db", o->db, "SQLite database (created if missing)")->capture_default_str();
  cmd->add_option("--cluster", o->cluster, "Cluster of the sim backend")->capture_default_str();
  cmd->add_option("--token", o->token, "API token (default $FRENZY_TOKEN)");
  cmd->add_option("--time-scale", o->time_scale, "sim: simulated seconds per second")
      ->capture_default_str();
  cmd->add_option("--tick-s", o->tick_s, "Seconds between control-loop passes")
      ->capture_default_str();
  cmd->add_option("--runs-dir", o->runs_dir, "Folder for runs (logs, checkpoints)")
      ->capture_default_str();
  cmd->add_option("--train-command", o->train_command, "Training command of one rank")
      ->capture_default_str();
  cmd->add_option("--policy", o->policy, "Scheduling policy")->capture_default_str();
  cmd->add_option("--slurm-conf", o->slurm_conf, "slurm: slurm.conf (default $SLURM_CONF)");
  cmd->add_option("--slurm-partition", o->slurm_partition, "slurm: partition");
  cmd->add_option("--k8s-dir", o->k8s_dir, "k8s: folder for manifests")->capture_default_str();
  cmd->add_flag("--k8s-apply", o->k8s_apply, "k8s: apply manifests with kubectl");
  cmd->add_option("--inventory", o->inventory, "local: GPU inventory file when NVML is absent");
  cmd->add_flag("--all-layouts", o->all_layouts,
                "Plan TP/PP/CP too (the training command supports them; examples/train.py does "
                "data parallelism only)");
  cmd->add_option("--report-url", o->report_url, "Base URL runs report to (default: --listen)");
  cmd->callback([o, cmd] { RunServe(*o, *cmd); });
}

void RegisterServerCommands(CLI::App& app) {
  RegisterServeOptions(app.add_subcommand("serve", "Run frenzyd, the control plane"));

  {
    auto c = std::make_shared<ClientOptions>();
    auto s = std::make_shared<json>(json::object());
    auto f = std::make_shared<std::string>();
    auto model = std::make_shared<std::string>();
    auto name = std::make_shared<std::string>();
    auto precision = std::make_shared<std::string>();
    auto tokens = std::make_shared<double>(0);
    auto batch = std::make_shared<int64_t>(0);
    auto seq = std::make_shared<int64_t>(0);
    auto* cmd = app.add_subcommand("submit", "Submit a job: a model and goals, never GPUs");
    AddClientFlags(cmd, c);
    cmd->add_option("--file,-f", *f, "Job spec (JSON)");
    cmd->add_option("--model,-m", *model, "Zoo name");
    cmd->add_option("--tokens", *tokens, "Tokens to train on");
    cmd->add_option("--global-batch", *batch, "Sequences per step");
    cmd->add_option("--seq-len", *seq, "Sequence length");
    cmd->add_option("--precision", *precision, "bf16 | fp16 | fp32 | bf16-pure");
    cmd->add_option("--name", *name, "A name for listings");
    cmd->callback([=] {
      Resolve(*c);
      json spec = json::object();
      if (!f->empty()) {
        std::ifstream in(*f);
        if (!in) return Fail(NotFound("cannot read", *f, "file"));
        spec = json::parse(in, nullptr, false);
        if (spec.is_discarded()) return Fail(InvalidArgument("not valid JSON", *f, "file"));
      }
      if (!model->empty()) spec["model"] = *model;
      if (*tokens > 0) spec["tokens"] = *tokens;
      if (*batch > 0) spec["global_batch"] = *batch;
      if (*seq > 0) spec["seq_len"] = *seq;
      if (!precision->empty()) spec["precision"] = *precision;
      if (!name->empty()) spec["name"] = *name;
      auto r = Call(*c, "POST", "/v1/jobs", &spec);
      if (!r.ok()) return Fail(r.status());
      if (c->json) return PrintJson(*r);
      fmt::print("{}\n", r->value("id", std::string()));
    });
  }
  {
    auto c = std::make_shared<ClientOptions>();
    auto state = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand("jobs", "List jobs");
    AddClientFlags(cmd, c);
    cmd->add_option("--state", *state, "queued | running | succeeded | failed | cancelled");
    cmd->callback([=] {
      Resolve(*c);
      auto r = Call(*c, "GET", state->empty() ? "/v1/jobs" : "/v1/jobs?state=" + *state);
      if (!r.ok()) return Fail(r.status());
      if (c->json) return PrintJson(*r);
      fmt::print("{:<10} {:<14} {:<10} {:>6} {:<18} {}\n", "ID", "MODEL", "STATE", "DONE", "PLAN",
                 "MESSAGE");
      for (const json& j : (*r)["jobs"]) {
        fmt::print("{:<10} {:<14} {:<10} {:>5.0f}% {:<18} {}\n", j.value("id", std::string()),
                   j.value("model", std::string()), j.value("state", std::string()),
                   100 * j["progress"].value("fraction", 0.0), PlanLine(j["plan"]),
                   j.value("message", std::string()));
      }
    });
  }
  {
    auto c = std::make_shared<ClientOptions>();
    auto id = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand("status", "A job: its plan and why, progress, memory");
    AddClientFlags(cmd, c);
    cmd->add_option("job", *id, "Job id")->required();
    cmd->callback([=] {
      Resolve(*c);
      auto r = Call(*c, "GET", "/v1/jobs/" + *id);
      if (!r.ok()) return Fail(r.status());
      if (c->json) return PrintJson(*r);
      const json& j = *r;
      fmt::print("job       {} ({})\nstate     {}  attempt {}  {}\n", j.value("id", std::string()),
                 j.value("model", std::string()), j.value("state", std::string()),
                 j.value("attempt", 0), j.value("message", std::string()));
      fmt::print("plan      {}\nwhy       {}\n", PlanLine(j["plan"]),
                 j.value("why", std::string()));
      const json& p = j["progress"];
      fmt::print("progress  {:.0f} of {:.0f} tokens ({:.1f}%), step {}\n",
                 p.value("tokens_done", 0.0), p.value("tokens_total", 0.0),
                 100 * p.value("fraction", 0.0), p.value("step", 0));
      const json& m = j["memory"];
      fmt::print(
          "memory    predicted {} GiB, observed {} GiB per GPU{}\n",
          Gib(m.value("predicted_bytes", int64_t{0})), Gib(m.value("observed_bytes", int64_t{0})),
          m.value("note", std::string()).empty() ? "" : "; " + m.value("note", std::string()));
      for (const json& e : j["events"]) {
        fmt::print("  {:.0f}  {:<12} {}\n", e.value("t_s", 0.0), e.value("kind", std::string()),
                   e.value("detail", std::string()));
      }
    });
  }
  {
    auto c = std::make_shared<ClientOptions>();
    auto id = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand("cancel", "Cancel a job");
    AddClientFlags(cmd, c);
    cmd->add_option("job", *id, "Job id")->required();
    cmd->callback([=] {
      Resolve(*c);
      auto r = Call(*c, "DELETE", "/v1/jobs/" + *id);
      if (!r.ok()) return Fail(r.status());
      if (c->json) return PrintJson(*r);
      fmt::print("{} {}\n", r->value("id", std::string()), r->value("state", std::string()));
    });
  }
  {
    auto c = std::make_shared<ClientOptions>();
    // `frenzy cluster show C` describes a cluster file; `frenzy cluster status` asks frenzyd.
    CLI::App* cluster = app.get_subcommand("cluster");
    auto* cmd =
        cluster->add_subcommand("status", "The daemon's cluster: GPUs per type, used and free");
    AddClientFlags(cmd, c);
    cmd->callback([=] {
      Resolve(*c);
      auto r = Call(*c, "GET", "/v1/cluster");
      if (!r.ok()) return Fail(r.status());
      if (c->json) return PrintJson(*r);
      fmt::print("backend {}\n{:<12} {:>6} {:>6} {:>8}\n", r->value("backend", std::string()),
                 "GPU", "GPUS", "FREE", "MEM GiB");
      for (const json& t : (*r)["types"]) {
        fmt::print("{:<12} {:>6} {:>6} {:>8}\n", t.value("gpu", std::string()), t.value("gpus", 0),
                   t.value("free", 0), Gib(t.value("memory_bytes", int64_t{0})));
      }
    });
  }
  {
    auto c = std::make_shared<ClientOptions>();
    auto ao = std::make_shared<server::AgentOptions>();
    auto every = std::make_shared<double>(0);
    auto* cmd = app.add_subcommand(
        "agent",
        "Node agent: report this node's GPUs and their memory (NVML, nvidia-smi, or an "
        "inventory file) to frenzyd");
    AddClientFlags(cmd, c);
    cmd->add_option("--node", ao->node_name,
                    "Node name (default: the inventory's, else the host's)");
    cmd->add_option("--inventory", ao->inventory_path, "Inventory file (last fallback)");
    cmd->add_option("--every", *every, "Seconds between heartbeats (0: send one and exit)");
    cmd->callback([=] {
      Resolve(*c);
      do {
        server::GpuSourceInfo info;
        auto gpus = server::ReadGpus(*ao, &info);
        if (!gpus.ok()) return Fail(gpus.status());
        std::string node = !ao->node_name.empty() ? ao->node_name
                           : !info.node.empty()   ? info.node
                                                  : [] {
                                                    char h[256] = {0};
                                                    gethostname(h, sizeof(h) - 1);
                                                    return std::string(h);
                                                  }();
        json body = server::HeartbeatJson(node, *gpus, info.source);
        if (c->json) PrintJson(body);
        auto r = Call(*c, "POST", "/v1/nodes/" + node + "/heartbeat", &body);
        if (!r.ok()) return Fail(r.status());
        if (*every > 0) std::this_thread::sleep_for(std::chrono::duration<double>(*every));
      } while (*every > 0 && !g_stop.load());
    });
  }
}

}  // namespace frenzy::cli
