// The `slurm` backend: runs are Slurm batch jobs, driven through the client commands (sbatch,
// scontrol, scancel, sinfo) with SLURM_CONF pointing at the cluster's slurm.conf.
//
// A run is one batch job (the run's folder must be on a filesystem the nodes share):
//   WORKDIR/job.sbatch     the script (SbatchScript), submitted with `sbatch --parsable`;
//                          mode 0600, as it holds the run's environment and so its token
//   WORKDIR/slurm-<id>.out the job's output (all ranks)
//   WORKDIR/exit_code      srun's exit code, written by the script when the ranks end
//   WORKDIR/cancelled      the marker Cancel leaves
// It asks for `nodes` nodes with `gpus_per_node` tasks and GPUs each (`--gres=gpu:<type>:G`,
// the type derived from the catalog name, see GresType), and lets Slurm choose the nodes. The
// handle is "slurm:<job id>:<workdir>", so Status works after a daemon restart and after Slurm
// has forgotten the job (MinJobAge): then WORKDIR/exit_code says how it ended.
//
// Every failing client command is an error naming the command and its standard error.
//
// A failed run's FailureKind comes from Slurm's job state (OUT_OF_MEMORY: out of memory;
// NODE_FAIL, BOOT_FAIL, PREEMPTED: the nodes were lost or taken; others: a crash), and a crash
// whose output reports a failed allocation (OutOfMemoryLine in process.h, or slurmstepd's
// "Detected N oom-kill event(s)") is out of memory too: Slurm knows nothing of GPU memory, so a
// CUDA out-of-memory error reaches it as an ordinary non-zero exit.
//
// Thread safety: SlurmBackend holds only its options and references to the catalog and the
// runner (both safe to share); the functions below are pure.
#ifndef FRENZY_BACKEND_SLURM_BACKEND_H_
#define FRENZY_BACKEND_SLURM_BACKEND_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "backend/process.h"

namespace frenzy {
class GpuCatalog;
}  // namespace frenzy

