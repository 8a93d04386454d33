#include "backend/slurm_backend.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "fake_runner.h"
#include "hardware/gpu.h"
#include "backend/process.h"
#include "server_test_util.h"

namespace frenzy::server {
namespace {

using test_util::Exited;
using test_util::FakeRunner;
using test_util::Printed;
using test_util::ReadFile;
using test_util::TempDir;
using test_util::TimedOut;

const GpuCatalog& Catalog() { return GpuCatalog::Default(); }

// A catalog of one made-up GPU, to show that the backend names GPUs by the catalog it is given.
const GpuCatalog& ZedCatalog() {
  static const GpuCatalog catalog = *GpuCatalog::Parse(R"([{
      "name": "Z1-24GB", "aliases": ["zed"], "memory_gib": 24, "fp16_tflops": 1,
      "fp32_tflops": 1, "mem_bw_gbs": 1, "link": "pcie", "link_gbs": 1, "source": "a test"}])",
                                                       "zed catalog");
  return catalog;
}

namespace fs = std::filesystem;

void WriteExecutable(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
  fs::permissions(p, fs::perms::owner_all);
}

// The permission bits of `path` (-1 when it cannot be stat'ed).
int ModeOf(const fs::path& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return -1;
  return static_cast<int>(st.st_mode & 07777);
}

fs::path DataDir() { return fs::path(FRENZY_SOURCE_DIR) / "tests" / "data" / "slurm"; }

LaunchSpec TwoByTwo(const std::string& workdir) {
  LaunchSpec s;
  s.job_id = "j-000042";
  s.name = "gpt-small";
  s.plan.gpu = "A100-80GB";
  s.plan.gpus = 4;
  s.nodes = 2;
  s.gpus_per_node = 2;
  s.command = {"python3", "train.py", "--name", "it's a \"quoted\" $name", "--flag"};
  s.env = {{"FRENZY_PLAN", R"({"tp": 2, "note": "it's"})"}, {"FRENZY_JOB_ID", "j-000042"}};
  s.workdir = workdir;
  return s;
}

// Lines of `text` starting with "#SBATCH ".
std::vector<std::string> SbatchLines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("#SBATCH ", 0) == 0) out.push_back(line.substr(8));
  }
  return out;
}

TEST(SlurmGres, TypesFromCatalogNames) {
  SlurmOptions o;
  EXPECT_EQ(GresType("A100-80GB", o), "a10080gb");
  EXPECT_EQ(GresType("V100-32GB", o), "v10032gb");
  EXPECT_EQ(GresType("H100-PCIe", o), "h100pcie");
  EXPECT_EQ(GresType("", o), "");
  o.gres_types = {{"A100-80GB", "a100"}};
  EXPECT_EQ(GresType("A100-80GB", o), "a100");
  EXPECT_EQ(GresType("a100-80gb", o), "a100");  // matched like catalog names
  EXPECT_EQ(GresType("V100-32GB", o), "v10032gb");
}

TEST(SlurmGres, CatalogNamesFromTypes) {
  SlurmOptions o;
  EXPECT_EQ(CatalogGpuForGres("a10080gb", o, Catalog()), "A100-80GB");
  EXPECT_EQ(CatalogGpuForGres("v10032gb", o, Catalog()), "V100-32GB");
  EXPECT_EQ(CatalogGpuForGres("h100pcie", o, Catalog()), "H100-PCIe");
  EXPECT_EQ(CatalogGpuForGres("a100", o, Catalog()), "A100-80GB");  // a catalog alias
  EXPECT_EQ(CatalogGpuForGres("mystery9000", o, Catalog()), "mystery9000");
  o.gres_types = {{"A100-40GB", "a100"}};
  EXPECT_EQ(CatalogGpuForGres("a100", o, Catalog()), "A100-40GB");
  // Every catalog name survives the round trip.
  SlurmOptions none;
  for (const char* name : {"V100-16GB", "T4", "L40S", "RTX-4090", "H200", "MI300X"}) {
    EXPECT_EQ(CatalogGpuForGres(GresType(name, none), none, Catalog()), name);
  }
}

TEST(SlurmGres, NamesComeFromTheCatalogGiven) {
  SlurmOptions o;
  EXPECT_EQ(CatalogGpuForGres("zed", o, ZedCatalog()), "Z1-24GB");
  EXPECT_EQ(CatalogGpuForGres("z124gb", o, ZedCatalog()), "Z1-24GB");
  EXPECT_EQ(CatalogGpuForGres("a100", o, ZedCatalog()), "a100");  // not in this catalog
  o.gres_types = {{"zed", "zz"}};
  EXPECT_EQ(CatalogGpuForGres("zz", o, ZedCatalog()), "Z1-24GB");  // mapped to an alias
}

TEST(SlurmScript, ShellQuote) {
  EXPECT_EQ(ShellQuote("plain"), "'plain'");
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellQuote("a \"b\" $c `d`"), "'a \"b\" $c `d`'");
}

TEST(SlurmScript, Directives) {
  SlurmOptions o;
  o.partition = "gpu";
  std::string script = SbatchScript(TwoByTwo("/runs/j 42"), o);
  EXPECT_EQ(script.rfind("#!/bin/bash\n", 0), 0u);
  std::vector<std::string> lines = SbatchLines(script);
  std::vector<std::string> want = {
      "--job-name=frenzy-j-000042", "--nodes=2",       "--ntasks-per-node=2",
      "--gres=gpu:a10080gb:2",      "--partition=gpu", "--output=\"/runs/j 42/slurm-%j.out\"",
      "--chdir=\"/runs/j 42\"", "--no-requeue"};
  EXPECT_EQ(lines, want);
}

