#include "server/agent.h"

#include <dlfcn.h>
#include <fmt/core.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "common/strings.h"
#include "hardware/gpu.h"
#include "backend/process.h"

namespace frenzy::server {
namespace {

using nlohmann::json;

constexpr int64_t kMiB = 1024 * 1024;

// ---- NVML, declared by hand ----------------------------------------------------------------
// The few NVML entry points used, with the C ABI of NVIDIA's nvml.h (stable across drivers;
// the _v2 names have existed since the v2 API was introduced and are what nvml.h maps the plain
// names to today):
//   nvmlReturn_t is a C enum (an int): NVML_SUCCESS is 0.
//   nvmlDevice_t is an opaque pointer (struct nvmlDevice_st*).
//   nvmlMemory_t (version 1, taken by nvmlDeviceGetMemoryInfo) is
//     { unsigned long long total; unsigned long long free; unsigned long long used; } in bytes.
//   nvmlUtilization_t is { unsigned int gpu; unsigned int memory; } in percent.
//   Names and UUIDs fit in 96 bytes (NVML_DEVICE_NAME_V2_BUFFER_SIZE,
//   NVML_DEVICE_UUID_V2_BUFFER_SIZE); NVML null-terminates what it writes.
using NvmlReturn = int;
using NvmlDevice = void*;
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr unsigned int kNvmlBufferSize = 96;

using NvmlInitFn = NvmlReturn (*)();
using NvmlShutdownFn = NvmlReturn (*)();
using NvmlCountFn = NvmlReturn (*)(unsigned int*);
using NvmlHandleFn = NvmlReturn (*)(unsigned int, NvmlDevice*);
using NvmlStringFn = NvmlReturn (*)(NvmlDevice, char*, unsigned int);
using NvmlMemoryFn = NvmlReturn (*)(NvmlDevice, NvmlMemory*);
using NvmlUtilizationFn = NvmlReturn (*)(NvmlDevice, NvmlUtilization*);
using NvmlErrorStringFn = const char* (*)(NvmlReturn);

class DlLibrary {
 public:
  explicit DlLibrary(const std::string& name) : handle_(dlopen(name.c_str(), RTLD_NOW)) {}
  ~DlLibrary() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  DlLibrary(const DlLibrary&) = delete;
  DlLibrary& operator=(const DlLibrary&) = delete;
  bool loaded() const { return handle_ != nullptr; }
  template <typename Fn>
  Fn Get(const char* symbol) const {
    return reinterpret_cast<Fn>(dlsym(handle_, symbol));
  }

