// frenzyd against hostile or careless clients, at the level of the daemon and Handle(): bounded
// JSON, reports in range and from the right run, heartbeats typed, model names that never reach
// a file, stored rows that cannot crash a restart, one daemon per database, browsers refused in
// no-token mode. The same attacks over real sockets are tests/integration/hostile_clients.py.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "hardware/cluster.h"
#include "server/api.h"
#include "server/daemon.h"
#include "server/runtime_state.h"
#include "backend/sim_backend.h"
#include "server_test_util.h"

namespace frenzy::server {
namespace {

using nlohmann::json;
using test_util::TempDir;

// The sim backend, remembering the environment each run was launched with (its token), and
// whose Status() can be made to wait at a gate: a Slurm or Kubernetes poll that takes long.
class TestBackend : public Backend {
 public:
  struct Gate {
    std::mutex mu;
    std::condition_variable cv;
    bool closed = false, waiting = false;
  };
  using Envs = std::map<std::string, std::map<std::string, std::string>>;

  TestBackend(Cluster c, std::function<double()> now) : sim_(std::move(c), 3600.0, now) {}
  std::string_view name() const override { return "sim"; }
  Result<std::vector<BackendNode>> Nodes() override {
    ASSIGN_OR_RETURN(std::vector<BackendNode> nodes, sim_.Nodes());
    for (BackendNode& n : nodes) n.up = down_->count(n.name) == 0;
    return nodes;
  }
  Result<std::string> Launch(const LaunchSpec& spec) override {
    (*env_)[spec.job_id] = spec.env;
    return sim_.Launch(spec);
  }
  Result<RunStatus> Status(const std::string& handle) override {
    std::unique_lock<std::mutex> lock(gate_->mu);
    if (gate_->closed) {
      gate_->waiting = true;
      gate_->cv.notify_all();
      gate_->cv.wait(lock, [&] { return !gate_->closed; });
    }
    if (*lost_) {  // every run has lost its node
      RunStatus st;
      st.state = RunState::kFailed;
      st.failure = FailureKind::kNodeLost;
      st.message = "test: NODE_FAIL";
      return st;
    }
    if (*crash_) {  // every run has crashed (not out of memory)
      RunStatus st;
      st.state = RunState::kFailed;
      st.failure = FailureKind::kCrashed;
      st.exit_code = 1;
      st.message = "test: the run crashed";
      return st;
    }
    return sim_.Status(handle);
  }
  ::frenzy::Status Cancel(const std::string& handle) override { return sim_.Cancel(handle); }

  std::shared_ptr<Envs> env_ = std::make_shared<Envs>();
  std::shared_ptr<Gate> gate_ = std::make_shared<Gate>();
  std::shared_ptr<bool> crash_ = std::make_shared<bool>(false);
  std::shared_ptr<bool> lost_ = std::make_shared<bool>(false);
  std::shared_ptr<std::set<std::string>> down_ = std::make_shared<std::set<std::string>>();

 private:
  SimBackend sim_;
};

struct Harness {
  TempDir dir{"frenzy-hardening"};
  double now = 1000;
  std::string db = (dir.path() / "d.db").string();
  std::shared_ptr<TestBackend::Envs> env;
  std::shared_ptr<TestBackend::Gate> gate;
  std::shared_ptr<bool> crash;
  std::shared_ptr<bool> lost;
  std::shared_ptr<std::set<std::string>> down;
  double nodes_every_s = 30;
  std::string models_dir;

