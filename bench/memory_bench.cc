// MARP speed: one prediction, and a sweep of every layout of Llama-3.1-405B up to 4,096 GPUs
// (the planner's inner loop). Targets: under 2 us per prediction, the sweep under 50 ms.
#include <benchmark/benchmark.h>

#include "memory/memory_model.h"
#include "model/zoo.h"

namespace frenzy {
namespace {

// Llama-3.1-405B as trained at scale: TP 8 x PP 16 x DP 16, sequence parallel, selective
// recomputation, distributed optimizer, 8K sequences.
void PredictLarge(benchmark::State& state, StageDetail detail) {
  auto m = ResolveModel("llama-3.1-405b");
  TrainingSpec t;
  t.seq_len = 8192;
  t.global_batch = 2048;
  t.recompute = Recompute::kSelective;
  ParallelPlan p;
  p.tp = 8;
  p.pp = 16;
  p.dp = 16;
  p.sequence_parallel = true;
  p.distributed_optimizer = true;
  for (auto _ : state) {
    auto e = PredictMemory(*m, t, p, detail);
    benchmark::DoNotOptimize(e);
  }
}

void BM_PredictOne(benchmark::State& state) { PredictLarge(state, StageDetail::kAll); }
BENCHMARK(BM_PredictOne);

void BM_PredictOneWorstStages(benchmark::State& state) {
  PredictLarge(state, StageDetail::kWorst);
}
BENCHMARK(BM_PredictOneWorstStages);

// Every TP x PP x DP x CP x ZeRO x recompute x micro-batch combination with at most 4,096
// GPUs that divides the model (TP within a node).
void BM_Sweep405B(benchmark::State& state) {
  auto m = ResolveModel("llama-3.1-405b");
  int64_t layouts = 0;
  for (auto _ : state) {
    layouts = 0;
    int64_t best = INT64_MAX;
    for (int64_t tp : {1, 2, 4, 8}) {
      for (int64_t pp : {1, 2, 3, 6, 7, 9, 14, 18, 21, 42, 63, 126}) {
        for (int64_t cp : {1, 2, 4, 8}) {
          for (int64_t dp = 1; tp * pp * cp * dp <= 4096; dp *= 2) {
            for (int zero : {0, 1, 2, 3}) {
              for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
                for (int64_t mb : {1, 2, 4}) {
                  TrainingSpec t;
                  t.seq_len = 8192;
                  t.micro_batch = mb;
                  t.framework = Framework::kDeepSpeed;
                  t.recompute = rc;
                  t.global_batch = 4096 * mb;
                  ParallelPlan p;
                  p.tp = tp;
                  p.pp = pp;
                  p.cp = cp;
                  p.dp = dp;
                  p.zero = zero;
                  auto e = PredictMemory(*m, t, p, StageDetail::kWorst);
                  if (e.ok()) best = std::min(best, e->device_bytes);
                  ++layouts;
                }
              }
            }
          }
        }
      }
    }
    benchmark::DoNotOptimize(best);
  }
  state.counters["layouts"] = static_cast<double>(layouts);
  state.counters["ns_per_layout"] = benchmark::Counter(
      static_cast<double>(layouts), benchmark::Counter::kIsIterationInvariantRate |
                                        benchmark::Counter::kInvert);
}
BENCHMARK(BM_Sweep405B)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace frenzy
