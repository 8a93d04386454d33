// `frenzy trace convert` and `frenzy workload generate`, run as a user would.
#include <gtest/gtest.h>

#include "cli_run.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace {

using frenzy::testing::CliRun;
using frenzy::testing::Frenzy;

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("frenzy-trace-cli-" + name)).string();
}

std::string TempFile(const std::string& name, const std::string& contents) {
  std::string path = TempPath(name);
  std::ofstream(path) << contents;
  return path;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const std::string kTraces = std::string(FRENZY_SOURCE_DIR) + "/tests/data/traces";

TEST(TraceCli, ConvertsAnItpTraceWithASummary) {
  std::string out = TempPath("itp.csv");
  CliRun r = Frenzy("trace convert --from itp " + kTraces +
                    "/itp-cluster04-head.csv --max-jobs 100 --out " + out + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["jobs"], 100);
  EXPECT_EQ(j["cluster"], "cluster64");
  EXPECT_LT(j["median_duration_error"].get<double>(), 1e-6);
  EXPECT_EQ(j["trace_gpus"], j["requested_gpus"]);
  std::string csv = ReadText(out);
  EXPECT_EQ(csv.rfind("job_id,submit_s,model,tokens", 0), 0u) << csv.substr(0, 100);
  // The converted file replays: simulate reads it (checked by parsing it back in the command).
  CliRun text = Frenzy("trace convert --from itp " + kTraces +
                       "/itp-cluster04-head.csv --max-jobs 100 --out " + out);
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_NE(text.out.find("median error"), std::string::npos) << text.out;
}

TEST(TraceCli, SameSeedSameFile) {
  std::string trace = TempFile("t.csv",
                               "job_id,submission_time,duration,num_gpu\n"
                               "a,0,3600,1\nb,60,7200,8\nc,90,600,4\nd,100,80000,16\n");
  std::string a = TempPath("a.csv"), b = TempPath("b.csv");
  ASSERT_EQ(Frenzy("trace convert --from itp " + trace + " --seed 5 --out " + a).exit_code, 0);
  ASSERT_EQ(Frenzy("trace convert --from itp " + trace + " --seed 5 --out " + b).exit_code, 0);
  EXPECT_EQ(ReadText(a), ReadText(b));
}

TEST(TraceCli, BadTraceLineExitsTwoNamingFileLineAndField) {
  std::string trace = TempFile("bad.csv",
                               "job_id,submission_time,duration,num_gpu\n"
                               "a,0,3600,1\n\nb,60,soon,8\n");
  CliRun r = Frenzy("trace convert --from itp " + trace + " --out " + TempPath("x.csv"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find(trace + ":4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("duration"), std::string::npos) << r.out;
}

TEST(TraceCli, CsvNeedsColumnsAndUsesThem) {
  std::string trace = TempFile("generic.csv", "t,len,n,m\n0,3600,2,opt-350m\n10,7200,1,opt-125m\n");
  CliRun no_cols = Frenzy("trace convert --from csv " + trace + " --out " + TempPath("y.csv"));
  EXPECT_EQ(no_cols.exit_code, 2) << no_cols.out;
  EXPECT_NE(no_cols.out.find("--columns"), std::string::npos) << no_cols.out;
  std::string out = TempPath("generic-out.csv");
  CliRun r = Frenzy("trace convert --from csv " + trace +
                    " --columns submit=t,duration=len,gpus=n,model=m --cluster lab --out " + out +
                    " --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["models"]["opt-350m"], 1);
  EXPECT_EQ(j["models"]["opt-125m"], 1);
}

TEST(TraceCli, ConvertsAGavelTrace) {
  std::string out = TempPath("philly.csv");
  CliRun r = Frenzy("trace convert --from gavel " + kTraces +
                    "/gavel-0e4a51-head.trace --max-jobs 50 --out " +
                    out + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["jobs"], 50);
}

TEST(WorkloadCli, GeneratesASyntheticWorkload) {
  std::string out = TempPath("gen.csv");
  CliRun r = Frenzy("workload generate --cluster lab --jobs 40 --load 0.9 --seed 4 --out " + out +
                    " --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["jobs"], 40);
  EXPECT_GT(j["span_s"].get<double>(), 0);
  CliRun models =
      Frenzy("workload generate --cluster lab --jobs 5 --models opt-350m,opt-125m --out " + out +
             " --json");
  ASSERT_EQ(models.exit_code, 0) << models.out;
  auto m = nlohmann::json::parse(models.out)["models"];
  for (auto it = m.begin(); it != m.end(); ++it) {
    EXPECT_TRUE(it.key() == "opt-350m" || it.key() == "opt-125m") << it.key();
  }
}

TEST(WorkloadCli, BadOptionsExitTwo) {
  std::string out = TempPath("gen-bad.csv");
  CliRun unknown = Frenzy("workload generate --cluster lab --models no-such-model --out " + out);
  EXPECT_EQ(unknown.exit_code, 2) << unknown.out;
  EXPECT_NE(unknown.out.find("no-such-model"), std::string::npos) << unknown.out;
  CliRun load = Frenzy("workload generate --cluster lab --load -1 --out " + out);
  EXPECT_EQ(load.exit_code, 2) << load.out;
  EXPECT_NE(load.out.find("--load"), std::string::npos) << load.out;
}

}  // namespace
