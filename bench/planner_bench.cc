// Planner speed: the scheduler calls it for every job it sees. Targets: Llama-3.1-405B on the
// 2,048-GPU five-type cluster (every layout) under 100 ms; a 7B model under 5 ms.
#include <benchmark/benchmark.h>

#include "hardware/cluster.h"
#include "model/zoo.h"
#include "perf/perf_model.h"
#include "planner/planner.h"

namespace frenzy {
namespace {

void PlanOn(benchmark::State& state, const char* model, double tokens, int64_t gb, int64_t seq) {
  auto c = ResolveCluster("cluster2048", GpuCatalog::Default());
  JobSpec j;
  j.model = *ResolveModel(model);
  j.tokens = tokens;
  j.global_batch = gb;
  j.seq_len = seq;
  int64_t considered = 0;
  for (auto _ : state) {
    auto r = PlanJob(j, *c, GpuCatalog::Default(), PlannerOptions{});
    considered = r->layouts_considered;
    benchmark::DoNotOptimize(r);
  }
  state.counters["layouts"] = static_cast<double>(considered);
}

void BM_Plan405BOnCluster2048(benchmark::State& state) {
  PlanOn(state, "llama-3.1-405b", 15e12, 2048, 8192);
}
BENCHMARK(BM_Plan405BOnCluster2048)->Unit(benchmark::kMillisecond);

void BM_Plan7BOnCluster2048(benchmark::State& state) {
  PlanOn(state, "llama-2-7b", 2e12, 1024, 4096);
}
BENCHMARK(BM_Plan7BOnCluster2048)->Unit(benchmark::kMillisecond);

void BM_PerfOne(benchmark::State& state) {
  auto m = ResolveModel("llama-3.1-405b");
  TrainingSpec t;
  t.seq_len = 8192;
  t.global_batch = 2048;
  ParallelPlan p;
  p.tp = 8;
  p.pp = 16;
  p.dp = 16;
  const GpuType& g = *GpuCatalog::Default().Find("H100-80GB");
  for (auto _ : state) {
    auto e = PredictPerf(*m, t, p, g, Network{8, 50});
    benchmark::DoNotOptimize(e);
  }
}
BENCHMARK(BM_PerfOne);

}  // namespace
}  // namespace frenzy
