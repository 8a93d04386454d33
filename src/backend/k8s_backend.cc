#include "backend/k8s_backend.h"

// size: manifests, the parsers of kubectl's JSON (jobs, nodes, pods) and the backend that joins
// them, each short; the parsers would move to a file of their own with a change to the build.

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>

#include "hardware/gpu.h"
#include "backend/process.h"
#include "backend/slurm_backend.h"  // WritePrivateFile

namespace frenzy::server {
namespace {

using nlohmann::json;

constexpr char kGpuResource[] = "nvidia.com/gpu";
constexpr char kContainerName[] = "trainer";
constexpr char kRunLabel[] = "frenzy.io/run";
// Set by the Job controller on every pod of an Indexed Job.
constexpr char kCompletionIndexField[] =
    "metadata.annotations['batch.kubernetes.io/job-completion-index']";
// Longest Job name: its pods are named and hostnamed "<name>-<index>", which must stay a DNS
// label (63) for indexes of up to 6 digits.
constexpr size_t kMaxJobName = 56;
// The variables of LaunchSpec::env whose values are credentials: they go into the run's Secret
// and reach the container through secretKeyRef, so the Job (which anyone who may list Jobs or
// describe pods can read) never holds them.
constexpr const char* kSecretEnv[] = {"FRENZY_TOKEN"};

bool IsSecretEnv(const std::string& key) {
  return std::any_of(std::begin(kSecretEnv), std::end(kSecretEnv),
                     [&](const char* k) { return key == k; });
}

uint32_t Fnv1a(std::string_view s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) {
    h ^= c;
    h *= 16777619u;
  }
  return h;
}

std::string TrimDashes(std::string s) {
  while (!s.empty() && s.back() == '-') s.pop_back();
  return s;
}

// A label value: [A-Za-z0-9._-], at most 63, starting and ending with an alphanumeric.
std::string LabelValue(std::string_view text) {
  std::string out;
  for (char c : text) {
    unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '.' || c == '_' || c == '-') {
      out += c;
    } else {
      out += '_';
    }
  }
  if (out.size() > 63) out.resize(63);
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  while (!out.empty() && !alnum(out.back())) out.pop_back();
  size_t start = 0;
  while (start < out.size() && !alnum(out[start])) ++start;
  return out.substr(start);
}

// Kubernetes expands $(VAR) in a container's command and env values; text from the user must
// reach the process as written, so "$(" becomes "$$(" (the documented escape).
std::string EscapeExpansion(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '$' && i + 1 < s.size() && s[i + 1] == '(') out += '$';
    out += s[i];
  }
  return out;
}

std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool IsPython(const std::string& program) {
  std::string base = Basename(program);
  if (base.rfind("python", 0) != 0) return false;
  // python, python3, python3.11
  return std::all_of(base.begin() + 6, base.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) || c == '.';
  });
}

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int64_t ProcsPerNode(const LaunchSpec& spec) { return std::max<int64_t>(1, spec.gpus_per_node); }

json Labels(const LaunchSpec& spec, const std::string& name) {
  return {{"app.kubernetes.io/managed-by", "frenzy"},
          {"frenzy.io/job-id", LabelValue(spec.job_id)},
          {kRunLabel, name}};
}

json Metadata(const LaunchSpec& spec, const std::string& name, const K8sOptions& o) {
  json annotations = {{"frenzy.io/job-id", spec.job_id},
                      {"frenzy.io/attempt", std::to_string(spec.attempt)}};
  if (!spec.name.empty()) annotations["frenzy.io/name"] = spec.name;
  if (!spec.plan.gpu.empty()) annotations["frenzy.io/gpu"] = spec.plan.gpu;
  return {{"name", name},
          {"namespace", o.namespace_name},
          {"labels", Labels(spec, name)},
          {"annotations", annotations}};
}

// Where a framework launch's files are mounted (from the run's ConfigMap), read-only.
constexpr const char* kLaunchFilesDir = "/etc/frenzy/launch";
constexpr const char* kLaunchFilesVolume = "launch-files";

// A framework launch's argv for the container: the user's "$(" escaped, the placeholders as
// Kubernetes' own $(VAR) references (the Job sets each variable), and an argument that names
// one of the launch's files pointed at its mount.
std::vector<std::string> FrameworkCommand(const frenzy::Launch& launch) {
  std::vector<std::string> cmd;
  for (const std::string& word : launch.argv) {
    if (launch.files.count(word)) {
      cmd.push_back(std::string(kLaunchFilesDir) + "/" + word);
      continue;
    }
    std::string w = EscapeExpansion(word);
    for (const std::string& name : LaunchPlaceholders()) {
      const std::string from = "$" + name, to = "$(" + name + ")";
      size_t at = w.find(from);
      while (at != std::string::npos) {
        w.replace(at, from.size(), to);
        at = w.find(from, at + to.size());
      }
    }
    cmd.push_back(w);
  }
  return cmd;
}

