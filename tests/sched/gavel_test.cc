// Gavel on hand-checked scenarios: option tables and cluster views are built by hand (no
// planner), and a few lines below apply the policy's decisions the way the engine does.
#include "sched/gavel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "sched/apply.h"
#include "sched/placement.h"
#include "sched_fixtures.h"

namespace frenzy {
namespace {

using frenzy::testing::kGiB;
using frenzy::testing::MakeCluster;
using frenzy::testing::Opt;
using frenzy::testing::ProfiledJob;
using frenzy::testing::Table;
using frenzy::testing::TypeSpec;

JobView MakeJob(int64_t key, const JobOptions* table, int64_t requested_gpus) {
  JobView j = ProfiledJob(key, table);
  for (size_t i = 0; i < table->options.size(); ++i) {
    if (table->options[i].gpus == requested_gpus) {
      j.requested_option = static_cast<int>(i);
      break;
    }
  }
  return j;
}

// The decisions applied as the engine and the daemon apply them (sched/apply.h), minus the
// clock: a policy's invalid decision fails the test.
void Apply(const Decisions& d, double now_s, ClusterView& c, std::vector<JobView>& jobs) {
  ViewsTarget target(c, jobs);
  const ClusterView snapshot = c;
  auto applied = ApplyDecisions(d, snapshot, "gavel", now_s, target);
  ASSERT_TRUE(applied.ok()) << applied.ToString();
}

Snapshot Snap(double now_s, const ClusterView& c, const std::vector<JobView>& jobs, int64_t seq) {
  return Snapshot{now_s, &c, std::span<const JobView>(jobs), seq, Costs{}};
}

int TypeOf(const JobView& j) { return j.running ? j.option(j.alloc.option).type : -1; }

TEST(Gavel, DescribesItself) {
  auto p = MakePolicy("gavel");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)->name(), "gavel");
  EXPECT_EQ((*p)->options_kind(), OptionKind::kHand);
  EXPECT_TRUE((*p)->uses_profiled_memory());
  EXPECT_FALSE((*p)->event_driven());
  EXPECT_DOUBLE_EQ((*p)->round_s(), 360);
}

// One fast and one slow GPU, three 1-GPU jobs. A and C barely care (4 vs 3 tokens/s); B is 10x
// faster on the fast type. Normalised by their equal-share throughputs (3.5, 5.5, 3.5),
// heterogeneity-unaware equal time shares give everyone 0.667. The LP's optimum (hand-solved)
// gives B 0.418 of the fast GPU and nothing of the slow one, A and C the slow GPU and the rest of
// the fast one, and everyone 0.761. Over many rounds the mechanism realises it: B never runs on
// the slow GPU, holds the fast one about 42% of the rounds, and every job's normalised throughput
// is close to 0.761 and to the others'.
TEST(Gavel, HeterogeneityAwareMaxMinShareIsRealisedOverRounds) {
  ClusterView c = MakeCluster({{"fast", 80, 1, 1}, {"slow", 80, 1, 1}});
  JobOptions insensitive = Table(c, {Opt(0, 1, 4), Opt(1, 1, 3)});
  JobOptions sensitive = Table(c, {Opt(0, 1, 10), Opt(1, 1, 1)});
  std::vector<JobView> jobs = {MakeJob(0, &insensitive, 1), MakeJob(1, &sensitive, 1),
                               MakeJob(2, &insensitive, 1)};
  const double equal_share[] = {3.5, 5.5, 3.5};  // (fast + slow) / 2
  std::vector<double> normalised(3, 0.0);
  int b_fast = 0, b_slow = 0, slow_busy = 0;
  auto gavel = MakeGavelPolicy();
  const int rounds = 120;
  for (int r = 0; r < rounds; ++r) {
    const double now = r * 360.0;
    Apply(gavel->Schedule(Snap(now, c, jobs, 1)), now, c, jobs);
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (jobs[i].running) {
        normalised[i] +=
            jobs[i].option(jobs[i].alloc.option).plan.tokens_per_s / equal_share[i] / rounds;
        slow_busy += TypeOf(jobs[i]) == 1 ? 1 : 0;
      }
    }
    b_fast += TypeOf(jobs[1]) == 0 ? 1 : 0;
    b_slow += TypeOf(jobs[1]) == 1 ? 1 : 0;
  }
  EXPECT_EQ(b_slow, 0);
  EXPECT_NEAR(static_cast<double>(b_fast) / rounds, 0.418, 0.03);
  EXPECT_EQ(slow_busy, rounds);  // work-conserving: the slow GPU never idles
  for (double v : normalised) {
    EXPECT_GT(v, 0.72);  // the heterogeneity-unaware share is 0.667
    EXPECT_LT(v, 0.80);
  }
  const auto [lo, hi] = std::minmax_element(normalised.begin(), normalised.end());
  EXPECT_LT(*hi / *lo, 1.06);
}

