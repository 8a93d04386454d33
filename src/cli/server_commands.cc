// `frenzy serve` (the daemon, also installed as `frenzyd`), the client commands that talk to it
// (`frenzy submit|jobs|status|cancel|cluster`) and the node agent (`frenzy agent`). The daemon
// itself (its config file, backends and control loop) is server/serve.h: here are its flags.
#include <fmt/core.h>
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <thread>

#include "cli/commands.h"
#include "common/strings.h"
#include "server/agent.h"
#include "server/serve.h"

namespace frenzy::cli {
namespace {

using nlohmann::json;

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

struct ServeOptions {
  std::string config;  // --config: a JSON file of settings
  server::ServeConfig settings;
};

// The flag of a config-file setting: "runs_dir" is --runs-dir.
std::string FlagOf(std::string key) {
  std::replace(key.begin(), key.end(), '_', '-');
  return "--" + key;
}

// A config file (JSON) may set any flag; flags given on the command line win.
Result<server::ServeConfig> Settings(const ServeOptions& o, const CLI::App& cmd) {
  if (o.config.empty()) return o.settings;
  std::set<std::string> keep;
  for (const std::string& key : server::ServeConfigKeys()) {
    if (cmd.count(FlagOf(key)) > 0) keep.insert(key);
  }
  return server::ParseServeConfig(o.config, o.settings, keep);
}

void RunServe(const ServeOptions& o, const CLI::App& cmd) {
  Result<server::ServeConfig> settings = Settings(o, cmd);
  if (!settings.ok()) return Fail(settings.status());
  server::ServeConfig s = std::move(settings).value();
  if (s.token.empty()) {
    if (const char* t = std::getenv("FRENZY_TOKEN")) s.token = t;
  }
  if (Status st = server::CheckToken(s.token, "--token, the config's \"token\" or $FRENZY_TOKEN");
      !st.ok()) {
    return Fail(st);
  }
  server::ServeHooks hooks;
  hooks.on_started = [] {
    std::signal(SIGINT, OnSignal);
    std::signal(SIGTERM, OnSignal);
  };
  Result<server::ServeEnd> end = server::RunServe(s, g_stop, hooks);
  if (!end.ok()) return Fail(end.status());
  if (!end->loop.ok()) {  // the database is gone: logged, and said once more on its own line
    fmt::print(stderr, "frenzyd: {}\n", end->loop.ToString());
    SetExitCode(1);
  }
}

// ---- client ----

struct ClientOptions {
  std::string server;
  std::string token;
  bool json = false;
  double timeout_s = 30;  // for the server's answer, once connected
  // Where `server` and `token` came from, for messages ("--server", "$FRENZY_SERVER", ...).
  std::string server_from;
  std::string token_from;
};

// Connecting takes milliseconds or never succeeds (a wrong address, a firewall dropping
// packets); the answer may take longer (a busy daemon), hence --timeout for that part only.
constexpr int kConnectTimeoutS = 5;

// The parts of a server URL: http or https, a host and a port. Nothing else (a path, user
// information) has a meaning for frenzyd's API, so it is an error rather than dropped.
struct ServerUrl {
  bool tls = false;
  std::string host;
  int port = 0;
};

Result<ServerUrl> ParseServerUrl(const std::string& url, const std::string& from) {
  auto bad = [&](const std::string& why) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("the server URL '{}' (from {}) {}", url, from, why));
  };
  ServerUrl u;
  std::string rest = url;
  if (size_t sep = url.find("://"); sep != std::string::npos) {
    std::string scheme = url.substr(0, sep);
    for (char& ch : scheme) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (scheme == "https") {
      u.tls = true;
    } else if (scheme != "http") {
      return bad(fmt::format("has an unsupported scheme '{}' (use http://HOST:PORT)", scheme));
    }
    rest = url.substr(sep + 3);
  }
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find_first_of("/?#") != std::string::npos) {
    return bad("has a path; frenzyd's API is at the root: give http://HOST:PORT");
  }
  if (rest.find('@') != std::string::npos) {
    return bad("has user information; give the token with --token or $FRENZY_TOKEN");
  }
  std::string port_text;
  if (!rest.empty() && rest[0] == '[') {  // [IPv6]:port
    size_t close = rest.find(']');
    if (close == std::string::npos) return bad("has an unclosed '[' in its host");
    u.host = rest.substr(1, close - 1);
    std::string after = rest.substr(close + 1);
    if (!after.empty() && after[0] != ':') return bad("has text after its host");
    if (!after.empty()) port_text = after.substr(1);
  } else {
    size_t colon = rest.find(':');
    u.host = rest.substr(0, colon);
    if (colon != std::string::npos) port_text = rest.substr(colon + 1);
  }
  if (u.host.empty()) return bad("has no host");
  if (port_text.empty()) {
    u.port = u.tls ? 443 : 80;
  } else {
    const bool digits =
        port_text.size() <= 5 && std::all_of(port_text.begin(), port_text.end(),
                                             [](char ch) { return ch >= '0' && ch <= '9'; });
    u.port = digits ? std::atoi(port_text.c_str()) : 0;
    if (u.port < 1 || u.port > 65535) return bad("has a bad port '" + port_text + "'");
  }
  return u;
}

