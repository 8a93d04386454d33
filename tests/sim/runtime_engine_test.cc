// The simulator driving Frenzy's runtime (src/runtime) on the real planner's option tables:
// memory drift caught before a crash, crashes recovered with a safer plan, impossible jobs given
// up with a clear message, other crashes retried with back-off, stragglers avoided, and learning
// across jobs of one class.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "model/zoo.h"
#include "sched/placement.h"
#include "sched/policy.h"
#include "sim/engine.h"
#include "sim_fixtures.h"

namespace frenzy {
namespace {

using testing::Lab;
using testing::Parse;

// First come first served: each queued job on option `preferred` when some layout of it fits
// the job's memory factor, else on the first runnable option with free GPUs.
class PinnedPolicy : public Policy {
 public:
  PinnedPolicy(int preferred, bool runtime) : preferred_(preferred), runtime_(runtime) {}
  std::string_view name() const override { return runtime_ ? "pinned+runtime" : "pinned"; }
  OptionKind options_kind() const override { return OptionKind::kMarp; }
  bool uses_runtime() const override { return runtime_; }
  Decisions Schedule(const Snapshot& s) override {
    Decisions d;
    FreeMap free(*s.cluster);
    for (const JobView& j : s.jobs) {
      if (j.running) continue;
      std::vector<int> order = {preferred_};
      for (int i = 0; i < static_cast<int>(j.options->options.size()); ++i) order.push_back(i);
      for (int i : order) {
        if (!j.Runnable(i, *s.cluster)) continue;
        const RunOption& o = j.option(i);
        int layout = std::max(0, j.Layout(i, *s.cluster));
        auto p = free.Place(o.type, o.gpus, j.PlanOf(i, layout).tp);
        if (!p) continue;
        d.start.push_back({j.key, Allocation{i, *p}});
        break;
      }
    }
    return d;
  }

