// Sia on hand-checked scenarios: option tables and cluster views are built by hand (no planner),
// and a few lines below apply the policy's decisions the way the engine does.
//
// Reference numbers (p = -0.5, lambda_n = 1.1, restart penalty delta = 60 s): a configuration
// with normalised goodput G is worth 1.1 - G^-0.5 to the objective; for a running job every other
// configuration's G is first multiplied by r = (age - restarts * 60) / (age + 60).
#include "sched/sia.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "sched/apply.h"
#include "sched_fixtures.h"

namespace frenzy {
namespace {

using frenzy::testing::kGiB;
using frenzy::testing::MakeCluster;
using frenzy::testing::Opt;
using frenzy::testing::ProfiledJob;
using frenzy::testing::Table;
using frenzy::testing::TypeSpec;

// Linear scaling 1..max_gpus (powers of two) on one type.
std::vector<RunOption> Linear(int type, double per_gpu, int64_t max_gpus) {
  std::vector<RunOption> v;
  for (int64_t g = 1; g <= max_gpus; g *= 2) v.push_back(Opt(type, g, per_gpu * g));
  return v;
}

int IndexOf(const JobOptions& t, int type, int64_t gpus) {
  const RunOption* o = t.Find(type, gpus);
  return o == nullptr ? -1 : static_cast<int>(o - t.options.data());
}

// The decisions applied as the engine and the daemon apply them (sched/apply.h), minus the
// clock: a policy's invalid decision fails the test.
void Apply(const Decisions& d, double now_s, ClusterView& c, std::vector<JobView>& jobs) {
  ViewsTarget target(c, jobs);
  const ClusterView snapshot = c;
  auto applied = ApplyDecisions(d, snapshot, "sia", now_s, target);
  ASSERT_TRUE(applied.ok()) << applied.ToString();
}

// Puts a job on `gpus` GPUs of `type` (first nodes with room), as if it had been running.
void RunOn(JobView& j, int type, int64_t gpus, ClusterView& c) {
  Decisions d;
  Allocation a{IndexOf(*j.options, type, gpus), {}};
  int64_t left = gpus;
  for (size_t n = 0; n < c.nodes.size() && left > 0; ++n) {
    if (c.nodes[n].type != type) continue;
    int64_t take = std::min(left, c.nodes[n].free);
    if (take > 0) a.placement.emplace_back(static_cast<int>(n), take);
    left -= take;
  }
  d.start.push_back({j.key, a});
  std::vector<JobView> one = {j};
  Apply(d, j.submit_s, c, one);
  j = one[0];
  j.first_start_s = j.submit_s;
}

Snapshot Snap(double now_s, const ClusterView& c, const std::vector<JobView>& jobs) {
  return Snapshot{now_s, &c, std::span<const JobView>(jobs), 1, Costs{}};
}

int64_t GpusOf(const JobView& j) { return j.running ? j.option(j.alloc.option).gpus : 0; }
int TypeOf(const JobView& j) { return j.running ? j.option(j.alloc.option).type : -1; }

TEST(Sia, DescribesItself) {
  auto p = MakePolicy("sia");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)->name(), "sia");
  EXPECT_EQ((*p)->options_kind(), OptionKind::kHand);
  EXPECT_TRUE((*p)->uses_profiled_memory());
  EXPECT_FALSE((*p)->event_driven());
  EXPECT_DOUBLE_EQ((*p)->round_s(), 60);
}

// A new job starts at its smallest configuration, on the type where that is fastest
// (G = 3 on "fast" vs 1 on "slow").
TEST(Sia, NewJobStartsSmallOnTheBestType) {
  ClusterView c = MakeCluster({{"slow", 80, 1, 8}, {"fast", 80, 1, 8}});
  std::vector<RunOption> opts = Linear(0, 1, 8);
  for (const auto& o : Linear(1, 3, 8)) opts.push_back(o);
  JobOptions table = Table(c, opts);
  std::vector<JobView> jobs = {ProfiledJob(0, &table)};
  auto sia = MakeSiaPolicy();
  Apply(sia->Schedule(Snap(0, c, jobs)), 0, c, jobs);
  EXPECT_EQ(TypeOf(jobs[0]), 1);
  EXPECT_EQ(GpusOf(jobs[0]), 1);
}