Status Resolve(ClientOptions& c) {
  c.server_from = "--server";
  if (c.server.empty()) {
    const char* s = std::getenv("FRENZY_SERVER");
    c.server_from = s && *s ? "$FRENZY_SERVER" : "the default";
    c.server = s && *s ? s : "http://127.0.0.1:8470";
  }
  c.token_from = "--token";
  if (c.token.empty()) {
    if (const char* t = std::getenv("FRENZY_TOKEN")) c.token = t;
    c.token_from = "$FRENZY_TOKEN";
  }
  RETURN_IF_ERROR(server::CheckToken(c.token, c.token_from));
  if (!(c.timeout_s > 0)) return InvalidArgument("must be > 0 seconds", {}, "timeout");
  return ParseServerUrl(c.server, c.server_from).status();
}

// At most 80 characters of a body, on one line, for an error message.
std::string Snippet(const std::string& body) {
  std::string out;
  for (char ch : body) {
    const unsigned char u = static_cast<unsigned char>(ch);
    const bool space = u <= 0x20 || u == 0x7f;  // control characters too: one line
    if (space && (out.empty() || out.back() == ' ')) continue;
    out.push_back(space ? ' ' : ch);
    if (out.size() >= 80) break;
  }
  if (out.size() >= 80) {
    // Do not end inside a UTF-8 sequence.
    while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0x80) out.pop_back();
    if (!out.empty() && static_cast<unsigned char>(out.back()) >= 0xC0) out.pop_back();
    out += "...";
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// What went wrong below HTTP, in words a user can act on. `waited_s`: how long the call took,
// which tells a server that never answered from one that hung up (httplib reports both as
// Error::Read).
std::string TransportError(const ClientOptions& c, const ServerUrl& u, httplib::Error error,
                           double waited_s) {
  const std::string at = "the server at " + c.server;
  switch (error) {
    case httplib::Error::Connection:
      return fmt::format(
          "cannot connect to {}: nothing accepts connections at {}:{}, or the host is unknown or "
          "unreachable (is frenzyd running there?)",
          at, u.host, u.port);
    case httplib::Error::ConnectionTimeout:
      return fmt::format("{} did not accept a connection within {} s", at, kConnectTimeoutS);
    case httplib::Error::Read:
      if (waited_s >= 0.9 * c.timeout_s) {
        return fmt::format("{} did not answer within {:g} s (see --timeout)", at, c.timeout_s);
      }
      return fmt::format("{} closed the connection without an HTTP answer (is it frenzyd{}?)", at,
                         u.tls ? ", and does it speak TLS" : "");
    case httplib::Error::Write:
      return fmt::format("{} closed the connection before taking the whole request", at);
    case httplib::Error::SSLConnection:
      // httplib bounds the handshake with the connection timeout, not --timeout.
      if (waited_s >= 0.9 * kConnectTimeoutS) {
        return fmt::format("{} did not complete a TLS handshake within {} s", at, kConnectTimeoutS);
      }
      return fmt::format(
          "the TLS handshake with {} failed: frenzyd itself speaks plain HTTP, so use http:// "
          "unless a TLS proxy is in front of it",
          at);
    case httplib::Error::SSLServerVerification:
      return fmt::format("{} presented a TLS certificate that cannot be verified", at);
    case httplib::Error::SSLLoadingCerts:
      return fmt::format("cannot load the CA certificates to verify {}", at);
    default:
      return fmt::format("the request to {} failed ({})", at, httplib::to_string(error));
  }
}

// A field of the server's JSON, or null when absent (or the JSON is not an object).
const json& Field(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

// Fields that are only displayed: absent ones, or ones of another type, show as "" or 0 rather
// than failing the whole listing.
std::string Text(const json& j, const char* key) {
  const json& v = Field(j, key);
  return v.is_string() ? v.get<std::string>() : v.is_null() ? "" : v.dump();
}
double Number(const json& j, const char* key) {
  const json& v = Field(j, key);
  return v.is_number() ? v.get<double>() : 0;
}
int64_t Integer(const json& j, const char* key) {
  const json& v = Field(j, key);
  return v.is_number() ? v.get<int64_t>() : 0;
}

// One call; the API's error document becomes a Status naming its field. Anything but a JSON
// object from the server, or no answer at all, is an error naming the server and what came.
Result<json> Call(const ClientOptions& c, const std::string& method, const std::string& path,
                  const json* body = nullptr) {
  // A server that hangs up while the request is being written must be an error, not the end of
  // the process: httplib writes without MSG_NOSIGNAL.
  std::signal(SIGPIPE, SIG_IGN);
  ASSIGN_OR_RETURN(ServerUrl u, ParseServerUrl(c.server, c.server_from));
  std::unique_ptr<httplib::ClientImpl> cli;
  if (u.tls) {
    cli = std::make_unique<httplib::SSLClient>(u.host, u.port);
  } else {
    cli = std::make_unique<httplib::ClientImpl>(u.host, u.port);
  }
  const auto timeout_us = static_cast<int64_t>(c.timeout_s * 1e6);
  cli->set_connection_timeout(kConnectTimeoutS, 0);
  cli->set_read_timeout(timeout_us / 1000000, timeout_us % 1000000);
  cli->set_write_timeout(timeout_us / 1000000, timeout_us % 1000000);
  cli->set_tcp_nodelay(true);
  httplib::Headers h;
  if (!c.token.empty()) h.emplace("Authorization", "Bearer " + c.token);
  // Text from the command line may not be valid UTF-8; send it replaced rather than throw.
  const std::string payload =
      body ? body->dump(-1, ' ', false, json::error_handler_t::replace) : "{}";
  const auto start = std::chrono::steady_clock::now();
  httplib::Result r = method == "GET"      ? cli->Get(path, h)
                      : method == "DELETE" ? cli->Delete(path, h)
                                           : cli->Post(path, h, payload, "application/json");
  const double waited_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!r) {
    return Status(StatusCode::kFailedPrecondition, TransportError(c, u, r.error(), waited_s));
  }
  std::string type = r->get_header_value("Content-Type");
  if (type.empty()) type = "no Content-Type";
  json j = json::parse(r->body, nullptr, false);
  if (r->status >= 400) {
    const json& error = Field(j, "error");
    if (error.is_object()) {  // frenzyd's error document
      std::string msg = Text(error, "message");
      return Status(r->status == 404 ? StatusCode::kNotFound : StatusCode::kInvalidArgument,
                    fmt::format("HTTP {}: {}", r->status, msg.empty() ? Snippet(r->body) : msg),
                    c.server, Text(error, "field"));
    }
    return Status(
        StatusCode::kFailedPrecondition,
        fmt::format("the server at {} answered HTTP {} ({}) without a frenzyd error: '{}'",
                    c.server, r->status, type, Snippet(r->body)));
  }
  if (j.is_discarded()) {
    return Status(
        StatusCode::kFailedPrecondition,
        fmt::format("the server at {} answered with something that is not JSON (HTTP {}, {}): '{}'",
                    c.server, r->status, type, Snippet(r->body)));
  }
  if (!j.is_object()) {
    return Status(
        StatusCode::kFailedPrecondition,
        fmt::format("the server at {} answered JSON that is not an object (HTTP {}): '{}'",
                    c.server, r->status, Snippet(r->body)));
  }
  return j;
}

// The error for an answer that is JSON but lacks what the command shows.
Status Unexpected(const ClientOptions& c, const std::string& what, const json& j) {
  return Status(StatusCode::kFailedPrecondition,
                fmt::format("the server at {} answered without {} (is it frenzyd?): '{}'", c.server,
                            what, Snippet(j.dump(-1, ' ', false, json::error_handler_t::replace))));
}

// The callback of a client command: resolves the server and token (a bad one fails before
// anything is sent), then runs `body`. Display helpers tolerate odd fields; this catch is the
// backstop, so that JSON of a shape this client cannot read is reported as the server's answer,
// not as an internal error of frenzy.
std::function<void()> ClientCallback(const std::shared_ptr<ClientOptions>& c,
                                     const std::function<void()>& body) {
  return [c, body] {
    if (Status st = Resolve(*c); !st.ok()) return Fail(st);
    try {
      body();
    } catch (const json::exception& e) {
      Fail(Status(StatusCode::kFailedPrecondition,
                  fmt::format("the server at {} answered JSON this frenzy cannot read ({})",
                              c->server, e.what())));
    }
  };
}

std::string Gib(int64_t b) { return fmt::format("{:.1f}", static_cast<double>(b) / (1 << 30)); }

std::string PlanLine(const json& plan) {
  if (!plan.is_object()) return "-";
  std::string gpu = Text(plan, "gpu");
  return fmt::format("{} x {}", Integer(plan, "gpus"), gpu.empty() ? "?" : gpu);
}

void AddClientFlags(CLI::App* cmd, const std::shared_ptr<ClientOptions>& c) {
  cmd->add_option("--server", c->server,
                  "frenzyd URL, http://HOST:PORT (default $FRENZY_SERVER or "
                  "http://127.0.0.1:8470)");
  cmd->add_option("--token", c->token, "API token (default $FRENZY_TOKEN)");
  cmd->add_option("--timeout", c->timeout_s,
                  "Seconds to wait for the server's answer (connecting: 5 s at most)")
      ->capture_default_str();
  cmd->add_flag("--json", c->json, "Machine-readable output");
}

// `frenzy submit`: a job spec from a file and/or flags.
void RegisterSubmit(CLI::App& app) {
  auto c = std::make_shared<ClientOptions>();
  auto f = std::make_shared<std::string>();
  auto model = std::make_shared<std::string>();
  auto name = std::make_shared<std::string>();
  auto precision = std::make_shared<std::string>();
  auto finetune = std::make_shared<std::string>();
  auto framework = std::make_shared<std::string>();
  auto entry = std::make_shared<std::string>();
  auto config_file = std::make_shared<std::string>();
  auto entry_args = std::make_shared<std::vector<std::string>>();
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
  cmd->add_option("--finetune", *finetune,
                  "full | lora | qlora (rank and targets: a \"finetune\" object in --file)");
  cmd->add_option("--framework", *framework,
                  "torchtitan | megatron | accelerate | deepspeed (launched with Frenzy's layout, "
                  "where the daemon allows it), or fsdp | hf (how the daemon's own training "
                  "command is modelled)");
  cmd->add_option("--entry", *entry,
                  "The framework's entry point: script or module (default: its own, e.g. "
                  "pretrain_gpt.py)");
  cmd->add_option("--entry-arg", *entry_args,
                  "An argument of the entry point (model, data, optimizer), repeatable; one "
                  "starting with '-' as --entry-arg=--flag")
      ->allow_extra_args(false);
  cmd->add_option("--config-file", *config_file,
                  "torchtitan: the job's TOML config on the cluster");
  cmd->add_option("--name", *name, "A name for listings");
  cmd->callback(ClientCallback(c, [=] {
    json spec = json::object();
    if (!f->empty()) {
      std::ifstream in(*f);
      if (!in) return Fail(NotFound("cannot read", *f, "file"));
      spec = json::parse(in, nullptr, false);
      if (spec.is_discarded()) return Fail(InvalidArgument("not valid JSON", *f, "file"));
      if (!spec.is_object()) return Fail(InvalidArgument("must be a JSON object", *f, "file"));
    }
    if (!model->empty()) spec["model"] = *model;
    if (*tokens > 0) spec["tokens"] = *tokens;
    if (*batch > 0) spec["global_batch"] = *batch;
    if (*seq > 0) spec["seq_len"] = *seq;
    if (!precision->empty()) spec["precision"] = *precision;
    if (!finetune->empty()) spec["finetune"] = *finetune;
    if (!framework->empty()) spec["framework"] = *framework;
    if (!entry->empty()) spec["entry"] = *entry;
    if (!config_file->empty()) spec["config_file"] = *config_file;
    if (!entry_args->empty()) spec["entry_args"] = *entry_args;
    if (!name->empty()) spec["name"] = *name;
    auto r = Call(*c, "POST", "/v1/jobs", &spec);
    if (!r.ok()) return Fail(r.status());
    if (c->json) return PrintJson(*r);
    if (Text(*r, "id").empty()) return Fail(Unexpected(*c, "the new job's \"id\"", *r));
    fmt::print("{}\n", Text(*r, "id"));
  }));
}

// `frenzy jobs`: the job listing.
void RegisterJobs(CLI::App& app) {
  auto c = std::make_shared<ClientOptions>();
  auto state = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("jobs", "List jobs");
  AddClientFlags(cmd, c);
  cmd->add_option("--state", *state, "queued | running | succeeded | failed | cancelled");
  cmd->callback(ClientCallback(c, [=] {
    auto r = Call(*c, "GET", state->empty() ? "/v1/jobs" : "/v1/jobs?state=" + *state);
    if (!r.ok()) return Fail(r.status());
    if (c->json) return PrintJson(*r);
    const json& jobs = Field(*r, "jobs");
    if (!jobs.is_array()) return Fail(Unexpected(*c, "a \"jobs\" list", *r));
    fmt::print("{:<10} {:<14} {:<10} {:>6} {:<18} {}\n", "ID", "MODEL", "STATE", "DONE", "PLAN",
               "MESSAGE");
    for (const json& j : jobs) {
      fmt::print("{:<10} {:<14} {:<10} {:>5.0f}% {:<18} {}\n", Text(j, "id"), Text(j, "model"),
                 Text(j, "state"), 100 * Number(Field(j, "progress"), "fraction"),
                 PlanLine(Field(j, "plan")), Text(j, "message"));
    }
  }));
}

// `frenzy status JOB`: one job in detail.
void RegisterStatus(CLI::App& app) {
  auto c = std::make_shared<ClientOptions>();
  auto id = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("status", "A job: its plan and why, progress, memory");
  AddClientFlags(cmd, c);
  cmd->add_option("job", *id, "Job id")->required();
  cmd->callback(ClientCallback(c, [=] {
    auto r = Call(*c, "GET", "/v1/jobs/" + *id);
    if (!r.ok()) return Fail(r.status());
    if (c->json) return PrintJson(*r);
    const json& j = *r;
    if (Text(j, "id").empty()) return Fail(Unexpected(*c, "the job's \"id\"", j));
    fmt::print("job       {} ({})\nstate     {}  attempt {}  {}\n", Text(j, "id"), Text(j, "model"),
               Text(j, "state"), Integer(j, "attempt"), Text(j, "message"));
    fmt::print("plan      {}\nwhy       {}\n", PlanLine(Field(j, "plan")), Text(j, "why"));
    // A framework's launch (docs/launch.md): its command, as the backend runs it on every node.
    const json& launch = Field(Field(j, "plan"), "launch");
    if (const json& argv = Field(launch, "argv"); argv.is_array()) {
      std::vector<std::string> words;
      for (const json& w : argv) words.push_back(w.is_string() ? w.get<std::string>() : "?");
      std::vector<std::string> files;
      if (const json& f = Field(launch, "files"); f.is_object()) {
        for (const auto& [name, text] : f.items()) files.push_back(name);
      }
      fmt::print("launch    {} {}: {}{}\n", Text(launch, "framework"), Text(launch, "version"),
                 Join(words, " "), files.empty() ? "" : " (files: " + Join(files, ", ") + ")");
    }
    const json& p = Field(j, "progress");
    fmt::print("progress  {:.0f} of {:.0f} tokens ({:.1f}%), step {}\n", Number(p, "tokens_done"),
               Number(p, "tokens_total"), 100 * Number(p, "fraction"), Integer(p, "step"));
    const json& m = Field(j, "memory");
    const std::string note = Text(m, "note");
    fmt::print("memory    predicted {} GiB, observed {} GiB per GPU{}\n",
               Gib(Integer(m, "predicted_bytes")), Gib(Integer(m, "observed_bytes")),
               note.empty() ? "" : "; " + note);
    const json& events = Field(j, "events");
    if (!events.is_array()) return;
    for (const json& e : events) {
      fmt::print("  {:.0f}  {:<12} {}\n", Number(e, "t_s"), Text(e, "kind"), Text(e, "detail"));
    }
  }));
}

// `frenzy cancel JOB`.
void RegisterCancel(CLI::App& app) {
  auto c = std::make_shared<ClientOptions>();
  auto id = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("cancel", "Cancel a job");
  AddClientFlags(cmd, c);
  cmd->add_option("job", *id, "Job id")->required();
  cmd->callback(ClientCallback(c, [=] {
    auto r = Call(*c, "DELETE", "/v1/jobs/" + *id);
    if (!r.ok()) return Fail(r.status());
    if (c->json) return PrintJson(*r);
    if (Text(*r, "id").empty()) return Fail(Unexpected(*c, "the job's \"id\"", *r));
    fmt::print("{} {}\n", Text(*r, "id"), Text(*r, "state"));
  }));
}

// `frenzy cluster status`: the daemon's GPUs.
void RegisterClusterStatus(CLI::App& app) {
  auto c = std::make_shared<ClientOptions>();
  // `frenzy cluster show C` describes a cluster file; `frenzy cluster status` asks frenzyd.
  CLI::App* cluster = app.get_subcommand("cluster");
  auto* cmd =
      cluster->add_subcommand("status", "The daemon's cluster: GPUs per type, used and free");
  AddClientFlags(cmd, c);
  cmd->callback(ClientCallback(c, [=] {
    auto r = Call(*c, "GET", "/v1/cluster");
    if (!r.ok()) return Fail(r.status());
    if (c->json) return PrintJson(*r);
    const json& types = Field(*r, "types");
    if (!types.is_array()) return Fail(Unexpected(*c, "a \"types\" list", *r));
    fmt::print("backend {}\n{:<12} {:>6} {:>6} {:>8}\n", Text(*r, "backend"), "GPU", "GPUS", "FREE",
               "MEM GiB");
    for (const json& t : types) {
      fmt::print("{:<12} {:>6} {:>6} {:>8}\n", Text(t, "gpu"), Integer(t, "gpus"),
                 Integer(t, "free"), Gib(Integer(t, "memory_bytes")));
    }
  }));
}

// `frenzy agent`: heartbeats of this node's GPUs.
void RegisterAgent(CLI::App& app) {
  auto c = std::make_shared<ClientOptions>();
  auto ao = std::make_shared<server::AgentOptions>();
  auto every = std::make_shared<double>(0);
  auto* cmd = app.add_subcommand(
      "agent",
      "Node agent: report this node's GPUs and their memory (NVML, nvidia-smi, or an "
      "inventory file) to frenzyd");
  AddClientFlags(cmd, c);
  cmd->add_option("--node", ao->node_name, "Node name (default: the inventory's, else the host's)");
  cmd->add_option("--inventory", ao->inventory_path, "Inventory file (last fallback)");
  cmd->add_option("--every", *every, "Seconds between heartbeats (0: send one and exit)");
  cmd->callback(ClientCallback(c, [=] {
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
  }));
}

}  // namespace

