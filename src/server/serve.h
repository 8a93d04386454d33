// Running frenzyd: its settings (ServeConfig) and their config file, the backends by name, and
// the control loop that drives a Daemon beside its HTTP front. `frenzy serve` and `frenzyd` are
// thin callers: they turn flags into a ServeConfig, call RunServe and print what it returns.
//
// This is the daemon's edge: it reads the wall clock (WallClockS) and files, and logs JSON lines
// through a ServeLog. The Daemon underneath still reads time only through the clock it is given.
//
// Thread safety: ParseServeConfig, ValidateServeConfig and MakeBackend are pure or read files
// only, and may be called from any thread. A ControlLoop is driven by one thread; the Daemon it
// drives takes API calls from others meanwhile (see daemon.h).
#ifndef FRENZY_SERVER_SERVE_H_
#define FRENZY_SERVER_SERVE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "hardware/gpu.h"
#include "backend/backend.h"
#include "launch/launch.h"
#include "server/daemon.h"

namespace frenzy::server {

// Every setting of frenzyd, with its default. Each is a flag of `frenzy serve` (`runs_dir` is
// --runs-dir); the ones in ServeConfigKeys() may also come from a config file.
struct ServeConfig {
  std::string backend = "sim";            // a name of BackendNames()
  std::string listen = "127.0.0.1:8470";  // ADDR:PORT
  std::string db = "frenzy.db";           // the SQLite database (created if missing)
  std::string cluster = "lab";            // sim: a bundled cluster's name, or a cluster file
  std::string token;                      // the admin token; "" only on a loopback address
  double time_scale = 600;                // sim: simulated seconds per wall second (> 0)
  double tick_s = 0.5;                    // wall seconds between control-loop passes (> 0)
  std::string runs_dir = "frenzy-runs";
  std::string models_dir;  // "": the zoo only (DaemonOptions::models_dir)
  std::string train_command = "/usr/bin/python3 examples/train.py";  // words split on spaces
  std::string policy = "frenzy";
  std::string slurm_conf;  // slurm: "" is $SLURM_CONF
  std::string slurm_partition;
  std::string k8s_dir = "frenzy-k8s";  // k8s: where manifests are written
  bool k8s_apply = false;              // k8s: also apply them with kubectl
  std::string inventory;               // local: GPU inventory file when NVML is absent
  std::string report_url;              // where runs report; "": the listen address
  bool all_layouts = false;            // plan TP/PP/CP too (the training command supports them)
  // Frameworks jobs may name (DaemonOptions::frameworks): "torchtitan,megatron,...", "all",
  // or "" (none; on the sim backend, which runs no code, all).
  std::string frameworks;
  // The transformers release the HF models of Accelerate and DeepSpeed jobs run with
  // (DaemonOptions::hf_loss): "4.38", ...; empty: the current one.
  std::string transformers;
  // The PyTorch release the cluster's jobs run with (DaemonOptions::mean_keeps_input): "2.1",
  // ...; empty: the current one.
  std::string torch;
};

// "torchtitan,deepspeed", "all" or "": the launchers, or an error naming the unknown word
// (field "frameworks").
Result<std::vector<Launcher>> ParseFrameworkList(const std::string& list);

// The settings a config file may hold, as it names them ("runs_dir", "tick_s", ...).
const std::vector<std::string>& ServeConfigKeys();

// Reads the config file at `path`, a JSON object of settings named as in ServeConfigKeys(), over
// `base`: each setting the file holds replaces base's, except those named in `keep` (settings the
// command line gave, which win; their values in the file are not checked). Errors name the file
// and the setting: the file missing (kNotFound), a syntax error (with line and column), a
// setting of the wrong type, an unknown setting, a time_scale or tick_s that is not > 0.
Result<ServeConfig> ParseServeConfig(const std::string& path, ServeConfig base,
                                     const std::set<std::string>& keep = {});

// A token travels in an "Authorization: Bearer" header: a blank one, or one with whitespace or
// control characters, is refused (field "token"; `from` says where it came from, for the
// message). "" is no token, which is OK here. The token itself is never part of the message.
Status CheckToken(const std::string& token, const std::string& from);

struct ListenAddress {
  std::string host;
  int port = 0;  // 1..65535
};
// "ADDR:PORT" (field "listen" when it is not).
Result<ListenAddress> ParseListen(const std::string& listen);

// What RunServe checks before it opens anything: the token (CheckToken), the listen address, a
// token when listening beyond loopback, time_scale and tick_s > 0.
Status ValidateServeConfig(const ServeConfig& config);

// The wall clock, in seconds since the epoch: the daemon's clock when it really serves.
double WallClockS();

// Backends by name: "sim" (the cluster `config.cluster`, sped up by `time_scale`, on `now_s`),
// "local", "slurm", "k8s". An unknown name is kInvalidArgument (field "backend") listing the
// known ones.
const std::vector<std::string>& BackendNames();
Result<std::unique_ptr<Backend>> MakeBackend(const ServeConfig& config, const GpuCatalog& catalog,
                                             const std::function<double()>& now_s = WallClockS);

// The daemon's options for `config` (REQUIRES: ValidateServeConfig(config) is OK).
DaemonOptions DaemonOptionsFor(const ServeConfig& config);

// The backend, the store and the daemon of `config` (REQUIRES: ValidateServeConfig is OK).
Result<std::unique_ptr<Daemon>> OpenDaemon(const ServeConfig& config, const GpuCatalog& catalog,
                                           std::function<double()> now_s = WallClockS);

// One log line: a level ("info", "error"), a message and extra fields. StderrLog() writes each
// as one JSON object on stderr, {"t", "level", "msg", ...} (`t`: WallClockS()).
using ServeLog = std::function<void(const std::string& level, const std::string& msg,
                                    const nlohmann::json& extra)>;
ServeLog StderrLog();

// The control loop: every tick, checks the database file, runs one Daemon::Tick and the store's
// checkpoint. An error of a tick (or an exception thrown by one: a bug) is logged and the loop
// goes on; a database deleted or replaced under the daemon stops it, since every later change
// would be lost.
class ControlLoop {
 public:
  // `daemon` must outlive the loop.
  ControlLoop(Daemon& daemon, ServeLog log) : daemon_(daemon), log_(std::move(log)) {}

