// The frenzy policy (HAS) on tiny hand-checked scenarios.
#include "sched/frenzy_policy.h"

#include <gtest/gtest.h>

namespace frenzy {
namespace {

// Type 0 "fast" (1 node x 4 GPUs), type 1 "slow" (1 node x 4 GPUs).
ClusterView TwoTypes() {
  ClusterView c;
  c.types = {"fast", "slow"};
  c.gpu_memory_bytes = {80LL << 30, 24LL << 30};
  c.gpus_per_node = {4, 4};
  c.nodes = {{0, 4, 4, true}, {1, 4, 4, true}};
  return c;
}

// Options on 1, 2 and 4 GPUs of the given types with per-GPU speeds; scaling is linear.
JobOptions Table(double fast_speed, double slow_speed) {
  JobOptions o;
  o.types = {"fast", "slow"};
  for (int t = 0; t < 2; ++t) {
    double speed = t == 0 ? fast_speed : slow_speed;
    if (speed <= 0) continue;  // does not fit this type (MARP)
    for (int64_t n : {1, 2, 4}) {
      RunOption r;
      r.type = t;
      r.gpus = n;
      r.plan.gpus = n;
      r.plan.tp = 1;
      r.plan.tokens_per_s = speed * static_cast<double>(n);
      r.fits_prediction = true;
      o.options.push_back(r);
    }
  }
  return o;
}

JobView Waiting(int64_t key, const JobOptions& t, double tokens, double submit_s = 0) {
  JobView j;
  j.key = key;
  j.id = "j" + std::to_string(key);
  j.submit_s = submit_s;
  j.options = &t;
  j.total_tokens = tokens;
  return j;
}

Snapshot At(double now, const ClusterView& c, const std::vector<JobView>& jobs) {
  Snapshot s;
  s.now_s = now;
  s.cluster = &c;
  s.jobs = jobs;
  return s;
}

const RunOption& Chosen(const JobOptions& t, const Decisions& d, size_t i) {
  return t.options[static_cast<size_t>(d.start[i].second.option)];
}

// Memory fit as the policy sees it once the runtime has learned a job's memory factor (its real
// peak over MARP's prediction): an option runs only if its plan's device memory times the factor
// fits the GPU (JobView::Layout). Here the job is 10x faster per GPU on the fast type, so without
// a factor it goes there; with factor 1.5 the fast type's 60 GiB plans need 90 GiB > 80 GiB and
// only the slow type's fit (10 GiB x 1.5 = 15 <= 24, except the 1-GPU plan: 20 x 1.5 = 30 > 24).
TEST(FrenzyPolicy, OffersOnlyWhatFitsInMemory) {
  constexpr int64_t kGiB = 1LL << 30;
  JobOptions t = Table(100, 10);
  for (RunOption& o : t.options) {
    const int64_t gib = o.type == 0 ? 60 : (o.gpus == 1 ? 20 : 10);
    o.plan.device_bytes = gib * kGiB;
  }
  auto p = MakeFrenzyPolicy();
  ClusterView c = TwoTypes();
  std::vector<JobView> jobs = {Waiting(0, t, 1e6)};

  // Control: nothing known about the job's memory; the fast type wins.
  Decisions d = p->Schedule(At(0, c, jobs));
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(Chosen(t, d, 0).type, 0);

  // Factor 1.5: the faster option no longer fits, the slower one does.
  jobs[0].memory_factor = 1.5;
  d = p->Schedule(At(0, c, jobs));
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(Chosen(t, d, 0).type, 1);
  EXPECT_LE(static_cast<double>(Chosen(t, d, 0).plan.device_bytes) * 1.5,
            static_cast<double>(c.gpu_memory_bytes[1]));

  // Only the fast type free: it has GPUs but no option that fits; the job waits.
  c.nodes[1].free = 0;
  EXPECT_TRUE(p->Schedule(At(0, c, jobs)).start.empty());

  // One slow GPU free: the 1-GPU option would place (and does without a factor) but does not
  // fit; the 2-GPU one fits but does not place. The job waits.
  c.nodes[0].free = 0;
  c.nodes[1].free = 1;
  EXPECT_TRUE(p->Schedule(At(0, c, jobs)).start.empty());
  jobs[0].memory_factor.reset();
  d = p->Schedule(At(0, c, jobs));
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(Chosen(t, d, 0).type, 1);
  EXPECT_EQ(Chosen(t, d, 0).gpus, 1);
}

TEST(FrenzyPolicy, ShortestPredictedJobFirst) {
  ClusterView c = TwoTypes();
  c.nodes[1].free = 0;
  c.nodes[0].free = 1;  // room for one job
  JobOptions t = Table(100, 50);
  std::vector<JobView> jobs = {Waiting(0, t, 1e7), Waiting(1, t, 1e5, 10)};
  auto p = MakeFrenzyPolicy();
  Decisions d = p->Schedule(At(20, c, jobs));
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(d.start[0].first, 1);  // arrived later, but much shorter
  FrenzyKnobs fifo;
  fifo.shortest_first = false;
  d = MakeFrenzyPolicy(fifo)->Schedule(At(20, c, jobs));
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(d.start[0].first, 0);
}

TEST(FrenzyPolicy, EachJobGetsTheTypeWhereItGainsMost) {
  ClusterView c = TwoTypes();
  c.nodes[0].free = 1;
  c.nodes[1].free = 1;
  JobOptions sensitive = Table(100, 10);  // 10x faster on the fast type
  JobOptions indifferent = Table(100, 80);
  // Same predicted time on the fast type; the indifferent job is first in line.
  std::vector<JobView> jobs = {Waiting(0, indifferent, 1e6), Waiting(1, sensitive, 1e6, 1)};
  auto p = MakeFrenzyPolicy();
  Decisions d = p->Schedule(At(5, c, jobs));
  ASSERT_EQ(d.start.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const JobOptions& t = d.start[i].first == 0 ? indifferent : sensitive;
    EXPECT_EQ(Chosen(t, d, i).type, d.start[i].first == 0 ? 1 : 0) << "job " << d.start[i].first;
  }
}

TEST(FrenzyPolicy, NeverRetriesAnOptionThatCrashed) {
  ClusterView c = TwoTypes();
  JobOptions t = Table(100, 50);
  std::vector<JobView> jobs = {Waiting(0, t, 1e6)};
  for (size_t i = 0; i < t.options.size(); ++i) {
    if (t.options[i].type == 0) jobs[0].failed_options.push_back(static_cast<int>(i));
  }
  Decisions d = MakeFrenzyPolicy()->Schedule(At(0, c, jobs));
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(Chosen(t, d, 0).type, 1);
}

TEST(FrenzyPolicy, LongRunningJobShrinksForAShortOne) {
  ClusterView c = TwoTypes();
  c.nodes[1].free = 0;  // the slow node is busy with something else
  JobOptions fast_only = Table(100, 0);
  std::vector<JobView> jobs = {Waiting(0, fast_only, 1e9), Waiting(1, fast_only, 1e5, 7200)};
  // Job 0 runs on all 4 fast GPUs since t=0 with a long way to go.
  jobs[0].running = true;
  jobs[0].alloc.option = static_cast<int>(fast_only.Find(0, 4) - fast_only.options.data());
  jobs[0].alloc.placement = {{0, 4}};
  jobs[0].run_start_s = 0;
  jobs[0].first_start_s = 0;
  jobs[0].rate_tokens_per_s = 400;
  c.nodes[0].free = 0;
  Decisions d = MakeFrenzyPolicy()->Schedule(At(7200, c, jobs));
  EXPECT_EQ(d.stop, std::vector<int64_t>{0});
  ASSERT_EQ(d.start.size(), 2u);
  EXPECT_EQ(d.start[0].first, 1);  // the short job starts
  EXPECT_EQ(d.start[1].first, 0);  // the long one restarts on 2 GPUs
  EXPECT_EQ(Chosen(fast_only, d, 1).gpus, 2);
  int64_t used = 0;
  for (size_t i = 0; i < d.start.size(); ++i) used += Chosen(fast_only, d, i).gpus;
  EXPECT_LE(used, 4);

  FrenzyKnobs no_preempt;
  no_preempt.preempt = false;
  EXPECT_TRUE(MakeFrenzyPolicy(no_preempt)->Schedule(At(7200, c, jobs)).start.empty());
}

TEST(FrenzyPolicy, RunningJobMovesToFreeFasterGpusWhenNobodyWaits) {
  ClusterView c = TwoTypes();
  JobOptions t = Table(100, 20);
  std::vector<JobView> jobs = {Waiting(0, t, 1e9)};
  jobs[0].running = true;
  jobs[0].alloc.option = static_cast<int>(t.Find(1, 4) - t.options.data());
  jobs[0].alloc.placement = {{1, 4}};
  jobs[0].run_start_s = 0;
  jobs[0].first_start_s = 0;
  jobs[0].rate_tokens_per_s = 80;
  c.nodes[1].free = 0;
  Decisions d = MakeFrenzyPolicy()->Schedule(At(100, c, jobs));
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(Chosen(t, d, 0).type, 0);
  FrenzyKnobs stay;
  stay.move = false;
  EXPECT_TRUE(MakeFrenzyPolicy(stay)->Schedule(At(100, c, jobs)).start.empty());
}

}  // namespace
}  // namespace frenzy

namespace frenzy {
namespace {

// Regression: a job whose smallest count runs at under 80% of its best per-GPU speed (it needs
// recomputation to fit there) and whose larger counts exceed its fair share must still start:
// the smallest count of a type is always a candidate.
TEST(FrenzyPolicy, SmallestCountStartsEvenWhenItScalesPoorly) {
  ClusterView c = TwoTypes();
  JobOptions t = Table(100, 0);
  for (auto& o : t.options) {
    if (o.gpus == 1) o.plan.tokens_per_s = 50;  // half the per-GPU speed of 2 or 4 GPUs
  }
  std::vector<JobView> jobs;
  for (int k = 0; k < 6; ++k) jobs.push_back(Waiting(k, t, 1e6, k));  // share: 4/6 GPU each
  Decisions d = MakeFrenzyPolicy()->Schedule(At(10, c, jobs));
  ASSERT_FALSE(d.start.empty());
  EXPECT_EQ(Chosen(t, d, 0).gpus, 1);
}

}  // namespace
}  // namespace frenzy
