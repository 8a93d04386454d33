// The simulator's cost: whole replays of generated workloads with fifo-static (events per second
// as a counter), and one scheduling decision of each baseline on a loaded snapshot.
#include <map>

#include <benchmark/benchmark.h>

#include "hardware/cluster.h"
#include "sched/policy.h"
#include "sim/engine.h"
#include "sim/generator.h"

namespace frenzy {
namespace {

const Workload& Generated(const Cluster& c, int64_t jobs) {
  static std::map<std::pair<std::string, int64_t>, Workload> cache;
  auto key = std::make_pair(c.name, jobs);
  auto it = cache.find(key);
  if (it == cache.end()) {
    GeneratorOptions g;
    g.jobs = jobs;
    g.load = 0.9;
    g.seed = 1;
    it = cache.emplace(key, *GenerateWorkload(g, c, GpuCatalog::Default())).first;
  }
  return it->second;
}

void BM_SimulateFifo(benchmark::State& state, const char* cluster_name) {
  const Cluster c = *ResolveCluster(cluster_name, GpuCatalog::Default());
  const Workload& w = Generated(c, state.range(0));
  OptionCache cache(c, GpuCatalog::Default(), 0.10);
  int64_t events = 0;
  for (auto _ : state) {
    auto p = MakePolicy("fifo-static").value();
    auto r = Simulate(w, c, GpuCatalog::Default(), *p, SimOptions{}, cache);
    events += r->metrics.events;
    benchmark::DoNotOptimize(r->metrics.avg_jct_s);
  }
  state.counters["events/s"] = benchmark::Counter(static_cast<double>(events),
                                                  benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(BM_SimulateFifo, cluster64, "cluster64")
    ->Arg(1000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_SimulateFifo, cluster2048, "cluster2048")
    ->Arg(1000)
    ->Arg(10000)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace frenzy
