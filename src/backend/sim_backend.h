// The `sim` backend, the embedded default: a simulated heterogeneous cluster inside the daemon.
// A run "trains" at its plan's predicted speed, `time_scale` times faster than the wall clock,
// and reports its progress and a peak memory close to MARP's prediction. Given the simulator's
// memory truths (SetTruths: the same JobTruth the engine draws, sim/world.h), its runs behave as
// the engine's do: a restart first pays the restart pause, the peak grows with progress, and a
// run whose peak passes its GPU's memory fails out of memory — so one scenario runs through the
// engine and through the daemon alike. Everything about a run
// is in its handle (start time, speed, the job's progress at launch), so a restarted daemon
// re-attaches to its runs as it would to a real cluster's.
#ifndef FRENZY_BACKEND_SIM_BACKEND_H_
#define FRENZY_BACKEND_SIM_BACKEND_H_

#include <functional>
#include <memory>
#include <mutex>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "hardware/cluster.h"
#include "sim/world.h"
#include "backend/backend.h"

namespace frenzy::server {

class SimBackend : public Backend {
 public:
  // `now_s`: the wall clock (seconds); `time_scale`: simulated seconds per wall second.
  SimBackend(Cluster cluster, double time_scale, std::function<double()> now_s)
      : cluster_(std::move(cluster)), scale_(time_scale), now_s_(std::move(now_s)) {}
  std::string_view name() const override { return "sim"; }
  Result<std::vector<BackendNode>> Nodes() override;
  // Reads FRENZY_TOKENS and FRENZY_DONE_TOKENS from spec.env (the job's total and progress).
  Result<std::string> Launch(const LaunchSpec& spec) override;
  Result<RunStatus> Status(const std::string& handle) override;
  ::frenzy::Status Cancel(const std::string& handle) override;
  // Memory truths by job id; `oom_after_s` as in SimOptions, `restart_s` a fixed restart cost
  // (SimOptions::restart.fixed_s; simulated seconds).
  void SetTruths(std::map<std::string, JobTruth> truths, double oom_after_s, double restart_s);
  // Runs checkpoint every `s` simulated seconds of progress (the engine's
  // checkpoint_interval_s); a crashed run resumes from its last one.
  void SetCheckpointInterval(double s) { checkpoint_s_ = s; }

 private:
  std::map<std::string, JobTruth> truths_;
  double oom_after_s_ = 30, restart_s_ = 0;
  double checkpoint_s_ = 1800;  // simulated s of progress between checkpoints (SimOptions')
  Cluster cluster_;
  double scale_;
  std::function<double()> now_s_;
  std::mutex mu_;  // guards cancelled_: Status runs beside Cancel (see Backend)
  std::set<std::string> cancelled_;
};

}  // namespace frenzy::server

#endif  // FRENZY_BACKEND_SIM_BACKEND_H_
