#include "backend/local_backend.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backend/process.h"
#include "server_test_util.h"

namespace frenzy::server {
namespace {

using test_util::ReadFile;

namespace fs = std::filesystem;

class LocalBackendTest : public ::testing::Test {
 protected:
  LaunchSpec Spec(const std::string& name, const std::string& script, int64_t ranks) {
    LaunchSpec s;
    s.job_id = "j-" + name;
    s.name = "test";
    s.plan.gpu = "A100-80GB";
    s.plan.gpus = ranks;
    s.nodes = 1;
    s.gpus_per_node = ranks;
    s.command = {"/bin/sh", "-c", script};
    s.workdir = (root_ / name).string();
    return s;
  }

  static RunStatus WaitEnd(Backend& b, const std::string& handle) {
    return test_util::WaitEnd(b, handle, 20, std::chrono::milliseconds(20));
  }

  static std::vector<BackendNode> TwoGpuNode() {
    return {BackendNode{"localhost", "A100-80GB", 2, true}};
  }

  test_util::TempDir tmp_{"frenzy-local"};
  const fs::path root_ = tmp_.path();
};

TEST_F(LocalBackendTest, NodesAreTheGivenOnesOrLocalhost) {
  LocalBackend given(TwoGpuNode());
  auto nodes = given.Nodes();
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0].name, "localhost");
  EXPECT_EQ((*nodes)[0].gpu, "A100-80GB");
  EXPECT_EQ((*nodes)[0].gpus, 2);
  EXPECT_EQ(given.name(), "local");

  LocalBackend defaulted;
  auto d = defaulted.Nodes();
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->size(), 1u);
  EXPECT_EQ((*d)[0].name, "localhost");
}

TEST_F(LocalBackendTest, DiscoversNodeFromInventory) {
  fs::path inv = root_ / "inventory.json";
  std::ofstream(inv) << R"({"node": "box1", "gpus": [{"name": "V100-32GB", "count": 4}]})";
  AgentOptions o;
  o.use_nvml = false;
  o.use_nvidia_smi = false;
  o.inventory_path = inv.string();
  auto nodes = LocalBackend::DiscoverLocalNodes(o);
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0].name, "box1");
  EXPECT_EQ((*nodes)[0].gpu, "V100-32GB");
  EXPECT_EQ((*nodes)[0].gpus, 4);
}

TEST_F(LocalBackendTest, TwoRanksGetLauncherEnvironment) {
  LocalBackend b(TwoGpuNode());
  LaunchSpec spec = Spec("env", R"(
    echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR" \
      "$CUDA_VISIBLE_DEVICES $EXTRA" > "$FRENZY_WORKDIR/out.$RANK"
    echo "$MASTER_PORT" > "$FRENZY_WORKDIR/port.$RANK"
    pwd > "$FRENZY_WORKDIR/cwd.$RANK"
    echo "rank $RANK done")",
                         2);
  spec.env["EXTRA"] = "it's a value";
  auto handle = b.Launch(spec);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  EXPECT_EQ(*handle, "local:" + spec.workdir);
  RunStatus st = WaitEnd(b, *handle);
  EXPECT_EQ(st.state, RunState::kSucceeded) << st.message;
  EXPECT_EQ(st.exit_code, 0);

  fs::path wd = spec.workdir;
  EXPECT_EQ(ReadFile(wd / "out.0"), "0 2 0 2 127.0.0.1 0,1 it's a value\n");
  EXPECT_EQ(ReadFile(wd / "out.1"), "1 2 1 2 127.0.0.1 0,1 it's a value\n");
  std::string port = ReadFile(wd / "port.0");
  EXPECT_EQ(port, ReadFile(wd / "port.1"));
  EXPECT_GT(std::stoi(port), 0);
  EXPECT_EQ(ReadFile(wd / "cwd.0"), fs::canonical(wd).string() + "\n");
  EXPECT_EQ(ReadFile(wd / "rank-0.log"), "rank 0 done\n");
  EXPECT_EQ(ReadFile(wd / "rank-1.log"), "rank 1 done\n");
  EXPECT_EQ(ReadFile(wd / "exit_code.0"), "0\n");
  EXPECT_EQ(ReadFile(wd / "exit_code.1"), "0\n");
  std::istringstream pids(ReadFile(wd / "pids"));
  std::string line;
  int lines = 0;
  while (std::getline(pids, line)) ++lines;
  EXPECT_EQ(lines, 2);
}

