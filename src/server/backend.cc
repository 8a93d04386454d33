#include "server/backend.h"

namespace frenzy::server {

const char* RunStateName(RunState s) {
  switch (s) {
    case RunState::kPending:
      return "pending";
    case RunState::kRunning:
      return "running";
    case RunState::kSucceeded:
      return "succeeded";
    case RunState::kFailed:
      return "failed";
    case RunState::kCancelled:
      return "cancelled";
    case RunState::kLost:
      return "lost";
  }
  return "lost";
}

}  // namespace frenzy::server
