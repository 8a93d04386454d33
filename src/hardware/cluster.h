// Cluster: the nodes, their GPUs and the network between them.
//
// A cluster file (data/clusters/*.json or a user's file) lists node groups — `count` identical
// nodes named `<prefix>-NN`, each with `gpus_per_node` GPUs of one catalog type and an
// inter-node network bandwidth — and/or explicit nodes. Parsing resolves GPU names through the
// catalog (aliases allowed) and rejects bad files with the file, the entry and the field.
// A Cluster is an immutable value; it knows nothing of jobs.
#ifndef FRENZY_HARDWARE_CLUSTER_H_
#define FRENZY_HARDWARE_CLUSTER_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "hardware/gpu.h"

namespace frenzy {

struct NodeGroup {
  std::string prefix;
  int64_t count = 0;
  std::string gpu;  // canonical catalog name
  int64_t gpus_per_node = 0;
  double network_gbs = 0;  // per-node inter-node bandwidth, GB/s
  double host_memory_gib = 0;  // system memory per node (0: unknown; offload is then not planned)
};

struct Node {
  std::string name;
  std::string gpu;  // canonical catalog name
  int64_t gpus = 0;
  double network_gbs = 0;
  double host_memory_gib = 0;  // system memory (0: unknown)
};

struct GpuTotal {
  std::string gpu;
  int64_t nodes = 0;
  int64_t gpus = 0;
};

struct Cluster {
  std::string name;
  std::string description;
  std::vector<NodeGroup> groups;  // as written (explicit nodes are not grouped)
  std::vector<Node> nodes;        // every node, groups expanded, in file order

  int64_t total_gpus() const;
  // Per GPU type, in order of first appearance.
  std::vector<GpuTotal> totals() const;

  nlohmann::json ToJson(const GpuCatalog& catalog) const;

  static Result<Cluster> Parse(std::string_view text, const std::string& where,
                               const GpuCatalog& catalog);
};

// Names of the clusters compiled into the binary (data/clusters/*.json), sorted.
std::vector<std::string> BundledClusterNames();

// A bundled cluster by name, or a cluster file by path.
Result<Cluster> ResolveCluster(const std::string& name_or_path, const GpuCatalog& catalog);

}  // namespace frenzy

#endif  // FRENZY_HARDWARE_CLUSTER_H_
