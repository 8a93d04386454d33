// The runtime's state as JSON, for the store: what the memory monitor learned of a job (its
// samples, ratio, trend, OOM floor) and of its class, what the speed learner learned of the job
// and of its class, and the job's crash and out-of-memory history. A restarted daemon reads it back and plans as if it had never stopped. Reading is
// strict about types and bounded (a damaged row is refused, never half-applied).
#ifndef FRENZY_SERVER_RUNTIME_STATE_H_
#define FRENZY_SERVER_RUNTIME_STATE_H_

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/faults.h"
#include "runtime/monitor.h"
#include "runtime/speed.h"

namespace frenzy::server {

struct StoredRuntime {
  runtime::JobMemory memory;
  bool has_memory = false;
  runtime::RetryState retry;
  std::vector<int> failed_options;
  int ooms = 0;
  double retry_at_s = -1;
  std::vector<double> speed;  // the speed learner's own factors of the job (SpeedLearner::Own)
};

nlohmann::json RuntimeToJson(const StoredRuntime& r);
Result<StoredRuntime> RuntimeFromJson(const nlohmann::json& j);
nlohmann::json ClassesToJson(const std::map<std::string, runtime::ClassCorrection>& classes);
Result<std::map<std::string, runtime::ClassCorrection>> ClassesFromJson(const nlohmann::json& j);
nlohmann::json SpeedClassesToJson(
    const std::map<std::string, runtime::SpeedLearner::ClassEvidence>& classes);
Result<std::map<std::string, runtime::SpeedLearner::ClassEvidence>> SpeedClassesFromJson(
    const nlohmann::json& j);

}  // namespace frenzy::server

#endif  // FRENZY_SERVER_RUNTIME_STATE_H_
