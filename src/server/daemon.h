// The control plane's core: accepts jobs (model + goals, never GPUs), plans and schedules them
// with the same policy code as the simulator, launches runs through a backend, follows them,
// feeds their memory reports to the runtime, and keeps everything in the store.
//
// Every operation is thread-safe: the HTTP handlers call Submit/Cancel/Report/... while the
// control loop calls Tick. One mutex guards the daemon's state; the queued and running jobs are
// kept in memory (written through to the store first), reads of single jobs and listings go to
// the store, and the policy decides on a snapshot without the mutex, so a pass over thousands of
// queued jobs does not hold submissions up. Nothing here reads a clock except through `now_s`.
#ifndef FRENZY_SERVER_DAEMON_H_
#define FRENZY_SERVER_DAEMON_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "common/status.h"
#include "hardware/cluster.h"
#include "hardware/gpu.h"
#include "launch/launch.h"
#include "model/model_spec.h"
#include "runtime/actions.h"
#include "runtime/faults.h"
#include "runtime/monitor.h"
#include "runtime/speed.h"
#include "sched/job_options.h"
#include "sched/policy.h"
#include "server/store.h"

namespace frenzy::server {

// What examples/train.py runs: data parallelism (DDP, ZeRO-1, and ZeRO-2/3 with its own
// sharding), recomputation of the attention core or of whole layers (every Nth too), bf16,
// fp16 or fp32; no tensor, pipeline, context or expert parallelism, no offload.
LayoutLimits BundledTrainLimits();
// Every layout but activation offload, which no training command does: for an entry point built
// on Megatron-LM and the like (frenzyd --all-layouts) and the sim backend.
LayoutLimits AllTrainLimits();

struct DaemonOptions {
  std::string policy = "frenzy";
  std::string runs_dir = "frenzy-runs";  // one folder per job: logs, checkpoints, plan
  // argv of one training rank; the plan arrives in FRENZY_PLAN (JSON) and FRENZY_WORKDIR.
  std::vector<std::string> train_command = {"python3", "examples/train.py"};
  std::string report_base_url;  // "http://127.0.0.1:8470": where runs report progress
  std::string token;            // given to runs (FRENZY_TOKEN) for their reports
  double memory_margin = 0.10;
  // The layouts `train_command` can run, for the jobs that name no framework: the bundled
  // examples/train.py's by default (BundledTrainLimits); every layout for an entry point built
  // on Megatron and the like, or for the sim backend, which runs no training code.
  LayoutLimits train_limits = BundledTrainLimits();
  // How `train_command`'s full-training runs are modelled (memory and speed): examples/train.py
  // is PyTorch data parallelism (DDP, ZeRO, FSDP-style sharding), Megatron-LM's entry points
  // kMegatron. Fine-tuning jobs are modelled as PEFT + Trainer (kHf).
  Framework train_framework = Framework::kFsdp;
  // The frameworks a job may name in "framework" (launch adapters, src/launch): its runs then
  // start the user's entry point through that framework's launcher, planned with the layouts
  // the framework can run (LimitsOf). None unless the operator allows them: a framework job
  // runs code its submitter chose on the cluster.
  std::vector<Launcher> frameworks;
  // The loss chain of the transformers release the cluster's environment runs HF models with
  // (TrainingSpec::hf_loss): what Accelerate and DeepSpeed jobs are planned with.
  HfLoss hf_loss = HfLoss::kPadded;
  // The cluster's PyTorch is older than 2.2 (TrainingSpec::mean_keeps_input): every job's
  // eager norms keep their x^2.
  bool mean_keeps_input = false;
  // The control loop asks the policy again when something changed (a submission, a cancel, a
  // run that ended, a new memory factor) and otherwise every round of a round-based policy
  // (Policy::round_s, as the simulator's engine does), or at least this often for the others
  // (decisions also depend on time and progress).
  double idle_pass_s = 5;
  double checkpoint_every_s = 5;  // see Checkpoint()
  // What a restart costs here (start-up and checkpoint load), as the policy and the runtime
  // price moves: the simulator's model by default.
  RestartModel restart;
  // The runtime, as the simulator drives it (SimOptions): how soon a projected out-of-memory
  // crash is acted on, crashes before a job is given up, and the back-off of other crashes.
  runtime::RuntimeOptions runtime;
  runtime::RetryOptions retry;
  // How often a running job's memory, as the backend reads it, is fed to the runtime's monitor
  // (the simulator's report interval): its trend is fitted over the last few reports.
  double report_interval_s = 300;
  // How often the backend is asked which nodes are up (sinfo on Slurm), and at once after a run
  // lost its node: a node that went down takes no new runs, one back up takes them again.
  double nodes_every_s = 30;
  // A folder of config.json files (or folders holding one) the operator offers by name, beside
  // the zoo. API model names never reach any other file. "" : the zoo only.
  std::string models_dir;
};

class Daemon {
 public:
  // Discovers the cluster from the backend (its nodes and GPU types) and re-attaches to the runs
  // the store says are running.
  static Result<std::unique_ptr<Daemon>> Create(DaemonOptions options, std::unique_ptr<Store> store,
                                                std::unique_ptr<Backend> backend,
                                                std::function<double()> now_s,
                                                const GpuCatalog& catalog = GpuCatalog::Default());

