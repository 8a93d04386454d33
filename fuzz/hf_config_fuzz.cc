// libFuzzer target: any bytes given to the HuggingFace config parser must give a ModelSpec or
// an error, never a crash, an overflow or a leak; a parsed spec must count its parameters
// without overflow and consistently with its upper bound.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "model/hf_config.h"
#include "model/model_json.h"
#include "model/param_count.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto spec = frenzy::ParseHfConfigText(text, "fuzz.json");
  if (!spec.ok()) {
    if (spec.status().message().empty()) std::abort();  // every error must say something
    return 0;
  }
  for (auto head : {frenzy::HeadKind::kDefault, frenzy::HeadKind::kMaskedLm}) {
    frenzy::ParamCounts c = frenzy::CountParams(*spec, head);
    if (c.total <= 0 || c.active > c.total) std::abort();
    if (static_cast<double>(c.total) > spec->UpperBoundParams() * 1.0000001) std::abort();
  }
  (void)frenzy::ModelSpecToJson(*spec).dump();
  return 0;
}
