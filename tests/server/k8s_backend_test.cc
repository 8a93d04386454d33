// The k8s backend: manifests validated against excerpts of the published Kubernetes OpenAPI
// schema (tests/data/k8s), the pure parsers of kubectl's JSON, and the backend itself without a
// cluster (manifests only) and with a stand-in kubectl script.
#include "backend/k8s_backend.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "fake_runner.h"
#include "hardware/gpu.h"
#include "backend/process.h"
#include "server_test_util.h"

namespace frenzy::server {
namespace {

using nlohmann::json;
using test_util::Exited;
using test_util::FakeRunner;
using test_util::Printed;
namespace fs = std::filesystem;

const GpuCatalog& Catalog() { return GpuCatalog::Default(); }

const std::string kSchemaDir = std::string(FRENZY_SOURCE_DIR) + "/tests/data/k8s";
// The run's token in Spec(): distinctive, so finding it in a manifest's text means it leaked.
constexpr char kToken[] = "tok-3b9d2e71c4-frenzy";
constexpr std::string_view kRefPrefix = "#/components/schemas/";

// ---- A small OpenAPI validator ---------------------------------------------------------------
// Checks what kubectl's strict field validation checks on these types: required fields, JSON
// types (string/integer/number/boolean/object/array), enums, int32 ranges, and no fields the
// schema does not define (an object with "properties" admits nothing else; a map admits keys
// whose values match "additionalProperties"). Follows $ref, allOf and oneOf.
class OpenApiSchemas {
 public:
  void Load(const std::string& path) {
    std::ifstream in(path);
    ASSERT_TRUE(in) << path;
    json doc = json::parse(in);
    for (const auto& [name, schema] : doc.at("components").at("schemas").items()) {
      defs_[name] = schema;
    }
  }
  void Add(const std::string& name, json schema) { defs_[name] = std::move(schema); }
  bool Has(const std::string& name) const { return defs_.count(name) > 0; }

  // Errors of `value` against the named definition, as "path: message"; empty when valid.
  std::vector<std::string> Validate(const json& value, const std::string& definition) const {
    std::vector<std::string> errors;
    Check(value, {{"$ref", std::string(kRefPrefix) + definition}}, "", errors);
    return errors;
  }

  // A manifest against the definition of its apiVersion and kind (a List: each item).
  std::vector<std::string> ValidateManifest(const json& manifest) const {
    if (manifest.value("kind", "") == "List" && manifest.value("apiVersion", "") == "v1") {
      std::vector<std::string> errors;
      const auto& items = manifest.at("items");
      for (size_t i = 0; i < items.size(); ++i) {
        for (const auto& e : ValidateManifest(items[i])) {
          errors.push_back("items[" + std::to_string(i) + "]." + e);
        }
      }
      return errors;
    }
    std::string api = manifest.value("apiVersion", "");
    std::string group, version = api;
    if (size_t slash = api.find('/'); slash != std::string::npos) {
      group = api.substr(0, slash);
      version = api.substr(slash + 1);
    }
    const std::string kind = manifest.value("kind", "");
    for (const auto& [name, schema] : defs_) {
      if (!schema.contains("x-kubernetes-group-version-kind")) continue;
      for (const auto& gvk : schema["x-kubernetes-group-version-kind"]) {
        if (gvk.value("group", "") == group && gvk.value("version", "") == version &&
            gvk.value("kind", "") == kind) {
          return Validate(manifest, name);
        }
      }
    }
    return {"no schema for apiVersion '" + api + "' kind '" + kind + "'"};
  }

 private:
  static bool TypeIs(const json& v, const std::string& type) {
    if (type == "string") return v.is_string();
    if (type == "integer") return v.is_number_integer();
    if (type == "number") return v.is_number();
    if (type == "boolean") return v.is_boolean();
    if (type == "object") return v.is_object();
    if (type == "array") return v.is_array();
    if (type == "null") return v.is_null();
    return false;
  }
  static std::string Join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }

  void Check(const json& v, const json& schema, const std::string& path,
             std::vector<std::string>& errors) const {
    const std::string at = path.empty() ? "(root)" : path;
    if (schema.contains("$ref")) {
      std::string ref = schema["$ref"].get<std::string>();
      if (ref.rfind(kRefPrefix, 0) != 0) {
        errors.push_back(at + ": unsupported $ref " + ref);
        return;
      }
      auto it = defs_.find(ref.substr(kRefPrefix.size()));
      if (it == defs_.end()) {
        errors.push_back(at + ": definition " + ref.substr(kRefPrefix.size()) +
                         " is not in the schema excerpt");
        return;
      }
      Check(v, it->second, path, errors);
    }
    if (schema.contains("allOf")) {
      for (const auto& sub : schema["allOf"]) Check(v, sub, path, errors);
    }
    if (schema.contains("oneOf")) {
      int matches = 0;
      for (const auto& sub : schema["oneOf"]) {
        std::vector<std::string> sub_errors;
        Check(v, sub, path, sub_errors);
        if (sub_errors.empty()) ++matches;
      }
      if (matches != 1) {
        errors.push_back(at + ": " + v.dump() + " matches " + std::to_string(matches) +
                         " of the oneOf alternatives (needs exactly 1)");
      }
    }
    if (schema.contains("type")) {
      const json& t = schema["type"];
      bool ok = false;
      if (t.is_string()) ok = TypeIs(v, t.get<std::string>());
      if (t.is_array()) {
        for (const auto& one : t) ok = ok || TypeIs(v, one.get<std::string>());
      }
      if (!ok) {
        errors.push_back(at + ": expected " + t.dump() + ", got " + v.dump());
        return;
      }
    }
    if (schema.contains("enum")) {
      bool found = false;
      for (const auto& e : schema["enum"]) found = found || e == v;
      if (!found) {
        errors.push_back(at + ": " + v.dump() + " is not one of " + schema["enum"].dump());
      }
    }
    if (schema.value("format", "") == "int32" && v.is_number_integer()) {
      const int64_t n = v.get<int64_t>();
      if (n < INT32_MIN || n > INT32_MAX) errors.push_back(at + ": out of int32 range");
    }
    if (v.is_object()) {
      const bool has_props = schema.contains("properties");
      const json props = schema.value("properties", json::object());
      if (schema.contains("required")) {
        for (const auto& r : schema["required"]) {
          if (!v.contains(r.get<std::string>())) {
            errors.push_back(at + ": missing required field '" + r.get<std::string>() + "'");
          }
        }
      }
      for (const auto& [key, child] : v.items()) {
        if (props.contains(key)) {
          Check(child, props[key], Join(path, key), errors);
        } else if (schema.contains("additionalProperties") &&
                   schema["additionalProperties"].is_object()) {
          Check(child, schema["additionalProperties"], Join(path, key), errors);
        } else if (has_props || schema.value("additionalProperties", json(true)) == json(false)) {
          errors.push_back(at + ": unknown field '" + key + "'");
        }
      }
    }
    if (v.is_array() && schema.contains("items")) {
      for (size_t i = 0; i < v.size(); ++i) {
        Check(v[i], schema["items"], path + "[" + std::to_string(i) + "]", errors);
      }
    }
  }

