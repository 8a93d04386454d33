// Dynamic memory actions on hand-made scenarios: one running job (or two), a memory monitor fed
// by hand, and the action expected from the formulas in runtime/actions.cc, computed by hand.
//
// The common scenario: 1e6 tokens, half done at t = 1000 s, running at 1000 tokens/s on 4 x
// "small" (40 GiB) with a plan predicted at 32 GiB. Two reports, 1.0x at 25% and 1.125x at 50%:
// +0.5 per unit of progress, so 1.25x = 40/32 (out of memory) at 75%, i.e. in 0.25 x 1e6 / 1000
// = 250 s, and 1.375x by the end: planned with a factor of 1.375 x 1.03 = 1.41625.
#include "runtime/actions.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "../sched/sched_fixtures.h"
#include "runtime/monitor.h"

namespace frenzy::runtime {
namespace {

using frenzy::testing::kGiB;
using frenzy::testing::MakeCluster;
using frenzy::testing::Opt;
using frenzy::testing::Table;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNow = 1000;
constexpr double kFactor = 1.375 * 1.03;

// A leaner layout on 4 GPUs.
Plan Lean(int64_t device_gib, double tokens_per_s, int64_t tp = 1) {
  Plan p;
  p.gpus = 4;
  p.tp = tp;
  p.recompute = Recompute::kFull;
  p.tokens_per_s = tokens_per_s;
  p.device_bytes = device_gib * kGiB;
  return p;
}

RunOption WithLeaner(RunOption o, std::vector<Plan> leaner) {
  o.leaner = std::move(leaner);
  return o;
}

// Node 0: 4 x small (40 GiB); nodes 1 and 2: 4 x big (80 GiB) each. Everything free.
ClusterView SmallAndBig() { return MakeCluster({{"small", 40, 1, 4}, {"big", 80, 2, 4}}); }

// Half of 1e6 tokens done at kNow, running option 0 (layout `layout`) on node 0's 4 GPUs.
JobView Running(int64_t key, const JobOptions& t, int layout = 0, double rate = 1000) {
  JobView j;
  j.key = key;
  j.id = "j" + std::to_string(key);
  j.options = &t;
  j.total_tokens = 1e6;
  j.done_tokens = 5e5;
  j.progress_since_s = kNow;
  j.rate_tokens_per_s = rate;
  j.running = true;
  j.alloc = Allocation{0, {{0, 4}}};
  j.layout = layout;
  j.run_start_s = 0;
  j.first_start_s = 0;
  return j;
}

MemoryReport Rep(double progress, double peak_gib, double predicted_gib = 32,
                 int64_t capacity_gib = 40) {
  MemoryReport r;
  r.progress = progress;
  r.peak_bytes = static_cast<int64_t>(peak_gib * static_cast<double>(kGiB));
  r.predicted_bytes = static_cast<int64_t>(predicted_gib * static_cast<double>(kGiB));
  r.capacity_bytes = capacity_gib * kGiB;
  return r;
}

// The growing job of the common scenario: 1.0x at 25%, 1.125x at 50% of a 32 GiB prediction.
void Growing(MemoryMonitor& m, int64_t key) {
  m.Track(key, "llama/megatron");
  m.Report(key, Rep(0.25, 32));
  m.Report(key, Rep(0.5, 36));
}

Snapshot At(double now, const ClusterView& c, const std::vector<JobView>& jobs) {
  Snapshot s;
  s.now_s = now;
  s.cluster = &c;
  s.jobs = jobs;
  s.costs.restart.fixed_s = 60;  // the restarts these scenarios price
  return s;
}

bool Has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// ---- TimeToOom ---------------------------------------------------------------------------------

class ActionsTimeToOom : public ::testing::Test {
 protected:
  ActionsTimeToOom() : c_(SmallAndBig()), t_(Table(c_, {Opt(0, 4, 1000, 32)})) { Growing(m_, 1); }
  const JobMemory& mem() const { return *m_.Find(1); }
  ClusterView c_;
  JobOptions t_;
  MemoryMonitor m_;
};

TEST_F(ActionsTimeToOom, FiniteFromProgressTokensAndRate) {
  JobView j = Running(1, t_);
  // p = 0.5, 1.125x now, 1.25x reached at 0.5 + 0.125 / 0.5 = 0.75: 2.5e5 tokens at 1000/s.
  EXPECT_NEAR(TimeToOom(j, mem(), c_, kNow), 250, 1e-6);
  // Half the speed: twice the time.
  j.rate_tokens_per_s = 500;
  EXPECT_NEAR(TimeToOom(j, mem(), c_, kNow), 500, 1e-6);
}

TEST_F(ActionsTimeToOom, ExtrapolatesProgressSinceTheRateBegan) {
  JobView j = Running(1, t_);
  // 100 s later: 6e5 tokens done (p = 0.6, 1.175x); out of memory at 0.75, 1.5e5 tokens away.
  EXPECT_NEAR(TimeToOom(j, mem(), c_, kNow + 100), 150, 1e-6);
}

TEST_F(ActionsTimeToOom, ZeroWhenAlreadyOver) {
  JobView j = Running(1, t_);
  // 300 s later: p = 0.8, projected 1.125 + 0.5 x 0.3 = 1.275x >= 1.25x.
  EXPECT_EQ(TimeToOom(j, mem(), c_, kNow + 300), 0);
  // Exactly at the limit (p = 0.75) counts as over too.
  EXPECT_EQ(TimeToOom(j, mem(), c_, kNow + 250), 0);
}

TEST_F(ActionsTimeToOom, RestartPauseIsAdded) {
  JobView j = Running(1, t_);
  j.progress_since_s = kNow + 100;  // restarting: no progress before kNow + 100
  EXPECT_NEAR(TimeToOom(j, mem(), c_, kNow), 100 + 250, 1e-6);
}

TEST_F(ActionsTimeToOom, PlanSpeedWithoutAMeasuredRate) {
  t_.options[0].plan.tokens_per_s = 2000;
  JobView j = Running(1, t_, 0, /*rate=*/0);
  // No measured rate: no extrapolation (p stays 0.5) and the plan's 2000 tokens/s.
  EXPECT_NEAR(TimeToOom(j, mem(), c_, kNow + 500), 125, 1e-6);
}

TEST(ActionsTimeToOomFlat, InfiniteWhenFlatAndUnder) {
  ClusterView c = SmallAndBig();
  JobOptions t = Table(c, {Opt(0, 4, 1000, 32)});
  MemoryMonitor m;
  m.Report(1, Rep(0.25, 36));
  m.Report(1, Rep(0.5, 36));  // 1.125x, flat
  ASSERT_EQ(m.Find(1)->slope, 0.0);
  EXPECT_EQ(TimeToOom(Running(1, t), *m.Find(1), c, kNow), kInf);
  // Flat but already over the GPU: 0.
  MemoryMonitor over;
  over.Report(1, Rep(0.5, 41));
  EXPECT_EQ(TimeToOom(Running(1, t), *over.Find(1), c, kNow), 0);
}

TEST(ActionsTimeToOomFlat, InfiniteWhenTheCrashIsPastTheEnd) {
  ClusterView c = SmallAndBig();
  JobOptions t = Table(c, {Opt(0, 4, 1000, 32)});
  MemoryMonitor m;
  m.Report(1, Rep(0.25, 32));
  m.Report(1, Rep(0.5, 33));  // 1.03125x, +0.125 per unit: 1.25x only at p = 2.25
  EXPECT_NEAR(m.Find(1)->slope, 0.125, 1e-12);
  EXPECT_EQ(TimeToOom(Running(1, t), *m.Find(1), c, kNow), kInf);
}

TEST(ActionsTimeToOomFlat, UsesTheCurrentLayoutsPrediction) {
  ClusterView c = SmallAndBig();
  JobOptions t = Table(c, {WithLeaner(Opt(0, 4, 1000, 32), {Lean(20, 800)})});
  MemoryMonitor m;
  m.Report(1, Rep(0.25, 20, 20));  // 1.0x of the 20 GiB layout
  m.Report(1, Rep(0.5, 30, 20));   // 1.5x: +2 per unit
  // On the 20 GiB layout the limit is 2x: reached at 0.5 + 0.5 / 2 = 0.75, in 250 s at 1000/s.
  EXPECT_NEAR(TimeToOom(Running(1, t, 1), *m.Find(1), c, kNow), 250, 1e-6);
  // The same ratios on the 32 GiB plan (limit 1.25x) are over already.
  EXPECT_EQ(TimeToOom(Running(1, t, 0), *m.Find(1), c, kNow), 0);
}

// ---- Before a crash: re-plan, move, requeue ----------------------------------------------------

TEST(ActionsPlan, ReplanToTheFastestLeanerLayoutThatFits) {
  ClusterView c = SmallAndBig();
  c.nodes[0].free = 0;  // the job's
  c.nodes[1].free = 0;  // busy with others
  c.nodes[2].free = 0;
  // x 1.41625: 30 GiB -> 42.5 GiB does not fit 40, 24 GiB -> 34.0 GiB does, and so does the
  // slower 20 GiB layout.
  JobOptions t =
      Table(c, {WithLeaner(Opt(0, 4, 1000, 32), {Lean(30, 900), Lean(24, 800), Lean(20, 600)}),
                Opt(1, 4, 1500, 32)});
  MemoryMonitor m;
  Growing(m, 7);
  std::vector<JobView> jobs = {Running(7, t)};
  std::vector<MemoryAction> a = PlanMemoryActions(At(kNow, c, jobs), m, {});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].job, 7);
  EXPECT_EQ(a[0].kind, ActionKind::kReplan);
  EXPECT_EQ(a[0].alloc.option, 0);
  EXPECT_EQ(a[0].alloc.placement, (std::vector<std::pair<int, int64_t>>{{0, 4}}));
  EXPECT_EQ(a[0].layout, 2);
  EXPECT_NEAR(a[0].factor, kFactor, 1e-12);
  EXPECT_NEAR(a[0].time_to_oom_s, 250, 1e-6);
  // A restart, then 5e5 tokens at 800/s.
  EXPECT_NEAR(a[0].expected_left_s, 60 + 625, 1e-6);
  EXPECT_TRUE(Has(a[0].why, "projected out of memory in 250 s")) << a[0].why;
  // 32 GiB x 1.375 = 44 GiB by the end, on 40 GiB GPUs.
  EXPECT_TRUE(Has(a[0].why, "44.0 of 40.0 GiB")) << a[0].why;
  EXPECT_TRUE(Has(a[0].why, "re-plan on its GPUs")) << a[0].why;
  EXPECT_STREQ(ActionKindName(a[0].kind), "replan");
}

