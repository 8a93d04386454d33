// Gavel (Narayanan et al., OSDI 2020): heterogeneity-aware allocation over time fractions,
// solved as a linear program, realised by a round-based mechanism. See gavel.cc for what is
// simplified and why.
#ifndef FRENZY_SCHED_GAVEL_H_
#define FRENZY_SCHED_GAVEL_H_

#include <memory>

#include "sched/policy.h"

namespace frenzy {
std::unique_ptr<Policy> MakeGavelPolicy();
}  // namespace frenzy

#endif  // FRENZY_SCHED_GAVEL_H_
