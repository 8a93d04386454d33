// The SQLite store: ids, transactions, listing by state, events, nodes, reopening.
#include "server/store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "server_test_util.h"

namespace frenzy::server {
namespace {

// A database in a fresh folder, removed (with its -wal, -shm and lock files) with the object.
struct TempDb {
  test_util::TempDir dir;
  std::string path;
  explicit TempDb(const std::string& name)
      : dir("frenzy-store-" + name), path((dir.path() / "s.db").string()) {}
};

// Commits do not checkpoint: the write-ahead log grows until Checkpoint() copies it into the
// database file; what was committed is there either way, also to a process opening it later.
TEST(Store, CheckpointCopiesTheLogIntoTheDatabaseFile) {
  const TempDb db("checkpoint");
  const std::string& path = db.path;
  auto s = Store::Open(path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  JobRow r;
  r.spec = std::string(2000, ' ') + R"({"model":"gpt2"})";  // a few rows per page
  r.model = "gpt2";
  for (int i = 0; i < 300; ++i) ASSERT_TRUE((*s)->InsertJob(r, "x").ok());
  // SQLite's own checkpoint would have run at 1,000 pages; the log holds them all.
  const auto wal_bytes = std::filesystem::file_size(path + "-wal");
  EXPECT_GT(wal_bytes, 1000u * 4096u);
  EXPECT_GT((*s)->WalFrames(), 1000);
  auto copied = (*s)->Checkpoint();
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_GT(*copied, 1000);
  EXPECT_GT(std::filesystem::file_size(path), 300u * 2000u);  // in the database file now
  // After the checkpoint the next commit starts the log over instead of growing it.
  ASSERT_TRUE((*s)->InsertJob(r, "after").ok());
  EXPECT_EQ(std::filesystem::file_size(path + "-wal"), wal_bytes);
  EXPECT_LT((*s)->WalFrames(), 100);
  s->reset();  // one store per database at a time (its lock)
  auto again = Store::Open(path);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*(*again)->CountJobs(), 301);
}

TEST(Store, IdsIncreaseAndStateSurvivesReopening) {
  const TempDb db("reopen");
  const std::string& path = db.path;
  {
    auto s = Store::Open(path);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    JobRow r;
    r.spec = R"({"model":"gpt2"})";
    r.model = "gpt2";
    r.total_tokens = 100;
    auto a = (*s)->InsertJob(r, "first");
    auto b = (*s)->InsertJob(r, "second");
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(*a, "j-000001");
    EXPECT_EQ(*b, "j-000002");
    auto row = (*s)->GetJob(*b);
    ASSERT_TRUE(row.ok() && row->has_value());
    JobRow changed = **row;
    changed.state = JobState::kRunning;
    changed.handle = "sim:x";
    changed.updated_s = 5;
    ASSERT_TRUE((*s)->UpdateJob(changed, "started", "on 8 GPUs").ok());
  }
  auto s = Store::Open(path);
  ASSERT_TRUE(s.ok());
  auto running = (*s)->ListJobs({JobState::kRunning});
  ASSERT_TRUE(running.ok());
  ASSERT_EQ(running->size(), 1u);
  EXPECT_EQ((*running)[0].id, "j-000002");
  EXPECT_EQ((*running)[0].handle, "sim:x");
  EXPECT_EQ((*running)[0].total_tokens, 100);
  auto events = (*s)->Events("j-000002");
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[0].kind, "submitted");
  EXPECT_EQ((*events)[1].kind, "started");
  EXPECT_EQ((*events)[1].detail, "on 8 GPUs");
  // Ids keep increasing after a reopen.
  JobRow r;
  r.spec = "{}";
  auto c = (*s)->InsertJob(r, "third");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, "j-000003");
  EXPECT_EQ(*(*s)->CountJobs(), 3);
  EXPECT_EQ(*(*s)->CountJobs(JobState::kQueued), 2);
}

TEST(Store, UpdatingAnUnknownJobChangesNothing) {
  const TempDb db("unknown");
  auto s = Store::Open(db.path);
  ASSERT_TRUE(s.ok());
  JobRow r;
  r.id = "j-000042";
  Status st = (*s)->UpdateJob(r, "started", "x");
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_TRUE((*s)->Events("j-000042")->empty());  // the event was rolled back too
  EXPECT_EQ(*(*s)->CountJobs(), 0);
}

TEST(Store, NodesUpsert) {
  const TempDb db("nodes");
  auto s = Store::Open(db.path);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->UpsertNode(NodeRow{"n1", "A100-80GB", 8, true, 1, "{}"}).ok());
  ASSERT_TRUE((*s)->UpsertNode(NodeRow{"n1", "A100-80GB", 4, false, 2, "{}"}).ok());
  auto nodes = (*s)->Nodes();
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0].gpus, 4);
  EXPECT_FALSE((*nodes)[0].up);
}

TEST(Store, UnopenablePathIsAClearError) {
  auto s = Store::Open("/nonexistent-dir/sub/frenzy.db");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().ToString().find("cannot open database"), std::string::npos);
}

}  // namespace
}  // namespace frenzy::server
