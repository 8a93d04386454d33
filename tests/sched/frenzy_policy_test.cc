// The frenzy policy (HAS v2: the allocation core of sched/has_core.h, then placement) on tiny
// hand-checked scenarios. The greedy's objective is the sum of 1 / T over jobs (T: predicted
// remaining time on the option a job gets), its fallback pass scores a first step by its gain
// over the job's fallback, and the type swap judges a trade by the pair's summed completion
// time; every expectation below is derived by hand from these.
#include "sched/frenzy_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "sched/apply.h"

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

// Options on 1, 2 and 4 GPUs of each type with its per-GPU speed (0: it does not fit there, by
// MARP); scaling is linear.
JobOptions Table(std::vector<std::string> types, const std::vector<double>& speeds) {
  JobOptions o;
  o.types = std::move(types);
  for (size_t t = 0; t < speeds.size(); ++t) {
    if (speeds[t] <= 0) continue;
    for (int64_t n : {1, 2, 4}) {
      RunOption r;
      r.type = static_cast<int>(t);
      r.gpus = n;
      r.plan.gpus = n;
      r.plan.tp = 1;
      r.plan.tokens_per_s = speeds[t] * static_cast<double>(n);
      r.fits_prediction = true;
      o.options.push_back(r);
    }
  }
  return o;
}

// The same on TwoTypes().
JobOptions Table(double fast_speed, double slow_speed) {
  return Table({"fast", "slow"}, {fast_speed, slow_speed});
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
  s.costs.restart.fixed_s = 60;  // every restart below costs 60 s
  return s;
}

const RunOption& Chosen(const JobOptions& t, const Decisions& d, size_t i) {
  return t.options[static_cast<size_t>(d.start[i].second.option)];
}

// What a decision should start: job key, the job's table, GPU type and count.
struct Start {
  int64_t job;
  const JobOptions* table;
  int type;
  int64_t gpus;
};

// Expects the decision to start exactly `want` (in any order).
void ExpectStarts(const Decisions& d, const std::vector<Start>& want) {
  ASSERT_EQ(d.start.size(), want.size());
  for (size_t i = 0; i < d.start.size(); ++i) {
    auto w = std::find_if(want.begin(), want.end(),
                          [&](const Start& s) { return s.job == d.start[i].first; });
    ASSERT_NE(w, want.end()) << "job " << d.start[i].first << " was not to start";
    const RunOption& o = Chosen(*w->table, d, i);
    EXPECT_EQ(o.type, w->type) << "job " << w->job;
    EXPECT_EQ(o.gpus, w->gpus) << "job " << w->job;
  }
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

// A table of options on 1, 2 and 4 GPUs of the fast type with these speeds (tokens/s).
JobOptions FastOnly(double s1, double s2, double s4) {
  JobOptions o = Table(100, 0);
  for (RunOption& r : o.options) r.plan.tokens_per_s = r.gpus == 1 ? s1 : r.gpus == 2 ? s2 : s4;
  return o;
}

// Marks job `j` as running option (type, gpus) on node `node` since t = 0.
void SetRunning(JobView& j, ClusterView& c, int type, int64_t gpus, int node) {
  const RunOption* o = j.options->Find(type, gpus);
  ASSERT_NE(o, nullptr);
  j.running = true;
  j.alloc.option = static_cast<int>(o - j.options->options.data());
  j.alloc.placement = {{node, gpus}};
  j.run_start_s = 0;
  j.first_start_s = 0;
  j.progress_since_s = 0;
  j.rate_tokens_per_s = o->plan.tokens_per_s;
  c.nodes[static_cast<size_t>(node)].free -= gpus;
}

// The scene of the preemption tests: a long job (1e9 tokens) holds the 4 fast GPUs since
// t = 0, the slow node is busy with something else, and a short job (1e5 tokens) arrives at
// 7200 s. (Not copyable: the jobs point at the table.)
struct LongRunsShortArrives {
  ClusterView c = TwoTypes();
  JobOptions t = FastOnly(100, 200, 400);
  std::vector<JobView> jobs;
  LongRunsShortArrives() {
    c.nodes[1].free = 0;
    jobs = {Waiting(0, t, 1e9), Waiting(1, t, 1e5, 7200)};
    SetRunning(jobs[0], c, 0, 4, 0);
  }
  LongRunsShortArrives(const LongRunsShortArrives&) = delete;
};

int64_t GpusOf(const JobOptions& t, const Decisions& d, int64_t key) {
  for (size_t i = 0; i < d.start.size(); ++i) {
    if (d.start[i].first == key) return Chosen(t, d, i).gpus;
  }
  return 0;
}

// One fast GPU free: job 0 needs 1e7 / 100 = 1e5 s, job 1 (later) 1e5 / 100 = 1e3 s. 1 / T is
// higher for job 1, so it starts; in arrival order (shortest_first off) job 0 does.
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
  fifo.core.shortest_first = false;
  d = MakeFrenzyPolicy(fifo)->Schedule(At(20, c, jobs));
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(d.start[0].first, 0);
}

