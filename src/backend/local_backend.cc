#include "backend/local_backend.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <system_error>
#include <thread>

#include "common/strings.h"
#include "backend/process.h"

namespace frenzy::server {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kHandlePrefix = "local:";
// The wrapper every rank runs: the command (its argv after the wrapper's name), then its exit
// code written atomically where Status finds it even after a daemon crash.
constexpr const char* kRankWrapper =
    "\"$@\"; rc=$?; "
    "printf '%s\\n' \"$rc\" > \"$FRENZY_WORKDIR/exit_code.$RANK.tmp\" && "
    "mv -f \"$FRENZY_WORKDIR/exit_code.$RANK.tmp\" \"$FRENZY_WORKDIR/exit_code.$RANK\"; "
    "exit \"$rc\"";

Status InternalError(std::string message) {
  return ::frenzy::Status(StatusCode::kInternal, std::move(message));
}

// Writes through a temporary file and a rename, so readers never see half a file.
Status WriteTextAtomic(const fs::path& path, const std::string& text) {
  fs::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return InternalError("cannot write " + tmp.string());
    out << text;
    out.flush();
    if (!out) return InternalError("cannot write " + tmp.string());
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return InternalError("cannot rename " + tmp.string() + ": " + ec.message());
  return Status::Ok();
}

// The last non-blank line of a log (read from its last 64 KiB), at most 500 characters.
std::string LastLogLine(const fs::path& path) {
  std::vector<std::string> lines = TailLines(path.string());
  std::string last = lines.empty() ? "" : lines.back();
  if (last.size() > 500) last = last.substr(last.size() - 500);
  return last;
}

// A TCP port free on the loopback right now (the kernel's choice).
Result<int> FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return InternalError("socket: " + std::string(std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  int err = errno;
  ::close(fd);
  if (port <= 0)
    return InternalError("cannot find a free port: " + std::string(std::strerror(err)));
  return port;
}

Result<std::string> WorkdirOf(const std::string& handle) {
  if (handle.rfind(kHandlePrefix, 0) != 0 || handle.size() == kHandlePrefix.size()) {
    return InvalidArgument("not a local backend handle: '" + handle + "'", {}, "handle");
  }
  return handle.substr(kHandlePrefix.size());
}

// The rank's exit code when its wrapper wrote one.
std::optional<int> ExitCodeOf(const std::string& workdir, int rank) {
  std::optional<std::string> text =
      ReadText(fs::path(workdir) / ("exit_code." + std::to_string(rank)));
  if (!text) return std::nullopt;
  std::string t(Trim(*text));
  if (t.empty()) return std::nullopt;
  try {
    return std::stoi(t);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

constexpr int kSigkillExit = 128 + SIGKILL;  // as sh reports a command SIGKILL ended

// The memory cgroup file counting OOM kills among this process's cgroup, where one is readable:
// its own cgroup's (v2, then v1) by /proc/self/cgroup, else the mount's root, which is its own
// cgroup where the daemon runs in a container (cgroup namespace or a bind-mounted hierarchy).
std::string FindOomKillFile() {
  std::vector<std::string> candidates;
  std::istringstream lines(ReadText("/proc/self/cgroup").value_or(""));
  for (std::string line; std::getline(lines, line);) {
    // "ID:CONTROLLERS:PATH"; v2 is "0::PATH".
    size_t a = line.find(':');
    size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    if (controllers.empty()) {
      candidates.push_back("/sys/fs/cgroup" + path + "/memory.events");
      candidates.push_back("/sys/fs/cgroup/unified" + path + "/memory.events");
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      candidates.push_back("/sys/fs/cgroup/memory" + path + "/memory.oom_control");
    }
  }
  candidates.push_back("/sys/fs/cgroup/memory.events");
  candidates.push_back("/sys/fs/cgroup/memory/memory.oom_control");
  for (const std::string& c : candidates) {
    std::optional<std::string> text = ReadText(c);
    if (text && ParseOomKillCount(*text)) return c;
  }
  return {};
}

// Whether the OOM killer fired since launch: the count now against the one Launch recorded in
// WORKDIR/oom_kills ("COUNT\nFILE\n"); nullopt when either cannot be read.
std::optional<bool> OomKillerFired(const std::string& workdir) {
  std::optional<std::string> record = ReadText(fs::path(workdir) / "oom_kills");
  if (!record) return std::nullopt;
  std::istringstream in(*record);
  std::string count_text, file;
  if (!std::getline(in, count_text) || !std::getline(in, file) || file.empty()) return std::nullopt;
  std::optional<int64_t> before = ParseOomKillCount("oom_kill " + count_text);
  std::optional<std::string> now_text = ReadText(file);
  std::optional<int64_t> now = now_text ? ParseOomKillCount(*now_text) : std::nullopt;
  if (!before || !now) return std::nullopt;
  return *now > *before;
}

// Writes WORKDIR/oom_kills for OomKillerFired, when `file` has a count to record.
Status RecordOomKills(const std::string& file, const std::string& workdir) {
  std::optional<std::string> text = ReadText(file);
  std::optional<int64_t> kills = text ? ParseOomKillCount(*text) : std::nullopt;
  if (!kills) return Status::Ok();  // nothing to compare with later: SIGKILL stays unexplained
  return WriteTextAtomic(fs::path(workdir) / "oom_kills",
                         std::to_string(*kills) + "\n" + file + "\n");
}

}  // namespace

std::optional<int64_t> ParseOomKillCount(std::string_view text) {
  std::istringstream in{std::string(text)};
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string key, count, extra;
    if (!(fields >> key >> count) || key != "oom_kill" || (fields >> extra)) continue;
    if (count.empty() || !std::all_of(count.begin(), count.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c));
        })) {
      return std::nullopt;
    }
    try {
      return std::stoll(count);
    } catch (const std::exception&) {
      return std::nullopt;  // out of range
    }
  }
  return std::nullopt;
}

