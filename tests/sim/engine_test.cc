// The simulator's engine: determinism, exact completion times, restart and crash accounting,
// invalid decisions reported rather than applied.
#include "sim/engine.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "model/zoo.h"
#include "sched/placement.h"
#include "sched/policy.h"
#include "sim_fixtures.h"

namespace frenzy {
namespace {

using testing::Lab;
using testing::Parse;

// Runs every queued job on its fastest option of `type` with `gpus` GPUs, first come first
// served, event-driven; stops job `stop_key` at `stop_at_s` once.
class ScriptedPolicy : public Policy {
 public:
  ScriptedPolicy(int type, int64_t gpus) : type_(type), gpus_(gpus) {}
  std::string_view name() const override { return "scripted"; }
  OptionKind options_kind() const override { return kind; }
  double round_s() const override { return round; }
  Decisions Schedule(const Snapshot& s) override {
    ++calls;
    Decisions d;
    FreeMap free(*s.cluster);
    for (const JobView& j : s.jobs) {
      if (j.running && j.key == stop_key && s.now_s >= stop_at_s && !stopped) {
        d.stop.push_back(j.key);
        free.Release(j.alloc.placement);
        stopped = true;
        continue;
      }
      if (j.running) continue;
      const RunOption* o = j.options->Find(type_, gpus_);
      if (o == nullptr) continue;
      int idx = static_cast<int>(o - j.options->options.data());
      if (j.Failed(idx)) {
        // After a crash: the next larger count of the type.
        for (const auto* alt : j.options->OfType(type_)) {
          int a = static_cast<int>(alt - j.options->options.data());
          if (alt->gpus > gpus_ && !j.Failed(a)) {
            o = alt;
            idx = a;
            break;
          }
        }
        if (j.Failed(idx)) continue;
      }
      auto p = free.Place(o->type, o->gpus, o->plan.tp);
      if (!p) break;
      d.start.push_back({j.key, Allocation{idx, *p}});
    }
    if (corrupt && !d.start.empty()) d.start.front().second.placement.front().second += 1000;
    return d;
  }
  OptionKind kind = OptionKind::kMarp;
  double round = 0;
  int64_t stop_key = -1;
  double stop_at_s = 0;
  bool stopped = false;
  bool corrupt = false;
  int calls = 0;