// Two jobs, two types, one free GPU of each. Both run at 100 tokens/s on the fast GPU; on the
// slow one the sensitive job runs at 10, the indifferent one at 80. Same tokens R = 1e6, so the
// greedy sees the same gain per GPU on the fast type (100 / R) and, on a tie, serves the first
// in line (the indifferent job). Summed completion times: as the greedy left them, the
// indifferent job ends at 1e4 s while the sensitive one does 10% of its work on the slow GPU,
// then moves: 1e4 + (1e4 + 0.9 x 1e4) = 2.9e4 s; traded, 1e4 (fast) + 1.25e4 (slow) = 2.25e4 s.
// The type swap trades them: the sensitive job gets the fast GPU, the indifferent one the slow.
TEST(FrenzyPolicy, EachJobGetsTheTypeWhereItGainsMost) {
  ClusterView c = TwoTypes();
  c.nodes[0].free = 1;
  c.nodes[1].free = 1;
  JobOptions sensitive = Table(100, 10);  // 10x faster on the fast type
  JobOptions indifferent = Table(100, 80);
  std::vector<JobView> jobs = {Waiting(0, indifferent, 1e6), Waiting(1, sensitive, 1e6, 1)};
  auto check = [&](const Decisions& d, int indifferent_type) {
    ASSERT_EQ(d.start.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      const bool is_indifferent = d.start[i].first == 0;
      const JobOptions& t = is_indifferent ? indifferent : sensitive;
      EXPECT_EQ(Chosen(t, d, i).type, is_indifferent ? indifferent_type : 1 - indifferent_type)
          << "job " << d.start[i].first;
    }
  };
  check(MakeFrenzyPolicy()->Schedule(At(5, c, jobs)), /*indifferent_type=*/1);
  FrenzyKnobs no_swap;
  no_swap.core.swap_types = false;
  check(MakeFrenzyPolicy(no_swap)->Schedule(At(5, c, jobs)), /*indifferent_type=*/0);
}

// Who gets the fast GPU: a short job nearly as fast on the slow GPU, or a long job ten times
// slower there? One GPU of each type, both jobs waiting. Short: 3.6e5 tokens at 100 tokens/s
// fast (3,600 s), 83.3 slow (4,320 s). Long: 7.2e6 tokens at 100 fast (72,000 s), 10 slow
// (720,000 s). The greedy serves the best gain per GPU first: the short job (1 / 3,600 s) takes
// the fast GPU, the long one the slow GPU. The sum of 1 / T agrees (1 / 3,600 + 1 / 720,000 >
// 1 / 4,320 + 1 / 72,000), but the completion times do not: left so, the short job ends at
// 3,600 s, the long one has done 0.5% on the slow GPU and then takes the fast one, ending at
// 3,600 + 0.995 x 72,000 = 75,240 s (sum 78,840 s); traded, the short job ends at 4,320 s and
// the long one at 72,000 s (sum 76,320 s). The long job gets the fast GPU.
TEST(FrenzyPolicy, TheFastGpuGoesWhereItShortensTheCompletionTimesMost) {
  ClusterView c = TwoTypes();
  c.nodes[0].free = 1;
  c.nodes[1].free = 1;
  JobOptions shorter = Table(100, 250.0 / 3);
  JobOptions longer = Table(100, 10);
  std::vector<JobView> jobs = {Waiting(0, shorter, 3.6e5), Waiting(1, longer, 7.2e6, 1)};
  ExpectStarts(MakeFrenzyPolicy()->Schedule(At(5, c, jobs)),
               {{0, &shorter, 1, 1}, {1, &longer, 0, 1}});
  FrenzyKnobs no_swap;
  no_swap.core.swap_types = false;
  ExpectStarts(MakeFrenzyPolicy(no_swap)->Schedule(At(5, c, jobs)),
               {{0, &shorter, 0, 1}, {1, &longer, 1, 1}});
}

