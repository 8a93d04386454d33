#include "server/store.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace frenzy::server {
namespace {

// One use of a prepared statement from the store's cache (null: the preparation failed, and
// sqlite3_errmsg says why). Resets the statement and clears its bindings when done.
class Stmt {
 public:
  Stmt(sqlite3* db, sqlite3_stmt* s) : db_(db), s_(s) {}
  ~Stmt() {
    if (s_ != nullptr) {
      sqlite3_reset(s_);
      sqlite3_clear_bindings(s_);
    }
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  bool ok() const { return s_ != nullptr; }
  Stmt& Bind(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& Bind(int i, double v) {
    sqlite3_bind_double(s_, i, v);
    return *this;
  }
  Stmt& Bind(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  int Step() { return sqlite3_step(s_); }
  std::string Text(int c) const {
    const unsigned char* t = sqlite3_column_text(s_, c);
    return t ? std::string(reinterpret_cast<const char*>(t),
                           static_cast<size_t>(sqlite3_column_bytes(s_, c)))
             : std::string();
  }
  double Double(int c) const { return sqlite3_column_double(s_, c); }
  int64_t Int(int c) const { return sqlite3_column_int64(s_, c); }
  std::string Error() const { return sqlite3_errmsg(db_); }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_;
};

Status DbError(sqlite3* db, const std::string& what) {
  return Status(StatusCode::kInternal, fmt::format("database: {}: {}", what, sqlite3_errmsg(db)));
}

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta VALUES ('schema', 1), ('next_job', 1);
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, spec TEXT NOT NULL, model TEXT NOT NULL,
  state TEXT NOT NULL, submitted_s REAL NOT NULL, updated_s REAL NOT NULL, started_s REAL,
  finished_s REAL, plan TEXT, why TEXT, handle TEXT, attempt INTEGER, total_tokens REAL,
  done_tokens REAL, step INTEGER, predicted_bytes INTEGER, observed_bytes INTEGER,
  memory_factor REAL, memory_note TEXT, message TEXT, allocation TEXT);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, seq);
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, t_s REAL NOT NULL,
  kind TEXT NOT NULL, detail TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_job ON events (job_id, id);
CREATE TABLE IF NOT EXISTS nodes (
  name TEXT PRIMARY KEY, gpu TEXT NOT NULL, gpus INTEGER NOT NULL, up INTEGER NOT NULL,
  last_seen_s REAL NOT NULL, readings TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS run_tokens (job_id TEXT PRIMARY KEY, hash TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runtime_state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
)sql";

// Takes the exclusive lock on `lock_path` and writes our PID into it; on failure says who holds
// it. The lock is the open file description's: it goes with the process, kill -9 included.
Result<int> LockDatabase(const std::string& db_path) {
  const std::string lock_path = db_path + ".lock";
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Status(
        StatusCode::kInvalidArgument,
        fmt::format("cannot open database: its lock file {}: {}", lock_path, std::strerror(errno)),
        db_path, "db");
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    char buf[32] = {};
    ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    ::close(fd);
    std::string holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("?");
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    if (err == EWOULDBLOCK) {
      return Status(StatusCode::kFailedPrecondition,
                    fmt::format("the database is in use by another frenzyd (pid {}; lock file {})",
                                holder, lock_path),
                    db_path, "db");
    }
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("cannot lock {}: {}", lock_path, std::strerror(err)), db_path, "db");
  }
  std::string pid = fmt::format("{}\n", ::getpid());
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    // The lock holds regardless; only the message a second daemon prints loses the PID.
  }
  return fd;
}

constexpr const char* kJobColumns =
    "id, spec, model, state, submitted_s, updated_s, started_s, finished_s, plan, why, handle, "
    "attempt, total_tokens, done_tokens, step, predicted_bytes, observed_bytes, memory_factor, "
    "memory_note, message, allocation";

