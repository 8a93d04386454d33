// frenzyd's edge (server/serve.h): the config file, the checks before anything is opened, the
// backends by name, and the control loop on the sim backend with a real SQLite store.
#include "server/serve.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server_test_util.h"

namespace frenzy::server {
namespace {

using nlohmann::json;
using test_util::TempDir;

// Writes `text` to `name` in `dir`; returns the path.
std::string WriteConfig(const TempDir& dir, const std::string& name, const std::string& text) {
  std::string path = (dir.path() / name).string();
  std::ofstream(path) << text;
  return path;
}

// ---- the config file ------------------------------------------------------------------------

TEST(ServeConfig, AFileSetsWhatItNamesAndLeavesTheRest) {
  TempDir dir;
  const std::string path = WriteConfig(dir, "frenzyd.json", R"({
    "backend": "k8s", "listen": "0.0.0.0:9000", "db": "/var/lib/frenzy.db",
    "token": "s3cret", "runs_dir": "/runs", "train_command": "torchrun train.py",
    "k8s_dir": "/manifests", "time_scale": 60, "tick_s": 0.25
  })");
  Result<ServeConfig> c = ParseServeConfig(path, ServeConfig{});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->backend, "k8s");
  EXPECT_EQ(c->listen, "0.0.0.0:9000");
  EXPECT_EQ(c->db, "/var/lib/frenzy.db");
  EXPECT_EQ(c->token, "s3cret");
  EXPECT_EQ(c->runs_dir, "/runs");
  EXPECT_EQ(c->train_command, "torchrun train.py");
  EXPECT_EQ(c->k8s_dir, "/manifests");
  EXPECT_DOUBLE_EQ(c->time_scale, 60);
  EXPECT_DOUBLE_EQ(c->tick_s, 0.25);
  // Not in the file: the defaults.
  EXPECT_EQ(c->cluster, "lab");
  EXPECT_EQ(c->policy, "frenzy");
  EXPECT_EQ(c->models_dir, "");
}

TEST(ServeConfig, SettingsTheCommandLineGaveWinAndAreNotChecked) {
  TempDir dir;
  const std::string path =
      WriteConfig(dir, "c.json", R"({"db": 5, "tick_s": "fast", "policy": "sia"})");
  ServeConfig base;
  base.db = "flag.db";
  base.tick_s = 2;
  Result<ServeConfig> c = ParseServeConfig(path, base, {"db", "tick_s"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->db, "flag.db");
  EXPECT_DOUBLE_EQ(c->tick_s, 2);
  EXPECT_EQ(c->policy, "sia");
  // Without the flags, the same file is wrong.
  EXPECT_FALSE(ParseServeConfig(path, base).ok());
}

TEST(ServeConfig, ASyntaxErrorNamesTheFileAndTheLine) {
  TempDir dir;
  const std::string path = WriteConfig(
      dir, "bad.json", "{\n  \"db\": \"x.db\",\n  \"tick_s\": ,\n  \"policy\": \"sia\"\n}\n");
  Result<ServeConfig> c = ParseServeConfig(path, ServeConfig{});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().where(), path);
  EXPECT_EQ(c.status().field(), "config");
  EXPECT_NE(c.status().message().find("line 3"), std::string::npos) << c.status().ToString();
}

TEST(ServeConfig, AWrongTypeNamesTheFileAndTheSetting) {
  TempDir dir;
  struct Case {
    const char* text;
    const char* field;
    const char* message;
  };
  for (const Case& k : {Case{R"({"listen": 8470})", "listen", "must be a string"},
                        Case{R"({"token": null})", "token", "must be a string"},
                        Case{R"({"tick_s": "0.5"})", "tick_s", "must be a number"},
                        Case{R"({"time_scale": [600]})", "time_scale", "must be a number"}}) {
    const std::string path = WriteConfig(dir, "t.json", k.text);
    Result<ServeConfig> c = ParseServeConfig(path, ServeConfig{});
    ASSERT_FALSE(c.ok()) << k.text;
    EXPECT_EQ(c.status().where(), path) << k.text;
    EXPECT_EQ(c.status().field(), k.field) << k.text;
    EXPECT_EQ(c.status().message(), k.message) << k.text;
  }
}

