// Launch adapters: from a job and the plan the planner chose for it, the exact launch of a real
// training framework — argv, environment and config files — with the plan's layout. One adapter
// per framework (torchtitan, Megatron-LM, HF Accelerate with FSDP, DeepSpeed), each pinned to the
// framework source it was written against (Launch::version; the flag and key lists it may emit
// are committed as test data under tests/data/launch/ with their sources). The adapters decide
// nothing about the layout: a plan the framework cannot express is refused with the reason,
// never changed. Before planning, LimitsOf tells the planner which layouts a framework can run,
// so the plans it returns for a job of that framework are expressible.
//
// What stays the user's: the model, data and optimizer — their entry point, and its arguments or
// config file. What becomes Frenzy's: parallelism, the batch split (micro-batch and
// accumulation), recomputation and precision; a user argument that sets one of those is dropped
// and Frenzy's value emitted instead.
//
// Multi-node runs start through torchrun's c10d rendezvous (or `accelerate launch`, which wraps
// it) with the same command on every node; argv holds the placeholders $MASTER_ADDR,
// $MASTER_PORT, $NODE_RANK and $FRENZY_JOB_ID, which the backend fills per node (on Slurm, the
// first node of the allocation). Pure functions: no I/O.
#ifndef FRENZY_LAUNCH_LAUNCH_H_
#define FRENZY_LAUNCH_LAUNCH_H_

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"
#include "hardware/cluster.h"
#include "planner/mixed.h"
#include "planner/planner.h"

namespace frenzy {

enum class Launcher { kTorchtitan, kMegatron, kAccelerate, kDeepSpeed };
const char* LauncherName(Launcher l);  // "torchtitan", "megatron", "accelerate", "deepspeed"
std::optional<Launcher> ParseLauncher(std::string_view s);
std::vector<Launcher> AllLaunchers();

// The memory and speed model of a framework's runs (JobSpec::framework): torchtitan and
// Accelerate run PyTorch FSDP (kFsdp), Megatron-LM kMegatron, DeepSpeed kDeepSpeed.
Framework ModelledAs(Launcher l);
// The layouts the framework can run at its pinned version (see each adapter for why).
LayoutLimits LimitsOf(Launcher l);
// Sets the job's framework and limits for launcher `l`. kInvalidArgument names the field when
// the job asks for what the framework cannot do at all (e.g. LoRA under Megatron-LM, a pinned
// pipeline under Accelerate).
Status PrepareJob(Launcher l, JobSpec* job);

// What the user gives besides the job: their entry point and its own arguments.
struct LaunchInput {
  // Script or module to run; empty: the framework's own (pretrain_gpt.py for Megatron-LM,
  // torchtitan.train for torchtitan; Accelerate and DeepSpeed need the user's script).
  std::string entry;
  std::vector<std::string> args;  // the user's arguments (model, data, optimizer...)
  // torchtitan: the user's TOML job config (model, data, optimizer); Frenzy's layout is given as
  // command-line overrides, which torchtitan applies over the file.
  std::string config_file;
};

struct Launch {
  Launcher framework = Launcher::kMegatron;
  std::string version;  // the framework source the adapter is pinned to
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> files;  // name -> text, written beside the run
  int64_t nodes = 1;                          // the same argv runs on each
  int64_t procs_per_node = 1;
};
// The plan cannot be expressed in the framework: why, in its own terms.
struct Refused {
  std::string reason;
};
using LaunchOutcome = std::variant<Launch, Refused>;

// The launch of `plan` (a plan of `job`, planned with PrepareJob(l)) on `cluster`.
LaunchOutcome MakeLaunch(Launcher l, const JobSpec& job, const Plan& plan, const Cluster& cluster,
                         const LaunchInput& in);

// A plan over several GPU types (planner/mixed.h) is refused by every adapter, with the reason in
// the framework's terms: each of the four runs one micro-batch and accumulation on every rank,
// and a pipeline split only as its own flags allow. Such a plan runs as a script that reads its
// data_groups (examples/train.py) on a heterogeneous Slurm job (docs/heterogeneous.md).
Refused RefuseMixed(Launcher l, const MixedPlan& plan);

// {"framework", "version", "argv", "env", "files", "nodes", "procs_per_node"}, or
// {"framework", "refused": reason}.
nlohmann::json LaunchToJson(Launcher l, const LaunchOutcome& o);
// One shell line (arguments quoted where needed), with the environment in front.
std::string CommandLine(const Launch& l);

}  // namespace frenzy

#endif  // FRENZY_LAUNCH_LAUNCH_H_