  std::map<std::string, json> defs_;
};

const OpenApiSchemas& Schemas() {
  static const OpenApiSchemas* schemas = [] {
    auto* s = new OpenApiSchemas();
    s->Load(kSchemaDir + "/apis__batch__v1_openapi.trimmed.json");
    s->Load(kSchemaDir + "/api__v1_openapi.service.trimmed.json");
    return s;
  }();
  return *schemas;
}

std::string Joined(const std::vector<std::string>& errors) {
  std::string out;
  for (const auto& e : errors) out += e + "\n";
  return out;
}

bool AnyContains(const std::vector<std::string>& errors, const std::string& text) {
  for (const auto& e : errors) {
    if (e.find(text) != std::string::npos) return true;
  }
  return false;
}

// ---- fixtures ----------------------------------------------------------------------------------

LaunchSpec Spec(const std::string& job_id, int64_t nodes, int64_t gpus_per_node,
                const std::string& gpu) {
  LaunchSpec s;
  s.job_id = job_id;
  s.name = "gpt2-medium";
  s.plan.gpu = gpu;
  s.plan.gpus = nodes * gpus_per_node;
  s.nodes = nodes;
  s.gpus_per_node = gpus_per_node;
  s.command = {"python3", "examples/train.py", "--steps", "10"};
  s.env = {{"FRENZY_PLAN", R"({"tp":2,"pp":1,"dp":2})"},
           {"FRENZY_REPORT_URL", "http://frenzyd:8470/v1/jobs/" + job_id + "/report"},
           {"FRENZY_TOKEN", kToken}};
  s.workdir = "runs/" + job_id;
  return s;
}

std::map<std::string, json> EnvOf(const json& job) {
  std::map<std::string, json> out;
  for (const auto& e : job["spec"]["template"]["spec"]["containers"][0]["env"]) {
    EXPECT_EQ(out.count(e["name"].get<std::string>()), 0u) << "duplicate env " << e["name"];
    out[e["name"].get<std::string>()] = e.contains("value") ? e["value"] : e["valueFrom"];
  }
  return out;
}

std::vector<std::string> CommandOf(const json& job) {
  return job["spec"]["template"]["spec"]["containers"][0]["command"]
      .get<std::vector<std::string>>();
}

const std::regex kDnsLabel("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$");
const std::regex kLabelValue("^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$");

using test_util::TempDir;

// The permission bits of `path` (-1 when it cannot be stat'ed).
int ModeOf(const fs::path& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return -1;
  return static_cast<int>(st.st_mode & 07777);
}

// Sets the process's umask for a scope: the files holding tokens must be 0600 whatever it is.
class ScopedUmask {
 public:
  explicit ScopedUmask(mode_t mask) : old_(::umask(mask)) {}
  ~ScopedUmask() { ::umask(old_); }

