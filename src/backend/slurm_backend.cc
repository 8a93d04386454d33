#include "backend/slurm_backend.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <system_error>

#include "common/strings.h"
#include "hardware/gpu.h"

namespace frenzy::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr std::string_view kHandlePrefix = "slurm:";

// The per-task wrapper: launcher variables from Slurm's task variables, then the command (its
// argv after the wrapper's name).
constexpr const char* kTaskWrapper =
    "export RANK=\"$SLURM_PROCID\" WORLD_SIZE=\"$SLURM_NTASKS\" LOCAL_RANK=\"$SLURM_LOCALID\" "
    "LOCAL_WORLD_SIZE=\"$SLURM_NTASKS_PER_NODE\"; exec \"$@\"";

std::string AlnumLower(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    }
  }
  return out;
}

bool IsEnvName(const std::string& k) {
  if (k.empty() || std::isdigit(static_cast<unsigned char>(k[0]))) return false;
  return std::all_of(k.begin(), k.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// Text on one line, for a comment in the script.
std::string OneLine(std::string_view s) {
  std::string out;
  for (char c : s) out.push_back(std::isprint(static_cast<unsigned char>(c)) ? c : ' ');
  return out;
}

// A value inside double quotes on an #SBATCH line (Launch rejects the characters that would
// need escaping there).
std::string SbatchQuoted(const std::string& s) { return "\"" + s + "\""; }

// The last of a job's output lines (TailLines), at most 500 characters, passing over Slurm's own
// lines ("srun: ...", "slurmstepd: ...") when the ranks wrote any.
std::string LastLine(const std::vector<std::string>& lines) {
  std::string last, last_own;
  for (const std::string& t : lines) {
    last = t;
    if (t.rfind("srun: ", 0) != 0 && t.rfind("slurmstepd: ", 0) != 0) last_own = t;
  }
  if (!last_own.empty()) last = last_own;
  if (last.size() > 500) last = last.substr(last.size() - 500);
  return last;
}

// Completes a failed run's status from the job's output: its last line joins the message, and a
// crash whose output reports a failed allocation becomes out of memory (with that line).
void AddOutputLog(const fs::path& out_log, RunStatus& st) {
  const std::vector<std::string> lines = TailLines(out_log.string());
  std::optional<std::string> oom = OutOfMemoryLine(lines);
  if (!oom) {
    // slurmstepd's report when the task/cgroup plugin saw the kernel kill a task for memory
    // (src/plugins/task/cgroup: "Detected %u oom-kill event(s) in %ps ...").
    for (const std::string& line : lines) {
      if (line.find("oom-kill event") != std::string::npos) oom = line;
    }
  }
  const std::string last = LastLine(lines);
  if (st.failure == FailureKind::kCrashed && oom) {
    st.failure = FailureKind::kOutOfMemory;
    if (*oom != last) st.message += ": " + oom->substr(0, 500);
  }
  if (!last.empty()) st.message += ": " + last;
}

// KEY=VALUE fields of an `scontrol -o` record (values end at the next space).
std::map<std::string, std::string> RecordFields(std::string_view line) {
  std::map<std::string, std::string> out;
  std::istringstream in{std::string(line)};
  std::string tok;
  while (in >> tok) {
    size_t eq = tok.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    out.emplace(tok.substr(0, eq), tok.substr(eq + 1));
  }
  return out;
}

// Splits a gres string ("gpu:a100:2(S:0-1),gpu:v100:1") at the commas outside parentheses.
std::vector<std::string> SplitGres(std::string_view gres) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char c : gres) {
    if (c == '(') ++depth;
    if (c == ')' && depth > 0) --depth;
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// The node's state words, upper-cased: Slurm 22.05 gives "state": "idle" plus "state_flags",
// later versions "state": ["IDLE", "DRAIN"].
std::vector<std::string> StateWords(const json& node) {
  std::vector<std::string> words;
  auto add = [&](const json& v) {
    if (!v.is_string()) return;
    std::string s = v.get<std::string>();
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    // "down*" and "idle~" style suffixes (not responding, powered down)
    while (!s.empty() && (s.back() == '*' || s.back() == '~' || s.back() == '#' ||
                          s.back() == '%' || s.back() == '$' || s.back() == '@')) {
      if (s.back() == '*') words.push_back("NOT_RESPONDING");
      if (s.back() == '~') words.push_back("POWERED_DOWN");
      s.pop_back();
    }
    // "idle+drain" style combinations
    std::istringstream parts(s);
    std::string part;
    while (std::getline(parts, part, '+')) {
      if (!part.empty()) words.push_back(part);
    }
  };
  for (const char* key : {"state", "state_flags"}) {
    if (!node.contains(key)) continue;
    const json& v = node[key];
    if (v.is_array()) {
      for (const json& e : v) add(e);
    } else {
      add(v);
    }
  }
  return words;
}

bool NodeUp(const std::vector<std::string>& words) {
  static const char* kDown[] = {
      "DOWN",       "DRAIN",          "DRAINED",     "DRAINING",    "FAIL",
      "FAILING",    "NOT_RESPONDING", "UNKNOWN",     "FUTURE",      "POWERED_DOWN",
      "POWER_DOWN", "POWERING_DOWN",  "INVALID_REG", "MAINTENANCE", "REBOOT_ISSUED",
      "INVAL",      "NO_RESPOND",     "MAINT",       "PERFCTRS",    "RESERVED_FOR_MAINT"};
  if (words.empty()) return false;
  for (const std::string& w : words) {
    for (const char* d : kDown) {
      if (w == d) return false;
    }
  }
  return true;
}

std::string JoinArgv(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    out += a;
  }
  return out;
}

}  // namespace