TEST_F(LocalBackendTest, CommandArgumentsAreNotReinterpreted) {
  LocalBackend b(TwoGpuNode());
  LaunchSpec spec = Spec("args", "", 1);
  spec.command = {"/bin/sh", "-c",   "printf '%s|' \"$@\" > \"$FRENZY_WORKDIR/args\"",
                  "sh",      "a b",  "it's",
                  "$HOME",   "\"q\""};
  auto handle = b.Launch(spec);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  EXPECT_EQ(WaitEnd(b, *handle).state, RunState::kSucceeded);
  EXPECT_EQ(ReadFile(fs::path(spec.workdir) / "args"), "a b|it's|$HOME|\"q\"|");
}

// A framework's launch: one agent per node (torchrun would start the node's ranks), in the run
// folder with its files, its placeholders filled, the user's words as written.
TEST_F(LocalBackendTest, AFrameworkLaunchRunsOneAgentPerNode) {
  LocalBackend b(TwoGpuNode());
  LaunchSpec spec = Spec("framework", "", 2);
  spec.command.clear();
  spec.env["FRENZY_JOB_ID"] = "j-000007";
  frenzy::Launch l;
  l.framework = Launcher::kAccelerate;
  l.argv = {"/bin/sh", "-c",
            "printf '%s|' \"$@\" > out; echo \"$NODE_RANK $CUDA_VISIBLE_DEVICES $X\" >> out; "
            "cat accelerate.yaml >> out",
            "sh", "--main_process_ip=$MASTER_ADDR", "--id=$FRENZY_JOB_ID",
            "--machine_rank=$NODE_RANK", "$(touch pwned) `x` ; it's"};
  l.env = {{"X", "from the launch"}};
  l.files = {{"accelerate.yaml", "distributed_type: FSDP\n"}};
  l.procs_per_node = 2;
  spec.framework = l;
  auto handle = b.Launch(spec);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  RunStatus st = WaitEnd(b, *handle);
  EXPECT_EQ(st.state, RunState::kSucceeded) << st.message;
  fs::path wd = spec.workdir;
  EXPECT_EQ(ReadFile(wd / "out"),
            "--main_process_ip=127.0.0.1|--id=j-000007|--machine_rank=0|$(touch pwned) `x` ; "
            "it's|0 0,1 from the launch\ndistributed_type: FSDP\n");
  EXPECT_FALSE(fs::exists(wd / "pwned"));
  // One agent, not one process per GPU.
  std::istringstream pids(ReadFile(wd / "pids"));
  std::string line;
  int lines = 0;
  while (std::getline(pids, line)) ++lines;
  EXPECT_EQ(lines, 1);
}

TEST_F(LocalBackendTest, FailingCommandIsFailedWithItsLastLogLine) {
  LocalBackend b(TwoGpuNode());
  LaunchSpec spec =
      Spec("fail", "echo starting; echo \"rank $RANK: CUDA out of memory\" >&2; exit 7", 2);
  auto handle = b.Launch(spec);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  RunStatus st = WaitEnd(b, *handle);
  EXPECT_EQ(st.state, RunState::kFailed);
  EXPECT_EQ(st.exit_code, 7);
  EXPECT_NE(st.message.find("exited with code 7"), std::string::npos) << st.message;
  EXPECT_NE(st.message.find("CUDA out of memory"), std::string::npos) << st.message;
  EXPECT_EQ(st.failure, FailureKind::kOutOfMemory);
}

