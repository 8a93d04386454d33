#include "hardware/cluster.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "common/json_reader.h"
#include "common/strings.h"
#include "data/embedded.h"

namespace frenzy {
namespace {

// Limits that catch typos (a count of 1e9) before they become huge allocations.
constexpr int64_t kMaxNodesPerGroup = 100000;
constexpr int64_t kMaxGpusPerNode = 64;

std::string NodeName(const std::string& prefix, int64_t i, int64_t count) {
  std::string num = std::to_string(i);
  std::string last = std::to_string(count - 1);
  if (num.size() < last.size()) num.insert(0, last.size() - num.size(), '0');
  return prefix + "-" + num;
}

Result<std::string> ResolveGpu(JsonReader& r, const std::string& field, const std::string& gpu,
                               const GpuCatalog& catalog) {
  auto found = catalog.Lookup(gpu);
  if (!found.ok()) {
    r.Error(field, found.status().message());
    return r.Finish();
  }
  return (*found)->name;
}

}  // namespace

int64_t Cluster::total_gpus() const {
  int64_t n = 0;
  for (const auto& node : nodes) n += node.gpus;
  return n;
}

std::vector<GpuTotal> Cluster::totals() const {
  std::vector<GpuTotal> out;
  for (const auto& node : nodes) {
    auto it = std::find_if(out.begin(), out.end(), [&](const GpuTotal& t) {
      return t.gpu == node.gpu;
    });
    if (it == out.end()) {
      out.push_back({node.gpu, 0, 0});
      it = out.end() - 1;
    }
    it->nodes += 1;
    it->gpus += node.gpus;
  }
  return out;
}

nlohmann::json Cluster::ToJson(const GpuCatalog& catalog) const {
  nlohmann::json j;
  j["name"] = name;
  if (!description.empty()) j["description"] = description;
  j["total_gpus"] = total_gpus();
  j["total_nodes"] = nodes.size();
  auto& types = j["gpu_types"] = nlohmann::json::array();
  for (const auto& t : totals()) {
    const GpuType* g = catalog.Find(t.gpu);
    types.push_back({{"gpu", t.gpu},
                     {"nodes", t.nodes},
                     {"gpus", t.gpus},
                     {"memory_gib", g ? g->memory_gib : 0.0}});
  }
  auto& groups_j = j["node_groups"] = nlohmann::json::array();
  for (const auto& g : groups) {
    groups_j.push_back({{"prefix", g.prefix},
                        {"count", g.count},
                        {"gpu", g.gpu},
                        {"gpus_per_node", g.gpus_per_node},
                        {"network_gbs", g.network_gbs},
                        {"host_memory_gib", g.host_memory_gib}});
  }
  auto& nodes_j = j["nodes"] = nlohmann::json::array();
  for (const auto& n : nodes) {
    nodes_j.push_back(
        {{"name", n.name}, {"gpu", n.gpu}, {"gpus", n.gpus}, {"network_gbs", n.network_gbs},
         {"host_memory_gib", n.host_memory_gib}});
  }
  return j;
}

namespace {
// A node's optional system memory, GiB: positive and at most 64 TiB.
double HostMemory(JsonReader& r) {
  if (!r.HasValue("host_memory_gib")) return 0;
  auto v = r.OptDouble("host_memory_gib");
  if (!v || !(*v > 0 && *v <= 65536)) {
    r.Error("host_memory_gib", "must be a number of GiB in (0, 65536]");
    return 0;
  }
  return *v;
}
}  // namespace

Result<Cluster> Cluster::Parse(std::string_view text, const std::string& where,
                               const GpuCatalog& catalog) {
  ASSIGN_OR_RETURN(nlohmann::json doc, ParseJson(text, where));
  JsonReader top(doc, where);
  Cluster c;
  c.name = top.String("name");
  c.description = top.String("description", "");
  bool has_groups = top.HasValue("node_groups");
  bool has_nodes = top.HasValue("nodes");
  if (!has_groups && !has_nodes) top.Error("node_groups", "a cluster needs node_groups or nodes");
  if (has_groups && !doc["node_groups"].is_array()) top.Error("node_groups", "must be a list");
  if (has_nodes && !doc["nodes"].is_array()) top.Error("nodes", "must be a list");
  RETURN_IF_ERROR(top.Finish());

  std::set<std::string> names;
  auto add_node = [&](Node node, JsonReader& r, const char* field) -> Status {
    if (!names.insert(node.name).second) {
      r.Error(field, "duplicate node name '" + node.name + "'");
      return r.Finish();
    }
    c.nodes.push_back(std::move(node));
    return Status::Ok();
  };

  if (has_groups) {
    const auto& groups = doc["node_groups"];
    for (size_t i = 0; i < groups.size(); ++i) {
      JsonReader r(groups[i], where, "node_groups[" + std::to_string(i) + "].");
      NodeGroup g;
      g.prefix = r.String("prefix");
      g.count = r.IntAtLeast("count", 1);
      std::string gpu = r.String("gpu");
      g.gpus_per_node = r.IntAtLeast("gpus_per_node", 1);
      g.network_gbs = r.Double("network_gbs");
      if (r.HasValue("network_gbs") && !(g.network_gbs > 0)) {
        r.Error("network_gbs", "must be positive");
      }
      g.host_memory_gib = HostMemory(r);
      if (g.count > kMaxNodesPerGroup) {
        r.Error("count", "implausibly large (at most " + std::to_string(kMaxNodesPerGroup) + ")");
      }
      if (g.gpus_per_node > kMaxGpusPerNode) {
        r.Error("gpus_per_node",
                "implausibly large (at most " + std::to_string(kMaxGpusPerNode) + ")");
      }
      if (r.HasValue("prefix") && g.prefix.empty()) r.Error("prefix", "must not be empty");
      RETURN_IF_ERROR(r.Finish());
      ASSIGN_OR_RETURN(g.gpu, ResolveGpu(r, "gpu", gpu, catalog));
      for (int64_t n = 0; n < g.count; ++n) {
        RETURN_IF_ERROR(add_node({NodeName(g.prefix, n, g.count), g.gpu, g.gpus_per_node,
                                  g.network_gbs, g.host_memory_gib},
                                 r, "prefix"));
      }
      c.groups.push_back(std::move(g));
    }
  }
  if (has_nodes) {
    const auto& nodes = doc["nodes"];
    for (size_t i = 0; i < nodes.size(); ++i) {
      JsonReader r(nodes[i], where, "nodes[" + std::to_string(i) + "].");
      Node node;
      node.name = r.String("name");
      std::string gpu = r.String("gpu");
      node.gpus = r.IntAtLeast("gpus", 1);
      node.network_gbs = r.Double("network_gbs");
      if (r.HasValue("network_gbs") && !(node.network_gbs > 0)) {
        r.Error("network_gbs", "must be positive");
      }
      node.host_memory_gib = HostMemory(r);
      if (node.gpus > kMaxGpusPerNode) r.Error("gpus", "implausibly large");
      if (r.HasValue("name") && node.name.empty()) r.Error("name", "must not be empty");
      RETURN_IF_ERROR(r.Finish());
      ASSIGN_OR_RETURN(node.gpu, ResolveGpu(r, "gpu", gpu, catalog));
      RETURN_IF_ERROR(add_node(std::move(node), r, "name"));
    }
  }
  if (c.nodes.empty()) return InvalidArgument("the cluster has no nodes", where, "node_groups");
  return c;
}

std::vector<std::string> BundledClusterNames() {
  std::vector<std::string> out;
  for (const auto& f : EmbeddedFiles()) {
    if (f.path.starts_with("clusters/") && f.path.ends_with(".json")) {
      std::string_view base = f.path.substr(9);
      out.emplace_back(base.substr(0, base.size() - 5));
    }
  }
  return out;
}

Result<Cluster> ResolveCluster(const std::string& name_or_path, const GpuCatalog& catalog) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(name_or_path, ec)) {
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(name_or_path));
    return Cluster::Parse(text, name_or_path, catalog);
  }
  if (auto text = FindEmbeddedFile("clusters/" + ToLower(name_or_path) + ".json")) {
    return Cluster::Parse(*text, "data/clusters/" + ToLower(name_or_path) + ".json", catalog);
  }
  auto names = BundledClusterNames();
  std::string msg = "unknown cluster: not a bundled name (" + Join(names, ", ") +
                    ") or an existing file";
  return NotFound(msg, name_or_path, "cluster");
}

}  // namespace frenzy
