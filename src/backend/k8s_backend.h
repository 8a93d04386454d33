// The `k8s` backend: a run is a Kubernetes batch/v1 Job (plus, across nodes, a headless Service
// for the rendezvous), written as a JSON manifest (JSON is valid YAML) to a folder and applied
// with kubectl when a cluster is configured.
//
// One pod per node, each starting `nproc_per_node` = gpus_per_node ranks with a torchrun-style
// launcher; a multi-node run is an Indexed Job whose completion index is the node rank, and whose
// pod 0 (hostname <job>-0 under the headless Service) is the rendezvous master. Pods land on the
// planned GPU type through a nodeSelector on the GPU product label that NVIDIA's GPU feature
// discovery puts on nodes.
//
// Credentials in the run's environment (FRENZY_TOKEN) never appear in the Job: they go into a
// Secret of the Job's name, written to its own manifest file (mode 0600, see WritePrivateFile),
// applied before the Job and read by the container through secretKeyRef.
//
// Without a cluster (`apply` off) the backend only writes manifests: Status says the run is
// pending with the manifest's path, Cancel removes the manifests, and Nodes is an error.
//
// A failed run's FailureKind comes from its pods (`kubectl get pods`, see ClassifyPodFailure): a
// container OOMKilled, or one whose log tail (kept as its termination message) reports a failed
// allocation, is out of memory; a pod evicted or taken away with its node is a lost node; any
// other failure is a crash.
//
// Handles are "k8s:<namespace>/<job name>". Thread safety: the backend holds its options and
// references to the catalog and the runner (both safe to share); each call is independent.
#ifndef FRENZY_BACKEND_K8S_BACKEND_H_
#define FRENZY_BACKEND_K8S_BACKEND_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "backend/backend.h"
#include "backend/process.h"

namespace frenzy {
class GpuCatalog;
}  // namespace frenzy