// Binds the row's fields 1..20 in the order of the UPDATE and INSERT below, its id as 21.
void BindJob(Stmt& s, const JobRow& r) {
  s.Bind(1, r.spec).Bind(2, r.model).Bind(3, std::string(JobStateName(r.state)));
  s.Bind(4, r.submitted_s).Bind(5, r.updated_s).Bind(6, r.started_s).Bind(7, r.finished_s);
  s.Bind(8, r.plan).Bind(9, r.why).Bind(10, r.handle).Bind(11, r.attempt);
  s.Bind(12, r.total_tokens).Bind(13, r.done_tokens).Bind(14, r.step);
  s.Bind(15, r.predicted_bytes).Bind(16, r.observed_bytes).Bind(17, r.memory_factor);
  s.Bind(18, r.memory_note).Bind(19, r.message).Bind(20, r.allocation).Bind(21, r.id);
}

JobRow ReadJob(const Stmt& s) {
  JobRow r;
  r.id = s.Text(0);
  r.spec = s.Text(1);
  r.model = s.Text(2);
  r.state = JobStateFromName(s.Text(3)).value_or(JobState::kFailed);
  r.submitted_s = s.Double(4);
  r.updated_s = s.Double(5);
  r.started_s = s.Double(6);
  r.finished_s = s.Double(7);
  r.plan = s.Text(8);
  r.why = s.Text(9);
  r.handle = s.Text(10);
  r.attempt = s.Int(11);
  r.total_tokens = s.Double(12);
  r.done_tokens = s.Double(13);
  r.step = s.Int(14);
  r.predicted_bytes = s.Int(15);
  r.observed_bytes = s.Int(16);
  r.memory_factor = s.Double(17);
  r.memory_note = s.Text(18);
  r.message = s.Text(19);
  r.allocation = s.Text(20);
  return r;
}

}  // namespace

const char* JobStateName(JobState s) {
  switch (s) {
    case JobState::kQueued:
      return "queued";
    case JobState::kRunning:
      return "running";
    case JobState::kSucceeded:
      return "succeeded";
    case JobState::kFailed:
      return "failed";
    case JobState::kCancelled:
      return "cancelled";
  }
  return "failed";
}

std::optional<JobState> JobStateFromName(const std::string& s) {
  for (JobState st : {JobState::kQueued, JobState::kRunning, JobState::kSucceeded,
                      JobState::kFailed, JobState::kCancelled}) {
    if (s == JobStateName(st)) return st;
  }
  return std::nullopt;
}

