// `frenzy inspect` (a model's architecture and parameter count) and the catalogs: `frenzy
// models`, `frenzy gpus`, `frenzy cluster show|list`.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "cli/commands.h"
#include "common/status.h"
#include "common/strings.h"
#include "hardware/cluster.h"
#include "hardware/gpu.h"
#include "model/model_json.h"
#include "model/param_count.h"
#include "model/zoo.h"

namespace frenzy::cli {
namespace {

std::string Fmt1(double v) {
  std::string s = fmt::format("{:.1f}", v);
  if (s.ends_with(".0")) s.resize(s.size() - 2);
  return s;
}

std::string OptTflops(const std::optional<double>& v) { return v ? Fmt1(*v) : "-"; }

// ---- inspect -------------------------------------------------------------------------------

struct InspectOptions {
  std::string model;
  bool json = false;
};

void RunInspect(const InspectOptions& o) {
  auto spec = ResolveModel(o.model);
  if (!spec.ok()) return Fail(spec.status());
  const ModelSpec& s = *spec;
  ParamCounts c = CountParams(s);
  if (o.json) {
    nlohmann::json j = ModelSpecToJson(s);
    j["params"] = c.total;
    j["active_params"] = c.active;
    j["params_breakdown"] = ParamCountsToJson(c);
    if (c.mtp > 0) j["mtp_params"] = c.mtp;
    if (!s.left_out.empty()) j["left_out"] = s.left_out;
    return PrintJson(j);
  }
  const char* attn = s.num_kv_heads == s.num_heads ? "MHA" : (s.num_kv_heads == 1 ? "MQA" : "GQA");
  fmt::print("{}  ({}, {})\n", s.name, s.model_type, ArchKindName(s.arch));
  fmt::print("  layers {}, hidden {}, heads {} (kv {}, head_dim {}, {}), FFN {} ({}), vocab {}\n",
             s.num_layers, s.hidden_size, s.num_heads, s.num_kv_heads, s.head_dim, attn,
             s.ffn_hidden_size, MlpKindName(s), s.vocab_size);
  fmt::print("  norm {} ({}-norm), position {}, max positions {}, tied embeddings {}{}\n",
             NormKindName(s.norm), NormPlacementName(s.norm_placement),
             PositionKindName(s.position), s.max_positions, s.tied_embeddings ? "yes" : "no",
             s.parallel_attn_mlp ? ", parallel attention/MLP" : "");
  if (s.moe.enabled()) {
    fmt::print("  MoE: {} experts, top-{}, expert FFN {}{}; {} of {} layers sparse\n",
               s.moe.num_experts, s.moe.experts_per_token, s.moe.ffn_hidden_size,
               s.moe.num_shared_experts > 0
                   ? fmt::format(", shared expert FFN {}", s.moe.shared_ffn_hidden_size)
                   : "",
               s.num_moe_layers(), s.num_layers);
  }
  if (s.mla.enabled()) {
    fmt::print("  MLA: kv latent {}, q latent {}, rope/nope/v head dims {}/{}/{}\n",
               s.mla.kv_lora_rank, s.mla.q_lora_rank > 0 ? std::to_string(s.mla.q_lora_rank) : "none",
               s.mla.qk_rope_head_dim, s.mla.qk_nope_head_dim, s.mla.v_head_dim);
  }
  std::string extras;
  if (s.qk_norm != QkNorm::kNone) {
    extras += s.qk_norm == QkNorm::kPerHead ? ", q/k norm per head" : ", q/k norm";
  }
  if (s.norms_per_layer == 4) extras += ", norms before and after each sublayer";
  if (s.sliding_layers > 0) {
    extras += fmt::format(", {}-token sliding window on {} of {} layers", s.sliding_window,
                          s.sliding_layers, s.num_layers);
  }
  if (s.attention_sinks) extras += ", attention sinks";
  if (s.attn_softcap > 0) extras += fmt::format(", logits soft-capped at {:g}", s.attn_softcap);
  if (!extras.empty()) fmt::print("  {}\n", extras.substr(2));
  if (!s.left_out.empty()) fmt::print("  left out: {}\n", s.left_out);
  fmt::print("  params {} ({})", WithThousands(c.total), HumanCount(c.total));
  if (c.active != c.total) fmt::print(", active per token {} ({})", WithThousands(c.active),
                                      HumanCount(c.active));
  fmt::print("\n");
  auto row = [](const char* label, int64_t v, const std::string& extra = {}) {
    fmt::print("    {:<12}{:>20}{}\n", label, WithThousands(v), extra);
  };
  row("embedding", c.embedding() + c.embedding_proj);
  nlohmann::json groups = ParamCountsToJson(c)["per_layer"];
  for (const auto& g : groups) {
    std::string label = groups.size() == 1
                            ? std::string("layers")
                            : fmt::format("layers {}-{}", g["layers"][0].get<int64_t>(),
                                          g["layers"][1].get<int64_t>());
    std::string detail = fmt::format(
        "  ({} x {}: attention {}, {} {}{}, norms {})", g["count"].get<int64_t>(),
        WithThousands(g["params"].get<int64_t>()), WithThousands(g["attention"].get<int64_t>()),
        g["kind"] == "moe" ? "experts" : "mlp", WithThousands(g["mlp"].get<int64_t>()),
        g["kind"] == "moe"
            ? fmt::format(", router {}{}", WithThousands(g["router"].get<int64_t>()),
                          g["shared_experts"].get<int64_t>() > 0
                              ? ", shared " + WithThousands(g["shared_experts"].get<int64_t>())
                              : "")
            : "",
        WithThousands(g["norms"].get<int64_t>()));
    fmt::print("    {:<12}{:>20}{}\n", label.size() > 12 ? "layers" : label,
               WithThousands(g["params"].get<int64_t>() * g["count"].get<int64_t>()),
               groups.size() == 1 ? detail : "  " + label + detail);
  }
  row("final norm", c.final_norm);
  row("head", c.head(), s.arch == ArchKind::kDecoder && s.tied_embeddings ? "  (tied)" : "");
  if (c.mtp > 0) {
    row("MTP", c.mtp, "  (multi-token prediction, in the checkpoint only; not in the total)");
  }
}

// ---- models --------------------------------------------------------------------------------

void RunModels(bool json) {
  auto zoo = LoadZoo();
  if (!zoo.ok()) return Fail(zoo.status());
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : *zoo) {
      ParamCounts c = CountParams(e.spec);
      out.push_back({{"name", e.name},
                     {"hf_id", e.hf_id},
                     {"model_type", e.spec.model_type},
                     {"params", c.total},
                     {"active_params", c.active},
                     {"num_layers", e.spec.num_layers},
                     {"hidden_size", e.spec.hidden_size},
                     {"source", e.source}});
    }
    return PrintJson(out);
  }
  fmt::print("{:<18} {:<10} {:>18} {:>8} {:>7} {:>7}  {}\n", "NAME", "TYPE", "PARAMS", "", "LAYERS",
             "HIDDEN", "HUGGINGFACE ID");
  for (const auto& e : *zoo) {
    int64_t p = TotalParams(e.spec);
    fmt::print("{:<18} {:<10} {:>18} {:>8} {:>7} {:>7}  {}\n", e.name, e.spec.model_type,
               WithThousands(p), HumanCount(p), e.spec.num_layers, e.spec.hidden_size, e.hf_id);
  }
}

