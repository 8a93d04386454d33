#include "server/runtime_state.h"

#include <cmath>

namespace frenzy::server {
namespace {

using nlohmann::json;

Result<double> Number(const json& j, const char* key, double fallback) {
  if (!j.contains(key)) return fallback;
  if (!j[key].is_number() || !std::isfinite(j[key].get<double>())) {
    return InvalidArgument("must be a finite number", {}, key);
  }
  return j[key].get<double>();
}

Result<int64_t> Integer(const json& j, const char* key) {
  if (!j.contains(key)) return int64_t{0};
  if (!j[key].is_number_integer()) return InvalidArgument("must be an integer", {}, key);
  return j[key].get<int64_t>();
}

// Speed factors per GPU type: at most 256 types, each finite and in [0, kMaxSpeedRatio] (0: not
// known; the learner never keeps more, runtime/speed.h).
Result<std::vector<double>> Factors(const json& j, const std::string& field) {
  if (!j.is_array() || j.size() > 256) {
    return InvalidArgument("must be an array of at most 256 speed factors", {}, field);
  }
  std::vector<double> out;
  for (const json& f : j) {
    if (!f.is_number() || !std::isfinite(f.get<double>()) || f.get<double>() < 0 ||
        f.get<double>() > runtime::kMaxSpeedRatio) {
      return InvalidArgument("must hold numbers in [0, 100]", {}, field);
    }
    out.push_back(f.get<double>());
  }
  return out;
}

json MemoryToJson(const runtime::JobMemory& m) {
  json samples = json::array();
  for (const auto& [p, r] : m.samples) samples.push_back({p, r});
  json j = {{"class", m.job_class},     {"samples", samples},
            {"ratio", m.ratio},         {"slope", m.slope},
            {"peak_bytes", m.peak_bytes}, {"predicted_bytes", m.predicted_bytes},
            {"capacity_bytes", m.capacity_bytes}, {"progress", m.progress},
            {"reports", m.reports},     {"ooms", m.ooms}};
  j["floor"] = m.floor ? json(*m.floor) : json(nullptr);
  return j;
}

Result<runtime::JobMemory> MemoryFromJson(const json& j) {
  if (!j.is_object()) return InvalidArgument("must be an object", {}, "memory");
  runtime::JobMemory m;
  if (j.contains("class")) {
    if (!j["class"].is_string()) return InvalidArgument("must be a string", {}, "memory.class");
    m.job_class = j["class"].get<std::string>();
  }
  if (j.contains("samples")) {
    if (!j["samples"].is_array() || j["samples"].size() > 1024) {
      return InvalidArgument("must be an array of at most 1,024 pairs", {}, "memory.samples");
    }
    for (const json& s : j["samples"]) {
      if (!s.is_array() || s.size() != 2 || !s[0].is_number() || !s[1].is_number()) {
        return InvalidArgument("each sample must be [progress, ratio]", {}, "memory.samples");
      }
      m.samples.emplace_back(s[0].get<double>(), s[1].get<double>());
    }
  }
  ASSIGN_OR_RETURN(m.ratio, Number(j, "ratio", 0));
  ASSIGN_OR_RETURN(m.slope, Number(j, "slope", 0));
  ASSIGN_OR_RETURN(m.peak_bytes, Integer(j, "peak_bytes"));
  ASSIGN_OR_RETURN(m.predicted_bytes, Integer(j, "predicted_bytes"));
  ASSIGN_OR_RETURN(m.capacity_bytes, Integer(j, "capacity_bytes"));
  ASSIGN_OR_RETURN(m.progress, Number(j, "progress", 0));
  ASSIGN_OR_RETURN(int64_t reports, Integer(j, "reports"));
  ASSIGN_OR_RETURN(int64_t ooms, Integer(j, "ooms"));
  m.reports = static_cast<int>(reports);
  m.ooms = static_cast<int>(ooms);
  if (j.contains("floor") && !j["floor"].is_null()) {
    ASSIGN_OR_RETURN(double floor, Number(j, "floor", 0));
    m.floor = floor;
  }
  return m;
}

}  // namespace

json RuntimeToJson(const StoredRuntime& r) {
  json j = {{"retry",
             {{"in_a_row", r.retry.in_a_row},
              {"progress_at_last_crash", r.retry.progress_at_last_crash},
              {"last_log", r.retry.last_log}}},
            {"failed_options", r.failed_options},
            {"ooms", r.ooms},
            {"retry_at_s", r.retry_at_s}};
  if (r.has_memory) j["memory"] = MemoryToJson(r.memory);
  if (!r.speed.empty()) j["speed"] = r.speed;
  return j;
}

Result<StoredRuntime> RuntimeFromJson(const json& j) {
  if (!j.is_object()) return InvalidArgument("must be a JSON object", {}, "runtime");
  StoredRuntime r;
  if (j.contains("retry")) {
    const json& rt = j["retry"];
    if (!rt.is_object()) return InvalidArgument("must be an object", {}, "retry");
    ASSIGN_OR_RETURN(int64_t in_a_row, Integer(rt, "in_a_row"));
    r.retry.in_a_row = static_cast<int>(in_a_row);
    ASSIGN_OR_RETURN(r.retry.progress_at_last_crash, Number(rt, "progress_at_last_crash", -1));
    if (rt.contains("last_log")) {
      if (!rt["last_log"].is_string()) return InvalidArgument("must be a string", {}, "last_log");
      r.retry.last_log = rt["last_log"].get<std::string>();
    }
  }
  if (j.contains("failed_options")) {
    if (!j["failed_options"].is_array() || j["failed_options"].size() > 4096) {
      return InvalidArgument("must be an array of option indices", {}, "failed_options");
    }
    for (const json& o : j["failed_options"]) {
      if (!o.is_number_integer() || o.get<int64_t>() < 0 || o.get<int64_t>() > 1000000) {
        return InvalidArgument("must be option indices", {}, "failed_options");
      }
      r.failed_options.push_back(o.get<int>());
    }
  }
  ASSIGN_OR_RETURN(int64_t ooms, Integer(j, "ooms"));
  r.ooms = static_cast<int>(ooms);
  ASSIGN_OR_RETURN(r.retry_at_s, Number(j, "retry_at_s", -1));
  if (j.contains("memory")) {
    ASSIGN_OR_RETURN(r.memory, MemoryFromJson(j["memory"]));
    r.has_memory = true;
  }
  if (j.contains("speed")) {
    ASSIGN_OR_RETURN(r.speed, Factors(j["speed"], "speed"));
  }
  return r;
}

json ClassesToJson(const std::map<std::string, runtime::ClassCorrection>& classes) {
  json out = json::object();
  for (const auto& [name, c] : classes) {
    out[name] = {{"mean_ratio", c.mean_ratio}, {"stddev", c.stddev}, {"max_ratio", c.max_ratio},
                 {"jobs", c.jobs},             {"m2", c.m2}};
  }
  return out;
}

Result<std::map<std::string, runtime::ClassCorrection>> ClassesFromJson(const json& j) {
  if (!j.is_object()) return InvalidArgument("must be a JSON object", {}, "classes");
  std::map<std::string, runtime::ClassCorrection> out;
  for (const auto& [name, c] : j.items()) {
    if (!c.is_object()) return InvalidArgument("must be an object", {}, "classes." + name);
    runtime::ClassCorrection k;
    ASSIGN_OR_RETURN(k.mean_ratio, Number(c, "mean_ratio", 1));
    ASSIGN_OR_RETURN(k.stddev, Number(c, "stddev", 0));
    ASSIGN_OR_RETURN(k.max_ratio, Number(c, "max_ratio", 1));
    ASSIGN_OR_RETURN(int64_t jobs, Integer(c, "jobs"));
    k.jobs = static_cast<int>(jobs);
    ASSIGN_OR_RETURN(k.m2, Number(c, "m2", 0));
    out[name] = k;
  }
  return out;
}

json SpeedClassesToJson(const std::map<std::string, runtime::SpeedLearner::ClassEvidence>& c) {
  json out = json::object();
  for (const auto& [name, e] : c) out[name] = {{"sum", e.sum}, {"n", e.n}};
  return out;
}

Result<std::map<std::string, runtime::SpeedLearner::ClassEvidence>> SpeedClassesFromJson(
    const json& j) {
  if (!j.is_object()) return InvalidArgument("must be a JSON object", {}, "speed_classes");
  std::map<std::string, runtime::SpeedLearner::ClassEvidence> out;
  for (const auto& [name, c] : j.items()) {
    const std::string where = "speed_classes." + name;
    if (!c.is_object() || !c.contains("sum") || !c.contains("n") || !c["n"].is_array() ||
        !c["sum"].is_array() ||
        c["n"].size() != c["sum"].size()) {
      return InvalidArgument("must be {\"sum\": [...], \"n\": [...]} of one length", {}, where);
    }
    if (c["n"].size() > 256) return InvalidArgument("at most 256 GPU types", {}, where);
    runtime::SpeedLearner::ClassEvidence e;
    for (size_t t = 0; t < c["n"].size(); ++t) {
      const json& n = c["n"][t];
      const json& sum = c["sum"][t];
      if (!n.is_number_integer() || n.get<int64_t>() < 0 || n.get<int64_t>() > (1 << 30)) {
        return InvalidArgument("must hold sample counts", {}, where + ".n");
      }
      // Each sample is a factor in [0, 100] (as a job's own).
      if (!sum.is_number() || !std::isfinite(sum.get<double>()) || sum.get<double>() < 0 ||
          sum.get<double>() > runtime::kMaxSpeedRatio * static_cast<double>(n.get<int64_t>())) {
        return InvalidArgument("must hold sums of its samples' factors", {}, where + ".sum");
      }
      e.n.push_back(n.get<int64_t>());
      e.sum.push_back(sum.get<double>());
    }
    out[name] = std::move(e);
  }
  return out;
}

}  // namespace frenzy::server