TEST(ActionsPlan, MoveWhenItFinishesSoonerThanAReplan) {
  ClusterView c = SmallAndBig();
  c.nodes[0].free = 0;
  c.nodes[2].free = 0;  // node 1's 4 big GPUs are free
  JobOptions t = Table(c, {WithLeaner(Opt(0, 4, 1000, 32), {Lean(24, 800)}), Opt(1, 4, 1500, 32)});
  MemoryMonitor m;
  Growing(m, 7);
  std::vector<JobView> jobs = {Running(7, t)};
  std::vector<MemoryAction> a = PlanMemoryActions(At(kNow, c, jobs), m, {});
  ASSERT_EQ(a.size(), 1u);
  // Re-plan: 60 + 5e5 / 800 = 685 s; move to 4 x big: 60 + 5e5 / 1500 = 393.3 s.
  EXPECT_EQ(a[0].kind, ActionKind::kMove);
  EXPECT_EQ(a[0].alloc.option, 1);
  EXPECT_NEAR(a[0].expected_left_s, 60 + 5e5 / 1500, 1e-6);
}

TEST(ActionsPlan, ReplanWhenItBeatsAMove) {
  ClusterView c = SmallAndBig();
  c.nodes[0].free = 0;  // node 1's and node 2's big GPUs are free
  JobOptions t = Table(c, {WithLeaner(Opt(0, 4, 1000, 32), {Lean(24, 800)}), Opt(1, 4, 500, 32)});
  MemoryMonitor m;
  Growing(m, 7);
  std::vector<JobView> jobs = {Running(7, t)};
  std::vector<MemoryAction> a = PlanMemoryActions(At(kNow, c, jobs), m, {});
  ASSERT_EQ(a.size(), 1u);
  // Re-plan: 60 + 5e5 / 800 = 685 s; move to 4 x big: 60 + 5e5 / 500 = 1060 s.
  EXPECT_EQ(a[0].kind, ActionKind::kReplan);
  EXPECT_EQ(a[0].layout, 1);
  EXPECT_NEAR(a[0].expected_left_s, 685, 1e-6);
}