// A run over two GPU types is one heterogeneous Slurm job: the first component's directives,
// then "hetjob" and the second's, each with its own typed gres; one srun spans both groups.
TEST(SlurmScript, HeterogeneousJobHasOneComponentPerType) {
  SlurmOptions o;
  o.partition = "gpu";
  LaunchSpec s = TwoByTwo("/runs/h");
  s.plan.gpus = 6;
  s.components = {{"A100-80GB", 2, 2}, {"V100-32GB", 1, 2}};
  std::string script = SbatchScript(s, o);
  std::vector<std::string> lines = SbatchLines(script);
  std::vector<std::string> want = {"--job-name=frenzy-j-000042", "--nodes=2", "--ntasks-per-node=2",
                                   "--gres=gpu:a10080gb:2", "--partition=gpu",
                                   "--output=\"/runs/h/slurm-%j.out\"", "--chdir=\"/runs/h\"",
                                   "--no-requeue", "hetjob", "--nodes=1", "--ntasks-per-node=2",
                                   "--gres=gpu:v10032gb:2", "--partition=gpu"};
  EXPECT_EQ(lines, want) << script;
  EXPECT_NE(script.find("srun --kill-on-bad-exit=1 --het-group=0-1 /bin/sh -c "),
            std::string::npos)
      << script;
}

TEST(SlurmScript, UntypedAndCpuOnlyRuns) {
  SlurmOptions o;
  LaunchSpec s = TwoByTwo("/runs/x");
  s.plan.gpu = "";
  auto lines = SbatchLines(SbatchScript(s, o));
  EXPECT_NE(std::find(lines.begin(), lines.end(), "--gres=gpu:2"), lines.end());
  s.gpus_per_node = 0;
  lines = SbatchLines(SbatchScript(s, o));
  EXPECT_NE(std::find(lines.begin(), lines.end(), "--ntasks-per-node=1"), lines.end());
  for (const std::string& l : lines) EXPECT_EQ(l.find("--gres"), std::string::npos) << l;
}

TEST(SlurmScript, BodyQuotesEverything) {
  SlurmOptions o;
  o.master_port = 29500;
  std::string script = SbatchScript(TwoByTwo("/runs/j-000042"), o);
  EXPECT_NE(script.find("export FRENZY_PLAN='{\"tp\": 2, \"note\": \"it'\\''s\"}'\n"),
            std::string::npos)
      << script;
  EXPECT_NE(script.find("export FRENZY_WORKDIR='/runs/j-000042'\n"), std::string::npos);
  EXPECT_NE(script.find("export MASTER_PORT=29500\n"), std::string::npos);
  EXPECT_NE(script.find("scontrol show hostnames \"$SLURM_JOB_NODELIST\""), std::string::npos);
  EXPECT_NE(script.find("srun --kill-on-bad-exit=1 /bin/sh -c "), std::string::npos);
  EXPECT_NE(script.find(" frenzy-rank 'python3' 'train.py' '--name' "
                        "'it'\\''s a \"quoted\" $name' '--flag'\n"),
            std::string::npos)
      << script;
  EXPECT_NE(script.find("RANK=\"$SLURM_PROCID\""), std::string::npos);
  EXPECT_NE(script.find("WORLD_SIZE=\"$SLURM_NTASKS\""), std::string::npos);
  EXPECT_NE(script.find("LOCAL_RANK=\"$SLURM_LOCALID\""), std::string::npos);
  EXPECT_NE(script.find("LOCAL_WORLD_SIZE=\"$SLURM_NTASKS_PER_NODE\""), std::string::npos);
  EXPECT_NE(script.find("\"$FRENZY_WORKDIR/exit_code\""), std::string::npos);
}

// scontrol as the batch script asks it: the job's two nodes, the first one's address.
void WriteFakeScontrol(const fs::path& bin) {
  WriteExecutable(bin / "scontrol",
                  "#!/bin/sh\n"
                  "case \"$*\" in\n"
                  "  'show hostnames a100-[0-1]') printf 'a100-0\\na100-1\\n' ;;\n"
                  "  'show node -o a100-0') echo 'NodeName=a100-0 Arch=x86_64 NodeAddr=10.0.0.7 "
                  "NodeHostName=gpu7 Version=22.05.8' ;;\n"
                  "  *) exit 1 ;;\n"
                  "esac\n");
}

// The batch script run as Slurm would start it (job 1234 on a100-[0-1]), with `bin` first on
// PATH.
Result<CommandResult> RunBatchScript(const fs::path& script, const fs::path& bin) {
  const char* path = std::getenv("PATH");
  return RunCommand({"/bin/bash", script.string()}, "", 20,
                    {{"PATH", bin.string() + ":" + (path ? path : "/usr/bin:/bin")},
                     {"SLURM_JOB_ID", "1234"},
                     {"SLURM_JOB_NODELIST", "a100-[0-1]"}});
}

// Runs the script with stand-ins for srun and scontrol, as one task would see it: the command
// must get its arguments verbatim and the launcher variables.
TEST(SlurmScript, RunsWithFakeSlurmCommands) {
  TempDir tmp{"frenzy-slurm"};
  fs::path bin = tmp.path() / "bin";
  fs::create_directories(bin);
  WriteExecutable(bin / "srun",
                  "#!/bin/sh\n"
                  "[ \"$1\" = --kill-on-bad-exit=1 ] || exit 99\nshift\n"
                  "export SLURM_PROCID=3 SLURM_NTASKS=4 SLURM_LOCALID=1 SLURM_NTASKS_PER_NODE=2\n"
                  "exec \"$@\"\n");
  WriteFakeScontrol(bin);
  fs::path work = tmp.path() / "run dir";
  fs::create_directories(work);
  LaunchSpec s = TwoByTwo(work.string());
  s.command = {"/bin/sh",
               "-c",
               "printf '%s|' \"$@\"; echo; echo \"$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE "
               "$MASTER_ADDR $MASTER_PORT $FRENZY_WORKDIR\"; printf '%s\\n' \"$FRENZY_PLAN\"; "
               "exit 4",
               "sh",
               "a b",
               "it's",
               "\"q\"",
               "$HOME"};
  fs::path script = work / "job.sbatch";
  std::ofstream(script) << SbatchScript(s, SlurmOptions{});
  auto r = RunBatchScript(script, bin);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 4) << r->stderr_text;
  EXPECT_EQ(r->stdout_text, "a b|it's|\"q\"|$HOME|\n3 4 1 2 10.0.0.7 21234 " + work.string() +
                                "\n{\"tp\": 2, \"note\": \"it's\"}\n");
  EXPECT_EQ(ReadFile(work / "exit_code"), "4\n");
}

