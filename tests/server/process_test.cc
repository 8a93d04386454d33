#include "backend/process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "server_test_util.h"

namespace frenzy::server {
namespace {

using test_util::ReadFile;

namespace fs = std::filesystem;

// Waits up to `seconds` for `pred`.
template <typename Pred>
bool WaitFor(Pred pred, double seconds) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

TEST(ProcessRunCommand, CapturesStdoutStderrAndExitCode) {
  auto r = RunCommand({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_text, "out\n");
  EXPECT_EQ(r->stderr_text, "err\n");
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_FALSE(r->timed_out);
  EXPECT_FALSE(r->ok());
  EXPECT_EQ(r->Describe(), "exit 3");
}

TEST(ProcessRunCommand, SearchesPathAndSucceeds) {
  auto r = RunCommand({"true"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok());
  EXPECT_EQ(r->exit_code, 0);
}

TEST(ProcessRunCommand, PassesArgumentsVerbatim) {
  auto r = RunCommand({"printf", "%s|", "a b", "it's", "$HOME", ""});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_text, "a b|it's|$HOME||");
}

TEST(ProcessRunCommand, FeedsStdin) {
  auto r = RunCommand({"cat"}, "line one\nline two\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_text, "line one\nline two\n");
}

TEST(ProcessRunCommand, LargeStdinAndOutputDoNotDeadlock) {
  // 4 MiB through cat both ways: more than any pipe buffer, in both directions at once.
  std::string big(4 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 1000) big[i] = '\n';
  auto r = RunCommand({"cat"}, big, 60);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->stdout_text.size(), big.size());
  EXPECT_TRUE(r->stdout_text == big);
}

TEST(ProcessRunCommand, LargeOutputOnBothStreams) {
  auto r = RunCommand(
      {"/bin/sh", "-c", "head -c 3000000 /dev/zero; head -c 2000000 /dev/zero >&2; exit 0"}, "",
      60);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_text.size(), 3000000u);
  EXPECT_EQ(r->stderr_text.size(), 2000000u);
}

TEST(ProcessRunCommand, ChildIgnoringStdinDoesNotKillCaller) {
  // The child exits without reading: writing the rest must give EPIPE, not SIGPIPE.
  std::string big(1 << 20, 'y');
  auto r = RunCommand({"/bin/sh", "-c", "exit 0"}, big);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 0);
}

TEST(ProcessRunCommand, TimeoutKillsTheProcessGroup) {
  auto start = std::chrono::steady_clock::now();
  // The grandchild (sleep) would keep the pipes open; the group kill ends it too.
  auto r = RunCommand({"/bin/sh", "-c", "echo started; sleep 30; echo never"}, "", 0.5);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->timed_out);
  EXPECT_FALSE(r->ok());
  EXPECT_EQ(r->term_signal, SIGKILL);
  EXPECT_EQ(r->exit_code, 128 + SIGKILL);
  EXPECT_EQ(r->stdout_text, "started\n");
  EXPECT_LT(took, 5.0);
}

TEST(ProcessRunCommand, ReportsDeathBySignal) {
  auto r = RunCommand({"/bin/sh", "-c", "kill -TERM $$"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->term_signal, SIGTERM);
  EXPECT_EQ(r->exit_code, 128 + SIGTERM);
  EXPECT_FALSE(r->timed_out);
}

TEST(ProcessRunCommand, DoesNotWaitForDaemonisedGrandchildren) {
  // A background grandchild that keeps stdout open must not hold the call until it ends.
  auto start = std::chrono::steady_clock::now();
  auto r = RunCommand({"/bin/sh", "-c", "sleep 3 & echo done"}, "", 20);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_text, "done\n");
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_LT(took, 2.0);
}