 private:
  mode_t old_;
};

void WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

std::string FileText(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---- the schema and the validator ------------------------------------------------------------

TEST(K8sSchema, ExcerptsHoldTheKindsValidated) {
  for (const char* name :
       {"io.k8s.api.batch.v1.Job", "io.k8s.api.batch.v1.JobSpec", "io.k8s.api.core.v1.PodSpec",
        "io.k8s.api.core.v1.Container", "io.k8s.api.core.v1.EnvVar",
        "io.k8s.api.core.v1.ResourceRequirements", "io.k8s.apimachinery.pkg.api.resource.Quantity",
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "io.k8s.api.core.v1.Service",
        "io.k8s.api.core.v1.ServiceSpec", "io.k8s.api.core.v1.ServicePort",
        "io.k8s.api.core.v1.Secret", "io.k8s.api.core.v1.SecretKeySelector"}) {
    EXPECT_TRUE(Schemas().Has(name)) << name;
  }
}

TEST(K8sSchemaValidator, RejectsMisspeltFieldsWrongTypesAndMissingFields) {
  K8sOptions o;
  const json good = JobManifest(Spec("j-000001", 2, 8, "H100-80GB"), o, Catalog());
  ASSERT_TRUE(Schemas().ValidateManifest(good).empty()) << Joined(Schemas().ValidateManifest(good));

  json misspelt = good;
  misspelt["spec"]["backofLimit"] = misspelt["spec"]["backoffLimit"];
  misspelt["spec"].erase("backoffLimit");
  auto e = Schemas().ValidateManifest(misspelt);
  EXPECT_TRUE(AnyContains(e, "spec: unknown field 'backofLimit'")) << Joined(e);

  json string_count = good;
  string_count["spec"]["parallelism"] = "2";
  e = Schemas().ValidateManifest(string_count);
  EXPECT_TRUE(AnyContains(e, "spec.parallelism: expected \"integer\", got \"2\"")) << Joined(e);

  json deep = good;
  deep["spec"]["template"]["spec"]["containers"][0]["imagePulPolicy"] = "Always";
  e = Schemas().ValidateManifest(deep);
  EXPECT_TRUE(AnyContains(e, "spec.template.spec.containers[0]: unknown field 'imagePulPolicy'"))
      << Joined(e);

  json no_containers = good;
  no_containers["spec"]["template"]["spec"].erase("containers");
  e = Schemas().ValidateManifest(no_containers);
  EXPECT_TRUE(AnyContains(e, "missing required field 'containers'")) << Joined(e);

  json bad_quantity = good;
  bad_quantity["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
              ["nvidia.com/gpu"] = true;
  e = Schemas().ValidateManifest(bad_quantity);
  EXPECT_TRUE(AnyContains(e, "matches 0 of the oneOf")) << Joined(e);

  json bad_label = good;
  bad_label["metadata"]["labels"]["frenzy.io/attempt"] = 3;
  e = Schemas().ValidateManifest(bad_label);
  EXPECT_TRUE(AnyContains(e, "expected \"string\", got 3")) << Joined(e);

  json huge = good;
  huge["spec"]["completions"] = int64_t{1} << 40;
  e = Schemas().ValidateManifest(huge);
  EXPECT_TRUE(AnyContains(e, "spec.completions: out of int32 range")) << Joined(e);

  // A field whose definition was trimmed away is reported, not silently accepted.
  json trimmed = good;
  trimmed["spec"]["template"]["spec"]["affinity"] = json::object();
  e = Schemas().ValidateManifest(trimmed);
  EXPECT_TRUE(AnyContains(e, "io.k8s.api.core.v1.Affinity is not in the schema excerpt"))
      << Joined(e);

  json wrong_kind = good;
  wrong_kind["kind"] = "Jobb";
  EXPECT_FALSE(Schemas().ValidateManifest(wrong_kind).empty());
}

TEST(K8sSchemaValidator, ChecksEnumsWhereTheSchemaGivesThem) {
  OpenApiSchemas s;
  s.Add("test.Policy",
        {{"type", "object"},
         {"properties",
          {{"restartPolicy", {{"type", "string"}, {"enum", {"Never", "OnFailure"}}}}}}});
  EXPECT_TRUE(s.Validate({{"restartPolicy", "Never"}}, "test.Policy").empty());
  auto e = s.Validate({{"restartPolicy", "Always"}}, "test.Policy");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NE(e[0].find("\"Always\" is not one of"), std::string::npos) << e[0];
}

// ---- manifests -----------------------------------------------------------------------------

TEST(K8sManifest, SingleNodeJobValidatesAndCarriesTheLayout) {
  K8sOptions o;
  o.namespace_name = "ml";
  const LaunchSpec spec = Spec("j-000042", 1, 4, "A100-80GB");
  const json job = JobManifest(spec, o, Catalog());
  auto errors = Schemas().ValidateManifest(job);
  EXPECT_TRUE(errors.empty()) << Joined(errors) << job.dump(2);

  EXPECT_EQ(job["metadata"]["name"], "frenzy-j-000042-0");
  EXPECT_EQ(job["metadata"]["namespace"], "ml");
  EXPECT_EQ(job["metadata"]["labels"]["app.kubernetes.io/managed-by"], "frenzy");
  EXPECT_EQ(job["metadata"]["labels"]["frenzy.io/job-id"], "j-000042");
  EXPECT_EQ(job["spec"]["completions"], 1);
  EXPECT_EQ(job["spec"]["parallelism"], 1);
  EXPECT_EQ(job["spec"]["backoffLimit"], 0);
  EXPECT_FALSE(job["spec"].contains("completionMode"));
  const json& pod = job["spec"]["template"]["spec"];
  EXPECT_EQ(pod["restartPolicy"], "Never");
  EXPECT_FALSE(pod.contains("subdomain"));
  EXPECT_EQ(pod["nodeSelector"]["nvidia.com/gpu.product"], "NVIDIA-A100-SXM4-80GB");
  EXPECT_EQ(pod["containers"][0]["image"], "python:3.11");
  EXPECT_EQ(pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], 4);
  // A failed container's status keeps its log's tail, where out-of-memory errors are found.
  EXPECT_EQ(pod["containers"][0]["terminationMessagePolicy"], "FallbackToLogsOnError");
  EXPECT_EQ(job["spec"]["template"]["metadata"]["labels"]["frenzy.io/job-id"], "j-000042");

  EXPECT_EQ(CommandOf(job),
            (std::vector<std::string>{"torchrun", "--nnodes=1", "--nproc_per_node=4",
                                      "--node_rank=$(NODE_RANK)", "--master_addr=$(MASTER_ADDR)",
                                      "--master_port=$(MASTER_PORT)", "examples/train.py",
                                      "--steps", "10"}));
  auto env = EnvOf(job);
  EXPECT_EQ(env["NODE_RANK"], "0");
  EXPECT_EQ(env["WORLD_SIZE"], "4");
  EXPECT_EQ(env["NPROC_PER_NODE"], "4");
  EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
  EXPECT_EQ(env["MASTER_PORT"], "29500");
  EXPECT_EQ(env["FRENZY_PLAN"], R"({"tp":2,"pp":1,"dp":2})");
  EXPECT_EQ(env["FRENZY_TOKEN"],
            json({{"secretKeyRef", {{"name", "frenzy-j-000042-0"}, {"key", "FRENZY_TOKEN"}}}}));
}

TEST(K8sManifest, TheTokenIsInASecretNeverInTheJob) {
  K8sOptions o;
  o.namespace_name = "ml";
  for (int64_t nodes : {1, 2}) {
    const LaunchSpec spec = Spec("j-000042", nodes, 4, "A100-80GB");
    const json job = JobManifest(spec, o, Catalog());
    const json secret = SecretManifest(spec, o);
    EXPECT_EQ(job.dump().find(kToken), std::string::npos) << job.dump(2);
    EXPECT_EQ(ServiceManifest(spec, o).dump().find(kToken), std::string::npos);
    auto errors = Schemas().ValidateManifest(job);
    EXPECT_TRUE(errors.empty()) << Joined(errors) << job.dump(2);

    ASSERT_TRUE(secret.is_object()) << secret.dump();
    errors = Schemas().ValidateManifest(secret);
    EXPECT_TRUE(errors.empty()) << Joined(errors) << secret.dump(2);
    EXPECT_EQ(secret["kind"], "Secret");
    EXPECT_EQ(secret["type"], "Opaque");
    EXPECT_EQ(secret["metadata"]["namespace"], "ml");
    EXPECT_EQ(secret["stringData"], json({{"FRENZY_TOKEN", kToken}}));
    // The container's reference names this Secret and one of its keys.
    const json ref = EnvOf(job)["FRENZY_TOKEN"]["secretKeyRef"];
    EXPECT_EQ(ref["name"], secret["metadata"]["name"]);
    EXPECT_TRUE(secret["stringData"].contains(ref["key"].get<std::string>()));
  }

  // No credentials: no Secret, and nothing refers to one.
  LaunchSpec open = Spec("j-1", 1, 1, "A100-80GB");
  open.env.erase("FRENZY_TOKEN");
  EXPECT_TRUE(SecretManifest(open, o).is_null());
  EXPECT_EQ(JobManifest(open, o, Catalog()).dump().find("secretKeyRef"), std::string::npos);
}

TEST(K8sManifest, TwoNodeRunIsAnIndexedJobWithAHeadlessService) {
  K8sOptions o;
  o.master_port = 23456;
  const LaunchSpec spec = Spec("j-7", 2, 8, "H100-80GB");
  const json job = JobManifest(spec, o, Catalog());
  const json svc = ServiceManifest(spec, o);
  auto errors = Schemas().ValidateManifest(job);
  EXPECT_TRUE(errors.empty()) << Joined(errors) << job.dump(2);
  errors = Schemas().ValidateManifest(svc);
  EXPECT_TRUE(errors.empty()) << Joined(errors) << svc.dump(2);

  const std::string name = job["metadata"]["name"];
  EXPECT_EQ(job["spec"]["completionMode"], "Indexed");
  EXPECT_EQ(job["spec"]["completions"], 2);
  EXPECT_EQ(job["spec"]["parallelism"], 2);
  const json& pod = job["spec"]["template"]["spec"];
  EXPECT_EQ(pod["subdomain"], name);
  EXPECT_EQ(pod["nodeSelector"]["nvidia.com/gpu.product"], "NVIDIA-H100-80GB-HBM3");
  EXPECT_EQ(pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], 8);

  auto env = EnvOf(job);
  EXPECT_EQ(env["NODE_RANK"]["fieldRef"]["fieldPath"],
            "metadata.annotations['batch.kubernetes.io/job-completion-index']");
  EXPECT_EQ(env["WORLD_SIZE"], "16");
  EXPECT_EQ(env["NNODES"], "2");
  EXPECT_EQ(env["MASTER_ADDR"], name + "-0." + name);
  EXPECT_EQ(env["MASTER_PORT"], "23456");
  auto cmd = CommandOf(job);
  EXPECT_EQ(cmd[1], "--nnodes=2");
  EXPECT_EQ(cmd[2], "--nproc_per_node=8");

  // The Service selects exactly the Job's pods and is headless.
  EXPECT_EQ(svc["metadata"]["name"], name);
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_TRUE(svc["spec"]["publishNotReadyAddresses"].get<bool>());
  EXPECT_EQ(svc["spec"]["ports"][0]["port"], 23456);
  for (const auto& [key, value] : svc["spec"]["selector"].items()) {
    EXPECT_EQ(job["spec"]["template"]["metadata"]["labels"][key], value) << key;
  }
}

// A framework's launch: its argv in the container (placeholders as Kubernetes' own $(VAR)
// references, the user's "$(" escaped), its env, and its files in a ConfigMap mounted read-only.
TEST(K8sManifest, AFrameworkLaunchRunsItsArgvWithItsFilesMounted) {
  K8sOptions o;
  LaunchSpec spec = Spec("j-8", 2, 4, "H100-80GB");
  spec.env["FRENZY_JOB_ID"] = "j-8";
  frenzy::Launch l;
  l.framework = Launcher::kDeepSpeed;
  l.nodes = 2;
  l.procs_per_node = 4;
  l.argv = {"torchrun", "--rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT", "--rdzv-id=$FRENZY_JOB_ID",
            "train.py", "--deepspeed_config", "ds_config.json", "--note=$(FRENZY_TOKEN)"};
  l.env = {{"CUDA_DEVICE_MAX_CONNECTIONS", "1"}};
  l.files = {{"ds_config.json", "{\"train_micro_batch_size_per_gpu\": 1}\n"}};
  spec.framework = l;
  const json job = JobManifest(spec, o, Catalog());
  const json files = ConfigMapManifest(spec, o);
  for (const json& m : {job, files}) {
    auto errors = Schemas().ValidateManifest(m);
    EXPECT_TRUE(errors.empty()) << Joined(errors) << m.dump(2);
  }
  EXPECT_EQ(CommandOf(job),
            (std::vector<std::string>{"torchrun", "--rdzv-endpoint=$(MASTER_ADDR):$(MASTER_PORT)",
                                      "--rdzv-id=$(FRENZY_JOB_ID)", "train.py",
                                      "--deepspeed_config", "/etc/frenzy/launch/ds_config.json",
                                      "--note=$$(FRENZY_TOKEN)"}));
  auto env = EnvOf(job);
  EXPECT_EQ(env["CUDA_DEVICE_MAX_CONNECTIONS"], "1");
  EXPECT_EQ(env["FRENZY_JOB_ID"], "j-8");
  const std::string name = job["metadata"]["name"];
  EXPECT_EQ(files["metadata"]["name"], name);
  EXPECT_EQ(files["data"]["ds_config.json"], "{\"train_micro_batch_size_per_gpu\": 1}\n");
  const json& pod = job["spec"]["template"]["spec"];
  EXPECT_EQ(pod["volumes"][0]["configMap"]["name"], name);
  const json& mount = pod["containers"][0]["volumeMounts"][0];
  EXPECT_EQ(mount["name"], pod["volumes"][0]["name"]);
  EXPECT_EQ(mount["mountPath"], "/etc/frenzy/launch");
  EXPECT_TRUE(mount["readOnly"].get<bool>());
  // No files, no ConfigMap.
  spec.framework->files.clear();
  EXPECT_TRUE(ConfigMapManifest(spec, o).is_null());
  EXPECT_FALSE(JobManifest(spec, o, Catalog())["spec"]["template"]["spec"].contains("volumes"));
}

TEST(K8sManifest, OddJobIdsGiveValidDistinctNames) {
  K8sOptions o;
  std::vector<std::string> ids = {"J_000042/Retry#2", "", "---", "UPPER", "a.b.c"};
  ids.insert(ids.end(), {"j\xc3\xb6-x", "j-1", "J_1", "j_1", "0starts-with-digit"});
  ids.insert(ids.end(), {std::string(200, 'z'), std::string(200, 'z') + "1"});
  std::set<std::string> names;
  for (const auto& id : ids) {
    for (int64_t nodes : {1, 3}) {
      LaunchSpec spec = Spec(id, nodes, 2, "A100-80GB");
      spec.attempt = 12;
      const json job = JobManifest(spec, o, Catalog());
      const std::string name = job["metadata"]["name"];
      EXPECT_TRUE(std::regex_match(name, kDnsLabel)) << "'" << id << "' -> " << name;
      EXPECT_LE(name.size() + 7, 63u) << name;  // pod hostnames: <name>-<index up to 6 digits>
      EXPECT_EQ(name.rfind("frenzy-", 0), 0u) << name;  // starts with a letter (Service names)
      const std::string label = job["metadata"]["labels"]["frenzy.io/job-id"];
      EXPECT_TRUE(std::regex_match(label, kLabelValue)) << "'" << id << "' -> " << label;
      EXPECT_LE(label.size(), 63u);
      EXPECT_EQ(job["metadata"]["annotations"]["frenzy.io/job-id"], id);
      auto errors = Schemas().ValidateManifest(job);
      EXPECT_TRUE(errors.empty()) << id << "\n" << Joined(errors);
      if (nodes > 1) {
        errors = Schemas().ValidateManifest(ServiceManifest(spec, o));
        EXPECT_TRUE(errors.empty()) << id << "\n" << Joined(errors);
      }
      if (nodes == 1) names.insert(name);
    }
  }
  EXPECT_EQ(names.size(), ids.size()) << "two job ids share a Kubernetes name";
  EXPECT_EQ(K8sJobName(Spec("j-000042", 1, 1, "")), "frenzy-j-000042-0");
}

TEST(K8sManifest, DnsLabelSanitises) {
  EXPECT_EQ(DnsLabel("Hello_World!"), "hello-world");
  EXPECT_EQ(DnsLabel("--a--b--"), "a-b");
  EXPECT_EQ(DnsLabel(""), "x");
  std::string long_label = DnsLabel(std::string(100, 'a'), 20);
  EXPECT_EQ(long_label.size(), 20u);
  EXPECT_TRUE(std::regex_match(long_label, kDnsLabel)) << long_label;
  EXPECT_NE(DnsLabel(std::string(100, 'a'), 20), DnsLabel(std::string(101, 'a'), 20));
}

TEST(K8sManifest, UserTextIsNotExpandedByKubernetes) {
  K8sOptions o;
  LaunchSpec spec = Spec("j-1", 1, 1, "A100-80GB");
  spec.command = {"python3", "train.py", "--out=$(HOME)/x"};
  spec.env["FRENZY_NOTE"] = "cost $(5) or $HOME";
  spec.env["MASTER_PORT"] = "1";  // the launcher's own variables win, no duplicate entry
  const json job = JobManifest(spec, o, Catalog());
  EXPECT_EQ(CommandOf(job).back(), "--out=$$(HOME)/x");
  auto env = EnvOf(job);
  EXPECT_EQ(env["FRENZY_NOTE"], "cost $$(5) or $HOME");
  EXPECT_EQ(env["MASTER_PORT"], "29500");
}

TEST(K8sManifest, LaunchCommandForms) {
  K8sOptions o;
  auto tail = [&](std::vector<std::string> command) {
    LaunchSpec spec = Spec("j-1", 1, 2, "A100-80GB");
    spec.command = std::move(command);
    auto cmd = CommandOf(JobManifest(spec, o, Catalog()));
    return std::vector<std::string>(cmd.begin() + 6, cmd.end());
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(tail({"python3", "-m", "pkg.train", "--x"}), (V{"-m", "pkg.train", "--x"}));
  EXPECT_EQ(tail({"/usr/bin/python3.11", "train.py"}), (V{"train.py"}));
  EXPECT_EQ(tail({"train.py", "--a"}), (V{"train.py", "--a"}));
  EXPECT_EQ(tail({"./train.sh", "a"}), (V{"--no_python", "./train.sh", "a"}));
  EXPECT_EQ(tail({"python3", "-u", "train.py"}), (V{"--no_python", "python3", "-u", "train.py"}));
}

TEST(K8sManifest, GpuLabelsFollowTheTableAndCatalogAliases) {
  K8sOptions o;
  EXPECT_EQ(GpuProductLabel("V100-32GB", o, Catalog()), "Tesla-V100-SXM2-32GB");
  EXPECT_EQ(GpuProductLabel("RTX-3090", o, Catalog()), "NVIDIA-GeForce-RTX-3090");
  EXPECT_EQ(GpuProductLabel("a100", o, Catalog()), "NVIDIA-A100-SXM4-80GB");  // alias -> A100-80GB
  EXPECT_EQ(GpuProductLabel("MI300X", o, Catalog()), "");
  o.gpu_label_key = "example.com/gpu";
  o.gpu_labels = {{"A100-80GB", "a100-80g"}};
  const json job = JobManifest(Spec("j-1", 1, 1, "A100-80GB"), o, Catalog());
  EXPECT_EQ(job["spec"]["template"]["spec"]["nodeSelector"],
            json({{"example.com/gpu", "a100-80g"}}));
  // Every catalog type in the default table exists in the catalog.
  for (const auto& [gpu, label] : DefaultGpuProductLabels()) {
    EXPECT_TRUE(std::regex_match(label, kLabelValue)) << label;
    EXPECT_EQ(GpuProductLabel(gpu, K8sOptions{}, Catalog()), label);
  }
}

// ---- parsing kubectl's JSON ------------------------------------------------------------------

json JobWithStatus(json status) {
  return {{"apiVersion", "batch/v1"},
          {"kind", "Job"},
          {"metadata", {{"name", "frenzy-j-1-0"}}},
          {"status", std::move(status)}};
}

TEST(K8sStatus, ParsesJobConditionsAndCounts) {
  RunStatus s =
      ParseJobStatus(JobWithStatus({{"succeeded", 2},
                                    {"conditions",
                                     {{{"type", "SuccessCriteriaMet"}, {"status", "True"}},
                                      {{"type", "Complete"}, {"status", "True"}}}}}));
  EXPECT_EQ(s.state, RunState::kSucceeded);

  s = ParseJobStatus(
      JobWithStatus({{"failed", 1},
                     {"conditions",
                      {{{"type", "Failed"},
                        {"status", "True"},
                        {"reason", "BackoffLimitExceeded"},
                        {"message", "Job has reached the specified backoff limit"}}}}}));
  EXPECT_EQ(s.state, RunState::kFailed);
  EXPECT_EQ(s.failure, FailureKind::kCrashed);  // until the pods say more
  EXPECT_NE(s.exit_code, 0);
  EXPECT_EQ(s.message, "BackoffLimitExceeded: Job has reached the specified backoff limit");

  s = ParseJobStatus(JobWithStatus({{"active", 2}, {"ready", 2}}));
  EXPECT_EQ(s.state, RunState::kRunning);
  EXPECT_EQ(s.message, "2 of 2 pod(s) ready");

  s = ParseJobStatus(JobWithStatus({{"active", 2}, {"ready", 0}}));
  EXPECT_EQ(s.state, RunState::kPending);

  s = ParseJobStatus(JobWithStatus({{"active", 1}}));  // servers without status.ready
  EXPECT_EQ(s.state, RunState::kRunning);

  s = ParseJobStatus(JobWithStatus(json::object()));
  EXPECT_EQ(s.state, RunState::kPending);

  s = ParseJobStatus(JobWithStatus({{"conditions",
                                     {{{"type", "Complete"}, {"status", "False"}},
                                      {{"type", "Suspended"}, {"status", "True"}}}}}));
  EXPECT_EQ(s.state, RunState::kPending);
  EXPECT_EQ(s.message, "the job is suspended");

  json deleting = JobWithStatus({{"active", 1}, {"ready", 1}});
  deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  EXPECT_EQ(ParseJobStatus(deleting).state, RunState::kCancelled);
}

const char* kNodesJson = R"({
  "apiVersion": "v1", "kind": "List",
  "items": [
    {"metadata": {"name": "gpu-a", "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                                              "nvidia.com/gpu.count": "8"}},
     "spec": {},
     "status": {"allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"},
                "conditions": [{"type": "MemoryPressure", "status": "False"},
                               {"type": "Ready", "status": "True"}]}},
    {"metadata": {"name": "cpu-only", "labels": {}},
     "status": {"allocatable": {"cpu": "8"},
                "conditions": [{"type": "Ready", "status": "True"}]}},
    {"metadata": {"name": "gpu-b",
                  "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED"}},
     "spec": {"unschedulable": true},
     "status": {"allocatable": {"nvidia.com/gpu": 4},
                "conditions": [{"type": "Ready", "status": "True"}]}},
    {"metadata": {"name": "gpu-c", "labels": {"nvidia.com/gpu.product": "NVIDIA-Z900"}},
     "status": {"allocatable": {"nvidia.com/gpu": "8"},
                "conditions": [{"type": "Ready", "status": "False"}]}},
    {"metadata": {"name": "gpu-d",
                  "labels": {"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-3090"}},
     "status": {"allocatable": {"nvidia.com/gpu": "0"}}}
  ]
})";

