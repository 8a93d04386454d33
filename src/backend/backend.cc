#include "backend/backend.h"

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

const char* FailureKindName(FailureKind k) {
  switch (k) {
    case FailureKind::kNone:
      return "none";
    case FailureKind::kOutOfMemory:
      return "out_of_memory";
    case FailureKind::kNodeLost:
      return "node_lost";
    case FailureKind::kCrashed:
      return "crashed";
  }
  return "crashed";
}

}  // namespace frenzy::server
