// The simulator's cost: whole replays of generated workloads with fifo-static (events per second
// as a counter), and one scheduling decision of each baseline on a loaded snapshot.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <map>

#include "hardware/cluster.h"
#include "model/zoo.h"
#include "sched/job_options.h"
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
  state.counters["events/s"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
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

namespace frenzy {
namespace {

// One scheduling decision on a loaded snapshot: 2,048 GPUs (cluster2048), all free, and 1,000
// waiting jobs drawn from the generator's model mix. The target for frenzy is < 1 ms.
struct LoadedSnapshot {
  ClusterView view;
  std::vector<std::shared_ptr<const JobOptions>> tables;
  std::vector<JobView> jobs;
  explicit LoadedSnapshot(OptionKind kind) {
    const Cluster c = *ResolveCluster("cluster2048", GpuCatalog::Default());
    for (const auto& node : c.nodes) {
      auto it = std::find(view.types.begin(), view.types.end(), node.gpu);
      if (it == view.types.end()) {
        view.types.push_back(node.gpu);
        view.gpu_memory_bytes.push_back(GpuCatalog::Default().Find(node.gpu)->memory_bytes);
        view.gpus_per_node.push_back(node.gpus);
        it = view.types.end() - 1;
      }
      view.nodes.push_back(
          NodeView{static_cast<int>(it - view.types.begin()), node.gpus, node.gpus, true});
    }
    GeneratorOptions g;
    g.jobs = 1000;
    g.seed = 3;
    Workload w = *GenerateWorkload(g, c, GpuCatalog::Default());
    static OptionCache cache(c, GpuCatalog::Default(), 0.10);
    for (size_t i = 0; i < w.jobs.size(); ++i) {
      JobSpec spec;
      spec.model = *ResolveModel(w.jobs[i].model);
      spec.tokens = w.jobs[i].tokens;
      spec.global_batch = w.jobs[i].global_batch;
      spec.seq_len = w.jobs[i].seq_len;
      tables.push_back(*cache.Get(w.jobs[i].model, spec, kind));
      JobView v;
      v.key = static_cast<int64_t>(i);
      v.id = w.jobs[i].id;
      v.submit_s = w.jobs[i].submit_s;
      v.options = tables.back().get();
      v.total_tokens = w.jobs[i].tokens;
      v.memory_factor = 1.0;
      jobs.push_back(std::move(v));
    }
  }
  Snapshot At() const {
    Snapshot s;
    s.now_s = 1e6;
    s.cluster = &view;
    s.jobs = jobs;
    s.change_seq = 1;
    return s;
  }
};

void BM_Decision1000Queued2048Gpus(benchmark::State& state, const char* policy) {
  auto p = MakePolicy(policy).value();
  static const LoadedSnapshot marp(OptionKind::kMarp), hand(OptionKind::kHand);
  const LoadedSnapshot& snap = p->options_kind() == OptionKind::kMarp ? marp : hand;
  size_t started = 0;
  for (auto _ : state) {
    Decisions d = p->Schedule(snap.At());
    started = d.start.size();
    benchmark::DoNotOptimize(d);
  }
  state.counters["started"] = static_cast<double>(started);
}
BENCHMARK_CAPTURE(BM_Decision1000Queued2048Gpus, frenzy, "frenzy")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Decision1000Queued2048Gpus, tiresias, "tiresias")
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Decision1000Queued2048Gpus, gavel, "gavel")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK_CAPTURE(BM_Decision1000Queued2048Gpus, sia, "sia")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

}  // namespace
}  // namespace frenzy