TEST(K8sNodes, ParsesAllocatableGpusAndProductLabels) {
  auto nodes = ParseNodes(json::parse(kNodesJson), K8sOptions{}, Catalog());
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 3u);
  EXPECT_EQ((*nodes)[0].name, "gpu-a");
  EXPECT_EQ((*nodes)[0].gpu, "A100-80GB");
  EXPECT_EQ((*nodes)[0].gpus, 8);
  EXPECT_TRUE((*nodes)[0].up);
  EXPECT_EQ((*nodes)[1].name, "gpu-b");
  EXPECT_EQ((*nodes)[1].gpu, "H100-80GB");  // time-sliced: "-SHARED" dropped
  EXPECT_EQ((*nodes)[1].gpus, 4);
  EXPECT_FALSE((*nodes)[1].up);  // cordoned
  EXPECT_EQ((*nodes)[2].name, "gpu-c");
  EXPECT_EQ((*nodes)[2].gpu, "NVIDIA-Z900");  // unknown to the catalog: the label as is
  EXPECT_FALSE((*nodes)[2].up);               // not Ready
}

TEST(K8sNodes, ErrorsNameTheNodeAndField) {
  json bad = json::parse(kNodesJson);
  bad["items"][0]["status"]["allocatable"]["nvidia.com/gpu"] = "8x";
  auto nodes = ParseNodes(bad, K8sOptions{}, Catalog());
  ASSERT_FALSE(nodes.ok());
  EXPECT_NE(nodes.status().message().find("gpu-a"), std::string::npos);
  EXPECT_EQ(nodes.status().field(), "items[0].status.allocatable.nvidia.com/gpu");
  EXPECT_FALSE(ParseNodes(json::object(), K8sOptions{}, Catalog()).ok());
  EXPECT_FALSE(
      ParseNodes(json::parse(R"({"items": [{"metadata": {}}]})"), K8sOptions{}, Catalog()).ok());
}