TEST(ServeConfig, AnUnknownSettingIsRefusedByName) {
  TempDir dir;
  // A flag's spelling is not the file's: "runs-dir" is --runs-dir, the file says "runs_dir".
  for (const char* key : {"runs-dir", "tick", "slurm_partition"}) {
    const std::string path =
        WriteConfig(dir, "u.json", std::string(R"({"db": "a.db", ")") + key + R"(": "x"})");
    Result<ServeConfig> c = ParseServeConfig(path, ServeConfig{});
    ASSERT_FALSE(c.ok()) << key;
    EXPECT_EQ(c.status().ToString(), path + ": field '" + key + "': unknown setting");
  }
}

TEST(ServeConfig, NumbersOutOfRangeAreRefused) {
  TempDir dir;
  for (const char* text : {R"({"tick_s": 0})", R"({"tick_s": -0.5})", R"({"time_scale": -600})"}) {
    const std::string path = WriteConfig(dir, "r.json", text);
    Result<ServeConfig> c = ParseServeConfig(path, ServeConfig{});
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_EQ(c.status().where(), path);
    EXPECT_NE(c.status().message().find("must be > 0"), std::string::npos) << text;
  }
  const std::string ok = WriteConfig(dir, "ok.json", R"({"tick_s": 1e-3, "time_scale": 1})");
  EXPECT_TRUE(ParseServeConfig(ok, ServeConfig{}).ok());
}

TEST(ServeConfig, AMissingFileOrAFileThatIsNotAnObject) {
  TempDir dir;
  const std::string missing = (dir.path() / "none.json").string();
  Result<ServeConfig> c = ParseServeConfig(missing, ServeConfig{});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c.status().where(), missing);
  const std::string list = WriteConfig(dir, "list.json", R"(["db", "x.db"])");
  c = ParseServeConfig(list, ServeConfig{});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().ToString(), list + ": field 'config': not a JSON object");
}

TEST(ServeConfig, TheFileHoldsTheDocumentedSettings) {
  // docs/server.md lists these for --config.
  const std::vector<std::string> documented = {
      "backend",       "listen", "db",         "cluster", "token",     "runs_dir",   "models_dir",
      "train_command", "policy", "slurm_conf", "k8s_dir", "inventory", "frameworks",
      "transformers",  "torch",  "time_scale", "tick_s"};
  EXPECT_EQ(ServeConfigKeys(), documented);
}

// ---- checks before anything is opened -------------------------------------------------------

TEST(ServeChecks, ListenIsAddrColonPort) {
  Result<ListenAddress> a = ParseListen("0.0.0.0:8470");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "0.0.0.0");
  EXPECT_EQ(a->port, 8470);
  EXPECT_EQ(ParseListen("localhost").status().message(), "must be ADDR:PORT");
  for (const char* bad : {"127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:http", "127.0.0.1:"}) {
    Result<ListenAddress> r = ParseListen(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().field(), "listen");
    EXPECT_EQ(r.status().message(), "bad port") << bad;
  }
}

TEST(ServeChecks, TokensThatCannotTravelInAHeaderAreRefused) {
  EXPECT_TRUE(CheckToken("", "here").ok());
  EXPECT_TRUE(CheckToken("abc-DEF_123.~", "here").ok());
  Status blank = CheckToken("   ", "--token");
  EXPECT_EQ(blank.ToString(), "field 'token': is blank (from --token): give a real token, or none");
  Status space = CheckToken("two words", "x");
  EXPECT_NE(space.message().find("contains a space"), std::string::npos) << space.ToString();
  Status tab = CheckToken("tab\there", "x");
  EXPECT_NE(tab.message().find("the byte 0x09"), std::string::npos) << tab.ToString();
  EXPECT_EQ(tab.message().find("tab"), std::string::npos) << "the token is never shown";
}

TEST(ServeChecks, NoTokenMeansLoopbackOnly) {
  ServeConfig c;
  EXPECT_TRUE(ValidateServeConfig(c).ok());
  c.listen = "0.0.0.0:8470";
  Status st = ValidateServeConfig(c);
  EXPECT_EQ(st.field(), "token");
  EXPECT_NE(st.message().find("non-loopback"), std::string::npos) << st.ToString();
  c.token = "t0ken";
  EXPECT_TRUE(ValidateServeConfig(c).ok());
  c.tick_s = 0;
  EXPECT_FALSE(ValidateServeConfig(c).ok());
  c.tick_s = 0.5;
  c.time_scale = -1;
  EXPECT_FALSE(ValidateServeConfig(c).ok());
}