  Result<std::unique_ptr<Daemon>> Try() {
    auto cluster = ResolveCluster("lab", GpuCatalog::Default());
    EXPECT_TRUE(cluster.ok());
    auto backend = std::make_unique<TestBackend>(*cluster, [this] { return now; });
    env = backend->env_;
    gate = backend->gate_;
    crash = backend->crash_;
    lost = backend->lost_;
    down = backend->down_;
    ASSIGN_OR_RETURN(auto store, Store::Open(db));
    DaemonOptions o;
    o.runs_dir = (dir.path() / "runs").string();
    o.train_limits = AllTrainLimits();
    o.train_framework = Framework::kMegatron;
    o.models_dir = models_dir;
    o.nodes_every_s = nodes_every_s;
    return Daemon::Create(o, std::move(store), std::move(backend), [this] { return now; });
  }
  std::unique_ptr<Daemon> Make() {
    auto d = Try();
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    return d.ok() ? std::move(d).value() : nullptr;
  }
};

json Spec(const json& model) {
  return json{{"model", model}, {"tokens", 1e9}, {"global_batch", 64}, {"seq_len", 1024}};
}

std::string Nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

HttpResponse Call(Daemon& d, const ApiOptions& o, const std::string& method,
                  const std::string& path, const std::string& body, const std::string& auth = "",
                  const std::string& content_type = "application/json",
                  const std::string& host = "127.0.0.1:8470", const std::string& origin = "") {
  HttpRequest r;
  r.method = method;
  r.path = path;
  r.body = body;
  r.authorization = auth;
  r.content_type = content_type;
  r.host = host;
  r.origin = origin;
  return Handle(d, r, o);
}

json ErrorOf(const HttpResponse& r) {
  json j = json::parse(r.body, nullptr, false);
  EXPECT_TRUE(j.is_object() && j.contains("error")) << r.body;
  return j.is_object() ? j.value("error", json::object()) : json::object();
}

// 60,000 nested arrays in an extra field of an inline model crashed the daemon (SIGSEGV) when the
// value was serialised; it is refused before parsing, on every endpoint that takes a body.
TEST(Hardening, DeeplyNestedJsonIsRefusedOnEveryEndpoint) {
  Harness h;
  auto d = h.Make();
  ApiOptions o;
  o.token = "admin-token";
  const std::string deep = Nested(60000);
  const std::string model =
      R"({"model_type":"gpt2","n_layer":2,"n_embd":64,"n_head":2,"vocab_size":100,"x":)" + deep +
      "}";
  const std::string spec = R"({"model":)" + model + R"(,"tokens":1e9,"global_batch":8})";
  for (const char* path :
       {"/v1/jobs", "/v1/plan", "/v1/nodes/n1/heartbeat", "/v1/jobs/j-000001/report"}) {
    HttpResponse r = Call(*d, o, "POST", path, spec, "Bearer admin-token");
    EXPECT_EQ(r.status, 400) << path;
    EXPECT_EQ(ErrorOf(r)["field"], "body") << path;
    EXPECT_NE(ErrorOf(r)["message"].get<std::string>().find("deeper than 64"), std::string::npos);
  }
  // 64 levels pass the bound (and fail, if at all, for what they say); 65 do not.
  HttpResponse at64 =
      Call(*d, o, "POST", "/v1/nodes/n1/heartbeat", Nested(64), "Bearer admin-token");
  EXPECT_NE(ErrorOf(at64)["field"], "body");
  HttpResponse at65 =
      Call(*d, o, "POST", "/v1/nodes/n1/heartbeat", Nested(65), "Bearer admin-token");
  EXPECT_EQ(ErrorOf(at65)["field"], "body");
  EXPECT_EQ(Call(*d, o, "GET", "/v1/cluster", "").status, 200);
  EXPECT_TRUE(json::parse(Call(*d, o, "GET", "/v1/jobs", "").body)["jobs"].empty());
}

// A report of 1e300 made the step -2^63 and the progress 100%; any run's token could do it to any
// job. Reports are typed, bounded by the job, monotone within a run, and from that job's run.
TEST(Hardening, ReportsAreBoundedMonotoneAndScopedToTheirRun) {
  Harness h;
  auto d = h.Make();
  ApiOptions o;
  o.token = "admin-token";
  const std::string admin = "Bearer admin-token";
  ASSERT_EQ(Call(*d, o, "POST", "/v1/jobs", Spec("gpt2").dump(), admin).status, 201);
  ASSERT_EQ(Call(*d, o, "POST", "/v1/jobs", Spec("gpt2").dump(), admin).status, 201);
  ASSERT_TRUE(d->Tick().ok());
  ASSERT_EQ(h.env->count("j-000001"), 1u);
  ASSERT_EQ(h.env->count("j-000002"), 1u);
  const std::string run1 = h.env->at("j-000001").at("FRENZY_TOKEN");
  const std::string run2 = h.env->at("j-000002").at("FRENZY_TOKEN");
  EXPECT_NE(run1, "admin-token");  // runs never get the admin token
  EXPECT_NE(run1, run2);
  EXPECT_GE(run1.size(), 32u);
  const std::string report1 = "/v1/jobs/j-000001/report";
  struct Case {
    std::string body, field;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"step":1e300,"tokens":1})", "step"},
           {R"({"step":1,"tokens":1e300})", "tokens"},
           {R"({"step":1,"tokens":1,"peak_bytes":1e300})", "peak_bytes"},
           {R"({"step":-1,"tokens":1})", "step"},
           {R"({"step":"x","tokens":1})", "step"},
           {R"({"step":1.5,"tokens":1})", "step"},
           // the job has 1e9 tokens: a step or token count past it is a lie
           {R"({"step":1,"tokens":2e9})", "tokens"},
           {R"({"step":1e10,"tokens":10})", "step"},
           // ... except by less than one step (64 x 1024 = 65536 tokens): runs train whole steps
           {R"({"step":1,"tokens":1000065537})", "tokens"},
           // a checkpoint cannot hold more than the run has trained
           {R"({"step":1,"tokens":10,"checkpoint_tokens":20})", "checkpoint_tokens"},
           {R"({"step":1,"tokens":10,"checkpoint_tokens":-1})", "checkpoint_tokens"},
       }) {
    HttpResponse r = Call(*d, o, "POST", report1, c.body, "Bearer " + run1);
    EXPECT_EQ(r.status, 400) << c.body;
    EXPECT_EQ(ErrorOf(r)["field"], c.field) << c.body;
  }
  // The right run reports; the other job's run and strangers may not.
  EXPECT_EQ(Call(*d, o, "POST", report1, R"({"step":10,"tokens":5000})", "Bearer " + run1).status,
            200);
  EXPECT_EQ(Call(*d, o, "POST", report1, R"({"step":11,"tokens":6000})", "Bearer " + run2).status,
            403);
  EXPECT_EQ(Call(*d, o, "POST", report1, R"({"step":11,"tokens":6000})", "Bearer nope").status,
            403);
  EXPECT_EQ(Call(*d, o, "POST", report1, R"({"step":11,"tokens":6000})", "").status, 401);
  // A run token is good for its job's reports and nothing else.
  EXPECT_EQ(Call(*d, o, "DELETE", "/v1/jobs/j-000001", "", "Bearer " + run1).status, 401);
  EXPECT_EQ(Call(*d, o, "POST", "/v1/jobs", Spec("gpt2").dump(), "Bearer " + run1).status, 401);
  // Within a run, progress does not go back.
  HttpResponse back = Call(*d, o, "POST", report1, R"({"step":5,"tokens":5000})", "Bearer " + run1);
  EXPECT_EQ(back.status, 409);
  EXPECT_EQ(ErrorOf(back)["field"], "step");
  json j = *d->GetJob("j-000001");
  EXPECT_EQ(j["progress"]["step"], 10);
  EXPECT_DOUBLE_EQ(j["progress"]["tokens_done"].get<double>(), 5000);
  // The last whole step passes the total by less than a step: taken, progress capped at it.
  EXPECT_EQ(Call(*d, o, "POST", report1, R"({"step":15260,"tokens":1000013824})",
                 "Bearer " + run1).status,
            200);
  j = *d->GetJob("j-000001");
  EXPECT_DOUBLE_EQ(j["progress"]["tokens_done"].get<double>(), 1e9);
}

