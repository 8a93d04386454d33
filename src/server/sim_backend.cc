#include "server/sim_backend.h"

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
  for (const auto& n : cluster_.nodes) out.push_back(BackendNode{n.name, n.gpu, n.gpus, true});
  return out;
}

Result<std::string> SimBackend::Launch(const LaunchSpec& spec) {
  double total = EnvNumber(spec, "FRENZY_TOKENS", 0);
  double done = EnvNumber(spec, "FRENZY_DONE_TOKENS", 0);
  if (!(total > 0) || !(spec.plan.tokens_per_s > 0)) {
    return InvalidArgument("sim backend: a run needs FRENZY_TOKENS and a plan with a speed", {},
                           spec.job_id);
  }
  // The real peak: within a few percent of the prediction, fixed per job.
  double jitter = static_cast<double>(std::hash<std::string>{}(spec.job_id) % 1000) / 1000.0;
  int64_t peak =
      static_cast<int64_t>(static_cast<double>(spec.plan.device_bytes) * (0.94 + 0.05 * jitter));
  // sim:<job>:<attempt>:<start wall s>:<done fraction>:<fraction per wall s>:<peak bytes>
  double frac_per_s = spec.plan.tokens_per_s * scale_ / total;
  return fmt::format("sim:{}:{}:{:.6f}:{:.9f}:{:.12g}:{}", spec.job_id, spec.attempt, now_s_(),
                     done / total, frac_per_s, peak);
}

Result<RunStatus> SimBackend::Status(const std::string& handle) {
  std::vector<std::string> parts;
  std::stringstream ss(handle);
  for (std::string p; std::getline(ss, p, ':');) parts.push_back(p);
  if (parts.size() != 7 || parts[0] != "sim") {
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
  st.peak_bytes = std::strtoll(parts[6].c_str(), nullptr, 10);
  st.progress = std::min(1.0, done + rate * std::max(0.0, now_s_() - start));
  st.state = st.progress >= 1.0 ? RunState::kSucceeded : RunState::kRunning;
  return st;
}

Status SimBackend::Cancel(const std::string& handle) {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_.insert(handle);
  return ::frenzy::Status::Ok();
}

}  // namespace frenzy::server
