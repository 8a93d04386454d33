#include "runtime/faults.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

namespace frenzy::runtime {

RetryDecision OnCrash(RetryState& st, double checkpoint_tokens, const std::string& log,
                      const RetryOptions& opt) {
  if (checkpoint_tokens > st.progress_at_last_crash) st.in_a_row = 0;
  st.progress_at_last_crash = std::max(st.progress_at_last_crash, checkpoint_tokens);
  ++st.in_a_row;
  st.last_log = log;
  RetryDecision d;
  if (st.in_a_row >= opt.max_attempts) {
    d.message = fmt::format("failed: crashed {} times in a row without progress; last: {}",
                            st.in_a_row, log);
    return d;
  }
  d.retry = true;
  d.delay_s = std::min(opt.backoff_max_s, opt.backoff_s * std::pow(2.0, st.in_a_row - 1));
  d.message = fmt::format("crashed ({} in a row): retrying from its checkpoint in {:.0f} s; {}",
                          st.in_a_row, d.delay_s, log);
  return d;
}

std::vector<int> StragglerDetector::Report(const std::vector<int>& nodes, double speed_ratio) {
  std::vector<int> declared;
  if (nodes.empty()) return declared;
  if (speed_ratio >= opt_.slow_ratio) {
    for (int n : nodes) suspicion_.erase(n);
    return declared;
  }
  double share = 1.0 / static_cast<double>(nodes.size());
  for (int n : nodes) {
    if (slow_.count(n)) continue;
    double& s = suspicion_[n];
    s += share;
    if (s >= opt_.min_reports - 1e-9) {
      slow_.insert(n);
      suspicion_.erase(n);
      declared.push_back(n);
    }
  }
  return declared;
}

void StragglerDetector::Clear(int node) {
  slow_.erase(node);
  suspicion_.erase(node);
}

bool ShouldLeaveSlowNode(double left_tokens, double observed_rate, double predicted_rate,
                         double restart_s, double gain) {
  if (observed_rate <= 0 || predicted_rate <= observed_rate) return observed_rate <= 0;
  double saved = left_tokens / observed_rate - left_tokens / predicted_rate;
  return saved > gain * restart_s;
}

}  // namespace frenzy::runtime