FailureKind LocalFailureKind(int exit_code, const std::vector<std::string>& log_tail,
                             std::optional<bool> oom_killer_fired) {
  if (OutOfMemoryLine(log_tail)) return FailureKind::kOutOfMemory;
  if (exit_code == kSigkillExit && oom_killer_fired.value_or(true)) {
    return FailureKind::kOutOfMemory;
  }
  return FailureKind::kCrashed;
}

LocalBackend::LocalBackend(LocalBackendOptions options) : options_(std::move(options)) {
  if (options_.nodes.empty()) options_.nodes.push_back(BackendNode{"localhost", "", 1, true});
  if (options_.oom_kill_file.empty()) options_.oom_kill_file = FindOomKillFile();
}

LocalBackend::LocalBackend(std::vector<BackendNode> nodes)
    : LocalBackend(LocalBackendOptions{std::move(nodes), 5, ""}) {}

Result<std::vector<BackendNode>> LocalBackend::Nodes() { return options_.nodes; }

Result<std::vector<BackendNode>> LocalBackend::DiscoverLocalNodes(const AgentOptions& options) {
  GpuSourceInfo info;
  ASSIGN_OR_RETURN(std::vector<GpuReading> gpus, ReadGpus(options, &info));
  std::map<std::string, int64_t> by_type;
  std::vector<std::string> order;
  for (const GpuReading& g : gpus) {
    std::string type = CatalogGpuName(g.name);
    if (by_type[type]++ == 0) order.push_back(type);
  }
  BackendNode node;
  node.name = !options.node_name.empty() ? options.node_name
              : !info.node.empty()       ? info.node
                                         : "localhost";
  for (const std::string& type : order) {
    if (by_type[type] > node.gpus) {
      node.gpu = type;
      node.gpus = by_type[type];
    }
  }
  return std::vector<BackendNode>{node};
}

