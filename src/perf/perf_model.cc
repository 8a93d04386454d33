#include "perf/perf_model.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "common/json_reader.h"
#include "data/embedded.h"
#include "memory/activations.h"
#include "model/param_count.h"

namespace frenzy {
namespace {

struct Calibration {
  GpuEfficiency fallback;
  std::map<std::string, GpuEfficiency> gpus;  // canonical GPU name -> efficiencies
};

const Calibration& LoadCalibration() {
  static const Calibration* kCal = [] {
    auto* cal = new Calibration;
    auto text = FindEmbeddedFile("perf_calibration.json");
    if (!text) return cal;  // built without the file: defaults
    auto doc = ParseJson(*text, "data/perf_calibration.json");
    if (!doc.ok()) return cal;
    const auto& d = *doc;
    if (d.contains("default")) {
      const auto& def = d["default"];
      cal->fallback.matmul = def.value("matmul_efficiency", 0.75);
      cal->fallback.memory = def.value("memory_efficiency", 0.85);
      cal->fallback.training_scale = def.value("training_scale", 1.0);
      cal->fallback.h0 = def.value("h0", 0.0);
    }
    if (d.contains("gpus") && d["gpus"].is_array()) {
      for (const auto& g : d["gpus"]) {
        if (!g.contains("gpu") || !g.contains("matmul_efficiency")) continue;
        GpuEfficiency e = cal->fallback;
        e.matmul = g["matmul_efficiency"].get<double>();
        e.training_scale = g.value("training_scale", cal->fallback.training_scale);
        e.h0 = g.value("h0", cal->fallback.h0);
        e.measured = true;
        cal->gpus[g["gpu"].get<std::string>()] = e;
      }
    }
    return cal;
  }();
  return *kCal;
}

double PeakTflops(const GpuType& g, Precision p) {
  switch (p) {
    case Precision::kFp32:
      return g.tf32_tflops ? *g.tf32_tflops : g.fp32_tflops;  // TF32 tensor cores when present
    case Precision::kFp16:
      return g.fp16_tflops;
    case Precision::kBf16:
    case Precision::kBf16Pure:
      return g.bf16_tflops ? *g.bf16_tflops : 0.0;
  }
  return 0;
}

// Ring collectives move 2(n-1)/n (all-reduce) or (n-1)/n (all-gather, reduce-scatter) of the
// buffer through each GPU's link (Patarasuk & Yuan 2009; NCCL's performance notes).
double AllReduceS(double bytes, int64_t n, double gbs) {
  if (n <= 1 || gbs <= 0) return 0;
  return 2.0 * static_cast<double>(n - 1) / static_cast<double>(n) * bytes / (gbs * 1e9);
}
double AllGatherS(double bytes, int64_t n, double gbs) {
  if (n <= 1 || gbs <= 0) return 0;
  return static_cast<double>(n - 1) / static_cast<double>(n) * bytes / (gbs * 1e9);
}

}  // namespace

GpuEfficiency EfficiencyOf(const GpuType& gpu) {
  const Calibration& cal = LoadCalibration();
  if (auto it = cal.gpus.find(gpu.name); it != cal.gpus.end()) return it->second;
  return cal.fallback;
}

namespace {
double FlopsPerToken(const ModelSpec& m, const ParamCounts& c, int64_t seq_len) {
  // Matmul parameters a token passes through: active parameters minus the embedding lookup
  // (no FLOPs) and norms; the LM head is a matmul even when tied.
  double matmul = static_cast<double>(c.active - c.embedding()) +
                  (m.tied_embeddings ? static_cast<double>(m.vocab_size * m.embedding_width())
                                     : 0.0);
  double attention = 12.0 * static_cast<double>(m.num_layers) *
                     static_cast<double>(m.q_size()) * static_cast<double>(seq_len);
  return 6.0 * matmul + attention;
}
}  // namespace

double ModelFlopsPerToken(const ModelSpec& m, int64_t seq_len) {
  return FlopsPerToken(m, CountParams(m, HeadKind::kDefault, /*per_layer=*/false), seq_len);
}

Result<PerfEstimate> PredictPerf(const ModelSpec& m, const TrainingSpec& t,
                                 const ParallelPlan& p, const GpuType& gpu, const Network& net,
                                 const GpuEfficiency* efficiency) {
  RETURN_IF_ERROR(ValidateLayout(m, t, p));
  double peak = PeakTflops(gpu, t.precision) * 1e12;
  if (!(peak > 0)) {
    return InvalidArgument(std::string(gpu.name) + " has no " + PrecisionName(t.precision) +
                               " tensor cores; use --precision fp16 or fp32",
                           {}, "precision");
  }
  GpuEfficiency eff = efficiency != nullptr ? *efficiency : EfficiencyOf(gpu);
  const double h_local = static_cast<double>(m.hidden_size) / static_cast<double>(p.tp);
  const double matmul_rate =
      peak * eff.matmul * eff.training_scale * h_local / (h_local + eff.h0);
  const double mem_rate = gpu.mem_bw_gbs * 1e9 * eff.memory;
  const int64_t gpus = p.gpus();
  const int64_t microbatches = MicroBatchesPerStep(t, p);
  const double tokens_per_mb = static_cast<double>(t.micro_batch * t.seq_len);
  const ParamCounts counts = CountParams(m, HeadKind::kDefault, /*per_layer=*/false);
  const double flops_per_token = FlopsPerToken(m, counts, t.seq_len);

  // Compute of one micro-batch on the most loaded stage (ceil(L / pp) layers; the head's FLOPs
  // go to the last stage, which usually holds fewer layers, so they are spread evenly).
  const double stage_layers =
      std::ceil(static_cast<double>(m.num_layers) / static_cast<double>(p.pp));
  const double stage_share = stage_layers / static_cast<double>(m.num_layers);
  const double split = static_cast<double>(p.tp * p.cp);  // TP splits matmuls, CP tokens
  double mb_flops = flops_per_token * tokens_per_mb * stage_share / split;
  // Recomputation: full repeats each layer's forward (1/3 of its FLOPs); selective repeats the
  // attention core's forward (Korthikanti et al. 2023, §5: 2.7% for GPT-3 175B); torchtitan's
  // per-op policy repeats roughly half of the matmuls' forward.
  double attention_share = 12.0 * static_cast<double>(m.num_layers * m.q_size()) *
                           static_cast<double>(t.seq_len) / flops_per_token;
  double recompute_fraction = 0;
  switch (t.recompute) {
    case Recompute::kNone:
      break;
    case Recompute::kSelective:
      recompute_fraction = attention_share / 3.0;
      break;
    case Recompute::kOp:
      recompute_fraction = (1.0 - attention_share) / 6.0;
      break;
    case Recompute::kFull:
      recompute_fraction = 1.0 / 3.0;
      break;
  }
  // Memory-bound work (norms, activations, softmax, dropout, residuals): every saved byte is
  // written once and read about three times over forward and backward.
  LayerActivations la = LayerActivationBytes(m, t, p, false);
  double layer_bytes = static_cast<double>(la.saved > 0 ? la.saved : 0);
  if (t.recompute != Recompute::kNone) {
    layer_bytes = static_cast<double>(la.recomputed + la.saved);
  }
  double mb_mem_bytes = 4.0 * layer_bytes * stage_layers;

  PerfBreakdown b;
  const double mb_compute = mb_flops / matmul_rate + mb_mem_bytes / mem_rate;
  const double mb_recompute = mb_flops * recompute_fraction / matmul_rate;
  b.compute_s = mb_compute * static_cast<double>(microbatches);
  b.recompute_s = mb_recompute * static_cast<double>(microbatches);

  const double link_gbs = gpu.link_gbs / 2.0;  // vendors quote bidirectional bandwidth
  // Ranks are laid out TP innermost, then CP, DP, PP (Megatron-LM's order): a group stays on the
  // intra-node link while the ranks it spans fit in one node, else it shares the node's network.
  const double per_gpu_net =
      net.inter_node_gbs / static_cast<double>(std::max<int64_t>(1, std::min(net.gpus_per_node, gpus)));
  auto group_gbs = [&](int64_t span) { return span <= net.gpus_per_node ? link_gbs : per_gpu_net; };

  // Tensor parallel: per layer 2 all-reduces forward and 2 backward of the layer's activations
  // (Megatron-LM; sequence parallel turns them into all-gather + reduce-scatter, same volume).
  const double e = static_cast<double>(t.act_bytes());
  if (p.tp > 1) {
    double bytes = tokens_per_mb / static_cast<double>(p.cp) * static_cast<double>(m.hidden_size) * e;
    double per_layer = 4.0 * AllReduceS(bytes, p.tp, group_gbs(p.tp));
    if (t.recompute == Recompute::kFull) per_layer *= 1.5;  // the recomputed forward repeats two
    b.tp_comm_s = per_layer * stage_layers * static_cast<double>(microbatches);
  }

  // Pipeline: bubble (p - 1) / (m v) of the ideal time (Narayanan et al. SC'21, §2.2), and the
  // sends that fill and drain it.
  const double per_mb = mb_compute + mb_recompute;
  if (p.pp > 1) {
    b.pp_bubble_s = static_cast<double>(p.pp - 1) / static_cast<double>(p.vpp) * per_mb;
    double bytes = tokens_per_mb / static_cast<double>(p.cp * (p.sequence_parallel ? p.tp : 1)) *
                   static_cast<double>(m.hidden_size) * e;
    b.pp_p2p_s = 2.0 * static_cast<double>(p.pp - 1) * bytes /
                 (group_gbs(p.tp * p.cp * p.dp * p.pp) * 1e9);
  }
  // Context parallel: ring attention passes k and v around the cp ranks, overlapped with the
  // attention compute; what does not fit under it is exposed.
  if (p.cp > 1) {
    double kv_bytes = tokens_per_mb / static_cast<double>(p.cp) *
                      static_cast<double>(2 * m.kv_size() / p.tp) * e;
    double comm = 3.0 * static_cast<double>(p.cp - 1) * kv_bytes / (group_gbs(p.tp * p.cp) * 1e9) *
                  stage_layers;
    double attn = per_mb * attention_share;
    b.cp_comm_s = std::max(0.0, comm - attn) * static_cast<double>(microbatches);
  }

  // Data parallel: gradient reduction of this rank's parameters (bf16/fp32 per framework),
  // overlapped with the last micro-batch's backward; ZeRO-3/FSDP also gathers parameters in
  // forward and backward (3x the volume), overlapped with compute.
  double rank_params = static_cast<double>(counts.total) / static_cast<double>(p.tp * p.pp);
  if (p.dp * p.cp > 1) {
    int64_t n = p.dp * p.cp;
    // Megatron reduces bf16 runs' gradients in fp32 (its main grads); the others in 16 bits.
    bool fp32_grads = t.precision == Precision::kFp32 ||
                      (t.framework == Framework::kMegatron && t.precision == Precision::kBf16);
    double grad_bytes = rank_params * (fp32_grads ? 4.0 : 2.0);
    double gbs = group_gbs(p.tp * p.cp * p.dp);
    double comm = (p.zero >= 1 || p.distributed_optimizer)
                      ? AllGatherS(grad_bytes, n, gbs) + AllGatherS(rank_params * e, n, gbs)
                      : AllReduceS(grad_bytes, n, gbs);
    if (p.zero >= 3) comm += 2.0 * AllGatherS(rank_params * e, n, gbs);
    // Overlap: buckets reduce while backward continues (PyTorch DDP, Megatron overlap-grad-
    // reduce); about the backward of one micro-batch (2/3 of its compute) hides it.
    double hide = (2.0 / 3.0) * per_mb * (p.zero >= 3 ? 1.5 : 1.0);
    b.dp_comm_s = std::max(0.0, comm - hide);
  }

  // Optimizer step: Adam reads parameters, gradients and two moments and writes three of them;
  // sharded states shrink it.
  double state_bytes = t.precision == Precision::kBf16Pure ? 2.0 : 4.0;
  double opt_bytes = rank_params * (state_bytes * 7.0);
  if (p.zero >= 1 || p.distributed_optimizer) opt_bytes /= static_cast<double>(p.dp);
  b.optimizer_s = opt_bytes / mem_rate;

  PerfEstimate out;
  out.breakdown = b;
  out.iteration_s = b.compute_s + b.recompute_s + b.tp_comm_s + b.pp_bubble_s + b.pp_p2p_s +
                    b.dp_comm_s + b.cp_comm_s + b.optimizer_s;
  out.gpus = gpus;
  double global_batch = static_cast<double>(t.global_batch > 0 ? t.global_batch
                                                                : t.micro_batch * p.dp);
  double tokens = global_batch * static_cast<double>(t.seq_len);
  out.tokens_per_s = tokens / out.iteration_s;
  out.tokens_per_s_per_gpu = out.tokens_per_s / static_cast<double>(gpus);
  out.model_flops_per_token = flops_per_token;
  out.tflops_per_gpu = out.tokens_per_s_per_gpu * flops_per_token / 1e12;
  out.mfu = out.tflops_per_gpu * 1e12 / peak;
  return out;
}

}  // namespace frenzy