TEST(ServeChecks, TheEnvironmentsTransformersReleaseIsChecked) {
  ServeConfig c;
  EXPECT_EQ(DaemonOptionsFor(c).hf_loss, HfLoss::kPadded);
  c.transformers = "4.38";
  EXPECT_TRUE(ValidateServeConfig(c).ok());
  EXPECT_EQ(DaemonOptionsFor(c).hf_loss, HfLoss::kModelUpcastSliced);
  c.transformers = "latest";
  Status st = ValidateServeConfig(c);
  EXPECT_EQ(st.field(), "transformers");
  EXPECT_NE(st.message().find("'latest'"), std::string::npos) << st.ToString();
}

TEST(ServeChecks, TheEnvironmentsTorchReleaseIsChecked) {
  ServeConfig c;
  EXPECT_FALSE(DaemonOptionsFor(c).mean_keeps_input);
  c.torch = "2.1.2";
  EXPECT_TRUE(ValidateServeConfig(c).ok());
  EXPECT_TRUE(DaemonOptionsFor(c).mean_keeps_input);
  c.torch = "2.2.0+cu121";
  EXPECT_FALSE(DaemonOptionsFor(c).mean_keeps_input);
  c.torch = "stable";
  Status st = ValidateServeConfig(c);
  EXPECT_EQ(st.field(), "torch");
  EXPECT_NE(st.message().find("'stable'"), std::string::npos) << st.ToString();
}

TEST(ServeChecks, DaemonOptionsFollowTheConfig) {
  ServeConfig c;
  c.listen = "0.0.0.0:9001";
  c.train_command = "  torchrun   --nproc 2 train.py ";
  DaemonOptions d = DaemonOptionsFor(c);
  // Runs on this machine reach a daemon listening on every address at 127.0.0.1.
  EXPECT_EQ(d.report_base_url, "http://127.0.0.1:9001");
  EXPECT_EQ(d.train_command, (std::vector<std::string>{"torchrun", "--nproc", "2", "train.py"}));
  // The sim backend runs no training code: every layout, every framework.
  EXPECT_TRUE(d.train_limits.tp && d.train_limits.pp && d.train_limits.cp);
  EXPECT_EQ(d.frameworks.size(), 4u);
  c.backend = "slurm";
  // examples/train.py: data parallel (DDP, ZeRO 1-3), no offload; no framework unless allowed.
  d = DaemonOptionsFor(c);
  EXPECT_FALSE(d.train_limits.tp || d.train_limits.pp || d.train_limits.cp || d.train_limits.ep);
  EXPECT_EQ(d.train_limits.zeros, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_FALSE(d.train_limits.Allows(Offload::kOptimizer));
  EXPECT_TRUE(d.frameworks.empty());
  c.token = "a-token";  // (listening on every address needs one)
  c.frameworks = "deepspeed, torchtitan,deepspeed";
  EXPECT_EQ(DaemonOptionsFor(c).frameworks,
            (std::vector<Launcher>{Launcher::kDeepSpeed, Launcher::kTorchtitan}));
  EXPECT_TRUE(ValidateServeConfig(c).ok());
  c.frameworks = "torchtitan,jax";
  Status bad = ValidateServeConfig(c);
  EXPECT_EQ(bad.field(), "frameworks");
  EXPECT_NE(bad.message().find("'jax'"), std::string::npos) << bad.ToString();
  c.frameworks = "";
  c.all_layouts = true;
  EXPECT_TRUE(DaemonOptionsFor(c).train_limits.tp);
  EXPECT_FALSE(DaemonOptionsFor(c).train_limits.offload_activations);
  c.report_url = "http://frenzy.internal:80";
  EXPECT_EQ(DaemonOptionsFor(c).report_base_url, "http://frenzy.internal:80");
}

// ---- backends by name -----------------------------------------------------------------------

TEST(ServeBackends, AnUnknownNameListsTheKnownOnes) {
  ServeConfig c;
  c.backend = "nomad";
  Result<std::unique_ptr<Backend>> b = MakeBackend(c, GpuCatalog::Default());
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().ToString(),
            "field 'backend': unknown backend 'nomad' (sim, local, slurm, k8s)");
  EXPECT_EQ(BackendNames(), (std::vector<std::string>{"sim", "local", "slurm", "k8s"}));
}

