// Workload: the jobs a simulation replays, one per line of a CSV file (DESIGN.md §3).
//
//   job_id,submit_s,model,tokens,global_batch,seq_len[,requested_gpu,requested_gpus,
//   precision,priority,user]
//
// A header naming the columns is required (any order; unknown columns are ignored). `model` is
// a zoo name or a path to a HuggingFace config.json. `requested_*` is what a user would have
// asked for by hand; only baselines that run jobs as requested (`fifo-static`) use it.
// Parsing rejects a bad line with its line number and column. Jobs are kept in file order;
// `submit_s` need not be sorted.
#ifndef FRENZY_SIM_WORKLOAD_H_
#define FRENZY_SIM_WORKLOAD_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "memory/training.h"

namespace frenzy {

struct WorkloadJob {
  std::string id;
  double submit_s = 0;
  std::string model;  // zoo name or config path
  double tokens = 0;
  int64_t global_batch = 0;
  int64_t seq_len = 0;
  std::optional<std::string> requested_gpu;  // catalog name as written
  std::optional<int64_t> requested_gpus;
  Precision precision = Precision::kBf16;
  int64_t priority = 0;
  std::string user;
};

struct Workload {
  std::string name;
  std::vector<WorkloadJob> jobs;
};

// Parses workload CSV text; `where` names the source in errors ("w.csv:12: column 'tokens':
// ..."). Checks every field (positive tokens/batch/length, non-negative submit time, unique
// ids, known precision); model names are resolved later, by whoever needs the architecture.
Result<Workload> ParseWorkloadCsv(std::string_view text, const std::string& where);

// The CSV text of a workload (header plus one line per job), parseable by ParseWorkloadCsv.
std::string WorkloadToCsv(const Workload& w);

// Names of the workloads compiled into the binary (data/workloads/*.csv), sorted.
std::vector<std::string> BundledWorkloadNames();

// A bundled workload by name, or a workload file by path.
Result<Workload> ResolveWorkload(const std::string& name_or_path);

}  // namespace frenzy

#endif  // FRENZY_SIM_WORKLOAD_H_