// Trades between different GPU counts: 2 fast and 4 slow GPUs free. The indifferent job (1e5
// tokens; 100 tokens/s per GPU fast, 50 slow) takes the 2 fast GPUs first (gain per GPU
// 100 / 1e5 against the sensitive job's 100 / 1e6), the sensitive one (1e6 tokens; 100 fast, 10
// slow) the 4 slow ones at 40 tokens/s. The indifferent job runs as fast on 4 slow GPUs (200
// tokens/s) as on 2 fast ones; the sensitive one runs 5x faster on the 2 fast GPUs. Summed
// completion times: as left, 500 + (500 + 0.98 x 5,000) = 5,900 s; traded, 500 + 5,000 =
// 5,500 s. They trade, though their counts differ.
TEST(FrenzyPolicy, JobsTradeTypesAcrossGpuCounts) {
  ClusterView c = TwoTypes();
  c.nodes[0].free = 2;
  JobOptions sensitive = Table(100, 10);
  JobOptions indifferent = Table(100, 50);
  std::vector<JobView> jobs = {Waiting(0, indifferent, 1e5), Waiting(1, sensitive, 1e6, 1)};
  ExpectStarts(MakeFrenzyPolicy()->Schedule(At(5, c, jobs)),
               {{0, &indifferent, 1, 4}, {1, &sensitive, 0, 2}});
}

// A contended type is worth to a job what it gains over its fallback. 4 fast and 4 slow GPUs
// free. Job 0 (1e6 tokens) runs at 100 tokens/s per GPU fast, 80 slow; job 1 (2e6 tokens) fits
// only the fast GPUs (100). By whole gain per GPU job 0 goes first (1 / 2,500 s over 4 GPUs
// against 1 / 5,000 s): job 0 on the fast GPUs (2,500 s), job 1 waits and then runs 5,000 s:
// completion times 2,500 + 7,500 = 10,000 s. The slow GPUs are left free, so they are job 0's
// fallback (1 / 3,125 s on 4): the fast GPUs gain it only 1 / 2,500 - 1 / 3,125 = 1 / 12,500 s,
// 1 / 50,000 s per GPU, less than job 1's 1 / 20,000 s per GPU. Job 1 takes the fast GPUs, job
// 0 the slow ones: 5,000 + 3,125 = 8,125 s.
TEST(FrenzyPolicy, AJobWithAFallbackLeavesTheContendedTypeToOneWithout) {
  ClusterView c = TwoTypes();
  JobOptions both = Table(100, 80);
  JobOptions fast_only = Table(100, 0);
  std::vector<JobView> jobs = {Waiting(0, both, 1e6), Waiting(1, fast_only, 2e6, 1)};
  ExpectStarts(MakeFrenzyPolicy()->Schedule(At(5, c, jobs)),
               {{0, &both, 1, 4}, {1, &fast_only, 0, 4}});
  FrenzyKnobs whole_gain;
  whole_gain.core.fallback = false;
  ExpectStarts(MakeFrenzyPolicy(whole_gain)->Schedule(At(5, c, jobs)), {{0, &both, 0, 4}});
}

// A fallback pass never leaves a job without GPUs it could have. Three types of 4 GPUs: fast,
// and two mid types on which job X (1e6 tokens) runs at 50 tokens/s per GPU (100 fast); job Y
// (1.5e6 tokens) fits only the fast GPUs (100). The first pass gives X the fast GPUs (gain per
// GPU 1e-4 against Y's 6.7e-5), so Y's step finds them taken and both mid types stay free. The
// second pass scores X's fast step over its fallback (1 / 5,000 s on 4 mid GPUs): 5e-5 per GPU,
// under Y's; Y takes the fast GPUs. X's fallback is then a tie between the two mid types (its
// gain over the other is 0 on both): it takes 4 mid GPUs by whole gain instead of nothing.
TEST(FrenzyPolicy, AFallbackTieStillStartsTheJob) {
  ClusterView c;
  c.types = {"fast", "mid1", "mid2"};
  c.gpu_memory_bytes = {80LL << 30, 40LL << 30, 40LL << 30};
  c.gpus_per_node = {4, 4, 4};
  c.nodes = {{0, 4, 4, true}, {1, 4, 4, true}, {2, 4, 4, true}};
  JobOptions x = Table(c.types, {100, 50, 50});
  JobOptions y = Table(c.types, {100, 0, 0});
  std::vector<JobView> jobs = {Waiting(0, x, 1e6), Waiting(1, y, 1.5e6, 1)};
  Decisions d = MakeFrenzyPolicy()->Schedule(At(5, c, jobs));
  ASSERT_EQ(d.start.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const bool is_x = d.start[i].first == 0;
    const RunOption& o = Chosen(is_x ? x : y, d, i);
    EXPECT_EQ(o.gpus, 4);
    if (is_x) {
      EXPECT_NE(o.type, 0);
    } else {
      EXPECT_EQ(o.type, 0);
    }
  }
}