std::vector<int> LocalBackend::TakeGpus(const std::string& node, int64_t count,
                                        const std::string& handle) {
  int64_t have = 0;
  for (const BackendNode& n : options_.nodes) {
    if (n.name == node) have = n.gpus;
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::map<int, std::string>& busy = busy_[node];
  std::vector<int> out;
  for (int i = 0; i < have && static_cast<int64_t>(out.size()) < count; ++i) {
    if (busy.count(i) == 0) out.push_back(i);
  }
  // Not enough free: reuse indices (CPU-only machines run every rank all the same).
  for (int64_t i = 0; static_cast<int64_t>(out.size()) < count; ++i) {
    out.push_back(static_cast<int>(have > 0 ? i % have : i));
  }
  for (int i : out) busy.emplace(i, handle);
  return out;
}

void LocalBackend::NoteGpus(const std::vector<Rank>& ranks, const std::string& handle) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Rank& r : ranks) {
    if (r.gpus == "-") continue;
    std::istringstream in(r.gpus);
    std::string idx;
    while (std::getline(in, idx, ',')) {
      try {
        busy_[r.node].emplace(std::stoi(idx), handle);
      } catch (const std::exception&) {
      }
    }
  }
}

void LocalBackend::ReleaseGpus(const std::string& handle) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [node, busy] : busy_) {
    std::erase_if(busy, [&](const auto& kv) { return kv.second == handle; });
  }
}

Result<std::vector<LocalBackend::Rank>> LocalBackend::ReadPids(const std::string& workdir) const {
  std::optional<std::string> text = ReadText(fs::path(workdir) / "pids");
  if (!text) return NotFound("no pids file in " + workdir);
  std::vector<Rank> ranks;
  std::istringstream lines(*text);
  std::string line;
  int lineno = 0;
  while (std::getline(lines, line)) {
    ++lineno;
    if (Trim(line).empty()) continue;
    std::istringstream fields(line);
    Rank r;
    if (!(fields >> r.rank >> r.pid >> r.start_ticks >> r.node >> r.gpus)) {
      return InvalidArgument("malformed line: '" + line + "'",
                             (fs::path(workdir) / "pids").string() + ":" + std::to_string(lineno));
    }
    ranks.push_back(r);
  }
  return ranks;
}

Status LocalBackend::PrepareRunFolder(const std::string& workdir) const {
  std::error_code ec;
  fs::create_directories(workdir, ec);
  if (ec) return InternalError("cannot create " + workdir + ": " + ec.message());
  // An earlier run in this folder must be over: its files would be taken for this run's.
  if (auto old = ReadPids(workdir); old.ok()) {
    for (const Rank& r : *old) {
      if (ProcessAlive(r.pid) && ProcessStartTicks(r.pid) == r.start_ticks) {
        return ::frenzy::Status(StatusCode::kFailedPrecondition,
                                "rank " + std::to_string(r.rank) + " (pid " +
                                    std::to_string(r.pid) + ") of an earlier run in " + workdir +
                                    " is still running",
                                workdir);
      }
    }
  }
  for (const auto& entry : fs::directory_iterator(workdir, ec)) {
    std::string f = entry.path().filename().string();
    if (f.rfind("exit_code.", 0) == 0 || f == "pids" || f == "cancelled" || f == "oom_kills") {
      fs::remove(entry.path(), ec);
    } else if (f.rfind("rank-", 0) == 0 && f.size() > 4 &&
               f.compare(f.size() - 4, 4, ".log") == 0) {
      // Keep one earlier attempt's log beside the new one.
      fs::rename(entry.path(), fs::path(workdir) / (f.substr(0, f.size() - 4) + ".prev.log"), ec);
    }
  }

  return ::frenzy::Status::Ok();
}