// A run that lost its node is requeued from its checkpoint, and the backend is asked which nodes
// are left before the job is placed again: never back on the node that went down. A node back
// up is seen at the next interval.
TEST(Hardening, ANodeThatWentDownTakesNoNewRunsUntilItIsBack) {
  Harness h;
  h.nodes_every_s = 60;
  auto d = h.Make();
  ASSERT_TRUE(d->Submit(Spec("llama-2-7b")).ok());
  ASSERT_TRUE(d->Tick().ok());
  json j = *d->GetJob("j-000001");
  ASSERT_EQ(j["state"], "running") << j.dump();
  std::set<std::string> used;
  for (const json& p : j["allocation"]) used.insert(p[0].get<std::string>());
  ASSERT_FALSE(used.empty());
  *h.down = used;
  *h.lost = true;
  h.now += 1;
  ASSERT_TRUE(d->Tick().ok());
  j = *d->GetJob("j-000001");
  EXPECT_EQ(j["state"], "queued") << j.dump();
  EXPECT_EQ(j["events"].back()["kind"], "node_lost") << j.dump();
  *h.lost = false;
  h.now += 1;
  ASSERT_TRUE(d->Tick().ok());  // asks for the nodes first, then places the job elsewhere
  j = *d->GetJob("j-000001");
  ASSERT_EQ(j["state"], "running") << j.dump();
  for (const json& p : j["allocation"]) {
    EXPECT_EQ(used.count(p[0].get<std::string>()), 0u) << j["allocation"].dump();
  }
  auto up_of = [&](const std::string& node) {
    const json cluster = d->ClusterJson();
    for (const json& n : cluster["nodes"]) {
      if (n["name"] == node) return n["up"].get<bool>();
    }
    return true;
  };
  const std::string gone = *used.begin();
  EXPECT_FALSE(up_of(gone)) << gone;
  // Back up: seen once the interval has passed, not before.
  h.down->clear();
  h.now += 10;
  ASSERT_TRUE(d->Tick().ok());
  EXPECT_FALSE(up_of(gone));
  h.now += 60;
  ASSERT_TRUE(d->Tick().ok());
  EXPECT_TRUE(up_of(gone));
}

