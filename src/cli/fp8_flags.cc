#include "cli/fp8_flags.h"

namespace frenzy::cli {

Status ResolveFp8Recipe(const std::string& flag, Precision precision,
                        std::optional<Fp8Recipe>* recipe) {
  recipe->reset();
  if (flag.empty()) return Status::Ok();
  auto r = ParseFp8Recipe(flag);
  if (!r) {
    return InvalidArgument("unknown value '" + flag +
                               "' (expected delayed, current, mxfp8, tensorwise or rowwise)",
                           {}, "--fp8-recipe");
  }
  if (precision != Precision::kFp8) {
    return InvalidArgument("needs --precision fp8", {}, "--fp8-recipe");
  }
  *recipe = *r;
  return Status::Ok();
}

// What the FP8 words were mapped to.
std::string DescribeFp8(const TrainingSpec& t) {
  if (!t.fp8()) return "";
  const bool te = t.te_fp8();
  std::string lib = te ? "Transformer Engine" : "torchao.float8";
  std::string how;
  switch (t.fp8_recipe) {
    case Fp8Recipe::kDelayed: how = "delayed scaling (amax history)"; break;
    case Fp8Recipe::kCurrent: how = "per-tensor current scaling"; break;
    case Fp8Recipe::kMxfp8: how = "MXFP8 (32-element blocks)"; break;
    case Fp8Recipe::kTensorwise: how = "tensorwise dynamic scaling"; break;
    case Fp8Recipe::kRowwise: how = "rowwise dynamic scaling"; break;
  }
  std::string keeps = te ? "FP8 inputs kept for backward, FP8 weight copies cached"
                         : "bf16 inputs and weights kept, cast again in backward";
  std::string gather;
  if (t.fp8_param_gather) {
    gather = te ? ", FP8 primary weights gathered (--fp8-param-gather)"
                : ", FP8 all-gather under FSDP (enable_fsdp_float8_all_gather)";
  }
  return "fp8: " + lib + ", " + how + "; " + keeps + gather +
         "; output layer and attention core in bf16";
}

}  // namespace frenzy::cli