// A framework's launch (src/launch): one task per node running the framework's own launcher,
// its placeholders filled from the rendezvous and the node's SLURM_NODEID, the user's words
// passed as written (never evaluated), its env exported and its files beside the run.
TEST(SlurmScript, AFrameworkLaunchRunsOneAgentPerNodeWithPlaceholdersFilled) {
  TempDir tmp{"frenzy-slurm-fw"};
  fs::path bin = tmp.path() / "bin";
  fs::create_directories(bin);
  WriteExecutable(bin / "srun",
                  "#!/bin/sh\n"
                  "[ \"$1\" = --kill-on-bad-exit=1 ] || exit 99\nshift\n"
                  "[ \"$1\" = --ntasks-per-node=1 ] || exit 98\nshift\n"
                  "export SLURM_NODEID=1 SLURM_PROCID=1\n"
                  "exec \"$@\"\n");
  WriteFakeScontrol(bin);
  fs::path work = tmp.path() / "run";
  fs::create_directories(work);
  LaunchSpec s = TwoByTwo(work.string());
  frenzy::Launch l;
  l.framework = Launcher::kDeepSpeed;
  l.version = "test";
  l.nodes = 2;
  l.procs_per_node = 2;
  l.argv = {"/bin/sh", "-c",
            "printf '%s|' \"$@\"; echo; echo \"$NODE_RANK $CUDA_DEVICE_MAX_CONNECTIONS\"; "
            "cat \"$FRENZY_WORKDIR/ds_config.json\"",
            "sh", "--rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT", "--rdzv-id=$FRENZY_JOB_ID",
            "--node-rank=$NODE_RANK", "$(touch pwned); it's & \"q\""};
  l.env = {{"CUDA_DEVICE_MAX_CONNECTIONS", "1"}};
  l.files = {{"ds_config.json", "{\"zero_optimization\": {\"stage\": 3}}\n"}};
  s.framework = l;
  const std::string text = SbatchScript(s, SlurmOptions{});
  std::vector<std::string> lines = SbatchLines(text);
  EXPECT_NE(std::find(lines.begin(), lines.end(), "--ntasks-per-node=1"), lines.end()) << text;
  EXPECT_NE(std::find(lines.begin(), lines.end(), "--gres=gpu:a10080gb:2"), lines.end()) << text;
  ASSERT_TRUE(WriteLaunchFiles(l, work.string()).ok());
  fs::path script = work / "job.sbatch";
  std::ofstream(script) << text;
  auto r = RunBatchScript(script, bin);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 0) << r->stderr_text << text;
  EXPECT_EQ(r->stdout_text,
            "--rdzv-endpoint=10.0.0.7:21234|--rdzv-id=j-000042|--node-rank=1|"
            "$(touch pwned); it's & \"q\"|\n1 1\n{\"zero_optimization\": {\"stage\": 3}}\n");
  EXPECT_FALSE(fs::exists("pwned"));
  EXPECT_FALSE(fs::exists(work / "pwned"));
  EXPECT_EQ(ReadFile(work / "exit_code"), "0\n");
}

TEST(SlurmScript, FrameworkLaunchFilesMustBePlainNames) {
  TempDir tmp{"frenzy-slurm-files"};
  frenzy::Launch l;
  l.argv = {"torchrun"};
  for (const char* bad : {"../escape", "a/b", ".hidden", "", "x y"}) {
    l.files = {{bad, "text"}};
    Status st = WriteLaunchFiles(l, tmp.path().string());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(st.field(), "files") << bad;
  }
  EXPECT_FALSE(fs::exists(tmp.path().parent_path() / "escape"));
  l.files = {{"ds_config.json", "{}"}};
  l.argv.clear();
  EXPECT_EQ(ValidateFrameworkLaunch(l).field(), "argv");
}

TEST(SlurmSinfo, ParsesCapturedIdleCluster) {
  auto nodes = ParseSinfoJson(ReadFile(DataDir() / "sinfo-22.05.json"), Catalog());
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].name, "a100-0");
  EXPECT_EQ((*nodes)[0].gpu, "A100-80GB");
  EXPECT_EQ((*nodes)[0].gpus, 2);
  EXPECT_TRUE((*nodes)[0].up);
  EXPECT_EQ((*nodes)[1].name, "v100-0");
  EXPECT_EQ((*nodes)[1].gpu, "V100-32GB");
  EXPECT_EQ((*nodes)[1].gpus, 2);
  EXPECT_TRUE((*nodes)[1].up);
}

TEST(SlurmSinfo, ParsesCapturedBusyAndDrainedCluster) {
  auto nodes = ParseSinfoJson(ReadFile(DataDir() / "sinfo-22.05-busy-drained.json"), Catalog());
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].name, "a100-0");
  EXPECT_TRUE((*nodes)[0].up);  // mixed: some GPUs in use
  EXPECT_EQ((*nodes)[0].gpus, 2);
  EXPECT_EQ((*nodes)[1].name, "v100-0");
  EXPECT_FALSE((*nodes)[1].up);  // idle + DRAIN
}

