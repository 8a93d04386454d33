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
//   cancelled     the marker Cancel leaves
// The handle is "local:" + the absolute workdir.
//
// Status: running while any rank lives; succeeded when every rank exited 0; failed when one
// exited non-zero (like torchrun, the ranks still running are then killed, and the message is
// that rank's last log line); lost when ranks are gone without exit codes (killed, machine
// rebooted); cancelled after Cancel. A pid is only taken for the rank when its process start
// time matches the recorded one (pids are reused).
//
// GPU indices are handed out per node, lowest free first, and taken back when Status or Cancel
// sees the run end; a restarted daemon re-learns them from the pids files as it asks Status of
// its runs. A node without enough free indices (CPU-only machines, over-subscription) reuses
// indices rather than refusing.
//
// Thread safety: all methods may be called concurrently (one mutex guards the GPU indices).
#ifndef FRENZY_SERVER_LOCAL_BACKEND_H_
#define FRENZY_SERVER_LOCAL_BACKEND_H_

#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "server/agent.h"
#include "server/backend.h"

namespace frenzy::server {

struct LocalBackendOptions {
  // The nodes ranks may be placed on; empty: one node "localhost" with one GPU of unknown type
  // (pass DiscoverLocalNodes' answer to have real ones).
  std::vector<BackendNode> nodes;
  // Cancel sends SIGTERM to every rank's process group, then SIGKILL after this long.
  double kill_grace_s = 5;
};

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

#endif  // FRENZY_SERVER_LOCAL_BACKEND_H_
