#include <fmt/format.h>
#include "perf/perf_model.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "common/json_reader.h"
#include "data/embedded.h"
#include "memory/activations.h"
#include "memory/finetune.h"
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
        e.fp8_matmul = g.value("fp8_matmul_efficiency", 0.0);
        e.measured = true;
        cal->gpus[g["gpu"].get<std::string>()] = e;
      }
    }
    return cal;
  }();
  return *kCal;
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

double GradReduceBytes(const TrainingSpec& t) {
  const bool fp32_grads = t.precision == Precision::kFp32 ||
                          (t.framework == Framework::kMegatron &&
                           (t.precision == Precision::kBf16 || t.fp8()));
  return fp32_grads ? 4.0 : 2.0;
}

double PeakTflops(const GpuType& g, Precision p) {
  switch (p) {
    case Precision::kFp32:
      return g.tf32_tflops ? *g.tf32_tflops : g.fp32_tflops;  // TF32 tensor cores when present
    case Precision::kFp16:
      return g.fp16_tflops;
    case Precision::kBf16:
    case Precision::kBf16Pure:
    case Precision::kFp8:  // the bf16 parts; the FP8 linears use Fp8Tflops
      return g.bf16_tflops ? *g.bf16_tflops : 0.0;
  }
  return 0;
}

GpuEfficiency EfficiencyOf(const GpuType& gpu) {
  const Calibration& cal = LoadCalibration();
  if (auto it = cal.gpus.find(gpu.name); it != cal.gpus.end()) return it->second;
  return cal.fallback;
}

namespace {
// Matmul parameters a token passes through: active parameters minus the embedding lookup
// (no FLOPs) and norms; the LM head is a matmul even when tied.
double MatmulParams(const ModelSpec& m, const ParamCounts& c) {
  return static_cast<double>(c.active - c.embedding()) +
         (m.tied_embeddings ? static_cast<double>(m.vocab_size * m.embedding_width()) : 0.0);
}
double AttentionFlopsPerToken(const ModelSpec& m, int64_t seq_len) {
  return 12.0 * static_cast<double>(m.num_layers) * static_cast<double>(m.q_size()) *
         static_cast<double>(seq_len);
}
double FlopsPerToken(const ModelSpec& m, const ParamCounts& c, int64_t seq_len) {
  return 6.0 * MatmulParams(m, c) + AttentionFlopsPerToken(m, seq_len);
}
}  // namespace

double ModelFlopsPerToken(const ModelSpec& m, int64_t seq_len) {
  return FlopsPerToken(m, CountParams(m, HeadKind::kDefault, /*per_layer=*/false), seq_len);
}