::frenzy::Status WritePrivateFile(const std::string& path, const std::string& text) {
  // A fresh file from mkostemp (O_CREAT | O_EXCL, so never an existing file or a link planted at
  // the name) renamed over `path` once written: no moment where the text is readable by others,
  // and readers of `path` see the old file or the whole new one.
  std::string tmp = path + ".XXXXXX";
  int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) {
    return ::frenzy::Status(StatusCode::kInternal,
                            "cannot create a file next to it: " + std::string(std::strerror(errno)),
                            path);
  }
  auto fail = [&](const std::string& what) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return ::frenzy::Status(StatusCode::kInternal, what + ": " + std::strerror(err), path);
  };
  // mkostemp asks for 0600 but the umask may take bits away; set it exactly, before any text.
  if (::fchmod(fd, S_IRUSR | S_IWUSR) != 0) return fail("cannot set its mode to 0600");
  for (size_t done = 0; done < text.size();) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail("cannot write it");
    done += static_cast<size_t>(n);
  }
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) return fail("cannot write it");
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail("cannot replace it");
  return ::frenzy::Status::Ok();
}

std::string GresType(std::string_view gpu, const SlurmOptions& options) {
  const std::string key = GpuCatalog::Normalize(gpu);
  for (const auto& [name, type] : options.gres_types) {
    if (GpuCatalog::Normalize(name) == key) return type;
  }
  return AlnumLower(gpu);
}

std::string CatalogGpuForGres(std::string_view type, const SlurmOptions& options,
                              const GpuCatalog& catalog) {
  for (const auto& [name, mapped] : options.gres_types) {
    if (mapped == type) {
      const GpuType* g = catalog.Find(name);
      return g != nullptr ? g->name : name;
    }
  }
  if (const GpuType* g = catalog.Find(type); g != nullptr) return g->name;
  const std::string want = AlnumLower(type);
  for (const GpuType& g : catalog.gpus()) {
    if (AlnumLower(g.name) == want) return g.name;
    for (const std::string& alias : g.aliases) {
      if (AlnumLower(alias) == want) return g.name;
    }
  }
  return std::string(type);
}

std::string ShellQuote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  out += "'";
  return out;
}

