// The daemon's durable state, in SQLite (WAL mode): jobs with their plans and progress, their
// events, nodes and allocations. Every change is one transaction, so a daemon killed at any
// moment restarts with every accepted job in the state of its last completed change.
//
// Thread-safe (one connection behind a mutex): the HTTP handlers and the control loop share it.
//
// One process per database: Open() takes an exclusive lock (flock) on "<path>.lock", held until
// the store is destroyed, so a second daemon on the same database fails at start-up with the
// PID of the one holding it instead of running beside it (two schedulers launching and
// cancelling the same jobs).
#ifndef FRENZY_SERVER_STORE_H_
#define FRENZY_SERVER_STORE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace frenzy::server {

enum class JobState { kQueued, kRunning, kSucceeded, kFailed, kCancelled };
const char* JobStateName(JobState s);
std::optional<JobState> JobStateFromName(const std::string& s);
inline bool Terminal(JobState s) {
  return s == JobState::kSucceeded || s == JobState::kFailed || s == JobState::kCancelled;
}

struct JobRow {
  std::string id;     // "j-000001"
  std::string spec;   // the submitted job spec, JSON
  std::string model;  // model name (for listings)
  JobState state = JobState::kQueued;
  double submitted_s = 0, updated_s = 0, started_s = -1, finished_s = -1;
  std::string plan;     // JSON of the chosen plan ("" while queued before its first start)
  std::string why;      // why this plan (the scheduler's and planner's explanation)
  std::string handle;   // the backend's handle of the current run
  int64_t attempt = 0;  // runs started so far
  double total_tokens = 0, done_tokens = 0;
  int64_t step = 0;
  int64_t predicted_bytes = 0, observed_bytes = 0;
  double memory_factor = 0;  // the runtime's factor (0: none)
  std::string memory_note;   // the runtime's explanation
  std::string message;       // the last error or state message
  std::string allocation;    // JSON [[node, gpus], ...] of the current run
};

struct EventRow {
  int64_t id = 0;
  std::string job_id;
  double t_s = 0;
  std::string kind, detail;
};

struct NodeRow {
  std::string name, gpu;
  int64_t gpus = 0;
  bool up = true;
  double last_seen_s = 0;
  std::string readings;  // JSON of the last heartbeat
};

class Store {
 public:
  // kFailedPrecondition when another process holds the database's lock.
  static Result<std::unique_ptr<Store>> Open(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Inserts a new job with the next id (returned), and its "submitted" event.
  Result<std::string> InsertJob(JobRow row, const std::string& event_detail);
  // Replaces the job's row and appends an event, in one transaction. `kind` "" adds no event.
  Status UpdateJob(const JobRow& row, const std::string& kind, const std::string& detail);
  Result<std::optional<JobRow>> GetJob(const std::string& id);
  // Jobs in submission order; `states` empty: all.
  Result<std::vector<JobRow>> ListJobs(const std::vector<JobState>& states = {},
                                       int64_t limit = -1);
  Result<int64_t> CountJobs(std::optional<JobState> state = std::nullopt);
  Result<std::vector<EventRow>> Events(const std::string& job_id, int64_t limit = 100);
  Status UpsertNode(const NodeRow& node);
  // Copies committed transactions from the write-ahead log into the database file without
  // blocking writers (a passive checkpoint, on a connection of its own); returns the pages
  // copied. The daemon's control loop calls it (see Daemon::Checkpoint). Until it is called
  // the log keeps growing.
  Result<int64_t> Checkpoint();
  // Frames in the write-ahead log after the last commit (0 before the first).
  int64_t WalFrames() const { return wal_frames_.load(); }
  Result<std::vector<NodeRow>> Nodes();
  // The SHA-256 (hex) of the token a job's current run reports with; "" if none.
  Status SetRunTokenHash(const std::string& job_id, const std::string& hash);
  Result<std::string> RunTokenHash(const std::string& job_id);
  // The runtime's state (what the memory monitor learned, crash and out-of-memory history), one
  // JSON value per key: a job's id, or "classes" for what was learned across jobs.
  Status PutRuntimeState(const std::string& key, const std::string& value);
  Status DeleteRuntimeState(const std::string& key);
  Result<std::map<std::string, std::string>> RuntimeStates();
  // kFailedPrecondition once the database file was deleted or replaced under this process
  // (SQLite keeps writing to the unlinked file: every later change would be lost).
  Status CheckFile() const;
  const std::string& path() const { return path_; }

 private:
  explicit Store(sqlite3* db) : db_(db) {}
  Status Exec(const std::string& sql);
  // The statement for `sql`, prepared once and kept (null on a preparation error).
  // REQUIRES: mu_ held.
  sqlite3_stmt* Prepare(const std::string& sql);
  Status Run(const char* sql);         // one cached statement without results; REQUIRES: mu_ held
  Status WriteJob(const JobRow& row);  // REQUIRES: mu_ held, in a transaction
  Status AddEvent(const std::string& job_id, double t_s, const std::string& kind,
                  const std::string& detail);
  std::mutex mu_;
  sqlite3* db_;
  std::unordered_map<std::string, sqlite3_stmt*> stmts_;
  std::mutex checkpoint_mu_;
  sqlite3* checkpoint_db_ = nullptr;
  std::atomic<int64_t> wal_frames_{0};
  std::string path_;
  int lock_fd_ = -1;
  uint64_t dev_ = 0, ino_ = 0;  // of the database file when opened
};

}  // namespace frenzy::server

#endif  // FRENZY_SERVER_STORE_H_