 private:
  int preferred_;
  bool runtime_;
};

struct Tight {
  int option = -1;
  double device = 0, capacity = 0;
  size_t leaner = 0;
};

// The option of llama-2-7b's memory-safe table on the lab cluster that fills its GPU the most
// (and has leaner layouts when `with_leaner`).
Tight TightestOption(OptionCache& cache, const JobSpec& spec, bool with_leaner) {
  auto opts = cache.Get("llama-2-7b", spec, OptionKind::kMarp);
  EXPECT_TRUE(opts.ok());
  Tight best;
  const JobOptions& t = **opts;
  for (size_t i = 0; i < t.options.size(); ++i) {
    const RunOption& o = t.options[i];
    if (with_leaner && o.leaner.empty()) continue;
    const GpuType* g = GpuCatalog::Default().Find(t.types[static_cast<size_t>(o.type)]);
    double fill = static_cast<double>(o.plan.device_bytes) / static_cast<double>(g->memory_bytes);
    if (best.option < 0 || fill > best.device / best.capacity) {
      best = {static_cast<int>(i), static_cast<double>(o.plan.device_bytes),
              static_cast<double>(g->memory_bytes), o.leaner.size()};
    }
  }
  return best;
}

JobSpec Llama7b(double tokens) {
  JobSpec spec;
  spec.model = *ResolveModel("llama-2-7b");
  spec.tokens = tokens;
  spec.global_batch = 64;
  spec.seq_len = 2048;
  return spec;
}

const char* kOneJob = "job_id,submit_s,model,tokens,global_batch,seq_len\nj1,0,llama-2-7b,3e9,64,2048\n";

SimOptions Exact() {
  SimOptions o;
  o.memory_error_pct = 0;  // real peak = prediction x (1 + bias) x (1 + drift x progress)
  o.perf_error_pct = 0;    // and every job runs at its predicted speed
  return o;
}

TEST(RuntimeEngine, OptionTablesCarryLeanerLayouts) {
  OptionCache cache(Lab(), GpuCatalog::Default(), 0.10);
  auto opts = cache.Get("llama-2-7b", Llama7b(3e9), OptionKind::kMarp);
  ASSERT_TRUE(opts.ok());
  size_t with = 0;
  for (const RunOption& o : (*opts)->options) {
    int64_t last = o.plan.device_bytes;
    double speed = o.plan.tokens_per_s;
    for (const Plan& p : o.leaner) {
      EXPECT_LT(static_cast<double>(p.device_bytes), 0.97 * static_cast<double>(last));
      EXPECT_LE(p.tokens_per_s, speed);
      EXPECT_EQ(p.gpus, o.gpus);
      last = p.device_bytes;
    }
    with += o.leaner.empty() ? 0 : 1;
  }
  EXPECT_GT(with, 0u);
  // Hand-tuned tables stay as users would run them: no leaner layouts.
  auto hand = cache.Get("llama-2-7b", Llama7b(3e9), OptionKind::kHand);
  ASSERT_TRUE(hand.ok());
  for (const RunOption& o : (*hand)->options) EXPECT_TRUE(o.leaner.empty());
}

TEST(RuntimeEngine, OptionTablesAreKeptApartByTheTransformersRelease) {
  // A LoRA fine-tune under FSDP: the same job in an environment whose transformers slices the
  // logits (before 4.46, fp32 logits kept) gets a table of its own, with more memory per option.
  OptionCache cache(Lab(), GpuCatalog::Default(), 0.10);
  JobSpec now = Llama7b(3e9);
  now.framework = Framework::kFsdp;
  now.finetune = FineTune::kLora;
  JobSpec old = now;
  old.limits.hf_loss = HfLoss::kModelUpcastSliced;
  auto a = cache.Get("llama-2-7b", now, OptionKind::kMarp);
  auto b = cache.Get("llama-2-7b", old, OptionKind::kMarp);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(cache.size(), 2u);
  int compared = 0;
  for (const RunOption& x : (*a)->options) {
    for (const RunOption& y : (*b)->options) {
      if (x.type == y.type && x.gpus == y.gpus && x.plan.micro_batch == y.plan.micro_batch &&
          x.plan.recompute == y.plan.recompute && x.plan.zero == y.plan.zero) {
        EXPECT_GT(y.plan.peak_bytes, x.plan.peak_bytes) << x.plan.gpu << " x" << x.gpus;
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 0);
}

TEST(RuntimeEngine, DriftIsCaughtBeforeTheCrash) {
  OptionCache cache(Lab(), GpuCatalog::Default(), 0.10);
  Tight t = TightestOption(cache, Llama7b(3e9), /*with_leaner=*/true);
  ASSERT_GE(t.option, 0);
  Workload w = Parse(kOneJob);
  SimOptions o = Exact();
  // Starts at 97% of the GPU and grows by up to 40% over the job.
  o.memory_bias_pct = (0.97 * t.capacity / t.device - 1) * 100;
  o.memory_drift_pct = 40;
  PinnedPolicy plain(t.option, false), watched(t.option, true);
  auto a = Simulate(w, Lab(), GpuCatalog::Default(), plain, o, cache);
  auto b = Simulate(w, Lab(), GpuCatalog::Default(), watched, o, cache);
  ASSERT_TRUE(a.ok() && b.ok());
  const JobRecord& ja = a->jobs[0];
  const JobRecord& jb = b->jobs[0];
  ASSERT_GT(ja.memory_drift, 0.05) << "the scenario needs a drift that crosses the GPU's memory";
  // Without the runtime the drift crashes the job; with it, it is re-planned, moved or requeued
  // before, and finishes without a crash.
  EXPECT_GE(ja.ooms, 1);
  EXPECT_GT(a->metrics.oom_wasted_gpu_hours, 0);
  EXPECT_EQ(jb.outcome, JobOutcome::kFinished);
  EXPECT_EQ(jb.ooms, 0);
  EXPECT_GE(jb.memory_actions, 1);
  EXPECT_GE(b->metrics.memory_replans + b->metrics.memory_moves + b->metrics.memory_requeues, 1);
  EXPECT_NE(jb.note.find("projected out of memory"), std::string::npos) << jb.note;
  EXPECT_EQ(b->metrics.oom_wasted_gpu_hours, 0);
  // It was planned with at least the memory it reached.
  EXPECT_GE(jb.planned_factor, ja.memory_factor * (1 + ja.memory_drift) - 1e-9);
}

TEST(RuntimeEngine, CrashIsRecoveredWithASaferPlanNeverTheSame) {
  OptionCache cache(Lab(), GpuCatalog::Default(), 0.10);
  Tight t = TightestOption(cache, Llama7b(3e9), /*with_leaner=*/true);
  ASSERT_GE(t.option, 0);
  Workload w = Parse(kOneJob);
  SimOptions o = Exact();
  o.memory_bias_pct = (1.02 * t.capacity / t.device - 1) * 100;  // over at the first step
  PinnedPolicy watched(t.option, true);
  auto r = Simulate(w, Lab(), GpuCatalog::Default(), watched, o, cache);
  ASSERT_TRUE(r.ok());
  const JobRecord& j = r->jobs[0];
  EXPECT_EQ(j.outcome, JobOutcome::kFinished);
  EXPECT_EQ(j.ooms, 1);  // the first run crashed; the safer plan did not
  EXPECT_NE(j.note.find("out of memory"), std::string::npos) << j.note;
  EXPECT_GE(j.planned_factor, t.capacity / t.device);
}

TEST(RuntimeEngine, JobThatFitsNowhereIsGivenUpWithWhatItNeeds) {
  OptionCache cache(Lab(), GpuCatalog::Default(), 0.10);
  Workload w = Parse(kOneJob);
  SimOptions o = Exact();
  o.memory_bias_pct = 100;  // twice the prediction: over 80 GiB on any layout of the lab
  PinnedPolicy watched(0, true);
  auto r = Simulate(w, Lab(), GpuCatalog::Default(), watched, o, cache);
  ASSERT_TRUE(r.ok());
  const JobRecord& j = r->jobs[0];
  EXPECT_EQ(j.outcome, JobOutcome::kGivenUp);
  EXPECT_LE(j.ooms, o.max_ooms);
  EXPECT_NE(j.note.find("GiB"), std::string::npos) << j.note;
  EXPECT_EQ(r->metrics.jobs_lost(), 1);
}

TEST(RuntimeEngine, OtherCrashesAreRetriedWithBackoffThenFail) {
  OptionCache cache(Lab(), GpuCatalog::Default(), 0.10);
  Workload w =
      Parse("job_id,submit_s,model,tokens,global_batch,seq_len\nj1,0,llama-2-7b,2e8,64,2048\n");
  // Crashes every ~10 minutes, checkpoints every 30: it never gets past a checkpoint.
  SimOptions o = Exact();
  o.job_crash_mtbf_s = 60;
  o.retry_backoff_s = 100;
  PinnedPolicy p(0, false);
  auto r = Simulate(w, Lab(), GpuCatalog::Default(), p, o, cache);
  ASSERT_TRUE(r.ok());
  const JobRecord& j = r->jobs[0];
  EXPECT_EQ(j.outcome, JobOutcome::kFailed);
  EXPECT_EQ(j.crashes, o.max_crashes);
  EXPECT_NE(j.note.find("crashed 4 times in a row"), std::string::npos) << j.note;
  EXPECT_NE(j.note.find("exited with an error"), std::string::npos) << j.note;
  EXPECT_EQ(r->metrics.failed, 1);
  // Back-offs of 100, 200 and 400 s between the four runs.
  EXPECT_GE(r->metrics.makespan_s, 700);

  // Rare crashes: retried, and the job finishes.
  o.job_crash_mtbf_s = 2 * 3600;
  auto ok = Simulate(w, Lab(), GpuCatalog::Default(), p, o, cache);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->jobs[0].outcome, JobOutcome::kFinished);
}

TEST(RuntimeEngine, StragglersAreDetectedAndLeftOnlyWithTheRuntime) {
  OptionCache cache(Lab(), GpuCatalog::Default(), 0.10);
  Workload w = Parse(kOneJob);
  SimOptions o = Exact();
  // Every node runs at 0.3x: slower than the throughput model was ever measured to be wrong
  // (0.57x), so even a first run points at its nodes.
  o.straggler_fraction = 1.0;
  o.straggler_speed = 0.3;
  PinnedPolicy plain(0, false), watched(0, true);
  auto a = Simulate(w, Lab(), GpuCatalog::Default(), plain, o, cache);
  auto b = Simulate(w, Lab(), GpuCatalog::Default(), watched, o, cache);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->metrics.stragglers_detected, 0);
  EXPECT_GE(b->metrics.stragglers_detected, 1);
  EXPECT_NE(b->jobs[0].note.find("left node"), std::string::npos) << b->jobs[0].note;
  EXPECT_EQ(b->jobs[0].outcome, JobOutcome::kFinished);
  // No stragglers: nothing detected.
  o.straggler_fraction = 0;
  auto c = Simulate(w, Lab(), GpuCatalog::Default(), watched, o, cache);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->metrics.stragglers_detected, 0);
  EXPECT_LT(c->jobs[0].jct_s(), a->jobs[0].jct_s());
}

TEST(RuntimeEngine, LaterJobsOfAClassStartWithItsCorrection) {
  OptionCache cache(Lab(), GpuCatalog::Default(), 0.10);
  Tight t = TightestOption(cache, Llama7b(3e9), /*with_leaner=*/true);
  ASSERT_GE(t.option, 0);
  // One job after another; every one really uses 2% more than its tightest option holds.
  std::string csv = "job_id,submit_s,model,tokens,global_batch,seq_len\n";
  for (int i = 0; i < 8; ++i) {
    csv += "j" + std::to_string(i) + "," + std::to_string(i * 200000) + ",llama-2-7b,3e9,64,2048\n";
  }
  Workload w = Parse(csv);
  SimOptions o = Exact();
  o.memory_bias_pct = (1.02 * t.capacity / t.device - 1) * 100;
  PinnedPolicy watched(t.option, true);
  auto r = Simulate(w, Lab(), GpuCatalog::Default(), watched, o, cache);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->metrics.finished, 8);
  // The first jobs crash once each until three of the class have finished; then the class's
  // correction plans the rest right first time.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(r->jobs[static_cast<size_t>(i)].ooms, 1) << i;
  for (int i = 3; i < 8; ++i) EXPECT_EQ(r->jobs[static_cast<size_t>(i)].ooms, 0) << i;
  EXPECT_EQ(r->metrics.oom_events, 3);
}

}  // namespace
}  // namespace frenzy
