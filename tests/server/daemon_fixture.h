// A daemon on the sim backend (the lab cluster) with an injected clock, its database and runs
// folder in a temporary directory: the fixture of the daemon's and the dashboard's tests.
#ifndef FRENZY_TESTS_SERVER_DAEMON_FIXTURE_H_
#define FRENZY_TESTS_SERVER_DAEMON_FIXTURE_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/sim_backend.h"
#include "server/daemon.h"
#include "server_test_util.h"

namespace frenzy::server::test_util {

struct Fixture {
  double now = 1000;
  std::string db;
  std::string runs;
  std::string policy = "frenzy";
  // Plan like a Megatron entry point (TP and PP allowed), or as examples/train.py runs.
  bool bundled = false;
  std::vector<Launcher> frameworks;
  HfLoss hf_loss = HfLoss::kPadded;  // the environment's transformers release (frenzyd --transformers)
  bool mean_keeps_input = false;     // the environment's PyTorch is older than 2.2 (frenzyd --torch)
  test_util::TempDir dir;  // removed with the fixture (after the daemons of its test)
  explicit Fixture(const std::string& name) : dir("frenzy-daemon-" + name) {
    db = (dir.path() / "d.db").string();
    runs = (dir.path() / "runs").string();
  }
  std::unique_ptr<Daemon> Make() {
    auto cluster = ResolveCluster("lab", GpuCatalog::Default());
    EXPECT_TRUE(cluster.ok());
    auto backend = std::make_unique<SimBackend>(*cluster, 3600.0, [this] { return now; });
    auto store = Store::Open(db);
    EXPECT_TRUE(store.ok());
    DaemonOptions o;
    o.runs_dir = runs;
    o.policy = policy;
    o.train_limits = bundled ? BundledTrainLimits() : AllTrainLimits();
    if (!bundled) o.train_framework = Framework::kMegatron;
    o.frameworks = frameworks;
    o.hf_loss = hf_loss;
    o.mean_keeps_input = mean_keeps_input;
    auto d =
        Daemon::Create(o, std::move(store).value(), std::move(backend), [this] { return now; });
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    return std::move(d).value();
  }
};

inline nlohmann::json Spec(const std::string& model, double tokens, int64_t seq_len = 2048) {
  return nlohmann::json{
      {"model", model}, {"tokens", tokens}, {"global_batch", 64}, {"seq_len", seq_len}};
}

}  // namespace frenzy::server::test_util

#endif  // FRENZY_TESTS_SERVER_DAEMON_FIXTURE_H_