TEST(ServeBackends, SimBuildsTheBundledCluster) {
  ServeConfig c;  // sim on "lab"
  Result<std::unique_ptr<Backend>> b = MakeBackend(c, GpuCatalog::Default(), [] { return 0.0; });
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->name(), "sim");
  auto nodes = (*b)->Nodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  // data/clusters/lab.json: 1 x 8 A100-80GB, 2 x 4 V100-32GB, 2 x 4 RTX-3090.
  std::map<std::string, int64_t> gpus;
  for (const BackendNode& n : *nodes) gpus[n.gpu] += n.gpus;
  EXPECT_EQ(nodes->size(), 5u);
  EXPECT_EQ(gpus,
            (std::map<std::string, int64_t>{{"A100-80GB", 8}, {"RTX-3090", 8}, {"V100-32GB", 8}}));
}

TEST(ServeBackends, SimWithAnUnknownClusterSaysSo) {
  ServeConfig c;
  c.cluster = "no-such-cluster";
  Result<std::unique_ptr<Backend>> b = MakeBackend(c, GpuCatalog::Default());
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().field(), "cluster");
}

TEST(ServeBackends, EachNameBuildsItsBackend) {
  TempDir dir;
  ServeConfig c;
  c.k8s_dir = (dir.path() / "k8s").string();
  for (const char* name : {"slurm", "k8s"}) {  // no cluster manager is asked until used
    c.backend = name;
    Result<std::unique_ptr<Backend>> b = MakeBackend(c, GpuCatalog::Default());
    ASSERT_TRUE(b.ok()) << name << ": " << b.status().ToString();
    EXPECT_EQ((*b)->name(), name);
  }
}

// ---- the control loop -----------------------------------------------------------------------

// What a ServeLog was given, for assertions (the loop logs from its own thread).
struct CapturedLog {
  std::mutex mu;
  std::vector<json> lines;
  ServeLog Sink() {
    return [this](const std::string& level, const std::string& msg, const json& extra) {
      json line = extra;
      line["level"] = level;
      line["msg"] = msg;
      std::lock_guard<std::mutex> lock(mu);
      lines.push_back(line);
    };
  }
  // The first line whose message starts with `prefix`, or null.
  json Find(const std::string& prefix) {
    std::lock_guard<std::mutex> lock(mu);
    for (const json& l : lines) {
      if (l["msg"].get<std::string>().rfind(prefix, 0) == 0) return l;
    }
    return nullptr;
  }
};

ServeConfig SimConfig(const TempDir& dir) {
  ServeConfig c;
  c.db = (dir.path() / "frenzy.db").string();
  c.runs_dir = (dir.path() / "runs").string();
  c.tick_s = 0.01;
  return c;
}

// Waits until `done()` holds, polling every 10 ms; false after `seconds`.
template <typename F>
bool WaitFor(F done, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

const json kSpec = {
    {"model", "llama-2-7b"}, {"tokens", 1e12}, {"global_batch", 64}, {"seq_len", 2048}};

TEST(ControlLoop, LaunchesASubmittedJobAndStopsWhenAsked) {
  TempDir dir;
  auto daemon = OpenDaemon(SimConfig(dir), GpuCatalog::Default());
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  Daemon& d = **daemon;
  CapturedLog log;
  ControlLoop loop(d, log.Sink());
  std::atomic<bool> stop{false};
  Status result = InvalidArgument("not returned");
  std::thread t([&] { result = loop.Run(0.01, stop); });
  Result<json> job = d.Submit(kSpec);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const std::string id = (*job)["id"].get<std::string>();
  auto state = [&] {
    Result<json> j = d.GetJob(id);
    return j.ok() ? (*j)["state"].get<std::string>() : std::string("?");
  };
  EXPECT_TRUE(WaitFor([&] { return state() == "running"; }, 10)) << state();
  EXPECT_TRUE(WaitFor([&] { return !log.Find("scheduled").is_null(); }, 5));
  json scheduled = log.Find("scheduled");
  if (!scheduled.is_null()) {
    EXPECT_EQ(scheduled["level"], "info");
    EXPECT_GE(scheduled["changes"].get<int>(), 1);
  }
  const auto asked = std::chrono::steady_clock::now();
  stop = true;
  t.join();
  const double took_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
  EXPECT_TRUE(result.ok()) << result.ToString();
  EXPECT_LT(took_s, 2.0) << "a loop 0.01 s apart stops within a tick or two";
  EXPECT_TRUE(log.Find("stopping").is_null());
  // The loop is done: the job stays as it was left.
  EXPECT_EQ(state(), "running");
}

TEST(ControlLoop, ADeletedDatabaseStopsTheDaemon) {
  TempDir dir;
  const ServeConfig c = SimConfig(dir);
  auto daemon = OpenDaemon(c, GpuCatalog::Default());
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  CapturedLog log;
  ControlLoop loop(**daemon, log.Sink());
  ASSERT_TRUE(loop.RunOnce().ok());
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(c.db + suffix);
  std::atomic<bool> stop{false};
  Status st = loop.Run(0.01, stop);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.field(), "db");
  EXPECT_EQ(st.where(), c.db);
  EXPECT_TRUE(stop.load()) << "the HTTP front is told to stop too";
  json line = log.Find("stopping: ");
  ASSERT_FALSE(line.is_null());
  EXPECT_EQ(line["level"], "error");
  EXPECT_NE(line["msg"].get<std::string>().find("database file is gone"), std::string::npos);
}

