#include "backend/process.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

#include "common/strings.h"

extern char** environ;

namespace frenzy::server {
namespace {

using Clock = std::chrono::steady_clock;

// How long output is still read after the command exited, for pipes a grandchild keeps open.
constexpr auto kExitGrace = std::chrono::milliseconds(200);

std::string ErrnoText(int err) { return std::strerror(err); }

Status InternalError(const std::string& what, int err) {
  return Status(StatusCode::kInternal, what + ": " + ErrnoText(err));
}

// Closes a file descriptor on scope exit unless released.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Close(); }
  int get() const { return fd_; }
  void Reset(int fd) {
    Close();
    fd_ = fd;
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// A pipe whose both ends close on exec.
Status MakePipe(Fd& read_end, Fd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return InternalError("pipe", errno);
  read_end.Reset(fds[0]);
  write_end.Reset(fds[1]);
  return Status::Ok();
}

void SetNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

// The daemon's environment with `extra` laid over it, as KEY=VALUE strings.
std::vector<std::string> MergedEnvironment(const std::map<std::string, std::string>& extra,
                                           std::string* path) {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  for (const auto& [k, v] : extra) env[k] = v;
  auto it = env.find("PATH");
  *path = it != env.end() ? it->second : "/usr/local/bin:/usr/bin:/bin";
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// The file execve should run for `program`: itself when it names a path, else the first
// executable match on `path` (as a shell searches it).
Result<std::string> ResolveProgram(const std::string& program, const std::string& path) {
  if (program.empty()) return InvalidArgument("empty program name");
  if (program.find('/') != std::string::npos) {
    if (IsExecutableFile(program)) return program;
    return NotFound("program '" + program + "' does not exist or is not executable");
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + program;
    if (IsExecutableFile(candidate)) return candidate;
    start = end + 1;
  }
  return NotFound("program '" + program + "' not found on PATH (" + path + ")");
}

// NUL-terminated pointer arrays into `strings` (which must outlive them), built before fork.
std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// In a forked child: default signal dispositions and an empty mask, as a fresh program expects
// (ignored signals and the blocked mask are otherwise inherited across exec).
void ResetSignalsInChild() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    ::sigaction(sig, &sa, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

// Writes all of `n` bytes, retrying on EINTR; for the child's error reports.
void WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Reads exactly sizeof(int) bytes, or returns false at EOF.
bool ReadInt(int fd, int* value) {
  char buf[sizeof(int)];
  size_t got = 0;
  while (got < sizeof(buf)) {
    ssize_t r = ::read(fd, buf + got, sizeof(buf) - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  std::memcpy(value, buf, sizeof(int));
  return true;
}

// Blocks SIGPIPE in the calling thread while alive, so that writing to a child that closed its
// standard input yields EPIPE instead of killing the daemon; a SIGPIPE raised meanwhile is
// consumed before the old mask comes back.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_set, &old_);
    was_blocked_ = sigismember(&old_, SIGPIPE) == 1;
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;
  ~ScopedSigpipeBlock() {
    if (got_epipe_ && !was_blocked_) {
      sigset_t pipe_set;
      sigemptyset(&pipe_set);
      sigaddset(&pipe_set, SIGPIPE);
      struct timespec zero = {0, 0};
      while (::sigtimedwait(&pipe_set, nullptr, &zero) == SIGPIPE) {
      }
    }
    ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  void NoteEpipe() { got_epipe_ = true; }

 private:
  sigset_t old_;
  bool was_blocked_ = false;
  bool got_epipe_ = false;
};

// Reads what is available from `fd` into `out`; returns false at EOF or on an error.
bool ReadAvailable(int fd, std::string& out) {
  char buf[65536];
  while (true) {
    ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r > 0) {
      out.append(buf, static_cast<size_t>(r));
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;  // EOF or a real error
  }
}

void FillExitStatus(int wstatus, CommandResult& result) {
  if (WIFEXITED(wstatus)) {
    result.exit_code = WEXITSTATUS(wstatus);
  } else if (WIFSIGNALED(wstatus)) {
    result.term_signal = WTERMSIG(wstatus);
    result.exit_code = 128 + result.term_signal;
  }
}

// The fields of /proc/PID/stat after the command name (field 3, the state, first).
std::optional<std::vector<std::string>> StatFields(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return std::nullopt;
  std::string line;
  std::getline(in, line);
  size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 1));
  std::vector<std::string> fields;
  std::string f;
  while (rest >> f) fields.push_back(f);
  if (fields.empty()) return std::nullopt;
  return fields;
}

}  // namespace

std::string CommandResult::Describe() const {
  if (timed_out) return "timed out (killed)";
  if (term_signal != 0) return "killed by signal " + std::to_string(term_signal);
  return "exit " + std::to_string(exit_code);
}

namespace {

// The parent's side of a started command: its pid (also its process group) and the parent's
// ends of its standard input, output and error.
struct Child {
  pid_t pid = -1;
  Fd in_w, out_r, err_r;
};

// Forks and execs `program` (resolved already) with its standard streams on fresh pipes, in a
// process group of its own so that a timeout can kill everything it started.
Status StartChild(const std::string& program, std::vector<char*>& args, std::vector<char*>& env,
                  const std::string& name, Child& child) {
  Fd in_r, out_w, err_w;
  RETURN_IF_ERROR(MakePipe(in_r, child.in_w));
  RETURN_IF_ERROR(MakePipe(child.out_r, out_w));
  RETURN_IF_ERROR(MakePipe(child.err_r, err_w));
  pid_t pid = ::fork();
  if (pid < 0) return InternalError("fork for '" + name + "'", errno);
  if (pid == 0) {
    // Child: only async-signal-safe calls from here on.
    ::setpgid(0, 0);
    ResetSignalsInChild();
    ::dup2(in_r.get(), STDIN_FILENO);
    ::dup2(out_w.get(), STDOUT_FILENO);
    ::dup2(err_w.get(), STDERR_FILENO);
    ::execve(program.c_str(), args.data(), env.data());
    _exit(127);
  }
  // Also set from the parent, so the group exists before any kill.
  ::setpgid(pid, pid);
  child.pid = pid;
  SetNonBlocking(child.in_w.get());
  SetNonBlocking(child.out_r.get());
  SetNonBlocking(child.err_r.get());
  return Status::Ok();
}

// Feeds a started command its input and collects its output and exit status. The command's
// exit is noticed by waitpid, not by its pipes closing: a grandchild may keep them open, so
// output is read for kExitGrace after the exit and then dropped.
class CommandPump {
 public:
  CommandPump(Child& child, const std::string& input, double timeout_s)
      : child_(child),
        input_(input),
        has_deadline_(timeout_s > 0),
        deadline_(Clock::now() +
                  std::chrono::duration_cast<Clock::duration>(
                      std::chrono::duration<double>(has_deadline_ ? timeout_s : 0))) {}

  Result<CommandResult> Run(const std::string& name) {
    ScopedSigpipeBlock sigpipe_block;
    if (input_.empty()) child_.in_w.Close();
    while (true) {
      NoteExit();
      const Clock::time_point now = Clock::now();
      if (exited_ && ((!out_open_ && !err_open_) || now - exit_time_ >= kExitGrace)) {
        DrainOutput();
        return result_;
      }
      if (!exited_ && has_deadline_ && now >= deadline_) {
        KillForTimeout();
        return result_;
      }
      RETURN_IF_ERROR(WaitAndTransfer(now, name, sigpipe_block));
    }
  }

 private:
  void NoteExit() {
    if (exited_) return;
    int wstatus = 0;
    pid_t w = ::waitpid(child_.pid, &wstatus, WNOHANG);
    if (w == child_.pid) {
      FillExitStatus(wstatus, result_);
    } else if (w < 0 && errno == ECHILD) {
      result_.exit_code = -1;  // reaped elsewhere (SIGCHLD ignored): the status is unknown
    } else {
      return;
    }
    exited_ = true;
    exit_time_ = Clock::now();
    child_.in_w.Close();
  }

  void DrainOutput() {
    if (out_open_) ReadAvailable(child_.out_r.get(), result_.stdout_text);
    if (err_open_) ReadAvailable(child_.err_r.get(), result_.stderr_text);
  }

  void KillForTimeout() {
    ::kill(-child_.pid, SIGKILL);
    ::kill(child_.pid, SIGKILL);
    int wstatus = 0;
    while (::waitpid(child_.pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    result_.timed_out = true;
    FillExitStatus(wstatus, result_);
    DrainOutput();
  }

  // How long the next poll may wait: short while the command runs (its exit is seen by waitpid,
  // not by a descriptor), up to the end of the grace period after it exited, never past the
  // deadline.
  int WaitMs(Clock::time_point now) const {
    using std::chrono::duration_cast;
    using std::chrono::milliseconds;
    if (exited_) {
      return static_cast<int>(
                 duration_cast<milliseconds>(kExitGrace - (now - exit_time_)).count()) +
             1;
    }
    int wait_ms = 20;
    if (has_deadline_) {
      auto left = duration_cast<milliseconds>(deadline_ - now).count();
      wait_ms = static_cast<int>(std::min<int64_t>(wait_ms, left + 1));
    }
    return wait_ms;
  }

  Status WaitAndTransfer(Clock::time_point now, const std::string& name,
                         ScopedSigpipeBlock& sigpipe_block) {
    std::vector<pollfd> fds;
    if (out_open_) fds.push_back({child_.out_r.get(), POLLIN, 0});
    if (err_open_) fds.push_back({child_.err_r.get(), POLLIN, 0});
    if (child_.in_w.get() >= 0) fds.push_back({child_.in_w.get(), POLLOUT, 0});
    const int wait_ms = WaitMs(now);
    if (fds.empty()) {
      // Output closed, exit not seen yet: it follows within moments, so look again soon.
      idle_ms_ = std::min(idle_ms_ * 2, 20);
      ::poll(nullptr, 0, std::min(wait_ms, idle_ms_));
      return Status::Ok();
    }
    if (::poll(fds.data(), fds.size(), wait_ms) < 0) {
      if (errno == EINTR) return Status::Ok();
      int err = errno;
      ::kill(-child_.pid, SIGKILL);
      ::waitpid(child_.pid, nullptr, 0);
      return InternalError("poll while running '" + name + "'", err);
    }
    for (const pollfd& p : fds) {
      if (p.revents != 0) Transfer(p, sigpipe_block);
    }
    return Status::Ok();
  }

  // Moves data through one ready descriptor.
  void Transfer(const pollfd& p, ScopedSigpipeBlock& sigpipe_block) {
    if (p.fd == child_.out_r.get()) {
      out_open_ = ReadAvailable(p.fd, result_.stdout_text);
      if (!out_open_) child_.out_r.Close();
      return;
    }
    if (p.fd == child_.err_r.get()) {
      err_open_ = ReadAvailable(p.fd, result_.stderr_text);
      if (!err_open_) child_.err_r.Close();
      return;
    }
    if (p.revents & (POLLERR | POLLHUP)) {
      child_.in_w.Close();
      return;
    }
    ssize_t w = ::write(p.fd, input_.data() + written_, input_.size() - written_);
    if (w > 0) {
      written_ += static_cast<size_t>(w);
      if (written_ == input_.size()) child_.in_w.Close();
    } else if (w < 0 && errno != EINTR && errno != EAGAIN) {
      if (errno == EPIPE) sigpipe_block.NoteEpipe();
      child_.in_w.Close();  // the child stopped reading: the rest is dropped
    }
  }

  Child& child_;
  const std::string& input_;
  const bool has_deadline_;
  const Clock::time_point deadline_;
  CommandResult result_;
  size_t written_ = 0;
  bool out_open_ = true, err_open_ = true;
  bool exited_ = false;
  Clock::time_point exit_time_;
  int idle_ms_ = 1;
};

}  // namespace

Result<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                 const std::string& stdin_text, double timeout_s,
                                 const std::map<std::string, std::string>& extra_env) {
  if (argv.empty()) return InvalidArgument("RunCommand: empty command");
  std::string path_var;
  std::vector<std::string> env = MergedEnvironment(extra_env, &path_var);
  ASSIGN_OR_RETURN(std::string program, ResolveProgram(argv[0], path_var));
  // Everything the child needs is built before the fork (no allocation after it).
  std::vector<std::string> args = argv;
  std::vector<char*> c_args = CStrings(args);
  std::vector<char*> c_env = CStrings(env);
  Child child;
  RETURN_IF_ERROR(StartChild(program, c_args, c_env, argv[0], child));
  CommandPump pump(child, stdin_text, timeout_s);
  return pump.Run(argv[0]);
}

Result<CommandResult> SubprocessRunner::Run(const CommandSpec& command) {
  return RunCommand(command.argv, command.stdin_text, command.timeout_s, command.extra_env);
}

ProcessRunner& SystemRunner() {
  static SubprocessRunner* runner = new SubprocessRunner();  // never destroyed: used at exit
  return *runner;
}

Result<int> SpawnDetached(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env, const std::string& cwd,
                          const std::string& log_path) {
  if (argv.empty()) return InvalidArgument("SpawnDetached: empty command");
  std::string path_var;
  std::vector<std::string> merged = MergedEnvironment(env, &path_var);
  ASSIGN_OR_RETURN(std::string program, ResolveProgram(argv[0], path_var));
  if (!cwd.empty()) {
    struct stat st;
    if (::stat(cwd.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return NotFound("working directory '" + cwd + "' does not exist");
    }
  }
  std::vector<std::string> args = argv;
  std::vector<char*> c_args = CStrings(args);
  std::vector<char*> c_env = CStrings(merged);

  Fd log(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (log.get() < 0) return InternalError("cannot open log '" + log_path + "'", errno);
  Fd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (dev_null.get() < 0) return InternalError("cannot open /dev/null", errno);
  Fd pid_r, pid_w, err_r, err_w;
  RETURN_IF_ERROR(MakePipe(pid_r, pid_w));
  RETURN_IF_ERROR(MakePipe(err_r, err_w));

  pid_t middle = ::fork();
  if (middle < 0) return InternalError("fork for '" + argv[0] + "'", errno);
  if (middle == 0) {
    // Intermediate child: forks the real process and exits, so init adopts it.
    pid_t child = ::fork();
    if (child == 0) {
      ::setsid();
      ResetSignalsInChild();
      int err = 0;
      if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) {
        err = errno;
        WriteAll(err_w.get(), &err, sizeof(err));
        _exit(127);
      }
      ::dup2(dev_null.get(), STDIN_FILENO);
      ::dup2(log.get(), STDOUT_FILENO);
      ::dup2(log.get(), STDERR_FILENO);
      ::execve(program.c_str(), c_args.data(), c_env.data());
      err = errno;
      WriteAll(err_w.get(), &err, sizeof(err));
      _exit(127);
    }
    int report = child > 0 ? child : -errno;
    WriteAll(pid_w.get(), &report, sizeof(report));
    _exit(0);
  }
  pid_w.Close();
  err_w.Close();
  while (::waitpid(middle, nullptr, 0) < 0 && errno == EINTR) {
  }
  int pid = 0;
  if (!ReadInt(pid_r.get(), &pid)) {
    return Status(StatusCode::kInternal, "starting '" + argv[0] + "': no pid reported");
  }
  if (pid < 0) return InternalError("fork for '" + argv[0] + "'", -pid);
  // EOF once the exec succeeded (close-on-exec); an errno when it failed.
  int exec_errno = 0;
  if (ReadInt(err_r.get(), &exec_errno)) {
    return InternalError("cannot start '" + argv[0] + "'", exec_errno);
  }
  return pid;
}

Result<std::string> FindProgram(const std::string& program,
                                const std::map<std::string, std::string>& env) {
  std::string path_var;
  MergedEnvironment(env, &path_var);
  return ResolveProgram(program, path_var);
}

bool ProcessAlive(int pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  std::optional<std::vector<std::string>> fields = StatFields(pid);
  if (!fields) return ::kill(pid, 0) == 0 || errno == EPERM;  // no /proc: trust kill
  const std::string& state = (*fields)[0];
  return state != "Z" && state != "X" && state != "x";
}

std::optional<uint64_t> ProcessStartTicks(int pid) {
  if (pid <= 0) return std::nullopt;
  std::optional<std::vector<std::string>> fields = StatFields(pid);
  // Field 22 of /proc/PID/stat; fields[0] is field 3.
  if (!fields || fields->size() < 20) return std::nullopt;
  try {
    return std::stoull((*fields)[19]);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

void KillGroup(int pid, int sig) {
  // pid 1 and below would name init, our own group or every process.
  if (pid <= 1) return;
  ::kill(-pid, sig);
  ::kill(pid, sig);
}

std::optional<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> TailLines(const std::string& path, size_t max_bytes) {
  std::vector<std::string> out;
  std::ifstream in(path, std::ios::binary);
  if (!in) return out;
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  std::streamoff from = std::max<std::streamoff>(0, size - static_cast<std::streamoff>(max_bytes));
  in.seekg(from);
  std::string tail(static_cast<size_t>(size - from), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  std::istringstream lines(tail);
  for (std::string line; std::getline(lines, line);) {
    std::string t(Trim(line));
    if (!t.empty()) out.push_back(std::move(t));
  }
  return out;
}

std::optional<std::string> OutOfMemoryLine(const std::vector<std::string>& lines) {
  // Each is printed verbatim by the code named; none appears in ordinary training output.
  static constexpr std::string_view kMarkers[] = {
      "CUDA out of memory",            // c10/cuda/CUDACachingAllocator.cpp (OutOfMemoryError)
      "HIP out of memory",             // the same allocator built for ROCm
      "OutOfMemoryError",              // torch.OutOfMemoryError / torch.cuda.OutOfMemoryError
      "CUDA error: out of memory",     // C10_CUDA_CHECK of cudaErrorMemoryAllocation
      "Cuda failure 'out of memory'",  // NCCL's CUDACHECK
      "CUBLAS_STATUS_ALLOC_FAILED",    // cuBLAS could not allocate its workspace
      "DefaultCPUAllocator: can't allocate memory"  // c10/core/impl/alloc_cpu.cpp
  };
  for (const std::string& line : lines) {
    for (std::string_view marker : kMarkers) {
      if (line.find(marker) != std::string::npos) return line;
    }
  }
  return std::nullopt;
}

}  // namespace frenzy::server