TEST(ActionsPlan, GrowOntoItsOwnAndFreeGpus) {
  // Two small nodes: the job's (node 0) and a free one.
  ClusterView c = MakeCluster({{"small", 40, 2, 4}});
  c.nodes[0].free = 0;
  // 8 x small at 24 GiB: x 1.41625 = 34.0 GiB fits.
  JobOptions t = Table(c, {WithLeaner(Opt(0, 4, 1000, 32), {Lean(30, 900)}), Opt(0, 8, 1800, 24)});
  MemoryMonitor m;
  Growing(m, 7);
  std::vector<JobView> jobs = {Running(7, t)};
  std::vector<MemoryAction> a = PlanMemoryActions(At(kNow, c, jobs), m, {});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, ActionKind::kMove);
  EXPECT_EQ(a[0].alloc.option, 1);
  // Its own 4 GPUs (released by the move) and the 4 free ones.
  EXPECT_EQ(a[0].alloc.placement, (std::vector<std::pair<int, int64_t>>{{0, 4}, {1, 4}}));
  EXPECT_NEAR(a[0].expected_left_s, 60 + 5e5 / 1800, 1e-6);
}

TEST(ActionsPlan, MoveToRoomierGpusWhenNoLeanerLayoutFits) {
  ClusterView c = SmallAndBig();
  c.nodes[0].free = 0;  // the job's
  c.nodes[2].free = 2;  // half busy
  // Options, sorted: 0 = 4 x small (the job's), 1 = 2 x big, 2 = 4 x big.
  JobOptions t = Table(c, {WithLeaner(Opt(0, 4, 1000, 32), {Lean(30, 900)}), Opt(1, 2, 800, 32),
                           Opt(1, 4, 1500, 32)});
  ASSERT_EQ(t.options[2].gpus, 4);
  MemoryMonitor m;
  Growing(m, 7);
  std::vector<JobView> jobs = {Running(7, t)};
  std::vector<MemoryAction> a = PlanMemoryActions(At(kNow, c, jobs), m, {});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, ActionKind::kMove);
  // 2 x big: 60 + 5e5 / 800 = 685 s; 4 x big: 60 + 5e5 / 1500 = 393.3 s, on node 1.
  EXPECT_EQ(a[0].alloc.option, 2);
  ASSERT_EQ(a[0].alloc.placement.size(), 1u);
  const auto [node, gpus] = a[0].alloc.placement[0];
  EXPECT_EQ(node, 1);
  EXPECT_EQ(gpus, 4);
  EXPECT_EQ(c.nodes[static_cast<size_t>(node)].type, 1);
  EXPECT_GE(c.nodes[static_cast<size_t>(node)].free, gpus);
  EXPECT_EQ(a[0].layout, 0);  // 32 GiB x 1.41625 = 45.3 GiB fits 80
  EXPECT_NEAR(a[0].expected_left_s, 60 + 5e5 / 1500, 1e-6);
  EXPECT_TRUE(Has(a[0].why, "move to 4 x big")) << a[0].why;
  EXPECT_STREQ(ActionKindName(a[0].kind), "move");
}

