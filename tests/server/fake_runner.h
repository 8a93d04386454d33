// FakeRunner: a ProcessRunner for tests that starts no process. It records every command it is
// given (argv, input, timeout, environment) and answers from a script: the queued replies first,
// in order, then the handler (a function of the command). A call with neither is a test failure,
// and an Internal error for the code under test, so an unexpected command never passes quietly.
//
// Use it to check the exact argv a backend sends and how it reads the answers; the real runner
// (SubprocessRunner, RunCommand) has its own tests in process_test.cc.
//
// Thread safety: Run, Push, SetHandler and calls() may be called from several threads.
#ifndef FRENZY_TESTS_SERVER_FAKE_RUNNER_H_
#define FRENZY_TESTS_SERVER_FAKE_RUNNER_H_

#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backend/process.h"

namespace frenzy::server::test_util {

// A command that ran and exited with `code`, having printed `out` and `err`.
inline CommandResult Exited(int code, std::string out = "", std::string err = "") {
  CommandResult r;
  r.exit_code = code;
  r.stdout_text = std::move(out);
  r.stderr_text = std::move(err);
  return r;
}

// A command that printed `out` and exited 0.
inline CommandResult Printed(std::string out) { return Exited(0, std::move(out)); }

// A command killed after its timeout, as RunCommand reports it.
inline CommandResult TimedOut() {
  CommandResult r = Exited(128 + 9);
  r.term_signal = 9;
  r.timed_out = true;
  return r;
}

class FakeRunner : public ProcessRunner {
 public:
  using Handler = std::function<Result<CommandResult>(const CommandSpec&)>;

  // The answer to the next call that finds the queue empty before this reply.
  void Push(Result<CommandResult> reply) {
    std::lock_guard<std::mutex> lock(mu_);
    replies_.push_back(std::move(reply));
  }
  // Answers the calls that find the queue empty.
  void SetHandler(Handler handler) {
    std::lock_guard<std::mutex> lock(mu_);
    handler_ = std::move(handler);
  }

  Result<CommandResult> Run(const CommandSpec& command) override {
    Handler handler;
    {
      std::lock_guard<std::mutex> lock(mu_);
      calls_.push_back(command);
      if (!replies_.empty()) {
        Result<CommandResult> reply = std::move(replies_.front());
        replies_.pop_front();
        return reply;
      }
      handler = handler_;
    }
    if (handler) return handler(command);
    std::string line;
    for (const std::string& a : command.argv) line += (line.empty() ? "" : " ") + a;
    ADD_FAILURE() << "FakeRunner: no reply scripted for: " << line;
    return Status(StatusCode::kInternal, "FakeRunner: no reply scripted for: " + line);
  }

  // Every command given so far, oldest first.
  std::vector<CommandSpec> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  // Their argv only.
  std::vector<std::vector<std::string>> argvs() const {
    std::vector<std::vector<std::string>> out;
    for (const CommandSpec& c : calls()) out.push_back(c.argv);
    return out;
  }
  // Replies pushed but not asked for (a test that scripts a call that never came can check 0).
  size_t unused_replies() const {
    std::lock_guard<std::mutex> lock(mu_);
    return replies_.size();
  }

 private:
  mutable std::mutex mu_;
  std::deque<Result<CommandResult>> replies_;
  Handler handler_;
  std::vector<CommandSpec> calls_;
};

}  // namespace frenzy::server::test_util

#endif  // FRENZY_TESTS_SERVER_FAKE_RUNNER_H_