Result<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  ASSIGN_OR_RETURN(int lock_fd, LockDatabase(path));
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    ::close(lock_fd);
    return Status(StatusCode::kInvalidArgument, "cannot open database: " + msg, path, "db");
  }
  std::unique_ptr<Store> s(new Store(db));
  s->path_ = path;
  s->lock_fd_ = lock_fd;
  sqlite3_busy_timeout(db, 5000);
  // WAL: readers never block the writer; NORMAL sync survives a killed process (not a power
  // cut of the machine, which FULL would).
  RETURN_IF_ERROR(s->Exec(
      "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA journal_size_limit=67108864;"));
  Status st = s->Exec(kSchema);
  if (!st.ok()) return Status(st.code(), st.ToString(), path, "db");
  struct stat file {};
  if (::stat(path.c_str(), &file) == 0) {
    s->dev_ = file.st_dev;
    s->ino_ = file.st_ino;
  }
  // Checkpoints (copying the WAL back into the database) run on a second connection, from
  // Checkpoint(), not inside whichever commit crosses SQLite's 1,000-page mark: that commit
  // took tens of milliseconds and every submission queued behind it waited as long.
  sqlite3* ck = nullptr;
  if (sqlite3_open_v2(path.c_str(), &ck, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK &&
      sqlite3_exec(ck, "PRAGMA journal_mode=WAL; PRAGMA journal_size_limit=67108864;", nullptr,
                   nullptr, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(ck, 5000);
    s->checkpoint_db_ = ck;
    // Our hook replaces SQLite's automatic checkpoint; it only counts the log's frames.
    sqlite3_wal_hook(
        db,
        [](void* self, sqlite3*, const char*, int frames) {
          static_cast<Store*>(self)->wal_frames_.store(frames);
          return SQLITE_OK;
        },
        s.get());
  } else {
    sqlite3_close(ck);  // SQLite checkpoints inside commits, as by default
  }
  return s;
}

Store::~Store() {
  for (auto& [sql, stmt] : stmts_) sqlite3_finalize(stmt);
  sqlite3_close(checkpoint_db_);
  sqlite3_close(db_);
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
}

Status Store::CheckFile() const {
  struct stat file {};
  if (::stat(path_.c_str(), &file) != 0) {
    return Status(StatusCode::kFailedPrecondition,
                  fmt::format("the database file is gone ({}): it was deleted under the running "
                              "daemon; stopping before more changes are lost",
                              std::strerror(errno)),
                  path_, "db");
  }
  if (file.st_dev != dev_ || file.st_ino != ino_) {
    return Status(StatusCode::kFailedPrecondition,
                  "the database file was replaced under the running daemon; stopping before "
                  "changes go to the old one",
                  path_, "db");
  }
  return Status::Ok();
}

Status Store::SetRunTokenHash(const std::string& job_id, const std::string& hash) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, Prepare("INSERT INTO run_tokens (job_id, hash) VALUES (?, ?) "
                      "ON CONFLICT(job_id) DO UPDATE SET hash=excluded.hash"));
  if (!s.ok()) return DbError(db_, "prepare run token");
  s.Bind(1, job_id).Bind(2, hash);
  if (s.Step() != SQLITE_DONE) return DbError(db_, "run token");
  return Status::Ok();
}

Result<std::string> Store::RunTokenHash(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, Prepare("SELECT hash FROM run_tokens WHERE job_id = ?"));
  if (!s.ok()) return DbError(db_, "prepare run token");
  s.Bind(1, job_id);
  int rc = s.Step();
  if (rc == SQLITE_DONE) return std::string();
  if (rc != SQLITE_ROW) return DbError(db_, "run token");
  return s.Text(0);
}

Status Store::PutRuntimeState(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, Prepare("INSERT INTO runtime_state (key, value) VALUES (?, ?) "
                      "ON CONFLICT(key) DO UPDATE SET value=excluded.value"));
  if (!s.ok()) return DbError(db_, "prepare runtime state");
  s.Bind(1, key).Bind(2, value);
  if (s.Step() != SQLITE_DONE) return DbError(db_, "runtime state");
  return Status::Ok();
}

Status Store::DeleteRuntimeState(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, Prepare("DELETE FROM runtime_state WHERE key = ?"));
  if (!s.ok()) return DbError(db_, "prepare runtime state");
  s.Bind(1, key);
  if (s.Step() != SQLITE_DONE) return DbError(db_, "runtime state");
  return Status::Ok();
}

Result<std::map<std::string, std::string>> Store::RuntimeStates() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, Prepare("SELECT key, value FROM runtime_state"));
  if (!s.ok()) return DbError(db_, "prepare runtime state");
  std::map<std::string, std::string> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) out.emplace(s.Text(0), s.Text(1));
  if (rc != SQLITE_DONE) return DbError(db_, "runtime state");
  return out;
}

Result<int64_t> Store::Checkpoint() {
  if (checkpoint_db_ == nullptr) return int64_t{0};
  std::lock_guard<std::mutex> lock(checkpoint_mu_);
  int wal_frames = 0, copied = 0;
  int rc = sqlite3_wal_checkpoint_v2(checkpoint_db_, nullptr, SQLITE_CHECKPOINT_PASSIVE,
                                     &wal_frames, &copied);
  if (rc == SQLITE_BUSY) return int64_t{0};  // a reader holds old frames: next time
  if (rc != SQLITE_OK) return DbError(checkpoint_db_, "checkpoint");
  return static_cast<int64_t>(copied);
}