namespace {

// What the terms of one iteration's time share.
struct PerfInputs {
  double peak = 0;         // dense peak FLOP/s at the job's precision
  double matmul_rate = 0;  // achievable matmul FLOP/s in training
  double mem_rate = 0;     // achievable bytes/s of elementwise kernels
  int64_t gpus = 0;
  int64_t microbatches = 1;
  double tokens_per_mb = 0;
  ParamCounts counts;
  double flops_per_token = 0;
  // Of the matmul FLOPs, the forward's share: 1/3 when every weight is trained (forward,
  // input gradient, weight gradient), about 1/2 when the base is frozen (no weight gradient).
  double matmul_fwd_share = 1.0 / 3.0;
  double trained_params = 0;  // parameters with gradients and optimizer state (whole model)
  // MoE: the routed experts' parameters (whole model; in counts.total) and the stage's MoE
  // layers. Expert parallelism splits the experts over ep x etp ranks, whose gradients are
  // reduced over the expert-data-parallel ranks (tp x dp x cp / (etp x ep)).
  double expert_params = 0;
  double trained_experts = 0;    // of them, trained (full training: all)
  double expert_layer_params = 0;  // one expert of one layer
  double stage_moe_layers = 0;
  double routed_per_token = 0;   // rows the experts compute per token (top-k x capacity)
  double grad_bytes = 2;      // bytes of a gradient element in the data-parallel reduction
  double state_bytes = 4;     // bytes of a parameter the optimizer step reads (per state)
  double dequant_bytes = 0;   // QLoRA: bytes moved to dequantise the stage's NF4 weights once
  // Layers of the most loaded stage: ceil(L / pp), or the largest of an uneven split.
  double stage_layers = 0;
  // With an uneven split, that stage's share of the layers (its share of the layers'
  // parameters); 0 for an even one, whose stages hold 1 / pp each.
  double uneven_share = 0;
  double head_flops = 0;  // of flops_per_token, the output layer's (on the last stage)
  bool head_on_stage = true;  // the stage timed holds the output layer
  // Of the layers, those recomputed: all, or 1/N when every Nth is checkpointed (torchtitan's
  // layer-wise AC).
  double recompute_share = 1;
  double offloaded_act_bytes = 0;  // activation offloading: bytes a micro-batch sends to the host
  double attention_share = 0;  // of the model FLOPs
  double e = 2;                // bytes per activation element
  double gather_e = 2;         // bytes per weight element in parameter all-gathers
  double fp8_cast_bytes = 0;   // FP8: bytes the casts move per micro-batch on the stage
  double mb_compute = 0;       // one micro-batch's forward + backward on the stage
  double mb_recompute = 0;     // ... and its recomputation
  double per_mb() const { return mb_compute + mb_recompute; }
};

// Recomputation: full repeats each layer's forward (1/3 of its FLOPs when every weight is
// trained); selective repeats the attention core's forward (Korthikanti et al. 2023, §5: 2.7%
// for GPT-3 175B); torchtitan's per-op policy repeats roughly half of the matmuls' forward.
double RecomputeFraction(Recompute r, double attention_share, double matmul_fwd_share) {
  const double matmul_fwd = (1.0 - attention_share) * matmul_fwd_share;
  switch (r) {
    case Recompute::kNone:
      return 0;
    case Recompute::kSelective:
      return attention_share / 3.0;
    case Recompute::kOp:
      return matmul_fwd / 2.0;
    case Recompute::kFull:
      return attention_share / 3.0 + matmul_fwd;
  }
  return 0;
}

// One micro-batch's compute on the most loaded stage: matmuls at the matmul rate plus the
// memory-bound work at the memory rate, and its recomputation.
void MicroBatchCompute(const ModelSpec& m, const TrainingSpec& t, const ParallelPlan& p,
                       PerfInputs& in) {
  // The last stage holds the output layer besides its layers (Megatron-LM's even split): its
  // FLOPs set the pace.
  const double layer_flops = (in.flops_per_token - in.head_flops) / static_cast<double>(m.num_layers);
  const double split = static_cast<double>(p.tp * p.cp);  // TP splits matmuls, CP tokens
  // Capacity-factor routing pads the experts' inputs to capacity (cf > 1) or drops what is
  // over it (cf < 1): their FLOPs change by cf - 1 (not model FLOPs).
  const double padded = m.moe.enabled()
                            ? in.routed_per_token - static_cast<double>(m.moe.experts_per_token)
                            : 0.0;
  const double padding = 6.0 * in.expert_layer_params * padded * in.stage_moe_layers;
  double mb_flops =
      (layer_flops * in.stage_layers + (in.head_on_stage ? in.head_flops : 0.0) + padding) *
      in.tokens_per_mb / split;
  // Memory-bound work (norms, activations, softmax, dropout, residuals): every saved byte is
  // written once and read about three times over forward and backward.
  LayerActivations la = LayerActivationBytes(m, t, p, false);
  double layer_bytes = static_cast<double>(la.saved > 0 ? la.saved : 0);
  if (t.offload_activations) {
    // All but the stash (MARP's account: the last kOffloadStash layer inputs, or one layer).
    const bool inputs_only = t.recompute == Recompute::kFull && t.recompute_every <= 1;
    const double stash =
        layer_bytes * (inputs_only ? std::min<double>(in.stage_layers, kOffloadStash) : 1.0);
    in.offloaded_act_bytes = std::max(0.0, layer_bytes * in.stage_layers - stash);
  }
  const double share = in.recompute_share;
  if (t.recompute != Recompute::kNone) {
    layer_bytes = static_cast<double>(la.recomputed + la.saved);
    if (t.recompute_every > 1) {
      TrainingSpec plain = t;
      plain.recompute = Recompute::kNone;
      plain.recompute_every = 1;
      const double kept = static_cast<double>(LayerActivationBytes(m, plain, p, false).saved);
      layer_bytes = share * layer_bytes + (1.0 - share) * kept;
    }
  }
  double mb_mem_bytes = 4.0 * layer_bytes * in.stage_layers;
  // QLoRA dequantises each NF4 weight before each matmul that uses it: forward and the input
  // gradient's, and once more when the forward is recomputed (bitsandbytes MatMul4Bit).
  const bool refwd = RecomputesLayerForward(t.recompute);
  in.mb_compute = mb_flops / in.matmul_rate +
                  (mb_mem_bytes + 2.0 * in.dequant_bytes + in.fp8_cast_bytes) / in.mem_rate;
  in.mb_recompute =
      mb_flops * share * RecomputeFraction(t.recompute, in.attention_share, in.matmul_fwd_share) /
          in.matmul_rate +
      (refwd ? share * in.dequant_bytes / in.mem_rate : 0.0);
}

// Ranks are laid out TP innermost, then CP, DP, PP (Megatron-LM's order): a group stays on the
// intra-node link while the ranks it spans fit in one node, else it shares the node's network.
struct Links {
  double link_gbs = 0;     // intra-node, one direction
  double per_gpu_net = 0;  // a GPU's share of its node's network
  int64_t gpus_per_node = 8;
  double GroupGbs(int64_t span) const { return span <= gpus_per_node ? link_gbs : per_gpu_net; }
};

Links MakeLinks(const GpuType& gpu, const Network& net, int64_t gpus) {
  Links l;
  l.link_gbs = gpu.link_gbs / 2.0;  // vendors quote bidirectional bandwidth
  l.per_gpu_net = net.inter_node_gbs /
                  static_cast<double>(std::max<int64_t>(1, std::min(net.gpus_per_node, gpus)));
  l.gpus_per_node = net.gpus_per_node;
  return l;
}

// Tensor parallel: per layer 2 all-reduces forward and 2 backward of the layer's activations
// (Megatron-LM; sequence parallel turns them into all-gather + reduce-scatter, same volume).
double TensorParallelS(const ModelSpec& m, const TrainingSpec& t, const ParallelPlan& p,
                       const PerfInputs& in, const Links& links) {
  if (p.tp <= 1) return 0;
  double bytes =
      in.tokens_per_mb / static_cast<double>(p.cp) * static_cast<double>(m.hidden_size) * in.e;
  double per_layer = 4.0 * AllReduceS(bytes, p.tp, links.GroupGbs(p.tp));
  if (t.recompute == Recompute::kFull) {
    per_layer *= 1.0 + 0.5 * in.recompute_share;  // the recomputed forward repeats two
  }
  // Under sequence parallelism an MoE layer without shared experts has no MLP collectives of
  // its tokens: its routed rows move in ExpertParallelS instead.
  double layers = in.stage_layers;
  if (p.sequence_parallel && m.moe.num_shared_experts == 0) layers -= 0.5 * in.stage_moe_layers;
  return per_layer * layers * static_cast<double>(in.microbatches);
}

// Pipeline: bubble (p - 1) / (m v) of the ideal time (Narayanan et al. SC'21, §2.2), and the
// sends that fill and drain it.
void PipelineS(const ModelSpec& m, const ParallelPlan& p, const PerfInputs& in, const Links& links,
               PerfBreakdown& b) {
  if (p.pp <= 1) return;
  b.pp_bubble_s = static_cast<double>(p.pp - 1) / static_cast<double>(p.vpp) * in.per_mb();
  double bytes = in.tokens_per_mb / static_cast<double>(p.cp * (p.sequence_parallel ? p.tp : 1)) *
                 static_cast<double>(m.hidden_size) * in.e;
  b.pp_p2p_s = 2.0 * static_cast<double>(p.pp - 1) * bytes /
               (links.GroupGbs(p.tp * p.cp * p.dp * p.pp) * 1e9);
}

// Context parallel: ring attention passes k and v around the cp ranks, overlapped with the
// attention compute; what does not fit under it is exposed.
double ContextParallelS(const ModelSpec& m, const ParallelPlan& p, const PerfInputs& in,
                        const Links& links) {
  if (p.cp <= 1) return 0;
  double kv_bytes = in.tokens_per_mb / static_cast<double>(p.cp) *
                    static_cast<double>(2 * m.kv_size() / p.tp) * in.e;
  double comm = 3.0 * static_cast<double>(p.cp - 1) * kv_bytes /
                (links.GroupGbs(p.tp * p.cp) * 1e9) * in.stage_layers;
  double attn = in.per_mb() * in.attention_share;
  return std::max(0.0, comm - attn) * static_cast<double>(in.microbatches);
}

// The most loaded stage's part of `x` (parameters spread over the stages like the layers) on one
// of `split` ranks of that stage.
double PerRank(double x, int64_t split, const ParallelPlan& p, const PerfInputs& in) {
  return in.uneven_share > 0 ? x * in.uneven_share / static_cast<double>(split)
                             : x / static_cast<double>(split * p.pp);
}

// Parameters of one rank (its share of TP, PP and EP), and those of them that are trained;
// of those, the routed experts' share (reduced over the expert-data-parallel ranks).
double RankExpertParams(const ParallelPlan& p, const PerfInputs& in) {
  return PerRank(in.expert_params, p.expert_tp() * p.ep, p, in);
}
double RankParams(const ParallelPlan& p, const PerfInputs& in) {
  return PerRank(static_cast<double>(in.counts.total) - in.expert_params, p.tp, p, in) +
         RankExpertParams(p, in);
}
double RankTrainedExperts(const ParallelPlan& p, const PerfInputs& in) {
  return PerRank(in.trained_experts, p.expert_tp() * p.ep, p, in);
}
double RankTrainedParams(const ParallelPlan& p, const PerfInputs& in) {
  return PerRank(in.trained_params - in.trained_experts, p.tp, p, in) + RankTrainedExperts(p, in);
}
// A rank's share of the sharded optimizer states: over dp x cp, the experts' over the expert-
// data-parallel ranks.
double ShardedStateParams(const ParallelPlan& p, const PerfInputs& in) {
  const double z = static_cast<double>(p.shard_size());
  const double experts = RankTrainedExperts(p, in);
  return (RankTrainedParams(p, in) - experts) / z +
         experts / static_cast<double>(p.expert_shard_size());
}

// Expert parallel: each MoE layer sends its tokens' routed rows to the experts' ranks and back
// (dispatch and combine) in forward and again in backward, four exchanges, not overlapped
// (Megatron-LM's dispatchers without --overlap-moe-expert-parallel-comm). Expert ranks are laid
// out expert-TP innermost, then EP (Megatron-core's expert rank order), so an EP group's ranks
// fill nodes of gpus_per_node / etp of them. NVLink and the network carry their shares at once:
// an exchange takes the longer of the two. All-to-all sends each routed row to its expert's
// rank; DeepEP sends a token once to each other node holding one of its experts (with top-k of
// E experts spread over n nodes, a node holds none of a token's experts with probability
// C(E - E/n, k) / C(E, k)) and forwards it over NVLink there. Expert-TP ranks then gather the
// rows they received (and reduce-scatter the experts' outputs), in place of the MLP's tensor-
// parallel collectives.
double ExpertParallelS(const ModelSpec& m, const TrainingSpec& t, const ParallelPlan& p,
                       const PerfInputs& in, const Links& links) {
  if (in.stage_moe_layers <= 0) return 0;
  const double tokens =
      in.tokens_per_mb / static_cast<double>(p.cp * (p.sequence_parallel ? p.tp : 1));
  const double row = static_cast<double>(m.hidden_size) * in.e;  // bytes
  const double rows = tokens * in.routed_per_token;
  const int64_t etp = p.expert_tp();
  double one = 0;
  if (p.ep > 1) {
    const double ep = static_cast<double>(p.ep);
    const int64_t per_node = std::clamp<int64_t>(links.gpus_per_node / etp, 1, p.ep);
    const double local = static_cast<double>(per_node);  // EP ranks on this node
    const double nodes = ep / local;
    double remote = rows * (ep - local) / ep * row;  // bytes leaving the node
    if (t.moe_dispatcher == MoeDispatcher::kDeepEp && nodes > 1) {
      const double e = static_cast<double>(m.moe.num_experts);
      const double k = static_cast<double>(m.moe.experts_per_token);
      double miss = 1.0;  // C(E - E/n, k) / C(E, k)
      for (double i = 0; i < k; i += 1.0) miss *= std::max(0.0, (e - e / nodes - i) / (e - i));
      remote = tokens * (nodes - 1.0) * (1.0 - miss) * row;
    }
    const double intra = rows * (local - 1.0) / ep * row;
    const double net = links.per_gpu_net > 0 ? links.per_gpu_net : links.link_gbs;
    one = std::max(remote / (net * 1e9), intra / (links.link_gbs * 1e9));
  }
  if (etp > 1 && p.sequence_parallel) {
    one += AllGatherS(rows * row * static_cast<double>(etp), etp, links.GroupGbs(etp));
  }
  const double passes = RecomputesLayerForward(t.recompute) ? 4.0 + 2.0 * in.recompute_share : 4.0;
  return one * passes * in.stage_moe_layers * static_cast<double>(in.microbatches);
}

// Data parallel: gradient reduction of this rank's parameters (bf16/fp32 per framework),
// overlapped with the last micro-batch's backward; ZeRO-3/FSDP also gathers parameters in
// forward and backward (3x the volume), overlapped with compute.
double DataParallelS(const ParallelPlan& p, const PerfInputs& in,
                     const Links& links) {
  const int64_t n = p.dp * p.cp;
  // Experts not split over all TP ranks (etp < tp) are replicated over them too.
  const int64_t expert_dp = p.expert_dp();
  if (n <= 1 && (in.expert_params <= 0 || expert_dp <= 1)) return 0;
  const double gbs = links.GroupGbs(p.tp * p.cp * p.dp);
  // Sharded optimizers reduce-scatter the gradients and all-gather the updated parameters.
  // Hybrid sharding (HSDP): the shard group's collectives run on its node's links; each rank's
  // 1 / group of the gradient is then all-reduced over the replicas, across nodes.
  const int64_t group = p.shard_group > 0 && p.shard_group < n ? p.shard_group : 0;
  auto reduce = [&](double params, double trained, int64_t n) {
    if (n <= 1) return 0.0;
    double grad_bytes = trained * in.grad_bytes;
    const int64_t s = group > 0 ? group : n;
    const double sgbs = group > 0 ? links.GroupGbs(p.tp * group) : gbs;
    double c = (p.zero >= 1 || p.distributed_optimizer)
                   ? AllGatherS(grad_bytes, s, sgbs) + AllGatherS(trained * in.gather_e, s, sgbs)
                   : AllReduceS(grad_bytes, n, gbs);
    if (group > 0) c += AllReduceS(grad_bytes / static_cast<double>(group), n / group, gbs);
    if (p.zero >= 3) c += 2.0 * AllGatherS(params * in.gather_e, s, sgbs);
    return c;
  };
  // The routed experts' gradients are reduced over the expert-data-parallel ranks.
  const double ex = RankExpertParams(p, in);
  const double ex_trained = RankTrainedExperts(p, in);
  double comm = reduce(RankParams(p, in) - ex, RankTrainedParams(p, in) - ex_trained, n) +
                reduce(ex, ex_trained, expert_dp);
  // Overlap: buckets reduce while backward continues (PyTorch DDP, Megatron overlap-grad-
  // reduce); about the backward of one micro-batch (2/3 of its compute) hides it.
  double hide = (2.0 / 3.0) * in.per_mb() * (p.zero >= 3 ? 1.5 : 1.0);
  return std::max(0.0, comm - hide);
}

// Optimizer step: Adam reads parameters, gradients and two moments and writes three of them;
// sharded states shrink it.
double OptimizerS(const ParallelPlan& p, const PerfInputs& in) {
  const bool sharded = p.zero >= 1 || p.distributed_optimizer;
  const double params = sharded ? ShardedStateParams(p, in) : RankTrainedParams(p, in);
  return params * (in.state_bytes * 7.0) / in.mem_rate;
}

// What is trained, and what that costs: every weight (full training), or the adapters alone
// over a frozen base, whose weights need no weight-gradient GEMM (4 FLOPs per weight and token
// instead of 6) and no reduction or optimizer step; the adapters train in fp32 (PEFT).
void SetTrainedShare(const ModelSpec& m, const TrainingSpec& t, const ParallelPlan& p,
                     PerfInputs& in) {
  in.grad_bytes = GradReduceBytes(t);
  in.state_bytes = t.precision == Precision::kBf16Pure ? 2.0 : 4.0;
  in.trained_params = static_cast<double>(in.counts.total);
  if (t.finetune == FineTune::kFull) return;
  const double base = MatmulParams(m, in.counts);
  const double adapters = ModelActiveAdapterParams(m, t.lora);
  const double matmul = 4.0 * base + 6.0 * adapters;
  in.flops_per_token = matmul + AttentionFlopsPerToken(m, t.seq_len);
  in.matmul_fwd_share = (2.0 * base + 2.0 * adapters) / matmul;
  const int64_t trained = ModelAdapterParams(m, t.lora);
  in.trained_params = static_cast<double>(trained);
  in.counts.total += trained;
  in.grad_bytes = 4.0;
  in.state_bytes = 4.0;
  if (t.finetune == FineTune::kQlora) {
    // Read the 4-bit codes and scales, write the 16-bit weight the matmul reads.
    const double stage = PerRank(static_cast<double>(ModelLinearElements(m)), 1, p, in);
    in.dequant_bytes = stage * (Nf4BytesPerWeight(t.lora.double_quant) + 2.0);
  }
}

// The host link of one GPU (PCIe x16), one direction, as CUDA's bandwidthTest measures it with
// pinned memory: Gen3 12.4 GB/s (V100-era node), Gen4 25.8 GB/s (A100 node; Princeton Research
// Computing's published bandwidthTest runs), Gen5 about 52 GB/s (nvbandwidth on H100). Eight-GPU
// servers put two GPUs behind each PCIe switch's uplink (DGX A100/H100 topology): when all of
// them offload at once, each gets half.
double HostLinkGbs(const GpuType& g, int64_t gpus_on_node) {
  double gbs = g.pcie_gen <= 3 ? 12.4 : g.pcie_gen == 4 ? 25.8 : 52.0;
  if (g.pcie_gen >= 6) gbs *= 2.0;
  return gpus_on_node >= 8 ? gbs / 2.0 : gbs;
}

// Parameters a node's CPUs update a second. DeepSpeedCPUAdam: DeepSpeed PR #7474's ZeRO-Offload
// step of Qwen2.5-3B on two A100s takes 2.38 s in all (so at least 1.3e9 a second), and
// ZeRO-Offload's 40 TFLOP/s for a 10B model on one V100 (Ren et al., ATC'21, abstract) leaves
// its step a few seconds (about 2e9 a second): 2e9 is used. FSDP steps with torch's CPU Adam,
// 5-7x slower than DeepSpeedCPUAdam (DeepSpeed's ZeRO-Offload tutorial): 2e9 / 6.
constexpr double kCpuAdamParamsPerS = 2e9;

// Offload: the gradients go to host memory during backward (hidden behind it where they fit),
// the CPU steps the optimizer, and the updated 16-bit weights come back; with the weights
// offloaded, every pass over the layers fetches them (prefetched under the compute).
double OffloadS(const TrainingSpec& t, const ParallelPlan& p, const GpuType& g,
                const Network& net, const PerfInputs& in) {
  const int64_t on_node = std::min<int64_t>(net.gpus_per_node, in.gpus);
  const double link = HostLinkGbs(g, on_node) * 1e9;
  double exposed = 0;
  if (t.offload_activations) {
    // Offloaded activations go to the host in forward and come back in backward, on a side
    // stream under the compute (torchtune's use_streams); what does not fit under it shows.
    const double traffic = 2.0 * in.offloaded_act_bytes / link;
    exposed += std::max(0.0, traffic - in.per_mb()) * static_cast<double>(in.microbatches);
  }
  if (p.offload == Offload::kNone) return exposed;
  const double shard = ShardedStateParams(p, in);
  const bool fsdp = t.framework == Framework::kFsdp;
  const double rate = fsdp ? kCpuAdamParamsPerS / 6.0 : kCpuAdamParamsPerS;
  const double cpu = shard * static_cast<double>(on_node) / rate;
  const double grads = shard * (fsdp ? 4.0 : in.e) / link;
  const double back = shard * in.e / link;
  exposed += cpu + back + std::max(0.0, grads - (2.0 / 3.0) * in.per_mb());
  if (p.offload == Offload::kParams) {
    const double fetch =
        shard * in.e * (RecomputesLayerForward(t.recompute) ? 3.0 : 2.0) / link;
    exposed += std::max(0.0, fetch - in.per_mb()) * static_cast<double>(in.microbatches);
  }
  return exposed;
}

// FP8 linears (precision fp8): the layers' linear FLOPs run at the FP8 rate, the output layer
// and the attention core at the bf16 one; the matmul rate becomes their harmonic blend. The
// casts are memory-bound: per linear, its input and its output's gradient are read twice
// (amax, then the cast) and written once in FP8, 5 bytes an element; each weight is read and
// written (3 bytes) once a step where Transformer Engine caches it, twice a micro-batch where
// torchao casts it in forward and backward. FP8 weight gathers move 1 byte a weight.
void SetFp8(const ModelSpec& m, const TrainingSpec& t, const ParallelPlan& p, const GpuType& gpu,
            const GpuEfficiency& eff, double h_scale, PerfInputs& in) {
  if (!t.fp8()) return;
  const double bf16_rate = in.matmul_rate;
  const double fp8_peak = gpu.fp8_tflops ? *gpu.fp8_tflops * 1e12 : 0.0;
  // GPUs without an FP8 fit: their bf16 fraction scaled as on the H100 (0.45 of the FP8 peak
  // against 0.801 of the bf16 one, data/perf_calibration.json).
  constexpr double kFp8OverBf16 = 0.45 / 0.801;
  const double frac = eff.fp8_matmul > 0 ? eff.fp8_matmul : eff.matmul * kFp8OverBf16;
  const double fp8_rate = fp8_peak * frac * eff.training_scale * h_scale;
  if (!(fp8_rate > 0)) return;
  const double head = static_cast<double>(m.vocab_size * m.embedding_width());
  const double linear = MatmulParams(m, in.counts) - head;
  const double f8 = std::clamp(6.0 * linear / in.flops_per_token, 0.0, 1.0);
  in.matmul_rate = 1.0 / ((1.0 - f8) / bf16_rate + f8 / fp8_rate);
  const int64_t q = m.q_size(), kv = m.kv_size(), h = m.hidden_size;
  const int64_t ffn = m.moe.enabled() ? m.moe.ffn_hidden_size * m.moe.experts_per_token
                                      : m.ffn_hidden_size;
  const double widths = static_cast<double>(h + q + h + ffn) /* inputs */ +
                        static_cast<double>(q + 2 * kv + h + (m.gated_mlp ? 2 : 1) * ffn + h);
  const double tokens = in.tokens_per_mb / static_cast<double>(p.cp);
  // This rank's linear weights: the layers' share of TP and PP, and all its local experts
  // (`linear` counts the top-k a token uses).
  const double active_experts =
      m.moe.enabled() ? in.expert_params * static_cast<double>(m.moe.experts_per_token) /
                            static_cast<double>(m.moe.num_experts)
                      : 0.0;
  const double weights = PerRank(linear - active_experts, p.tp, p, in) + RankExpertParams(p, in);
  const double weight_casts =
      t.te_fp8() ? 1.0 / static_cast<double>(std::max<int64_t>(1, in.microbatches)) : 2.0;
  in.fp8_cast_bytes = in.stage_layers * tokens * widths * 5.0 / static_cast<double>(p.tp) +
                      weights * 3.0 * weight_casts;
  if (t.fp8_param_gather) in.gather_e = 1.0;
}

// MoE: the routed experts' parameters, the stage's share of the MoE layers, and the rows the
// experts compute per token.
void SetExperts(const ModelSpec& m, const TrainingSpec& t, PerfInputs& in) {
  if (!m.moe.enabled()) return;
  const int64_t moe_layers = m.num_moe_layers();
  const double layer = static_cast<double>(CountLayerParams(m, /*moe=*/true).mlp);
  in.expert_params = layer * static_cast<double>(moe_layers);
  in.trained_experts = t.finetune == FineTune::kFull ? in.expert_params : 0.0;
  in.expert_layer_params = layer / static_cast<double>(m.moe.num_experts);
  in.stage_moe_layers =
      in.stage_layers * static_cast<double>(moe_layers) / static_cast<double>(m.num_layers);
  in.routed_per_token = t.moe_routed_per_token(m.moe.experts_per_token);
}

// Throughput figures of the job from its iteration time.
PerfEstimate Summarize(const TrainingSpec& t, const ParallelPlan& p, const PerfInputs& in,
                       const PerfBreakdown& b) {
  PerfEstimate out;
  out.breakdown = b;
  out.iteration_s = b.compute_s + b.recompute_s + b.tp_comm_s + b.pp_bubble_s + b.pp_p2p_s +
                    b.dp_comm_s + b.cp_comm_s + b.ep_comm_s + b.optimizer_s + b.offload_s;
  out.gpus = in.gpus;
  double global_batch =
      static_cast<double>(t.global_batch > 0 ? t.global_batch : t.micro_batch * p.dp);
  double tokens = global_batch * static_cast<double>(t.seq_len);
  out.tokens_per_s = tokens / out.iteration_s;
  out.tokens_per_s_per_gpu = out.tokens_per_s / static_cast<double>(in.gpus);
  out.model_flops_per_token = in.flops_per_token;
  out.tflops_per_gpu = out.tokens_per_s_per_gpu * in.flops_per_token / 1e12;
  out.mfu = out.tflops_per_gpu * 1e12 / in.peak;
  return out;
}

}  // namespace

