// SlurmBackend against a real Slurm cluster: FRENZY_SLURM_CONF names its slurm.conf. Made for
// the test cluster of scripts/slurm-up.sh (nodes a100-0, a100-1 and v100-0, two fake GPUs each,
// of types a10080gb and v10032gb). Not registered with CTest: the integration script runs it, e.g.
//   conf=$(scripts/slurm-up.sh /tmp/frenzy-slurm)
//   FRENZY_SLURM_CONF=$conf build/tests/frenzy_slurm_live_test
//   scripts/slurm-down.sh /tmp/frenzy-slurm
// Without FRENZY_SLURM_CONF every test fails: this binary never passes without a cluster.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "backend/slurm_backend.h"
#include "server_test_util.h"

namespace frenzy::server {
namespace {

using test_util::ReadFile;

namespace fs = std::filesystem;

class SlurmLiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* conf = std::getenv("FRENZY_SLURM_CONF");
    ASSERT_TRUE(conf != nullptr && *conf != '\0')
        << "FRENZY_SLURM_CONF is not set: this test needs a Slurm cluster (scripts/slurm-up.sh)";
    options_.slurm_conf = conf;
  }
  void TearDown() override {
    if (HasFailure()) tmp_.Keep();  // its batch scripts and outputs tell what went wrong
  }

  LaunchSpec Spec(const std::string& name, const std::string& script) {
    LaunchSpec s;
    s.job_id = "live-" + name;
    s.name = "live test";
    s.nodes = 1;
    s.gpus_per_node = 1;
    s.plan.gpus = 1;
    s.command = {"/bin/sh", "-c", script};
    s.workdir = (root_ / name).string();
    return s;
  }

  static RunStatus WaitEnd(SlurmBackend& b, const std::string& handle) {
    return test_util::WaitEnd(b, handle, 60, std::chrono::milliseconds(200));
  }

  SlurmOptions options_;
  test_util::TempDir tmp_{"frenzy-slurm-live"};
  const fs::path root_ = tmp_.path();
};

TEST_F(SlurmLiveTest, NodesHaveCatalogGpuTypes) {
  SlurmBackend b(options_);
  auto nodes = b.Nodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  std::set<std::string> seen;
  for (const BackendNode& n : *nodes) {
    seen.insert(n.name + " " + n.gpu + " " + std::to_string(n.gpus) + (n.up ? " up" : " down"));
  }
  EXPECT_TRUE(seen.count("a100-0 A100-80GB 2 up")) << ::testing::PrintToString(seen);
  EXPECT_TRUE(seen.count("a100-1 A100-80GB 2 up")) << ::testing::PrintToString(seen);
  EXPECT_TRUE(seen.count("v100-0 V100-32GB 2 up")) << ::testing::PrintToString(seen);
  EXPECT_EQ(seen.size(), 3u) << ::testing::PrintToString(seen);
}

TEST_F(SlurmLiveTest, TwoNodeJobSucceeds) {
  SlurmBackend b(options_);
  // Untyped: any two of the three nodes.
  LaunchSpec s = Spec("two-nodes",
                      "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR "
                      "$MASTER_PORT $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES $FRENZY_NOTE\" > "
                      "\"$FRENZY_WORKDIR/rank.$RANK\"");
  s.nodes = 2;
  s.gpus_per_node = 2;
  s.plan.gpus = 4;
  s.plan.gpu = "";
  s.env["FRENZY_NOTE"] = "it's here";
  auto h = b.Launch(s);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->rfind("slurm:", 0), 0u);
  RunStatus st = WaitEnd(b, *h);
  ASSERT_EQ(st.state, RunState::kSucceeded) << st.message << "\n"
                                            << ReadFile(fs::path(s.workdir) / "job.sbatch");
  EXPECT_EQ(ReadFile(fs::path(s.workdir) / "exit_code"), "0\n");
  std::set<std::string> nodes;
  std::string port;
  for (int r = 0; r < 4; ++r) {
    std::istringstream line(ReadFile(fs::path(s.workdir) / ("rank." + std::to_string(r))));
    std::string rank, world, local, local_world, addr, p, node, cvd, note;
    ASSERT_TRUE(line >> rank >> world >> local >> local_world >> addr >> p >> node >> cvd)
        << "rank " << r;
    std::getline(line, note);
    EXPECT_EQ(rank, std::to_string(r));
    EXPECT_EQ(world, "4");
    EXPECT_EQ(local_world, "2");
    EXPECT_TRUE(local == "0" || local == "1");
    EXPECT_EQ(addr, "127.0.0.1");  // the first node's NodeAddr
    EXPECT_EQ(cvd, "0,1");
    EXPECT_EQ(note, " it's here");
    if (port.empty()) port = p;
    EXPECT_EQ(p, port);
    nodes.insert(node);
  }
  EXPECT_EQ(nodes.size(), 2u) << ::testing::PrintToString(nodes);
}