// ---- RunServe: the whole daemon -------------------------------------------------------------

// A port nothing listens on now (the kernel's choice; it may be taken again, rarely).
int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

TEST(RunServe, ABadConfigIsRefusedBeforeTheDatabaseIsOpened) {
  TempDir dir;
  ServeConfig c = SimConfig(dir);
  c.listen = "0.0.0.0:8470";  // and no token
  std::atomic<bool> stop{false};
  Result<ServeEnd> end = RunServe(c, stop);
  ASSERT_FALSE(end.ok());
  EXPECT_EQ(end.status().field(), "token");
  EXPECT_FALSE(std::filesystem::exists(c.db));
  c.listen = "127.0.0.1:8470";
  c.backend = "nomad";
  end = RunServe(c, stop);
  ASSERT_FALSE(end.ok());
  EXPECT_EQ(end.status().field(), "backend");
  EXPECT_FALSE(std::filesystem::exists(c.db));
}

TEST(RunServe, ServesTheApiRunsJobsAndStopsWhenAsked) {
  TempDir dir;
  ServeConfig c = SimConfig(dir);
  const int port = FreePort();
  ASSERT_GT(port, 0);
  c.listen = "127.0.0.1:" + std::to_string(port);
  c.token = "serve-test-token";
  CapturedLog log;
  std::atomic<int> listening{0};
  bool started = false;
  ServeHooks hooks;
  hooks.log = log.Sink();
  hooks.on_started = [&] { started = true; };
  hooks.on_listening = [&](int p) { listening = p; };
  std::atomic<bool> stop{false};
  std::atomic<bool> returned{false};
  Result<ServeEnd> end = Status(StatusCode::kInternal, "not returned");
  std::thread t([&] {
    end = RunServe(c, stop, hooks);
    returned = true;
  });
  WaitFor([&] { return listening.load() != 0 || returned.load(); }, 20);
  if (listening.load() == 0) {  // it never served: say why
    stop = true;
    t.join();
    FAIL() << (end.ok() ? std::string("returned without serving") : end.status().ToString());
  }
  EXPECT_EQ(listening.load(), port);
  httplib::Client client("127.0.0.1", port);
  httplib::Headers auth = {{"Authorization", "Bearer " + c.token}};
  auto posted = client.Post("/v1/jobs", auth, kSpec.dump(), "application/json");
  ASSERT_TRUE(posted) << httplib::to_string(posted.error());
  EXPECT_EQ(posted->status, 201) << posted->body;
  const std::string id = json::parse(posted->body, nullptr, false).value("id", "");
  auto state = [&] {
    auto r = client.Get("/v1/jobs/" + id, auth);
    if (!r || r->status != 200) return std::string("?");
    return json::parse(r->body, nullptr, false).value("state", "?");
  };
  EXPECT_TRUE(WaitFor([&] { return state() == "running"; }, 10)) << state();
  stop = true;
  t.join();
  ASSERT_TRUE(end.ok()) << end.status().ToString();
  EXPECT_TRUE(end->loop.ok()) << end->loop.ToString();
  EXPECT_TRUE(started);
  json hello = log.Find("frenzyd started");
  ASSERT_FALSE(hello.is_null());
  EXPECT_EQ(hello["backend"], "sim");
  EXPECT_EQ(hello["gpus"], 24);  // the lab cluster
  EXPECT_FALSE(log.Find("frenzyd stopped").is_null());
  EXPECT_FALSE(client.Get("/healthz")) << "nothing listens once it stopped";
}

}  // namespace
}  // namespace frenzy::server