Result<PerfEstimate> PredictPerf(const ModelSpec& m, const TrainingSpec& t, const ParallelPlan& p,
                                 const GpuType& gpu, const Network& net,
                                 const GpuEfficiency* efficiency, int64_t pace_stage) {
  RETURN_IF_ERROR(ValidateLayout(m, t, p));
  if (pace_stage >= p.pp) {
    return InvalidArgument("stage " + std::to_string(pace_stage) + " of a " +
                               std::to_string(p.pp) + "-stage pipeline",
                           {}, "pp");
  }
  PerfInputs in;
  in.peak = PeakTflops(gpu, t.precision) * 1e12;
  if (!(in.peak > 0)) {
    return InvalidArgument(std::string(gpu.name) + " has no " + PrecisionName(t.precision) +
                               " tensor cores; use --precision fp16 or fp32",
                           {}, "precision");
  }
  if (t.fp8() && !gpu.fp8_tflops) {
    return InvalidArgument(std::string(gpu.name) + " has no FP8 tensor cores; use --precision bf16",
                           {}, "precision");
  }
  GpuEfficiency eff = efficiency != nullptr ? *efficiency : EfficiencyOf(gpu);
  const double h_local = static_cast<double>(m.hidden_size) / static_cast<double>(p.tp);
  in.matmul_rate = in.peak * eff.matmul * eff.training_scale * h_local / (h_local + eff.h0);
  in.mem_rate = gpu.mem_bw_gbs * 1e9 * eff.memory;
  in.gpus = p.gpus();
  in.microbatches = MicroBatchesPerStep(t, p);
  in.tokens_per_mb = static_cast<double>(t.micro_batch * t.seq_len);
  in.counts = CountParams(m, HeadKind::kDefault, /*per_layer=*/false);
  in.flops_per_token = FlopsPerToken(m, in.counts, t.seq_len);
  in.stage_layers = static_cast<double>(pace_stage >= 0 ? p.LayersOfStage(pace_stage, m.num_layers)
                                                        : p.MostLayersOnAStage(m.num_layers));
  if (!p.stage_layers.empty() || pace_stage >= 0) {
    in.uneven_share = in.stage_layers / static_cast<double>(m.num_layers);
  }
  SetTrainedShare(m, t, p, in);
  // The output layer: 6 FLOPs a weight and token, 4 when frozen (no weight gradient).
  in.head_flops = (t.finetune == FineTune::kFull ? 6.0 : 4.0) *
                  static_cast<double>(m.vocab_size * m.embedding_width());
  in.head_on_stage = pace_stage < 0 || pace_stage == p.pp - 1;  // the head is on the last
  if (t.recompute_every > 1) {
    in.recompute_share = std::floor(static_cast<double>(m.num_layers) /
                                    static_cast<double>(t.recompute_every)) /
                         static_cast<double>(m.num_layers);
  }
  SetExperts(m, t, in);
  in.attention_share = 12.0 * static_cast<double>(m.num_layers * m.q_size()) *
                       static_cast<double>(t.seq_len) / in.flops_per_token;
  in.e = static_cast<double>(t.act_bytes());
  in.gather_e = in.e;
  SetFp8(m, t, p, gpu, eff, h_local / (h_local + eff.h0), in);
  MicroBatchCompute(m, t, p, in);

  const Links links = MakeLinks(gpu, net, in.gpus);
  PerfBreakdown b;
  b.compute_s = in.mb_compute * static_cast<double>(in.microbatches);
  b.recompute_s = in.mb_recompute * static_cast<double>(in.microbatches);
  b.tp_comm_s = TensorParallelS(m, t, p, in, links);
  PipelineS(m, p, in, links, b);
  b.cp_comm_s = ContextParallelS(m, p, in, links);
  b.ep_comm_s = ExpertParallelS(m, t, p, in, links);
  b.dp_comm_s = DataParallelS(p, in, links);
  b.optimizer_s = p.offload == Offload::kNone ? OptimizerS(p, in) : 0.0;  // else on the CPU
  b.offload_s = OffloadS(t, p, gpu, net, in);
  return Summarize(t, p, in, b);
}


