// Backend: how frenzyd launches, watches and cancels the training runs it decided on, on an
// existing cluster manager. One interface, four implementations:
//   sim   — a simulated heterogeneous cluster inside the daemon (the embedded default);
//   local — local processes, one per planned rank (src/backend/local_backend.h);
//   slurm — sbatch/squeue/scontrol/scancel/sinfo (src/backend/slurm_backend.h);
//   k8s   — Kubernetes Job manifests, applied with kubectl or written to a folder
//           (src/backend/k8s_backend.h).
// A backend holds no state the daemon needs after a restart: every run is named by its handle
// (stored in the daemon's database), and Status(handle) asks the cluster manager (or the run's
// folder) what really happened.
#ifndef FRENZY_BACKEND_BACKEND_H_
#define FRENZY_BACKEND_BACKEND_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "launch/launch.h"
#include "planner/planner.h"

namespace frenzy::server {

// What to run: the job, its plan and where. `command` is the training command of one rank
// (argv); the backend starts `plan.gpus` ranks of it (one per GPU; on CPU-only machines one
// process per rank all the same) with the environment a launcher expects: RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, CUDA_VISIBLE_DEVICES, plus `env`.
//
// A framework's launch (`framework`, from a launch adapter, src/launch) runs instead of
// `command`: its argv once per node (torchrun or `accelerate launch` there starts the node's
// ranks), in the run folder where its files are written, with its env and `env`, and with its
// placeholders $MASTER_ADDR, $MASTER_PORT, $NODE_RANK and $FRENZY_JOB_ID filled in for the node
// (never through a shell's evaluation of the user's words: see NodeAgentArgv).
struct LaunchSpec {
  std::string job_id;   // the daemon's job id, e.g. "j-000042"
  std::string name;     // a human name (the model), for the cluster manager's listings
  Plan plan;            // the layout: plan.gpu (type), plan.gpus, tp, pp, dp, micro_batch, ...
  int64_t nodes = 1;    // nodes the run spans
  int64_t gpus_per_node = 1;
  // Node names chosen by the scheduler (sim, local); slurm and k8s may leave the choice to the
  // cluster manager within the GPU type.
  std::vector<std::pair<std::string, int64_t>> placement;
  std::vector<std::string> command;         // argv of one rank
  std::map<std::string, std::string> env;   // extra environment (FRENZY_PLAN, FRENZY_REPORT_URL...)
  std::string workdir;                      // the run's folder: logs, checkpoints, exit code
  int64_t attempt = 0;                      // 0 for the first run of the job, then 1, 2, ...
  std::optional<frenzy::Launch> framework;  // set: run this per node instead of `command`
  // A run over several GPU types (a mixed plan, issue 19): one component per type, its ranks
  // numbered after the previous components' (Slurm: a heterogeneous job, one `--gres` each);
  // empty: one type, `nodes` x `gpus_per_node` of plan.gpu. Script launches only (`command`).
  struct Component {
    std::string gpu;  // catalog name
    int64_t nodes = 1;
    int64_t gpus_per_node = 1;
  };
  std::vector<Component> components;
};

// The placeholders a framework launch's argv may hold, which backends fill per node.
const std::vector<std::string>& LaunchPlaceholders();  // "MASTER_ADDR", "MASTER_PORT", ...
// The argv of one node's agent for `launch`: a bash wrapper that replaces each $PLACEHOLDER in
// every word of launch.argv with the variable's value (NODE_RANK defaults to Slurm's
// SLURM_NODEID, else 0) and execs the result. Words are only substituted, never evaluated, so
// a user argument holding "$(...)" or ";" reaches the framework as written.
std::vector<std::string> NodeAgentArgv(const frenzy::Launch& launch);
// Checks a framework launch before any backend writes or runs it: file names that are plain
// names (no '/', not "." or "..", not hidden, at most 128 characters of [A-Za-z0-9._-]),
// variable names, a non-empty argv.
::frenzy::Status ValidateFrameworkLaunch(const frenzy::Launch& launch);
// Writes the launch's files into `workdir` (owner-only, replaced whole).
::frenzy::Status WriteLaunchFiles(const frenzy::Launch& launch, const std::string& workdir);

enum class RunState { kPending, kRunning, kSucceeded, kFailed, kCancelled, kLost };
const char* RunStateName(RunState s);

// Why a run failed (RunState::kFailed), as the backend knows it: the daemon's runtime treats each
// kind differently (an out-of-memory crash raises the job's memory factor and never retries the
// layout; a lost node requeues from the checkpoint without counting against the job; any other
// crash is retried with back-off). Backends classify from what their manager reports (Slurm's
// OUT_OF_MEMORY and NODE_FAIL states, a Kubernetes OOMKilled container, a rank's exit status and
// log), never the daemon from prose.
enum class FailureKind { kNone, kOutOfMemory, kNodeLost, kCrashed };
const char* FailureKindName(FailureKind k);

struct RunStatus {
  RunState state = RunState::kPending;
  FailureKind failure = FailureKind::kNone;  // set when state == kFailed
  int exit_code = 0;    // when it ended
  std::string message;  // the manager's reason, or the last line of the log
  // What the backend itself knows of the run's progress (the sim backend does; real runs report
  // over HTTP instead): fraction of the planned work done (< 0: unknown), peak bytes per GPU.
  double progress = -1;
  int64_t peak_bytes = 0;
  // Of that work, what the run's last checkpoint holds (< 0: unknown), which a crashed run
  // resumes from.
  double checkpoint_progress = -1;
};

// A node with GPUs as the backend sees it.
struct BackendNode {
  std::string name;
  std::string gpu;     // GPU type, as the catalog names it when known (e.g. "A100-80GB")
  int64_t gpus = 0;
  bool up = true;
  double network_gbs = 0;  // between nodes, GB/s, when the backend knows it (0: unknown)
};

// Thread safety: the daemon asks Status() about its runs from the control loop without its own
// lock, while Launch() and Cancel() may run at the same time from the loop or a request, so an
// implementation guards whatever state it keeps (the Slurm and Kubernetes backends keep none).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // The nodes and their GPUs (discovery).
  virtual Result<std::vector<BackendNode>> Nodes() = 0;
  // Starts a run; returns its handle (e.g. the Slurm job id).
  virtual Result<std::string> Launch(const LaunchSpec& spec) = 0;
  virtual Result<RunStatus> Status(const std::string& handle) = 0;
  // Spelled in full: inside Backend, `Status` names the member function above.
  virtual ::frenzy::Status Cancel(const std::string& handle) = 0;
};

}  // namespace frenzy::server

#endif  // FRENZY_BACKEND_BACKEND_H_
