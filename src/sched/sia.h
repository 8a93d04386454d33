// Sia (Jayaram Subramanya et al., SOSP 2023): heterogeneity-aware, goodput-optimised allocation
// of (GPU type, GPU count) configurations, solved as an integer linear program every round with a
// restart penalty. See sia.cc for what is simplified and why.
#ifndef FRENZY_SCHED_SIA_H_
#define FRENZY_SCHED_SIA_H_

#include <memory>

#include "sched/policy.h"

namespace frenzy {
std::unique_ptr<Policy> MakeSiaPolicy();
}  // namespace frenzy

#endif  // FRENZY_SCHED_SIA_H_