Result<std::string> LocalBackend::Launch(const LaunchSpec& spec) {
  if (spec.command.empty() && !spec.framework) {
    return InvalidArgument("no command to run", {}, "command");
  }
  if (spec.framework) RETURN_IF_ERROR(ValidateFrameworkLaunch(*spec.framework));
  // A framework's launch runs one agent per node (torchrun starts the node's ranks).
  const std::vector<std::string>& command =
      spec.framework ? spec.framework->argv : spec.command;
  if (spec.workdir.empty()) return InvalidArgument("no run folder", {}, "workdir");
  std::error_code ec;
  const std::string workdir = fs::absolute(spec.workdir, ec).lexically_normal().string();
  if (ec) return InvalidArgument("bad run folder: " + ec.message(), spec.workdir, "workdir");

  // The ranks per node, in placement order.
  std::vector<std::pair<std::string, int64_t>> groups = spec.placement;
  if (groups.empty()) {
    int64_t ranks =
        spec.plan.gpus > 0 ? spec.plan.gpus : std::max<int64_t>(1, spec.nodes * spec.gpus_per_node);
    groups.emplace_back(options_.nodes.front().name, ranks);
  }
  int64_t world = 0;
  for (const auto& group : groups) {
    // (Not a structured binding: clang 14 cannot capture one in the lambda.)
    const std::string& node = group.first;
    const int64_t count = group.second;
    bool known = std::any_of(options_.nodes.begin(), options_.nodes.end(),
                             [&](const BackendNode& n) { return n.name == node; });
    if (!known) return InvalidArgument("unknown node '" + node + "'", {}, "placement");
    if (count <= 0) return InvalidArgument("node '" + node + "' gets no ranks", {}, "placement");
    world += count;
  }
  if (spec.plan.gpus > 0 && world != spec.plan.gpus) {
    return InvalidArgument("the placement holds " + std::to_string(world) + " GPUs, the plan " +
                               std::to_string(spec.plan.gpus),
                           {}, "placement");
  }

  // A missing program is an error now, not a rank exiting 127 later (a relative path is left
  // to the ranks: they start in the workdir).
  const std::string& program = command[0];
  if (program.find('/') == std::string::npos || program[0] == '/') {
    RETURN_IF_ERROR(FindProgram(program, spec.env).status());
  }

  RETURN_IF_ERROR(PrepareRunFolder(workdir));

  // The OOM killer's count before any rank starts, so Status can tell whether it killed one.
  RETURN_IF_ERROR(RecordOomKills(options_.oom_kill_file, workdir));
  ASSIGN_OR_RETURN(int port, FreePort());
  const std::string handle = std::string(kHandlePrefix) + workdir;
  ReleaseGpus(handle);
  std::vector<std::string> argv = {"/bin/sh", "-c", kRankWrapper, "frenzy-rank"};
  if (spec.framework) {
    RETURN_IF_ERROR(WriteLaunchFiles(*spec.framework, workdir));
    std::vector<std::string> agent = NodeAgentArgv(*spec.framework);
    argv.insert(argv.end(), agent.begin(), agent.end());
  } else {
    argv.insert(argv.end(), spec.command.begin(), spec.command.end());
  }

  std::vector<Rank> started;
  std::string pids_text;
  auto abort_started = [&](const ::frenzy::Status& why) -> ::frenzy::Status {
    for (const Rank& r : started) KillGroup(r.pid, SIGKILL);
    ReleaseGpus(handle);
    return why;
  };
  int rank = 0;
  for (const auto& [node, count] : groups) {
    std::vector<int> gpus = TakeGpus(node, count, handle);
    std::vector<std::string> gpu_strings;
    for (int g : gpus) gpu_strings.push_back(std::to_string(g));
    const std::string visible = Join(gpu_strings, ",");
    const int64_t processes = spec.framework ? 1 : count;
    const int node_rank = rank;
    for (int64_t local = 0; local < processes; ++local, ++rank) {
      std::map<std::string, std::string> env = spec.env;
      if (spec.framework) {
        // The node's agent: "rank" here numbers the agents (its exit code file and its log).
        for (const auto& [key, value] : spec.framework->env) env.emplace(key, value);
        env["NODE_RANK"] = std::to_string(node_rank);
        env["RANK"] = std::to_string(rank);
        env["WORLD_SIZE"] = std::to_string(groups.size());
      } else {
        env["RANK"] = std::to_string(rank);
        env["WORLD_SIZE"] = std::to_string(world);
        env["LOCAL_RANK"] = std::to_string(local);
        env["LOCAL_WORLD_SIZE"] = std::to_string(count);
      }
      env["MASTER_ADDR"] = "127.0.0.1";
      env["MASTER_PORT"] = std::to_string(port);
      env["CUDA_VISIBLE_DEVICES"] = visible;
      env["FRENZY_WORKDIR"] = workdir;
      env["FRENZY_NODE"] = node;
      const std::string log =
          (fs::path(workdir) / ("rank-" + std::to_string(rank) + ".log")).string();
      Result<int> pid = SpawnDetached(argv, env, workdir, log);
      if (!pid.ok()) return abort_started(pid.status());
      Rank r;
      r.rank = rank;
      r.pid = *pid;
      r.start_ticks = ProcessStartTicks(*pid).value_or(0);
      r.node = node;
      r.gpus = visible.empty() ? "-" : visible;
      started.push_back(r);
      pids_text += std::to_string(r.rank) + " " + std::to_string(r.pid) + " " +
                   std::to_string(r.start_ticks) + " " + r.node + " " + r.gpus + "\n";
      // Rewritten after every rank, so a daemon crash mid-launch still leaves them findable.
      ::frenzy::Status written = WriteTextAtomic(fs::path(workdir) / "pids", pids_text);
      if (!written.ok()) return abort_started(written);
    }
  }
  return handle;
}