// A heterogeneous run's components: each of a known type with nodes and GPUs, together the
// plan's GPUs; a script launch (a framework's agents start one node's ranks of one type, which
// no adapter expresses over several types yet).
::frenzy::Status CheckComponents(const LaunchSpec& spec) {
  if (spec.framework) {
    return InvalidArgument(
        "a framework launch over several GPU types is not supported: each framework's launcher "
        "starts the same ranks on every node, and none of the adapters expresses per-group "
        "micro-batches; run the job's script (examples/train.py's data_groups) instead",
        {}, "components");
  }
  if (spec.components.size() < 2) {
    return InvalidArgument("a heterogeneous run needs two components or more", {}, "components");
  }
  int64_t gpus = 0;
  for (const LaunchSpec::Component& c : spec.components) {
    if (c.gpu.empty() || c.nodes < 1 || c.gpus_per_node < 1) {
      return InvalidArgument("every component needs a GPU type, a node and a GPU", {},
                             "components");
    }
    gpus += c.nodes * c.gpus_per_node;
  }
  if (spec.plan.gpus > 0 && gpus != spec.plan.gpus) {
    return InvalidArgument("the components hold " + std::to_string(gpus) +
                               " GPUs, the plan " + std::to_string(spec.plan.gpus),
                           {}, "components");
  }
  return ::frenzy::Status::Ok();
}

std::string SbatchScript(const LaunchSpec& spec, const SlurmOptions& options) {
  const int64_t nodes = std::max<int64_t>(1, spec.nodes);
  const int64_t gpus = std::max<int64_t>(0, spec.gpus_per_node);
  // A framework's launch: one task per node, its agent (torchrun) starts the node's ranks.
  const int64_t tasks = spec.framework ? 1 : std::max<int64_t>(1, gpus);
  const std::string workdir = spec.workdir;
  std::ostringstream s;
  s << "#!/bin/bash\n";
  s << "# Frenzy run of job " << OneLine(spec.job_id);
  if (!spec.name.empty()) s << " (" << OneLine(spec.name) << ")";
  s << ", attempt " << spec.attempt << ": " << nodes << " node(s) x " << tasks
    << (spec.framework ? " launcher (" + std::string(LauncherName(spec.framework->framework)) + ")"
                       : std::string(" rank(s)"));
  if (!spec.plan.gpu.empty()) s << " on " << OneLine(spec.plan.gpu);
  s << "\n";
  s << "#SBATCH --job-name=frenzy-" << spec.job_id << "\n";
  if (spec.components.empty()) {
    s << "#SBATCH --nodes=" << nodes << "\n";
    s << "#SBATCH --ntasks-per-node=" << tasks << "\n";
    if (gpus > 0) {
      std::string type = GresType(spec.plan.gpu, options);
      s << "#SBATCH --gres=gpu:" << (type.empty() ? "" : type + ":") << gpus << "\n";
    }
  } else {
    // A heterogeneous job: one component per GPU type; srun --het-group numbers the ranks of
    // all components in order (SLURM_PROCID 0.. across them).
    s << "#SBATCH --nodes=" << spec.components[0].nodes << "\n";
    s << "#SBATCH --ntasks-per-node=" << spec.components[0].gpus_per_node << "\n";
    s << "#SBATCH --gres=gpu:" << GresType(spec.components[0].gpu, options) << ":"
      << spec.components[0].gpus_per_node << "\n";
  }
  if (!options.partition.empty()) s << "#SBATCH --partition=" << options.partition << "\n";
  s << "#SBATCH --output=" << SbatchQuoted(workdir + "/slurm-%j.out") << "\n";
  s << "#SBATCH --chdir=" << SbatchQuoted(workdir) << "\n";
  // The daemon decides what runs again (a lost node requeues the job from its checkpoint, maybe
  // elsewhere): Slurm must not requeue the batch job behind its back.
  s << "#SBATCH --no-requeue\n";
  for (size_t k = 1; k < spec.components.size(); ++k) {
    const LaunchSpec::Component& c = spec.components[k];
    s << "#SBATCH hetjob\n";
    s << "#SBATCH --nodes=" << c.nodes << "\n";
    s << "#SBATCH --ntasks-per-node=" << c.gpus_per_node << "\n";
    s << "#SBATCH --gres=gpu:" << GresType(c.gpu, options) << ":" << c.gpus_per_node << "\n";
    if (!options.partition.empty()) s << "#SBATCH --partition=" << options.partition << "\n";
  }
  s << "\n";
  for (const auto& [key, value] : spec.env) {
    if (!IsEnvName(key)) continue;
    s << "export " << key << "=" << ShellQuote(value) << "\n";
  }
  if (spec.framework) {
    for (const auto& [key, value] : spec.framework->env) {
      if (!IsEnvName(key) || spec.env.count(key)) continue;
      s << "export " << key << "=" << ShellQuote(value) << "\n";
    }
  }
  s << "export FRENZY_WORKDIR=" << ShellQuote(workdir) << "\n";
  s << "# The rendezvous: the address of the job's first node.\n";
  s << "first_node=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n";
  s << "node_addr=$(scontrol show node -o \"$first_node\" 2>/dev/null | "
       "sed -n 's/.* NodeAddr=\\([^ ]*\\).*/\\1/p')\n";
  s << "export MASTER_ADDR=\"${node_addr:-$first_node}\"\n";
  if (options.master_port > 0) {
    s << "export MASTER_PORT=" << options.master_port << "\n";
  } else {
    s << "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))\n";
  }
  s << "rm -f \"$FRENZY_WORKDIR/exit_code\"\n";
  if (spec.framework) {
    s << "# " << LauncherName(spec.framework->framework) << " " << spec.framework->version
      << ": the same command on every node; NODE_RANK is the node's SLURM_NODEID.\n";
    s << "srun --kill-on-bad-exit=1 --ntasks-per-node=1";
    for (const std::string& arg : NodeAgentArgv(*spec.framework)) s << " " << ShellQuote(arg);
  } else {
    s << "srun --kill-on-bad-exit=1";
    if (!spec.components.empty()) s << " --het-group=0-" << spec.components.size() - 1;
    s << " /bin/sh -c " << ShellQuote(kTaskWrapper) << " frenzy-rank";
    for (const std::string& arg : spec.command) s << " " << ShellQuote(arg);
  }
  s << "\n";
  s << "rc=$?\n";
  s << "printf '%s\\n' \"$rc\" > \"$FRENZY_WORKDIR/exit_code.tmp\" && "
       "mv -f \"$FRENZY_WORKDIR/exit_code.tmp\" \"$FRENZY_WORKDIR/exit_code\"\n";
  s << "exit \"$rc\"\n";
  return s.str();
}

