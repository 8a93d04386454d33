#include "hardware/cluster.h"

#include <gtest/gtest.h>

namespace frenzy {
namespace {

Cluster Bundled(const std::string& name) {
  auto r = ResolveCluster(name, GpuCatalog::Default());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : Cluster{};
}

Status ParseError(const std::string& text) {
  auto r = Cluster::Parse(text, "c.json", GpuCatalog::Default());
  EXPECT_FALSE(r.ok()) << text;
  return r.status();
}

TEST(Cluster, BundledClustersHaveTheAdvertisedShape) {
  Cluster lab = Bundled("lab");
  EXPECT_EQ(lab.totals().size(), 3u);
  Cluster c64 = Bundled("cluster64");
  EXPECT_EQ(c64.total_gpus(), 64);
  EXPECT_EQ(c64.totals().size(), 3u);
  Cluster c2048 = Bundled("cluster2048");
  EXPECT_EQ(c2048.total_gpus(), 2048);
  EXPECT_EQ(c2048.totals().size(), 5u);
  Cluster sia64 = Bundled("sia64");  // 16 A100-40GB + 24 V100-32GB + 24 T4
  EXPECT_EQ(sia64.total_gpus(), 64);
  EXPECT_EQ(sia64.totals().size(), 3u);
  Cluster frag = Bundled("frag64");  // 16 each of A100-40GB, V100-32GB, RTX-3090, T4
  EXPECT_EQ(frag.total_gpus(), 64);
  EXPECT_EQ(frag.totals().size(), 4u);
  for (const GpuTotal& t : frag.totals()) EXPECT_EQ(t.gpus, 16) << t.gpu;
  Cluster b200 = Bundled("b200-128");  // 16 nodes of 8 B200
  EXPECT_EQ(b200.total_gpus(), 128);
  EXPECT_EQ(b200.nodes.size(), 16u);
  EXPECT_EQ(BundledClusterNames(),
            (std::vector<std::string>{"b200-128", "cluster2048", "cluster64", "frag64", "lab",
                                      "sia64"}));
}

TEST(Cluster, GroupsExpandToNamedNodes) {
  auto r = Cluster::Parse(R"({"name": "t", "node_groups": [
      {"prefix": "a", "count": 12, "gpu": "a100", "gpus_per_node": 8, "network_gbs": 25}],
      "nodes": [{"name": "x", "gpu": "NVIDIA H100 80GB HBM3", "gpus": 2, "network_gbs": 50}]})",
                          "t.json", GpuCatalog::Default());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->nodes.size(), 13u);
  EXPECT_EQ(r->nodes[0].name, "a-00");
  EXPECT_EQ(r->nodes[11].name, "a-11");
  EXPECT_EQ(r->nodes[0].gpu, "A100-80GB");  // alias resolved to the canonical name
  EXPECT_EQ(r->nodes[12].gpu, "H100-80GB");
  EXPECT_EQ(r->total_gpus(), 98);
}

TEST(Cluster, RejectsBadFilesNamingTheField) {
  EXPECT_EQ(ParseError(R"({"name": "t"})").field(), "node_groups");
  EXPECT_EQ(ParseError(R"({"name": "t", "node_groups": [{"prefix": "a", "count": 1,
      "gpu": "Z900", "gpus_per_node": 8, "network_gbs": 25}]})").field(),
            "node_groups[0].gpu");
  EXPECT_EQ(ParseError(R"({"name": "t", "node_groups": [{"prefix": "a", "count": 0,
      "gpu": "a100", "gpus_per_node": 8, "network_gbs": 25}]})").field(),
            "node_groups[0].count");
  EXPECT_EQ(ParseError(R"({"name": "t", "node_groups": [{"prefix": "a", "count": 1,
      "gpu": "a100", "gpus_per_node": 8}]})").field(),
            "node_groups[0].network_gbs");
  EXPECT_EQ(ParseError(R"({"name": "t", "nodes": [
      {"name": "x", "gpu": "a100", "gpus": 8, "network_gbs": 25},
      {"name": "x", "gpu": "a100", "gpus": 8, "network_gbs": 25}]})").field(),
            "nodes[1].name");
  EXPECT_EQ(ParseError(R"({"name": "t", "node_groups": {}})").field(), "node_groups");
  EXPECT_EQ(ParseError(R"({"name": "t", "node_groups": [{"prefix": "a", "count": 1e12,
      "gpu": "a100", "gpus_per_node": 8, "network_gbs": 25}]})").field(),
            "node_groups[0].count");
  EXPECT_NE(ParseError("{\"name\": ").message().find("invalid JSON"), std::string::npos);
}

TEST(Cluster, UnknownBundledName) {
  auto r = ResolveCluster("no-such-cluster", GpuCatalog::Default());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cluster64"), std::string::npos);
}

}  // namespace
}  // namespace frenzy