// With GPUs free, a running job doubles every round (never more than 2x at once): 1 -> 2 -> 4 ->
// 8 GPUs. At age 600 s, r = 600/660: growing 2 -> 4 is worth 1.1 - (4 r)^-0.5 = 0.576 against
// 1.1 - 2^-0.5 = 0.393 for staying.
TEST(Sia, GrowsAJobAtMostTwofoldPerRoundWhileGpusAreFree) {
  ClusterView c = MakeCluster({{"gpu", 80, 1, 8}});
  JobOptions table = Table(c, Linear(0, 1, 8));
  std::vector<JobView> jobs = {ProfiledJob(0, &table)};
  auto sia = MakeSiaPolicy();
  std::vector<int64_t> gpus;
  for (int r = 0; r < 5; ++r) {
    const double now = 600 + 60.0 * r;
    Apply(sia->Schedule(Snap(now, c, jobs)), now, c, jobs);
    gpus.push_back(GpusOf(jobs[0]));
  }
  EXPECT_EQ(gpus, (std::vector<int64_t>{1, 2, 4, 8, 8}));
}

// Five jobs whose smallest configuration is 2 GPUs, on 4 GPUs: never more than 4 GPUs in use.
// The 4-GPU option is only 20% faster (G = 1.2, worth 1.1 - 1.2^-0.5 = 0.187), so two jobs on 2
// GPUs (2 x (1.1 - 1) = 0.2) beat one job on 4. (With linear scaling, G = 2 would be worth 0.393
// and Sia would rather grow one job than admit a second: its p = -0.5 objective at work.)
TEST(Sia, RespectsEachTypesCapacity) {
  ClusterView c = MakeCluster({{"gpu", 80, 1, 4}});
  JobOptions table = Table(c, {Opt(0, 2, 2), Opt(0, 4, 2.4)});
  std::vector<JobView> jobs;
  for (int i = 0; i < 5; ++i) jobs.push_back(ProfiledJob(i, &table));
  auto sia = MakeSiaPolicy();
  for (int r = 0; r < 4; ++r) {
    Apply(sia->Schedule(Snap(60.0 * r, c, jobs)), 60.0 * r, c, jobs);
    int64_t used = 0;
    int running = 0;
    for (const auto& j : jobs) {
      used += GpusOf(j);
      running += j.running ? 1 : 0;
    }
    EXPECT_LE(used, 4);
    EXPECT_EQ(running, 2);
  }
}

// With linear scaling the same cluster ends up with one job on all 4 GPUs once the restart
// factor allows it (r = 120/180 at age 120 s: 1.1 - (2 r)^-0.5 = 0.234 > 0.2).
TEST(Sia, PrefersGrowingALinearlyScalingJobOverAdmittingAnother) {
  ClusterView c = MakeCluster({{"gpu", 80, 1, 4}});
  JobOptions table = Table(c, {Opt(0, 2, 2), Opt(0, 4, 4)});
  std::vector<JobView> jobs;
  for (int i = 0; i < 3; ++i) jobs.push_back(ProfiledJob(i, &table));
  auto sia = MakeSiaPolicy();
  for (int r = 0; r < 3; ++r) Apply(sia->Schedule(Snap(60.0 * r, c, jobs)), 60.0 * r, c, jobs);
  int64_t used = 0;
  int running = 0;
  for (const auto& j : jobs) {
    used += GpusOf(j);
    running += j.running ? 1 : 0;
  }
  EXPECT_EQ(used, 4);
  EXPECT_EQ(running, 1);
}

// A running job on 2 GPUs whose 4-GPU option is only 5% faster: with r = 600/660 the move is
// worth 1.1 - (2.1 r)^-0.5 = 0.376 < 0.393 for staying, so Sia keeps it (no decision). Without
// the penalty (r = 1) the move would win (0.410).
TEST(Sia, RestartPenaltyKeepsTheCurrentConfigWhenTheGainIsSmall) {
  ClusterView c = MakeCluster({{"gpu", 80, 1, 8}});
  JobOptions table = Table(c, {Opt(0, 1, 1), Opt(0, 2, 2), Opt(0, 4, 2.1)});
  std::vector<JobView> jobs = {ProfiledJob(0, &table)};
  jobs[0].submit_s = 0;
  RunOn(jobs[0], 0, 2, c);
  auto sia = MakeSiaPolicy();
  Decisions d = sia->Schedule(Snap(600, c, jobs));
  EXPECT_TRUE(d.stop.empty());
  EXPECT_TRUE(d.start.empty());
}