Result<std::vector<BackendNode>> ParseSinfoJson(const std::string& json_text,
                                                const GpuCatalog& catalog,
                                                const SlurmOptions& options,
                                                const std::string& partition) {
  json doc = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return InvalidArgument("sinfo --json printed no JSON object", "sinfo --json");
  }
  if (doc.contains("errors") && doc["errors"].is_array() && !doc["errors"].empty()) {
    std::vector<std::string> msgs;
    for (const json& e : doc["errors"]) {
      if (e.is_object()) {
        std::string m;
        for (const char* k : {"description", "error"}) {
          if (e.contains(k) && e[k].is_string() && !e[k].get<std::string>().empty()) {
            m = e[k].get<std::string>();
            break;
          }
        }
        msgs.push_back(m.empty() ? e.dump() : m);
      } else {
        msgs.push_back(e.dump());
      }
    }
    return InvalidArgument("Slurm reported errors: " + Join(msgs, "; "), "sinfo --json");
  }
  if (!doc.contains("nodes") || !doc["nodes"].is_array()) {
    return InvalidArgument("no \"nodes\" list", "sinfo --json", "nodes");
  }
  std::vector<BackendNode> out;
  for (const json& n : doc["nodes"]) {
    if (!n.is_object() || !n.contains("name") || !n["name"].is_string()) {
      return InvalidArgument("a node without a name: " + n.dump(), "sinfo --json", "nodes");
    }
    if (!partition.empty()) {
      bool in = false;
      if (n.contains("partitions") && n["partitions"].is_array()) {
        for (const json& p : n["partitions"]) in = in || (p.is_string() && p == partition);
      }
      if (!in) continue;
    }
    BackendNode node;
    node.name = n["name"].get<std::string>();
    node.up = NodeUp(StateWords(n));
    std::string gres =
        n.contains("gres") && n["gres"].is_string() ? n["gres"].get<std::string>() : "";
    std::string first_type;
    bool have_type = false;
    for (const std::string& item : SplitGres(gres)) {
      std::string g = item.substr(0, item.find('('));
      std::vector<std::string> parts;
      std::istringstream in(g);
      std::string p;
      while (std::getline(in, p, ':')) parts.push_back(p);
      if (parts.size() < 2 || parts[0] != "gpu") continue;
      int64_t count = 0;
      try {
        count = std::stoll(parts.back());
      } catch (const std::exception&) {
        continue;
      }
      std::string type = parts.size() >= 3 ? parts[1] : "";
      if (!have_type) {
        first_type = type;
        have_type = true;
      }
      // A node with several GPU types is reported with its first type only.
      if (type == first_type) node.gpus += count;
    }
    if (have_type && !first_type.empty())
      node.gpu = CatalogGpuForGres(first_type, options, catalog);
    out.push_back(node);
  }
  return out;
}