// ---- the backend without a cluster -----------------------------------------------------------

TEST(K8sBackendTest, WithoutAClusterWritesManifestsOnly) {
  TempDir dir;
  K8sOptions o;
  o.manifest_dir = (dir.path() / "manifests").string();
  K8sBackend backend(o, Catalog());
  EXPECT_EQ(backend.name(), "k8s");

  auto handle = backend.Launch(Spec("j-000042", 1, 4, "A100-80GB"));
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  EXPECT_EQ(*handle, "k8s:default/frenzy-j-000042-0");
  const std::string path = backend.ManifestPath("frenzy-j-000042-0");
  ASSERT_TRUE(fs::exists(path));
  json written = json::parse(FileText(path));
  EXPECT_EQ(written["kind"], "Job");
  EXPECT_TRUE(Schemas().ValidateManifest(written).empty());
  EXPECT_EQ(FileText(path).find(kToken), std::string::npos);
  const std::string secret_path = backend.SecretManifestPath("frenzy-j-000042-0");
  json secret = json::parse(FileText(secret_path));
  EXPECT_EQ(secret["kind"], "Secret");
  EXPECT_EQ(secret["stringData"]["FRENZY_TOKEN"], kToken);
  EXPECT_EQ(ModeOf(secret_path), 0600);

  auto st = backend.Status(*handle);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->state, RunState::kPending);
  EXPECT_EQ(st->message, "manifest written to " + path + " (no cluster configured)");

  auto nodes = backend.Nodes();
  ASSERT_FALSE(nodes.ok());
  EXPECT_EQ(nodes.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(nodes.status().message().find("no cluster is configured"), std::string::npos);

  EXPECT_TRUE(backend.Cancel(*handle).ok());
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(secret_path));
  EXPECT_TRUE(backend.Cancel(*handle).ok());  // twice: nothing left to remove
  st = backend.Status(*handle);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state, RunState::kLost);

  // Several nodes: one file, a List of the Service and the Job, both valid.
  auto multi = backend.Launch(Spec("j-000043", 2, 8, "H100-80GB"));
  ASSERT_TRUE(multi.ok()) << multi.status().ToString();
  json list = json::parse(FileText(backend.ManifestPath("frenzy-j-000043-0")));
  EXPECT_EQ(list["kind"], "List");
  ASSERT_EQ(list["items"].size(), 2u);
  EXPECT_EQ(list["items"][0]["kind"], "Service");
  EXPECT_EQ(list["items"][1]["kind"], "Job");
  auto errors = Schemas().ValidateManifest(list);
  EXPECT_TRUE(errors.empty()) << Joined(errors);
  EXPECT_EQ(FileText(backend.ManifestPath("frenzy-j-000043-0")).find(kToken), std::string::npos);
  errors = Schemas().ValidateManifest(
      json::parse(FileText(backend.SecretManifestPath("frenzy-j-000043-0"))));
  EXPECT_TRUE(errors.empty()) << Joined(errors);
}

