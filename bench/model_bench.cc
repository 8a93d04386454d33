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

// Parsing every zoo file, as the first lookup of a process does.
void BM_ParseWholeZoo(benchmark::State& state) {
  std::vector<std::string_view> texts;
  for (const auto& f : EmbeddedFiles()) {
    if (f.path.starts_with("models/")) texts.push_back(f.contents);
  }
  for (auto _ : state) {
    for (auto text : texts) {
      auto spec = ParseHfConfigText(text, "bench");
      benchmark::DoNotOptimize(spec);
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(texts.size()));
}
BENCHMARK(BM_ParseWholeZoo);

// A lookup by name after the zoo is cached (what every CLI call and job submission does).
void BM_ResolveZooModel(benchmark::State& state) {
  (void)ResolveModel("gpt2");
  for (auto _ : state) {
    auto spec = ResolveModel("llama-3.1-405b");
    benchmark::DoNotOptimize(spec);
  }
}
BENCHMARK(BM_ResolveZooModel);

}  // namespace
}  // namespace frenzy

BENCHMARK_MAIN();
