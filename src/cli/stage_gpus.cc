#include "cli/stage_gpus.h"

#include <cstdlib>

#include "hardware/gpu.h"

namespace frenzy::cli {

Result<std::vector<StageGpus>> ParseStageGpus(const std::string& text, int64_t pp) {
  auto bad = [](const std::string& msg) { return InvalidArgument(msg, {}, "--stage-gpus"); };
  std::vector<StageGpus> parts;
  int64_t stages = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string part = text.substr(start, end - start);
    const size_t colon = part.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == part.size()) {
      return bad("expected TYPE:STAGES, found '" + part + "'");
    }
    const std::string count = part.substr(colon + 1);
    char* stop = nullptr;
    const long long n = std::strtoll(count.c_str(), &stop, 10);
    if (stop == nullptr || *stop != '\0' || n < 1 || n > (1 << 20)) {
      return bad("'" + count + "' is not a number of stages (1 or more)");
    }
    auto gpu = GpuCatalog::Default().Lookup(part.substr(0, colon));
    if (!gpu.ok()) return gpu.status().WithWhere("--stage-gpus");
    parts.push_back(StageGpus{*gpu, Network{}, static_cast<int64_t>(n)});
    stages += n;
    start = end + 1;
  }
  if (stages != pp) {
    return bad("names " + std::to_string(stages) + " stages; the layout has --pp " +
               std::to_string(pp));
  }
  return parts;
}

nlohmann::json StageFits(const MemoryEstimate& est, const std::vector<StageGpus>& parts) {
  nlohmann::json out = nlohmann::json::array();
  size_t stage = 0;  // est holds every stage (StageDetail::kAll), in order
  for (const StageGpus& part : parts) {
    const GpuType& gpu = *part.gpu;
    for (int64_t k = 0; k < part.stages && stage < est.stages.size(); ++k, ++stage) {
      const StageEstimate& s = est.stages[stage];
      const int64_t resident = s.device_bytes - s.pageable_bytes;
      out.push_back({{"stage", s.stage},
                     {"gpu", gpu.name},
                     {"gpu_memory_bytes", gpu.memory_bytes},
                     {"resident_bytes", resident},
                     {"headroom_bytes", gpu.memory_bytes - resident},
                     {"fits", resident <= gpu.memory_bytes}});
    }
  }
  return out;
}

}  // namespace frenzy::cli
