#include "perf/mixed_perf.h"

#include <algorithm>
#include <string>

#include "model/param_count.h"

namespace frenzy {

Result<MixedPerfEstimate> PredictMixedPerf(const ModelSpec& m, const TrainingSpec& t,
                                           const ParallelPlan& p,
                                           const std::vector<StageGpus>& parts) {
  int64_t stages = 0;
  for (const StageGpus& g : parts) {
    if (g.gpu == nullptr || g.stages < 1) {
      return InvalidArgument("every part needs a GPU type and at least one stage", {},
                             "stage_gpus");
    }
    stages += g.stages;
  }
  if (stages != p.pp) {
    return InvalidArgument("names " + std::to_string(stages) + " stages; the layout has pp = " +
                               std::to_string(p.pp),
                           {}, "stage_gpus");
  }
  MixedPerfEstimate out;
  double peak_flops = 0;  // the job's GPUs' dense peaks, summed
  const int64_t ranks_per_stage = p.tp * p.dp * p.cp;
  int64_t stage = 0;
  for (const StageGpus& g : parts) {
    peak_flops += PeakTflops(*g.gpu, t.precision) * 1e12 *
                  static_cast<double>(g.stages * ranks_per_stage);
    for (int64_t k = 0; k < g.stages; ++k, ++stage) {
      ASSIGN_OR_RETURN(PerfEstimate e, PredictPerf(m, t, p, *g.gpu, g.net, nullptr, stage));
      out.stage_iteration_s.push_back(e.iteration_s);
      if (e.iteration_s > out.estimate.iteration_s) {
        out.estimate = e;
        out.slowest_stage = stage;
      }
    }
  }
  // The slowest stage sets the pace; throughput and utilisation are the whole job's.
  PerfEstimate& e = out.estimate;
  e.gpus = p.gpus();
  e.tokens_per_s_per_gpu = e.tokens_per_s / static_cast<double>(e.gpus);
  e.tflops_per_gpu = e.tokens_per_s_per_gpu * e.model_flops_per_token / 1e12;
  e.mfu = peak_flops > 0 ? e.tokens_per_s * e.model_flops_per_token / peak_flops : 0;
  return out;
}

Result<MixedDataPerfEstimate> PredictMixedDataPerf(const ModelSpec& m, const TrainingSpec& t,
                                                   const ParallelPlan& p,
                                                   const std::vector<DataGroup>& groups) {
  auto bad = [](const std::string& what) {
    return InvalidArgument(what, {}, "data_groups");
  };
  if (groups.size() < 2) return bad("a heterogeneous data-parallel job needs two groups or more");
  if (t.finetune != FineTune::kFull) {
    return bad("heterogeneous data parallelism is modelled for full training only");
  }
  if (p.ep > 1) return bad("expert parallelism inside data-parallel groups is not modelled");
  int64_t batch = 0;
  for (const DataGroup& g : groups) {
    if (g.gpu == nullptr || g.dp < 1 || g.micro_batch < 1 || g.batch < 1) {
      return bad("every group needs a GPU type, at least one replica, a micro-batch and a batch");
    }
    if (g.batch % (g.dp * g.micro_batch) != 0) {
      return bad(std::string(g.gpu->name) + "'s batch of " + std::to_string(g.batch) +
                 " is not a multiple of its " + std::to_string(g.dp) + " replicas x micro-batch " +
                 std::to_string(g.micro_batch));
    }
    batch += g.batch;
  }
  if (batch != t.global_batch) {
    return bad("the groups' batches add up to " + std::to_string(batch) +
               "; the global batch is " + std::to_string(t.global_batch));
  }
  MixedDataPerfEstimate out;
  double peak_flops = 0;
  int64_t gpus = 0;
  double slice = 0;      // the largest gradient slice one GPU exchanges across groups
  double cross_gbs = 0;  // the slowest group's per-GPU share of its node's network
  const double rank_grads = static_cast<double>(CountParams(m).total) *
                            static_cast<double>(p.MostLayersOnAStage(m.num_layers)) /
                            static_cast<double>(m.num_layers) / static_cast<double>(p.tp) *
                            GradReduceBytes(t);
  for (size_t i = 0; i < groups.size(); ++i) {
    const DataGroup& g = groups[i];
    TrainingSpec tg = t;
    tg.global_batch = g.batch;
    tg.micro_batch = g.micro_batch;
    ParallelPlan pg = p;
    pg.dp = g.dp;
    pg.distributed_optimizer = p.distributed_optimizer && g.dp > 1;
    ASSIGN_OR_RETURN(PerfEstimate e, PredictPerf(m, tg, pg, *g.gpu, g.net));
    out.group_step_s.push_back(e.iteration_s);
    if (e.iteration_s > out.estimate.iteration_s) {
      out.estimate = e;
      out.slowest_group = static_cast<int64_t>(i);
    }
    gpus += pg.gpus();
    peak_flops += PeakTflops(*g.gpu, t.precision) * 1e12 * static_cast<double>(pg.gpus());
    // After its own reduction every replica's rank holds 1 / (dp x cp) of its shard's sum.
    slice = std::max(slice, rank_grads / static_cast<double>(g.dp * p.cp));
    const double per_gpu = g.net.inter_node_gbs /
                           static_cast<double>(std::max<int64_t>(
                               1, std::min(g.net.gpus_per_node, pg.gpus())));
    cross_gbs = cross_gbs > 0 ? std::min(cross_gbs, per_gpu) : per_gpu;
  }
  // Ring all-reduce over the groups: 2 (G - 1) / G of the slice each way.
  const double n = static_cast<double>(groups.size());
  out.cross_group_s = 2.0 * (n - 1) / n * slice / (cross_gbs * 1e9);
  PerfEstimate& e = out.estimate;
  e.breakdown.dp_comm_s += out.cross_group_s;
  e.iteration_s += out.cross_group_s;
  e.gpus = gpus;
  e.tokens_per_s = static_cast<double>(t.global_batch * t.seq_len) / e.iteration_s;
  e.tokens_per_s_per_gpu = e.tokens_per_s / static_cast<double>(gpus);
  e.tflops_per_gpu = e.tokens_per_s_per_gpu * e.model_flops_per_token / 1e12;
  e.mfu = peak_flops > 0 ? e.tokens_per_s * e.model_flops_per_token / peak_flops : 0;
  return out;
}

}  // namespace frenzy