// A crashed run loses what it trained since its last checkpoint: the job's progress goes back
// to the checkpoint the run reported (as the engine's runs lose it), not to its last report.
TEST(Hardening, ACrashedRunResumesFromItsLastCheckpoint) {
  Harness h;
  auto d = h.Make();
  ApiOptions o;
  o.token = "admin-token";
  ASSERT_EQ(Call(*d, o, "POST", "/v1/jobs", Spec("gpt2").dump(), "Bearer admin-token").status, 201);
  ASSERT_TRUE(d->Tick().ok());
  const std::string run = "Bearer " + h.env->at("j-000001").at("FRENZY_TOKEN");
  const std::string report = "/v1/jobs/j-000001/report";
  EXPECT_EQ(Call(*d, o, "POST", report, R"({"step":10,"tokens":5000,"checkpoint_tokens":2000})",
                 run).status,
            200);
  EXPECT_DOUBLE_EQ((*d->GetJob("j-000001"))["progress"]["tokens_done"].get<double>(), 5000);
  *h.crash = true;
  ASSERT_TRUE(d->Tick().ok());
  json j = *d->GetJob("j-000001");
  EXPECT_NE(j["state"], "running") << j.dump();
  EXPECT_DOUBLE_EQ(j["progress"]["tokens_done"].get<double>(), 2000) << j.dump();
}