TEST(SlurmSinfo, GresForms) {
  std::string text = R"json({"nodes": [
    {"name": "n1", "state": "allocated", "gres": "gpu:a100:4(S:0-1)", "partitions": ["p1"]},
    {"name": "n2", "state": "idle", "gres": "gpu:2", "partitions": ["p2"]},
    {"name": "n3", "state": "idle", "gres": "", "partitions": ["p1"]},
    {"name": "n4", "state": "down*", "gres": "gpu:tesla_t4:1(S:0),gpu:tesla_t4:1(S:1),mps:200",
     "partitions": ["p1"]},
    {"name": "n5", "state": ["IDLE", "DRAIN"], "gres": "gpu:h100:8", "partitions": ["p1"]},
    {"name": "n6", "state": ["MIXED"], "gres": "gpu:l4:2,gpu:a10:1", "partitions": ["p1"]},
    {"name": "n7", "state": "idle", "gres": "gpu:weird9:3", "partitions": ["p1"]}
  ]})json";
  auto nodes = ParseSinfoJson(text, Catalog());
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 7u);
  const auto& n = *nodes;
  EXPECT_EQ(n[0].gpu, "A100-80GB");
  EXPECT_EQ(n[0].gpus, 4);
  EXPECT_TRUE(n[0].up);
  EXPECT_EQ(n[1].gpu, "");
  EXPECT_EQ(n[1].gpus, 2);
  EXPECT_EQ(n[2].gpus, 0);
  EXPECT_EQ(n[3].gpu, "T4");
  EXPECT_EQ(n[3].gpus, 2);
  EXPECT_FALSE(n[3].up);
  EXPECT_EQ(n[4].gpu, "H100-80GB");
  EXPECT_FALSE(n[4].up);
  EXPECT_EQ(n[5].gpu, "L4");
  EXPECT_EQ(n[5].gpus, 2);
  EXPECT_TRUE(n[5].up);
  EXPECT_EQ(n[6].gpu, "weird9");

  auto p2 = ParseSinfoJson(text, Catalog(), {}, "p2");
  ASSERT_TRUE(p2.ok());
  ASSERT_EQ(p2->size(), 1u);
  EXPECT_EQ((*p2)[0].name, "n2");

  SlurmOptions mapped;
  mapped.gres_types = {{"A100-40GB", "a100"}};
  auto m = ParseSinfoJson(text, Catalog(), mapped);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)[0].gpu, "A100-40GB");
}

TEST(SlurmSinfo, Errors) {
  EXPECT_EQ(ParseSinfoJson("not json", Catalog()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSinfoJson("{}", Catalog()).status().code(), StatusCode::kInvalidArgument);
  auto e = ParseSinfoJson(R"({"errors": [{"error": "Unable to contact slurm controller"}],
                              "nodes": []})",
                          Catalog());
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("Unable to contact slurm controller"), std::string::npos);
  EXPECT_FALSE(ParseSinfoJson(R"({"nodes": [{"state": "idle"}]})", Catalog()).ok());
}

// The captured records: held (pending), running, completed, failed (exit 3), cancelled and
// killed by SIGSEGV, in that order.
TEST(SlurmJobState, CapturedRecords) {
  std::istringstream in(ReadFile(DataDir() / "scontrol-show-job.txt"));
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(line);
  }
  ASSERT_EQ(lines.size(), 6u);
  std::vector<RunStatus> st;
  for (const std::string& l : lines) {
    auto r = ParseJobState(l);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    st.push_back(*r);
  }
  EXPECT_EQ(st[0].state, RunState::kPending);
  EXPECT_NE(st[0].message.find("JobHeldUser"), std::string::npos);
  EXPECT_EQ(st[1].state, RunState::kRunning);
  EXPECT_EQ(st[2].state, RunState::kSucceeded);
  EXPECT_EQ(st[2].exit_code, 0);
  EXPECT_EQ(st[3].state, RunState::kFailed);
  EXPECT_EQ(st[3].failure, FailureKind::kCrashed);
  EXPECT_EQ(st[3].exit_code, 3);
  EXPECT_NE(st[3].message.find("NonZeroExitCode"), std::string::npos);
  EXPECT_EQ(st[4].state, RunState::kCancelled);
  EXPECT_EQ(st[5].state, RunState::kFailed);
  EXPECT_EQ(st[5].failure, FailureKind::kCrashed);
  EXPECT_EQ(st[5].exit_code, 128 + 11);
  for (size_t i : {0, 1, 2, 4}) EXPECT_EQ(st[i].failure, FailureKind::kNone) << i;
}

TEST(SlurmJobState, OtherStates) {
  auto parse = [](const std::string& s) {
    auto r = ParseJobState("JobId=7 JobName=frenzy-j-1 UserId=root(0) " + s + " RunTime=00:01:00");
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : RunStatus{};
  };
  RunStatus t = parse("JobState=TIMEOUT Reason=TimeLimit ExitCode=0:0");
  EXPECT_EQ(t.state, RunState::kFailed);
  EXPECT_NE(t.message.find("TIMEOUT"), std::string::npos);
  EXPECT_NE(t.message.find("TimeLimit"), std::string::npos);
  EXPECT_NE(t.exit_code, 0);
  EXPECT_EQ(parse("JobState=NODE_FAIL Reason=NodeDown ExitCode=0:0").state, RunState::kFailed);
  RunStatus oom = parse("JobState=OUT_OF_MEMORY Reason=OutOfMemory ExitCode=0:125");
  EXPECT_EQ(oom.state, RunState::kFailed);
  EXPECT_NE(oom.message.find("OUT_OF_MEMORY"), std::string::npos);
  EXPECT_EQ(parse("JobState=COMPLETING Reason=None ExitCode=0:0").state, RunState::kRunning);
  EXPECT_EQ(parse("JobState=PENDING Reason=Resources ExitCode=0:0").message, "pending: Resources");
  EXPECT_EQ(parse("JobState=CONFIGURING Reason=None ExitCode=0:0").state, RunState::kPending);
  EXPECT_EQ(parse("JobState=CANCELLED Reason=None ExitCode=0:15").state, RunState::kCancelled);

  EXPECT_EQ(t.failure, FailureKind::kCrashed);
  EXPECT_EQ(oom.failure, FailureKind::kOutOfMemory);
  EXPECT_EQ(oom.exit_code, 128 + 125);  // ExitCode=0:125: ended by "signal" 125

  EXPECT_FALSE(ParseJobState("").ok());
  EXPECT_FALSE(ParseJobState("slurm_load_jobs error: Invalid job id specified").ok());
  EXPECT_FALSE(ParseJobState("JobId=1 JobState=EXPLODED ExitCode=0:0").ok());
}