TEST(K8sBackendTest, SecretManifestsAreOwnerOnlyWhateverTheUmask) {
  TempDir dir;
  K8sOptions o;
  o.manifest_dir = (dir.path() / "manifests").string();
  K8sBackend backend(o, Catalog());
  const std::string secret_path = backend.SecretManifestPath("frenzy-j-5-0");
  fs::create_directories(o.manifest_dir);
  // An older file of the same name, readable by all, and a link planted in its place later:
  // neither keeps the token where others can read it, nor is written through.
  WriteText(secret_path, "old");
  fs::permissions(secret_path, fs::perms::all);
  {
    ScopedUmask open_umask(0);
    ASSERT_TRUE(backend.Launch(Spec("j-5", 1, 1, "A100-80GB")).ok());
  }
  EXPECT_EQ(ModeOf(secret_path), 0600);
  EXPECT_NE(FileText(secret_path).find(kToken), std::string::npos);

  const fs::path victim = dir.path() / "victim";
  WriteText(victim, "keep");
  fs::remove(secret_path);
  fs::create_symlink(victim, secret_path);
  ASSERT_TRUE(backend.Launch(Spec("j-5", 1, 1, "A100-80GB")).ok());
  EXPECT_EQ(FileText(victim), "keep");
  EXPECT_FALSE(fs::is_symlink(secret_path));
  EXPECT_EQ(ModeOf(secret_path), 0600);

  // Only the two manifests in the folder: no temporary file left behind.
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(o.manifest_dir)) {
    names.insert(e.path().filename().string());
  }
  EXPECT_EQ(names, (std::set<std::string>{"frenzy-j-5-0.json", "frenzy-j-5-0.secret.json"}));
}

TEST(K8sBackendTest, LaunchRejectsWhatCannotRun) {
  TempDir dir;
  K8sOptions o;
  o.manifest_dir = dir.str();
  K8sBackend backend(o, Catalog());
  LaunchSpec no_command = Spec("j-1", 1, 1, "A100-80GB");
  no_command.command.clear();
  EXPECT_EQ(backend.Launch(no_command).status().code(), StatusCode::kInvalidArgument);

  auto unknown = backend.Launch(Spec("j-1", 1, 1, "Z9000"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("Z9000"), std::string::npos);

  K8sOptions bad_ns = o;
  bad_ns.namespace_name = "Not_A_Namespace";
  EXPECT_FALSE(K8sBackend(bad_ns, Catalog()).Launch(Spec("j-1", 1, 1, "A100-80GB")).ok());

  for (const char* h : {"slurm:12", "k8s:", "k8s:ns", "k8s:/x", "k8s:ns/", "k8s:NS/x"}) {
    EXPECT_FALSE(backend.Status(h).ok()) << h;
    EXPECT_FALSE(backend.Cancel(h).ok()) << h;
  }
}

// ---- why pods failed --------------------------------------------------------------------------

// A pod of run frenzy-j-1-0 with `status`, shaped like `kubectl get pods -o json` items.
json Pod(const std::string& name, json status) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"labels", {{"frenzy.io/run", "frenzy-j-1-0"}}}}},
          {"status", std::move(status)}};
}