Result<RunStatus> LocalBackend::Status(const std::string& handle) {
  ASSIGN_OR_RETURN(std::string workdir, WorkdirOf(handle));
  std::error_code ec;
  if (!fs::is_directory(workdir, ec)) {
    return NotFound("the run folder " + workdir + " does not exist", {}, "handle");
  }
  RunStatus st;
  const bool cancelled = fs::exists(fs::path(workdir) / "cancelled", ec);
  Result<std::vector<Rank>> ranks = ReadPids(workdir);
  if (!ranks.ok()) {
    if (ranks.status().code() != StatusCode::kNotFound) return ranks.status();
    ReleaseGpus(handle);
    st.state = cancelled ? RunState::kCancelled : RunState::kLost;
    st.message = cancelled ? "cancelled" : "no ranks recorded in " + workdir;
    return st;
  }

  int alive = 0;
  std::vector<const Rank*> gone;                    // dead without an exit code
  std::vector<std::pair<const Rank*, int>> failed;  // exited non-zero, with the code
  std::vector<const Rank*> running;
  for (const Rank& r : *ranks) {
    std::optional<int> code = ExitCodeOf(workdir, r.rank);
    if (!code) {
      bool live =
          ProcessAlive(r.pid) && (r.start_ticks == 0 || ProcessStartTicks(r.pid) == r.start_ticks);
      if (live) {
        ++alive;
        running.push_back(&r);
        continue;
      }
      code = ExitCodeOf(workdir, r.rank);  // it may have ended since the first look
      if (!code) {
        gone.push_back(&r);
        continue;
      }
    }
    if (*code != 0) failed.emplace_back(&r, *code);
  }

  if (cancelled) {
    // A Cancel cut short (the daemon died in it) is finished here.
    for (const Rank* r : running) KillGroup(r->pid, SIGKILL);
    ReleaseGpus(handle);
    st.state = RunState::kCancelled;
    st.message = "cancelled";
    return st;
  }
  if (!failed.empty()) {
    // One rank failed: the others would wait for it forever (collectives), so end them.
    for (const Rank* r : running) KillGroup(r->pid, SIGKILL);
    ReleaseGpus(handle);
    return FailedStatus(workdir, failed);
  }
  if (alive > 0) {
    NoteGpus(*ranks, handle);
    st.state = RunState::kRunning;
    st.message = std::to_string(alive) + " of " + std::to_string(ranks->size()) + " ranks running";
    return st;
  }
  ReleaseGpus(handle);
  if (!gone.empty()) {
    st.state = RunState::kLost;
    st.exit_code = -1;
    std::string last =
        LastLogLine(fs::path(workdir) / ("rank-" + std::to_string(gone.front()->rank) + ".log"));
    st.message = "rank " + std::to_string(gone.front()->rank) + " (pid " +
                 std::to_string(gone.front()->pid) + ") is gone without an exit code" +
                 (last.empty() ? "" : "; its last log line: " + last);
    return st;
  }
  st.state = RunState::kSucceeded;
  st.message = "all " + std::to_string(ranks->size()) + " ranks exited 0";
  return st;
}