sqlite3_stmt* Store::Prepare(const std::string& sql) {
  auto it = stmts_.find(sql);
  if (it != stmts_.end()) return it->second;
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return nullptr;
  }
  stmts_.emplace(sql, stmt);
  return stmt;
}

Status Store::Run(const char* sql) {
  Stmt s(db_, Prepare(sql));
  if (!s.ok() || s.Step() != SQLITE_DONE) return DbError(db_, sql);
  return Status::Ok();
}

Status Store::Exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return Status(StatusCode::kInternal, "database: " + msg);
  }
  return Status::Ok();
}

Status Store::AddEvent(const std::string& job_id, double t_s, const std::string& kind,
                       const std::string& detail) {
  Stmt s(db_, Prepare("INSERT INTO events (job_id, t_s, kind, detail) VALUES (?, ?, ?, ?)"));
  if (!s.ok()) return DbError(db_, "prepare event");
  s.Bind(1, job_id).Bind(2, t_s).Bind(3, kind).Bind(4, detail);
  if (s.Step() != SQLITE_DONE) return DbError(db_, "insert event");
  return Status::Ok();
}

Status Store::WriteJob(const JobRow& r) {
  Stmt s(db_, Prepare("UPDATE jobs SET spec=?, model=?, state=?, submitted_s=?, updated_s=?, "
                      "started_s=?, finished_s=?, plan=?, why=?, handle=?, attempt=?, "
                      "total_tokens=?, done_tokens=?, step=?, predicted_bytes=?, "
                      "observed_bytes=?, memory_factor=?, memory_note=?, message=?, "
                      "allocation=? WHERE id=?"));
  if (!s.ok()) return DbError(db_, "prepare update");
  BindJob(s, r);
  if (s.Step() != SQLITE_DONE) return DbError(db_, "update job");
  if (sqlite3_changes(db_) != 1) {
    return Status(StatusCode::kNotFound, "no job '" + r.id + "'", {}, "id");
  }
  return Status::Ok();
}

Result<std::string> Store::InsertJob(JobRow r, const std::string& event_detail) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(Run("BEGIN IMMEDIATE"));
  auto fail = [&](Status st) {
    (void)Run("ROLLBACK");
    return st;
  };
  int64_t seq = 0;
  {
    Stmt s(db_, Prepare("UPDATE meta SET value = value + 1 WHERE key = 'next_job' "
                        "RETURNING value - 1"));
    if (!s.ok() || s.Step() != SQLITE_ROW) return fail(DbError(db_, "next job id"));
    seq = s.Int(0);
  }
  r.id = fmt::format("j-{:06d}", seq);
  {
    Stmt s(db_, Prepare("INSERT INTO jobs (spec, model, state, submitted_s, updated_s, "
                        "started_s, finished_s, plan, why, handle, attempt, total_tokens, "
                        "done_tokens, step, predicted_bytes, observed_bytes, memory_factor, "
                        "memory_note, message, allocation, id, seq) VALUES (?, ?, ?, ?, ?, ?, "
                        "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
    if (!s.ok()) return fail(DbError(db_, "prepare insert"));
    BindJob(s, r);
    s.Bind(22, seq);
    if (s.Step() != SQLITE_DONE) return fail(DbError(db_, "insert job"));
  }
  Status st = AddEvent(r.id, r.submitted_s, "submitted", event_detail);
  if (!st.ok()) return fail(st);
  RETURN_IF_ERROR(Run("COMMIT"));
  return r.id;
}

Status Store::UpdateJob(const JobRow& r, const std::string& kind, const std::string& detail) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(Run("BEGIN IMMEDIATE"));
  Status st = WriteJob(r);
  if (st.ok() && !kind.empty()) st = AddEvent(r.id, r.updated_s, kind, detail);
  if (!st.ok()) {
    (void)Run("ROLLBACK");
    return st;
  }
  return Run("COMMIT");
}