// Without preemption a running job keeps at least the GPUs it runs on, trades included. The
// jobs of JobsTradeTypesAcrossGpuCounts, running since t = 0 (tokens x100, so that both are far
// from done at 7,200 s): the indifferent job on the 2 fast GPUs, the sensitive one on 4 slow
// ones. Summed completion times with 60 s restarts: as they are, 42,800 s + about 532,800 s;
// traded, 42,860 + 498,620 s: they trade. Without preemption the sensitive job would drop from 4
// GPUs to 2: no trade, nothing moves.
TEST(FrenzyPolicy, WithoutPreemptionATradeNeverTakesGpusFromARunningJob) {
  ClusterView c = TwoTypes();
  c.nodes[0].free = 2;
  JobOptions sensitive = Table(100, 10);
  JobOptions indifferent = Table(100, 50);
  std::vector<JobView> jobs = {Waiting(0, indifferent, 1e7), Waiting(1, sensitive, 1e8)};
  SetRunning(jobs[0], c, 0, 2, 0);
  SetRunning(jobs[1], c, 1, 4, 1);
  ExpectStarts(MakeFrenzyPolicy()->Schedule(At(7200, c, jobs)),
               {{0, &indifferent, 1, 4}, {1, &sensitive, 0, 2}});
  FrenzyKnobs keep;
  keep.core.preempt = false;
  Decisions d = MakeFrenzyPolicy(keep)->Schedule(At(7200, c, jobs));
  EXPECT_TRUE(d.start.empty());
  EXPECT_TRUE(d.stop.empty());
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

// Linear speed-up, 4 fast GPUs, all held by a long job (1e9 tokens at 400/s: T = 2.5e6 s). A
// short job arrives (1e5 tokens: T = 1e3 s on 1 GPU, 250 s on 4). Its gain per GPU (1e-3) beats
// anything the long job gets back from its GPUs (~1e-7), at every count: shortest remaining time
// first, it takes all 4 and the long job stops. Without preemption the long job keeps them.
TEST(FrenzyPolicy, ShortJobTakesTheGpusOfALongOne) {
  LongRunsShortArrives scene;
  auto& [c, t, jobs] = scene;
  Decisions d = MakeFrenzyPolicy()->Schedule(At(7200, c, jobs));
  EXPECT_EQ(d.stop, std::vector<int64_t>{0});
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(d.start[0].first, 1);
  EXPECT_EQ(Chosen(t, d, 0).gpus, 4);

  FrenzyKnobs no_preempt;
  no_preempt.core.preempt = false;
  d = MakeFrenzyPolicy(no_preempt)->Schedule(At(7200, c, jobs));
  EXPECT_TRUE(d.start.empty());
  EXPECT_TRUE(d.stop.empty());
}

// The same, but the short job does not scale (100 tokens/s on 1, 2 or 4 GPUs): more GPUs gain
// it nothing, so it takes 1. The long job (1e7 tokens) then gets back what is left: 3 GPUs, of
// which its options can use 2 (T = 1e7 / 200 + 60 s restart); it shrinks from 4 to 2 (a move).
TEST(FrenzyPolicy, LongJobShrinksForAShortOneThatDoesNotScale) {
  ClusterView c = TwoTypes();
  c.nodes[1].free = 0;
  JobOptions long_t = FastOnly(100, 200, 400);
  JobOptions short_t = FastOnly(100, 100, 100);
  std::vector<JobView> jobs = {Waiting(0, long_t, 1e7), Waiting(1, short_t, 1e5, 7200)};
  SetRunning(jobs[0], c, 0, 4, 0);
  Decisions d = MakeFrenzyPolicy()->Schedule(At(7200, c, jobs));
  EXPECT_TRUE(d.stop.empty());  // a move, not a stop
  EXPECT_EQ(GpusOf(short_t, d, 1), 1);
  EXPECT_EQ(GpusOf(long_t, d, 0), 2);
}

// Concave speed-up (100, 150, 200 tokens/s on 1, 2, 4 GPUs), two equal jobs, 4 fast GPUs. First
// GPUs: 100 / R each. Second: 50 / R each, which beats a third and fourth for either job
// (50 / R over 2 GPUs = 25 / R per GPU). So 2 + 2 (sum 300 / R), not 4 + 0 (200 / R).
TEST(FrenzyPolicy, ConcaveSpeedUpSplitsTheGpus) {
  ClusterView c = TwoTypes();
  c.nodes[1].free = 0;
  JobOptions t = FastOnly(100, 150, 200);
  std::vector<JobView> jobs = {Waiting(0, t, 1e6), Waiting(1, t, 1e6, 1)};
  Decisions d = MakeFrenzyPolicy()->Schedule(At(5, c, jobs));
  EXPECT_EQ(GpusOf(t, d, 0), 2);
  EXPECT_EQ(GpusOf(t, d, 1), 2);
  FrenzyKnobs rigid;
  rigid.core.elastic = false;  // only the smallest count of a type
  d = MakeFrenzyPolicy(rigid)->Schedule(At(5, c, jobs));
  EXPECT_EQ(GpusOf(t, d, 0), 1);
  EXPECT_EQ(GpusOf(t, d, 1), 1);
}

// One job alone with 4 idle fast GPUs, 100, 150 and 200 tokens/s on 1, 2 and 4. Growing from 1
// to 2 adds 50 tokens/s with one GPU, half the 100 per GPU it has: taken (the floor is 0.5).
// From 2 to 4 adds 50 with two GPUs, 25 per GPU, under half its 75 per GPU: not taken, though
// 1 / T would still rise (the jump from 1 to 4, 100 / 3 per GPU against 50, is not taken either).
// Without the floor it takes all 4.
TEST(FrenzyPolicy, AJobGrowsOnlyWhileEachAddedGpuBringsHalfWhatItsGpusDo) {
  ClusterView c = TwoTypes();
  c.nodes[1].free = 0;
  JobOptions t = FastOnly(100, 150, 200);
  std::vector<JobView> jobs = {Waiting(0, t, 1e6)};
  Decisions d = MakeFrenzyPolicy()->Schedule(At(5, c, jobs));
  EXPECT_EQ(GpusOf(t, d, 0), 2);
  FrenzyKnobs any_gain;
  any_gain.core.growth_floor = 0;
  d = MakeFrenzyPolicy(any_gain)->Schedule(At(5, c, jobs));
  EXPECT_EQ(GpusOf(t, d, 0), 4);
}

// The floor never makes a running job leave what it holds: alone on its 4 fast GPUs (100, 150
// and 200 tokens/s on 1, 2 and 4), its best first step is 1 GPU (100 / R per GPU, against 50 / R
// on its 4), and from there 4 adds only 100 / 3 per GPU, under half of 100. But 4 is what it runs
// on (no restart): it keeps it, with no stop and no start.
TEST(FrenzyPolicy, TheGrowthFloorNeverShrinksWhatAJobHolds) {
  ClusterView c = TwoTypes();
  c.nodes[1].free = 0;
  JobOptions t = FastOnly(100, 150, 200);
  std::vector<JobView> jobs = {Waiting(0, t, 1e9)};
  SetRunning(jobs[0], c, 0, 4, 0);
  Decisions d = MakeFrenzyPolicy()->Schedule(At(36000, c, jobs));
  EXPECT_TRUE(d.stop.empty());
  EXPECT_TRUE(d.start.empty());
}

// A job alone on the cluster takes its final option in one decision (all 4 fast GPUs: linear
// speed-up, 100 per GPU there against 50 on the slow type), and the next decision on the same
// state changes nothing: no start-small relaunch, no churn.
TEST(FrenzyPolicy, FinalOptionAtOnceAndNoChurn) {
  ClusterView c = TwoTypes();
  JobOptions t = Table(100, 50);
  std::vector<JobView> jobs = {Waiting(0, t, 1e9)};
  auto p = MakeFrenzyPolicy();
  Decisions d = p->Schedule(At(0, c, jobs));
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(Chosen(t, d, 0).type, 0);
  EXPECT_EQ(Chosen(t, d, 0).gpus, 4);
  SetRunning(jobs[0], c, 0, 4, 0);
  d = p->Schedule(At(600, c, jobs));
  EXPECT_TRUE(d.start.empty());
  EXPECT_TRUE(d.stop.empty());
}

// A running job on the slow type (20 tokens/s per GPU) with the fast node free: 1e9 tokens take
// 1.25e7 s where it is and 2.5e6 s + 60 s on 4 fast GPUs, so it moves. Without moves it stays.
TEST(FrenzyPolicy, RunningJobMovesToFasterGpus) {
  ClusterView c = TwoTypes();
  JobOptions t = Table(100, 20);
  std::vector<JobView> jobs = {Waiting(0, t, 1e9)};
  SetRunning(jobs[0], c, 1, 4, 1);
  Decisions d = MakeFrenzyPolicy()->Schedule(At(7200, c, jobs));
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_TRUE(d.stop.empty());
  EXPECT_EQ(Chosen(t, d, 0).type, 0);
  FrenzyKnobs stay;
  stay.core.move = false;
  d = MakeFrenzyPolicy(stay)->Schedule(At(7200, c, jobs));
  EXPECT_TRUE(d.start.empty());
  EXPECT_TRUE(d.stop.empty());
}

// The restart is priced: a job 10 s from its end on the slow type does not move to the fast one
// (10 s where it is against 60 s of restart there), though the fast type runs it 5x faster.
TEST(FrenzyPolicy, NoMoveThatTheRestartDoesNotPayFor) {
  ClusterView c = TwoTypes();
  JobOptions t = Table(100, 20);
  std::vector<JobView> jobs = {Waiting(0, t, 1e9)};
  SetRunning(jobs[0], c, 1, 4, 1);
  jobs[0].done_tokens = 1e9 - 880;  // at 7199 s; 800 tokens at 80 tokens/s (10 s) left at 7200 s
  jobs[0].progress_since_s = 7199;
  Decisions d = MakeFrenzyPolicy()->Schedule(At(7200, c, jobs));
  EXPECT_TRUE(d.start.empty());
  EXPECT_TRUE(d.stop.empty());
}

// A job in its restart pause keeps its GPUs: a shorter job that would take them waits.
TEST(FrenzyPolicy, JobInItsRestartPauseKeepsItsGpus) {
  LongRunsShortArrives scene;
  auto& [c, t, jobs] = scene;
  jobs[0].progress_since_s = 7230;  // loading its checkpoint until 7230 s (its run began long ago)
  Decisions d = MakeFrenzyPolicy()->Schedule(At(7200, c, jobs));
  EXPECT_TRUE(d.start.empty());
  EXPECT_TRUE(d.stop.empty());
}

// Residence: a job that (re)started 5 minutes ago keeps its GPUs for 10 restarts' worth (600 s)
// whatever arrives; with residence 0 the short job takes them (as in ShortJobTakesTheGpus...).
TEST(FrenzyPolicy, AJobJustStartedKeepsItsGpusForAWhile) {
  LongRunsShortArrives scene;
  auto& [c, t, jobs] = scene;
  jobs[0].run_start_s = jobs[0].progress_since_s = 6900;
  Decisions d = MakeFrenzyPolicy()->Schedule(At(7200, c, jobs));
  EXPECT_TRUE(d.start.empty());
  EXPECT_TRUE(d.stop.empty());
  FrenzyKnobs eager;
  eager.residence = 0;
  d = MakeFrenzyPolicy(eager)->Schedule(At(7200, c, jobs));
  EXPECT_EQ(d.stop, std::vector<int64_t>{0});
  EXPECT_EQ(GpusOf(t, d, 1), 4);
}

// The runtime learned that the job runs at a tenth of its predicted speed on the fast type
// (10 tokens/s per GPU there against 50 on the slow one): it goes to the slow type.
TEST(FrenzyPolicy, LearnedSpeedCorrectsThePrediction) {
  ClusterView c = TwoTypes();
  JobOptions t = Table(100, 50);
  std::vector<JobView> jobs = {Waiting(0, t, 1e9)};
  Decisions d = MakeFrenzyPolicy()->Schedule(At(0, c, jobs));
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(Chosen(t, d, 0).type, 0);
  jobs[0].speed_factor = {0.1, 0};  // 0: nothing learned on the slow type
  d = MakeFrenzyPolicy()->Schedule(At(0, c, jobs));
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(Chosen(t, d, 0).type, 1);
}

// A running job whose learned memory factor fits none of its options any more (it runs on a
// plan that no longer fits on paper) would never start again if stopped: it keeps its GPUs,
// though a shorter job waits. Without the factor the short job takes them.
TEST(FrenzyPolicy, ARunningJobThatCouldNotRestartAnywhereKeepsItsGpus) {
  constexpr int64_t kGiB = 1LL << 30;
  LongRunsShortArrives scene;
  auto& [c, t, jobs] = scene;
  for (RunOption& o : t.options) o.plan.device_bytes = 70 * kGiB;  // of 80 GiB
  Decisions d = MakeFrenzyPolicy()->Schedule(At(7200, c, jobs));
  EXPECT_EQ(d.stop, std::vector<int64_t>{0});
  jobs[0].memory_factor = 1.2;  // 84 GiB on every option
  d = MakeFrenzyPolicy()->Schedule(At(7200, c, jobs));
  EXPECT_TRUE(d.stop.empty());
  EXPECT_TRUE(d.start.empty());
}

// A node that is down (the runtime cordoned it as slow) keeps its GPUs out of every decision:
// the job on it stays (whether it leaves is the runtime's call), and the short job that would
// take those GPUs from it waits. The decision is valid (ApplyDecisions rejects a start on a
// down node).
TEST(FrenzyPolicy, NothingIsPlacedOnADownNode) {
  LongRunsShortArrives scene;
  auto& [c, t, jobs] = scene;
  c.nodes[0].up = false;
  Decisions d = MakeFrenzyPolicy()->Schedule(At(7200, c, jobs));
  EXPECT_TRUE(d.stop.empty());
  EXPECT_TRUE(d.start.empty());
  const ClusterView before = c;
  ViewsTarget target(c, jobs);
  EXPECT_TRUE(ApplyDecisions(d, before, "frenzy", 7200, target).ok());
}

// Moves are applied as one: two running jobs trade nodes in a decision (each onto GPUs the
// other leaves) and ApplyDecisions accepts it. Job 0 (sensitive: 100 fast, 10 slow) runs on the
// slow node, job 1 (indifferent: 100, 80) on the fast one; the type swap exchanges them.
TEST(FrenzyPolicy, TwoJobsTradeTypesInOneDecision) {
  ClusterView c = TwoTypes();
  JobOptions sensitive = Table(100, 10);
  JobOptions indifferent = Table(100, 80);
  std::vector<JobView> jobs = {Waiting(0, sensitive, 1e9), Waiting(1, indifferent, 1e9)};
  SetRunning(jobs[0], c, 1, 4, 1);
  SetRunning(jobs[1], c, 0, 4, 0);
  Decisions d = MakeFrenzyPolicy()->Schedule(At(7200, c, jobs));
  ASSERT_EQ(d.start.size(), 2u);
  EXPECT_TRUE(d.stop.empty());
  for (size_t i = 0; i < 2; ++i) {
    const JobOptions& t = d.start[i].first == 0 ? sensitive : indifferent;
    EXPECT_EQ(Chosen(t, d, i).type, d.start[i].first == 0 ? 0 : 1);
  }
  const ClusterView before = c;
  ViewsTarget target(c, jobs);
  ASSERT_TRUE(ApplyDecisions(d, before, "frenzy", 7200, target).ok());
  EXPECT_EQ(jobs[0].alloc.placement, (std::vector<std::pair<int, int64_t>>{{0, 4}}));
  EXPECT_EQ(jobs[1].alloc.placement, (std::vector<std::pair<int, int64_t>>{{1, 4}}));
  EXPECT_EQ(c.nodes[0].free, 0);
  EXPECT_EQ(c.nodes[1].free, 0);
}

// A mixed option (RunOption::parts) of 2 fast + 2 slow GPUs at `speed`, after the table's
// single-type options.
void AddMix(JobOptions& t, int64_t fast, int64_t slow, double speed) {
  RunOption r;
  r.type = 1;  // its tightest part
  r.gpus = fast + slow;
  r.parts = {{0, fast}, {1, slow}};
  r.plan.gpus = r.gpus;
  r.plan.tp = 1;
  r.plan.tokens_per_s = speed;
  r.fits_prediction = true;
  t.options.push_back(r);
}

// A job that no single type holds (its table has only a mixed option of 4 fast + 4 slow GPUs)
// starts over both nodes, 4 GPUs on each, and ApplyDecisions accepts the placement; without
// mixed options (frenzy-no-mixed) it waits.
TEST(FrenzyPolicy, AJobThatNoSingleTypeHoldsRunsOverTwoTypes) {
  ClusterView c = TwoTypes();
  JobOptions t;
  t.types = {"fast", "slow"};
  AddMix(t, 4, 4, 800);
  std::vector<JobView> jobs = {Waiting(0, t, 1e7)};
  Decisions d = MakeFrenzyPolicy()->Schedule(At(0, c, jobs));
  ASSERT_EQ(d.start.size(), 1u);
  const Allocation& a = d.start[0].second;
  EXPECT_EQ(a.option, 0);
  std::vector<std::pair<int, int64_t>> want = {{0, 4}, {1, 4}};
  std::vector<std::pair<int, int64_t>> got = a.placement;
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want);
  ViewsTarget target(c, jobs);
  ASSERT_TRUE(ApplyDecisions(d, c, "frenzy", 0, target).ok());
  EXPECT_TRUE(jobs[0].running);
  EXPECT_EQ(c.nodes[0].free, 0);
  EXPECT_EQ(c.nodes[1].free, 0);

  ClusterView c2 = TwoTypes();
  std::vector<JobView> waiting = {Waiting(0, t, 1e7)};
  FrenzyKnobs no_mixed;
  no_mixed.mixed = false;
  d = MakeFrenzyPolicy(no_mixed)->Schedule(At(0, c2, waiting));
  EXPECT_TRUE(d.start.empty());
}

