// `frenzy simulate`, run as a user would: the JSON contract of DESIGN.md §2, the files of --out,
// determinism for a seed, and clear errors for bad input.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli_run.h"

namespace {

using frenzy::testing::CliRun;
using frenzy::testing::Frenzy;

std::string TempFile(const std::string& name, const std::string& contents) {
  auto path = (std::filesystem::temp_directory_path() / ("frenzy-sim-cli-" + name)).string();
  std::ofstream(path) << contents;
  return path;
}

TEST(SimulateCli, JsonHasEveryPolicyWithTheContractFields) {
  CliRun r = Frenzy(
      "simulate --cluster lab --workload lab-synthetic --policy fifo-static,tiresias "
      "--json",
      false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["policies"].size(), 2u);
  EXPECT_EQ(j["policies"][0]["policy"], "fifo-static");
  EXPECT_EQ(j["policies"][1]["policy"], "tiresias");
  for (const auto& p : j["policies"]) {
    for (const char* f :
         {"jobs", "avg_jct_s", "p50_jct_s", "p99_jct_s", "makespan_s", "avg_queue_s", "gpu_util",
          "oom_events", "sched_overhead_ms_mean", "sched_overhead_ms_max"}) {
      EXPECT_TRUE(p.contains(f)) << f;
    }
    EXPECT_EQ(p["jobs"], 60);
    EXPECT_GT(p["finished"].get<int>(), 50);
    EXPECT_GT(p["avg_jct_s"].get<double>(), 0);
    EXPECT_LE(p["p50_jct_s"].get<double>(), p["p99_jct_s"].get<double>());
    EXPECT_GT(p["gpu_util"].get<double>(), 0);
    EXPECT_LE(p["gpu_util"].get<double>(), 1.0);
  }
}

TEST(SimulateCli, SameSeedSameFigures) {
  auto run = [](const char* seed) {
    CliRun r = Frenzy(
        std::string("simulate -c lab -w lab-synthetic -p tiresias --json --seed ") + seed, false);
    auto j = nlohmann::json::parse(r.out)["policies"][0];
    for (const char* f : {"sched_overhead_ms_mean", "sched_overhead_ms_p99",
                          "sched_overhead_ms_max", "sched_overhead_ms_total", "sim_wall_s"}) {
      j.erase(f);  // wall-clock measurements
    }
    return j;
  };
  EXPECT_EQ(run("5"), run("5"));
}

TEST(SimulateCli, OutWritesCsvsAndSvgPlots) {
  auto dir = std::filesystem::temp_directory_path() / "frenzy-sim-cli-out";
  std::filesystem::remove_all(dir);
  CliRun r =
      Frenzy("simulate -c lab -w lab-synthetic -p fifo-static,tiresias --no-progress --out " +
             dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const char* f :
       {"jobs.csv", "timeline.csv", "summary.json", "jct_cdf.svg", "timeline.svg"}) {
    ASSERT_TRUE(std::filesystem::exists(dir / f)) << f;
  }
  std::ifstream svg(dir / "jct_cdf.svg");
  std::stringstream ss;
  ss << svg.rdbuf();
  EXPECT_EQ(ss.str().rfind("<svg", 0), 0u);
  EXPECT_NE(ss.str().find("tiresias"), std::string::npos);
  EXPECT_NE(ss.str().find("</svg>"), std::string::npos);
  std::ifstream jobs(dir / "jobs.csv");
  int lines = 0;
  for (std::string l; std::getline(jobs, l);) ++lines;
  EXPECT_EQ(lines, 1 + 2 * 60);  // header + 60 jobs per policy
}

TEST(SimulateCli, BadInputIsAClearErrorWithExitCode2) {
  CliRun r = Frenzy("simulate -c lab -w lab-synthetic -p fifo-static,nope");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("unknown policy 'nope'"), std::string::npos) << r.out;

  std::string bad = TempFile("bad.csv",
                             "job_id,submit_s,model,tokens,global_batch,seq_len\n"
                             "a,0,gpt2,1e9,64,1024\n"
                             "b,10,gpt2,lots,64,1024\n");
  r = Frenzy("simulate -c lab -p fifo-static -w " + bad);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("bad.csv:3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokens"), std::string::npos) << r.out;

  std::string unknown = TempFile("unknown-model.csv",
                                 "job_id,submit_s,model,tokens,global_batch,seq_len\n"
                                 "x1,0,no-such-model,1e9,64,1024\n");
  r = Frenzy("simulate -c lab -p fifo-static -w " + unknown);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("x1"), std::string::npos) << r.out;

  r = Frenzy("simulate -c lab -w no-such-workload -p fifo-static");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("lab-synthetic"), std::string::npos) << r.out;  // lists bundled ones

  r = Frenzy("simulate -c lab -w lab-synthetic -p fifo-static --memory-error -3");
  EXPECT_EQ(r.exit_code, 2);

  r = Frenzy("simulate -c lab -w lab-synthetic -p fifo-static --perf-error-per team");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("perf-error-per"), std::string::npos) << r.out;
}

// --withhold: the listed jobs are drawn but never submitted (out of every figure); a missing
// file or an id the workload lacks is a clear error.
TEST(SimulateCli, WithheldJobsLeaveTheRunAndBadListsAreErrors) {
  std::string ids = TempFile("withhold.txt", "# two jobs of lab-synthetic\ngen-00006\n\n  gen-00008 \n");
  CliRun r = Frenzy("simulate -c lab -w lab-synthetic -p fifo-static --json --withhold " + ids,
                    false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["policies"][0]["jobs"], 58);

  r = Frenzy("simulate -c lab -w lab-synthetic -p fifo-static --withhold /no/such/list");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("/no/such/list"), std::string::npos) << r.out;

  std::string stray = TempFile("withhold-bad.txt", "gen-00006\nnot-a-job\n");
  r = Frenzy("simulate -c lab -w lab-synthetic -p fifo-static --withhold " + stray);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("not-a-job"), std::string::npos) << r.out;
}

// The speed truth per model (the default) or per job: the same seed, another world (the lab
// workload has 60 jobs of 11 models, so per job most jobs draw another speed), and per model
// is what no flag gives.
TEST(SimulateCli, SpeedTruthPerModelByDefaultOrPerJob) {
  auto avg = [](const std::string& flags) {
    CliRun r = Frenzy("simulate -c lab -w lab-synthetic -p tiresias --json " + flags, false);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return nlohmann::json::parse(r.out)["policies"][0]["avg_jct_s"].get<double>();
  };
  const double plain = avg("");
  EXPECT_EQ(avg("--perf-error-per model"), plain);
  EXPECT_NE(avg("--perf-error-per job"), plain);
}

}  // namespace