namespace frenzy::server {

struct SlurmOptions {
  std::string slurm_conf;  // SLURM_CONF for every client call; empty: the clients' default
  std::string partition;   // empty: the cluster's default partition
  // Passed to sbatch on its command line (so they override the script's #SBATCH lines), e.g.
  // {"--time=04:00:00", "--account=ml"}.
  std::vector<std::string> extra_sbatch_args;
  // Catalog GPU name -> Slurm gres type, where the cluster's names differ from the derived ones
  // ({"A100-80GB": "a100"}). Matched like catalog names (case and separators ignored).
  std::map<std::string, std::string> gres_types;
  // The rendezvous port; 0: 20000 + (job id mod 20000), so concurrent jobs rarely collide.
  int master_port = 0;
  double command_timeout_s = 30;  // for each client command
  // The folder of the client commands; empty: found on PATH.
  std::string bin_dir;
};

// The gres type for a catalog GPU name: the explicit mapping when it has one, else the name
// lower-cased with everything but letters and digits dropped ("A100-80GB" -> "a10080gb").
std::string GresType(std::string_view gpu, const SlurmOptions& options);
// The catalog name for a gres type: the explicit mapping read backwards, else the catalog
// entry whose name or alias the type matches ("a10080gb" -> "A100-80GB", "a100" ->
// "A100-80GB"), else the type itself.
std::string CatalogGpuForGres(std::string_view type, const SlurmOptions& options,
                              const GpuCatalog& catalog);

// Writes `text` to `path` with mode 0600 from the file's creation on (a new file renamed over
// any old one), for files that hold credentials (the k8s backend's Secret manifests too).
// Errors: Internal naming `path` and the reason.
::frenzy::Status WritePrivateFile(const std::string& path, const std::string& text);

// Quotes `s` for a POSIX shell (single quotes; an inner ' as '\'').
std::string ShellQuote(std::string_view s);

// The batch script of a run: #SBATCH --job-name=frenzy-<job_id>, --nodes, --ntasks-per-node,
// --gres (none when gpus_per_node is 0), --partition (when set), --output and --chdir; the body
// exports spec.env and FRENZY_WORKDIR, MASTER_ADDR (the address of the job's first node) and
// MASTER_PORT, runs the command with srun under a per-task wrapper that sets RANK, WORLD_SIZE,
// LOCAL_RANK and LOCAL_WORLD_SIZE from Slurm's task variables, and writes srun's exit code to
// WORKDIR/exit_code. Every value is shell-quoted; `spec` is expected to be valid (Launch checks).
std::string SbatchScript(const LaunchSpec& spec, const SlurmOptions& options);

// The nodes in `sinfo --json` output (Slurm 22.05's shape, and the later one where "state" is a
// list): each node's name, its first GPU gres type (mapped to the catalog name) and count, and
// whether it can run jobs (not down, drained, failing or not responding). Nodes without GPUs
// are listed with gpus = 0. With `partition` set, only nodes in that partition. GPU names are
// `catalog`'s (CatalogGpuForGres).
// Errors: InvalidArgument (not JSON, no "nodes", errors reported by Slurm).
Result<std::vector<BackendNode>> ParseSinfoJson(const std::string& json_text,
                                                const GpuCatalog& catalog,
                                                const SlurmOptions& options = {},
                                                const std::string& partition = "");

// The run's state from `scontrol show job -o ID` output (the first job record): JobState
// (PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, ...),
// ExitCode=code:signal (a signal gives 128 + signal) and Reason. A failed run's `failure` is
// SlurmFailureKind(JobState).
// Errors: InvalidArgument (no JobState, an unknown state).
Result<RunStatus> ParseJobState(const std::string& scontrol_output);

// The FailureKind of a job that ended in `job_state` without succeeding: OUT_OF_MEMORY ->
// kOutOfMemory; NODE_FAIL and BOOT_FAIL (a node died or never came up) and PREEMPTED (Slurm gave
// the nodes to another job) -> kNodeLost, as the run itself did nothing wrong; anything else
// (FAILED, TIMEOUT, DEADLINE, COMPLETED with a non-zero exit code...) -> kCrashed.
FailureKind SlurmFailureKind(std::string_view job_state);

// "slurm:<job id>:<workdir>" and back.
std::string SlurmHandle(const std::string& job_id, const std::string& workdir);
Result<std::pair<std::string, std::string>> ParseSlurmHandle(const std::string& handle);

class SlurmBackend : public Backend {
 public:
  // GPU names are `catalog`'s; client commands run through `runner`.
  // REQUIRES: `catalog` and `runner` outlive the backend.
  SlurmBackend(SlurmOptions options, const GpuCatalog& catalog,
               ProcessRunner& runner = SystemRunner());
  // The bundled catalog and real processes. Kept for callers not yet passing a catalog
  // (tests/server/slurm_live_test.cc); prefer the constructor above.
  explicit SlurmBackend(SlurmOptions options);

  std::string_view name() const override { return "slurm"; }
  // `sinfo --json` (the partition's nodes when one is set).
  Result<std::vector<BackendNode>> Nodes() override;
  // Writes WORKDIR/job.sbatch and submits it. Errors: InvalidArgument (no command, no job id, a
  // relative workdir, bad env names, ranks not the same on every node), the sbatch error.
  Result<std::string> Launch(const LaunchSpec& spec) override;
  // `scontrol show job -o ID`; when Slurm no longer knows the job, WORKDIR/cancelled and
  // WORKDIR/exit_code (lost when neither exists).
  Result<RunStatus> Status(const std::string& handle) override;
  // `scancel ID` (a job that already ended or that Slurm forgot is not an error), then the
  // WORKDIR/cancelled marker when it was still pending or running.
  ::frenzy::Status Cancel(const std::string& handle) override;

  const SlurmOptions& options() const { return options_; }

 private:
  // Runs a Slurm client command with SLURM_CONF set.
  Result<CommandResult> Run(const std::vector<std::string>& argv) const;
  // Like Run, but a failure (or timeout) is an error naming the command and its stderr.
  Result<std::string> RunChecked(const std::vector<std::string>& argv) const;
  // The outcome told by the run's folder once Slurm has forgotten the job.
  Result<RunStatus> StatusFromFolder(const std::string& id, const std::string& workdir) const;

  SlurmOptions options_;
  const GpuCatalog& catalog_;
  ProcessRunner& runner_;
};

}  // namespace frenzy::server

#endif  // FRENZY_BACKEND_SLURM_BACKEND_H_
