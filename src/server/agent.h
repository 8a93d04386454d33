// GPU discovery for the node agent: which GPUs a node has and how much memory they use, for the
// heartbeat the agent sends to frenzyd (POST /v1/nodes/{name}/heartbeat).
//
// Three sources, tried in order:
//   nvml       — the NVIDIA management library, loaded at run time with dlopen (no build-time
//                dependency on the driver or its headers);
//   nvidia-smi — `nvidia-smi --query-gpu=... --format=csv,noheader,nounits`, parsed;
//   inventory  — a JSON file describing the node by hand (machines without a driver, tests):
//                {"node": "n1", "gpus": [{"name": "A100-80GB", "memory_total_bytes": ...}]}.
//
// Thread safety: ReadGpus loads and initialises NVML per call (NVML counts its own
// init/shutdown pairs); the parsers are pure.
#ifndef FRENZY_SERVER_AGENT_H_
#define FRENZY_SERVER_AGENT_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace frenzy::server {

class ProcessRunner;  // backend/process.h

struct GpuReading {
  int64_t index = 0;
  std::string name;  // as the driver names it ("NVIDIA A100-SXM4-80GB"), or the inventory's
  std::optional<std::string> uuid;
  int64_t memory_total_bytes = 0;
  int64_t memory_used_bytes = 0;
  std::optional<double> utilization_pct;  // 0..100, when the source reports it
};

struct AgentOptions {
  std::string node_name;       // the heartbeat's node; empty: the inventory's, else the host's
  std::string inventory_path;  // the last fallback; empty: none
  bool use_nvml = true;
  bool use_nvidia_smi = true;
  std::string nvml_library = "libnvidia-ml.so.1";  // dlopen name or path
  std::string nvidia_smi = "nvidia-smi";           // program, looked up on PATH
  double nvidia_smi_timeout_s = 20;
  // Runs nvidia-smi; null: real processes (SystemRunner). Not owned; must outlive the calls.
  ProcessRunner* runner = nullptr;
};

// What ReadGpus used, for the heartbeat and for logs.
struct GpuSourceInfo {
  std::string source;                // "nvml", "nvidia-smi" or "inventory"
  std::string node;                  // the inventory's "node", when the inventory answered
  std::vector<std::string> skipped;  // why each earlier source gave nothing
};

// The node's GPUs from the first source that finds any. Errors: kNotFound when no source
// found GPUs (the message says why each failed), or the inventory's own error when it is the
// last source and is malformed. `info`, when given, says which source answered.
Result<std::vector<GpuReading>> ReadGpus(const AgentOptions& options,
                                         GpuSourceInfo* info = nullptr);

// NVML only. kNotFound when the library is missing; kFailedPrecondition when it loads but
// fails (no driver, no devices).
Result<std::vector<GpuReading>> ReadGpusNvml(const std::string& library);

// Parses the output of `nvidia-smi --query-gpu=index,name,memory.total,memory.used,
// utilization.gpu --format=csv,noheader,nounits` (memory in MiB). "[N/A]" (or "N/A",
// "[Not Supported]") utilization is left unset, memory.used is taken as 0, and memory.total
// falls back to the catalog's figure for a known GPU. Blank lines are skipped; any other bad
// line is an error naming its number and text.
Result<std::vector<GpuReading>> ParseNvidiaSmiCsv(std::string_view text);

// Parses an inventory file's text; `where` (the file) is named in errors together with the
// field ("gpus[1].memory_total_bytes"). Each entry needs "name"; "memory_total_bytes" may be
// left out for a GPU the catalog knows; optional "index", "uuid", "memory_used_bytes",
// "utilization_pct" and "count" (that many identical GPUs, default 1). `node` receives the
// inventory's "node" when given.
Result<std::vector<GpuReading>> ParseInventory(std::string_view text, const std::string& where,
                                               std::string* node = nullptr);

// The catalog's name for a driver's GPU name ("NVIDIA A100-SXM4-80GB" -> "A100-80GB",
// "Tesla V100-SXM2-32GB" -> "V100-32GB", "NVIDIA H100 80GB HBM3" -> "H100-80GB"); names the
// catalog does not know pass through unchanged.
std::string CatalogGpuName(const std::string& nvml_name);

// The heartbeat body: {"node", "source", "gpus": [{"index", "name", "gpu" (catalog name),
// "memory_total_bytes", "memory_used_bytes"}]}.
nlohmann::json HeartbeatJson(const std::string& node_name, const std::vector<GpuReading>& readings,
                             const std::string& source);

}  // namespace frenzy::server

#endif  // FRENZY_SERVER_AGENT_H_