Result<RunStatus> ParseJobState(const std::string& scontrol_output) {
  std::istringstream lines(scontrol_output);
  std::string line;
  std::map<std::string, std::string> f;
  while (std::getline(lines, line)) {
    if (line.find("JobState=") == std::string::npos) continue;
    f = RecordFields(line);
    break;
  }
  auto state_it = f.find("JobState");
  if (state_it == f.end()) {
    return InvalidArgument(
        "no JobState in scontrol output: '" + std::string(Trim(scontrol_output)) + "'",
        "scontrol show job");
  }
  const std::string state = state_it->second;
  const std::string reason = f.count("Reason") ? f["Reason"] : "";
  const bool has_reason = !reason.empty() && reason != "None" && reason != "(null)";
  RunStatus st;
  int code = 0, sig = 0;
  if (auto it = f.find("ExitCode"); it != f.end()) {
    size_t colon = it->second.find(':');
    try {
      code = std::stoi(it->second.substr(0, colon));
      if (colon != std::string::npos) sig = std::stoi(it->second.substr(colon + 1));
    } catch (const std::exception&) {
      return InvalidArgument("bad ExitCode '" + it->second + "'", "scontrol show job", "ExitCode");
    }
  }
  st.exit_code = code != 0 ? code : (sig != 0 ? 128 + sig : 0);

  static const char* kPending[] = {"PENDING",     "CONFIGURING",   "REQUEUED",     "REQUEUE_HOLD",
                                   "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT", "RESIZING"};
  static const char* kRunning[] = {"RUNNING",   "COMPLETING", "SUSPENDED",     "STOPPED",
                                   "SIGNALING", "STAGE_OUT",  "POWER_UP_NODE", "UPDATE_DB"};
  static const char* kFailed[] = {"FAILED",    "TIMEOUT",  "NODE_FAIL", "OUT_OF_MEMORY",
                                  "BOOT_FAIL", "DEADLINE", "PREEMPTED", "REVOKED"};
  auto in = [&](const auto& list) {
    return std::any_of(std::begin(list), std::end(list), [&](const char* s) { return state == s; });
  };
  if (in(kPending)) {
    st.state = RunState::kPending;
    st.message = has_reason ? "pending: " + reason : "pending";
  } else if (in(kRunning)) {
    st.state = RunState::kRunning;
    st.message = state == "RUNNING" ? "running" : "running (" + state + ")";
  } else if (state == "COMPLETED") {
    st.state = st.exit_code == 0 ? RunState::kSucceeded : RunState::kFailed;
    if (st.exit_code != 0) st.failure = SlurmFailureKind(state);
    st.message = st.exit_code == 0 ? "completed" : "completed with exit code " + f["ExitCode"];
  } else if (in(kFailed)) {
    st.state = RunState::kFailed;
    st.failure = SlurmFailureKind(state);
    if (st.exit_code == 0 && state == "OUT_OF_MEMORY") st.exit_code = 137;
    if (st.exit_code == 0) st.exit_code = 1;  // ended badly without a code of its own
    st.message = state + (has_reason ? " (" + reason + ")" : "") + ", ExitCode=" + f["ExitCode"];
  } else if (state == "CANCELLED") {
    st.state = RunState::kCancelled;
    st.message = "cancelled" + (has_reason ? " (" + reason + ")" : std::string());
  } else {
    return InvalidArgument("unknown JobState '" + state + "'", "scontrol show job", "JobState");
  }
  return st;
}