// {"gpus":[{"gpu":5}]} answered 500 with the JSON library's message; unknown fields were stored
// and served to anyone reading the cluster.
TEST(Hardening, HeartbeatsAreTypedAndStoreOnlyKnownFields) {
  Harness h;
  auto d = h.Make();
  ApiOptions o;
  o.token = "admin-token";
  const std::string admin = "Bearer admin-token";
  struct Case {
    std::string body, field;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"gpus":[{"gpu":5}]})", "gpus[0].gpu"},
           {R"({"gpus":"x"})", "gpus"},
           {R"({"gpus":[{"gpu":"A100-80GB"},{"gpu":"A100-80GB","memory_total_bytes":"x"}]})",
            "gpus[1].memory_total_bytes"},
           {R"({"gpus":[{"gpu":"A100-80GB","memory_used_bytes":-1}]})",
            "gpus[0].memory_used_bytes"},
           {R"({"gpus":[7]})", "gpus[0]"},
       }) {
    HttpResponse r = Call(*d, o, "POST", "/v1/nodes/n1/heartbeat", c.body, admin);
    EXPECT_EQ(r.status, 400) << c.body;
    EXPECT_EQ(ErrorOf(r)["field"], c.field) << c.body;
  }
  HttpResponse ok = Call(*d, o, "POST", "/v1/nodes/n1/heartbeat",
                         R"({"gpus":[{"gpu":"A100-80GB","memory_total_bytes":85899345920,)"
                         R"("secret":"sk-123","extra":[1,2]}],"junk":{"a":1}})",
                         admin);
  EXPECT_EQ(ok.status, 200) << ok.body;
  const std::string cluster = Call(*d, o, "GET", "/v1/cluster", "").body;
  EXPECT_EQ(cluster.find("sk-123"), std::string::npos) << cluster;
  EXPECT_EQ(cluster.find("junk"), std::string::npos) << cluster;
  EXPECT_NE(cluster.find("85899345920"), std::string::npos) << cluster;
}

// A bare model name was opened relative to the daemon's folder: a file's first bytes came back
// in the error, existing and missing files were told apart, a FIFO blocked the daemon. Names
// now resolve to the zoo (and an operator's models folder) and nothing else.
TEST(Hardening, ModelNamesNeverReachTheFilesystem) {
  Harness h;
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(h.dir.path());
  {
    std::ofstream("secret.txt") << "\"sk-THISISASECRET\"";
    std::filesystem::create_directory("folder");
    std::ofstream("folder/config.json")
        << R"({"model_type":"gpt2","n_layer":2,"n_embd":64,"n_head":2,"vocab_size":100})";
    ASSERT_EQ(::mkfifo("fifo", 0600), 0);
  }
  auto d = h.Make();
  ApiOptions o;
  o.token = "admin-token";
  auto message_without = [](const HttpResponse& r, const std::string& name) {
    std::string m = ErrorOf(r).value("message", std::string());
    for (size_t at; (at = m.find(name)) != std::string::npos;) m.erase(at, name.size());
    return m;
  };
  HttpResponse missing =
      Call(*d, o, "POST", "/v1/jobs", Spec("nonexistent-file").dump(), "Bearer admin-token");
  EXPECT_EQ(missing.status, 404);
  for (const char* name :
       {"secret.txt", "./secret.txt", "folder", "fifo", "d.db", "../secret.txt", "/etc/passwd"}) {
    for (const char* path : {"/v1/jobs", "/v1/plan"}) {
      HttpResponse r = Call(*d, o, "POST", path, Spec(name).dump(), "Bearer admin-token");
      EXPECT_EQ(r.status, 404) << name << " " << r.body;
      EXPECT_EQ(r.body.find("sk-"), std::string::npos) << r.body;
      EXPECT_EQ(message_without(r, name), message_without(missing, "nonexistent-file")) << name;
    }
  }
  std::filesystem::current_path(cwd);
  EXPECT_EQ(Call(*d, o, "POST", "/v1/jobs", Spec("gpt2").dump(), "Bearer admin-token").status, 201);
}