  // The API's operations. Errors: kInvalidArgument (400, names the field), kNotFound (404),
  // kFailedPrecondition (409/422: e.g. a job no GPU of the cluster can hold).
  Result<nlohmann::json> Submit(const nlohmann::json& spec);
  Result<nlohmann::json> GetJob(const std::string& id);
  Result<nlohmann::json> ListJobs(const std::string& state_filter, int64_t limit);
  Result<nlohmann::json> Cancel(const std::string& id);
  Result<nlohmann::json> Report(const std::string& id, const nlohmann::json& body);
  Result<nlohmann::json> Heartbeat(const std::string& node, const nlohmann::json& body);
  nlohmann::json ClusterJson();
  // The last `lines` (1..200) lines of the job's newest run log (a *.log or *.out file in its
  // folder under runs_dir: a local rank's output, Slurm's), each at most 1,000 bytes:
  // {"file", "lines": [...]}; {"file": "", "lines": []} when it has none (the sim backend runs
  // nothing).
  Result<nlohmann::json> LogTail(const std::string& id, int lines);
  Result<nlohmann::json> Plan(const nlohmann::json& spec);
  std::string Metrics();
  // True when `token` is the one the job's current run was launched with (runs report with it;
  // it is good for nothing else).
  bool RunTokenValid(const std::string& id, const std::string& token);
  // Not OK once the database file was deleted or replaced: the caller must stop.
  Status CheckStore() const;
  // What start-up could not load and set aside (see LoadStored), for the log.
  const std::vector<std::string>& quarantine_notes() const { return quarantine_notes_; }

  // One pass of the control loop: follow the runs, apply the runtime's memory decisions, ask the
  // policy, launch. Returns the number of state changes it made.
  Result<int> Tick();
  // Applies the backend's node list (Tick asks for it, without the lock): each known node's
  // up state; a node missing from the list is down. Returns whether any changed.
  bool ApplyNodes(const std::vector<BackendNode>& nodes);
  // The store's checkpoint (see Store::Checkpoint), when the last is `checkpoint_every_s` old
  // or the log has grown large. The control loop calls it after each tick, outside the
  // daemon's lock; only one thread may call it.
  Status Checkpoint();

  const Cluster& cluster() const { return cluster_; }
  const std::string& backend_name() const { return backend_name_; }

