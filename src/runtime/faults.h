// Faults other than memory: jobs that crash for other reasons, and stragglers.
//
//  * A crashed job (a bad node, a NCCL timeout, a bug in the data loader) is retried from its
//    last checkpoint after a back-off that doubles with each crash in a row (`backoff_s`, at
//    most `backoff_max_s`). A crash after the job has checkpointed new progress starts the count
//    again. After `max_attempts` crashes in a row without progress the job fails, with the log
//    line of its last crash in the message.
//  * A straggler is a GPU far slower than expected. Jobs report their speed against what they
//    ran at before (runtime/speed.h); a report under `slow_ratio` of it adds suspicion to each of the job's nodes (shared between
//    them: a gang runs at its slowest node's pace), a report at speed clears it (every node of
//    that job is fine). A node with `min_reports` worth of suspicion is declared slow, to be
//    avoided until repaired; a job on it leaves when the time it saves beats a restart.
//
// Node failures need no logic here: jobs on a failed node restart from their checkpoint on the
// GPUs the scheduler gives them, like any stopped job.
#ifndef FRENZY_RUNTIME_FAULTS_H_
#define FRENZY_RUNTIME_FAULTS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace frenzy::runtime {

struct RetryOptions {
  double backoff_s = 60;
  double backoff_max_s = 3600;
  int max_attempts = 4;  // crashes in a row without progress before the job fails
};

struct RetryState {
  int in_a_row = 0;
  double progress_at_last_crash = -1;  // checkpointed tokens when it last crashed
  std::string last_log;
};

struct RetryDecision {
  bool retry = false;
  double delay_s = 0;
  std::string message;
};

// A crash of a job whose last checkpoint holds `checkpoint_tokens`; `log` is what it printed.
RetryDecision OnCrash(RetryState& state, double checkpoint_tokens, const std::string& log,
                      const RetryOptions& options);

struct StragglerOptions {
  double slow_ratio = 0.75;  // observed / predicted speed under which a report is slow
  double min_reports = 2;
};

class StragglerDetector {
 public:
  explicit StragglerDetector(StragglerOptions options = {}) : opt_(options) {}
  // A speed report of a job running on `nodes`: observed / predicted tokens per second. Returns
  // the nodes this report made slow (newly declared).
  std::vector<int> Report(const std::vector<int>& nodes, double speed_ratio);
  bool IsSlow(int node) const { return slow_.count(node) > 0; }
  // The node was repaired or replaced.
  void Clear(int node);
  const std::set<int>& slow() const { return slow_; }

 private:
  StragglerOptions opt_;
  std::map<int, double> suspicion_;
  std::set<int> slow_;
};

// Whether a job on a slow node should leave it: the time it would save at the predicted speed
// beats a restart (`restart_s`) by `gain` x.
bool ShouldLeaveSlowNode(double left_tokens, double observed_rate, double predicted_rate,
                         double restart_s, double gain = 2);

}  // namespace frenzy::runtime

#endif  // FRENZY_RUNTIME_FAULTS_H_