TEST(Hardening, AnOperatorsModelsFolderIsOfferedByEntryName) {
  Harness h;
  std::filesystem::create_directories(h.dir.path() / "models" / "tiny");
  std::ofstream(h.dir.path() / "models" / "tiny" / "config.json")
      << R"({"model_type":"gpt2","n_layer":2,"n_embd":64,"n_head":2,"vocab_size":100})";
  std::ofstream(h.dir.path() / "outside.json")
      << R"({"model_type":"gpt2","n_layer":2,"n_embd":64,"n_head":2,"vocab_size":100})";
  h.models_dir = (h.dir.path() / "models").string();
  auto d = h.Make();
  EXPECT_TRUE(d->Submit(Spec("tiny")).ok());
  // Only entries of the folder, by name: no path walks out of it.
  EXPECT_EQ(d->Submit(Spec("../outside")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(d->Submit(Spec("tiny/config")).status().code(), StatusCode::kNotFound);
}

// In no-token mode anyone who reaches loopback is trusted, so web pages must not reach it: a
// text/plain form POST, a foreign Host (DNS rebinding) or a foreign Origin created jobs.
TEST(Hardening, NoTokenModeRefusesWhatBrowsersCanForge) {
  Harness h;
  auto d = h.Make();
  ApiOptions o;  // no token
  const std::string spec = Spec("gpt2").dump();
  EXPECT_EQ(Call(*d, o, "POST", "/v1/jobs", spec, "", "text/plain").status, 415);
  EXPECT_EQ(Call(*d, o, "POST", "/v1/jobs", spec, "", "").status, 415);
  EXPECT_EQ(Call(*d, o, "POST", "/v1/jobs", spec, "", "application/json", "evil.example").status,
            403);
  EXPECT_EQ(
      Call(*d, o, "POST", "/v1/jobs", spec, "", "application/json", "127.0.0.1.evil.example:80")
          .status,
      403);
  EXPECT_EQ(Call(*d, o, "GET", "/v1/jobs", "", "", "", "evil.example:8470").status, 403);
  EXPECT_EQ(Call(*d, o, "POST", "/v1/jobs", spec, "", "application/json", "localhost:8470",
                 "http://evil.example")
                .status,
            403);
  EXPECT_TRUE(json::parse(Call(*d, o, "GET", "/v1/jobs", "").body)["jobs"].empty());
  EXPECT_EQ(Call(*d, o, "POST", "/v1/jobs", spec, "", "application/json; charset=utf-8",
                 "[::1]:8470", "http://localhost:8470")
                .status,
            201);
  EXPECT_EQ(Call(*d, o, "POST", "/v1/jobs", spec, "", "application/json", "localhost").status, 201);
}

TEST(Hardening, ErrorsHaveBodiesAndMethodsAreChecked) {
  Harness h;
  auto d = h.Make();
  ApiOptions o;
  o.token = "admin-token";
  EXPECT_EQ(Call(*d, o, "PUT", "/healthz", "").status, 405);
  EXPECT_EQ(Call(*d, o, "POST", "/v1/cluster", "{}").status, 405);
  HttpResponse nf = Call(*d, o, "GET", "/v1/" + std::string(5000, 'a'), "");
  EXPECT_EQ(nf.status, 404);
  EXPECT_LT(nf.body.size(), 600u);  // the path is not echoed whole
  EXPECT_EQ(ErrorOf(nf)["code"], "not_found");
}

// Found by fuzz/api_fuzz.cc: bytes that are not UTF-8 (in a path, or cut out of a long name) made
// the JSON library throw while writing the answer, after the job was stored, and then every
// listing and the control loop threw too. A number beyond a double made the parser throw.
TEST(Hardening, BytesThatAreNotUtf8AndHugeNumbersAreAnswered) {
  Harness h;
  auto d = h.Make();
  ApiOptions o;
  o.token = "admin-token";
  const std::string admin = "Bearer admin-token";
  HttpResponse path = Call(*d, o, "GET", "/v1/jobs/j-000002\xff\xff", "");
  EXPECT_EQ(path.status, 404);
  EXPECT_EQ(ErrorOf(path)["code"], "not_found");
  std::string long_path = "/";
  for (int i = 0; i < 200; ++i) long_path += "\xc3\xa9";  // é, two bytes each
  EXPECT_EQ(Call(*d, o, "GET", long_path, "").status, 404);
  HttpResponse huge = Call(*d, o, "POST", "/v1/jobs", R"({"model":"gpt2","tokens":1e400})", admin);
  EXPECT_EQ(huge.status, 400);
  EXPECT_EQ(ErrorOf(huge)["field"], "body");
  json model = {{"model_type", "gpt2"}, {"n_layer", 2},       {"n_embd", 128},
                {"n_head", 4},          {"vocab_size", 1000}, {"n_positions", 512}};
  std::string name = "a";
  for (int i = 0; i < 200; ++i) name += "\xc3\xa9";
  model["_name_or_path"] = name;
  json spec = {{"model", model}, {"tokens", 1e7}, {"global_batch", 4}, {"seq_len", 256}};
  HttpResponse ok = Call(*d, o, "POST", "/v1/jobs", spec.dump(), admin);
  ASSERT_EQ(ok.status, 201) << ok.body;
  EXPECT_LE(json::parse(ok.body)["model"].get<std::string>().size(), 256u);
  EXPECT_EQ(Call(*d, o, "GET", "/v1/jobs", "").status, 200);
  EXPECT_TRUE(d->Tick().ok());
  EXPECT_EQ(Call(*d, o, "GET", "/v1/jobs/j-000001", "").status, 200);
}

void PlantRows(const std::string& db) {
  sqlite3* s = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &s), SQLITE_OK);
  const std::string deep = Nested(60000);
  const std::string sql = "UPDATE jobs SET spec = '" + deep +
                          "' WHERE id = 'j-000001';"
                          "UPDATE jobs SET spec = 'not json at all' WHERE id = 'j-000002';"
                          "INSERT INTO nodes (name, gpu, gpus, up, last_seen_s, readings) VALUES "
                          "('poison', 'A100-80GB', 1, 1, 0, '" +
                          deep + "');";
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(s, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(s);
}

// A heartbeat with a deep field was stored, and from then on every GET /v1/cluster crashed the
// daemon, after every restart too. Rows that cannot be read are quarantined at start-up.
TEST(Hardening, PoisonRowsAreQuarantinedAndTheRestKeepsWorking) {
  Harness h;
  {
    auto d = h.Make();
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(d->Submit(Spec("gpt2")).ok());
    ASSERT_TRUE(d->Tick().ok());
  }
  PlantRows(h.db);
  for (int restart = 0; restart < 2; ++restart) {
    auto d = h.Make();
    ASSERT_NE(d, nullptr);
    ApiOptions o;
    o.token = "admin-token";
    EXPECT_EQ(Call(*d, o, "GET", "/v1/cluster", "").status, 200);
    EXPECT_EQ(Call(*d, o, "GET", "/v1/jobs", "").status, 200);
    const std::string metrics = Call(*d, o, "GET", "/metrics", "").body;
    EXPECT_NE(metrics.find("\nfrenzy_quarantined_rows 3\n"), std::string::npos) << metrics;
    EXPECT_EQ(d->quarantine_notes().size(), 3u);
    json bad = *d->GetJob("j-000001");
    EXPECT_EQ(bad["state"], "failed");
    EXPECT_NE(bad["message"].get<std::string>().find("quarantined"), std::string::npos);
    // The healthy job runs on; new jobs are taken.
    EXPECT_EQ((*d->GetJob("j-000003"))["state"], "running");
    EXPECT_TRUE(d->Submit(Spec("gpt2")).ok());
    ASSERT_TRUE(d->Tick().ok());
  }
  // The planted spec is kept as it was, for the operator.
  sqlite3* s = nullptr;
  ASSERT_EQ(sqlite3_open(h.db.c_str(), &s), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(
      sqlite3_prepare_v2(s, "SELECT length(spec) FROM jobs WHERE id='j-000001'", -1, &st, nullptr),
      SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int64(st, 0), 120000);
  sqlite3_finalize(st);
  sqlite3_close(s);
}

// The control loop asked the backend about every run while it held the daemon's lock, so a slow
// poll held up every submission; now a submission goes through while a poll is under way.
TEST(Hardening, BackendPollsDoNotHoldTheDaemonsLock) {
  Harness h;
  auto d = h.Make();
  auto gate = h.gate;
  ASSERT_TRUE(d->Submit(Spec("gpt2")).ok());
  ASSERT_TRUE(d->Tick().ok());  // launches it
  ASSERT_EQ((*d->GetJob("j-000001"))["state"], "running");
  {
    std::lock_guard<std::mutex> lock(gate->mu);
    gate->closed = true;
  }
  std::thread tick([&] { EXPECT_TRUE(d->Tick().ok()); });
  {
    std::unique_lock<std::mutex> lock(gate->mu);
    ASSERT_TRUE(gate->cv.wait_for(lock, std::chrono::seconds(30), [&] { return gate->waiting; }));
  }
  // The tick is inside the backend now. Under the old code this Submit waited for the gate.
  auto submit = std::async(std::launch::async, [&] { return d->Submit(Spec("gpt2")); });
  bool done = submit.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  {
    std::lock_guard<std::mutex> lock(gate->mu);
    gate->closed = false;
  }
  gate->cv.notify_all();
  tick.join();
  ASSERT_TRUE(done) << "a submission waited for the backend's poll";
  EXPECT_TRUE(submit.get().ok());
}

// Two daemons on one database launched jobs twice and resurrected cancelled ones.
TEST(Hardening, OneStorePerDatabaseAndTheHolderIsNamed) {
  Harness h;
  auto first = Store::Open(h.db);
  ASSERT_TRUE(first.ok());
  auto second = Store::Open(h.db);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("pid " + std::to_string(::getpid())), std::string::npos)
      << second.status().ToString();
  first->reset();
  EXPECT_TRUE(Store::Open(h.db).ok());  // released with the store
}

TEST(Hardening, ADeletedDatabaseIsNoticed) {
  Harness h;
  auto d = h.Make();
  EXPECT_TRUE(d->CheckStore().ok());
  std::filesystem::remove(h.db);
  Status st = d->CheckStore();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("database"), std::string::npos);
}

