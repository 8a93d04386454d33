// One scenario through the simulator's engine and through the daemon on the sim backend, given
// the same memory truths: the runtime must act the same in both (the same out-of-memory
// crashes, the same re-plans, moves and requeues, the same outcomes), and a restarted daemon
// must keep what its runtime learned.
#include <fmt/core.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "hardware/cluster.h"
#include "hardware/gpu.h"
#include "sched/job_options.h"
#include "sched/policy.h"
#include "server/daemon.h"
#include "backend/sim_backend.h"
#include "sim/engine.h"
#include "sim/workload.h"
#include "server_test_util.h"

namespace frenzy::server {
namespace {

using nlohmann::json;

struct Counts {
  int ooms = 0, replans = 0, moves = 0, requeues = 0;
  std::string outcome;
  bool operator==(const Counts& o) const {
    return ooms == o.ooms && replans == o.replans && moves == o.moves &&
           requeues == o.requeues && outcome == o.outcome;
  }
};

std::ostream& operator<<(std::ostream& os, const Counts& c) {
  return os << fmt::format("{{ooms {}, replans {}, moves {}, requeues {}, {}}}", c.ooms,
                           c.replans, c.moves, c.requeues, c.outcome);
}

Workload Scenario() {
  Workload w;
  w.name = "parity";
  // Jobs that all fit the lab at once (no queueing: the daemon's ticks and the engine's events
  // then see the same runs at the same times).
  const char* models[] = {"llama-2-7b", "llama-2-7b", "opt-1.3b"};
  for (int i = 0; i < 3; ++i) {
    WorkloadJob j;
    j.id = fmt::format("p{}", i);
    j.model = models[i];
    j.tokens = 2e8;
    j.global_batch = 64;
    j.seq_len = 2048;
    w.jobs.push_back(j);
  }
  return w;
}

// Both sides price and pay restarts alike: one fixed cost (the sim backend takes no model).
constexpr double kParityRestartS = 60;

SimOptions Truths() {
  SimOptions o;
  o.restart.fixed_s = kParityRestartS;
  o.seed = 7;
  o.memory_error_pct = 0;   // the truth is the bias and the drift alone
  o.perf_error_pct = 0;     // the sim backend runs at the predicted speed
  o.memory_bias_pct = 25;   // every real peak 25% above MARP's prediction
  o.memory_drift_pct = 30;  // and growing by up to 30% more by the end
  return o;
}

struct DaemonRun {
  std::map<std::string, Counts> by_job;  // by workload id
  std::map<std::string, double> factors;
};



TEST(RuntimeParity, EngineAndDaemonTakeTheSameMemoryActions) {
  const GpuCatalog& catalog = GpuCatalog::Default();
  auto cluster = ResolveCluster("lab", catalog);
  ASSERT_TRUE(cluster.ok());
  const Workload w = Scenario();
  const SimOptions so = Truths();

  // The engine.
  auto policy = MakePolicy("frenzy");
  ASSERT_TRUE(policy.ok());
  OptionCache cache(*cluster, catalog, so.memory_margin);
  auto sim = Simulate(w, *cluster, catalog, **policy, so, cache);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  std::map<std::string, Counts> engine;
  std::map<std::string, JobTruth> truths;
  int actions = 0;
  for (size_t i = 0; i < sim->jobs.size(); ++i) {
    const JobRecord& r = sim->jobs[i];
    engine[r.id].ooms = r.ooms;
    engine[r.id].replans = r.memory_actions;  // replans, moves and requeues, summed below
    engine[r.id].outcome = JobOutcomeName(r.outcome);
    truths[fmt::format("j-{:06d}", i + 1)] = JobTruth{r.memory_factor, r.memory_drift, {}};
    actions += r.ooms + r.memory_actions;
  }
  const PolicyMetrics& m = sim->metrics;
  // The scenario exercises the runtime (else the comparison proves nothing).
  ASSERT_GT(m.oom_events + m.memory_replans + m.memory_moves + m.memory_requeues, 0);

  // The daemon, on the sim backend with the engine's truths, ticking every 30 s (the OOM delay,
  // so that it sees each crash when the engine does).
  test_util::TempDir dir("frenzy-parity-actions");
  const std::string base = dir.str();
  double now = 0;
  auto backend = std::make_unique<SimBackend>(*cluster, 1.0, [&] { return now; });
  backend->SetTruths(truths, so.oom_after_s, so.restart.fixed_s);
  backend->SetCheckpointInterval(so.checkpoint_interval_s);
  DaemonOptions o;
  o.runs_dir = base + "/runs";
  o.policy = "frenzy";
  o.train_limits = AllTrainLimits();  // plan every layout, as the engine does
  o.train_framework = Framework::kMegatron;
  o.memory_margin = so.memory_margin;
  o.restart = so.restart;
  o.report_interval_s = so.report_interval_s;
  o.runtime.max_ooms = so.max_ooms;
  o.runtime.act_horizon_s = 3 * so.report_interval_s;  // as the engine sets it
  auto store = Store::Open(base + "/d.db");
  ASSERT_TRUE(store.ok());
  auto d = Daemon::Create(o, std::move(store).value(), std::move(backend), [&] { return now; });
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  for (const WorkloadJob& j : w.jobs) {
    auto r = (*d)->Submit(json{{"model", j.model},
                               {"tokens", j.tokens},
                               {"global_batch", j.global_batch},
                               {"seq_len", j.seq_len}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  std::map<std::string, Counts> daemon;
  for (; now < 40 * 24 * 3600.0; now += 30) {
    ASSERT_TRUE((*d)->Tick().ok());
    auto running = (*d)->ListJobs("running", 100);
    auto queued = (*d)->ListJobs("queued", 100);
    if ((*running)["jobs"].empty() && (*queued)["jobs"].empty()) break;
  }
  for (size_t i = 0; i < w.jobs.size(); ++i) {
    auto j = (*d)->GetJob(fmt::format("j-{:06d}", i + 1));
    ASSERT_TRUE(j.ok());
    Counts& c = daemon[w.jobs[i].id];
    for (const json& e : (*j)["events"]) {
      const std::string kind = e["kind"];
      if (kind == "out_of_memory") ++c.ooms;
      if (kind == "memory_replan") ++c.replans;
      if (kind == "memory_move") ++c.moves;
      if (kind == "memory_requeue") ++c.requeues;
    }
    const std::string state = (*j)["state"];
    c.outcome = state == "succeeded" ? "finished" : state;
  }
  int replans = 0, moves = 0, requeues = 0;
  for (const auto& [id, c] : daemon) {
    replans += c.replans;
    moves += c.moves;
    requeues += c.requeues;
    EXPECT_EQ(c.ooms, engine[id].ooms) << id << ": " << c;
    EXPECT_EQ(c.replans + c.moves + c.requeues, engine[id].replans) << id << ": " << c;
    EXPECT_EQ(c.outcome, engine[id].outcome) << id << ": " << c;
  }
  EXPECT_EQ(replans, m.memory_replans);
  EXPECT_EQ(moves, m.memory_moves);
  EXPECT_EQ(requeues, m.memory_requeues);
  std::printf("engine: %lld OOMs, %lld replans, %lld moves, %lld requeues; %d runtime events\n",
              static_cast<long long>(m.oom_events), static_cast<long long>(m.memory_replans),
              static_cast<long long>(m.memory_moves), static_cast<long long>(m.memory_requeues),
              actions);
}

// The sim backend's runs checkpoint as the engine's do: every checkpoint interval of progress
// after the restart pause. 1,000 tokens a second of a 1e6-token job from 10% done, a 60 s pause
// and a checkpoint every 100 s: at 310 s, 250 s of progress, two checkpoints (200 s) are kept.
TEST(RuntimeParity, SimRunsCheckpointEveryIntervalOfProgress) {
  auto cluster = ResolveCluster("lab", GpuCatalog::Default());
  ASSERT_TRUE(cluster.ok());
  double now = 0;
  SimBackend b(*cluster, 1.0, [&now] { return now; });
  b.SetTruths({{"j-1", JobTruth{1.0, 0.0, {}}}}, 30, 60);
  b.SetCheckpointInterval(100);
  LaunchSpec ls;
  ls.job_id = "j-1";
  ls.attempt = 1;  // a restart: it pauses 60 s first
  ls.plan.tokens_per_s = 1000;
  ls.plan.device_bytes = 1 << 30;
  ls.plan.gpu_memory_bytes = int64_t{80} << 30;
  ls.env["FRENZY_TOKENS"] = "1000000";
  ls.env["FRENZY_DONE_TOKENS"] = "100000";
  auto h = b.Launch(ls);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  now = 310;
  auto st = b.Status(*h);
  ASSERT_TRUE(st.ok());
  EXPECT_NEAR(st->progress, (100000 + 250 * 1000) / 1e6, 1e-9);
  EXPECT_NEAR(st->checkpoint_progress, (100000 + 200 * 1000) / 1e6, 1e-9);
  now = 30;  // still pausing: the checkpoint it resumed from
  EXPECT_NEAR(b.Status(*h)->checkpoint_progress, 0.1, 1e-9);
}

// The daemon on the sim backend with these truths, on a database in `base`; `max_ooms` as the
// runtime's.
std::unique_ptr<Daemon> MakeDaemon(const std::string& base, const std::map<std::string, JobTruth>& truths,
                                   double& now, int max_ooms) {
  auto cluster = ResolveCluster("lab", GpuCatalog::Default());
  EXPECT_TRUE(cluster.ok());
  auto backend = std::make_unique<SimBackend>(*cluster, 1.0, [&now] { return now; });
  backend->SetTruths(truths, 30, kParityRestartS);
  DaemonOptions o;
  o.runs_dir = base + "/runs";
  o.train_limits = AllTrainLimits();
  o.train_framework = Framework::kMegatron;
  o.runtime.max_ooms = max_ooms;
  o.restart.fixed_s = kParityRestartS;  // what the sim backend pays
  auto store = Store::Open(base + "/d.db");
  EXPECT_TRUE(store.ok());
  auto d = Daemon::Create(o, std::move(store).value(), std::move(backend), [&now] { return now; });
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? std::move(d).value() : nullptr;
}

// The job's events as "kind" strings, without the run handles' times.
std::vector<std::string> Kinds(Daemon& d, const std::string& id) {
  std::vector<std::string> out;
  auto j = d.GetJob(id);
  EXPECT_TRUE(j.ok());
  if (!j.ok()) return out;
  for (const json& e : (*j)["events"]) out.push_back(e["kind"]);
  std::reverse(out.begin(), out.end());  // oldest first
  return out;
}

// A job far over its prediction (6x: more than any layout on any GPU of the lab absorbs) crashes
// out of memory until the runtime gives it up after
// `max_ooms` crashes. A daemon restarted after the first crash must carry the count and the
// learned floor on: the same crashes, the same outcome, as without the restart.
TEST(RuntimeParity, ARestartedDaemonKeepsWhatItsRuntimeLearned) {
  const std::map<std::string, JobTruth> truths = {{"j-000001", JobTruth{6.0, 0, {}}}};
  const json spec = {{"model", "llama-2-7b"}, {"tokens", 2e8}, {"global_batch", 64}};
  auto run = [&](bool restart) {
    test_util::TempDir dir(restart ? "frenzy-parity-restart" : "frenzy-parity-straight");
    const std::string base = dir.str();
    double now = 0;
    auto d = MakeDaemon(base, truths, now, 3);
    EXPECT_TRUE(d->Submit(spec).ok());
    std::string state;
    for (; now < 24 * 3600.0; now += 30) {
      EXPECT_TRUE(d->Tick().ok());
      if (restart && now == 60) {  // after the first crash (at 30 s) and its relaunch
        d.reset();
        d = MakeDaemon(base, truths, now, 3);
      }
      state = (*d->GetJob("j-000001"))["state"];
      if (state != "running" && state != "queued") break;
    }
    auto kinds = Kinds(*d, "j-000001");
    return std::make_pair(state, kinds);
  };
  auto [straight_state, straight] = run(false);
  auto [restart_state, restarted] = run(true);
  EXPECT_EQ(straight_state, "failed");
  EXPECT_EQ(std::count(straight.begin(), straight.end(), "out_of_memory"), 2)
      << "two crashes requeue the job, the third gives it up";
  EXPECT_EQ(restart_state, straight_state);
  EXPECT_EQ(restarted, straight);
}

// What the speed learner learned of a job that succeeded stays with its model's class in the
// store (one sample: the job's observed over predicted speed, 1 here as the sim backend runs at
// the prediction), and a restarted daemon reads it back without quarantining anything.
TEST(RuntimeParity, WhatTheSpeedLearnerLearnedIsStoredWithTheClass) {
  test_util::TempDir dir("frenzy-parity-speed");
  const std::string base = dir.str();
  double now = 0;
  auto d = MakeDaemon(base, {}, now, 3);
  ASSERT_TRUE(d->Submit({{"model", "llama-2-7b"}, {"tokens", 2e8}, {"global_batch", 64}}).ok());
  std::string state;
  for (; now < 48 * 3600.0 && state != "succeeded"; now += 30) {
    ASSERT_TRUE(d->Tick().ok());
    state = (*d->GetJob("j-000001"))["state"];
  }
  ASSERT_EQ(state, "succeeded");
  d.reset();
  {
    auto store = Store::Open(base + "/d.db");
    ASSERT_TRUE(store.ok());
    auto states = (*store)->RuntimeStates();
    ASSERT_TRUE(states.ok());
    json classes;
    for (const auto& [key, text] : *states) {
      if (key == "speed_classes") classes = json::parse(text);
    }
    ASSERT_TRUE(classes.contains("llama-2-7b")) << classes.dump();
    const json& c = classes["llama-2-7b"];
    int64_t samples = 0;
    for (size_t t = 0; t < c["n"].size(); ++t) {
      samples += c["n"][t].get<int64_t>();
      if (c["n"][t] == 1) {
        EXPECT_NEAR(c["sum"][t].get<double>(), 1.0, 0.05);
      }
    }
    EXPECT_EQ(samples, 1);
  }
  auto again = MakeDaemon(base, {}, now, 3);
  ASSERT_NE(again, nullptr);
  EXPECT_TRUE(again->quarantine_notes().empty());
}

}  // namespace
}  // namespace frenzy::server