// torchrun runs a Python script itself; anything else needs --no_python.
std::vector<std::string> LaunchCommand(const LaunchSpec& spec) {
  if (spec.framework) return FrameworkCommand(*spec.framework);
  std::vector<std::string> cmd = {
      "torchrun",
      fmt::format("--nnodes={}", spec.nodes),
      fmt::format("--nproc_per_node={}", ProcsPerNode(spec)),
      "--node_rank=$(NODE_RANK)",
      "--master_addr=$(MASTER_ADDR)",
      "--master_port=$(MASTER_PORT)",
  };
  const auto& c = spec.command;
  size_t first = 0;
  if (!c.empty() && IsPython(c[0]) && c.size() >= 3 && c[1] == "-m") {
    cmd.push_back("-m");  // python3 -m module args -> torchrun ... -m module args
    first = 2;
  } else if (!c.empty() && IsPython(c[0]) && c.size() >= 2 && !c[1].empty() && c[1][0] != '-') {
    first = 1;  // python3 script.py args -> torchrun ... script.py args
  } else if (!c.empty() && !EndsWith(c[0], ".py")) {
    cmd.push_back("--no_python");  // an executable of its own (or python with its own flags)
  }
  for (size_t i = first; i < c.size(); ++i) cmd.push_back(EscapeExpansion(c[i]));
  return cmd;
}

json Env(const LaunchSpec& spec, const std::string& name, const K8sOptions& o) {
  json env = json::array();
  std::vector<std::string> set;
  auto add = [&](const std::string& key, const std::string& value) {
    env.push_back({{"name", key}, {"value", value}});
    set.push_back(key);
  };
  if (spec.nodes > 1) {
    env.push_back({{"name", "NODE_RANK"},
                   {"valueFrom", {{"fieldRef", {{"fieldPath", kCompletionIndexField}}}}}});
    set.push_back("NODE_RANK");
  } else {
    add("NODE_RANK", "0");
  }
  add("NNODES", std::to_string(spec.nodes));
  add("NPROC_PER_NODE", std::to_string(ProcsPerNode(spec)));
  add("WORLD_SIZE", std::to_string(spec.nodes * ProcsPerNode(spec)));
  add("MASTER_ADDR", spec.nodes > 1 ? name + "-0." + name : "127.0.0.1");
  add("MASTER_PORT", std::to_string(o.master_port));
  std::map<std::string, std::string> extra = spec.env;
  if (spec.framework) extra.insert(spec.framework->env.begin(), spec.framework->env.end());
  for (const auto& [key, value] : extra) {
    // The launcher's variables above win: they describe the layout this manifest runs.
    if (std::find(set.begin(), set.end(), key) != set.end()) continue;
    if (IsSecretEnv(key)) {
      // The Secret has the Job's name (SecretManifest); Kubernetes does not expand $(...) in
      // values taken from a Secret, so the value stays as it is there.
      env.push_back(
          {{"name", key}, {"valueFrom", {{"secretKeyRef", {{"name", name}, {"key", key}}}}}});
    } else {
      env.push_back({{"name", key}, {"value", EscapeExpansion(value)}});
    }
  }
  return env;
}

struct Handle {
  std::string ns;
  std::string name;
};

Result<Handle> ParseHandle(const std::string& handle) {
  constexpr std::string_view kPrefix = "k8s:";
  if (handle.rfind(kPrefix, 0) != 0) {
    return InvalidArgument("not a k8s handle (expected k8s:<namespace>/<name>): " + handle);
  }
  std::string rest = handle.substr(kPrefix.size());
  size_t slash = rest.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == rest.size()) {
    return InvalidArgument("not a k8s handle (expected k8s:<namespace>/<name>): " + handle);
  }
  Handle h{rest.substr(0, slash), rest.substr(slash + 1)};
  if (DnsLabel(h.ns) != h.ns || DnsLabel(h.name) != h.name) {
    return InvalidArgument("k8s handle names are not DNS labels: " + handle);
  }
  return h;
}

int64_t IntField(const json& obj, const char* key) {
  if (!obj.is_object()) return 0;
  auto it = obj.find(key);
  return it != obj.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

std::string GpuTypeFromLabel(const std::string& label, const K8sOptions& o,
                             const GpuCatalog& catalog) {
  if (label.empty()) return {};
  for (const auto& [gpu, value] : o.gpu_labels) {
    if (value == label) return gpu;
  }
  // GPU feature discovery appends "-SHARED" to a time-sliced GPU's product.
  std::string product = label;
  if (EndsWith(product, "-SHARED")) product.resize(product.size() - 7);
  for (const auto& [gpu, value] : o.gpu_labels) {
    if (value == product) return gpu;
  }
  if (const GpuType* t = catalog.Find(product)) return t->name;
  return label;
}

::frenzy::Status MakeParentFolder(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) {
    return Status(StatusCode::kInternal, "cannot create the manifest folder: " + ec.message(),
                  p.parent_path());
  }
  return {};
}

