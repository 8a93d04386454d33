// The FP8 words `predict`, `perf` and `plan` share: --fp8-recipe checked against --precision,
// and the sentence that says what the words were mapped to.
#ifndef FRENZY_CLI_FP8_FLAGS_H_
#define FRENZY_CLI_FP8_FLAGS_H_

#include <optional>
#include <string>

#include "common/status.h"
#include "memory/training.h"

namespace frenzy::cli {

// The recipe --fp8-recipe names (nullopt when the flag is empty: the framework's default);
// fails naming the flag when the word is unknown or --precision is not fp8.
Status ResolveFp8Recipe(const std::string& flag, Precision precision,
                        std::optional<Fp8Recipe>* recipe);

// "fp8: Transformer Engine, delayed scaling (amax history); FP8 inputs kept for backward, ...",
// or "" when the job is not FP8.
std::string DescribeFp8(const TrainingSpec& t);

}  // namespace frenzy::cli

#endif  // FRENZY_CLI_FP8_FLAGS_H_
