// libFuzzer target: cluster files and GPU catalogs from untrusted bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "hardware/cluster.h"
#include "hardware/gpu.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto cluster = frenzy::Cluster::Parse(text, "fuzz.json", frenzy::GpuCatalog::Default());
  if (cluster.ok()) {
    if (cluster->nodes.empty() || cluster->total_gpus() <= 0) std::abort();
    (void)cluster->ToJson(frenzy::GpuCatalog::Default()).dump();
  }
  auto catalog = frenzy::GpuCatalog::Parse(text, "fuzz.json");
  if (catalog.ok()) {
    for (const auto& g : catalog->gpus()) {
      if (catalog->Find(g.name) != &g) std::abort();  // names must stay unique
    }
  }
  return 0;
}