TEST_F(SlurmLiveTest, TypedJobLandsOnItsGpuType) {
  SlurmBackend b(options_);
  LaunchSpec s = Spec("typed", "echo \"$SLURMD_NODENAME\" > \"$FRENZY_WORKDIR/node.$RANK\"");
  s.plan.gpu = "V100-32GB";
  s.gpus_per_node = 2;
  s.plan.gpus = 2;
  auto h = b.Launch(s);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  RunStatus st = WaitEnd(b, *h);
  ASSERT_EQ(st.state, RunState::kSucceeded) << st.message;
  EXPECT_EQ(ReadFile(fs::path(s.workdir) / "node.0"), "v100-0\n");
  EXPECT_EQ(ReadFile(fs::path(s.workdir) / "node.1"), "v100-0\n");
}

// A mixed plan's run: a heterogeneous job of two components, 2 ranks on an A100 node and 2 on
// the V100 node, numbered in component order, one world of 4 with one rendezvous address.
TEST_F(SlurmLiveTest, HeterogeneousJobSpansTwoGpuTypes) {
  SlurmBackend b(options_);
  LaunchSpec s = Spec("hetero", "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $SLURMD_NODENAME "
                                "$MASTER_ADDR\" > \"$FRENZY_WORKDIR/rank.$RANK\"");
  s.plan.gpu = "A100-80GB+V100-32GB";
  s.plan.gpus = 4;
  s.components = {{"A100-80GB", 1, 2}, {"V100-32GB", 1, 2}};
  auto h = b.Launch(s);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  RunStatus st = WaitEnd(b, *h);
  ASSERT_EQ(st.state, RunState::kSucceeded) << st.message << "\n"
                                            << ReadFile(fs::path(s.workdir) / "job.sbatch");
  for (int r = 0; r < 4; ++r) {
    std::istringstream line(ReadFile(fs::path(s.workdir) / ("rank." + std::to_string(r))));
    std::string rank, world, local, node, addr;
    ASSERT_TRUE(line >> rank >> world >> local >> node >> addr) << "rank " << r;
    EXPECT_EQ(rank, std::to_string(r));
    EXPECT_EQ(world, "4");
    EXPECT_EQ(local, std::to_string(r % 2));
    if (r < 2) {
      EXPECT_EQ(node.rfind("a100-", 0), 0u) << "rank " << r << " on " << node;
    } else {
      EXPECT_EQ(node, "v100-0") << "rank " << r;
    }
    EXPECT_EQ(addr, "127.0.0.1");
  }
  // A framework's launch over several types is refused, naming why.
  LaunchSpec f = s;
  f.workdir = (root_ / "hetero-framework").string();
  f.framework = frenzy::Launch{};
  auto refused = b.Launch(f);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().field(), "components");
}