// A manifest without credentials (see WritePrivateFile for the Secret's).
::frenzy::Status WriteFile(const std::string& path, const std::string& text) {
  RETURN_IF_ERROR(MakeParentFolder(path));
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return Status(StatusCode::kInternal, "cannot write the manifest", path);
  return {};
}

// The string `key` of a JSON object from kubectl; "" when it is absent or not a string (reading
// it with json::value would throw on a value of another type).
std::string StringOr(const json& obj, const char* key) {
  if (!obj.is_object()) return {};
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

constexpr char kPodsWhere[] = "kubectl get pods -o json";

// Like StringOr, but a value of another type is an error naming `field`.key.
Result<std::string> StringField(const json& obj, const char* key, const std::string& field) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::string();
  if (!it->is_string()) {
    return InvalidArgument("expected a string, got " + it->dump(), kPodsWhere, field + "." + key);
  }
  return it->get<std::string>();
}

// Pod-level reasons of a pod failed because of its node, not its program: the kubelet's
// node-pressure eviction (Evicted), the node lifecycle controller (NodeLost), graceful node
// shutdown (Shutdown, Terminated) and a kubelet that could not admit the pod after a restart
// (UnexpectedAdmissionError, e.g. its GPUs no longer advertised).
constexpr const char* kNodeLostReasons[] = {"Evicted", "Shutdown", "NodeLost", "Terminated",
                                            "UnexpectedAdmissionError"};

using MaybeFailure = std::optional<PodFailure>;

// How surely a kind names the root cause when several pods failed (see ClassifyPodFailure).
int Strength(FailureKind k) {
  switch (k) {
    case FailureKind::kOutOfMemory:
      return 3;
    case FailureKind::kNodeLost:
      return 2;
    case FailureKind::kCrashed:
      return 1;
    case FailureKind::kNone:
      break;
  }
  return 0;
}

// The failure a pod's own status reports: a node-lost reason or a DisruptionTarget condition.
Result<MaybeFailure> PodDisruption(const json& status, const std::string& pod,
                                   const std::string& field) {
  ASSIGN_OR_RETURN(std::string reason, StringField(status, "reason", field));
  ASSIGN_OR_RETURN(std::string message, StringField(status, "message", field));
  for (const char* r : kNodeLostReasons) {
    if (reason != r) continue;
    std::string text = "pod " + pod + ": " + reason;
    if (!message.empty()) text += ": " + message;
    return MaybeFailure(PodFailure{FailureKind::kNodeLost, 0, std::move(text)});
  }
  if (!status.contains("conditions")) return MaybeFailure();
  if (!status["conditions"].is_array()) {
    return InvalidArgument("expected a list", kPodsWhere, field + ".conditions");
  }
  for (const json& c : status["conditions"]) {
    // Set by whoever takes a pod away: PreemptionByScheduler, DeletionByTaintManager (node
    // unreachable), EvictionByEvictionAPI (drain), DeletionByPodGC (node gone),
    // TerminationByKubelet.
    if (StringOr(c, "type") == "DisruptionTarget" && StringOr(c, "status") == "True") {
      std::string why = StringOr(c, "reason");
      std::string text = StringOr(c, "message");
      return MaybeFailure(PodFailure{FailureKind::kNodeLost, 0,
                                     "pod " + pod + ": disrupted (" +
                                         (why.empty() ? "no reason" : why) + ")" +
                                         (text.empty() ? "" : ": " + text)});
    }
  }
  return MaybeFailure();
}

// The failure a container's status reports, when it terminated unsuccessfully.
Result<MaybeFailure> ContainerFailure(const json& cs, const std::string& pod,
                                      const std::string& field) {
  if (!cs.is_object()) return InvalidArgument("expected an object", kPodsWhere, field);
  ASSIGN_OR_RETURN(std::string container, StringField(cs, "name", field));
  auto state = cs.find("state");
  if (state == cs.end() || !state->is_object() || !state->contains("terminated")) {
    return MaybeFailure();  // waiting or running: not what failed
  }
  const json& t = (*state)["terminated"];
  const std::string at = field + ".state.terminated";
  if (!t.is_object()) return InvalidArgument("expected an object", kPodsWhere, at);
  int exit_code = 0;
  if (t.contains("exitCode")) {
    const json& e = t["exitCode"];
    if (!e.is_number_integer() || e.get<int64_t>() < INT32_MIN || e.get<int64_t>() > INT32_MAX) {
      return InvalidArgument("exitCode is not a 32-bit whole number: " + e.dump(), kPodsWhere,
                             at + ".exitCode");
    }
    exit_code = static_cast<int>(e.get<int64_t>());
  }
  ASSIGN_OR_RETURN(std::string reason, StringField(t, "reason", at));
  ASSIGN_OR_RETURN(std::string message, StringField(t, "message", at));
  const std::string who = "pod " + pod + ": container " + container;
  if (reason == "OOMKilled") {
    return MaybeFailure(PodFailure{FailureKind::kOutOfMemory, exit_code,
                                   fmt::format("{} OOMKilled (exit {})", who, exit_code)});
  }
  if (exit_code == 0) return MaybeFailure();
  std::vector<std::string> lines;
  std::istringstream in(message);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  if (std::optional<std::string> oom = OutOfMemoryLine(lines)) {
    return MaybeFailure(
        PodFailure{FailureKind::kOutOfMemory, exit_code, who + ": " + oom->substr(0, 500)});
  }
  return MaybeFailure(PodFailure{FailureKind::kCrashed, exit_code,
                                 fmt::format("{} exited with code {}{}", who, exit_code,
                                             reason.empty() ? "" : " (" + reason + ")")});
}