 private:
  Daemon(DaemonOptions o, std::unique_ptr<Store> s, std::unique_ptr<Backend> b,
         std::function<double()> now, Cluster c, const GpuCatalog& catalog);
  class Applier;  // the policy's decisions applied to runs (daemon_schedule.cc)
  friend class Applier;
  struct Parsed;  // a validated job spec
  Result<Parsed> ParseSpec(const nlohmann::json& spec) const;
  Status ParseFramework(const nlohmann::json& spec, Parsed* p) const;  // into p->spec
  // A spec as the store keeps it (ParseSpec's normalized form) parsed again.
  Result<Parsed> ParseStoredSpec(nlohmann::json spec) const;
  // A model by name: the zoo, then the operator's models folder; never a path.
  Result<ModelSpec> ModelByName(const std::string& name) const;
  // Loads the stored queued and running jobs; quarantines rows that cannot be read.
  Status LoadStored();
  Result<std::shared_ptr<const JobOptions>> OptionsFor(const JobRow& row);
  nlohmann::json JobJson(const JobRow& row, bool detail);
  struct Pass;  // one scheduling pass: the snapshot the policy decides on
  // A running job's run as the backend reported it, asked without mu_ (a command per run on
  // Slurm or Kubernetes).
  struct Polled {
    std::string handle;
    Result<RunStatus> status;
  };
  // Under mu_: applies the polls to the jobs still running the run that was polled.
  Status FollowRuns(double now, const std::unordered_map<int64_t, Polled>& polled, int& changes);
  // A poll's progress and memory; true when the row changed.
  bool Observe(JobRow& row, const RunStatus& st, double now);
  // One memory reading of the run (a backend's poll or the run's own report) to the monitor:
  // the row's factor and note follow, and the runtime plans at the next pass. True when the
  // factor changed; false, and nothing fed, when the plan lacks the prediction or the GPU's
  // memory.
  bool FeedMonitor(JobRow& row, const nlohmann::json& plan, int64_t peak_bytes, double now);
  // A failed run, by its kind: the runtime learns from an out-of-memory crash (and the layout is
  // never retried), a lost node requeues it, any other crash is retried after a back-off.
  Status OnRunFailed(JobRow& row, const RunStatus& st, double now);
  void RollBackToCheckpoint(JobRow& row);
  Status OnOutOfMemory(JobRow& row, double now);
  // The job as the runtime sees it between runs (its option table, failed options, crashes).
  Result<JobView> RuntimeView(const JobRow& row);
  // The runtime's state of a job (and the monitor's classes) written to the store, so that a
  // restarted daemon keeps what it learned.
  Status SaveRuntime(int64_t key, const std::string& id);
  Status LoadRuntime();
  // Under mu_: a replan or move of the runtime, as the engine applies it.
  Status ApplyMemoryAction(JobRow row, const runtime::MemoryAction& a, const JobView& view,
                           double now);
  // Under mu_: the runtime's memory actions, then the snapshot for the policy.
  Status PrepareSchedule(double now, Pass& pass, int& changes);
  // Under mu_: the policy's decisions, for the jobs that did not change since the snapshot.
  Status ApplySchedule(double now, Pass& pass, const Decisions& d, int& changes);
  // Writes the row to the store, then to the in-memory active set (or out of it once ended)
  // and to the GPUs it holds.
  Status Save(JobRow& row, const std::string& kind, const std::string& detail);
  // Ends the job (succeeded, failed or cancelled): it holds no GPUs any more.
  Status End(JobRow& row, JobState state, double now, const std::string& message,
             const std::string& kind, const std::string& detail);
  // Cancels the job's run and requeues it (it resumes from its checkpoint).
  Status Stop(JobRow row, double now, const std::string& kind, const std::string& why);
  // view_'s free GPUs follow the row: what the job held is given back, what a running row's
  // allocation names is taken.
  void Hold(int64_t key, const JobRow& row);
  // The job's row from the active set, or from the store once ended; kNotFound if neither.
  Result<JobRow> FindJob(const std::string& id);
  // `layout` < 0: the layout ChooseLayout picks for the job's memory factor.
  // A job of a framework Frenzy launches: the framework's launch of `plan` in ls.framework
  // (and plan_json's "launch"), or the job ended failed with the reason (false). True without
  // a launch for jobs of the daemon's own training command.
  Result<bool> FrameworkLaunch(JobRow& row, nlohmann::json spec, const frenzy::Plan& plan,
                               double now, LaunchSpec& ls, nlohmann::json* plan_json);
  Status Launch(JobRow& row, const JobView& view, const Allocation& alloc, double now,
                int layout = -1);
  Status Requeue(JobRow& row, double now, const std::string& kind, const std::string& why);

