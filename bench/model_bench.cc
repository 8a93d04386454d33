// Micro-benchmarks of the model catalog: parsing a config and counting parameters are on the
// planner's hot path (every candidate plan of every job).
#include <benchmark/benchmark.h>

#include "data/embedded.h"
#include "model/hf_config.h"
#include "model/param_count.h"
#include "model/zoo.h"

namespace frenzy {
namespace {

void BM_ParseHfConfig(benchmark::State& state) {
  auto text = FindEmbeddedFile("models/llama-3.1-405b.json");
  for (auto _ : state) {
    auto spec = ParseHfConfigText(*text, "bench");
    benchmark::DoNotOptimize(spec);
  }
}
BENCHMARK(BM_ParseHfConfig);

void BM_CountParams(benchmark::State& state) {
  auto spec = ResolveModel("llama-3.1-405b");
  for (auto _ : state) {
    auto c = CountParams(*spec);
    benchmark::DoNotOptimize(c);
  }
}
BENCHMARK(BM_CountParams);

void BM_LoadZoo(benchmark::State& state) {
  for (auto _ : state) {
    auto zoo = LoadZoo();
    benchmark::DoNotOptimize(zoo);
  }
}
BENCHMARK(BM_LoadZoo);

}  // namespace
}  // namespace frenzy

BENCHMARK_MAIN();
