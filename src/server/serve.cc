// frenzyd's backends by name, its daemon and its control loop (serve.h).
#include "server/serve.h"

#include <fmt/core.h>

#include <chrono>
#include <exception>
#include <iostream>
#include <sstream>
#include <thread>
#include <utility>

#include "common/strings.h"
#include "hardware/cluster.h"
#include "server/agent.h"
#include "server/api.h"
#include "backend/k8s_backend.h"
#include "backend/local_backend.h"
#include "backend/sim_backend.h"
#include "backend/slurm_backend.h"
#include "server/store.h"

namespace frenzy::server {
namespace {

using nlohmann::json;

using BackendResult = Result<std::unique_ptr<Backend>>;
using Clock = std::function<double()>;

BackendResult MakeSim(const ServeConfig& o, const GpuCatalog& catalog, const Clock& now_s) {
  ASSIGN_OR_RETURN(Cluster c, ResolveCluster(o.cluster, catalog));
  return std::unique_ptr<Backend>(new SimBackend(c, o.time_scale, now_s));
}

BackendResult MakeLocal(const ServeConfig& o, const GpuCatalog&, const Clock&) {
  AgentOptions ao;
  ao.inventory_path = o.inventory;
  ASSIGN_OR_RETURN(auto nodes, LocalBackend::DiscoverLocalNodes(ao));
  LocalBackendOptions lo;
  lo.nodes = std::move(nodes);
  return std::unique_ptr<Backend>(new LocalBackend(lo));
}

BackendResult MakeSlurm(const ServeConfig& o, const GpuCatalog& catalog, const Clock&) {
  SlurmOptions so;
  so.slurm_conf = o.slurm_conf;
  so.partition = o.slurm_partition;
  return std::unique_ptr<Backend>(new SlurmBackend(so, catalog));
}

BackendResult MakeK8s(const ServeConfig& o, const GpuCatalog& catalog, const Clock&) {
  K8sOptions ko;
  ko.manifest_dir = o.k8s_dir;
  ko.apply = o.k8s_apply;
  return std::unique_ptr<Backend>(new K8sBackend(ko, catalog));
}

struct BackendEntry {
  const char* name;
  BackendResult (*make)(const ServeConfig&, const GpuCatalog&, const Clock&);
};
constexpr BackendEntry kBackends[] = {
    {"sim", MakeSim}, {"local", MakeLocal}, {"slurm", MakeSlurm}, {"k8s", MakeK8s}};

std::vector<std::string> SplitWords(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

}  // namespace

double WallClockS() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

const std::vector<std::string>& BackendNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const BackendEntry& b : kBackends) n.emplace_back(b.name);
    return n;
  }();
  return names;
}

Result<std::unique_ptr<Backend>> MakeBackend(const ServeConfig& config, const GpuCatalog& catalog,
                                             const std::function<double()>& now_s) {
  for (const BackendEntry& b : kBackends) {
    if (config.backend == b.name) return b.make(config, catalog, now_s);
  }
  return InvalidArgument(
      "unknown backend '" + config.backend + "' (" + Join(BackendNames(), ", ") + ")", {},
      "backend");
}

DaemonOptions DaemonOptionsFor(const ServeConfig& config) {
  DaemonOptions d;
  d.policy = config.policy;
  d.runs_dir = config.runs_dir;
  d.train_command = SplitWords(config.train_command);
  if (config.report_url.empty()) {
    Result<ListenAddress> at = ParseListen(config.listen);
    if (at.ok()) {
      d.report_base_url =
          fmt::format("http://{}:{}", at->host == "0.0.0.0" ? "127.0.0.1" : at->host, at->port);
    }
  } else {
    d.report_base_url = config.report_url;
  }
  d.token = config.token;
  d.models_dir = config.models_dir;
  // The sim backend runs no training code: it can plan every layout, and every framework.
  const bool sim = config.backend == "sim";
  if (config.all_layouts || sim) {
    d.train_limits = AllTrainLimits();
    d.train_framework = Framework::kMegatron;  // an entry point built on Megatron-LM
  }
  if (auto frameworks = ParseFrameworkList(config.frameworks); frameworks.ok()) {
    d.frameworks = *frameworks;  // (ValidateServeConfig reports a bad list)
  }
  if (sim && config.frameworks.empty()) d.frameworks = AllLaunchers();
  if (auto chain = HfLossOfTransformers(config.transformers)) d.hf_loss = *chain;
  if (auto keeps = MeanKeepsInputInTorch(config.torch)) d.mean_keeps_input = *keeps;
  return d;
}