// ---- gpus ----------------------------------------------------------------------------------

void RunGpus(bool json) {
  const GpuCatalog& cat = GpuCatalog::Default();
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& g : cat.gpus()) out.push_back(g.ToJson());
    return PrintJson(out);
  }
  fmt::print("{:<11} {:>7} {:>8} {:>8} {:>8} {:>8}  {:<21} {:>7}\n", "GPU", "MEM GiB", "BF16 TF",
             "FP16 TF", "FP32 TF", "MEM GB/s", "LINK (GB/s)", "$/HOUR");
  for (const auto& g : cat.gpus()) {
    fmt::print("{:<11} {:>7} {:>8} {:>8} {:>8} {:>8}  {:<21} {:>7}\n", g.name, Fmt1(g.memory_gib),
               OptTflops(g.bf16_tflops), Fmt1(g.fp16_tflops), Fmt1(g.fp32_tflops),
               Fmt1(g.mem_bw_gbs), fmt::format("{} {}", LinkKindName(g.link), Fmt1(g.link_gbs)),
               g.price_per_hour ? fmt::format("{:.2f}", *g.price_per_hour) : "-");
  }
  fmt::print("Dense peak TFLOP/s; sources in `frenzy gpus --json`.\n");
}

// ---- cluster -------------------------------------------------------------------------------