::frenzy::Status KubectlFailed(const std::string& what, const CommandResult& r) {
  std::string err = r.stderr_text.empty() ? r.stdout_text : r.stderr_text;
  while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
  return Status(StatusCode::kFailedPrecondition,
                fmt::format("{} failed ({}): {}", what, r.Describe(), err));
}

}  // namespace

const std::map<std::string, std::string>& DefaultGpuProductLabels() {
  // Values of the `nvidia.com/gpu.product` node label. NVIDIA's GPU feature discovery (GFD, also
  // deployed by the GPU operator) sets it to the NVML device name with spaces replaced by '-'
  // (and "-SHARED" appended for time-sliced GPUs), so these are the NVML names of the catalog's
  // GPUs in that form. Clusters that label nodes differently override K8sOptions::gpu_labels.
  // AMD GPUs are labelled by AMD's own discovery under other keys and are not listed.
  static const std::map<std::string, std::string> kLabels = {
      {"V100-16GB", "Tesla-V100-SXM2-16GB"},
      {"V100-32GB", "Tesla-V100-SXM2-32GB"},
      {"T4", "Tesla-T4"},
      {"A10", "NVIDIA-A10"},
      {"A10G", "NVIDIA-A10G"},
      {"L4", "NVIDIA-L4"},
      {"L40S", "NVIDIA-L40S"},
      {"A40", "NVIDIA-A40"},
      {"RTX-3090", "NVIDIA-GeForce-RTX-3090"},
      {"RTX-4090", "NVIDIA-GeForce-RTX-4090"},
      {"A100-40GB", "NVIDIA-A100-SXM4-40GB"},
      {"A100-80GB", "NVIDIA-A100-SXM4-80GB"},
      {"H100-80GB", "NVIDIA-H100-80GB-HBM3"},
      {"H100-PCIe", "NVIDIA-H100-PCIe"},
      {"H200", "NVIDIA-H200"},
  };
  return kLabels;
}

std::string DnsLabel(std::string_view text, size_t max_len) {
  std::string out;
  for (char c : text) {
    unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u)) {
      out += static_cast<char>(std::tolower(u));
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  out = TrimDashes(out);
  if (out.empty()) out = "x";
  max_len = std::max<size_t>(max_len, 10);
  if (out.size() > max_len) {
    std::string hash = fmt::format("{:08x}", Fnv1a(text));
    out = TrimDashes(out.substr(0, max_len - hash.size() - 1)) + "-" + hash;
  }
  return out;
}

std::string K8sJobName(const LaunchSpec& spec) {
  const std::string prefix = "frenzy-";
  const std::string suffix = "-" + std::to_string(std::max<int64_t>(0, spec.attempt));
  const size_t room = kMaxJobName - prefix.size() - suffix.size();
  std::string id = DnsLabel(spec.job_id, 1000);
  if (id != spec.job_id || id.size() > room) {
    // Sanitising or cutting lost information: a hash of the original keeps distinct ids
    // distinct ("J_1" and "j-1").
    std::string hash = fmt::format("{:06x}", Fnv1a(spec.job_id) & 0xffffffu);
    id = TrimDashes(id.substr(0, std::min(id.size(), room - hash.size() - 1)));
    id = id.empty() ? hash : id + "-" + hash;
  }
  return prefix + id + suffix;
}

std::string GpuProductLabel(const std::string& gpu, const K8sOptions& options,
                            const GpuCatalog& catalog) {
  if (gpu.empty()) return {};
  auto it = options.gpu_labels.find(gpu);
  if (it != options.gpu_labels.end()) return it->second;
  if (const GpuType* t = catalog.Find(gpu)) {
    it = options.gpu_labels.find(t->name);
    if (it != options.gpu_labels.end()) return it->second;
  }
  return {};
}