// The growth floor holds between mixes too. Alone, a job takes its best mix per GPU, 1 fast + 1
// slow at 200 tokens/s (100 a GPU), then a larger one only if every added GPU brings at least
// half that: 4 + 4 at 450 tokens/s adds 250 over 6 GPUs (41.7 a GPU < 50), so it stays on 2
// GPUs; at 600 (66.7 a GPU) it takes all 8; without the floor it takes the 8 at 450 too.
TEST(FrenzyPolicy, AJobStepsToALargerMixOnlyWhenEachAddedGpuPaysHalf) {
  auto gpus_at = [](double big_speed, FrenzyKnobs k) {
    ClusterView c = TwoTypes();
    JobOptions t;
    t.types = {"fast", "slow"};
    AddMix(t, 1, 1, 200);
    AddMix(t, 4, 4, big_speed);
    std::vector<JobView> jobs = {Waiting(0, t, 1e7)};
    Decisions d = MakeFrenzyPolicy(k)->Schedule(At(0, c, jobs));
    EXPECT_EQ(d.start.size(), 1u);
    return d.start.empty() ? int64_t{0}
                           : t.options[static_cast<size_t>(d.start[0].second.option)].gpus;
  };
  EXPECT_EQ(gpus_at(450, {}), 2);
  EXPECT_EQ(gpus_at(600, {}), 8);
  FrenzyKnobs no_floor;
  no_floor.core.growth_floor = 0;
  EXPECT_EQ(gpus_at(450, no_floor), 8);
}

