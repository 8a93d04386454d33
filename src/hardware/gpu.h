// GPU types and the GPU catalog.
//
// A GpuType is what the memory and performance models need of a GPU: its memory, its dense peak
// throughput per precision, its memory bandwidth and its intra-node link, and what it costs.
// Every entry carries the source of its figures. The catalog is data/gpus.json (compiled in);
// users name GPUs by canonical name or any alias ("a100", "NVIDIA A100-SXM4-80GB"), matched
// case-insensitively with vendor prefixes and separators ignored.
#ifndef FRENZY_HARDWARE_GPU_H_
#define FRENZY_HARDWARE_GPU_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace frenzy {

enum class LinkKind { kNvlink, kNvlinkBridge, kPcie, kInfinityFabric };
const char* LinkKindName(LinkKind k);

struct GpuType {
  std::string name;
  std::vector<std::string> aliases;
  std::string vendor;       // "nvidia", "amd"
  std::string form_factor;  // "SXM4", "PCIe", "OAM", ...
  int64_t memory_bytes = 0;
  double memory_gib = 0;
  // Dense peak TFLOP/s (tensor cores where they exist); nullopt: the GPU lacks that precision.
  std::optional<double> bf16_tflops;
  double fp16_tflops = 0;
  std::optional<double> tf32_tflops;
  double fp32_tflops = 0;  // non-tensor FP32
  std::optional<double> fp8_tflops;
  std::optional<double> fp4_tflops;  // dense FP4 (Blackwell, MI355X); null: none
  double mem_bw_gbs = 0;  // GB/s
  LinkKind link = LinkKind::kPcie;
  double link_gbs = 0;  // per-GPU intra-node bandwidth, GB/s, bidirectional as vendors quote it
  int64_t pcie_gen = 4;  // the host link (x16): what offloaded states travel over
  std::optional<double> price_per_hour;  // USD per GPU-hour, on demand
  std::string source;
  std::string price_source;
  std::string notes;

  // The catalog entry as JSON (shaped as in data/gpus.json).
  nlohmann::json ToJson() const;
};

class GpuCatalog {
 public:
  // Parses a catalog (a JSON array of entries). Errors name `where`, the entry and the field;
  // names and aliases must be unique.
  static Result<GpuCatalog> Parse(std::string_view text, const std::string& where);
  // The catalog compiled into the binary (data/gpus.json).
  static const GpuCatalog& Default();

  const std::vector<GpuType>& gpus() const { return gpus_; }
  // By canonical name or alias; nullptr if none.
  const GpuType* Find(std::string_view name) const;
  // Like Find, but NotFound names the closest known GPUs.
  Result<const GpuType*> Lookup(std::string_view name) const;

  // Normal form used for matching names and aliases: lower case, no "nvidia"/"amd"/"tesla"/
  // "geforce"/"instinct" words, separators ('_', ' ', '-') dropped.
  static std::string Normalize(std::string_view name);

 private:
  std::vector<GpuType> gpus_;
  std::vector<std::pair<std::string, size_t>> index_;  // normalized name/alias -> gpus_ index
};

}  // namespace frenzy

#endif  // FRENZY_HARDWARE_GPU_H_
