// The simple baselines: fifo-static (jobs run as their users asked, first come first served)
// and tiresias (2D least-attained-service, heterogeneity-unaware). See their .cc files.
#ifndef FRENZY_SCHED_BASELINES_H_
#define FRENZY_SCHED_BASELINES_H_

#include <memory>

#include "sched/policy.h"

namespace frenzy {
std::unique_ptr<Policy> MakeFifoStaticPolicy();
std::unique_ptr<Policy> MakeTiresiasPolicy();
}  // namespace frenzy

#endif  // FRENZY_SCHED_BASELINES_H_
