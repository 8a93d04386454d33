#include "sched/placement.h"

#include <algorithm>

namespace frenzy {

FreeMap::FreeMap(const ClusterView& cluster)
    : cluster_(cluster),
      free_(cluster.nodes.size(), 0),
      free_of_type_(cluster.types.size(), 0),
      nodes_of_type_(cluster.types.size()) {
  for (size_t i = 0; i < cluster.nodes.size(); ++i) {
    const NodeView& n = cluster.nodes[i];
    if (n.type < 0 || static_cast<size_t>(n.type) >= cluster.types.size()) continue;
    nodes_of_type_[static_cast<size_t>(n.type)].push_back(static_cast<int>(i));
    if (!n.up) continue;
    free_[i] = n.free;
    free_of_type_[static_cast<size_t>(n.type)] += n.free;
  }
}

std::optional<std::vector<std::pair<int, int64_t>>> FreeMap::Place(int type, int64_t gpus,
                                                                   int64_t tp) {
  if (type < 0 || static_cast<size_t>(type) >= nodes_of_type_.size() || gpus < 1) {
    return std::nullopt;
  }
  if (tp < 1) tp = 1;
  if (free_of_type_[static_cast<size_t>(type)] < gpus) return std::nullopt;
  const auto& nodes = nodes_of_type_[static_cast<size_t>(type)];
  std::vector<std::pair<int, int64_t>> placement;
  // One node if possible: the fullest node that still holds the job (best fit).
  int best = -1;
  for (int n : nodes) {
    int64_t f = free_[static_cast<size_t>(n)];
    if (f >= gpus && (best < 0 || f < free_[static_cast<size_t>(best)])) best = n;
  }
  if (best >= 0) {
    placement.emplace_back(best, gpus);
  } else {
    // Several nodes: the freest first (fewest nodes), each share a multiple of TP.
    std::vector<int> order(nodes.begin(), nodes.end());
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return free_[static_cast<size_t>(a)] > free_[static_cast<size_t>(b)];
    });
    int64_t left = gpus;
    for (int n : order) {
      if (left == 0) break;
      int64_t take = std::min(left, free_[static_cast<size_t>(n)]);
      take -= take % tp;
      if (take <= 0) continue;
      placement.emplace_back(n, take);
      left -= take;
    }
    if (left > 0) return std::nullopt;
  }
  for (const auto& [n, g] : placement) free_[static_cast<size_t>(n)] -= g;
  free_of_type_[static_cast<size_t>(type)] -= gpus;
  return placement;
}

void FreeMap::Release(const std::vector<std::pair<int, int64_t>>& placement) {
  for (const auto& [n, g] : placement) {
    if (!cluster_.nodes[static_cast<size_t>(n)].up) continue;  // a down node's GPUs stay out
    free_[static_cast<size_t>(n)] += g;
    free_of_type_[static_cast<size_t>(cluster_.nodes[static_cast<size_t>(n)].type)] += g;
  }
}

void FreeMap::Take(const std::vector<std::pair<int, int64_t>>& placement) {
  for (const auto& [n, g] : placement) {
    if (!cluster_.nodes[static_cast<size_t>(n)].up) continue;  // as Release
    free_[static_cast<size_t>(n)] -= g;
    free_of_type_[static_cast<size_t>(cluster_.nodes[static_cast<size_t>(n)].type)] -= g;
  }
}

bool FreeMap::TryTake(const std::vector<std::pair<int, int64_t>>& placement) {
  for (const auto& [n, g] : placement) {
    if (n < 0 || static_cast<size_t>(n) >= free_.size()) return false;
    if (cluster_.nodes[static_cast<size_t>(n)].up && free_[static_cast<size_t>(n)] < g) return false;
  }
  Take(placement);
  return true;
}

}  // namespace frenzy