FailureKind SlurmFailureKind(std::string_view job_state) {
  if (job_state == "OUT_OF_MEMORY") return FailureKind::kOutOfMemory;
  if (job_state == "NODE_FAIL" || job_state == "BOOT_FAIL" || job_state == "PREEMPTED") {
    return FailureKind::kNodeLost;
  }
  return FailureKind::kCrashed;
}

std::string SlurmHandle(const std::string& job_id, const std::string& workdir) {
  return std::string(kHandlePrefix) + job_id + ":" + workdir;
}

Result<std::pair<std::string, std::string>> ParseSlurmHandle(const std::string& handle) {
  if (handle.rfind(kHandlePrefix, 0) != 0) {
    return InvalidArgument("not a slurm backend handle: '" + handle + "'", {}, "handle");
  }
  std::string rest = handle.substr(kHandlePrefix.size());
  size_t colon = rest.find(':');
  std::string id = rest.substr(0, colon);
  if (colon == std::string::npos || id.empty() || colon + 1 >= rest.size() ||
      !std::all_of(id.begin(), id.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c)) || c == '_';
      })) {
    return InvalidArgument(
        "not a slurm backend handle (slurm:<job id>:<workdir>): '" + handle + "'", {}, "handle");
  }
  return std::make_pair(id, rest.substr(colon + 1));
}

SlurmBackend::SlurmBackend(SlurmOptions options, const GpuCatalog& catalog, ProcessRunner& runner)
    : options_(std::move(options)), catalog_(catalog), runner_(runner) {}

SlurmBackend::SlurmBackend(SlurmOptions options)
    : SlurmBackend(std::move(options), GpuCatalog::Default(), SystemRunner()) {}

Result<CommandResult> SlurmBackend::Run(const std::vector<std::string>& argv) const {
  std::map<std::string, std::string> env;
  if (!options_.slurm_conf.empty()) env["SLURM_CONF"] = options_.slurm_conf;
  std::vector<std::string> full = argv;
  if (!options_.bin_dir.empty() && !full.empty()) {
    full[0] = (fs::path(options_.bin_dir) / full[0]).string();
  }
  Result<CommandResult> r = runner_.Run(CommandSpec{full, "", options_.command_timeout_s, env});
  if (!r.ok()) {
    return ::frenzy::Status(r.status().code(), JoinArgv(argv) + ": " + r.status().message(),
                            "slurm");
  }
  return r;
}

Result<std::string> SlurmBackend::RunChecked(const std::vector<std::string>& argv) const {
  ASSIGN_OR_RETURN(CommandResult r, Run(argv));
  if (!r.ok()) {
    std::string err(Trim(r.stderr_text));
    if (err.empty()) err = std::string(Trim(r.stdout_text));
    return ::frenzy::Status(
        StatusCode::kFailedPrecondition,
        "'" + JoinArgv(argv) + "' failed (" + r.Describe() + ")" + (err.empty() ? "" : ": " + err),
        "slurm");
  }
  return r.stdout_text;
}

Result<std::vector<BackendNode>> SlurmBackend::Nodes() {
  std::vector<std::string> argv = {"sinfo", "--json"};
  if (!options_.partition.empty()) argv.push_back("--partition=" + options_.partition);
  ASSIGN_OR_RETURN(std::string out, RunChecked(argv));
  return ParseSinfoJson(out, catalog_, options_, options_.partition);
}

