// The recomputation words `predict` and `perf` take: Frenzy's own (--recompute, with
// --recompute-every for whole layers at an interval) and torchtitan's (`[activation_checkpoint]
// mode` and `selective_ac_option`), and the sentence that says what they were mapped to.
#ifndef FRENZY_CLI_RECOMPUTE_FLAGS_H_
#define FRENZY_CLI_RECOMPUTE_FLAGS_H_

#include <string>

#include "common/status.h"
#include "memory/training.h"

namespace frenzy::cli {

struct RecomputeFlags {
  std::string recompute = "none";  // --recompute none|selective|op|full
  int64_t every = 1;               // --recompute-every N (with full)
  std::string ac_mode;             // --ac-mode none|selective|full (torchtitan)
  std::string ac_option;           // --selective-ac-option op|N (torchtitan; default "2")
};

// Sets t->recompute and t->recompute_every; fails naming the flag that is wrong (an unknown
// word, torchtitan's words beside --recompute, an interval below 1).
Status ResolveRecompute(const RecomputeFlags& f, TrainingSpec* t);

// "torchtitan mode = \"selective\", selective_ac_option = \"2\": full recomputation of every
// 2nd layer", or "" when torchtitan's words were not used.
std::string DescribeRecompute(const RecomputeFlags& f, const TrainingSpec& t);

}  // namespace frenzy::cli

#endif  // FRENZY_CLI_RECOMPUTE_FLAGS_H_