RunStatus LocalBackend::FailedStatus(const std::string& workdir,
                                     const std::vector<std::pair<const Rank*, int>>& failed) const {
  // The ranks that fail after another did (a peer gone mid-collective) only echo the cause, so
  // an out-of-memory rank is reported whatever its number; else the lowest failed rank.
  const std::optional<bool> oom_killer_fired = OomKillerFired(workdir);
  const Rank* rank = failed.front().first;
  int code = failed.front().second;
  std::vector<std::string> tail;
  FailureKind kind = FailureKind::kCrashed;
  for (const auto& [r, c] : failed) {
    std::vector<std::string> lines =
        TailLines((fs::path(workdir) / ("rank-" + std::to_string(r->rank) + ".log")).string());
    FailureKind k = LocalFailureKind(c, lines, oom_killer_fired);
    if (r == failed.front().first) tail = lines;
    if (k == FailureKind::kOutOfMemory) {
      rank = r;
      code = c;
      tail = std::move(lines);
      kind = k;
      break;
    }
  }
  RunStatus st;
  st.state = RunState::kFailed;
  st.failure = kind;
  st.exit_code = code;
  std::string last = tail.empty() ? "" : tail.back();
  if (last.size() > 500) last = last.substr(last.size() - 500);
  st.message = "rank " + std::to_string(rank->rank) + " exited with code " + std::to_string(code);
  std::optional<std::string> oom = OutOfMemoryLine(tail);
  if (kind == FailureKind::kOutOfMemory && !oom) {
    st.message += oom_killer_fired ? " (killed by the kernel's OOM killer)"
                                   : " (killed by SIGKILL, most likely the kernel's OOM killer)";
  } else if (kind == FailureKind::kCrashed && code == kSigkillExit) {
    st.message += " (killed by SIGKILL, not by the OOM killer)";
  }
  if (oom && *oom != last) st.message += ": " + oom->substr(0, 500);
  if (!last.empty()) st.message += ": " + last;
  return st;
}

::frenzy::Status LocalBackend::Cancel(const std::string& handle) {
  ASSIGN_OR_RETURN(std::string workdir, WorkdirOf(handle));
  std::error_code ec;
  if (!fs::is_directory(workdir, ec)) {
    return NotFound("the run folder " + workdir + " does not exist", {}, "handle");
  }
  Result<std::vector<Rank>> ranks = ReadPids(workdir);
  std::vector<Rank> live;
  bool all_ended = ranks.ok();
  if (ranks.ok()) {
    for (const Rank& r : *ranks) {
      if (ProcessAlive(r.pid) &&
          (r.start_ticks == 0 || ProcessStartTicks(r.pid) == r.start_ticks)) {
        live.push_back(r);
      }
      if (!ExitCodeOf(workdir, r.rank)) all_ended = false;
    }
  }
  // A run that already ended keeps its outcome. Every rank's exit code decides it, as in
  // Status(): a wrapper that has written its code may still be alive for a moment, and
  // cancelling it then turned a succeeded run into a cancelled one.
  if (all_ended) {
    ReleaseGpus(handle);
    return ::frenzy::Status::Ok();
  }
  // The marker first: a Status racing with the kill reads "cancelled", not "lost".
  RETURN_IF_ERROR(WriteTextAtomic(fs::path(workdir) / "cancelled", "cancelled\n"));
  for (const Rank& r : live) KillGroup(r.pid, SIGTERM);
  const std::vector<Rank> signalled = live;
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(options_.kill_grace_s));
  while (true) {
    std::erase_if(live, [](const Rank& r) { return !ProcessAlive(r.pid); });
    if (live.empty() || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Also the groups whose leader ended but where a child may linger.
  for (const Rank& r : signalled) KillGroup(r.pid, SIGKILL);
  ReleaseGpus(handle);
  return ::frenzy::Status::Ok();
}

}  // namespace frenzy::server