TEST(ActionsPlan, MoveSkipsFailedOptions) {
  ClusterView c = SmallAndBig();
  c.nodes[0].free = 0;
  c.nodes[2].free = 2;
  JobOptions t = Table(c, {WithLeaner(Opt(0, 4, 1000, 32), {Lean(30, 900)}), Opt(1, 2, 800, 32),
                           Opt(1, 4, 1500, 32)});
  MemoryMonitor m;
  Growing(m, 7);
  std::vector<JobView> jobs = {Running(7, t)};
  jobs[0].failed_options = {2};
  std::vector<MemoryAction> a = PlanMemoryActions(At(kNow, c, jobs), m, {});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, ActionKind::kMove);
  EXPECT_EQ(a[0].alloc.option, 1);
  // Best fit for 2 GPUs: node 2, the fuller one that holds them.
  EXPECT_EQ(a[0].alloc.placement, (std::vector<std::pair<int, int64_t>>{{2, 2}}));
}

TEST(ActionsPlan, RequeueWhenNothingFitsFreeNow) {
  ClusterView c = SmallAndBig();
  c.nodes[0].free = 0;
  c.nodes[1].free = 0;
  c.nodes[2].free = 2;  // 2 big GPUs free, the big option needs 4
  JobOptions t = Table(c, {WithLeaner(Opt(0, 4, 1000, 32), {Lean(30, 900)}), Opt(1, 4, 1500, 32)});
  MemoryMonitor m;
  Growing(m, 7);
  std::vector<JobView> jobs = {Running(7, t)};
  std::vector<MemoryAction> a = PlanMemoryActions(At(kNow, c, jobs), m, {});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, ActionKind::kRequeue);
  EXPECT_EQ(a[0].alloc.option, -1);
  EXPECT_TRUE(a[0].alloc.placement.empty());
  EXPECT_NEAR(a[0].factor, kFactor, 1e-12);
  EXPECT_NEAR(a[0].time_to_oom_s, 250, 1e-6);
  EXPECT_TRUE(Has(a[0].why, "no GPUs with room free now")) << a[0].why;
  EXPECT_STREQ(ActionKindName(a[0].kind), "requeue");
}

