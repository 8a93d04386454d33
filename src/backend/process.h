// Processes for the backends: running a command to completion (sbatch, scontrol, kubectl...)
// and starting a detached process that outlives the daemon (a local training rank).
//
// The Slurm and Kubernetes backends run their commands through a ProcessRunner, so that their
// tests answer sbatch or kubectl with scripted replies (tests/server/fake_runner.h) and check
// the exact argv sent, without processes or scripts on PATH. SubprocessRunner is the real one.
//
// Programs are looked up on PATH (the PATH of the environment the program will get) before any
// fork, so a missing program is a NotFound status naming it rather than an exit code 127.
//
// Thread safety: the functions may be called from several threads at once. They never change
// process-wide state: SIGPIPE is blocked only in the calling thread while it writes to a child.
#ifndef FRENZY_BACKEND_PROCESS_H_
#define FRENZY_BACKEND_PROCESS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace frenzy::server {

struct CommandResult {
  // The exit status; 128 + the signal's number when a signal ended the command (as shells
  // report it).
  int exit_code = 0;
  int term_signal = 0;     // the signal that ended the command; 0 when it exited
  bool timed_out = false;  // killed (SIGKILL to its process group) after the timeout
  std::string stdout_text;
  std::string stderr_text;

  bool ok() const { return exit_code == 0 && !timed_out; }
  // "exit 1", "killed by signal 9", "timed out after the limit": for error messages.
  std::string Describe() const;
};

// Runs argv[0] (looked up on PATH) with `argv`, feeding `stdin_text` to its standard input and
// capturing its standard output and error in full (read as they come, so a large output never
// blocks the child). The child runs in its own process group with the daemon's environment
// plus `extra_env`; after `timeout_s` seconds (none when <= 0) the whole group is killed and
// the result says timed_out. Output still held open by a grandchild that outlives the command is
// read for a short grace period, then dropped. Errors: InvalidArgument (empty argv), NotFound (the
// program does not exist or is not executable), Internal (pipe/fork failures). A command that runs
// and fails is not an error: look at the result's exit_code.
Result<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                 const std::string& stdin_text = "", double timeout_s = 30,
                                 const std::map<std::string, std::string>& extra_env = {});

// One command to run to completion, as RunCommand takes it: a value a runner can record.
struct CommandSpec {
  std::vector<std::string> argv;  // argv[0] is looked up on PATH (of the merged environment)
  std::string stdin_text;
  double timeout_s = 30;                         // <= 0: no limit
  std::map<std::string, std::string> extra_env;  // laid over the daemon's environment
};

// Runs commands to completion: the seam between a backend and the operating system.
// Run has RunCommand's contract: an error only when the command could not be run at all
// (InvalidArgument, NotFound, Internal); a command that ran and failed is a CommandResult with
// its exit code, for the caller to judge.
// Thread safety: implementations must allow concurrent Run calls (a backend is asked about runs
// from the daemon's loop and from requests at the same time).
class ProcessRunner {
 public:
  virtual ~ProcessRunner() = default;
  virtual Result<CommandResult> Run(const CommandSpec& command) = 0;
};

// The real runner: RunCommand (fork and exec, pipes, a process group, the timeout).
class SubprocessRunner final : public ProcessRunner {
 public:
  Result<CommandResult> Run(const CommandSpec& command) override;
};

// A SubprocessRunner shared by the whole process (it holds no state): the runner the backends
// use unless they are given another.
ProcessRunner& SystemRunner();

// Starts argv in a new session (its own process group, no controlling terminal), detached from
// the daemon: it is not the daemon's child (a double fork hands it to init), so it survives
// the daemon being killed and never lingers as the daemon's zombie. Its environment is the
// daemon's plus `env`, its working directory `cwd` (unchanged when empty), its standard input
// /dev/null and its standard output and error appended to `log_path` (created if missing).
// Returns its pid, which is also its process group id and session id.
// Errors: InvalidArgument (empty argv), NotFound (missing program, or `cwd` missing), Internal
// (the log cannot be opened, fork or exec failed).
Result<int> SpawnDetached(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env, const std::string& cwd,
                          const std::string& log_path);

// The file a command named `program` runs: `program` itself when it contains a '/', else the
// first executable match on PATH (PATH from `env` when set there, else the daemon's).
// Errors: NotFound naming the program, InvalidArgument (empty name).
Result<std::string> FindProgram(const std::string& program,
                                const std::map<std::string, std::string>& env = {});

// Whether `pid` is a live process: a zombie (exited, not yet reaped) counts as dead.
bool ProcessAlive(int pid);

// The start time of `pid` in clock ticks since boot (/proc/PID/stat field 22), or nullopt when
// there is no such process. With the pid it names a process across pid reuse.
std::optional<uint64_t> ProcessStartTicks(int pid);

// Sends `sig` to the process group `pid` (as made by SpawnDetached), and to `pid` itself in case
// it left the group. Missing processes are ignored.
void KillGroup(int pid, int sig);

// The whole text of a file, or nullopt when it cannot be read.
std::optional<std::string> ReadText(const std::string& path);
// The non-blank lines (trimmed) of the last `max_bytes` of a file, oldest first; none when it
// cannot be read. For the last words of a run's log.
std::vector<std::string> TailLines(const std::string& path, size_t max_bytes = 65536);

// The first of `lines` (a training process's output) that reports a failed allocation: PyTorch's
// caching allocator ("CUDA out of memory", "HIP out of memory", the torch.OutOfMemoryError and
// torch.cuda.OutOfMemoryError it raises), a CUDA runtime or NCCL call ("CUDA error: out of
// memory", "Cuda failure 'out of memory'"), cuBLAS (CUBLAS_STATUS_ALLOC_FAILED) or PyTorch's CPU
// allocator ("DefaultCPUAllocator: can't allocate memory"). Matched as written (case included),
// so prose that merely mentions memory does not count. nullopt when no line does. The backends
// use it to tell an out-of-memory crash (FailureKind::kOutOfMemory) from other crashes.
std::optional<std::string> OutOfMemoryLine(const std::vector<std::string>& lines);

}  // namespace frenzy::server

#endif  // FRENZY_BACKEND_PROCESS_H_