// Heterogeneous data parallelism end to end: examples/train.py with data_groups over the two
// types (2 ranks on A100s taking 6 sequences a step in micro-batches of 1, 2 on the V100s taking
// 2), PyTorch on CPU with gloo, to completion, with its memory reports.
TEST_F(SlurmLiveTest, MixedDataParallelTrainingRunsToCompletion) {
  SlurmBackend b(options_);
  LaunchSpec s = Spec("hetero-train", "");
  const std::string plan = R"({"layers": 2, "hidden": 32, "heads": 4, "seq_len": 32,
      "precision": "fp32", "dp": 4, "gpus": 4, "global_batch": 8, "micro_batch": 1,
      "tokens": 2048, "data_groups": [
        {"gpu": "A100-80GB", "dp": 2, "micro_batch": 1, "batch": 6},
        {"gpu": "V100-32GB", "dp": 2, "micro_batch": 1, "batch": 2}]})";
  s.command = {FRENZY_SYSTEM_PYTHON, std::string(FRENZY_SOURCE_DIR) + "/examples/train.py",
               "--report-every", "4", "--device", "cpu"};
  s.env["FRENZY_PLAN"] = plan;
  s.plan.gpu = "A100-80GB+V100-32GB";
  s.plan.gpus = 4;
  s.components = {{"A100-80GB", 1, 2}, {"V100-32GB", 1, 2}};
  auto h = b.Launch(s);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  RunStatus st = test_util::WaitEnd(b, *h, 240, std::chrono::milliseconds(500));
  std::string out;
  for (const auto& e : fs::directory_iterator(s.workdir)) {
    if (e.path().filename().string().rfind("slurm-", 0) == 0) out += ReadFile(e.path());
  }
  ASSERT_EQ(st.state, RunState::kSucceeded) << st.message << "\n" << out;
  EXPECT_NE(out.find("rank 0: micro_batch 1 accumulation 3"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 3: micro_batch 1 accumulation 1"), std::string::npos) << out;
  // 2,048 tokens at 8 x 32 a step: 8 steps, reported at 4 and 8, each with the ranks' peak.
  EXPECT_NE(out.find("step 4 tokens 1024"), std::string::npos) << out;
  EXPECT_NE(out.find("step 8 tokens 2048"), std::string::npos) << out;
  EXPECT_NE(out.find("peak_bytes"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(fs::path(s.workdir) / "checkpoint.pt"));
}

TEST_F(SlurmLiveTest, FailingJobIsFailed) {
  SlurmBackend b(options_);
  LaunchSpec s = Spec("fails", "echo \"rank $RANK: loss is NaN\"; exit 5");
  s.plan.gpu = "A100-80GB";
  auto h = b.Launch(s);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  RunStatus st = WaitEnd(b, *h);
  EXPECT_EQ(st.state, RunState::kFailed);
  EXPECT_EQ(st.exit_code, 5);
  EXPECT_NE(st.message.find("loss is NaN"), std::string::npos) << st.message;
  EXPECT_EQ(ReadFile(fs::path(s.workdir) / "exit_code"), "5\n");
}

TEST_F(SlurmLiveTest, CancelledJobIsCancelled) {
  SlurmBackend b(options_);
  LaunchSpec s = Spec("cancel", "sleep 120");
  s.plan.gpu = "A100-80GB";
  auto h = b.Launch(s);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  for (int i = 0; i < 100; ++i) {
    auto st = b.Status(*h);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    if (st->state == RunState::kRunning) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(b.Cancel(*h).ok());
  RunStatus st = WaitEnd(b, *h);
  EXPECT_EQ(st.state, RunState::kCancelled) << st.message;
}

TEST_F(SlurmLiveTest, UnknownGpuTypeIsASubmitError) {
  SlurmBackend b(options_);
  LaunchSpec s = Spec("no-such-gpu", "true");
  s.plan.gpu = "H200";
  auto h = b.Launch(s);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("sbatch"), std::string::npos) << h.status().message();
  EXPECT_NE(h.status().message().find("node configuration is not available"), std::string::npos)
      << h.status().message();
}

TEST_F(SlurmLiveTest, ForgottenJobFallsBackToTheRunFolder) {
  SlurmBackend b(options_);
  fs::path work = root_ / "forgotten";
  fs::create_directories(work);
  std::ofstream(work / "exit_code") << "0\n";
  auto st = b.Status(SlurmHandle("987654", work.string()));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->state, RunState::kSucceeded);
}

}  // namespace
}  // namespace frenzy::server