void RunClusterShow(const std::string& name, bool json) {
  const GpuCatalog& cat = GpuCatalog::Default();
  auto c = ResolveCluster(name, cat);
  if (!c.ok()) return Fail(c.status());
  if (json) return PrintJson(c->ToJson(cat));
  fmt::print("{}: {} GPUs on {} nodes\n", c->name, c->total_gpus(), c->nodes.size());
  if (!c->description.empty()) fmt::print("  {}\n", c->description);
  fmt::print("  {:<11} {:>6} {:>6} {:>8} {:>11}\n", "GPU", "NODES", "GPUS", "MEM GiB",
             "TOTAL GiB");
  double total_mem = 0;
  for (const auto& t : c->totals()) {
    const GpuType* g = cat.Find(t.gpu);
    double mem = g ? g->memory_gib : 0;
    total_mem += mem * static_cast<double>(t.gpus);
    fmt::print("  {:<11} {:>6} {:>6} {:>8} {:>11}\n", t.gpu, t.nodes, t.gpus, Fmt1(mem),
               Fmt1(mem * static_cast<double>(t.gpus)));
  }
  fmt::print("  {:<11} {:>6} {:>6} {:>8} {:>11}\n", "total", c->nodes.size(), c->total_gpus(), "",
             Fmt1(total_mem));
  if (!c->groups.empty()) {
    fmt::print("  node groups:\n");
    for (const auto& g : c->groups) {
      fmt::print("    {}-* x {}: {} x {}, network {} GB/s\n", g.prefix, g.count, g.gpus_per_node,
                 g.gpu, Fmt1(g.network_gbs));
    }
  }
}

void RunClusterList(bool json) {
  const GpuCatalog& cat = GpuCatalog::Default();
  nlohmann::json out = nlohmann::json::array();
  for (const auto& name : BundledClusterNames()) {
    auto c = ResolveCluster(name, cat);
    if (!c.ok()) return Fail(c.status());
    std::vector<std::string> types;
    for (const auto& t : c->totals()) types.push_back(fmt::format("{} x {}", t.gpus, t.gpu));
    if (json) {
      out.push_back({{"name", name}, {"total_gpus", c->total_gpus()}, {"nodes", c->nodes.size()}});
    } else {
      fmt::print("{:<12} {:>5} GPUs  {}\n", name, c->total_gpus(), Join(types, ", "));
    }
  }
  if (json) PrintJson(out);
}

}  // namespace

void RegisterInspectCommand(CLI::App& app) {
  {
    auto opts = std::make_shared<InspectOptions>();
    auto* cmd = app.add_subcommand(
        "inspect", "Show a model's architecture and exact parameter count.");
    cmd->add_option("--model,-m", opts->model,
                    "Zoo name (see `frenzy models`), HuggingFace id, or path to a config.json")
        ->required();
    cmd->add_flag("--json", opts->json, "Machine-readable output");
    cmd->callback([opts] { RunInspect(*opts); });
  }
}

void RegisterCatalogCommands(CLI::App& app) {
  {
    auto json = std::make_shared<bool>(false);
    auto* cmd = app.add_subcommand("models", "List the built-in model zoo.");
    cmd->add_flag("--json", *json, "Machine-readable output");
    cmd->callback([json] { RunModels(*json); });
  }
  {
    auto json = std::make_shared<bool>(false);
    auto* cmd = app.add_subcommand("gpus", "Print the GPU catalog.");
    cmd->add_flag("--json", *json, "Machine-readable output");
    cmd->callback([json] { RunGpus(*json); });
  }
  {
    auto* cluster = app.add_subcommand("cluster", "Inspect clusters.");
    cluster->require_subcommand(1);
    auto name = std::make_shared<std::string>();
    auto json = std::make_shared<bool>(false);
    auto* show = cluster->add_subcommand("show", "Show a bundled cluster or a cluster file.");
    show->add_option("cluster", *name, "Bundled name (see `frenzy cluster list`) or a file path")
        ->required();
    show->add_flag("--json", *json, "Machine-readable output");
    show->callback([name, json] { RunClusterShow(*name, *json); });
    auto list_json = std::make_shared<bool>(false);
    auto* list = cluster->add_subcommand("list", "List the bundled clusters.");
    list->add_flag("--json", *list_json, "Machine-readable output");
    list->callback([list_json] { RunClusterList(*list_json); });
  }
}

}  // namespace frenzy::cli