TEST(SlurmJobState, FailureKindsFollowTheJobState) {
  struct Case {
    const char* record;
    RunState state;
    FailureKind failure;
  };
  const Case cases[] = {
      {"JobState=OUT_OF_MEMORY Reason=OutOfMemory ExitCode=0:125", RunState::kFailed,
       FailureKind::kOutOfMemory},
      {"JobState=NODE_FAIL Reason=NodeDown ExitCode=0:0", RunState::kFailed,
       FailureKind::kNodeLost},
      {"JobState=BOOT_FAIL Reason=NodeDown ExitCode=0:0", RunState::kFailed,
       FailureKind::kNodeLost},
      {"JobState=PREEMPTED Reason=None ExitCode=0:15", RunState::kFailed, FailureKind::kNodeLost},
      {"JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0", RunState::kFailed,
       FailureKind::kCrashed},
      {"JobState=TIMEOUT Reason=TimeLimit ExitCode=0:0", RunState::kFailed, FailureKind::kCrashed},
      {"JobState=DEADLINE Reason=None ExitCode=0:0", RunState::kFailed, FailureKind::kCrashed},
      {"JobState=COMPLETED Reason=None ExitCode=2:0", RunState::kFailed, FailureKind::kCrashed},
      {"JobState=COMPLETED Reason=None ExitCode=0:0", RunState::kSucceeded, FailureKind::kNone},
      {"JobState=RUNNING Reason=None ExitCode=0:0", RunState::kRunning, FailureKind::kNone},
      {"JobState=CANCELLED Reason=None ExitCode=0:15", RunState::kCancelled, FailureKind::kNone},
  };
  for (const Case& c : cases) {
    auto r = ParseJobState(std::string("JobId=7 JobName=frenzy-j-1 ") + c.record);
    ASSERT_TRUE(r.ok()) << c.record << ": " << r.status().ToString();
    EXPECT_EQ(r->state, c.state) << c.record;
    EXPECT_EQ(r->failure, c.failure) << c.record << ": " << FailureKindName(r->failure);
  }
}

TEST(SlurmHandle, RoundTrip) {
  EXPECT_EQ(SlurmHandle("123", "/runs/a:b"), "slurm:123:/runs/a:b");
  auto p = ParseSlurmHandle("slurm:123:/runs/a:b");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->first, "123");
  EXPECT_EQ(p->second, "/runs/a:b");
  EXPECT_FALSE(ParseSlurmHandle("local:/runs/x").ok());
  EXPECT_FALSE(ParseSlurmHandle("slurm:abc:/runs/x").ok());
  EXPECT_FALSE(ParseSlurmHandle("slurm:123").ok());
}

// SlurmBackend with a FakeRunner standing in for the client commands: each test scripts the
// answers and checks the exact commands sent.
class SlurmBackendFakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.slurm_conf = "/etc/test/slurm.conf";
    options_.extra_sbatch_args = {"--time=01:00:00", "--comment=a b"};
    options_.command_timeout_s = 7;
    work_ = tmp_.path() / "runs" / "j-000042";
  }
  // The job record scontrol prints for job 4242.
  static CommandResult Job(const std::string& fields) {
    return Printed("JobId=4242 JobName=frenzy-j-000042 UserId=root(0) " + fields + "\n");
  }
  static CommandResult ForgottenJob() {
    return Exited(1, "", "slurm_load_jobs error: Invalid job id specified\n");
  }
  std::string Handle() const { return SlurmHandle("4242", work_.string()); }
  void WriteOutput(const std::string& text) {
    fs::create_directories(work_);
    std::ofstream(work_ / "slurm-4242.out") << text;
  }

  TempDir tmp_{"frenzy-slurm"};
  fs::path work_;
  SlurmOptions options_;
  FakeRunner runner_;
};

TEST_F(SlurmBackendFakeTest, LaunchWritesTheScriptAndSubmitsItWithTheOptions) {
  SlurmBackend b(options_, Catalog(), runner_);
  EXPECT_EQ(b.name(), "slurm");
  runner_.Push(Printed("4242;cluster\n"));
  const LaunchSpec spec = TwoByTwo(work_.string());
  auto h = b.Launch(spec);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(*h, "slurm:4242:" + work_.string());

  const std::vector<CommandSpec> calls = runner_.calls();
  ASSERT_EQ(calls.size(), 1u);
  const std::vector<std::string> want = {"sbatch", "--parsable", "--time=01:00:00", "--comment=a b",
                                         (work_ / "job.sbatch").string()};
  EXPECT_EQ(calls[0].argv, want);
  EXPECT_EQ(calls[0].extra_env,
            (std::map<std::string, std::string>{{"SLURM_CONF", "/etc/test/slurm.conf"}}));
  EXPECT_EQ(calls[0].timeout_s, 7);
  EXPECT_EQ(calls[0].stdin_text, "");
  // The script submitted asks for the plan's 2 nodes x 2 GPUs of its type.
  const std::string script = ReadFile(work_ / "job.sbatch");
  EXPECT_EQ(script, SbatchScript(spec, options_));
  const std::vector<std::string> lines = SbatchLines(script);
  for (const char* line : {"--nodes=2", "--ntasks-per-node=2", "--gres=gpu:a10080gb:2"}) {
    EXPECT_NE(std::find(lines.begin(), lines.end(), line), lines.end()) << line;
  }
}