Result<std::string> SlurmBackend::Launch(const LaunchSpec& spec) {
  if (spec.command.empty() && !spec.framework) {
    return InvalidArgument("no command to run", {}, "command");
  }
  // Components first: a framework launch over several types is refused whatever it holds.
  if (!spec.components.empty()) RETURN_IF_ERROR(CheckComponents(spec));
  if (spec.framework) RETURN_IF_ERROR(ValidateFrameworkLaunch(*spec.framework));
  if (spec.job_id.empty() || !std::all_of(spec.job_id.begin(), spec.job_id.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
      })) {
    return InvalidArgument(
        "a job id of letters, digits, '-', '_' and '.' is needed, not '" + spec.job_id + "'", {},
        "job_id");
  }
  if (spec.workdir.empty() || spec.workdir[0] != '/') {
    return InvalidArgument(
        "the run folder must be an absolute path (the nodes share it): '" + spec.workdir + "'", {},
        "workdir");
  }
  if (spec.workdir.find_first_of("\"\\%\n\r$`") != std::string::npos) {
    return InvalidArgument(
        "the run folder may not contain \", \\, %, $, ` or line breaks: '" + spec.workdir + "'", {},
        "workdir");
  }
  for (const auto& [key, value] : spec.env) {
    if (!IsEnvName(key)) return InvalidArgument("not a variable name: '" + key + "'", {}, "env");
  }
  if (spec.nodes < 1) return InvalidArgument("a run needs at least one node", {}, "nodes");
  if (spec.gpus_per_node < 0) return InvalidArgument("is negative", {}, "gpus_per_node");
  if (!spec.placement.empty() && spec.components.empty()) {
    for (const auto& [node, count] : spec.placement) {
      if (count != spec.gpus_per_node) {
        std::string got = node + " " + std::to_string(count);
        return InvalidArgument("Slurm runs need the same number of GPUs on every node (" +
                                   std::to_string(spec.gpus_per_node) + "); the placement gives " +
                                   got,
                               {}, "placement");
      }
    }
    if (static_cast<int64_t>(spec.placement.size()) != spec.nodes) {
      return InvalidArgument("the placement names " + std::to_string(spec.placement.size()) +
                                 " nodes, the spec " + std::to_string(spec.nodes),
                             {}, "placement");
    }
  }
  if (spec.plan.gpus > 0 && spec.gpus_per_node > 0 && spec.components.empty() &&
      spec.plan.gpus != spec.nodes * spec.gpus_per_node) {
    return InvalidArgument(std::to_string(spec.nodes) + " node(s) x " +
                               std::to_string(spec.gpus_per_node) + " GPUs is not the plan's " +
                               std::to_string(spec.plan.gpus),
                           {}, "gpus_per_node");
  }

  std::error_code ec;
  fs::create_directories(spec.workdir, ec);
  if (ec) {
    return ::frenzy::Status(StatusCode::kInternal,
                            "cannot create " + spec.workdir + ": " + ec.message());
  }
  fs::remove(fs::path(spec.workdir) / "exit_code", ec);
  fs::remove(fs::path(spec.workdir) / "cancelled", ec);
  // The framework's config files, beside the run (the batch script starts in the run folder).
  if (spec.framework) RETURN_IF_ERROR(WriteLaunchFiles(*spec.framework, spec.workdir));
  const fs::path script = fs::path(spec.workdir) / "job.sbatch";
  // The script exports the run's environment, FRENZY_TOKEN among it: owner-only. sbatch reads
  // the file and hands its text to slurmctld, so it needs neither the execute bit nor others'
  // read bit.
  RETURN_IF_ERROR(WritePrivateFile(script.string(), SbatchScript(spec, options_)));

  std::vector<std::string> argv = {"sbatch", "--parsable"};
  argv.insert(argv.end(), options_.extra_sbatch_args.begin(), options_.extra_sbatch_args.end());
  argv.push_back(script.string());
  ASSIGN_OR_RETURN(std::string out, RunChecked(argv));
  // "<id>" or "<id>;<cluster>"
  std::string id(Trim(out.substr(0, out.find(';'))));
  if (id.empty() || !std::all_of(id.begin(), id.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      })) {
    return ::frenzy::Status(
        StatusCode::kInternal,
        "'" + JoinArgv(argv) + "' printed no job id: '" + std::string(Trim(out)) + "'", "slurm");
  }
  return SlurmHandle(id, spec.workdir);
}