 private:
  int type_;
  int64_t gpus_;
};

SimOptions NoError() {
  SimOptions o;
  o.memory_error_pct = 0;
  o.perf_error_pct = 0;
  o.restart.fixed_s = 100;
  return o;
}

TEST(SimEngine, OneJobFinishesAtTokensOverSpeed) {
  Workload w = Parse("job_id,submit_s,model,tokens,global_batch,seq_len\nj1,50,gpt2,1e9,64,1024\n");
  OptionCache cache(Lab(), GpuCatalog::Default(), 0.10);
  ScriptedPolicy p(0, 1);  // one A100-80GB
  auto r = Simulate(w, Lab(), GpuCatalog::Default(), p, NoError(), cache);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->jobs.size(), 1u);
  const JobRecord& j = r->jobs[0];
  ASSERT_EQ(j.outcome, JobOutcome::kFinished);
  JobSpec spec;
  spec.model = *ResolveModel("gpt2");
  spec.tokens = 1e9;
  spec.global_batch = 64;
  spec.seq_len = 1024;
  auto opts = cache.Get("gpt2", spec, OptionKind::kMarp);
  ASSERT_TRUE(opts.ok());
  double speed = (*opts)->Find(0, 1)->plan.tokens_per_s;
  EXPECT_DOUBLE_EQ(j.first_start_s, 50);
  EXPECT_NEAR(j.finish_s, 50 + 1e9 / speed, 1e-6 * (1e9 / speed));
  EXPECT_EQ(r->metrics.finished, 1);
  EXPECT_EQ(r->metrics.oom_events, 0);
  EXPECT_NEAR(r->metrics.gpu_hours, (j.finish_s - 50) / 3600, 1e-9);
  EXPECT_NEAR(r->metrics.gpu_util, 1.0 / static_cast<double>(Lab().total_gpus()), 1e-9);
}

// With a throughput error, the job runs at its prediction times its speed truth on the type
// (the record's speed_factor), and a world drawn with 0% error runs it at the prediction: the
// two finishing times are in the ratio of that factor.
TEST(SimEngine, AJobRunsAtItsTrueSpeedWhenThePredictionErrs) {
  Workload w = Parse("job_id,submit_s,model,tokens,global_batch,seq_len\nj1,50,gpt2,1e9,64,1024\n");
  OptionCache cache(Lab(), GpuCatalog::Default(), 0.10);
  ScriptedPolicy p(0, 1);
  SimOptions o = NoError();
  auto exact = Simulate(w, Lab(), GpuCatalog::Default(), p, o, cache);
  o.perf_error_pct = 30;
  o.seed = 3;
  auto off = Simulate(w, Lab(), GpuCatalog::Default(), p, o, cache);
  ASSERT_TRUE(exact.ok() && off.ok());
  const JobRecord& a = exact->jobs[0];
  const JobRecord& b = off->jobs[0];
  ASSERT_EQ(b.outcome, JobOutcome::kFinished);
  EXPECT_DOUBLE_EQ(a.speed_factor, 1.0);
  EXPECT_NE(b.speed_factor, 1.0);
  EXPECT_NEAR((b.finish_s - 50) * b.speed_factor, a.finish_s - 50, 1e-6 * (a.finish_s - 50));
}

TEST(SimEngine, SameSeedSameRunOtherSeedOtherMemoryTruth) {
  std::string csv = "job_id,submit_s,model,tokens,global_batch,seq_len\n";
  for (int i = 0; i < 12; ++i) {
    csv += "j" + std::to_string(i) + "," + std::to_string(i * 400) + ",opt-1.3b,2e9,64,2048\n";
  }
  Workload w = Parse(csv);
  OptionCache cache(Lab(), GpuCatalog::Default(), 0.10);
  SimOptions o;  // default: MARP's measured error distribution
  auto run = [&](uint64_t seed) {
    ScriptedPolicy p(0, 2);
    o.seed = seed;
    return *Simulate(w, Lab(), GpuCatalog::Default(), p, o, cache);
  };
  SimResult a = run(7), b = run(7), c = run(8);
  ASSERT_EQ(a.jobs.size(), 12u);
  bool factors_differ = false;
  for (size_t i = 0; i < a.jobs.size(); ++i) {
    EXPECT_EQ(a.jobs[i].finish_s, b.jobs[i].finish_s);
    EXPECT_EQ(a.jobs[i].memory_factor, b.jobs[i].memory_factor);
    factors_differ |= a.jobs[i].memory_factor != c.jobs[i].memory_factor;
    // Real peak = predicted / (1 + measured error): errors lie in [-8.1%, +2.5%].
    EXPECT_GE(a.jobs[i].memory_factor, 1 / 1.026);
    EXPECT_LE(a.jobs[i].memory_factor, 1 / 0.918);
  }
  EXPECT_TRUE(factors_differ);
  EXPECT_EQ(a.metrics.avg_jct_s, b.metrics.avg_jct_s);
}

// A withheld job is drawn into the world but never submitted: every other job keeps the memory
// truth it had with it (job j3 comes after it in submission order), while deleting the job from
// the workload hands j3 the draw that was j1's. The withheld job is in no result, and an id the
// workload lacks is an error that names it.
TEST(SimEngine, AWithheldJobKeepsTheOthersTruthsAndIsInNoResult) {
  std::string csv = "job_id,submit_s,model,tokens,global_batch,seq_len\n";
  for (int i = 0; i < 4; ++i) {
    csv += "j" + std::to_string(i) + "," + std::to_string(i * 400) + ",opt-1.3b,2e9,64,2048\n";
  }
  std::string without = "job_id,submit_s,model,tokens,global_batch,seq_len\n";
  for (int i : {0, 2, 3}) {
    without += "j" + std::to_string(i) + "," + std::to_string(i * 400) + ",opt-1.3b,2e9,64,2048\n";
  }
  OptionCache cache(Lab(), GpuCatalog::Default(), 0.10);
  SimOptions o;  // MARP's measured error distribution: every job draws its own factor
  o.seed = 7;
  auto run = [&](const std::string& text, const SimOptions& opt) {
    ScriptedPolicy p(0, 2);
    return Simulate(Parse(text), Lab(), GpuCatalog::Default(), p, opt, cache);
  };
  auto all = run(csv, o);
  SimOptions w = o;
  w.withheld = {"j1"};
  auto held = run(csv, w);
  auto deleted = run(without, o);
  ASSERT_TRUE(all.ok() && held.ok() && deleted.ok());
  ASSERT_EQ(all->jobs.size(), 4u);
  ASSERT_EQ(held->jobs.size(), 3u);
  ASSERT_EQ(deleted->jobs.size(), 3u);
  EXPECT_EQ(held->jobs[0].id, "j0");
  EXPECT_EQ(held->jobs[1].id, "j2");
  EXPECT_EQ(held->jobs[2].id, "j3");
  for (size_t i : {0u, 2u, 3u}) {
    const size_t k = i == 0 ? 0 : i - 1;
    EXPECT_EQ(held->jobs[k].memory_factor, all->jobs[i].memory_factor) << i;
    EXPECT_EQ(held->jobs[k].outcome, JobOutcome::kFinished) << i;
  }
  // Deleted instead, j2 draws what j1 drew (the draws go in submission order). The seed was
  // chosen so that j1's and j2's factors differ.
  ASSERT_NE(all->jobs[1].memory_factor, all->jobs[2].memory_factor);
  EXPECT_EQ(deleted->jobs[1].memory_factor, all->jobs[1].memory_factor);
  EXPECT_EQ(held->metrics.finished, 3);
  // Withholding the first arrival: the makespan runs from the first job submitted (j1, 400 s).
  w.withheld = {"j0"};
  auto late = run(csv, w);
  ASSERT_TRUE(late.ok());
  double last = 0;
  for (const JobRecord& j : late->jobs) last = std::max(last, j.finish_s);
  EXPECT_DOUBLE_EQ(late->metrics.makespan_s, last - 400);
  w.withheld = {"j9"};
  auto bad = run(csv, w);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("j9"), std::string::npos) << bad.status().ToString();
}