TEST_F(LocalBackendTest, OneFailedRankEndsTheOthers) {
  LocalBackend b(TwoGpuNode());
  LaunchSpec spec =
      Spec("failfast", "if [ \"$RANK\" = 1 ]; then echo bad; exit 3; fi; sleep 60", 2);
  auto handle = b.Launch(spec);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  auto start = std::chrono::steady_clock::now();
  RunStatus st = WaitEnd(b, *handle);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(st.state, RunState::kFailed);
  EXPECT_EQ(st.exit_code, 3);
  EXPECT_EQ(st.failure, FailureKind::kCrashed);
  EXPECT_NE(st.message.find("rank 1"), std::string::npos) << st.message;
  // Rank 0 was killed.
  std::istringstream pids(ReadFile(fs::path(spec.workdir) / "pids"));
  int rank = -1, pid = 0;
  ASSERT_TRUE(pids >> rank >> pid);
  for (int i = 0; i < 200 && ProcessAlive(pid); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(ProcessAlive(pid));
}

TEST_F(LocalBackendTest, CancelStopsTheRanks) {
  LocalBackendOptions o;
  o.nodes = TwoGpuNode();
  o.kill_grace_s = 2;
  LocalBackend b(o);
  // The shell ignores SIGTERM in rank 1's command: Cancel must still end it (SIGKILL).
  LaunchSpec spec = Spec("cancel", "if [ \"$RANK\" = 1 ]; then trap '' TERM; fi; sleep 60", 2);
  auto handle = b.Launch(spec);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  auto st = b.Status(*handle);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state, RunState::kRunning) << st->message;

  ASSERT_TRUE(b.Cancel(*handle).ok());
  st = b.Status(*handle);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state, RunState::kCancelled);
  EXPECT_TRUE(fs::exists(fs::path(spec.workdir) / "cancelled"));
  std::istringstream pids(ReadFile(fs::path(spec.workdir) / "pids"));
  int rank, pid;
  unsigned long long ticks;
  std::string node, gpus;
  while (pids >> rank >> pid >> ticks >> node >> gpus) EXPECT_FALSE(ProcessAlive(pid)) << rank;

  // Cancelling a run that already ended keeps its outcome.
  LaunchSpec done = Spec("done", "exit 0", 1);
  auto h2 = b.Launch(done);
  ASSERT_TRUE(h2.ok());
  EXPECT_EQ(WaitEnd(b, *h2).state, RunState::kSucceeded);
  ASSERT_TRUE(b.Cancel(*h2).ok());
  EXPECT_EQ(b.Status(*h2)->state, RunState::kSucceeded);
}

// ---- why a rank failed -------------------------------------------------------------------------

TEST(LocalOomKills, CountFromCgroupFiles) {
  // cgroup v2 memory.events and v1 memory.oom_control, as the kernel writes them.
  EXPECT_EQ(ParseOomKillCount("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n"), 2);
  EXPECT_EQ(ParseOomKillCount("oom_kill_disable 0\nunder_oom 0\noom_kill 17\n"), 17);
  EXPECT_EQ(ParseOomKillCount("oom_group_kill 4\n"), std::nullopt);
  EXPECT_EQ(ParseOomKillCount(""), std::nullopt);
  EXPECT_EQ(ParseOomKillCount("oom_kill lots\n"), std::nullopt);
  EXPECT_EQ(ParseOomKillCount("oom_kill -1\n"), std::nullopt);
  EXPECT_EQ(ParseOomKillCount("oom_kill 99999999999999999999999\n"), std::nullopt);
}

TEST(LocalFailure, KindFromExitCodeLogAndOomKiller) {
  const std::vector<std::string> plain = {"step 10", "ValueError: bad batch"};
  const std::vector<std::string> cuda = {
      "Traceback (most recent call last):",
      "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB"};
  const std::vector<std::string> cpu = {
      "RuntimeError: [enforce fail at alloc_cpu.cpp:83] . DefaultCPUAllocator: can't allocate "
      "memory: you tried to allocate 8589934592 bytes. Error code 12 (Cannot allocate memory)"};
  // A line that only talks about memory is no allocation failure.
  const std::vector<std::string> prose = {"checking for out of memory conditions: none"};
  struct Case {
    int exit_code;
    const std::vector<std::string>* log;
    std::optional<bool> oom_killer_fired;
    FailureKind want;
  };
  const Case cases[] = {
      {1, &plain, std::nullopt, FailureKind::kCrashed},
      {1, &cuda, std::nullopt, FailureKind::kOutOfMemory},
      {1, &cpu, false, FailureKind::kOutOfMemory},
      {1, &prose, std::nullopt, FailureKind::kCrashed},
      {137, &plain, true, FailureKind::kOutOfMemory},
      {137, &plain, std::nullopt, FailureKind::kOutOfMemory},  // no counter: SIGKILL is the sign
      {137, &plain, false, FailureKind::kCrashed},             // a SIGKILL from someone else
      {139, &plain, true, FailureKind::kCrashed},              // SIGSEGV
      {143, &plain, std::nullopt, FailureKind::kCrashed},      // SIGTERM
  };
  for (const Case& c : cases) {
    EXPECT_EQ(LocalFailureKind(c.exit_code, *c.log, c.oom_killer_fired), c.want)
        << c.exit_code << " " << (*c.log)[0];
  }
}

class LocalOomKillTest : public LocalBackendTest {
 protected:
  // A backend reading the OOM killer's count from a file the test writes.
  LocalBackendOptions Options(const std::string& counter_text) {
    LocalBackendOptions o;
    o.nodes = TwoGpuNode();
    o.oom_kill_file = counter_.string();
    std::ofstream(counter_) << counter_text;
    return o;
  }
  // A rank whose command SIGKILLs itself, as the kernel's OOM killer would (the wrapper lives
  // on and records 137).
  LaunchSpec Killed(const std::string& name) {
    return Spec(name, "echo allocating; kill -KILL $$", 1);
  }