TEST(ActionsPlan, ReplanKeepsTensorParallelGroupsInANode) {
  // The job runs on 2 GPUs of each of two small nodes.
  ClusterView c = MakeCluster({{"small", 40, 2, 4}});
  c.nodes[0].free = 2;
  c.nodes[1].free = 2;
  JobOptions t = Table(c, {WithLeaner(Opt(0, 4, 1000, 32), {Lean(24, 800, /*tp=*/4)})});
  MemoryMonitor m;
  Growing(m, 7);
  std::vector<JobView> jobs = {Running(7, t)};
  jobs[0].alloc.placement = {{0, 2}, {1, 2}};
  // TP 4 does not divide the 2 GPUs per node: no re-plan, and no other option.
  std::vector<MemoryAction> a = PlanMemoryActions(At(kNow, c, jobs), m, {});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, ActionKind::kRequeue);
  // TP 2 does.
  t.options[0].leaner[0].tp = 2;
  a = PlanMemoryActions(At(kNow, c, jobs), m, {});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, ActionKind::kReplan);
  EXPECT_EQ(a[0].layout, 1);
  EXPECT_EQ(a[0].alloc.placement, jobs[0].alloc.placement);
}

TEST(ActionsPlan, MostUrgentFirstTakesTheFreeGpus) {
  // Two small nodes, each running one job; one big node free.
  ClusterView c = MakeCluster({{"small", 40, 2, 4}, {"big", 80, 1, 4}});
  c.nodes[0].free = 0;
  c.nodes[1].free = 0;
  JobOptions t = Table(c, {WithLeaner(Opt(0, 4, 1000, 32), {Lean(30, 900)}), Opt(1, 4, 1500, 32)});
  MemoryMonitor m;
  Growing(m, 0);
  Growing(m, 1);
  // Job 0 at 500 tokens/s: out of memory in 500 s; job 1 at 1000/s: in 250 s.
  std::vector<JobView> jobs = {Running(0, t, 0, 500), Running(1, t)};
  jobs[0].alloc.placement = {{1, 4}};
  std::vector<MemoryAction> a = PlanMemoryActions(At(kNow, c, jobs), m, {});
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].job, 1);
  EXPECT_NEAR(a[0].time_to_oom_s, 250, 1e-6);
  EXPECT_EQ(a[0].kind, ActionKind::kMove);
  EXPECT_EQ(a[0].alloc.placement, (std::vector<std::pair<int, int64_t>>{{2, 4}}));
  EXPECT_EQ(a[1].job, 0);
  EXPECT_NEAR(a[1].time_to_oom_s, 500, 1e-6);
  EXPECT_EQ(a[1].kind, ActionKind::kRequeue);  // the big node is taken
}

TEST(ActionsPlan, NoActionWhenTheCrashIsBeyondTheHorizon) {
  ClusterView c = SmallAndBig();
  c.nodes[0].free = 0;
  JobOptions t = Table(c, {WithLeaner(Opt(0, 4, 1000, 32), {Lean(24, 800)}), Opt(1, 4, 1500, 32)});
  MemoryMonitor m;
  Growing(m, 7);
  // At 100 tokens/s the crash is 2.5e5 / 100 = 2500 s away: beyond the 900 s horizon.
  std::vector<JobView> jobs = {Running(7, t, 0, 100)};
  EXPECT_TRUE(PlanMemoryActions(At(kNow, c, jobs), m, {}).empty());
  // With a horizon of an hour it is acted on.
  RuntimeOptions o;
  o.act_horizon_s = 3600;
  std::vector<MemoryAction> a = PlanMemoryActions(At(kNow, c, jobs), m, o);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_NEAR(a[0].time_to_oom_s, 2500, 1e-6);
}