TEST_F(SlurmBackendFakeTest, ClientCommandsComeFromBinDirWhenSet) {
  options_.bin_dir = "/opt/slurm/bin";
  options_.slurm_conf.clear();
  SlurmBackend b(options_, Catalog(), runner_);
  runner_.Push(Printed("4242\n"));
  ASSERT_TRUE(b.Launch(TwoByTwo(work_.string())).ok());
  ASSERT_EQ(runner_.calls().size(), 1u);
  EXPECT_EQ(runner_.calls()[0].argv[0], "/opt/slurm/bin/sbatch");
  EXPECT_TRUE(runner_.calls()[0].extra_env.empty());  // no SLURM_CONF: the clients' default
}

TEST_F(SlurmBackendFakeTest, SbatchAnswersOtherThanAJobIdAreErrors) {
  SlurmBackend b(options_, Catalog(), runner_);
  for (const char* out : {"", "\n", "Submitted batch job 4242\n", "42x;cluster\n"}) {
    runner_.Push(Printed(out));
    auto h = b.Launch(TwoByTwo(work_.string()));
    ASSERT_FALSE(h.ok()) << "'" << out << "'";
    EXPECT_EQ(h.status().code(), StatusCode::kInternal);
    EXPECT_NE(h.status().message().find("printed no job id"), std::string::npos);
  }
}

TEST_F(SlurmBackendFakeTest, TheScriptHoldingTheTokenIsOwnerOnly) {
  SlurmBackend b(options_, Catalog(), runner_);
  runner_.SetHandler([](const CommandSpec&) { return Printed("4242\n"); });
  LaunchSpec spec = TwoByTwo(work_.string());
  spec.env["FRENZY_TOKEN"] = "tok-8c1f-slurm";
  const fs::path script = work_ / "job.sbatch";
  // A script of an earlier attempt, readable and executable by all, and a umask that takes no
  // bits away: the new script is 0600 all the same.
  fs::create_directories(work_);
  std::ofstream(script) << "old\n";
  fs::permissions(script, fs::perms::all);
  const mode_t old_umask = ::umask(0);
  auto h = b.Launch(spec);
  ::umask(old_umask);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(ModeOf(script), 0600);
  EXPECT_NE(ReadFile(script).find("export FRENZY_TOKEN='tok-8c1f-slurm'"), std::string::npos);

  // A link planted at the script's name is replaced, not written through.
  const fs::path victim = tmp_.path() / "victim";
  std::ofstream(victim) << "keep\n";
  fs::remove(script);
  fs::create_symlink(victim, script);
  ASSERT_TRUE(b.Launch(spec).ok());
  EXPECT_EQ(ReadFile(victim), "keep\n");
  EXPECT_FALSE(fs::is_symlink(script));
  EXPECT_EQ(ModeOf(script), 0600);
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(work_)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, std::set<std::string>{"job.sbatch"});  // no temporary file left behind
}

TEST(SlurmPrivateFile, WriteErrorsNameThePath) {
  TempDir tmp{"frenzy-slurm"};
  const fs::path missing = tmp.path() / "no-such-dir" / "job.sbatch";
  ::frenzy::Status st = WritePrivateFile(missing.string(), "x");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.where(), missing.string());
  EXPECT_EQ(st.code(), StatusCode::kInternal);
}

TEST_F(SlurmBackendFakeTest, SbatchFailureNamesCommandAndStderr) {
  runner_.Push(Exited(1, "",
                      "sbatch: error: Batch job submission failed: Requested node configuration "
                      "is not available\n"));
  SlurmBackend b(options_, Catalog(), runner_);
  auto h = b.Launch(TwoByTwo(work_.string()));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(h.status().message().find("sbatch --parsable"), std::string::npos)
      << h.status().message();
  EXPECT_NE(h.status().message().find("(exit 1)"), std::string::npos) << h.status().message();
  EXPECT_NE(h.status().message().find("Requested node configuration is not available"),
            std::string::npos);
}

TEST_F(SlurmBackendFakeTest, RunnerErrorsNameTheCommand) {
  runner_.Push(NotFound("program 'sbatch' not found on PATH (/usr/bin)"));
  SlurmBackend b(options_, Catalog(), runner_);
  auto h = b.Launch(TwoByTwo(work_.string()));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(h.status().message().rfind("sbatch --parsable", 0), 0u) << h.status().message();
}

// The real runner: a client missing from bin_dir is NotFound before anything runs.
TEST_F(SlurmBackendFakeTest, MissingClientIsNotFound) {
  options_.bin_dir = (tmp_.path() / "nothing-here").string();
  SlurmBackend b(options_, Catalog(), SystemRunner());
  auto h = b.Launch(TwoByTwo(work_.string()));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kNotFound);
  EXPECT_NE(h.status().message().find("sbatch"), std::string::npos);
  EXPECT_EQ(b.Nodes().status().code(), StatusCode::kNotFound);
}

TEST_F(SlurmBackendFakeTest, LaunchValidates) {
  SlurmBackend b(options_, Catalog(), runner_);
  LaunchSpec s = TwoByTwo(work_.string());
  s.placement = {{"a100-0", 2}, {"a100-1", 1}};
  s.plan.gpus = 3;
  auto uneven = b.Launch(s);
  ASSERT_FALSE(uneven.ok());
  EXPECT_EQ(uneven.status().field(), "placement");

  s = TwoByTwo("relative/dir");
  EXPECT_EQ(b.Launch(s).status().field(), "workdir");
  s = TwoByTwo("/runs/with\"quote");
  EXPECT_EQ(b.Launch(s).status().field(), "workdir");
  s = TwoByTwo(work_.string());
  s.env["not a name"] = "x";
  EXPECT_EQ(b.Launch(s).status().field(), "env");
  s = TwoByTwo(work_.string());
  s.job_id = "j 1";
  EXPECT_EQ(b.Launch(s).status().field(), "job_id");
  s = TwoByTwo(work_.string());
  s.plan.gpus = 3;
  EXPECT_FALSE(b.Launch(s).ok());
  EXPECT_TRUE(runner_.calls().empty());  // nothing was submitted
}

