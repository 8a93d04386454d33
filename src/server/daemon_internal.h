// What the daemon's files share (daemon.cc, daemon_spec.cc, daemon_views.cc, daemon_runs.cc,
// daemon_schedule.cc): small helpers and the daemon's private structs. Not part of the API.
#ifndef FRENZY_SERVER_DAEMON_INTERNAL_H_
#define FRENZY_SERVER_DAEMON_INTERNAL_H_

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "planner/planner.h"
#include "server/daemon.h"

namespace frenzy::server::internal {

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// Report bounds. A step trains at least one token, so neither may pass the job's tokens; no GPU
// holds a terabyte.
inline constexpr double kMaxPeakBytes = 1099511627776.0;  // 1 TiB

// "j-000042" -> 42
int64_t KeyOf(const std::string& id);
std::string Describe(const Plan& p);
// Stored JSON is read back bounded: a row planted or damaged on disk must not crash a reader.
nlohmann::json ParseOr(const std::string& text, nlohmann::json fallback);
std::string Sha256Hex(const std::string& text);
// 256 random bits, hex: a run's token.
std::string NewRunToken();
// Fields of a heartbeat's GPU that are stored, with their types; anything else is dropped.
Result<nlohmann::json> CleanGpuReading(const nlohmann::json& g, size_t i);

}  // namespace frenzy::server::internal

namespace frenzy::server {

// Whether a stored spec names a framework Frenzy launches (a look at its "framework" word,
// without parsing the rest of it).
bool NamesLauncher(const nlohmann::json& stored_spec);

struct Daemon::Parsed {
  JobSpec spec;
  std::optional<Launcher> launcher;  // "framework" named a launch adapter's framework
  LaunchInput launch_input;          // its entry point, arguments and config file
  std::string model_key;   // zoo name, or "inline:<hash>"
  std::string model_name;  // for listings
  nlohmann::json normalized;  // what the store keeps
};

struct Daemon::Pass {
  ClusterView view;  // the cluster as the snapshot saw it (the policy reads it unlocked)
  std::vector<JobView> views;
  std::vector<std::shared_ptr<const JobOptions>> keep;  // the views' option tables
  // Per view: the job's state and attempt at the snapshot. A decision is applied only to a job
  // that still has both (not cancelled, ended or restarted meanwhile).
  std::vector<std::pair<JobState, int64_t>> seen;
  std::unordered_map<int64_t, size_t> index_of;  // job number -> views index
};

}  // namespace frenzy::server

#endif  // FRENZY_SERVER_DAEMON_INTERNAL_H_