 private:
  void* handle_;
};

std::string NvmlError(NvmlErrorStringFn error_string, NvmlReturn code) {
  const char* text = error_string != nullptr ? error_string(code) : nullptr;
  return text != nullptr ? fmt::format("{} (NVML error {})", text, code)
                         : fmt::format("NVML error {}", code);
}

// ---- text helpers ----------------------------------------------------------------------------

// nvidia-smi's ways of saying a value is not there.
bool NotAvailable(const std::string& field) {
  return field.empty() || field == "N/A" || field.front() == '[';
}

std::optional<double> ParseNumber(const std::string& field) {
  if (field.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(field.c_str(), &end);
  if (errno != 0 || end != field.c_str() + field.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<int64_t> CatalogMemory(const std::string& name) {
  if (const GpuType* t = GpuCatalog::Default().Find(name)) return t->memory_bytes;
  return std::nullopt;
}

}  // namespace

Result<std::vector<GpuReading>> ReadGpusNvml(const std::string& library) {
  DlLibrary lib(library);
  if (!lib.loaded()) {
    const char* why = dlerror();
    return NotFound(fmt::format("cannot load {}: {}", library, why != nullptr ? why : "unknown"));
  }
  auto init = lib.Get<NvmlInitFn>("nvmlInit_v2");
  auto shutdown = lib.Get<NvmlShutdownFn>("nvmlShutdown");
  auto count_fn = lib.Get<NvmlCountFn>("nvmlDeviceGetCount_v2");
  auto handle_fn = lib.Get<NvmlHandleFn>("nvmlDeviceGetHandleByIndex_v2");
  auto name_fn = lib.Get<NvmlStringFn>("nvmlDeviceGetName");
  auto memory_fn = lib.Get<NvmlMemoryFn>("nvmlDeviceGetMemoryInfo");
  // Optional: older or stripped-down libraries may lack them.
  auto uuid_fn = lib.Get<NvmlStringFn>("nvmlDeviceGetUUID");
  auto util_fn = lib.Get<NvmlUtilizationFn>("nvmlDeviceGetUtilizationRates");
  auto error_string = lib.Get<NvmlErrorStringFn>("nvmlErrorString");
  if (init == nullptr || shutdown == nullptr || count_fn == nullptr || handle_fn == nullptr ||
      name_fn == nullptr || memory_fn == nullptr) {
    return Status(StatusCode::kFailedPrecondition,
                  library +
                      " lacks the NVML entry points needed (nvmlInit_v2, "
                      "nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2, "
                      "nvmlDeviceGetName, nvmlDeviceGetMemoryInfo, nvmlShutdown)");
  }
  NvmlReturn rc = init();
  if (rc != kNvmlSuccess) {
    return Status(StatusCode::kFailedPrecondition,
                  "nvmlInit_v2 failed: " + NvmlError(error_string, rc));
  }
  struct ShutdownGuard {
    NvmlShutdownFn fn;
    ~ShutdownGuard() { fn(); }
  } guard{shutdown};

  unsigned int count = 0;
  rc = count_fn(&count);
  if (rc != kNvmlSuccess) {
    return Status(StatusCode::kFailedPrecondition,
                  "nvmlDeviceGetCount_v2 failed: " + NvmlError(error_string, rc));
  }
  std::vector<GpuReading> out;
  for (unsigned int i = 0; i < count; ++i) {
    NvmlDevice device = nullptr;
    rc = handle_fn(i, &device);
    if (rc != kNvmlSuccess) {
      return Status(StatusCode::kFailedPrecondition,
                    fmt::format("nvmlDeviceGetHandleByIndex_v2({}) failed: {}", i,
                                NvmlError(error_string, rc)));
    }
    GpuReading g;
    g.index = i;
    char buffer[kNvmlBufferSize] = {};
    rc = name_fn(device, buffer, kNvmlBufferSize);
    if (rc != kNvmlSuccess) {
      return Status(StatusCode::kFailedPrecondition, fmt::format("nvmlDeviceGetName({}) failed: {}",
                                                                 i, NvmlError(error_string, rc)));
    }
    buffer[kNvmlBufferSize - 1] = '\0';
    g.name = buffer;
    NvmlMemory memory{};
    rc = memory_fn(device, &memory);
    if (rc != kNvmlSuccess) {
      return Status(
          StatusCode::kFailedPrecondition,
          fmt::format("nvmlDeviceGetMemoryInfo({}) failed: {}", i, NvmlError(error_string, rc)));
    }
    g.memory_total_bytes = static_cast<int64_t>(memory.total);
    g.memory_used_bytes = static_cast<int64_t>(memory.used);
    if (uuid_fn != nullptr) {
      char uuid[kNvmlBufferSize] = {};
      if (uuid_fn(device, uuid, kNvmlBufferSize) == kNvmlSuccess) {
        uuid[kNvmlBufferSize - 1] = '\0';
        g.uuid = std::string(uuid);
      }
    }
    if (util_fn != nullptr) {
      NvmlUtilization util{};
      if (util_fn(device, &util) == kNvmlSuccess) g.utilization_pct = util.gpu;
    }
    out.push_back(std::move(g));
  }
  return out;
}

Result<std::vector<GpuReading>> ParseNvidiaSmiCsv(std::string_view text) {
  std::vector<GpuReading> out;
  std::istringstream in{std::string(text)};
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string trimmed(Trim(line));
    if (trimmed.empty()) continue;
    const std::string where = fmt::format("nvidia-smi output line {}", line_no);
    std::vector<std::string> fields;
    std::stringstream ss(trimmed);
    std::string f;
    while (std::getline(ss, f, ',')) fields.emplace_back(Trim(f));
    if (!trimmed.empty() && trimmed.back() == ',') fields.push_back("");
    if (fields.size() != 5) {
      return InvalidArgument(
          fmt::format("line {}: expected 5 comma-separated fields (index, name, memory.total, "
                      "memory.used, utilization.gpu), got {}: '{}'",
                      line_no, fields.size(), trimmed),
          where);
    }
    GpuReading g;
    auto index = ParseNumber(fields[0]);
    if (!index || *index < 0 || *index != std::floor(*index)) {
      return InvalidArgument(fmt::format("line {}: index '{}' is not a whole number: '{}'", line_no,
                                         fields[0], trimmed),
                             where, "index");
    }
    g.index = static_cast<int64_t>(*index);
    g.name = fields[1];
    if (NotAvailable(g.name)) {
      return InvalidArgument(fmt::format("line {}: no GPU name: '{}'", line_no, trimmed), where,
                             "name");
    }
    if (NotAvailable(fields[2])) {
      auto catalog = CatalogMemory(g.name);
      if (!catalog) {
        return InvalidArgument(
            fmt::format("line {}: memory.total is '{}' and the catalog does not know '{}': '{}'",
                        line_no, fields[2], g.name, trimmed),
            where, "memory.total");
      }
      g.memory_total_bytes = *catalog;
    } else {
      auto mib = ParseNumber(fields[2]);
      if (!mib || *mib < 0) {
        return InvalidArgument(
            fmt::format("line {}: memory.total '{}' is not a number of MiB: '{}'", line_no,
                        fields[2], trimmed),
            where, "memory.total");
      }
      g.memory_total_bytes = static_cast<int64_t>(std::llround(*mib * kMiB));
    }
    if (!NotAvailable(fields[3])) {
      auto mib = ParseNumber(fields[3]);
      if (!mib || *mib < 0) {
        return InvalidArgument(fmt::format("line {}: memory.used '{}' is not a number of MiB: '{}'",
                                           line_no, fields[3], trimmed),
                               where, "memory.used");
      }
      g.memory_used_bytes = static_cast<int64_t>(std::llround(*mib * kMiB));
    }
    if (!NotAvailable(fields[4])) {
      auto pct = ParseNumber(fields[4]);
      if (!pct || *pct < 0 || *pct > 100) {
        return InvalidArgument(
            fmt::format("line {}: utilization.gpu '{}' is not a percentage: '{}'", line_no,
                        fields[4], trimmed),
            where, "utilization.gpu");
      }
      g.utilization_pct = *pct;
    }
    out.push_back(std::move(g));
  }
  return out;
}

Result<std::vector<GpuReading>> ParseInventory(std::string_view text, const std::string& where,
                                               std::string* node) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    return InvalidArgument(std::string("not valid JSON: ") + e.what(), where);
  }
  if (!doc.is_object()) {
    return InvalidArgument("an inventory is a JSON object with \"gpus\"", where);
  }
  for (const auto& [key, value] : doc.items()) {
    if (key != "node" && key != "gpus") {
      return InvalidArgument("unknown field (expected \"node\" and \"gpus\")", where, key);
    }
  }
  if (doc.contains("node")) {
    if (!doc["node"].is_string() || doc["node"].get<std::string>().empty()) {
      return InvalidArgument("must be a non-empty string", where, "node");
    }
    if (node != nullptr) *node = doc["node"].get<std::string>();
  }
  if (!doc.contains("gpus") || !doc["gpus"].is_array() || doc["gpus"].empty()) {
    return InvalidArgument("must be a non-empty array of GPUs", where, "gpus");
  }
  static const std::set<std::string> kKeys = {
      "index",           "name", "uuid", "memory_total_bytes", "memory_used_bytes",
      "utilization_pct", "count"};
  std::vector<GpuReading> out;
  std::set<int64_t> seen;
  int64_t next_index = 0;
  const json& gpus = doc["gpus"];
  for (size_t i = 0; i < gpus.size(); ++i) {
    const json& e = gpus[i];
    const std::string at = fmt::format("gpus[{}]", i);
    if (!e.is_object()) return InvalidArgument("must be an object", where, at);
    for (const auto& [key, value] : e.items()) {
      if (kKeys.count(key) == 0) return InvalidArgument("unknown field", where, at + "." + key);
    }
    auto integer = [&](const char* key, int64_t min) -> Result<std::optional<int64_t>> {
      if (!e.contains(key)) return std::optional<int64_t>();
      const json& v = e[key];
      if (!v.is_number_integer() || v.get<int64_t>() < min) {
        return InvalidArgument(fmt::format("must be an integer >= {}, got {}", min, v.dump()),
                               where, at + "." + key);
      }
      return std::optional<int64_t>(v.get<int64_t>());
    };
    GpuReading g;
    if (!e.contains("name") || !e["name"].is_string() || e["name"].get<std::string>().empty()) {
      return InvalidArgument("required: the GPU's name (catalog name or driver name)", where,
                             at + ".name");
    }
    g.name = e["name"].get<std::string>();
    ASSIGN_OR_RETURN(auto total, integer("memory_total_bytes", 1));
    if (total) {
      g.memory_total_bytes = *total;
    } else if (auto catalog = CatalogMemory(g.name)) {
      g.memory_total_bytes = *catalog;
    } else {
      return InvalidArgument("required: the catalog does not know GPU '" + g.name + "'", where,
                             at + ".memory_total_bytes");
    }
    ASSIGN_OR_RETURN(auto used, integer("memory_used_bytes", 0));
    if (used) {
      if (*used > g.memory_total_bytes) {
        return InvalidArgument(
            fmt::format("{} is more than the GPU's {} bytes", *used, g.memory_total_bytes), where,
            at + ".memory_used_bytes");
      }
      g.memory_used_bytes = *used;
    }
    if (e.contains("utilization_pct")) {
      const json& v = e["utilization_pct"];
      if (!v.is_number() || v.get<double>() < 0 || v.get<double>() > 100) {
        return InvalidArgument("must be a number from 0 to 100, got " + v.dump(), where,
                               at + ".utilization_pct");
      }
      g.utilization_pct = v.get<double>();
    }
    ASSIGN_OR_RETURN(auto count, integer("count", 1));
    const int64_t n = count.value_or(1);
    if (e.contains("uuid")) {
      if (!e["uuid"].is_string()) {
        return InvalidArgument("must be a string", where, at + ".uuid");
      }
      if (n > 1) {
        return InvalidArgument("a uuid names one GPU; it cannot go with \"count\" > 1", where,
                               at + ".uuid");
      }
      g.uuid = e["uuid"].get<std::string>();
    }
    ASSIGN_OR_RETURN(auto index, integer("index", 0));
    int64_t first = index.value_or(next_index);
    for (int64_t k = 0; k < n; ++k) {
      GpuReading copy = g;
      copy.index = first + k;
      if (!seen.insert(copy.index).second) {
        return InvalidArgument(fmt::format("GPU index {} appears twice", copy.index), where,
                               at + ".index");
      }
      out.push_back(std::move(copy));
    }
    next_index = first + n;
  }
  return out;
}

Result<std::vector<GpuReading>> ReadGpus(const AgentOptions& options, GpuSourceInfo* info) {
  GpuSourceInfo local;
  GpuSourceInfo& out = info != nullptr ? *info : local;
  out = GpuSourceInfo{};

  if (options.use_nvml) {
    auto r = ReadGpusNvml(options.nvml_library);
    if (r.ok() && !r->empty()) {
      out.source = "nvml";
      return r;
    }
    out.skipped.push_back("nvml: " + (r.ok() ? std::string("no GPUs") : r.status().message()));
  }
  if (options.use_nvidia_smi) {
    ProcessRunner& runner = options.runner != nullptr ? *options.runner : SystemRunner();
    auto run = runner.Run(CommandSpec{
        {options.nvidia_smi, "--query-gpu=index,name,memory.total,memory.used,utilization.gpu",
         "--format=csv,noheader,nounits"},
        "",
        options.nvidia_smi_timeout_s,
        {}});
    if (!run.ok()) {
      out.skipped.push_back("nvidia-smi: " + run.status().message());
    } else if (!run->ok()) {
      std::string said(Trim(run->stdout_text + " " + run->stderr_text));
      out.skipped.push_back("nvidia-smi: " + run->Describe() + (said.empty() ? "" : ": " + said));
    } else {
      auto parsed = ParseNvidiaSmiCsv(run->stdout_text);
      if (parsed.ok() && !parsed->empty()) {
        out.source = "nvidia-smi";
        return parsed;
      }
      out.skipped.push_back("nvidia-smi: " +
                            (parsed.ok() ? std::string("no GPUs") : parsed.status().ToString()));
    }
  }
  if (!options.inventory_path.empty()) {
    std::ifstream in(options.inventory_path);
    if (!in) {
      return NotFound("cannot read the inventory file", options.inventory_path);
    }
    std::stringstream text;
    text << in.rdbuf();
    ASSIGN_OR_RETURN(auto gpus, ParseInventory(text.str(), options.inventory_path, &out.node));
    out.source = "inventory";
    return gpus;
  }
  std::string why;
  for (const auto& s : out.skipped) why += (why.empty() ? "" : "; ") + s;
  return NotFound("no GPUs found (" + (why.empty() ? std::string("every source is off") : why) +
                  "); give an inventory file for a node without an NVIDIA driver");
}

std::string CatalogGpuName(const std::string& nvml_name) {
  if (const GpuType* t = GpuCatalog::Default().Find(nvml_name)) return t->name;
  return nvml_name;
}

nlohmann::json HeartbeatJson(const std::string& node_name, const std::vector<GpuReading>& readings,
                             const std::string& source) {
  json gpus = json::array();
  for (const auto& g : readings) {
    gpus.push_back({{"index", g.index},
                    {"name", g.name},
                    {"gpu", CatalogGpuName(g.name)},
                    {"memory_total_bytes", g.memory_total_bytes},
                    {"memory_used_bytes", g.memory_used_bytes}});
  }
  return {{"node", node_name}, {"source", source}, {"gpus", gpus}};
}

}  // namespace frenzy::server