// Stopped by the policy at 1,000 s, restarted at 2,000 s: the job pays one restart and loses no
// progress. With every run kept (runs.csv) there are two: the first stopped at 1,000 s with its
// progress kept, the second from 2,000 s, progressing after its 100 s pause, to the end; their
// kept tokens add up to the job's.
TEST(SimEngine, PreemptedJobPaysRestartAndLosesNothing) {
  Workload w = Parse("job_id,submit_s,model,tokens,global_batch,seq_len\nj1,0,gpt2,1e9,64,1024\n");
  OptionCache cache(Lab(), GpuCatalog::Default(), 0.10);
  ScriptedPolicy p(0, 1);
  p.round = 1000;
  p.stop_key = 0;
  p.stop_at_s = 1000;  // stopped at the second round, restarted at the third
  SimOptions o = NoError();
  o.record_runs = true;
  auto r = Simulate(w, Lab(), GpuCatalog::Default(), p, o, cache);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ScriptedPolicy plain(0, 1);
  auto base = Simulate(w, Lab(), GpuCatalog::Default(), plain, NoError(), cache);
  const JobRecord& j = r->jobs[0];
  ASSERT_EQ(j.outcome, JobOutcome::kFinished);
  EXPECT_EQ(j.restarts, 1);
  // Down from 1000 s to 2000 s, then 100 s of restart: 1,100 s later than without the stop.
  EXPECT_NEAR(j.finish_s, base->jobs[0].finish_s + 1100, 1e-6);
  EXPECT_NEAR(j.wasted_gpu_s, 100, 1e-6);

  ASSERT_EQ(r->runs.size(), 2u);
  const RunRecord& a = r->runs[0];
  const RunRecord& b = r->runs[1];
  EXPECT_EQ(a.job, "j1");
  EXPECT_EQ(a.end, "stop");
  EXPECT_DOUBLE_EQ(a.start_s, 0);
  EXPECT_DOUBLE_EQ(a.progress_from_s, 0);  // a first start pays no restart
  EXPECT_DOUBLE_EQ(a.end_s, 1000);
  EXPECT_NEAR(a.tokens, 1000 * a.tokens_per_s, 1e-3);  // a graceful stop keeps everything
  EXPECT_EQ(b.end, "finish");
  EXPECT_DOUBLE_EQ(b.start_s, 2000);
  EXPECT_DOUBLE_EQ(b.progress_from_s, 2100);
  EXPECT_NEAR(b.end_s, j.finish_s, 1e-9);
  EXPECT_NEAR(a.tokens + b.tokens, 1e9, 1);
  EXPECT_EQ(a.gpu, j.gpu);
  EXPECT_EQ(a.gpus, 1);
  // Not kept unless asked.
  EXPECT_TRUE(base->runs.empty());
}