  const fs::path counter_ = root_ / "memory.events";
};

TEST_F(LocalOomKillTest, SigkillWithTheOomKillerCountRisingIsOutOfMemory) {
  LocalBackend b(Options("oom 0\noom_kill 2\n"));
  auto handle = b.Launch(Killed("oomkill"));
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  std::ofstream(counter_) << "oom 1\noom_kill 3\n";  // the kernel killed one since
  RunStatus st = WaitEnd(b, *handle);
  EXPECT_EQ(st.state, RunState::kFailed);
  EXPECT_EQ(st.exit_code, 137);
  EXPECT_EQ(st.failure, FailureKind::kOutOfMemory) << st.message;
  EXPECT_NE(st.message.find("OOM killer"), std::string::npos) << st.message;
}

TEST_F(LocalOomKillTest, SigkillWhileTheOomKillerCountStandsStillIsACrash) {
  LocalBackend b(Options("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n"));
  auto handle = b.Launch(Killed("kill9"));
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  RunStatus st = WaitEnd(b, *handle);
  EXPECT_EQ(st.state, RunState::kFailed);
  EXPECT_EQ(st.exit_code, 137);
  EXPECT_EQ(st.failure, FailureKind::kCrashed) << st.message;
  EXPECT_NE(st.message.find("not by the OOM killer"), std::string::npos) << st.message;
}

TEST_F(LocalOomKillTest, SigkillWithoutACounterIsTakenForTheOomKiller) {
  LocalBackendOptions o = Options("");
  o.oom_kill_file = (root_ / "no-such-file").string();
  LocalBackend b(o);
  auto handle = b.Launch(Killed("nocounter"));
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  RunStatus st = WaitEnd(b, *handle);
  EXPECT_EQ(st.failure, FailureKind::kOutOfMemory) << st.message;
  EXPECT_NE(st.message.find("most likely the kernel's OOM killer"), std::string::npos)
      << st.message;
}

TEST_F(LocalBackendTest, TheOutOfMemoryRankIsReportedNotTheFirstToFail) {
  LocalBackend b(TwoGpuNode());
  // Rank 1 runs out of memory; rank 0 fails after it, as a peer of a dead rank does.
  LaunchSpec spec = Spec("peer",
                         "if [ \"$RANK\" = 1 ]; then "
                         "echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                         "2.00 GiB' >&2; exit 1; fi; "
                         "echo 'RuntimeError: Connection reset by peer' >&2; exit 1",
                         2);
  auto handle = b.Launch(spec);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  // Both ranks end before Status first looks, so it sees both failures.
  const fs::path wd = spec.workdir;
  for (int i = 0; i < 500 && !(fs::exists(wd / "exit_code.0") && fs::exists(wd / "exit_code.1"));
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto st = b.Status(*handle);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->state, RunState::kFailed);
  EXPECT_EQ(st->failure, FailureKind::kOutOfMemory);
  EXPECT_EQ(st->message.rfind("rank 1 exited with code 1", 0), 0u) << st->message;
}

TEST_F(LocalBackendTest, KilledRanksAreLost) {
  LocalBackend b(TwoGpuNode());
  LaunchSpec spec = Spec("lost", "echo working; sleep 60", 1);
  auto handle = b.Launch(spec);
  ASSERT_TRUE(handle.ok());
  std::istringstream pids(ReadFile(fs::path(spec.workdir) / "pids"));
  int rank = -1, pid = 0;
  ASSERT_TRUE(pids >> rank >> pid);
  KillGroup(pid, SIGKILL);
  RunStatus st = WaitEnd(b, *handle);
  EXPECT_EQ(st.state, RunState::kLost);
  EXPECT_NE(st.message.find("without an exit code"), std::string::npos) << st.message;
}

TEST_F(LocalBackendTest, AnotherBackendInstanceSeesTheRun) {
  // As after a daemon restart: everything Status needs is in the run's folder.
  std::string handle;
  LaunchSpec spec = Spec("restart", "sleep 0.5; exit 0", 2);
  {
    LocalBackend first(TwoGpuNode());
    auto h = first.Launch(spec);
    ASSERT_TRUE(h.ok());
    handle = *h;
  }
  LocalBackend second(TwoGpuNode());
  auto st = second.Status(handle);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state, RunState::kRunning);
  EXPECT_EQ(WaitEnd(second, handle).state, RunState::kSucceeded);
}

