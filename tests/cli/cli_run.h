// Runs the real `frenzy` binary (FRENZY_BIN) as a user would, for the CLI tests.
#ifndef FRENZY_TESTS_CLI_CLI_RUN_H_
#define FRENZY_TESTS_CLI_CLI_RUN_H_

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace frenzy::testing {

struct CliRun {
  int exit_code = -1;
  std::string out;  // stdout, and stderr too unless asked otherwise
};

// `frenzy ARGS`; stderr merged into `out` unless merge_stderr is false (then discarded).
inline CliRun Frenzy(const std::string& args, bool merge_stderr = true) {
  std::string cmd =
      std::string(FRENZY_BIN) + " " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace frenzy::testing

#endif  // FRENZY_TESTS_CLI_CLI_RUN_H_
