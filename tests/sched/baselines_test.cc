// fifo-static and tiresias on tiny hand-checked scenarios, and the shared gang placement.
#include "sched/baselines.h"

#include <gtest/gtest.h>

#include "sched/placement.h"

namespace frenzy {
namespace {

// Two GPU types: type 0 ("fast", 2 nodes x 4 GPUs, 80 GB), type 1 ("slow", 1 node x 4, 24 GB).
ClusterView TwoTypes() {
  ClusterView c;
  c.types = {"fast", "slow"};
  c.gpu_memory_bytes = {80LL << 30, 24LL << 30};
  c.gpus_per_node = {4, 4};
  c.nodes = {{0, 4, 4, true}, {0, 4, 4, true}, {1, 4, 4, true}};
  return c;
}

// Options for 1, 2, 4 and 8 GPUs of both types; the slow type is 3x slower.
JobOptions Options() {
  JobOptions o;
  o.types = {"fast", "slow"};
  for (int t = 0; t < 2; ++t) {
    for (int64_t n : {1, 2, 4, 8}) {
      RunOption r;
      r.type = t;
      r.gpus = n;
      r.plan.gpus = n;
      r.plan.tp = 1;
      r.plan.tokens_per_s = (t == 0 ? 3000.0 : 1000.0) * static_cast<double>(n);
      r.plan.device_bytes = 10LL << 30;
      r.fits_prediction = true;
      o.options.push_back(r);
    }
  }
  return o;
}

JobView Queued(int64_t key, const JobOptions& opts, int type, int64_t gpus) {
  JobView j;
  j.key = key;
  j.id = "j" + std::to_string(key);
  j.submit_s = static_cast<double>(key);
  j.options = &opts;
  j.requested_option = static_cast<int>(opts.Find(type, gpus) - opts.options.data());
  j.total_tokens = 1e9;
  return j;
}

void StartOn(JobView& j, ClusterView& c, int node, int64_t gpus, double since, double attained) {
  j.running = true;
  j.alloc.option = j.requested_option;
  j.alloc.placement = {{node, gpus}};
  j.run_start_s = since;
  j.first_start_s = since;
  j.attained_gpu_s = attained;
  c.nodes[static_cast<size_t>(node)].free -= gpus;
}

Snapshot At(double now, const ClusterView& c, const std::vector<JobView>& jobs) {
  Snapshot s;
  s.now_s = now;
  s.cluster = &c;
  s.jobs = jobs;
  return s;
}

TEST(FifoStatic, RunsJobsWhereTheirUsersAskedInArrivalOrder) {
  ClusterView c = TwoTypes();
  JobOptions opts = Options();
  std::vector<JobView> jobs = {Queued(0, opts, 1, 2), Queued(1, opts, 0, 4)};
  auto p = MakeFifoStaticPolicy();
  Decisions d = p->Schedule(At(0, c, jobs));
  ASSERT_EQ(d.start.size(), 2u);
  EXPECT_EQ(d.start[0].first, 0);
  EXPECT_EQ(opts.options[static_cast<size_t>(d.start[0].second.option)].type, 1);  // slow, as asked
  EXPECT_EQ(d.start[0].second.placement, (std::vector<std::pair<int, int64_t>>{{2, 2}}));
  EXPECT_EQ(opts.options[static_cast<size_t>(d.start[1].second.option)].gpus, 4);
  EXPECT_TRUE(d.stop.empty());
}

TEST(FifoStatic, HeadOfTheQueueBlocksEveryoneBehindIt) {
  ClusterView c = TwoTypes();
  JobOptions opts = Options();
  std::vector<JobView> jobs = {Queued(0, opts, 1, 4), Queued(1, opts, 1, 2), Queued(2, opts, 0, 1)};
  StartOn(jobs[0], c, 2, 4, 0, 0);  // the slow node is full
  auto p = MakeFifoStaticPolicy();
  Decisions d = p->Schedule(At(10, c, jobs));
  // Job 1 waits for the slow node; job 2 could run on a fast GPU but must wait behind it.
  EXPECT_TRUE(d.start.empty());
}

TEST(FifoStatic, AfterAnOutOfMemoryCrashTheUserDoublesTheGpus) {
  ClusterView c = TwoTypes();
  JobOptions opts = Options();
  std::vector<JobView> jobs = {Queued(0, opts, 0, 2)};
  jobs[0].failed_options = {jobs[0].requested_option};
  jobs[0].ooms = 1;
  auto p = MakeFifoStaticPolicy();
  Decisions d = p->Schedule(At(0, c, jobs));
  ASSERT_EQ(d.start.size(), 1u);
  const RunOption& o = opts.options[static_cast<size_t>(d.start[0].second.option)];
  EXPECT_EQ(o.type, 0);
  EXPECT_EQ(o.gpus, 4);
}

TEST(Tiresias, NewJobPreemptsOneWithMoreAttainedService) {
  ClusterView c = TwoTypes();
  JobOptions opts = Options();
  // Job 0 holds all 12 GPUs' worth: 8 fast + 4 slow, and has 20 GPU-hours of service.
  std::vector<JobView> jobs = {Queued(0, opts, 0, 8), Queued(1, opts, 0, 4), Queued(2, opts, 0, 4)};
  jobs[0].running = true;
  jobs[0].alloc.option = jobs[0].requested_option;
  jobs[0].alloc.placement = {{0, 4}, {1, 4}};
  jobs[0].run_start_s = 0;
  jobs[0].attained_gpu_s = 20 * 3600;
  c.nodes[0].free = 0;
  c.nodes[1].free = 0;
  StartOn(jobs[1], c, 2, 4, 0, 0);  // job 1 on the slow node, little service
  auto p = MakeTiresiasPolicy();
  Decisions d = p->Schedule(At(100, c, jobs));
  // Job 2 (no service, top queue) displaces job 0 (bottom queue); job 1 keeps running.
  EXPECT_EQ(d.stop, std::vector<int64_t>{0});
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(d.start[0].first, 2);
}

TEST(Tiresias, IsBlindToGpuSpeed) {
  ClusterView c = TwoTypes();
  c.types = {"slow", "fast"};  // first in cluster order is now the slow type
  JobOptions opts = Options();
  std::vector<JobView> jobs = {Queued(0, opts, 0, 2)};
  // Make type 0 the slow one in this job's table.
  for (auto& o : opts.options) o.plan.tokens_per_s = o.type == 0 ? 1.0 : 3.0;
  auto p = MakeTiresiasPolicy();
  Decisions d = p->Schedule(At(0, c, jobs));
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(opts.options[static_cast<size_t>(d.start[0].second.option)].type, 0);
}

TEST(Placement, SmallJobGoesToTheFullestNodeThatHoldsIt) {
  ClusterView c = TwoTypes();
  c.nodes[1].free = 2;
  FreeMap m(c);
  auto p = m.Place(0, 2, 1);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(*p, (std::vector<std::pair<int, int64_t>>{{1, 2}}));
  EXPECT_EQ(m.FreeOfType(0), 4);
}

TEST(Placement, TensorParallelGroupsNeverSpanNodes) {
  ClusterView c = TwoTypes();
  c.nodes[0].free = 3;
  c.nodes[1].free = 3;
  FreeMap m(c);
  // 4 GPUs with TP=2: two nodes with 3 free each give 2 + 2, not 3 + 1.
  auto p = m.Place(0, 4, 2);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(*p, (std::vector<std::pair<int, int64_t>>{{0, 2}, {1, 2}}));
  // 6 GPUs with TP=4 cannot be placed on 1 + 1 free, and nothing is reserved.
  EXPECT_FALSE(m.Place(0, 6, 4).has_value());
  EXPECT_EQ(m.FreeOfType(0), 2);
  m.Release(*p);
  EXPECT_EQ(m.FreeOfType(0), 6);
}

}  // namespace
}  // namespace frenzy