TEST_F(SlurmBackendFakeTest, HeterogeneousLaunchesAreChecked) {
  SlurmBackend b(options_, Catalog(), runner_);
  LaunchSpec s = TwoByTwo(work_.string());
  s.plan.gpus = 6;
  s.components = {{"A100-80GB", 2, 2}};  // one component is not heterogeneous
  EXPECT_EQ(b.Launch(s).status().field(), "components");
  s.components = {{"A100-80GB", 2, 2}, {"V100-32GB", 0, 2}};  // a component without nodes
  EXPECT_EQ(b.Launch(s).status().field(), "components");
  s.components = {{"A100-80GB", 2, 2}, {"", 1, 2}};  // nor without a type
  EXPECT_EQ(b.Launch(s).status().field(), "components");
  s.components = {{"A100-80GB", 2, 2}, {"V100-32GB", 1, 1}};  // 5 GPUs, the plan's 6
  auto short_of = b.Launch(s);
  EXPECT_EQ(short_of.status().field(), "components");
  EXPECT_NE(short_of.status().message().find("5 GPUs"), std::string::npos)
      << short_of.status().ToString();
  EXPECT_TRUE(runner_.calls().empty());  // nothing was submitted
}

TEST_F(SlurmBackendFakeTest, StatusAsksScontrolAboutTheJob) {
  SlurmBackend b(options_, Catalog(), runner_);
  runner_.Push(Job("JobState=RUNNING Reason=None ExitCode=0:0"));
  auto st = b.Status(Handle());
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->state, RunState::kRunning);
  EXPECT_EQ(st->failure, FailureKind::kNone);
  ASSERT_EQ(runner_.calls().size(), 1u);
  EXPECT_EQ(runner_.calls()[0].argv,
            (std::vector<std::string>{"scontrol", "show", "job", "-o", "4242"}));
  EXPECT_EQ(runner_.calls()[0].extra_env.at("SLURM_CONF"), "/etc/test/slurm.conf");
}

TEST_F(SlurmBackendFakeTest, FailedJobTakesItsKindFromTheStateAndItsOutput) {
  SlurmBackend b(options_, Catalog(), runner_);
  struct Case {
    const char* name;
    const char* state;   // scontrol's JobState and what follows
    const char* output;  // slurm-4242.out
    FailureKind failure;
    const char* in_message;
  };
  const Case cases[] = {
      {"a crash", "JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0",
       "step 1\nValueError: bad batch\nsrun: error: a100-0: task 1: Exited with exit code 1\n",
       FailureKind::kCrashed, "ValueError: bad batch"},
      // Slurm sees a CUDA out-of-memory error as a plain exit 1; the output tells.
      {"CUDA out of memory", "JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0",
       "step 1\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n\n"
       "srun: error: a100-0: task 1: Exited with exit code 1\n"
       "srun: launch/slurm: _step_signal: Terminating StepId=4242.0\n",
       FailureKind::kOutOfMemory, "CUDA out of memory. Tried to allocate 2.00 GiB"},
      // The line telling is not the last one the ranks wrote: both are in the message.
      {"CPU out of memory", "JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0",
       "RuntimeError: [enforce fail at alloc_cpu.cpp:83] . DefaultCPUAllocator: can't allocate "
       "memory: you tried to allocate 1073741824 bytes.\nrank 1: exiting\n",
       FailureKind::kOutOfMemory, "DefaultCPUAllocator: can't allocate memory"},
      {"an oom-kill seen by slurmstepd", "JobState=FAILED Reason=NonZeroExitCode ExitCode=0:9",
       "step 1\nslurmstepd: error: Detected 1 oom-kill event(s) in StepId=4242.0. Some of your "
       "processes may have been killed by the cgroup out-of-memory handler.\n",
       FailureKind::kOutOfMemory, "Detected 1 oom-kill event(s)"},
      {"OUT_OF_MEMORY", "JobState=OUT_OF_MEMORY Reason=OutOfMemory ExitCode=0:125", "",
       FailureKind::kOutOfMemory, "OUT_OF_MEMORY"},
      // A node that died takes its ranks' memory errors with it: the state decides.
      {"NODE_FAIL", "JobState=NODE_FAIL Reason=NodeDown ExitCode=0:0",
       "CUDA error: out of memory\n", FailureKind::kNodeLost, "NODE_FAIL (NodeDown)"},
      {"TIMEOUT", "JobState=TIMEOUT Reason=TimeLimit ExitCode=0:0",
       "slurmstepd: error: *** JOB 4242 ON a100-0 CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME "
       "LIMIT ***\n",
       FailureKind::kCrashed, "TIMEOUT (TimeLimit)"},
  };
  for (const Case& c : cases) {
    WriteOutput(c.output);
    runner_.Push(Job(c.state));
    auto st = b.Status(Handle());
    ASSERT_TRUE(st.ok()) << c.name << ": " << st.status().ToString();
    EXPECT_EQ(st->state, RunState::kFailed) << c.name;
    EXPECT_EQ(st->failure, c.failure) << c.name << ": " << FailureKindName(st->failure);
    EXPECT_NE(st->message.find(c.in_message), std::string::npos) << c.name << ": " << st->message;
  }
}