Result<RunStatus> SlurmBackend::Status(const std::string& handle) {
  ASSIGN_OR_RETURN(auto parsed, ParseSlurmHandle(handle));
  const auto& [id, workdir] = parsed;
  const std::vector<std::string> argv = {"scontrol", "show", "job", "-o", id};
  ASSIGN_OR_RETURN(CommandResult r, Run(argv));
  if (r.ok()) {
    ASSIGN_OR_RETURN(RunStatus st, ParseJobState(r.stdout_text));
    if (st.state == RunState::kFailed)
      AddOutputLog(fs::path(workdir) / ("slurm-" + id + ".out"), st);
    return st;
  }
  if (r.timed_out || r.stderr_text.find("Invalid job id") == std::string::npos) {
    std::string err(Trim(r.stderr_text));
    return ::frenzy::Status(
        StatusCode::kFailedPrecondition,
        "'" + JoinArgv(argv) + "' failed (" + r.Describe() + ")" + (err.empty() ? "" : ": " + err),
        "slurm");
  }
  return StatusFromFolder(id, workdir);
}

Result<RunStatus> SlurmBackend::StatusFromFolder(const std::string& id,
                                                 const std::string& workdir) const {
  RunStatus st;
  std::error_code ec;
  if (fs::exists(fs::path(workdir) / "cancelled", ec)) {
    st.state = RunState::kCancelled;
    st.message = "cancelled";
    return st;
  }
  std::optional<std::string> code_text = ReadText(fs::path(workdir) / "exit_code");
  if (!code_text || Trim(*code_text).empty()) {
    st.state = RunState::kLost;
    st.exit_code = -1;
    st.message = "Slurm no longer knows job " + id + " and it left no exit code in " + workdir;
    return st;
  }
  try {
    st.exit_code = std::stoi(std::string(Trim(*code_text)));
  } catch (const std::exception&) {
    return InvalidArgument("bad exit code '" + std::string(Trim(*code_text)) + "'",
                           (fs::path(workdir) / "exit_code").string());
  }
  if (st.exit_code == 0) {
    st.state = RunState::kSucceeded;
    st.message = "completed";
    return st;
  }
  // The job state is gone with the job: the output alone can tell an out-of-memory end.
  st.state = RunState::kFailed;
  st.failure = FailureKind::kCrashed;
  st.message = "exit code " + std::to_string(st.exit_code);
  AddOutputLog(fs::path(workdir) / ("slurm-" + id + ".out"), st);
  return st;
}

::frenzy::Status SlurmBackend::Cancel(const std::string& handle) {
  ASSIGN_OR_RETURN(auto parsed, ParseSlurmHandle(handle));
  const auto& [id, workdir] = parsed;
  // Only a job still pending or running is marked: one that ended keeps its outcome.
  Result<RunStatus> before = Status(handle);
  const bool active =
      !before.ok() || before->state == RunState::kPending || before->state == RunState::kRunning;
  if (!active) return ::frenzy::Status::Ok();
  const std::vector<std::string> argv = {"scancel", id};
  ASSIGN_OR_RETURN(CommandResult r, Run(argv));
  if (!r.ok() && r.stderr_text.find("Invalid job id") == std::string::npos &&
      r.stderr_text.find("already completing or completed") == std::string::npos) {
    std::string err(Trim(r.stderr_text));
    return ::frenzy::Status(
        StatusCode::kFailedPrecondition,
        "'" + JoinArgv(argv) + "' failed (" + r.Describe() + ")" + (err.empty() ? "" : ": " + err),
        "slurm");
  }
  std::ofstream marker(fs::path(workdir) / "cancelled", std::ios::trunc);
  marker << "cancelled\n";
  return ::frenzy::Status::Ok();
}

}  // namespace frenzy::server