TEST(SimEngine, OutOfMemoryCrashIsCountedAndNotRetriedUnchanged) {
  // gpt2-xl with plain data parallelism on one 24 GB RTX-3090 (hand table): predicted not to
  // fit, so with no prediction error it crashes; the scripted user then doubles the GPUs.
  Workload w =
      Parse("job_id,submit_s,model,tokens,global_batch,seq_len\nj1,0,llama-2-7b,1e8,64,2048\n");
  OptionCache cache(Lab(), GpuCatalog::Default(), 0.10);
  ScriptedPolicy p(2, 1);  // RTX-3090 x 1
  p.kind = OptionKind::kHand;
  SimOptions o = NoError();
  o.record_runs = true;
  auto r = Simulate(w, Lab(), GpuCatalog::Default(), p, o, cache);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const JobRecord& j = r->jobs[0];
  EXPECT_GE(j.ooms, 1);
  ASSERT_FALSE(r->runs.empty());
  EXPECT_EQ(r->runs[0].end, "oom");
  EXPECT_DOUBLE_EQ(r->runs[0].end_s - r->runs[0].start_s, 30);  // the crash, 30 s in
  EXPECT_DOUBLE_EQ(r->runs[0].tokens, 0);  // no checkpoint reached: nothing kept
  EXPECT_EQ(r->metrics.oom_events, j.ooms);
  EXPECT_GT(r->metrics.wasted_gpu_hours, 0);
  // Each crash wastes the run up to the crash (30 s in by default, first run has no pause).
  EXPECT_GE(j.wasted_gpu_s, 30.0);
}

TEST(SimEngine, InvalidDecisionIsAnErrorNotACrash) {
  Workload w = Parse("job_id,submit_s,model,tokens,global_batch,seq_len\nj1,0,gpt2,1e9,64,1024\n");
  OptionCache cache(Lab(), GpuCatalog::Default(), 0.10);
  ScriptedPolicy p(0, 1);
  p.corrupt = true;
  auto r = Simulate(w, Lab(), GpuCatalog::Default(), p, NoError(), cache);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_NE(r.status().message().find("scripted"), std::string::npos);
}

TEST(SimEngine, UnknownModelNamesTheJob) {
  Workload w =
      Parse("job_id,submit_s,model,tokens,global_batch,seq_len\nbad1,0,nope-7b,1e9,64,1024\n");
  OptionCache cache(Lab(), GpuCatalog::Default(), 0.10);
  ScriptedPolicy p(0, 1);
  auto r = Simulate(w, Lab(), GpuCatalog::Default(), p, NoError(), cache);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("bad1"), std::string::npos);
}

TEST(SimEngine, NodeFailureLosesProgressSinceCheckpoint) {
  Workload w = Parse("job_id,submit_s,model,tokens,global_batch,seq_len\nj1,0,gpt2,3e10,64,1024\n");
  OptionCache cache(Lab(), GpuCatalog::Default(), 0.10);
  ScriptedPolicy p(0, 1);
  SimOptions o = NoError();
  o.node_mtbf_s = 20 * 3600;
  o.node_repair_s = 600;
  o.seed = 3;
  auto r = Simulate(w, Lab(), GpuCatalog::Default(), p, o, cache);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const JobRecord& j = r->jobs[0];
  ASSERT_EQ(j.outcome, JobOutcome::kFinished);
  EXPECT_GT(r->metrics.node_failures, 0);
  ASSERT_GT(j.failures, 0);
  EXPECT_GT(j.wasted_gpu_s, 0);
  // At most one checkpoint interval plus the restart pause is lost per failure.
  EXPECT_LE(j.wasted_gpu_s, j.failures * (o.checkpoint_interval_s + o.restart.fixed_s) + 1e-6);
}

}  // namespace
}  // namespace frenzy