  std::mutex tick_mu_;  // one Tick at a time; taken before mu_
  std::mutex mu_;
  DaemonOptions opt_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Backend> backend_;
  std::string backend_name_;
  std::function<double()> now_s_;
  Cluster cluster_;
  ClusterView view_;  // types and nodes of cluster_
  const GpuCatalog& catalog_;
  OptionCache cache_;
  std::unique_ptr<Policy> policy_;
  runtime::MemoryMonitor monitor_;
  runtime::SpeedLearner speed_;  // stored with the runtime's state (runtime_state.h)
  bool use_runtime_ = false;     // the policy runs with the runtime (Policy::uses_runtime)
  // Per job: the runtime's state beside the monitor's (as the engine keeps it per job).
  struct JobRuntime {
    runtime::RetryState retry;
    std::vector<int> failed_options;  // options that crashed out of memory
    int ooms = 0;
    double retry_at_s = -1;         // a crashed job waits out its back-off until then
    double last_report_s = -1e300;  // when the monitor last heard of its memory
    // Tokens in the current run's last checkpoint (at first, what it resumed from); a crash
    // rolls the job's progress back to them. < 0: unknown (kept progress stands).
    double checkpoint_tokens = -1;
  };
  std::map<int64_t, JobRuntime> runtime_;
  // A memory report reached the monitor since the last pass: the runtime plans its actions then,
  // as the engine does after a batch of events with a report.
  bool reported_ = false;
  // Per active job: its option table (parsing a spec again every pass would dominate the loop).
  std::unordered_map<int64_t, std::shared_ptr<const JobOptions>> options_of_;
  // The queued and running jobs, by number (submission order), as last written to the store.
  std::map<int64_t, JobRow> active_;
  // The running ones among them, with the GPUs each holds: (node index, GPUs) per node.
  std::map<int64_t, std::vector<std::pair<int, int64_t>>> running_;
  std::unordered_map<std::string, int> node_index_;  // node name -> index in cluster_.nodes
  bool dirty_ = true;         // something the policy should see changed since the last pass
  int64_t change_seq_ = 0;    // Snapshot::change_seq: passes that saw a change
  double last_pass_s_ = -1;   // when the policy was last asked
  double last_nodes_s_ = -1;  // when the backend was last asked for its nodes
  bool nodes_stale_ = false;  // a run lost its node since: ask before the next decision
  double last_checkpoint_s_ = -1e300;  // the control loop's alone (see Checkpoint)
  // Per job: the SHA-256 of its current run's token.
  std::unordered_map<int64_t, std::string> run_token_hash_;
  // Per job: the last report of the current attempt (reports may not go back within one).
  struct LastReport {
    int64_t attempt = -1;
    double step = 0, tokens = 0;
    double step_tokens = -1;  // global_batch x seq_len of the job (-1: not read yet)
  };
  std::unordered_map<int64_t, LastReport> last_report_;
  // The dashboard's histories, in memory only (a restarted daemon starts them afresh).
  // Per job: memory readings (the run's peak, the plan's prediction), at most kMemorySamples,
  // thinned to every other one when full so that they span the whole run.
  struct MemorySample {
    double t_s;
    int64_t peak_bytes, predicted_bytes;
  };
  std::unordered_map<int64_t, std::vector<MemorySample>> memory_history_;
  // The cluster's used GPUs per type (view_.types order) over the last kUsageWindowS: a sample
  // when a count changed, or kUsageEveryS after the last.
  std::deque<std::pair<double, std::vector<int64_t>>> usage_history_;
  void SampleUsage(double now);                                                 // under mu_
  void SampleMemory(int64_t key, double now, int64_t peak, int64_t predicted);  // under mu_
  // Under mu_: a job's options per GPU type and memory readings, for GET /v1/jobs/{id}.
  void AddJobDetail(const JobRow& row, nlohmann::json& j);
  int64_t quarantined_ = 0;
  std::vector<std::string> quarantine_notes_;
  // Metrics.
  int64_t submissions_ = 0, launches_ = 0, ticks_ = 0, passes_ = 0;
  double last_schedule_s_ = 0, schedule_s_total_ = 0, last_locked_s_ = 0;
};

}  // namespace frenzy::server

#endif  // FRENZY_SERVER_DAEMON_H_
