// The throughput of one job over several GPU types (issue 19), from PredictPerf per part:
//  * a heterogeneous pipeline: consecutive stages on one type each, the job at the slowest
//    stage's pace;
//  * heterogeneous data parallelism: groups of data-parallel replicas, one type each, every group
//    with its own share of the global batch, micro-batch and accumulation; each group reduces its
//    gradients inside itself (PredictPerf's data-parallel term over its replicas), then the
//    groups' sums are all-reduced across groups, weighted by their share of the batch, over the
//    slowest group's per-GPU network share, not hidden behind compute (the groups finish
//    backward at different moments). The job runs at the slowest group's step plus that
//    exchange. docs/heterogeneous.md derives both.
#ifndef FRENZY_PERF_MIXED_PERF_H_
#define FRENZY_PERF_MIXED_PERF_H_

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "hardware/gpu.h"
#include "memory/training.h"
#include "model/model_spec.h"
#include "perf/perf_model.h"

namespace frenzy {

// A heterogeneous pipeline (issue 19): consecutive stages on one GPU type each, first to last.
struct StageGpus {
  const GpuType* gpu = nullptr;
  Network net;  // the links of that type's nodes
  int64_t stages = 0;
};
struct MixedPerfEstimate {
  // At the slowest stage's pace (every stage computed on its own type, with its own layers),
  // with tokens/s, TFLOP/s per GPU and MFU over the whole job (MFU against the summed peaks).
  PerfEstimate estimate;
  std::vector<double> stage_iteration_s;  // each stage's pace
  int64_t slowest_stage = 0;
};
// REQUIRES: as PredictPerf. The parts' stages must add up to plan.pp.
Result<MixedPerfEstimate> PredictMixedPerf(const ModelSpec& model, const TrainingSpec& train,
                                           const ParallelPlan& plan,
                                           const std::vector<StageGpus>& parts);

// One group of a heterogeneous data-parallel job: `dp` replicas of the job's model-parallel
// layout (tp x pp x cp GPUs each) on one GPU type, taking `batch` sequences of every global
// batch as micro-batches of `micro_batch` (accumulation: batch / (dp x micro_batch)).
struct DataGroup {
  const GpuType* gpu = nullptr;
  Network net;
  int64_t dp = 1;
  int64_t micro_batch = 1;
  int64_t batch = 0;
  int64_t accumulation() const { return batch / (dp * micro_batch); }
};
struct MixedDataPerfEstimate {
  // The job: the slowest group's step plus the cross-group exchange; tokens/s, TFLOP/s per GPU
  // and MFU over all its GPUs (MFU against the summed peaks); the breakdown is the slowest
  // group's with the exchange added to dp_comm_s.
  PerfEstimate estimate;
  std::vector<double> group_step_s;  // each group's own step (without the exchange)
  double cross_group_s = 0;          // the exchange between groups
  int64_t slowest_group = 0;
};
// REQUIRES: as PredictPerf; `plan` gives the replicas' layout (tp, pp, cp, stage split, ZeRO
// stage, distributed optimizer: sharded inside each group), its dp is ignored. The groups'
// batches must add up to train.global_batch, each a multiple of its dp x micro_batch; errors
// name "data_groups".
Result<MixedDataPerfEstimate> PredictMixedDataPerf(const ModelSpec& model,
                                                   const TrainingSpec& train,
                                                   const ParallelPlan& plan,
                                                   const std::vector<DataGroup>& groups);

}  // namespace frenzy

#endif  // FRENZY_PERF_MIXED_PERF_H_
