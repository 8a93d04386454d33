// Placement: which nodes a gang of GPUs goes to. Shared by every policy.
//
// Rules (the usual ones for distributed training): all GPUs of one job are of one type; a
// tensor-parallel group never spans nodes (each node's share is a multiple of TP); fewest nodes
// first; a job that fits in one node goes to the node with the least free GPUs that holds it
// (best fit, keeping whole nodes free for big jobs).
#ifndef FRENZY_SCHED_PLACEMENT_H_
#define FRENZY_SCHED_PLACEMENT_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "sched/policy.h"

namespace frenzy {

// Free GPUs per node, copied from a snapshot; a policy reserves on it while it plans a round.
class FreeMap {
 public:
  explicit FreeMap(const ClusterView& cluster);
  int64_t FreeOfType(int type) const { return free_of_type_[static_cast<size_t>(type)]; }
  // Reserves `gpus` GPUs of `type` with TP groups of `tp` GPUs; nullopt (and nothing reserved)
  // when it cannot.
  std::optional<std::vector<std::pair<int, int64_t>>> Place(int type, int64_t gpus, int64_t tp);
  // Returns a placement's GPUs (e.g. of a job the policy decided to stop); GPUs on a node that is
  // down stay unavailable (Take and TryTake skip them alike).
  void Release(const std::vector<std::pair<int, int64_t>>& placement);
  // Takes exactly these GPUs (REQUIRES: they are free), e.g. to undo a Release.
  void Take(const std::vector<std::pair<int, int64_t>>& placement);
  // Takes these GPUs if they are all free; false (and nothing taken) otherwise.
  bool TryTake(const std::vector<std::pair<int, int64_t>>& placement);

 private:
  const ClusterView& cluster_;
  std::vector<int64_t> free_;          // per node
  std::vector<int64_t> free_of_type_;  // per type
  std::vector<std::vector<int>> nodes_of_type_;
};

}  // namespace frenzy

#endif  // FRENZY_SCHED_PLACEMENT_H_