// The same job with a real gain (4 GPUs twice as fast) is moved; a job restarted 8 times
// (r = 120/660) is not.
TEST(Sia, RestartPenaltyGrowsWithRestarts) {
  ClusterView c = MakeCluster({{"gpu", 80, 1, 8}});
  JobOptions table = Table(c, Linear(0, 1, 4));
  std::vector<JobView> jobs = {ProfiledJob(0, &table)};
  RunOn(jobs[0], 0, 2, c);
  auto sia = MakeSiaPolicy();
  Decisions d = sia->Schedule(Snap(600, c, jobs));
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(jobs[0].option(d.start[0].second.option).gpus, 4);

  jobs[0].restarts = 8;
  d = sia->Schedule(Snap(600, c, jobs));
  EXPECT_TRUE(d.start.empty());
  EXPECT_TRUE(d.stop.empty());
}

// A job in its checkpoint-restore pause keeps its configuration (Sia's hard constraint).
TEST(Sia, JobInCheckpointRestoreKeepsItsConfig) {
  ClusterView c = MakeCluster({{"gpu", 80, 1, 8}});
  JobOptions table = Table(c, Linear(0, 1, 8));
  std::vector<JobView> jobs = {ProfiledJob(0, &table)};
  RunOn(jobs[0], 0, 2, c);
  jobs[0].progress_since_s = 660;  // restarting until then
  auto sia = MakeSiaPolicy();
  Decisions d = sia->Schedule(Snap(600, c, jobs));
  EXPECT_TRUE(d.start.empty());
  EXPECT_TRUE(d.stop.empty());
}

// The fast type's options fit the predicted memory but not the profiled one (x1.3 > 40 GiB):
// Sia never picks them, even though they are 5x faster.
TEST(Sia, NeverPicksAConfigWhoseProfiledMemoryDoesNotFit) {
  ClusterView c = MakeCluster({{"fast-small", 40, 1, 8}, {"slow-big", 80, 1, 8}});
  JobOptions table =
      Table(c, {Opt(0, 1, 5, 35), Opt(0, 2, 10, 35), Opt(1, 1, 1, 35), Opt(1, 2, 2, 35)});
  std::vector<JobView> jobs = {ProfiledJob(0, &table)};
  jobs[0].memory_factor = 1.3;
  auto sia = MakeSiaPolicy();
  for (int r = 0; r < 3; ++r) {
    Apply(sia->Schedule(Snap(60.0 * r, c, jobs)), 60.0 * r, c, jobs);
    EXPECT_EQ(TypeOf(jobs[0]), 1);
  }
}

TEST(Sia, NeverRetriesAnOptionThatCrashedOutOfMemory) {
  ClusterView c = MakeCluster({{"fast", 80, 1, 8}, {"slow", 80, 1, 8}});
  JobOptions table = Table(c, {Opt(0, 1, 5), Opt(1, 1, 1)});
  std::vector<JobView> jobs = {ProfiledJob(0, &table)};
  jobs[0].failed_options = {IndexOf(table, 0, 1)};
  auto sia = MakeSiaPolicy();
  Apply(sia->Schedule(Snap(0, c, jobs)), 0, c, jobs);
  EXPECT_EQ(TypeOf(jobs[0]), 1);
}

// Scale: ~100 active jobs on 64 GPUs of three types (half of them running), the load Sia's
// paper evaluates: every round's allocation fits the cluster. (How fast it solves is measured
// by bench/sched_bench.cc, not asserted here.)
TEST(Sia, SolvesARoundWithAHundredJobsOn64Gpus) {
  ClusterView c = testing::SiaScaleCluster();
  const std::vector<JobOptions> tables = testing::SiaScaleTables(c);
  std::vector<JobView> jobs;
  for (int i = 0; i < 100; ++i) {
    jobs.push_back(ProfiledJob(i, &tables[static_cast<size_t>(i % 12)]));
    jobs.back().submit_s = 10.0 * i;
  }
  auto sia = MakeSiaPolicy();
  for (int r = 0; r < 5; ++r) {
    const double now = 1000 + 60.0 * r;
    Decisions d = sia->Schedule(Snap(now, c, jobs));
    Apply(d, now, c, jobs);
    std::map<int, int64_t> used;
    for (const auto& j : jobs) used[TypeOf(j)] += GpusOf(j);
    for (int t = 0; t < 3; ++t) EXPECT_LE(used[t], c.TotalOfType(t));
  }
}

}  // namespace
}  // namespace frenzy
