// Every zoo model on every bundled cluster, for every framework: the top plan's launch is
// produced, with every flag and key in the framework's pinned schema, or refused with a reason.
#include <gtest/gtest.h>

#include <map>

#include "launch/launch.h"
#include "launch/schema.h"
#include "model/zoo.h"

namespace frenzy {
namespace {

TEST(LaunchSweep, EveryZooModelOnEveryClusterIsLaunchedOrRefusedWithAReason) {
  auto zoo = LoadZoo();
  ASSERT_TRUE(zoo.ok());
  std::map<std::string, int> launched, refused, unplanned, hybrid;
  for (Launcher l : AllLaunchers()) {
    const testing::Schema schema = testing::LoadSchema(LauncherName(l));
    LaunchInput in;
    if (l == Launcher::kAccelerate || l == Launcher::kDeepSpeed) in.entry = "train.py";
    if (l == Launcher::kTorchtitan) in.config_file = "job.toml";
    for (const std::string& cname : BundledClusterNames()) {
      const Cluster c = *ResolveCluster(cname, GpuCatalog::Default());
      for (const ZooEntry& z : *zoo) {
        if (z.spec.arch == ArchKind::kEncoder) continue;  // BERT/RoBERTa: no causal-LM pretraining to launch
        JobSpec job;
        job.model = z.spec;
        job.tokens = 1e10;
        job.global_batch = 256;
        job.seq_len = 4096;
        ASSERT_TRUE(PrepareJob(l, &job).ok());
        PlannerOptions o;
        o.top = 1;
        auto r = PlanJob(job, c, GpuCatalog::Default(), o);
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        const std::string name = LauncherName(l);
        if (r->plans.empty()) {
          ++unplanned[name];
          continue;
        }
        const LaunchOutcome out = MakeLaunch(l, job, r->plans[0], c, in);
        SCOPED_TRACE(name + " " + z.spec.name + " on " + cname);
        if (const auto* no = std::get_if<Refused>(&out)) {
          EXPECT_FALSE(no->reason.empty());
          std::cout << name << " refused " << z.spec.name << " on " << cname << ": " << no->reason
                    << "\n";
          ++refused[name];
          continue;
        }
        ++launched[name];
        if (r->plans[0].shard_group > 0) ++hybrid[name];
        const Launch& x = std::get<Launch>(out);
        EXPECT_FALSE(x.version.empty());
        EXPECT_EQ(x.nodes * x.procs_per_node, r->plans[0].gpus);
        for (const auto& p : testing::Check(x, schema)) ADD_FAILURE() << p;
      }
    }
  }
  for (Launcher l : AllLaunchers()) {
    const std::string n = LauncherName(l);
    std::cout << n << ": " << launched[n] << " launched (" << hybrid[n] << " hybrid-sharded), "
              << refused[n] << " refused, " << unplanned[n] << " without a plan\n";
    EXPECT_GT(launched[n], 0) << n;  // the sweep reached every adapter
  }
}

}  // namespace
}  // namespace frenzy
