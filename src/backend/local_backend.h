// The `local` backend: runs on this machine, one process per planned rank.
//
// Launch starts each rank of spec.command as `/bin/sh -c '"$@"; <write the exit code>' ...` in
// its own session (so it outlives the daemon), with RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT (a free port), CUDA_VISIBLE_DEVICES (the
// GPU indices the run holds on the rank's node, as Slurm gives them: every rank of a node sees
// the node's GPUs of the run and picks its own by LOCAL_RANK), FRENZY_WORKDIR, FRENZY_NODE (the
// node's name) and spec.env; it starts in the run's folder (spec.workdir), which keeps
// everything Status needs after a daemon restart:
//   rank-N.log    the rank's standard output and error
//   pids          one line per rank: "RANK PID START_TICKS NODE GPU_INDICES"
//   exit_code.N   the rank's exit code, written by the wrapper when the command ends
//   oom_kills     the OOM killer's kill count at launch (see LocalFailureKind), when readable
//   cancelled     the marker Cancel leaves
// The handle is "local:" + the absolute workdir.
//
// Status: running while any rank lives; succeeded when every rank exited 0; failed when one
// exited non-zero (like torchrun, the ranks still running are then killed, and the message is
// that rank's last log line; its FailureKind is LocalFailureKind's); lost when ranks are gone
// without exit codes (killed, machine rebooted); cancelled after Cancel. A pid is only taken for
// the rank when its process start time matches the recorded one (pids are reused).
//
// GPU indices are handed out per node, lowest free first, and taken back when Status or Cancel
// sees the run end; a restarted daemon re-learns them from the pids files as it asks Status of
// its runs. A node without enough free indices (CPU-only machines, over-subscription) reuses
// indices rather than refusing.
//
// Thread safety: all methods may be called concurrently (one mutex guards the GPU indices).
#ifndef FRENZY_BACKEND_LOCAL_BACKEND_H_
#define FRENZY_BACKEND_LOCAL_BACKEND_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/agent.h"
#include "backend/backend.h"

namespace frenzy::server {

struct LocalBackendOptions {
  // The nodes ranks may be placed on; empty: one node "localhost" with one GPU of unknown type
  // (pass DiscoverLocalNodes' answer to have real ones).
  std::vector<BackendNode> nodes;
  // Cancel sends SIGTERM to every rank's process group, then SIGKILL after this long.
  double kill_grace_s = 5;
  // The file whose "oom_kill N" line counts the kernel OOM killer's kills in the ranks' cgroup
  // (cgroup v2 memory.events, v1 memory.oom_control). Empty: the one of the daemon's own memory
  // cgroup, found from /proc/self/cgroup (the ranks stay in it). The count covers every process
  // of that cgroup, so an OOM kill elsewhere in it during a run can explain a rank's SIGKILL.
  std::string oom_kill_file;
};

// The count of the "oom_kill N" line of a cgroup memory.events or memory.oom_control file;
// nullopt when there is no such line (or its count is not a whole number).
std::optional<int64_t> ParseOomKillCount(std::string_view text);

// Why a rank that exited with `exit_code` (as its wrapper recorded it: 128 + N after signal N)
// failed, given the last lines of its log and whether the kernel's OOM killer killed a process
// in the ranks' cgroup since launch (nullopt: unknown, no counter could be read):
//   kOutOfMemory — the log reports a failed allocation (OutOfMemoryLine, process.h), or SIGKILL
//                  ended the command (137) and the OOM killer fired or cannot be asked: nothing
//                  in this backend sends SIGKILL to a rank's command alone (Cancel and Status
//                  kill a rank's whole process group, wrapper included, so no exit code is
//                  written), which leaves the OOM killer as its usual sender;
//   kCrashed     — anything else, a SIGKILL while the OOM killer's count stood still included.
FailureKind LocalFailureKind(int exit_code, const std::vector<std::string>& log_tail,
                             std::optional<bool> oom_killer_fired);

class LocalBackend : public Backend {
 public:
  explicit LocalBackend(LocalBackendOptions options = {});
  explicit LocalBackend(std::vector<BackendNode> nodes);

  std::string_view name() const override { return "local"; }
  Result<std::vector<BackendNode>> Nodes() override;
  // Errors: InvalidArgument (no command, no workdir, a placement naming an unknown node or not
  // adding up to plan.gpus), FailedPrecondition (ranks of an earlier run still alive in the
  // workdir), NotFound (the program does not exist), Internal (files, fork).
  Result<std::string> Launch(const LaunchSpec& spec) override;
  Result<RunStatus> Status(const std::string& handle) override;
  ::frenzy::Status Cancel(const std::string& handle) override;

  // This machine as one node: named after the inventory's "node" (else "localhost"), with the
  // GPUs found by NVML, nvidia-smi or the inventory (agent.h), named as the catalog names them.
  // When the machine has GPUs of several types, the most numerous type is taken.
  static Result<std::vector<BackendNode>> DiscoverLocalNodes(const AgentOptions& options);

 private:
  struct Rank {
    int rank = 0;
    int pid = 0;
    unsigned long long start_ticks = 0;
    std::string node;
    std::string gpus;  // comma-separated indices, "-" when none
  };

  Result<std::vector<Rank>> ReadPids(const std::string& workdir) const;
  // Creates the run folder, or clears an earlier run's files from it (keeping one earlier
  // attempt's logs); an earlier run still running there is an error.
  ::frenzy::Status PrepareRunFolder(const std::string& workdir) const;
  // The status of a run whose ranks `failed` (with their exit codes, lowest rank first) exited
  // non-zero: the rank that tells most (an out-of-memory one, else the first) and its kind.
  RunStatus FailedStatus(const std::string& workdir,
                         const std::vector<std::pair<const Rank*, int>>& failed) const;
  // Takes `count` GPU indices of `node` for `handle`.
  std::vector<int> TakeGpus(const std::string& node, int64_t count, const std::string& handle);
  void NoteGpus(const std::vector<Rank>& ranks, const std::string& handle);
  void ReleaseGpus(const std::string& handle);

  LocalBackendOptions options_;
  std::mutex mu_;
  // node -> GPU index -> the handle of the run holding it
  std::map<std::string, std::map<int, std::string>> busy_;
};

}  // namespace frenzy::server

#endif  // FRENZY_BACKEND_LOCAL_BACKEND_H_