// Three identical jobs on one GPU: X = 1/3 each, and priorities X / received fraction rotate
// the GPU: each job runs every third round.
TEST(Gavel, RoundRobinsOverRounds) {
  ClusterView c = MakeCluster({{"gpu", 80, 1, 1}});
  JobOptions table = Table(c, {Opt(0, 1, 5)});
  std::vector<JobView> jobs = {MakeJob(0, &table, 1), MakeJob(1, &table, 1), MakeJob(2, &table, 1)};
  auto gavel = MakeGavelPolicy();
  std::vector<int64_t> runner;
  for (int r = 0; r < 9; ++r) {
    Apply(gavel->Schedule(Snap(r * 360.0, c, jobs, 7)), r * 360.0, c, jobs);
    for (const auto& j : jobs) {
      if (j.running) runner.push_back(j.key);
    }
  }
  EXPECT_EQ(runner, (std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1, 2}));
}

// A job granted what it already runs on keeps its GPUs: no decision at all.
TEST(Gavel, RunningJobKeepsItsGpusWhenGrantedAgain) {
  ClusterView c = MakeCluster({{"gpu", 80, 1, 8}});
  JobOptions table = Table(c, {Opt(0, 2, 5), Opt(0, 4, 9)});
  std::vector<JobView> jobs = {MakeJob(0, &table, 4), MakeJob(1, &table, 2)};
  auto gavel = MakeGavelPolicy();
  Apply(gavel->Schedule(Snap(0, c, jobs, 1)), 0, c, jobs);
  ASSERT_TRUE(jobs[0].running && jobs[1].running);
  EXPECT_EQ(jobs[0].option(jobs[0].alloc.option).gpus, 4);  // the user's count, never changed
  Decisions d = gavel->Schedule(Snap(360, c, jobs, 1));
  EXPECT_TRUE(d.stop.empty());
  EXPECT_TRUE(d.start.empty());
}

// The fast type's option fits the predicted memory but not the profiled one (factor 1.3):
// Gavel, which profiles, never places it there.
TEST(Gavel, NeverUsesAnOptionWhoseProfiledMemoryDoesNotFit) {
  ClusterView c = MakeCluster({{"fast-small", 40, 1, 1}, {"slow-big", 80, 1, 1}});
  JobOptions table = Table(c, {Opt(0, 1, 10, /*device_gib=*/35), Opt(1, 1, 2, 35)});
  std::vector<JobView> jobs = {MakeJob(0, &table, 1)};
  jobs[0].memory_factor = 1.3;  // 45.5 GiB really
  auto gavel = MakeGavelPolicy();
  for (int r = 0; r < 3; ++r) {
    Apply(gavel->Schedule(Snap(r * 360.0, c, jobs, 1)), r * 360.0, c, jobs);
    EXPECT_EQ(TypeOf(jobs[0]), 1);
  }
}

TEST(Gavel, NeverRetriesAnOptionThatCrashedOutOfMemory) {
  ClusterView c = MakeCluster({{"fast", 80, 1, 1}, {"slow", 80, 1, 1}});
  JobOptions table = Table(c, {Opt(0, 1, 10), Opt(1, 1, 2)});
  std::vector<JobView> jobs = {MakeJob(0, &table, 1)};
  jobs[0].failed_options = {0};
  auto gavel = MakeGavelPolicy();
  Apply(gavel->Schedule(Snap(0, c, jobs, 2)), 0, c, jobs);
  EXPECT_EQ(TypeOf(jobs[0]), 1);
}

