#include "backend/backend.h"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace frenzy::server {

namespace {

bool IsVariableName(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

bool IsPlainFileName(const std::string& s) {
  if (s.empty() || s.size() > 128 || s[0] == '.') return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

}  // namespace

const std::vector<std::string>& LaunchPlaceholders() {
  static const std::vector<std::string> kNames = {"MASTER_ADDR", "MASTER_PORT", "NODE_RANK",
                                                  "FRENZY_JOB_ID"};
  return kNames;
}

std::vector<std::string> NodeAgentArgv(const frenzy::Launch& launch) {
  // ${w//'$NAME'/$NAME}: the quoted pattern matches the text "$NAME" literally; the
  // replacement is the variable's value. Nothing else in a word is expanded.
  // bash 5.2 would put the matched text where a replacement holds '&': switched off.
  std::string script = "shopt -u patsub_replacement 2>/dev/null; "
                       ": \"${NODE_RANK:=${SLURM_NODEID:-0}}\"; export NODE_RANK; a=(); "
                       "for w in \"$@\"; do ";
  for (const std::string& name : LaunchPlaceholders()) {
    script += "w=\"${w//'$" + name + "'/$" + name + "}\"; ";
  }
  script += "a+=(\"$w\"); done; exec \"${a[@]}\"";
  std::vector<std::string> argv = {"/bin/bash", "-c", script, "frenzy-node"};
  argv.insert(argv.end(), launch.argv.begin(), launch.argv.end());
  return argv;
}

::frenzy::Status ValidateFrameworkLaunch(const frenzy::Launch& launch) {
  if (launch.argv.empty()) return InvalidArgument("the launch has no command", {}, "argv");
  for (const std::string& word : launch.argv) {
    if (word.find('\0') != std::string::npos) {
      return InvalidArgument("an argument holds a NUL byte", {}, "argv");
    }
  }
  for (const auto& [key, value] : launch.env) {
    if (!IsVariableName(key)) return InvalidArgument("not a variable name: '" + key + "'", {}, "env");
    if (value.find('\0') != std::string::npos) {
      return InvalidArgument("the value of " + key + " holds a NUL byte", {}, "env");
    }
  }
  for (const auto& [name, text] : launch.files) {
    if (!IsPlainFileName(name)) {
      return InvalidArgument("not a plain file name: '" + name + "'", {}, "files");
    }
  }
  if (launch.nodes < 1 || launch.procs_per_node < 1) {
    return InvalidArgument("a launch needs at least one node and one process per node", {},
                           "nodes");
  }
  return ::frenzy::Status::Ok();
}

::frenzy::Status WriteLaunchFiles(const frenzy::Launch& launch, const std::string& workdir) {
  RETURN_IF_ERROR(ValidateFrameworkLaunch(launch));
  namespace fs = std::filesystem;
  for (const auto& [name, text] : launch.files) {
    const fs::path path = fs::path(workdir) / name;
    const fs::path tmp = fs::path(workdir) / ("." + name + ".tmp");
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      return ::frenzy::Status(StatusCode::kInternal,
                              "cannot write " + tmp.string() + ": " + std::strerror(errno));
    }
    size_t done = 0;
    while (done < text.size()) {
      ssize_t n = ::write(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(fd);
        return ::frenzy::Status(StatusCode::kInternal, "cannot write " + tmp.string());
      }
      done += static_cast<size_t>(n);
    }
    if (::close(fd) != 0) {
      return ::frenzy::Status(StatusCode::kInternal, "cannot write " + tmp.string());
    }
    std::error_code ec;
    fs::rename(tmp, path, ec);
    if (ec) {
      return ::frenzy::Status(StatusCode::kInternal,
                              "cannot write " + path.string() + ": " + ec.message());
    }
  }
  return ::frenzy::Status::Ok();
}

const char* RunStateName(RunState s) {
  switch (s) {
    case RunState::kPending:
      return "pending";
    case RunState::kRunning:
      return "running";
    case RunState::kSucceeded:
      return "succeeded";
    case RunState::kFailed:
      return "failed";
    case RunState::kCancelled:
      return "cancelled";
    case RunState::kLost:
      return "lost";
  }
  return "lost";
}

const char* FailureKindName(FailureKind k) {
  switch (k) {
    case FailureKind::kNone:
      return "none";
    case FailureKind::kOutOfMemory:
      return "out_of_memory";
    case FailureKind::kNodeLost:
      return "node_lost";
    case FailureKind::kCrashed:
      return "crashed";
  }
  return "crashed";
}

}  // namespace frenzy::server