TEST(ActionsPlan, NoActionWhenFlatAndFitting) {
  ClusterView c = SmallAndBig();
  c.nodes[0].free = 0;
  JobOptions t = Table(c, {WithLeaner(Opt(0, 4, 1000, 32), {Lean(24, 800)}), Opt(1, 4, 1500, 32)});
  MemoryMonitor m;
  m.Track(7, "k");
  m.Report(7, Rep(0.25, 36));
  m.Report(7, Rep(0.5, 36));  // 1.125x, flat: 36 GiB of 40
  std::vector<JobView> jobs = {Running(7, t)};
  EXPECT_TRUE(PlanMemoryActions(At(kNow, c, jobs), m, {}).empty());
}

TEST(ActionsPlan, NoActionWithoutReportsOrWhenNotRunning) {
  ClusterView c = SmallAndBig();
  c.nodes[0].free = 0;
  JobOptions t = Table(c, {WithLeaner(Opt(0, 4, 1000, 32), {Lean(24, 800)})});
  MemoryMonitor m;
  m.Track(7, "k");
  m.ReportOom(7, 32 * kGiB, 40 * kGiB);  // a factor, but no report of this run
  std::vector<JobView> jobs = {Running(7, t)};
  EXPECT_TRUE(PlanMemoryActions(At(kNow, c, jobs), m, {}).empty());
  MemoryMonitor growing;
  Growing(growing, 7);
  jobs[0].running = false;
  EXPECT_TRUE(PlanMemoryActions(At(kNow, c, jobs), growing, {}).empty());
}

// ---- The reverse: back to a faster layout ------------------------------------------------------

class ActionsReverse : public ::testing::Test {
 protected:
  // 4 x small: the plan (32 GiB, 1000 tokens/s) and a leaner layout (24 GiB, 500 tokens/s).
  ActionsReverse()
      : c_(SmallAndBig()), t_(Table(c_, {WithLeaner(Opt(0, 4, 1000, 32), {Lean(24, 500)})})) {
    c_.nodes[0].free = 0;
  }
  // A job on the leaner layout that uses `ratio` x its prediction (24 GiB), flat.
  void Observe(double ratio) {
    m_.Track(7, "k");
    m_.Report(7, Rep(0.5, 24 * ratio, 24));
  }
  ClusterView c_;
  JobOptions t_;
  MemoryMonitor m_;
};

TEST_F(ActionsReverse, BackToTheFasterLayoutWhenItFitsAndSaves) {
  Observe(1.0);  // x 1.03: 32 GiB -> 33.0 GiB fits 40
  std::vector<JobView> jobs = {Running(7, t_, 1)};
  std::vector<MemoryAction> a = PlanMemoryActions(At(kNow, c_, jobs), m_, {});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, ActionKind::kReplan);
  EXPECT_EQ(a[0].layout, 0);
  EXPECT_EQ(a[0].alloc.option, 0);
  EXPECT_EQ(a[0].alloc.placement, (std::vector<std::pair<int, int64_t>>{{0, 4}}));
  EXPECT_NEAR(a[0].factor, 1.03, 1e-12);
  EXPECT_EQ(a[0].time_to_oom_s, kInf);
  // 5e5 tokens: 1000 s at 500/s, 500 s at 1000/s: 500 s saved >= 3 x 60.
  EXPECT_NEAR(a[0].expected_left_s, 60 + 500, 1e-6);
  EXPECT_TRUE(Has(a[0].why, "saving 500 s")) << a[0].why;
  EXPECT_TRUE(Has(a[0].why, "uses 1.00x the prediction")) << a[0].why;
}