json JobManifest(const LaunchSpec& spec, const K8sOptions& options, const GpuCatalog& catalog) {
  const std::string name = K8sJobName(spec);
  const bool multi = spec.nodes > 1;

  json container = {{"name", kContainerName},
                    {"image", options.image},
                    {"command", LaunchCommand(spec)},
                    {"env", Env(spec, name, options)},
                    // A failed container's status then holds its log's tail (the kubelet keeps
                    // up to 80 lines / 2 KiB), read by ClassifyPodFailure for out-of-memory errors.
                    {"terminationMessagePolicy", "FallbackToLogsOnError"}};
  if (spec.gpus_per_node > 0) {
    container["resources"] = {{"limits", {{kGpuResource, spec.gpus_per_node}}}};
  }
  if (multi) {
    container["ports"] = json::array(
        {{{"name", "rendezvous"}, {"containerPort", options.master_port}, {"protocol", "TCP"}}});
  }

  const bool files = spec.framework && !spec.framework->files.empty();
  if (files) {
    container["volumeMounts"] = json::array(
        {{{"name", kLaunchFilesVolume}, {"mountPath", kLaunchFilesDir}, {"readOnly", true}}});
  }
  json pod = {{"restartPolicy", "Never"}, {"containers", json::array({container})}};
  if (files) {
    pod["volumes"] =
        json::array({{{"name", kLaunchFilesVolume}, {"configMap", {{"name", name}}}}});
  }
  std::string product = GpuProductLabel(spec.plan.gpu, options, catalog);
  if (!product.empty()) pod["nodeSelector"] = {{options.gpu_label_key, product}};
  // Pod i of an Indexed Job is hostnamed <name>-i; under the headless Service's subdomain it
  // resolves as <name>-i.<name>.
  if (multi) pod["subdomain"] = name;

  json job_spec = {{"completions", spec.nodes},
                   {"parallelism", spec.nodes},
                   {"backoffLimit", 0},
                   {"template", {{"metadata", {{"labels", Labels(spec, name)}}}, {"spec", pod}}}};
  if (multi) job_spec["completionMode"] = "Indexed";

  return {{"apiVersion", "batch/v1"},
          {"kind", "Job"},
          {"metadata", Metadata(spec, name, options)},
          {"spec", job_spec}};
}

json SecretManifest(const LaunchSpec& spec, const K8sOptions& options) {
  json data = json::object();
  for (const auto& [key, value] : spec.env) {
    if (IsSecretEnv(key)) data[key] = value;
  }
  if (data.empty()) return nullptr;
  const std::string name = K8sJobName(spec);
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata", Metadata(spec, name, options)},
          {"type", "Opaque"},
          {"stringData", data}};
}

// A framework launch's config files (accelerate.yaml, ds_config.json), mounted read-only into
// every pod of the run; null when it has none.
json ConfigMapManifest(const LaunchSpec& spec, const K8sOptions& options) {
  if (!spec.framework || spec.framework->files.empty()) return nullptr;
  json data = json::object();
  for (const auto& [file, text] : spec.framework->files) data[file] = text;
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", Metadata(spec, K8sJobName(spec), options)},
          {"data", data}};
}

json ServiceManifest(const LaunchSpec& spec, const K8sOptions& options) {
  const std::string name = K8sJobName(spec);
  json meta = Metadata(spec, name, options);
  return {
      {"apiVersion", "v1"},
      {"kind", "Service"},
      {"metadata", meta},
      {"spec",
       {{"clusterIP", "None"},
        {"selector", {{kRunLabel, name}}},
        // Rank 0 must resolve before every pod is ready: the ranks wait for each other.
        {"publishNotReadyAddresses", true},
        {"ports",
         json::array(
             {{{"name", "rendezvous"}, {"port", options.master_port}, {"protocol", "TCP"}}})}}}};
}

RunStatus ParseJobStatus(const json& job) {
  RunStatus st;
  if (!job.is_object()) {
    st.state = RunState::kLost;
    st.message = "kubectl returned no job object";
    return st;
  }
  const json meta = job.value("metadata", json::object());
  const json status = job.value("status", json::object());
  if (meta.is_object() && meta.contains("deletionTimestamp")) {
    st.state = RunState::kCancelled;
    st.message = "the job is being deleted";
    return st;
  }
  bool complete = false, failed = false, suspended = false;
  std::string why;
  if (status.is_object() && status.contains("conditions") && status["conditions"].is_array()) {
    for (const auto& c : status["conditions"]) {
      if (!c.is_object() || StringOr(c, "status") != "True") continue;
      std::string type = StringOr(c, "type");
      std::string text = StringOr(c, "reason");
      std::string msg = StringOr(c, "message");
      if (!msg.empty()) text += text.empty() ? msg : ": " + msg;
      if (type == "Failed" || type == "FailureTarget") {
        failed = true;
        why = text;
      } else if (type == "Complete" || type == "SuccessCriteriaMet") {
        complete = true;
      } else if (type == "Suspended") {
        suspended = true;
      }
    }
  }
  const int64_t active = IntField(status, "active");
  const int64_t succeeded = IntField(status, "succeeded");
  const int64_t failed_pods = IntField(status, "failed");
  if (failed) {
    st.state = RunState::kFailed;
    st.failure = FailureKind::kCrashed;  // until the pods tell more (ClassifyPodFailure)
    st.exit_code = 1;  // the pods' exit codes are in their statuses, not the Job's
    st.message = why.empty() ? fmt::format("{} pod(s) failed", failed_pods) : why;
  } else if (complete) {
    st.state = RunState::kSucceeded;
    st.message = fmt::format("{} pod(s) succeeded", succeeded);
  } else if (suspended) {
    st.state = RunState::kPending;
    st.message = "the job is suspended";
  } else if (status.is_object() && status.contains("ready")) {
    const int64_t ready = IntField(status, "ready");
    st.state = ready > 0 ? RunState::kRunning : RunState::kPending;
    st.message = ready > 0    ? fmt::format("{} of {} pod(s) ready", ready, active)
                 : active > 0 ? fmt::format("{} pod(s) starting, none ready", active)
                              : "no pods yet";
  } else {
    st.state = active > 0 ? RunState::kRunning : RunState::kPending;
    st.message = active > 0 ? fmt::format("{} pod(s) active", active) : "no pods yet";
  }
  return st;
}