// A gang that needs more GPUs than a type has is offered only where it fits.
TEST(Gavel, ScaleFactorIsTheRequestedCount) {
  ClusterView c = MakeCluster({{"a", 80, 1, 4}, {"b", 80, 2, 8}});
  JobOptions table = Table(c, {Opt(0, 4, 10), Opt(0, 8, 18), Opt(1, 8, 12), Opt(1, 16, 20)});
  std::vector<JobView> jobs = {MakeJob(0, &table, 8)};
  auto gavel = MakeGavelPolicy();
  Apply(gavel->Schedule(Snap(0, c, jobs, 1)), 0, c, jobs);
  ASSERT_TRUE(jobs[0].running);
  EXPECT_EQ(TypeOf(jobs[0]), 1);
  EXPECT_EQ(jobs[0].option(jobs[0].alloc.option).gpus, 8);
}

// Profiling shows the requested 1-GPU layout does not fit anywhere (x1.3): the job runs on the
// smallest count that does (2), as its user would resubmit it, rather than never.
TEST(Gavel, RequestedCountThatFitsNowhereBecomesTheSmallestThatFits) {
  ClusterView c = MakeCluster({{"gpu", 40, 1, 8}});
  JobOptions table = Table(c, {Opt(0, 1, 5, 35), Opt(0, 2, 9, 20), Opt(0, 4, 16, 12)});
  std::vector<JobView> jobs = {MakeJob(0, &table, 1)};
  jobs[0].memory_factor = 1.3;
  auto gavel = MakeGavelPolicy();
  Apply(gavel->Schedule(Snap(0, c, jobs, 1)), 0, c, jobs);
  ASSERT_TRUE(jobs[0].running);
  EXPECT_EQ(jobs[0].option(jobs[0].alloc.option).gpus, 2);
}

// A hand-tuned table may hold two layouts for one (type, count): Gavel runs the faster one that
// fits.
TEST(Gavel, PicksTheFastestUsableLayoutForTheRequestedCount) {
  ClusterView c = MakeCluster({{"gpu", 40, 1, 8}});
  JobOptions table = Table(c, {Opt(0, 4, 16, 39), Opt(0, 4, 20, 60), Opt(0, 4, 12, 20)});
  std::vector<JobView> jobs = {MakeJob(0, &table, 4)};
  auto gavel = MakeGavelPolicy();
  Apply(gavel->Schedule(Snap(0, c, jobs, 1)), 0, c, jobs);
  ASSERT_TRUE(jobs[0].running);
  EXPECT_DOUBLE_EQ(jobs[0].option(jobs[0].alloc.option).plan.tokens_per_s, 16);
}

// Scale: 1,000 active jobs on 4 types x 16 GPUs. The LP (4,000 time fractions) must solve and
// the round must respect every type's capacity.
TEST(Gavel, SolvesTheAllocationLpForAThousandJobs) {
  ClusterView c = testing::GavelScaleCluster();
  const std::vector<JobOptions> tables = testing::GavelScaleTables(c);
  std::vector<JobView> jobs;
  for (int i = 0; i < 1000; ++i) {
    jobs.push_back(MakeJob(i, &tables[static_cast<size_t>(i % 20)], int64_t{1} << (i % 3)));
  }
  auto gavel = MakeGavelPolicy();
  Decisions d = gavel->Schedule(Snap(0, c, jobs, 1));
  Apply(d, 0, c, jobs);
  std::map<int, int64_t> used;
  for (const auto& j : jobs) {
    if (j.running) used[TypeOf(j)] += j.option(j.alloc.option).gpus;
  }
  for (int t = 0; t < 4; ++t) EXPECT_LE(used[t], c.TotalOfType(t));
  EXPECT_FALSE(d.start.empty());
}

}  // namespace
}  // namespace frenzy