// Fragmentation: a long job just started on 2 of the 4 fast GPUs (its residence keeps them). A
// new job fits 4 fast GPUs (400 tokens/s) or a mix of 2 fast + 2 slow (250 tokens/s). Only the
// mix can start now, on the 2 fast GPUs left and 2 slow ones; without mixed options it waits.
TEST(FrenzyPolicy, AMixedOptionStartsAJobThatOneTypeCannotPlaceNow) {
  ClusterView c = TwoTypes();
  JobOptions long_t = FastOnly(100, 200, 400);
  JobOptions t = FastOnly(100, 200, 400);
  t.options.erase(std::remove_if(t.options.begin(), t.options.end(),
                                 [](const RunOption& r) { return r.gpus < 4; }),
                  t.options.end());
  AddMix(t, 2, 2, 250);
  std::vector<JobView> jobs = {Waiting(0, long_t, 1e9), Waiting(1, t, 1e6, 7000)};
  SetRunning(jobs[0], c, 0, 2, 0);
  jobs[0].run_start_s = jobs[0].progress_since_s = 6900;  // residence: 600 s
  Decisions d = MakeFrenzyPolicy()->Schedule(At(7200, c, jobs));
  EXPECT_TRUE(d.stop.empty());
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(d.start[0].first, 1);
  EXPECT_TRUE(t.options[static_cast<size_t>(d.start[0].second.option)].mixed());
  FrenzyKnobs no_mixed;
  no_mixed.mixed = false;
  d = MakeFrenzyPolicy(no_mixed)->Schedule(At(7200, c, jobs));
  EXPECT_TRUE(d.start.empty());
}

// A mixed allocation is checked part by part: 4 GPUs of the fast node for an option that takes
// 2 fast and 2 slow is refused.
TEST(FrenzyPolicy, AMixedPlacementMustMatchItsParts) {
  ClusterView c = TwoTypes();
  JobOptions t;
  t.types = {"fast", "slow"};
  AddMix(t, 2, 2, 250);
  JobView j = Waiting(0, t, 1e6);
  EXPECT_NE(CheckAllocation(j, Allocation{0, {{0, 4}}}, c), "");
  EXPECT_EQ(CheckAllocation(j, Allocation{0, {{0, 2}, {1, 2}}}, c), "");
}

}  // namespace
}  // namespace frenzy