// A pod whose trainer container terminated with `exit_code` and `reason` (and `message`, the
// termination message: the log's tail under FallbackToLogsOnError).
json TerminatedPod(const std::string& name, int exit_code, const std::string& reason,
                   const std::string& message = "") {
  json terminated = {{"exitCode", exit_code}, {"reason", reason}};
  if (!message.empty()) terminated["message"] = message;
  return Pod(name,
             {{"phase", "Failed"},
              {"containerStatuses", json::array({{{"name", "trainer"},
                                                  {"ready", false},
                                                  {"restartCount", 0},
                                                  {"state", {{"terminated", terminated}}}}})}});
}

// A vector, not a json: `json{pod}` is an array under one compiler and the pod under another.
json PodList(const std::vector<json>& items) {
  json list = json::array();
  for (const json& item : items) list.push_back(item);
  return {{"apiVersion", "v1"}, {"kind", "List"}, {"items", list}};
}

TEST(K8sPodFailure, ClassifiesByContainerAndPodReasons) {
  struct Case {
    const char* name;
    json pods;
    FailureKind kind;
    int exit_code;
    const char* in_message;
  };
  const json evicted = Pod("p-evicted", {{"phase", "Failed"},
                                         {"reason", "Evicted"},
                                         {"message", "The node was low on resource: memory."}});
  const json taint_deleted = Pod(
      "p-gone", {{"phase", "Failed"},
                 {"conditions",
                  json::array({{{"type", "DisruptionTarget"},
                                {"status", "True"},
                                {"reason", "DeletionByTaintManager"},
                                {"message", "Taint manager: deleting due to NoExecute taint"}}})}});
  const json peer = TerminatedPod("p-peer", 1, "Error", "RuntimeError: NCCL communicator aborted");
  const Case cases[] = {
      {"OOMKilled", PodList({TerminatedPod("p0", 137, "OOMKilled")}), FailureKind::kOutOfMemory,
       137, "pod p0: container trainer OOMKilled (exit 137)"},
      {"CUDA out of memory in the termination message",
       PodList({TerminatedPod("p0", 1, "Error",
                              "Traceback (most recent call last):\n  File \"train.py\"\n"
                              "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 "
                              "GiB\n")}),
       FailureKind::kOutOfMemory, 1, "torch.OutOfMemoryError: CUDA out of memory"},
      {"a plain crash", PodList({TerminatedPod("p0", 2, "Error", "ValueError: bad config")}),
       FailureKind::kCrashed, 2, "pod p0: container trainer exited with code 2 (Error)"},
      {"evicted", PodList({evicted}), FailureKind::kNodeLost, 0,
       "pod p-evicted: Evicted: The node was low on resource: memory."},
      {"taken by the taint manager", PodList({taint_deleted}), FailureKind::kNodeLost, 0,
       "pod p-gone: disrupted (DeletionByTaintManager)"},
      {"node lost outranks the peer it broke", PodList({peer, taint_deleted}),
       FailureKind::kNodeLost, 0, "p-gone"},
      {"out of memory outranks the rest",
       PodList({peer, evicted, TerminatedPod("p3", 137, "OOMKilled")}), FailureKind::kOutOfMemory,
       137, "pod p3"},
      {"a container that succeeded tells nothing",
       PodList({TerminatedPod("p0", 0, "Completed"), peer}), FailureKind::kCrashed, 1, "p-peer"},
      {"no pods left", PodList({}), FailureKind::kCrashed, 0, "pods are gone"},
      {"pods still pending", PodList({Pod("p0", {{"phase", "Pending"}})}), FailureKind::kCrashed, 0,
       "no pod reports a failed container"},
  };
  for (const Case& c : cases) {
    auto r = ClassifyPodFailure(c.pods);
    ASSERT_TRUE(r.ok()) << c.name << ": " << r.status().ToString();
    EXPECT_EQ(r->kind, c.kind) << c.name << ": " << FailureKindName(r->kind);
    EXPECT_EQ(r->exit_code, c.exit_code) << c.name;
    EXPECT_NE(r->message.find(c.in_message), std::string::npos) << c.name << ": " << r->message;
  }
}

TEST(K8sPodFailure, MalformedPodListsAreErrorsNamingTheField) {
  struct Case {
    json pods;
    const char* field;
  };
  json bad_code = TerminatedPod("p0", 1, "Error");
  bad_code["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] = "137";
  json huge_code = TerminatedPod("p0", 1, "Error");
  huge_code["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] = 1LL << 40;
  json bad_reason = TerminatedPod("p0", 1, "Error");
  bad_reason["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] = 7;
  json bad_statuses = Pod("p0", {{"containerStatuses", "trainer"}});
  json no_name = Pod("p0", json::object());
  no_name["metadata"].erase("name");
  const Case cases[] = {
      {json::array(), "items"},
      {json::object(), "items"},
      {PodList({no_name}), "items[0].metadata.name"},
      {PodList({Pod("p0", "Failed")}), "items[0].status"},
      {PodList({bad_statuses}), "items[0].status.containerStatuses"},
      {PodList({bad_code}), "items[0].status.containerStatuses[0].state.terminated.exitCode"},
      {PodList({huge_code}), "items[0].status.containerStatuses[0].state.terminated.exitCode"},
      {PodList({bad_reason}), "items[0].status.containerStatuses[0].state.terminated.reason"},
  };
  for (const Case& c : cases) {
    auto r = ClassifyPodFailure(c.pods);
    ASSERT_FALSE(r.ok()) << c.pods.dump();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().field(), c.field) << r.status().ToString();
  }
}

// ---- the backend with a cluster, through a FakeRunner for kubectl ----------------------------

class K8sClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    o_.apply = true;
    o_.kubectl = "/opt/k8s/kubectl";
    o_.kubeconfig = (dir_.path() / "kubeconfig").string();
    o_.context = "lab";
    o_.namespace_name = "training";
    o_.manifest_dir = (dir_.path() / "manifests").string();
    o_.kubectl_timeout_s = 9;
  }
  // argv = kubectl's common prefix + `rest`; `ns` adds --namespace.
  std::vector<std::string> Argv(bool ns, std::vector<std::string> rest) const {
    std::vector<std::string> argv = {o_.kubectl, "--kubeconfig", o_.kubeconfig, "--context", "lab"};
    if (ns) argv.insert(argv.end(), {"--namespace", "training"});
    argv.insert(argv.end(), rest.begin(), rest.end());
    return argv;
  }
  static CommandResult NotFoundAnswer() {
    return Exited(1, "", "Error from server (NotFound): jobs.batch \"frenzy-j-9-0\" not found\n");
  }
  static CommandResult FailedJob() {
    return Printed(JobWithStatus({{"failed", 1},
                                  {"conditions",
                                   {{{"type", "Failed"},
                                     {"status", "True"},
                                     {"reason", "BackoffLimitExceeded"},
                                     {"message", "Job has reached the specified backoff limit"}}}}})
                       .dump());
  }

  TempDir dir_;
  K8sOptions o_;
  FakeRunner runner_;
};