// What the speed learner stored is read back strictly: factors in [0, 100] (the throughput model
// is never off by 100x), sums a class's samples could make, one length for sums and counts, at
// most 256 GPU types; anything else is refused whole, naming the field.
TEST(Hardening, StoredSpeedStateIsReadBackStrictly) {
  auto ok = RuntimeFromJson(json{{"ooms", 0}, {"speed", {0.0, 0.8, 1.7}}});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->speed, (std::vector<double>{0.0, 0.8, 1.7}));
  EXPECT_EQ(RuntimeToJson(*ok)["speed"], json({0.0, 0.8, 1.7}));
  for (const json& bad : {json{{"speed", {-1}}}, json{{"speed", {1e9}}}, json{{"speed", "fast"}},
                          json{{"speed", {"x"}}}, json{{"speed", std::vector<double>(300, 1)}}}) {
    auto r = RuntimeFromJson(bad);
    ASSERT_FALSE(r.ok()) << bad.dump();
    EXPECT_NE(r.status().ToString().find("speed"), std::string::npos) << r.status().ToString();
  }
  auto classes = SpeedClassesFromJson(json{{"llama-2-7b", {{"sum", {1.5, 0}}, {"n", {2, 0}}}}});
  ASSERT_TRUE(classes.ok()) << classes.status().ToString();
  EXPECT_EQ(classes->at("llama-2-7b").n, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(SpeedClassesToJson(*classes),
            json({{"llama-2-7b", {{"sum", {1.5, 0}}, {"n", {2, 0}}}}}));
  for (const json& bad :
       {json::array(), json{{"m", 3}}, json{{"m", {{"sum", {1}}}}},
        json{{"m", {{"sum", 2}, {"n", {1}}}}}, json{{"m", {{"sum", {1, 2}}, {"n", {1}}}}},
        json{{"m", {{"sum", {500}}, {"n", {1}}}}}, json{{"m", {{"sum", {1}}, {"n", {0}}}}},
        json{{"m", {{"sum", {1}}, {"n", {-1}}}}}, json{{"m", {{"sum", {1}}, {"n", {1.5}}}}}}) {
    auto r = SpeedClassesFromJson(bad);
    EXPECT_FALSE(r.ok()) << bad.dump();
  }
}

}  // namespace
}  // namespace frenzy::server
