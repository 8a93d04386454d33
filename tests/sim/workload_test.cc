// The workload file format (DESIGN.md §3): parsing, errors with line numbers, round trips, and
// the workloads bundled with the binary.
#include "sim/workload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "model/zoo.h"

namespace frenzy {
namespace {

constexpr const char* kHeader = "job_id,submit_s,model,tokens,global_batch,seq_len\n";

TEST(WorkloadCsv, ParsesRequiredAndOptionalColumns) {
  auto w = ParseWorkloadCsv(
      "job_id,submit_s,model,tokens,global_batch,seq_len,requested_gpu,requested_gpus,"
      "precision,priority,user\n"
      "a,0,llama-2-7b,1e9,64,2048,A100-80GB,8,bf16,1,alice\n"
      "\n"
      "# a comment\n"
      "b,12.5,opt-125m,1000,64,1024,,,,,\n",
      "w.csv");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->jobs.size(), 2u);
  EXPECT_EQ(w->jobs[0].id, "a");
  EXPECT_EQ(w->jobs[0].tokens, 1e9);
  EXPECT_EQ(w->jobs[0].requested_gpu, "A100-80GB");
  EXPECT_EQ(w->jobs[0].requested_gpus, 8);
  EXPECT_EQ(w->jobs[0].priority, 1);
  EXPECT_EQ(w->jobs[0].user, "alice");
  EXPECT_EQ(w->jobs[1].submit_s, 12.5);
  EXPECT_FALSE(w->jobs[1].requested_gpu.has_value());
  EXPECT_FALSE(w->jobs[1].requested_gpus.has_value());
  EXPECT_EQ(w->jobs[1].seq_len, 1024);
}

TEST(WorkloadCsv, ColumnsInAnyOrderAndUnknownColumnsIgnored) {
  auto w = ParseWorkloadCsv(
      "seq_len,tokens,color,model,job_id,global_batch,submit_s\n"
      "2048,5e8,red,gpt2,x,32,3\n",
      "w.csv");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->jobs[0].model, "gpt2");
  EXPECT_EQ(w->jobs[0].global_batch, 32);
  EXPECT_EQ(w->jobs[0].submit_s, 3);
}

struct BadLine {
  std::string line;
  std::string field;
};

TEST(WorkloadCsv, BadLinesNameTheirLineAndField) {
  const BadLine cases[] = {
      {"a,-1,gpt2,1000,64,2048", "submit_s"},
      {"a,x,gpt2,1000,64,2048", "submit_s"},
      {"a,0,gpt2,0,64,2048", "tokens"},
      {"a,0,gpt2,1000,0,2048", "global_batch"},
      {"a,0,gpt2,1000,6.5,2048", "global_batch"},
      {"a,0,gpt2,1000,64,0", "seq_len"},
      {"a,0,,1000,64,2048", "model"},
      {"a,0,gpt2,1000,64", "seq_len"},
  };
  for (const auto& c : cases) {
    // Line 1 is the header, line 2 a good job, line 3 blank: the bad job is on line 4.
    std::string text = std::string(kHeader) + "ok,0,gpt2,1000,64,2048\n\n" + c.line + "\n";
    auto w = ParseWorkloadCsv(text, "w.csv");
    ASSERT_FALSE(w.ok()) << c.line;
    EXPECT_EQ(w.status().where(), "w.csv:4") << c.line;
    EXPECT_EQ(w.status().field(), c.field) << c.line;
  }
}

TEST(WorkloadCsv, RejectsDuplicateIdsUnknownPrecisionAndMissingHeader) {
  auto dup = ParseWorkloadCsv(std::string(kHeader) + "a,0,gpt2,1,1,1\na,0,gpt2,1,1,1\n", "w.csv");
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().where(), "w.csv:3");
  EXPECT_EQ(dup.status().field(), "job_id");
  auto prec = ParseWorkloadCsv(
      "job_id,submit_s,model,tokens,global_batch,seq_len,precision\na,0,gpt2,1,1,1,fp4\n", "w.csv");
  ASSERT_FALSE(prec.ok());
  EXPECT_EQ(prec.status().field(), "precision");
  auto header = ParseWorkloadCsv("job_id,submit_s,model,tokens\n", "w.csv");
  ASSERT_FALSE(header.ok());
  EXPECT_EQ(header.status().where(), "w.csv:1");
  EXPECT_EQ(header.status().field(), "global_batch");
  EXPECT_FALSE(ParseWorkloadCsv("", "w.csv").ok());
}

TEST(WorkloadCsv, RoundTripsThroughText) {
  Workload w;
  WorkloadJob a;
  a.id = "a";
  a.submit_s = 0.125;
  a.model = "llama-2-7b";
  a.tokens = 123456789012.0;
  a.global_batch = 64;
  a.seq_len = 2048;
  a.requested_gpu = "V100-32GB";
  a.requested_gpus = 16;
  a.precision = Precision::kFp16;
  a.priority = 3;
  a.user = "bob";
  WorkloadJob b;
  b.id = "b";
  b.submit_s = 1e6 / 3;
  b.model = "opt-125m";
  b.tokens = 1.5e9 / 7;
  b.global_batch = 96;
  b.seq_len = 2048;
  w.jobs = {a, b};
  std::string text = WorkloadToCsv(w);
  auto back = ParseWorkloadCsv(text, "w.csv");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->jobs.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto& x = w.jobs[i];
    const auto& y = back->jobs[i];
    EXPECT_EQ(x.id, y.id);
    EXPECT_EQ(x.submit_s, y.submit_s);
    EXPECT_EQ(x.model, y.model);
    EXPECT_EQ(x.tokens, y.tokens);
    EXPECT_EQ(x.global_batch, y.global_batch);
    EXPECT_EQ(x.seq_len, y.seq_len);
    EXPECT_EQ(x.requested_gpu, y.requested_gpu);
    EXPECT_EQ(x.requested_gpus, y.requested_gpus);
    EXPECT_EQ(x.precision, y.precision);
    EXPECT_EQ(x.priority, y.priority);
    EXPECT_EQ(x.user, y.user);
  }
  EXPECT_EQ(WorkloadToCsv(*back), text);
}

TEST(BundledWorkloads, AllParseAndNameZooModels) {
  auto names = BundledWorkloadNames();
  for (const char* want : {"lab-synthetic", "itp-c04-64", "philly-64"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  for (const auto& n : names) {
    auto w = ResolveWorkload(n);
    ASSERT_TRUE(w.ok()) << n << ": " << w.status().ToString();
    EXPECT_EQ(w->name, n);
    EXPECT_GE(w->jobs.size(), 50u) << n;
    for (const auto& j : w->jobs) {
      EXPECT_TRUE(ResolveModel(j.model).ok()) << n << ": " << j.model;
      EXPECT_TRUE(j.requested_gpu.has_value()) << n << ": " << j.id;
      EXPECT_TRUE(j.requested_gpus.has_value()) << n << ": " << j.id;
    }
  }
}

TEST(BundledWorkloads, UnknownNameListsTheBundledOnes) {
  auto w = ResolveWorkload("no-such-workload");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("lab-synthetic"), std::string::npos) << w.status().message();
}

}  // namespace
}  // namespace frenzy