TEST_F(K8sClusterTest, AppliesQueriesAndDeletesWithTheExactArguments) {
  K8sBackend backend(o_, Catalog(), runner_);
  runner_.Push(Printed("secret/frenzy-j-9-0 created\njob.batch/frenzy-j-9-0 created\n"));
  auto handle = backend.Launch(Spec("j-9", 2, 8, "A100-80GB"));
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  EXPECT_EQ(*handle, "k8s:training/frenzy-j-9-0");
  const std::string manifest = backend.ManifestPath("frenzy-j-9-0");
  EXPECT_TRUE(fs::exists(manifest));

  // Not created yet (or deleted behind our back): lost.
  runner_.Push(NotFoundAnswer());
  auto st = backend.Status(*handle);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->state, RunState::kLost);

  runner_.Push(Printed(JobWithStatus({{"active", 2}, {"ready", 2}}).dump()));
  st = backend.Status(*handle);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->state, RunState::kRunning);

  runner_.Push(Printed(kNodesJson));
  auto nodes = backend.Nodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  EXPECT_EQ(nodes->size(), 3u);

  runner_.Push(Printed("job.batch \"frenzy-j-9-0\" deleted\n"));
  EXPECT_TRUE(backend.Cancel(*handle).ok());

  const std::vector<CommandSpec> calls = runner_.calls();
  ASSERT_EQ(calls.size(), 5u);
  EXPECT_EQ(calls[0].argv,
            Argv(true, {"apply", "--filename", backend.SecretManifestPath("frenzy-j-9-0"),
                        "--filename", manifest}));
  EXPECT_EQ(calls[1].argv, Argv(true, {"get", "job", "frenzy-j-9-0", "--output", "json"}));
  EXPECT_EQ(calls[2].argv, calls[1].argv);
  EXPECT_EQ(calls[3].argv, Argv(false, {"get", "nodes", "--output", "json"}));
  EXPECT_EQ(calls[4].argv, Argv(true, {"delete", "job,service,secret,configmap", "frenzy-j-9-0",
                                       "--ignore-not-found", "--wait=false"}));
  for (const CommandSpec& c : calls) {
    EXPECT_EQ(c.timeout_s, 9);
    EXPECT_EQ(c.stdin_text, "");
    EXPECT_TRUE(c.extra_env.empty());
  }
}

TEST_F(K8sClusterTest, AFailedRunIsExplainedByItsPods) {
  K8sBackend backend(o_, Catalog(), runner_);
  runner_.Push(FailedJob());
  runner_.Push(Printed(PodList({TerminatedPod("frenzy-j-9-0-0-x2b9k", 1, "Error",
                                              "RuntimeError: NCCL error: remote process exited"),
                                TerminatedPod("frenzy-j-9-0-1-q8m4z", 137, "OOMKilled")})
                           .dump()));
  auto st = backend.Status("k8s:training/frenzy-j-9-0");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->state, RunState::kFailed);
  EXPECT_EQ(st->failure, FailureKind::kOutOfMemory);
  EXPECT_EQ(st->exit_code, 137);
  EXPECT_EQ(st->message,
            "BackoffLimitExceeded: Job has reached the specified backoff limit; "
            "pod frenzy-j-9-0-1-q8m4z: container trainer OOMKilled (exit 137)");
  const auto argvs = runner_.argvs();
  ASSERT_EQ(argvs.size(), 2u);
  EXPECT_EQ(argvs[1], Argv(true, {"get", "pods", "--selector", "frenzy.io/run=frenzy-j-9-0",
                                  "--output", "json"}));

  // The pods cannot be listed: an error, not a guess (the daemon asks again).
  runner_.Push(FailedJob());
  runner_.Push(Exited(1, "", "error: You must be logged in to the server (Unauthorized)\n"));
  auto unknown = backend.Status("k8s:training/frenzy-j-9-0");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("kubectl get pods"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("Unauthorized"), std::string::npos);

  runner_.Push(FailedJob());
  runner_.Push(Printed("not json"));
  EXPECT_EQ(backend.Status("k8s:training/frenzy-j-9-0").status().code(),
            StatusCode::kInvalidArgument);

  // A run that did not fail asks nothing about its pods.
  runner_.Push(Printed(JobWithStatus({{"succeeded", 1},
                                      {"conditions", {{{"type", "Complete"}, {"status", "True"}}}}})
                           .dump()));
  auto done = backend.Status("k8s:training/frenzy-j-9-0");
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->state, RunState::kSucceeded);
  EXPECT_EQ(done->failure, FailureKind::kNone);
  EXPECT_EQ(runner_.calls().size(), 7u);
}

TEST_F(K8sClusterTest, KubectlFailuresAreErrorsWithItsMessage) {
  K8sBackend backend(o_, Catalog(), runner_);
  runner_.SetHandler([](const CommandSpec&) {
    return Exited(1, "", "error: You must be logged in to the server\n");
  });
  auto handle = backend.Launch(Spec("j-1", 1, 1, "A100-80GB"));
  ASSERT_FALSE(handle.ok());
  EXPECT_NE(handle.status().message().find("You must be logged in"), std::string::npos)
      << handle.status().ToString();
  auto st = backend.Status("k8s:default/frenzy-j-1-0");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("You must be logged in"), std::string::npos);
  EXPECT_FALSE(backend.Nodes().ok());
  EXPECT_FALSE(backend.Cancel("k8s:default/frenzy-j-1-0").ok());

  // Answers that are not the JSON asked for are errors too.
  runner_.SetHandler([](const CommandSpec&) { return Printed("<html>gateway</html>"); });
  EXPECT_EQ(backend.Status("k8s:default/frenzy-j-1-0").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(backend.Nodes().status().code(), StatusCode::kInvalidArgument);
}

// The real runner: a kubectl that does not exist is NotFound.
TEST_F(K8sClusterTest, MissingKubectlIsNotFound) {
  o_.kubectl = (dir_.path() / "no-such-kubectl").string();
  EXPECT_EQ(K8sBackend(o_, Catalog(), SystemRunner()).Nodes().status().code(),
            StatusCode::kNotFound);
}

}  // namespace
}  // namespace frenzy::server