namespace frenzy::server {

// Frenzy's GPU type names (data/gpus.json) -> values of the GPU product node label.
const std::map<std::string, std::string>& DefaultGpuProductLabels();

struct K8sOptions {
  std::string namespace_name = "default";
  // The container image of a rank. A placeholder: users set an image with their training code,
  // PyTorch and torchrun.
  std::string image = "python:3.11";
  std::string kubeconfig;                   // passed as --kubeconfig when set
  std::string context;                      // passed as --context when set
  std::string manifest_dir = "frenzy-k8s";  // where manifests are written (created if missing)
  // Apply manifests with kubectl (a cluster is configured); off: only write them.
  bool apply = false;
  std::string kubectl = "kubectl";  // the program, looked up on PATH
  double kubectl_timeout_s = 60;
  std::string gpu_label_key = "nvidia.com/gpu.product";
  // GPU type (as the catalog names it) -> product label value; see DefaultGpuProductLabels.
  std::map<std::string, std::string> gpu_labels = DefaultGpuProductLabels();
  int64_t master_port = 29500;  // the rendezvous port on pod 0
};

// `text` as a DNS-1123 label: lower case, [a-z0-9-], starting and ending with an alphanumeric,
// at most `max_len` characters (a hash suffix keeps names that had to be cut apart). Empty input
// gives "x".
std::string DnsLabel(std::string_view text, size_t max_len = 63);

// The Job's (and Service's) name: "frenzy-<job id>-<attempt>" as a DNS label short enough that
// the pods' hostnames ("<name>-<index>") stay valid labels too.
std::string K8sJobName(const LaunchSpec& spec);

// The product label value for a GPU type, by the options' table (exact name first, then
// `catalog`'s canonical name for an alias). Empty when unknown.
std::string GpuProductLabel(const std::string& gpu, const K8sOptions& options,
                            const GpuCatalog& catalog);

// The batch/v1 Job of a run. Single node: completions = parallelism = 1. Several nodes: an
// Indexed Job with completions = parallelism = nodes whose pods find pod 0 through the headless
// Service of ServiceManifest. Pod template: restartPolicy Never (and backoffLimit 0: a failed
// rank fails the run; the daemon decides about retries), `nvidia.com/gpu` limit of
// gpus_per_node, a nodeSelector on the GPU's product label when one is known, the launcher
// environment (NODE_RANK, NNODES, NPROC_PER_NODE, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and
// spec.env (credentials as secretKeyRef references to SecretManifest's Secret, never their
// values), and the command `torchrun --nnodes ... --node_rank=$(NODE_RANK) ... <spec.command>`.
// The container's terminationMessagePolicy is FallbackToLogsOnError, so a failed container's
// status carries the tail of its log, where ClassifyPodFailure looks for out-of-memory errors.
// A framework launch (spec.framework) runs its own argv instead, once per pod, with its
// placeholders as $(VAR) references to that environment, its env added, and its files mounted
// read-only from ConfigMapManifest's ConfigMap at /etc/frenzy/launch (arguments naming a file
// point there).
// REQUIRES: spec.command or spec.framework is set (Launch checks).
nlohmann::json JobManifest(const LaunchSpec& spec, const K8sOptions& options,
                           const GpuCatalog& catalog);

// The v1 Secret (type Opaque, the Job's name) holding the credentials of spec.env as stringData,
// one key per variable (FRENZY_TOKEN); null when spec.env holds none.
nlohmann::json SecretManifest(const LaunchSpec& spec, const K8sOptions& options);

// The v1 ConfigMap (the Job's name) holding a framework launch's files, one key per file; null
// when the run has none.
nlohmann::json ConfigMapManifest(const LaunchSpec& spec, const K8sOptions& options);

// The headless Service (clusterIP None) that gives the pods of a multi-node run DNS names.
nlohmann::json ServiceManifest(const LaunchSpec& spec, const K8sOptions& options);

// A run's state from `kubectl get job NAME -o json`: Complete -> succeeded, Failed (or
// FailureTarget) -> failed (failure kCrashed until the pods tell more), being deleted ->
// cancelled, pods ready -> running, else pending.
RunStatus ParseJobStatus(const nlohmann::json& job);

// Why the pods of a failed run failed.
struct PodFailure {
  FailureKind kind = FailureKind::kCrashed;
  int exit_code = 0;    // the exit code of the container that tells why; 0 when none ended
  std::string message;  // "pod frenzy-j-1-0-0-x2b9k: container trainer OOMKilled (exit 137)"
};

// Classifies the pods of `kubectl get pods --selector frenzy.io/run=NAME -o json`:
//   kOutOfMemory — a container terminated with reason OOMKilled (the kernel killed it at its
//                  memory limit), or its termination message reports a failed allocation
//                  (OutOfMemoryLine: a CUDA out-of-memory error exits 1 with reason "Error");
//   kNodeLost    — a pod that failed with reason Evicted, NodeLost, Shutdown, Terminated or
//                  UnexpectedAdmissionError, or with a DisruptionTarget condition (taken by the
//                  taint manager, the eviction API, pod GC, the kubelet or preemption);
//   kCrashed     — anything else (the first failed container is named), or no pods left.
// Out of memory outranks a lost node, which outranks a crash: when one rank dies the others
// fail after it, so the most specific cause is the root one, and mistaking an out-of-memory
// layout for a lost node would retry it forever.
// Errors: InvalidArgument naming the field (no "items" list, a pod without metadata.name,
// fields of the wrong JSON type).
Result<PodFailure> ClassifyPodFailure(const nlohmann::json& pod_list);

// The GPU nodes of `kubectl get nodes -o json`: allocatable nvidia.com/gpu and the product label
// (mapped back to `catalog`'s GPU name when known). Nodes without GPUs are left out; a node is
// up when Ready and schedulable. Errors name the node and the field.
Result<std::vector<BackendNode>> ParseNodes(const nlohmann::json& node_list,
                                            const K8sOptions& options, const GpuCatalog& catalog);

class K8sBackend : public Backend {
 public:
  // GPU names are `catalog`'s; kubectl runs through `runner`.
  // REQUIRES: `catalog` and `runner` outlive the backend.
  K8sBackend(K8sOptions options, const GpuCatalog& catalog, ProcessRunner& runner = SystemRunner())
      : opt_(std::move(options)), catalog_(catalog), runner_(runner) {}
  std::string_view name() const override { return "k8s"; }
  Result<std::vector<BackendNode>> Nodes() override;
  Result<std::string> Launch(const LaunchSpec& spec) override;
  Result<RunStatus> Status(const std::string& handle) override;
  ::frenzy::Status Cancel(const std::string& handle) override;

  // Where Launch writes the manifest of the run named `job_name` (its Job, with the Service of a
  // multi-node run), and its Secret (mode 0600; only for runs with credentials).
  std::string ManifestPath(const std::string& job_name) const;
  std::string SecretManifestPath(const std::string& job_name) const;

 private:
  std::vector<std::string> Kubectl(const std::string& ns) const;  // the common argv prefix
  Result<CommandResult> RunKubectl(const std::vector<std::string>& argv) const;
  // Completes a failed run's status from its pods (ClassifyPodFailure).
  ::frenzy::Status ExplainFailure(const std::string& ns, const std::string& name,
                                  RunStatus& st) const;

  K8sOptions opt_;
  const GpuCatalog& catalog_;
  ProcessRunner& runner_;
};

}  // namespace frenzy::server

#endif  // FRENZY_BACKEND_K8S_BACKEND_H_