Result<PodFailure> ClassifyPodFailure(const json& pod_list) {
  if (!pod_list.is_object() || !pod_list.contains("items") || !pod_list["items"].is_array()) {
    return InvalidArgument("expected a pod list with an 'items' array", kPodsWhere, "items");
  }
  std::optional<PodFailure> best;
  auto consider = [&](MaybeFailure f) {
    if (f && (!best || Strength(f->kind) > Strength(best->kind))) best = std::move(f);
  };
  const json& items = pod_list["items"];
  for (size_t i = 0; i < items.size(); ++i) {
    const json& pod = items[i];
    const std::string at = fmt::format("items[{}]", i);
    if (!pod.is_object() || !pod.contains("metadata") || !pod["metadata"].is_object() ||
        !pod["metadata"].contains("name") || !pod["metadata"]["name"].is_string()) {
      return InvalidArgument("a pod without metadata.name", kPodsWhere, at + ".metadata.name");
    }
    const std::string name = pod["metadata"]["name"].get<std::string>();
    const json status = pod.value("status", json::object());
    if (!status.is_object())
      return InvalidArgument("expected an object", kPodsWhere, at + ".status");
    ASSIGN_OR_RETURN(MaybeFailure disrupted, PodDisruption(status, name, at + ".status"));
    consider(std::move(disrupted));
    if (!status.contains("containerStatuses")) continue;
    const json& containers = status["containerStatuses"];
    if (!containers.is_array()) {
      return InvalidArgument("expected a list", kPodsWhere, at + ".status.containerStatuses");
    }
    for (size_t j = 0; j < containers.size(); ++j) {
      ASSIGN_OR_RETURN(MaybeFailure failed,
                       ContainerFailure(containers[j], name,
                                        fmt::format("{}.status.containerStatuses[{}]", at, j)));
      consider(std::move(failed));
    }
  }
  if (best) return *best;
  return PodFailure{
      FailureKind::kCrashed, 0,
      items.empty() ? "its pods are gone, so why is unknown" : "no pod reports a failed container"};
}