  // One pass. Not OK only when the daemon must stop (CheckStore failed).
  Status RunOnce();
  // Passes `tick_s` apart until `stop` is true. When a pass says the daemon must stop, logs it,
  // sets `stop` (so that the HTTP front stops too) and returns that status; otherwise OK.
  Status Run(double tick_s, std::atomic<bool>& stop);

 private:
  Daemon& daemon_;
  ServeLog log_;
};

// How RunServe ended once the daemon was up.
struct ServeEnd {
  // Not OK when the control loop stopped the daemon (its database was deleted or replaced);
  // the process should then exit non-zero. OK when `stop` was set.
  Status loop;
};

struct ServeHooks {
  ServeLog log;  // default: StderrLog()
  // Called once the daemon is up, before it serves (e.g. to install signal handlers that set
  // `stop`).
  std::function<void()> on_started;
  std::function<void(int port)> on_listening;  // as Serve's (api.h)
};

// frenzyd: validates `config`, opens the daemon, then runs the control loop and the HTTP API
// until `stop` is true (or the loop stops on its own). Errors: the config's (before anything is
// opened), the backend's, the store's, the daemon's, the HTTP front's (e.g. the port is in use).
Result<ServeEnd> RunServe(const ServeConfig& config, std::atomic<bool>& stop,
                          const ServeHooks& hooks = {});

}  // namespace frenzy::server

#endif  // FRENZY_SERVER_SERVE_H_