TEST_F(LocalBackendTest, GpuIndicesArePerRunAndNode) {
  std::vector<BackendNode> nodes = {{"n1", "A100-80GB", 2, true}, {"n2", "A100-80GB", 2, true}};
  LocalBackendOptions o;
  o.nodes = nodes;
  o.kill_grace_s = 1;
  LocalBackend b(o);
  const std::string script =
      "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $CUDA_VISIBLE_DEVICES $FRENZY_NODE\""
      " > \"$FRENZY_WORKDIR/out.$RANK\"; sleep 60";
  // Three ranks over two nodes.
  LaunchSpec a = Spec("a", script, 3);
  a.nodes = 2;
  a.placement = {{"n1", 1}, {"n2", 2}};
  auto ha = b.Launch(a);
  ASSERT_TRUE(ha.ok()) << ha.status().ToString();
  // One more rank on n1: gets the other index.
  LaunchSpec c = Spec("c", script, 1);
  c.placement = {{"n1", 1}};
  auto hc = b.Launch(c);
  ASSERT_TRUE(hc.ok()) << hc.status().ToString();

  auto wait_file = [](const fs::path& p) {
    for (int i = 0; i < 500 && ReadFile(p).empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return ReadFile(p);
  };
  EXPECT_EQ(wait_file(fs::path(a.workdir) / "out.0"), "0 3 0 1 0 n1\n");
  EXPECT_EQ(wait_file(fs::path(a.workdir) / "out.1"), "1 3 0 2 0,1 n2\n");
  EXPECT_EQ(wait_file(fs::path(a.workdir) / "out.2"), "2 3 1 2 0,1 n2\n");
  EXPECT_EQ(wait_file(fs::path(c.workdir) / "out.0"), "0 1 0 1 1 n1\n");

  // Once `a` is cancelled its n1 index is free again.
  ASSERT_TRUE(b.Cancel(*ha).ok());
  LaunchSpec d = Spec("d", script, 1);
  d.placement = {{"n1", 1}};
  auto hd = b.Launch(d);
  ASSERT_TRUE(hd.ok());
  EXPECT_EQ(wait_file(fs::path(d.workdir) / "out.0"), "0 1 0 1 0 n1\n");
  EXPECT_TRUE(b.Cancel(*hc).ok());
  EXPECT_TRUE(b.Cancel(*hd).ok());
}

TEST_F(LocalBackendTest, RelaunchInTheSameFolderStartsClean) {
  LocalBackend b(TwoGpuNode());
  LaunchSpec spec = Spec("again", "exit 5", 1);
  auto h1 = b.Launch(spec);
  ASSERT_TRUE(h1.ok());
  EXPECT_EQ(WaitEnd(b, *h1).state, RunState::kFailed);
  spec.command = {"/bin/sh", "-c", "sleep 60"};
  spec.attempt = 1;
  auto h2 = b.Launch(spec);
  ASSERT_TRUE(h2.ok());
  EXPECT_EQ(b.Status(*h2)->state, RunState::kRunning);
  // A live run in the folder blocks another launch there.
  auto h3 = b.Launch(spec);
  ASSERT_FALSE(h3.ok());
  EXPECT_EQ(h3.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(b.Cancel(*h2).ok());
  EXPECT_TRUE(fs::exists(fs::path(spec.workdir) / "rank-0.prev.log"));
}

TEST_F(LocalBackendTest, Errors) {
  LocalBackend b(TwoGpuNode());
  LaunchSpec spec = Spec("errors", "true", 2);
  spec.placement = {{"nowhere", 2}};
  auto bad_node = b.Launch(spec);
  ASSERT_FALSE(bad_node.ok());
  EXPECT_EQ(bad_node.status().field(), "placement");

  spec.placement = {{"localhost", 1}};
  auto short_placement = b.Launch(spec);
  ASSERT_FALSE(short_placement.ok());
  EXPECT_EQ(short_placement.status().code(), StatusCode::kInvalidArgument);

  spec.placement.clear();
  spec.command.clear();
  EXPECT_FALSE(b.Launch(spec).ok());

  spec.command = {"frenzy-no-such-trainer"};
  auto missing = b.Launch(spec);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);

  EXPECT_EQ(b.Status("slurm:1:/x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(b.Status("local:" + (root_ / "nope").string()).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(b.Cancel("local:" + (root_ / "nope").string()).ok());
}

}  // namespace
}  // namespace frenzy::server