TEST_F(ActionsReverse, NotWhenTheSavingIsUnderReverseGainRestarts) {
  Observe(1.0);
  std::vector<JobView> jobs = {Running(7, t_, 1)};
  // 500 s saved, under 10 x 60.
  RuntimeOptions o;
  o.reverse_gain = 10;
  EXPECT_TRUE(PlanMemoryActions(At(kNow, c_, jobs), m_, o).empty());
  // Nearly done: 1.5e5 tokens left, 300 s - 150 s = 150 s saved, under 3 x 60.
  jobs[0].done_tokens = 8.5e5;
  EXPECT_TRUE(PlanMemoryActions(At(kNow, c_, jobs), m_, {}).empty());
  // 2e5 tokens left: 400 s - 200 s = 200 s saved, over 3 x 60.
  jobs[0].done_tokens = 8e5;
  EXPECT_EQ(PlanMemoryActions(At(kNow, c_, jobs), m_, {}).size(), 1u);
}

TEST_F(ActionsReverse, NotWhenTheFasterLayoutStillDoesNotFit) {
  Observe(1.25);  // x 1.03 = 1.2875: 32 GiB -> 41.2 GiB > 40
  std::vector<JobView> jobs = {Running(7, t_, 1)};
  EXPECT_TRUE(PlanMemoryActions(At(kNow, c_, jobs), m_, {}).empty());
  // Even when any saving would do, the layout it runs is not "faster" than itself.
  RuntimeOptions o;
  o.reverse_gain = 0;
  EXPECT_TRUE(PlanMemoryActions(At(kNow, c_, jobs), m_, o).empty());
}

TEST_F(ActionsReverse, NotWhenTheFasterLayoutHasAnotherTp) {
  Observe(1.0);
  t_.options[0].plan.tp = 2;
  std::vector<JobView> jobs = {Running(7, t_, 1)};
  EXPECT_TRUE(PlanMemoryActions(At(kNow, c_, jobs), m_, {}).empty());
}

// ---- After a crash -----------------------------------------------------------------------------

class ActionsRecover : public ::testing::Test {
 protected:
  // Options, sorted: 0 = 4 x small (32 GiB, leaner 24 GiB), 1 = 4 x big (32 GiB).
  ActionsRecover()
      : c_(SmallAndBig()),
        t_(Table(c_, {WithLeaner(Opt(0, 4, 1000, 32), {Lean(24, 800)}), Opt(1, 4, 1500, 32)})) {}
  JobView Crashed(int ooms = 0) {
    JobView j = Running(7, t_);
    j.running = false;
    j.ooms = ooms;
    return j;
  }
  ClusterView c_;
  JobOptions t_;
  MemoryMonitor m_;
};

TEST_F(ActionsRecover, FactorExcludesTheCrashedLayout) {
  m_.Track(7, "k");
  m_.ReportOom(7, 32 * kGiB, 40 * kGiB);  // at least 1.25x
  JobView j = Crashed();
  EXPECT_EQ(j.Layout(0, c_), 0);  // before: the plan
  OomRecovery r = RecoverFromOom(j, m_, c_, {});
  EXPECT_FALSE(r.give_up);
  EXPECT_NEAR(r.factor, 1.25 * 1.03, 1e-12);
  EXPECT_TRUE(Has(r.message, "(1 of 5 allowed)")) << r.message;
  j.memory_factor = r.factor;
  // 32 GiB x 1.2875 = 41.2 GiB > 40: the crashed plan is skipped; 24 GiB -> 30.9 GiB fits.
  EXPECT_EQ(j.Layout(0, c_), 1);
  EXPECT_TRUE(j.Runnable(0, c_));
  EXPECT_EQ(j.Layout(1, c_), 0);  // 41.2 GiB fits the big GPUs
}

TEST_F(ActionsRecover, GivesUpWhenNoLayoutFitsAnywhere) {
  ClusterView small_only = MakeCluster({{"small", 40, 1, 4}});
  // A layout on 8 GPUs would fit (16 GiB x 1.717 = 27.5 GiB) but the cluster has 4.
  JobOptions t =
      Table(small_only, {WithLeaner(Opt(0, 4, 1000, 32), {Lean(24, 800)}), Opt(0, 8, 1800, 16)});
  m_.Track(7, "k");
  m_.ReportOom(7, 24 * kGiB, 40 * kGiB);  // the leaner layout crashed: at least 40/24 x
  JobView j = Running(7, t);
  j.running = false;
  OomRecovery r = RecoverFromOom(j, m_, small_only, {});
  EXPECT_TRUE(r.give_up);
  EXPECT_NEAR(r.factor, 40.0 / 24.0 * 1.03, 1e-12);
  // The leanest layout: 24 GiB x 40/24 x 1.03 = 41.2 GiB; the largest GPU 40 GiB.
  EXPECT_TRUE(Has(r.message, "needs 41.2 GiB per GPU of small (40.0 GiB)")) << r.message;
  EXPECT_TRUE(Has(r.message, "after 1 out-of-memory crash(es)")) << r.message;
}

