// Internal to src/launch: what the adapters share, and one entry point per framework. Each
// adapter's .cc names the source of every flag or key it emits (the pinned files in
// tests/data/launch/*.schema list them all, with their sources).
#ifndef FRENZY_LAUNCH_ADAPTERS_H_
#define FRENZY_LAUNCH_ADAPTERS_H_

#include <set>
#include <string>
#include <vector>

#include "launch/launch.h"

namespace frenzy::launch {

// The nodes a plan's GPUs span: as many as its GPU type needs, the same count on each (torchrun
// and accelerate start the same number of processes on every node).
struct Shape {
  int64_t nodes = 1;
  int64_t per_node = 1;
};
std::variant<Shape, Refused> ShapeOf(const Plan& plan, const Cluster& cluster);

// Gradient accumulation steps: the global batch over micro-batch x data-parallel ranks.
int64_t Accumulation(const JobSpec& job, const Plan& plan);

// A launch of framework `l` at `version` over the nodes of `s`, with nothing to run yet.
Launch Start(Launcher l, const char* version, const Shape& s);

// torchrun with the c10d rendezvous the backend fills ($MASTER_ADDR, $MASTER_PORT,
// $FRENZY_JOB_ID), one agent per node.
std::vector<std::string> Torchrun(const Shape& s);

// The user's arguments without those Frenzy owns: `owned` flags with a value (`--f v` or
// `--f=v`) and `owned_switches` without one.
std::vector<std::string> WithoutOwned(const std::vector<std::string>& args,
                                      const std::set<std::string>& owned,
                                      const std::set<std::string>& owned_switches);

// Reasons shared by several adapters.
std::optional<Refused> RefuseCommon(Launcher l, const JobSpec& job, const Plan& plan);

LaunchOutcome Torchtitan(const JobSpec& job, const Plan& plan, const Shape& s,
                         const LaunchInput& in);
LaunchOutcome Megatron(const JobSpec& job, const Plan& plan, const Shape& s, const LaunchInput& in);
LaunchOutcome Accelerate(const JobSpec& job, const Plan& plan, const Shape& s,
                         const LaunchInput& in);
LaunchOutcome DeepSpeed(const JobSpec& job, const Plan& plan, const Shape& s,
                        const LaunchInput& in);

}  // namespace frenzy::launch

#endif  // FRENZY_LAUNCH_ADAPTERS_H_
