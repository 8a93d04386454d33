// Helpers shared by the server tests: a temporary folder, a file's text, waiting for a run.
#ifndef FRENZY_TESTS_SERVER_SERVER_TEST_UTIL_H_
#define FRENZY_TESTS_SERVER_SERVER_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "backend/backend.h"

namespace frenzy::server::test_util {

// A fresh folder under the system's temporary directory, removed with the object unless Keep()
// was called (e.g. to look at a failed test's files).
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "frenzy-test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "cannot create " << tmpl;
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!keep_) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  void Keep() { keep_ = true; }

 private:
  std::filesystem::path path_;
  bool keep_ = false;
};

// The file's text ("" when it cannot be read).
inline std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Polls the backend every `poll` until the run leaves pending/running; a test failure if it
// has not within `seconds`.
inline RunStatus WaitEnd(Backend& b, const std::string& handle, double seconds,
                         std::chrono::milliseconds poll) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  RunStatus st;
  while (std::chrono::steady_clock::now() < end) {
    auto r = b.Status(handle);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return st;
    st = *r;
    if (st.state != RunState::kRunning && st.state != RunState::kPending) return st;
    std::this_thread::sleep_for(poll);
  }
  ADD_FAILURE() << "run " << handle << " did not end within " << seconds << " s: " << st.message;
  return st;
}

}  // namespace frenzy::server::test_util

#endif  // FRENZY_TESTS_SERVER_SERVER_TEST_UTIL_H_