TEST_F(ActionsRecover, FailedOptionsDoNotCount) {
  m_.ReportOom(7, 24 * kGiB, 40 * kGiB);  // small no longer fits; big does (32 x 1.717 = 55)
  JobView j = Crashed();
  EXPECT_FALSE(RecoverFromOom(j, m_, c_, {}).give_up);
  j.failed_options = {1};
  OomRecovery r = RecoverFromOom(j, m_, c_, {});
  EXPECT_TRUE(r.give_up);
  // Only option 0 counts: its leanest layout needs 41.2 GiB of the small GPUs' 40 (the big
  // GPUs' 80 do not matter: their layout crashed).
  EXPECT_TRUE(Has(r.message, "needs 41.2 GiB per GPU of small (40.0 GiB)")) << r.message;
}

// A pipeline over both types: 4 small GPUs (its tightest part, 20 GiB of 40 predicted) and 4 big.
RunOption MixedSmallBig(int64_t small_gpus) {
  RunOption o = Opt(0, small_gpus + 4, 900, 20);
  o.parts = {{0, small_gpus}, {1, 4}};
  return o;
}

TEST_F(ActionsRecover, AMixedOptionThatHoldsTheJobKeepsIt) {
  ClusterView c = SmallAndBig();
  JobOptions t = Table(c, {Opt(0, 4, 1000, 32)});
  t.options.push_back(MixedSmallBig(4));
  m_.ReportOom(7, 32 * kGiB, 40 * kGiB);  // at least 1.25x: 32 GiB x 1.2875 = 41.2 > 40
  JobView j = Running(7, t);
  j.running = false;
  OomRecovery r = RecoverFromOom(j, m_, c, {});
  // The pipeline's tightest part: 20 GiB x 1.2875 = 25.75 GiB of the small GPUs' 40.
  EXPECT_FALSE(r.give_up) << r.message;
  j.memory_factor = r.factor;
  EXPECT_TRUE(j.Runnable(1, c));
  EXPECT_FALSE(j.Runnable(0, c));

  // A mixed option that needs more small GPUs than the cluster has does not count.
  JobOptions too_big = Table(c, {Opt(0, 4, 1000, 32)});
  too_big.options.push_back(MixedSmallBig(8));
  JobView k = Running(7, too_big);
  k.running = false;
  r = RecoverFromOom(k, m_, c, {});
  EXPECT_TRUE(r.give_up);
  EXPECT_TRUE(Has(r.message, "needs 41.2 GiB per GPU of small (40.0 GiB)")) << r.message;
}

TEST_F(ActionsRecover, GivesUpAtMaxOoms) {
  m_.ReportOom(7, 32 * kGiB, 40 * kGiB);
  OomRecovery r = RecoverFromOom(Crashed(3), m_, c_, {});  // the 4th crash of 5 allowed
  EXPECT_FALSE(r.give_up);
  EXPECT_TRUE(Has(r.message, "(4 of 5 allowed)")) << r.message;
  r = RecoverFromOom(Crashed(4), m_, c_, {});  // the 5th: given up though layouts fit
  EXPECT_TRUE(r.give_up);
  EXPECT_TRUE(Has(r.message, "after 5 out-of-memory crashes")) << r.message;
  // The leanest layout of all: 24 GiB x 1.2875 = 30.9 GiB.
  EXPECT_TRUE(Has(r.message, "would need 30.9 GiB per GPU")) << r.message;
  RuntimeOptions o;
  o.max_ooms = 2;
  EXPECT_TRUE(RecoverFromOom(Crashed(1), m_, c_, o).give_up);
  EXPECT_FALSE(RecoverFromOom(Crashed(0), m_, c_, o).give_up);
}

}  // namespace
}  // namespace frenzy::runtime