void RegisterServeOptions(CLI::App* cmd) {
  auto o = std::make_shared<ServeOptions>();
  server::ServeConfig& s = o->settings;
  cmd->add_option("--config", o->config, "JSON file with any of these settings");
  cmd->add_option("--backend", s.backend, "sim | local | slurm | k8s")->capture_default_str();
  cmd->add_option("--listen", s.listen, "ADDR:PORT")->capture_default_str();
  cmd->add_option("--db", s.db, "SQLite database (created if missing)")->capture_default_str();
  cmd->add_option("--cluster", s.cluster, "Cluster of the sim backend")->capture_default_str();
  cmd->add_option("--token", s.token, "API token (default $FRENZY_TOKEN)");
  cmd->add_option("--time-scale", s.time_scale, "sim: simulated seconds per second")
      ->capture_default_str();
  cmd->add_option("--tick-s", s.tick_s, "Seconds between control-loop passes")
      ->capture_default_str();
  cmd->add_option("--runs-dir", s.runs_dir, "Folder for runs (logs, checkpoints)")
      ->capture_default_str();
  cmd->add_option("--models-dir", s.models_dir,
                  "Folder of config.json files offered by name beside the zoo (API model names "
                  "reach no other file)");
  cmd->add_option("--train-command", s.train_command, "Training command of one rank")
      ->capture_default_str();
  cmd->add_option("--policy", s.policy, "Scheduling policy")->capture_default_str();
  cmd->add_option("--slurm-conf", s.slurm_conf, "slurm: slurm.conf (default $SLURM_CONF)");
  cmd->add_option("--slurm-partition", s.slurm_partition, "slurm: partition");
  cmd->add_option("--k8s-dir", s.k8s_dir, "k8s: folder for manifests")->capture_default_str();
  cmd->add_flag("--k8s-apply", s.k8s_apply, "k8s: apply manifests with kubectl");
  cmd->add_option("--inventory", s.inventory, "local: GPU inventory file when NVML is absent");
  cmd->add_flag("--all-layouts", s.all_layouts,
                "Plan TP/PP/CP too for jobs of the training command (it supports them; "
                "examples/train.py runs data parallelism: DDP, ZeRO-1/2/3)");
  cmd->add_option("--frameworks", s.frameworks,
                  "Frameworks jobs may name, which then run the submitter's entry point: "
                  "torchtitan,megatron,accelerate,deepspeed or all (default: none; all on sim)");
  cmd->add_option("--transformers", s.transformers,
                  "transformers release the cluster runs Accelerate and DeepSpeed jobs' HF models "
                  "with (e.g. 4.38): their loss's memory (default: current)");
  cmd->add_option("--torch", s.torch,
                  "PyTorch release the cluster's jobs run with (e.g. 2.1): before 2.2 an eager "
                  "RMSNorm kept its fp32 x^2 for backward (default: current)");
  cmd->add_option("--report-url", s.report_url, "Base URL runs report to (default: --listen)");
  cmd->callback([o, cmd] { RunServe(*o, *cmd); });
}

void RegisterServerCommands(CLI::App& app) {
  RegisterServeOptions(app.add_subcommand("serve", "Run frenzyd, the control plane"));
  RegisterSubmit(app);
  RegisterJobs(app);
  RegisterStatus(app);
  RegisterCancel(app);
  RegisterClusterStatus(app);
  RegisterAgent(app);
}

}  // namespace frenzy::cli