TEST_F(SlurmBackendFakeTest, StatusFallsBackToTheRunFolder) {
  SlurmBackend b(options_, Catalog(), runner_);
  runner_.SetHandler([](const CommandSpec&) { return ForgottenJob(); });
  fs::create_directories(work_);
  auto lost = b.Status(Handle());
  ASSERT_TRUE(lost.ok()) << lost.status().ToString();
  EXPECT_EQ(lost->state, RunState::kLost);
  EXPECT_EQ(lost->failure, FailureKind::kNone);

  std::ofstream(work_ / "exit_code") << "0\n";
  EXPECT_EQ(b.Status(Handle())->state, RunState::kSucceeded);

  std::ofstream(work_ / "exit_code") << "9\n";
  WriteOutput("last words\n");
  auto failed = b.Status(Handle());
  ASSERT_TRUE(failed.ok()) << failed.status().ToString();
  EXPECT_EQ(failed->state, RunState::kFailed);
  EXPECT_EQ(failed->failure, FailureKind::kCrashed);
  EXPECT_EQ(failed->exit_code, 9);
  EXPECT_EQ(failed->message, "exit code 9: last words");

  // Without the job state, the output alone tells an out-of-memory end.
  WriteOutput("torch.cuda.OutOfMemoryError: CUDA out of memory.\nsrun: error: task 0: Exited\n");
  auto oom = b.Status(Handle());
  ASSERT_TRUE(oom.ok()) << oom.status().ToString();
  EXPECT_EQ(oom->failure, FailureKind::kOutOfMemory);

  std::ofstream(work_ / "exit_code") << "nine\n";
  EXPECT_EQ(b.Status(Handle()).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SlurmBackendFakeTest, ScontrolFailureIsAnError) {
  SlurmBackend b(options_, Catalog(), runner_);
  runner_.Push(Exited(1, "", "slurm_load_jobs error: Unable to contact slurm controller\n"));
  auto st = b.Status(Handle());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("scontrol show job -o 4242"), std::string::npos);
  EXPECT_NE(st.status().message().find("Unable to contact slurm controller"), std::string::npos);

  // A timed-out scontrol is an error too, never "Slurm forgot the job".
  runner_.Push(TimedOut());
  st = b.Status(Handle());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("timed out"), std::string::npos) << st.status().message();

  // Output that is no job record is not a state.
  runner_.Push(Printed("something else entirely\n"));
  EXPECT_EQ(b.Status(Handle()).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SlurmBackendFakeTest, CancelRunningJobLeavesMarker) {
  SlurmBackend b(options_, Catalog(), runner_);
  fs::create_directories(work_);
  runner_.Push(Job("JobState=RUNNING Reason=None ExitCode=0:0"));
  runner_.Push(Printed(""));  // scancel
  ASSERT_TRUE(b.Cancel(Handle()).ok());
  const auto argvs = runner_.argvs();
  ASSERT_EQ(argvs.size(), 2u);
  EXPECT_EQ(argvs[0][0], "scontrol");
  EXPECT_EQ(argvs[1], (std::vector<std::string>{"scancel", "4242"}));
  EXPECT_TRUE(fs::exists(work_ / "cancelled"));
  // Once Slurm forgets the job, the marker still says cancelled.
  runner_.Push(ForgottenJob());
  EXPECT_EQ(b.Status(Handle())->state, RunState::kCancelled);
}

TEST_F(SlurmBackendFakeTest, CancelOfAJobEndingMeanwhileIsNotAnError) {
  SlurmBackend b(options_, Catalog(), runner_);
  fs::create_directories(work_);
  runner_.Push(Job("JobState=RUNNING Reason=None ExitCode=0:0"));
  runner_.Push(Exited(1, "",
                      "scancel: error: Kill job error on job id 4242: Job/step already "
                      "completing or completed\n"));
  EXPECT_TRUE(b.Cancel(Handle()).ok());

  runner_.Push(Job("JobState=RUNNING Reason=None ExitCode=0:0"));
  runner_.Push(Exited(1, "", "scancel: error: Access/permission denied\n"));
  ::frenzy::Status denied = b.Cancel(Handle());
  ASSERT_FALSE(denied.ok());
  EXPECT_NE(denied.message().find("permission denied"), std::string::npos) << denied.message();
}

TEST_F(SlurmBackendFakeTest, CancelEndedJobKeepsOutcome) {
  SlurmBackend b(options_, Catalog(), runner_);
  fs::create_directories(work_);
  runner_.Push(Job("JobState=COMPLETED Reason=None ExitCode=0:0"));
  ASSERT_TRUE(b.Cancel(Handle()).ok());
  ASSERT_EQ(runner_.calls().size(), 1u);  // no scancel
  EXPECT_FALSE(fs::exists(work_ / "cancelled"));
}

TEST_F(SlurmBackendFakeTest, NodesFromSinfo) {
  options_.partition = "gpu";
  SlurmBackend b(options_, Catalog(), runner_);
  runner_.Push(Printed(ReadFile(DataDir() / "sinfo-22.05.json")));
  auto nodes = b.Nodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[1].gpu, "V100-32GB");
  ASSERT_EQ(runner_.calls().size(), 1u);
  EXPECT_EQ(runner_.calls()[0].argv,
            (std::vector<std::string>{"sinfo", "--json", "--partition=gpu"}));

  runner_.Push(Printed("<html>proxy error</html>"));
  EXPECT_EQ(b.Nodes().status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SlurmBackendFakeTest, NodesAreNamedByTheCatalogGiven) {
  SlurmBackend b(options_, ZedCatalog(), runner_);
  runner_.Push(Printed(R"({"nodes": [{"name": "z1", "state": "idle", "gres": "gpu:zed:4"}]})"));
  auto nodes = b.Nodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0].gpu, "Z1-24GB");
  EXPECT_EQ((*nodes)[0].gpus, 4);
}

}  // namespace
}  // namespace frenzy::server