Result<std::unique_ptr<Daemon>> OpenDaemon(const ServeConfig& config, const GpuCatalog& catalog,
                                           std::function<double()> now_s) {
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend(config, catalog, now_s));
  ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(config.db));
  return Daemon::Create(DaemonOptionsFor(config), std::move(store), std::move(backend),
                        std::move(now_s), catalog);
}

ServeLog StderrLog() {
  return [](const std::string& level, const std::string& msg, const json& extra) {
    json line = extra.is_object() ? extra : json::object();
    line["t"] = WallClockS();
    line["level"] = level;
    line["msg"] = msg;
    std::cerr << line.dump() << std::endl;
  };
}

Status ControlLoop::RunOnce() {
  // A database deleted or replaced under us takes every later change with it: stop loudly rather
  // than run on and lose them.
  RETURN_IF_ERROR(daemon_.CheckStore());
  Result<int> changes = 0;
  try {
    changes = daemon_.Tick();
  } catch (const std::exception& e) {
    // A bug, but the daemon stays up: every other job and request goes on.
    changes = Status(StatusCode::kInternal, std::string("control loop threw: ") + e.what());
  }
  if (!changes.ok()) {
    log_("error", "control loop: " + changes.status().ToString(), json::object());
  } else if (*changes > 0) {
    log_("info", "scheduled", {{"changes", *changes}});
  }
  if (Status ck = daemon_.Checkpoint(); !ck.ok()) {
    log_("error", "database: " + ck.ToString(), json::object());
  }
  return Status::Ok();
}

Status ControlLoop::Run(double tick_s, std::atomic<bool>& stop) {
  while (!stop.load()) {
    if (Status st = RunOnce(); !st.ok()) {
      log_("error", "stopping: " + st.ToString(), json::object());
      stop = true;
      return st;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(tick_s));
  }
  return Status::Ok();
}

Result<ServeEnd> RunServe(const ServeConfig& config, std::atomic<bool>& stop,
                          const ServeHooks& hooks) {
  RETURN_IF_ERROR(ValidateServeConfig(config));
  ASSIGN_OR_RETURN(ListenAddress at, ParseListen(config.listen));
  const ServeLog log = hooks.log ? hooks.log : StderrLog();
  ASSIGN_OR_RETURN(std::unique_ptr<Daemon> daemon, OpenDaemon(config, GpuCatalog::Default()));
  Daemon& d = *daemon;
  if (hooks.on_started) hooks.on_started();
  log("info", "frenzyd started",
      {{"backend", d.backend_name()},
       {"listen", config.listen},
       {"db", config.db},
       {"gpus", d.cluster().total_gpus()}});
  for (const std::string& note : d.quarantine_notes()) {
    log("error", "quarantined a stored row that cannot be loaded", {{"row", note}});
  }
  ControlLoop loop(d, log);
  Status loop_status;
  std::thread thread([&] { loop_status = loop.Run(config.tick_s, stop); });
  ApiOptions api;
  api.token = config.token;
  Status served = Serve(d, at.host, at.port, api, stop, hooks.on_listening);
  stop = true;
  thread.join();
  RETURN_IF_ERROR(served);
  if (loop_status.ok()) log("info", "frenzyd stopped", json::object());
  return ServeEnd{loop_status};
}

}  // namespace frenzy::server