Network DefaultNetwork(const GpuType& gpu, int64_t gpus, std::string* why) {
  Network net;
  net.gpus_per_node = std::min<int64_t>(8, std::max<int64_t>(1, gpus));
  const std::string& n = gpu.name;
  auto starts = [&](const char* p) { return n.rfind(p, 0) == 0; };
  std::string what;
  if (gpu.link == LinkKind::kNvlink || gpu.link == LinkKind::kInfinityFabric) {
    // Per GPU one NIC: 400 Gb/s ConnectX-7 on DGX H100/H200/B200 (NVIDIA DGX H100 and DGX B200
    // user guides: 8 x 400 Gb/s InfiniBand/Ethernet compute ports), 200 Gb/s HDR on DGX A100
    // (DGX A100 user guide: 8 x ConnectX-6 200 Gb/s), 100 Gb/s on DGX-1 V100 (4 x EDR for 8
    // GPUs: 50 GB/s a node); AMD MI300X-class platforms pair each GPU with a 400 Gb/s NIC as
    // HGX does (AMD Instinct MI300X platform brief).
    // B300 pairs each GPU with an 800 Gb/s ConnectX-8 (DGX B300); GB200 NVL72 trays keep
    // 400 Gb/s ConnectX-7 per GPU (its 72-GPU NVLink domain is not modelled: nodes of 8);
    // MI250X nodes (Frontier-class) have about 200 Gb/s per package.
    double nic_gbits = 400;
    if (starts("A100") || starts("A800") || starts("MI250")) nic_gbits = 200;
    if (starts("V100")) nic_gbits = 50;  // 4 x 100 Gb/s per 8 GPUs
    if (starts("B300")) nic_gbits = 800;
    net.inter_node_gbs = static_cast<double>(net.gpus_per_node) * nic_gbits / 8.0;
    what = fmt::format("{}-GPU {} nodes, {:g} Gb/s NIC per GPU: {:g} GB/s per node (no cluster "
                       "given; --cluster uses its network)",
                       net.gpus_per_node, gpu.link == LinkKind::kNvlink ? "NVLink" : "Infinity Fabric",
                       nic_gbits, net.inter_node_gbs);
  } else {
    net.inter_node_gbs = 25;  // 2 x 100 GbE
    what = fmt::format("{}-GPU PCIe nodes on 2 x 100 GbE: 25 GB/s per node (no cluster given; "
                       "--cluster uses its network)",
                       net.gpus_per_node);
  }
  if (why) *why = what;
  return net;
}

}  // namespace frenzy