Result<std::optional<JobRow>> Store::GetJob(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, Prepare(fmt::format("SELECT {} FROM jobs WHERE id = ?", kJobColumns)));
  if (!s.ok()) return DbError(db_, "prepare get");
  s.Bind(1, id);
  int rc = s.Step();
  if (rc == SQLITE_DONE) return std::optional<JobRow>();
  if (rc != SQLITE_ROW) return DbError(db_, "get job");
  return std::optional<JobRow>(ReadJob(s));
}

Result<std::vector<JobRow>> Store::ListJobs(const std::vector<JobState>& states, int64_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string where;
  for (size_t i = 0; i < states.size(); ++i) {
    where += (i == 0 ? " WHERE state IN ('" : "', '") + std::string(JobStateName(states[i]));
  }
  if (!states.empty()) where += "')";
  Stmt s(db_,
         Prepare(fmt::format("SELECT {} FROM jobs{} ORDER BY seq LIMIT ?", kJobColumns, where)));
  if (!s.ok()) return DbError(db_, "prepare list");
  s.Bind(1, limit);
  std::vector<JobRow> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) out.push_back(ReadJob(s));
  if (rc != SQLITE_DONE) return DbError(db_, "list jobs");
  return out;
}

Result<int64_t> Store::CountJobs(std::optional<JobState> state) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, Prepare(state ? "SELECT COUNT(*) FROM jobs WHERE state = ?"
                            : "SELECT COUNT(*) FROM jobs"));
  if (!s.ok()) return DbError(db_, "prepare count");
  if (state) s.Bind(1, std::string(JobStateName(*state)));
  if (s.Step() != SQLITE_ROW) return DbError(db_, "count jobs");
  return s.Int(0);
}

Result<std::vector<EventRow>> Store::Events(const std::string& job_id, int64_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_,
         Prepare("SELECT id, job_id, t_s, kind, detail FROM (SELECT * FROM events WHERE job_id = ? "
                 "ORDER BY id DESC LIMIT ?) ORDER BY id"));
  if (!s.ok()) return DbError(db_, "prepare events");
  s.Bind(1, job_id).Bind(2, limit);
  std::vector<EventRow> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    out.push_back(EventRow{s.Int(0), s.Text(1), s.Double(2), s.Text(3), s.Text(4)});
  }
  if (rc != SQLITE_DONE) return DbError(db_, "events");
  return out;
}

Status Store::UpsertNode(const NodeRow& n) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(
      db_,
      Prepare(
          "INSERT INTO nodes (name, gpu, gpus, up, last_seen_s, readings) VALUES (?, ?, ?, ?, ?, "
          "?) "
          "ON CONFLICT(name) DO UPDATE SET gpu=excluded.gpu, gpus=excluded.gpus, up=excluded.up, "
          "last_seen_s=excluded.last_seen_s, readings=excluded.readings"));
  if (!s.ok()) return DbError(db_, "prepare node");
  s.Bind(1, n.name).Bind(2, n.gpu).Bind(3, n.gpus).Bind(4, int64_t{n.up ? 1 : 0});
  s.Bind(5, n.last_seen_s).Bind(6, n.readings);
  if (s.Step() != SQLITE_DONE) return DbError(db_, "upsert node");
  return Status::Ok();
}

Result<std::vector<NodeRow>> Store::Nodes() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_,
         Prepare("SELECT name, gpu, gpus, up, last_seen_s, readings FROM nodes ORDER BY name"));
  if (!s.ok()) return DbError(db_, "prepare nodes");
  std::vector<NodeRow> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    out.push_back(NodeRow{s.Text(0), s.Text(1), s.Int(2), s.Int(3) != 0, s.Double(4), s.Text(5)});
  }
  if (rc != SQLITE_DONE) return DbError(db_, "nodes");
  return out;
}

}  // namespace frenzy::server
