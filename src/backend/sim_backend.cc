#include "backend/sim_backend.h"

#include <cmath>

#include <fmt/core.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <sstream>

namespace frenzy::server {
namespace {

double EnvNumber(const LaunchSpec& s, const std::string& key, double fallback) {
  auto it = s.env.find(key);
  if (it == s.env.end()) return fallback;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  return end != it->second.c_str() ? v : fallback;
}

}  // namespace

Result<std::vector<BackendNode>> SimBackend::Nodes() {
  std::vector<BackendNode> out;
  for (const auto& n : cluster_.nodes) {
    out.push_back(BackendNode{n.name, n.gpu, n.gpus, true, n.network_gbs});
  }
  return out;
}

void SimBackend::SetTruths(std::map<std::string, JobTruth> truths, double oom_after_s,
                           double restart_s) {
  truths_ = std::move(truths);
  oom_after_s_ = oom_after_s;
  restart_s_ = std::max(0.0, restart_s);
}

Result<std::string> SimBackend::Launch(const LaunchSpec& spec) {
  double total = EnvNumber(spec, "FRENZY_TOKENS", 0);
  double done = EnvNumber(spec, "FRENZY_DONE_TOKENS", 0);
  if (!(total > 0) || !(spec.plan.tokens_per_s > 0)) {
    return InvalidArgument("sim backend: a run needs FRENZY_TOKENS and a plan with a speed", {},
                           spec.job_id);
  }
  const double frac_per_s = spec.plan.tokens_per_s * scale_ / total;
  auto truth = truths_.find(spec.job_id);
  if (truth == truths_.end()) {
    // The real peak: within a few percent of the prediction, fixed per job.
    double jitter = static_cast<double>(std::hash<std::string>{}(spec.job_id) % 1000) / 1000.0;
    int64_t peak =
        static_cast<int64_t>(static_cast<double>(spec.plan.device_bytes) * (0.94 + 0.05 * jitter));
    // sim:<job>:<attempt>:<start wall s>:<done fraction>:<fraction per wall s>:<peak bytes>
    return fmt::format("sim:{}:{}:{:.6f}:{:.9f}:{:.12g}:{}", spec.job_id, spec.attempt, now_s_(),
                       done / total, frac_per_s, peak);
  }
  // With a truth, as the engine's run: a pause (wall s), the peak at the start and its growth,
  // and when it runs out of memory (wall s after the start; -1: never).
  RunShape run;
  run.progress_since_s = spec.attempt > 0 ? restart_s_ : 0.0;  // simulated s from the start
  run.rate = spec.plan.tokens_per_s;
  run.done = done;
  run.total = total;
  run.predicted_bytes = spec.plan.device_bytes;
  run.capacity_bytes = spec.plan.gpu_memory_bytes;
  RunEnd end = MemoryEnd(truth->second, run, oom_after_s_);
  double oom_at = end.kind == RunEndKind::kOom ? end.t_s / scale_ : -1;
  // sim:<job>:<attempt>:<start>:<done>:<rate>:<peak at 0>:<pause>:<drift>:<oom at>
  return fmt::format("sim:{}:{}:{:.6f}:{:.9f}:{:.12g}:{:.0f}:{:.6f}:{:.9g}:{:.6f}", spec.job_id,
                     spec.attempt, now_s_(), done / total, frac_per_s,
                     truth->second.RealPeak(spec.plan.device_bytes, 0.0),
                     run.progress_since_s / scale_, truth->second.drift, oom_at);
}

Result<RunStatus> SimBackend::Status(const std::string& handle) {
  std::vector<std::string> parts;
  std::stringstream ss(handle);
  for (std::string p; std::getline(ss, p, ':');) parts.push_back(p);
  if ((parts.size() != 7 && parts.size() != 10) || parts[0] != "sim") {
    return InvalidArgument("not a sim run handle: '" + handle + "'", {}, "handle");
  }
  RunStatus st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_.count(handle)) {
      st.state = RunState::kCancelled;
      return st;
    }
  }
  double start = std::strtod(parts[3].c_str(), nullptr);
  double done = std::strtod(parts[4].c_str(), nullptr);
  double rate = std::strtod(parts[5].c_str(), nullptr);
  double peak0 = std::strtod(parts[6].c_str(), nullptr);
  double pause = parts.size() == 10 ? std::strtod(parts[7].c_str(), nullptr) : 0.0;
  double drift = parts.size() == 10 ? std::strtod(parts[8].c_str(), nullptr) : 0.0;
  double oom_at = parts.size() == 10 ? std::strtod(parts[9].c_str(), nullptr) : -1.0;
  double ran = std::max(0.0, now_s_() - start);
  // A run that ran out of memory stopped then: nothing after it counts (as the engine's
  // StopRun at the crash).
  if (oom_at >= 0) ran = std::min(ran, oom_at);
  const double progressed = std::max(0.0, ran - pause);
  st.progress = std::min(1.0, done + rate * progressed);
  // A checkpoint every checkpoint_s_ simulated seconds of progress (wall s x scale_), as the
  // engine's runs keep them (Engine::StopRun).
  const double every = checkpoint_s_ / scale_;
  const double kept = every > 0 ? std::floor(progressed / every) * every : 0.0;
  st.checkpoint_progress = std::min(1.0, done + rate * kept);
  st.peak_bytes = static_cast<int64_t>(peak0 * (1.0 + drift * st.progress));
  if (oom_at >= 0 && now_s_() - start >= oom_at) {
    st.state = RunState::kFailed;
    st.failure = FailureKind::kOutOfMemory;
    st.exit_code = 1;
    st.message = "simulated: the run's peak passed its GPU's memory (CUDA out of memory)";
    return st;
  }
  st.state = st.progress >= 1.0 ? RunState::kSucceeded : RunState::kRunning;
  return st;
}

Status SimBackend::Cancel(const std::string& handle) {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_.insert(handle);
  return ::frenzy::Status::Ok();
}

}  // namespace frenzy::server