Result<std::vector<BackendNode>> ParseNodes(const json& node_list, const K8sOptions& options,
                                            const GpuCatalog& catalog) {
  const std::string where = "kubectl get nodes -o json";
  if (!node_list.is_object() || !node_list.contains("items") || !node_list["items"].is_array()) {
    return InvalidArgument("expected a node list with an 'items' array", where, "items");
  }
  std::vector<BackendNode> out;
  const auto& items = node_list["items"];
  for (size_t i = 0; i < items.size(); ++i) {
    const json& item = items[i];
    const std::string at = fmt::format("items[{}]", i);
    if (!item.is_object() || !item.contains("metadata") || !item["metadata"].is_object() ||
        !item["metadata"].contains("name") || !item["metadata"]["name"].is_string()) {
      return InvalidArgument("a node without metadata.name", where, at + ".metadata.name");
    }
    BackendNode node;
    node.name = item["metadata"]["name"].get<std::string>();
    const json status = item.value("status", json::object());
    if (!status.is_object() || !status.contains("allocatable") ||
        !status["allocatable"].is_object() || !status["allocatable"].contains(kGpuResource)) {
      continue;  // no GPUs (or no device plugin) on this node
    }
    const json& q = status["allocatable"][kGpuResource];
    const std::string field = at + ".status.allocatable." + kGpuResource;
    if (q.is_number_integer()) {
      node.gpus = q.get<int64_t>();
    } else if (q.is_string() && !q.get<std::string>().empty() &&
               std::all_of(q.get_ref<const std::string&>().begin(),
                           q.get_ref<const std::string&>().end(),
                           [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
      node.gpus = std::stoll(q.get<std::string>());
    } else {
      return InvalidArgument(
          fmt::format("node '{}': GPU count is not a whole number: {}", node.name, q.dump()), where,
          field);
    }
    if (node.gpus <= 0) continue;
    const json labels = item["metadata"].value("labels", json::object());
    if (labels.is_object() && labels.contains(options.gpu_label_key) &&
        labels[options.gpu_label_key].is_string()) {
      node.gpu =
          GpuTypeFromLabel(labels[options.gpu_label_key].get<std::string>(), options, catalog);
    }
    bool ready = false;
    if (status.contains("conditions") && status["conditions"].is_array()) {
      for (const auto& c : status["conditions"]) {
        if (c.is_object() && StringOr(c, "type") == "Ready")
          ready = StringOr(c, "status") == "True";
      }
    }
    bool unschedulable = false;
    if (item.contains("spec") && item["spec"].is_object()) {
      const json& u = item["spec"].value("unschedulable", json(false));
      unschedulable = u.is_boolean() && u.get<bool>();
    }
    node.up = ready && !unschedulable;
    out.push_back(std::move(node));
  }
  return out;
}

std::string K8sBackend::ManifestPath(const std::string& job_name) const {
  return (std::filesystem::path(opt_.manifest_dir) / (job_name + ".json")).string();
}

std::string K8sBackend::SecretManifestPath(const std::string& job_name) const {
  return (std::filesystem::path(opt_.manifest_dir) / (job_name + ".secret.json")).string();
}

Result<CommandResult> K8sBackend::RunKubectl(const std::vector<std::string>& argv) const {
  return runner_.Run(CommandSpec{argv, "", opt_.kubectl_timeout_s, {}});
}

std::vector<std::string> K8sBackend::Kubectl(const std::string& ns) const {
  std::vector<std::string> argv = {opt_.kubectl};
  if (!opt_.kubeconfig.empty()) {
    argv.push_back("--kubeconfig");
    argv.push_back(opt_.kubeconfig);
  }
  if (!opt_.context.empty()) {
    argv.push_back("--context");
    argv.push_back(opt_.context);
  }
  if (!ns.empty()) {
    argv.push_back("--namespace");
    argv.push_back(ns);
  }
  return argv;
}

Result<std::vector<BackendNode>> K8sBackend::Nodes() {
  if (!opt_.apply) {
    return ::frenzy::Status(
        StatusCode::kFailedPrecondition,
        "k8s backend: no cluster is configured (manifests are only written to '" +
            opt_.manifest_dir +
            "'); configure a kubeconfig or context and enable "
            "apply to discover nodes");
  }
  auto argv = Kubectl("");
  argv.insert(argv.end(), {"get", "nodes", "--output", "json"});
  ASSIGN_OR_RETURN(CommandResult r, RunKubectl(argv));
  if (!r.ok()) return KubectlFailed("kubectl get nodes", r);
  json list = json::parse(r.stdout_text, nullptr, /*allow_exceptions=*/false);
  if (list.is_discarded()) {
    return InvalidArgument("kubectl get nodes printed no JSON", "kubectl get nodes -o json");
  }
  return ParseNodes(list, opt_, catalog_);
}

Result<std::string> K8sBackend::Launch(const LaunchSpec& spec) {
  if (spec.command.empty() && !spec.framework) {
    return InvalidArgument("k8s backend: the run has no command", {}, "command");
  }
  if (spec.framework) RETURN_IF_ERROR(ValidateFrameworkLaunch(*spec.framework));
  if (spec.nodes < 1 || spec.gpus_per_node < 0) {
    return InvalidArgument(fmt::format("k8s backend: bad layout: {} node(s) x {} GPU(s)",
                                       spec.nodes, spec.gpus_per_node),
                           {}, "nodes");
  }
  if (DnsLabel(opt_.namespace_name) != opt_.namespace_name) {
    return InvalidArgument("k8s backend: namespace is not a DNS label: " + opt_.namespace_name, {},
                           "namespace");
  }
  if (spec.gpus_per_node > 0 && !spec.plan.gpu.empty() &&
      GpuProductLabel(spec.plan.gpu, opt_, catalog_).empty()) {
    return InvalidArgument("k8s backend: no " + opt_.gpu_label_key + " value is known for GPU '" +
                               spec.plan.gpu + "'; add it to the GPU label table",
                           {}, "gpu");
  }
  const std::string name = K8sJobName(spec);
  json job = JobManifest(spec, opt_, catalog_);
  json items = json::array();
  if (json files = ConfigMapManifest(spec, opt_); !files.is_null()) items.push_back(files);
  if (spec.nodes > 1) items.push_back(ServiceManifest(spec, opt_));
  items.push_back(job);
  json doc = items.size() == 1 ? job : json{{"apiVersion", "v1"}, {"kind", "List"},
                                            {"items", items}};
  const std::string path = ManifestPath(name);
  const std::string secret_path = SecretManifestPath(name);
  const json secret = SecretManifest(spec, opt_);
  std::error_code ec;
  if (secret.is_null()) {
    std::filesystem::remove(secret_path, ec);  // no older token lingers in the folder
  } else {
    RETURN_IF_ERROR(MakeParentFolder(secret_path));
    RETURN_IF_ERROR(WritePrivateFile(secret_path, secret.dump(2) + "\n"));
  }
  RETURN_IF_ERROR(WriteFile(path, doc.dump(2) + "\n"));
  if (opt_.apply) {
    auto argv = Kubectl(opt_.namespace_name);
    argv.push_back("apply");
    // The Secret first: the pods' containers cannot start before it exists.
    if (!secret.is_null()) argv.insert(argv.end(), {"--filename", secret_path});
    argv.insert(argv.end(), {"--filename", path});
    ASSIGN_OR_RETURN(CommandResult r, RunKubectl(argv));
    if (!r.ok()) return KubectlFailed("kubectl apply -f " + path, r).WithWhere(path);
  }
  return "k8s:" + opt_.namespace_name + "/" + name;
}

Result<RunStatus> K8sBackend::Status(const std::string& handle) {
  ASSIGN_OR_RETURN(Handle h, ParseHandle(handle));
  if (!opt_.apply) {
    const std::string path = ManifestPath(h.name);
    RunStatus st;
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) {
      st.state = RunState::kPending;
      st.message = "manifest written to " + path + " (no cluster configured)";
    } else {
      st.state = RunState::kLost;
      st.message = "no manifest at " + path + " (cancelled, or written elsewhere)";
    }
    return st;
  }
  auto argv = Kubectl(h.ns);
  argv.insert(argv.end(), {"get", "job", h.name, "--output", "json"});
  ASSIGN_OR_RETURN(CommandResult r, RunKubectl(argv));
  if (!r.ok()) {
    if (!r.timed_out && (r.stderr_text.find("NotFound") != std::string::npos ||
                         r.stderr_text.find("not found") != std::string::npos)) {
      RunStatus st;
      st.state = RunState::kLost;
      st.message = "job " + h.name + " not found in namespace " + h.ns;
      return st;
    }
    return KubectlFailed("kubectl get job " + h.name, r);
  }
  json job = json::parse(r.stdout_text, nullptr, /*allow_exceptions=*/false);
  if (job.is_discarded()) {
    return InvalidArgument("kubectl get job printed no JSON", "kubectl get job " + h.name);
  }
  RunStatus st = ParseJobStatus(job);
  if (st.state == RunState::kFailed) RETURN_IF_ERROR(ExplainFailure(h.ns, h.name, st));
  return st;
}

::frenzy::Status K8sBackend::ExplainFailure(const std::string& ns, const std::string& name,
                                            RunStatus& st) const {
  auto argv = Kubectl(ns);
  argv.insert(argv.end(), {"get", "pods", "--selector", std::string(kRunLabel) + "=" + name,
                           "--output", "json"});
  const std::string what = "kubectl get pods --selector " + std::string(kRunLabel) + "=" + name;
  ASSIGN_OR_RETURN(CommandResult r, RunKubectl(argv));
  if (!r.ok()) return KubectlFailed(what, r);
  json pods = json::parse(r.stdout_text, nullptr, /*allow_exceptions=*/false);
  if (pods.is_discarded()) return InvalidArgument("kubectl get pods printed no JSON", what);
  Result<PodFailure> why = ClassifyPodFailure(pods);
  if (!why.ok()) return why.status().WithWhere(what);
  st.failure = why->kind;
  if (why->exit_code != 0) st.exit_code = why->exit_code;
  if (!why->message.empty()) st.message += "; " + why->message;
  return {};
}

::frenzy::Status K8sBackend::Cancel(const std::string& handle) {
  ASSIGN_OR_RETURN(Handle h, ParseHandle(handle));
  if (!opt_.apply) {
    for (const std::string& path : {ManifestPath(h.name), SecretManifestPath(h.name)}) {
      std::error_code ec;
      std::filesystem::remove(path, ec);  // missing: already cancelled (or no Secret)
      if (ec) {
        return ::frenzy::Status(StatusCode::kInternal,
                                "cannot remove the manifest: " + ec.message(), path);
      }
    }
    return {};
  }
  // The Service exists only for multi-node runs, the Secret only for runs with a token, the
  // ConfigMap only for framework launches with files; --ignore-not-found covers the others.
  auto argv = Kubectl(h.ns);
  argv.insert(argv.end(), {"delete", "job,service,secret,configmap", h.name, "--ignore-not-found",
                           "--wait=false"});
  ASSIGN_OR_RETURN(CommandResult r, RunKubectl(argv));
  if (!r.ok()) return KubectlFailed("kubectl delete job " + h.name, r);
  return {};
}

}  // namespace frenzy::server