TEST(ProcessRunCommand, MissingProgramIsNotFound) {
  auto r = RunCommand({"frenzy-no-such-program-xyz", "--help"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("frenzy-no-such-program-xyz"), std::string::npos);

  auto abs = RunCommand({"/nonexistent/dir/prog"});
  ASSERT_FALSE(abs.ok());
  EXPECT_EQ(abs.status().code(), StatusCode::kNotFound);
  EXPECT_NE(abs.status().message().find("/nonexistent/dir/prog"), std::string::npos);
}

TEST(ProcessRunCommand, EmptyArgvIsInvalid) {
  auto r = RunCommand({});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(ProcessRunCommand, ExtraEnvironmentIsSeenAndPathFromItIsSearched) {
  auto r = RunCommand({"/bin/sh", "-c", "printf '%s' \"$FRENZY_TEST_VAR\""}, "", 10,
                      {{"FRENZY_TEST_VAR", "hello world"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_text, "hello world");

  test_util::TempDir tmp("frenzy-process");
  const fs::path& dir = tmp.path();
  fs::path tool = dir / "frenzy-test-tool";
  {
    std::ofstream out(tool);
    out << "#!/bin/sh\necho from-tool\n";
  }
  fs::permissions(tool, fs::perms::owner_all);
  auto found =
      RunCommand({"frenzy-test-tool"}, "", 10, {{"PATH", dir.string() + ":/usr/bin:/bin"}});
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->stdout_text, "from-tool\n");
}

// The real runner behind the backends: each field of the CommandSpec reaches the process.
TEST(ProcessSubprocessRunner, RunsTheCommandAsSpecified) {
  SubprocessRunner runner;
  CommandSpec spec;
  spec.argv = {"/bin/sh", "-c",
               "read line; printf '%s|%s' \"$line\" \"$FRENZY_RUNNER_VAR\"; exit 4"};
  spec.stdin_text = "from stdin\n";
  spec.extra_env = {{"FRENZY_RUNNER_VAR", "from env"}};
  auto r = runner.Run(spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_text, "from stdin|from env");
  EXPECT_EQ(r->exit_code, 4);
  EXPECT_FALSE(r->ok());

  spec = CommandSpec{{"/bin/sh", "-c", "sleep 30"}, "", 0.3, {}};
  auto start = std::chrono::steady_clock::now();
  auto slow = SystemRunner().Run(spec);
  ASSERT_TRUE(slow.ok()) << slow.status().ToString();
  EXPECT_TRUE(slow->timed_out);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));

  EXPECT_EQ(runner.Run(CommandSpec{{"frenzy-no-such-program-xyz"}, "", 5, {}}).status().code(),
            StatusCode::kNotFound);
}

TEST(ProcessOutOfMemoryLine, FindsTheAllocatorsReports) {
  const std::vector<std::string> reports = {
      // PyTorch >= 2.5 and older (torch.cuda.OutOfMemoryError), ROCm, a raw CUDA call, NCCL,
      // cuBLAS and the CPU allocator.
      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
      "capacity of 79.14 GiB of which 1.19 GiB is free.",
      "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 "
      "GiB total capacity; 14.50 GiB already allocated)",
      "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1.00 GiB.",
      "RuntimeError: CUDA error: out of memory",
      "misc/strongstream.cc:395 NCCL WARN Cuda failure 'out of memory'",
      "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
      "RuntimeError: [enforce fail at alloc_cpu.cpp:83] . DefaultCPUAllocator: can't allocate "
      "memory: you tried to allocate 1073741824 bytes. Error code 12 (Cannot allocate memory)",
  };
  for (const std::string& line : reports) {
    EXPECT_EQ(OutOfMemoryLine({"step 3 loss 2.1", line, "done"}), line);
  }
  EXPECT_EQ(OutOfMemoryLine({}), std::nullopt);
  EXPECT_EQ(OutOfMemoryLine({"Traceback (most recent call last):", "ValueError: bad shape",
                             "memory check: no out of memory errors so far",
                             "CUDA Out Of Memory handling enabled"}),
            std::nullopt);
  // The first report wins.
  EXPECT_EQ(OutOfMemoryLine({"CUDA error: out of memory", reports[0]}),
            "CUDA error: out of memory");
}

TEST(ProcessSpawnDetached, RunsInItsOwnSessionAndLogs) {
  test_util::TempDir tmp("frenzy-process");
  const fs::path& dir = tmp.path();
  fs::path log = dir / "out.log";
  auto pid = SpawnDetached(
      {"/bin/sh", "-c", "echo \"cwd=$(pwd) var=$FRENZY_SPAWN_VAR\"; echo oops >&2; sleep 30"},
      {{"FRENZY_SPAWN_VAR", "v1"}}, dir.string(), log.string());
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  EXPECT_GT(*pid, 1);
  EXPECT_TRUE(ProcessAlive(*pid));
  ASSERT_TRUE(ProcessStartTicks(*pid).has_value());
  // Not our child: the double fork handed it to init (or a subreaper).
  EXPECT_NE(::getpgid(*pid), ::getpgrp());
  EXPECT_EQ(::getsid(*pid), *pid);
  EXPECT_EQ(::getpgid(*pid), *pid);
  ASSERT_TRUE(WaitFor([&] { return ReadFile(log).find("oops") != std::string::npos; }, 10));
  std::string text = ReadFile(log);
  EXPECT_NE(text.find("cwd=" + fs::canonical(dir).string() + " var=v1"), std::string::npos) << text;

  KillGroup(*pid, SIGKILL);
  EXPECT_TRUE(WaitFor([&] { return !ProcessAlive(*pid); }, 10));
}

TEST(ProcessSpawnDetached, ExitedProcessIsNotAlive) {
  test_util::TempDir tmp("frenzy-process");
  const fs::path& dir = tmp.path();
  auto pid = SpawnDetached({"/bin/sh", "-c", "echo bye"}, {}, "", (dir / "log").string());
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  EXPECT_TRUE(WaitFor([&] { return !ProcessAlive(*pid); }, 10));
  EXPECT_EQ(ReadFile(dir / "log"), "bye\n");
}

TEST(ProcessSpawnDetached, KillGroupReachesChildren) {
  test_util::TempDir tmp("frenzy-process");
  const fs::path& dir = tmp.path();
  auto pid = SpawnDetached({"/bin/sh", "-c", "sleep 30 & echo $! > child; wait"}, {}, dir.string(),
                           (dir / "log").string());
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  ASSERT_TRUE(WaitFor([&] { return !ReadFile(dir / "child").empty(); }, 10));
  int child = std::stoi(ReadFile(dir / "child"));
  EXPECT_TRUE(ProcessAlive(child));
  KillGroup(*pid, SIGTERM);
  EXPECT_TRUE(WaitFor([&] { return !ProcessAlive(*pid) && !ProcessAlive(child); }, 10));
}

TEST(ProcessSpawnDetached, Errors) {
  test_util::TempDir tmp("frenzy-process");
  const fs::path& dir = tmp.path();
  auto missing = SpawnDetached({"frenzy-no-such-program-xyz"}, {}, "", (dir / "log").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);

  auto bad_cwd = SpawnDetached({"/bin/true"}, {}, (dir / "nope").string(), (dir / "log").string());
  ASSERT_FALSE(bad_cwd.ok());
  EXPECT_EQ(bad_cwd.status().code(), StatusCode::kNotFound);

  auto bad_log = SpawnDetached({"/bin/true"}, {}, "", (dir / "no" / "such" / "log").string());
  ASSERT_FALSE(bad_log.ok());
  EXPECT_NE(bad_log.status().message().find("log"), std::string::npos);
}

TEST(ProcessAliveTest, DeadAndZombieProcessesAreNotAlive) {
  EXPECT_FALSE(ProcessAlive(0));
  EXPECT_FALSE(ProcessAlive(-5));
  EXPECT_TRUE(ProcessAlive(::getpid()));
  // A child of ours that exited and is not reaped yet is a zombie: dead.
  pid_t child = ::fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  EXPECT_TRUE(WaitFor([&] { return !ProcessAlive(child); }, 10));
  EXPECT_EQ(::kill(child, 0), 0);  // still exists, as a zombie
  ::waitpid(child, nullptr, 0);
  EXPECT_FALSE(ProcessAlive(child));
}

}  // namespace
}  // namespace frenzy::server
