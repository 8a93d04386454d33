#include "hardware/gpu.h"

#include <algorithm>
#include <cstdlib>

#include "common/json_reader.h"
#include "common/strings.h"
#include "data/embedded.h"

namespace frenzy {

const char* LinkKindName(LinkKind k) {
  switch (k) {
    case LinkKind::kNvlink:
      return "nvlink";
    case LinkKind::kNvlinkBridge:
      return "nvlink-bridge";
    case LinkKind::kPcie:
      return "pcie";
    case LinkKind::kInfinityFabric:
      return "infinity-fabric";
  }
  return "?";
}

namespace {

std::optional<LinkKind> ParseLink(std::string_view s) {
  for (LinkKind k : {LinkKind::kNvlink, LinkKind::kNvlinkBridge, LinkKind::kPcie,
                     LinkKind::kInfinityFabric}) {
    if (s == LinkKindName(k)) return k;
  }
  return std::nullopt;
}

void SetOpt(nlohmann::json& j, const char* key, const std::optional<double>& v) {
  j[key] = v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json GpuType::ToJson() const {
  nlohmann::json j;
  j["name"] = name;
  j["aliases"] = aliases;
  j["vendor"] = vendor;
  j["form_factor"] = form_factor;
  j["memory_gib"] = memory_gib;
  j["memory_bytes"] = memory_bytes;
  SetOpt(j, "bf16_tflops", bf16_tflops);
  j["fp16_tflops"] = fp16_tflops;
  SetOpt(j, "tf32_tflops", tf32_tflops);
  j["fp32_tflops"] = fp32_tflops;
  SetOpt(j, "fp8_tflops", fp8_tflops);
  SetOpt(j, "fp4_tflops", fp4_tflops);
  j["mem_bw_gbs"] = mem_bw_gbs;
  j["link"] = LinkKindName(link);
  j["link_gbs"] = link_gbs;
  j["pcie_gen"] = pcie_gen;
  SetOpt(j, "price_per_hour", price_per_hour);
  j["source"] = source;
  j["price_source"] = price_source;
  if (!notes.empty()) j["notes"] = notes;
  return j;
}

std::string GpuCatalog::Normalize(std::string_view name) {
  std::string s = ToLower(name);
  for (const char* word : {"nvidia", "tesla", "geforce", "amd", "instinct"}) {
    size_t pos;
    std::string w = word;
    while ((pos = s.find(w)) != std::string::npos) s.erase(pos, w.size());
  }
  std::string out;
  for (char c : s) {
    if (c != ' ' && c != '-' && c != '_') out.push_back(c);
  }
  return out;
}

Result<GpuCatalog> GpuCatalog::Parse(std::string_view text, const std::string& where) {
  ASSIGN_OR_RETURN(nlohmann::json doc, ParseJson(text, where));
  if (!doc.is_array()) return InvalidArgument("a GPU catalog must be a JSON array", where);
  if (doc.empty()) return InvalidArgument("the GPU catalog is empty", where);
  GpuCatalog cat;
  for (size_t i = 0; i < doc.size(); ++i) {
    std::string prefix = "[" + std::to_string(i) + "].";
    JsonReader r(doc[i], where, prefix);
    GpuType g;
    g.name = r.String("name");
    g.aliases = r.StringList("aliases");
    g.vendor = r.String("vendor", "");
    g.form_factor = r.String("form_factor", "");
    g.memory_gib = r.Double("memory_gib");
    // memory_bytes: exact capacity; defaults to memory_gib GiB.
    g.memory_bytes = r.IntAtLeast("memory_bytes",
                                  static_cast<int64_t>(g.memory_gib * 1073741824.0), 1);
    g.bf16_tflops = r.OptDouble("bf16_tflops");
    g.fp16_tflops = r.Double("fp16_tflops");
    g.tf32_tflops = r.OptDouble("tf32_tflops");
    g.fp32_tflops = r.Double("fp32_tflops");
    g.fp8_tflops = r.OptDouble("fp8_tflops");
    g.fp4_tflops = r.OptDouble("fp4_tflops");
    g.mem_bw_gbs = r.Double("mem_bw_gbs");
    std::string link = r.String("link");
    g.link_gbs = r.Double("link_gbs");
    g.pcie_gen = r.IntAtLeast("pcie_gen", 4, 3);
    if (g.pcie_gen > 6) r.Error("pcie_gen", "must be a PCIe generation from 3 to 6");
    g.price_per_hour = r.OptDouble("price_per_hour");
    g.source = r.String("source");
    g.price_source = r.String("price_source", "");
    g.notes = r.String("notes", "");
    if (r.HasValue("link")) {
      if (auto k = ParseLink(link)) {
        g.link = *k;
      } else {
        r.Error("link", "unknown link '" + link +
                            "' (expected nvlink, nvlink-bridge, pcie or infinity-fabric)");
      }
    }
    auto positive = [&](const char* field, double v) {
      if (r.HasValue(field) && !(v > 0)) r.Error(field, "must be positive");
    };
    positive("memory_gib", g.memory_gib);
    positive("fp16_tflops", g.fp16_tflops);
    positive("fp32_tflops", g.fp32_tflops);
    positive("mem_bw_gbs", g.mem_bw_gbs);
    positive("link_gbs", g.link_gbs);
    for (const auto& [field, v] : {std::pair{"bf16_tflops", g.bf16_tflops},
                                   std::pair{"tf32_tflops", g.tf32_tflops},
                                   std::pair{"fp8_tflops", g.fp8_tflops},
                                   std::pair{"fp4_tflops", g.fp4_tflops},
                                   std::pair{"price_per_hour", g.price_per_hour}}) {
      if (v && !(*v > 0)) r.Error(field, "must be positive (or null when not supported)");
    }
    if (r.HasValue("source") && g.source.empty()) r.Error("source", "must not be empty");
    RETURN_IF_ERROR(r.Finish());
    // Every name and alias must identify one GPU.
    std::vector<std::string> keys = {g.name};
    keys.insert(keys.end(), g.aliases.begin(), g.aliases.end());
    for (const auto& key : keys) {
      std::string norm = Normalize(key);
      if (norm.empty()) {
        return InvalidArgument("name or alias '" + key + "' is empty once normalized", where,
                               prefix + "aliases");
      }
      for (const auto& [existing, idx] : cat.index_) {
        if (existing == norm && idx != cat.gpus_.size()) {
          return InvalidArgument("name or alias '" + key + "' already names " +
                                     cat.gpus_[idx].name,
                                 where, prefix + "aliases");
        }
      }
      cat.index_.emplace_back(norm, cat.gpus_.size());
    }
    cat.gpus_.push_back(std::move(g));
  }
  return cat;
}

const GpuCatalog& GpuCatalog::Default() {
  static const GpuCatalog* kCatalog = [] {
    auto text = FindEmbeddedFile("gpus.json");
    if (!text) std::abort();  // build bug: data/gpus.json not embedded
    auto cat = Parse(*text, "data/gpus.json");
    if (!cat.ok()) std::abort();  // build bug: tests parse it too
    return new GpuCatalog(std::move(cat).value());
  }();
  return *kCatalog;
}

const GpuType* GpuCatalog::Find(std::string_view name) const {
  std::string norm = Normalize(name);
  for (const auto& [key, idx] : index_) {
    if (key == norm) return &gpus_[idx];
  }
  return nullptr;
}

Result<const GpuType*> GpuCatalog::Lookup(std::string_view name) const {
  if (const GpuType* g = Find(name)) return g;
  std::vector<std::string> names;
  for (const auto& g : gpus_) names.push_back(g.name);
  auto close = ClosestMatches(name, names, 3);
  std::string msg = "unknown GPU type '" + std::string(name) + "'";
  if (!close.empty()) msg += " (did you mean " + Join(close, ", ") + "?)";
  msg += "; `frenzy gpus` lists the catalog";
  return NotFound(msg);
}

}  // namespace frenzy
