#include "memory/fsdp_init.h"

#include <algorithm>
#include <mutex>
#include <numeric>
#include <unordered_map>

#include <fmt/format.h>

#include "memory/caching_allocator.h"
#include "memory/finetune.h"
#include "model/param_count.h"

namespace frenzy {
namespace {

// torch.distributed.fsdp._init_utils.PARAM_BROADCAST_BUCKET_SIZE.
constexpr int64_t kBroadcastBucket = int64_t{250} << 20;

int64_t Bytes(double elements, double bytes) {
  return static_cast<int64_t>(elements * bytes);  // truncated, as numel x element size is exact
}

}  // namespace

std::vector<FsdpInitUnit> FsdpInitUnits(const ModelSpec& m, const TrainingSpec& t,
                                        const ParallelPlan& p) {
  const bool adapters = t.finetune != FineTune::kFull;
  const bool nf4 = t.finetune == FineTune::kQlora;
  const LoraSpec lora = LoraAsRun(t, p);
  // Full training keeps fp32 flat parameters under FSDP's MixedPrecision, 16-bit ones in pure
  // 16-bit training; a fine-tune's frozen base is held in the compute dtype, the weights QLoRA
  // leaves unquantised likewise unless upcast.
  double weight = static_cast<double>(t.act_bytes());
  if (!adapters && t.precision != Precision::kBf16Pure) weight = 4.0;
  const double rest = nf4 && lora.upcast_rest ? 4.0 : weight;
  const double stats = nf4 ? Nf4BytesPerWeight(lora.double_quant) - 0.5 : 0.0;
  const double r = static_cast<double>(lora.rank);
  const double ab = static_cast<double>(lora.adapter_bytes);

  std::vector<FsdpInitUnit> units;
  for (int64_t i = 0; i < m.num_layers; ++i) {
    const bool moe = m.IsMoeLayer(i);
    FsdpInitUnit layer;
    int64_t linear_elements = 0;
    for (const LinearWeight& w : LayerLinearWeights(m, moe)) {
      const double n = static_cast<double>(w.in) * static_cast<double>(w.out);
      for (int64_t c = 0; c < w.count; ++c) {
        if (adapters && (w.target & lora.targets) != 0) {
          units.push_back({{Bytes(static_cast<double>(w.in) * r, ab)}, {}});
          units.push_back({{Bytes(r * static_cast<double>(w.out), ab)}, {}});
        }
        layer.params.push_back(Bytes(n, nf4 ? 0.5 : weight));
        if (nf4) layer.kept.push_back(Bytes(n, stats));
      }
      linear_elements += w.in * w.out * w.count;
    }
    const int64_t others = CountLayerParams(m, moe).total() - linear_elements;
    if (others > 0) layer.params.push_back(Bytes(static_cast<double>(others), rest));
    units.push_back(std::move(layer));
  }
  const ParamCounts c = CountParams(m, HeadKind::kDefault, /*per_layer=*/false);
  FsdpInitUnit root;
  // FSDP's walk meets the output layer (a child of the *ForCausalLM module) before the
  // embeddings and the final norm (children of its inner model).
  for (int64_t n : {c.lm_head, c.token_embedding, c.position_embedding, c.token_type_embedding,
                    c.embedding_norm, c.embedding_proj, c.final_norm, c.head_extra}) {
    if (n > 0) root.params.push_back(Bytes(static_cast<double>(n), rest));
  }
  units.push_back(std::move(root));
  return units;
}

FsdpInitReplay ReplayFsdpInit(const std::vector<FsdpInitUnit>& units, int64_t shards,
                              bool broadcast, bool offload_params) {
  CachingAllocatorModel a;
  shards = std::max<int64_t>(1, shards);
  std::vector<CachingAllocatorModel::Handle> moved, in_flight;
  for (const FsdpInitUnit& u : units) {
    if (u.params.empty()) continue;
    for (int64_t k : u.kept) a.Malloc(k);
    moved.clear();
    for (int64_t b : u.params) moved.push_back(a.Malloc(b));
    if (broadcast) {
      in_flight.clear();
      size_t first = 0;
      int64_t size = 0;
      for (size_t k = 0; k < u.params.size(); ++k) {
        size += u.params[k];
        if (size < kBroadcastBucket && k + 1 < u.params.size()) continue;
        if (in_flight.size() >= 2) {
          a.Free(in_flight.front());  // a single-tensor bucket's handle is -1: ignored
          in_flight.erase(in_flight.begin());
        }
        in_flight.push_back(k > first ? a.Malloc(size) : -1);
        first = k + 1;
        size = 0;
      }
      for (auto h : in_flight) a.Free(h);
    }
    const int64_t total = std::accumulate(u.params.begin(), u.params.end(), int64_t{0});
    const auto flat = a.Malloc(total);
    const auto shard = a.Malloc((total + shards - 1) / shards);
    a.Free(flat);
    for (auto h : moved) a.Free(h);
    if (offload_params) a.Free(shard);
  }
  return {a.allocated(), a.reserved(), a.CachedFree(0)};
}

FsdpInitReplay FsdpInitOf(const ModelSpec& m, const TrainingSpec& t, const ParallelPlan& p) {
  // Everything FsdpInitUnits and the replay read (the model by its name and shapes).
  const LoraSpec l = LoraAsRun(t, p);
  const std::string key = fmt::format(
      "{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", m.name, m.num_layers,
      m.hidden_size, m.ffn_hidden_size, m.vocab_size, m.num_heads, m.num_kv_heads, m.head_dim,
      m.moe.num_experts, m.moe.ffn_hidden_size,
      CountParams(m, HeadKind::kDefault, /*per_layer=*/false).total, static_cast<int>(t.finetune),
      l.rank, l.targets, l.adapter_bytes, l.double_quant, l.upcast_rest,
      static_cast<int>(t.precision), p.shard_size(), static_cast<int>(t.fsdp_init),
      static_cast<int>(p.offload), m.gated_mlp);
  static std::mutex mu;
  static std::unordered_map<std::string, FsdpInitReplay> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  const FsdpInitReplay r =
      ReplayFsdpInit(FsdpInitUnits(m, t, p), p.shard_size(), t.fsdp_init == FsdpInit::kHostSync,
                     p.offload == Offload::kParams);
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() >= 4096) cache.clear();
  cache.emplace(key, r);
  return r;
}

}  // namespace frenzy
