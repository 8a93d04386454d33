#include "sim/workload.h"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/strings.h"
#include "data/embedded.h"

namespace frenzy {
namespace {

std::vector<std::string_view> SplitComma(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t comma = line.find(',', start);
    out.push_back(
        Trim(line.substr(start, comma == std::string_view::npos ? line.npos : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

Result<double> ToDouble(std::string_view s, const std::string& where, const std::string& col) {
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) {
    return InvalidArgument("'" + std::string(s) + "' is not a number", where, col);
  }
  return v;
}

Result<int64_t> ToInt(std::string_view s, const std::string& where, const std::string& col) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) {
    return InvalidArgument("'" + std::string(s) + "' is not an integer", where, col);
  }
  return v;
}

// Numbers as the CSV writes them: integers without a fraction, others with enough digits to
// read back the same value.
std::string Num(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{:.0f}", v);
  return fmt::format("{}", v);
}

}  // namespace

Result<Workload> ParseWorkloadCsv(std::string_view text, const std::string& where) {
  static const char* kRequired[] = {"job_id", "submit_s",     "model",
                                    "tokens", "global_batch", "seq_len"};
  Workload w;
  w.name = where;
  std::map<std::string, size_t> col;
  std::set<std::string> ids;
  int64_t line_no = 0;
  bool header = false;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == text.npos ? text.npos : nl - pos);
    pos = nl == text.npos ? text.size() + 1 : nl + 1;
    ++line_no;
    if (Trim(line).empty() || Trim(line).front() == '#') continue;
    std::string at = fmt::format("{}:{}", where, line_no);
    auto cells = SplitComma(line);
    if (!header) {
      for (size_t i = 0; i < cells.size(); ++i) col[ToLower(cells[i])] = i;
      for (const char* r : kRequired) {
        if (!col.count(r)) {
          return InvalidArgument("the header lacks the required column", at, r);
        }
      }
      header = true;
      continue;
    }
    auto cell = [&](const char* name) -> std::optional<std::string_view> {
      auto it = col.find(name);
      if (it == col.end() || it->second >= cells.size() || cells[it->second].empty()) {
        return std::nullopt;
      }
      return cells[it->second];
    };
    for (const char* r : kRequired) {
      if (!cell(r)) return InvalidArgument("missing value", at, r);
    }
    WorkloadJob j;
    j.id = std::string(*cell("job_id"));
    if (!ids.insert(j.id).second) {
      return InvalidArgument("duplicate job id '" + j.id + "'", at, "job_id");
    }
    ASSIGN_OR_RETURN(j.submit_s, ToDouble(*cell("submit_s"), at, "submit_s"));
    if (j.submit_s < 0) return InvalidArgument("must not be negative", at, "submit_s");
    j.model = std::string(*cell("model"));
    ASSIGN_OR_RETURN(j.tokens, ToDouble(*cell("tokens"), at, "tokens"));
    if (!(j.tokens > 0)) return InvalidArgument("must be positive", at, "tokens");
    ASSIGN_OR_RETURN(j.global_batch, ToInt(*cell("global_batch"), at, "global_batch"));
    if (j.global_batch < 1) return InvalidArgument("must be at least 1", at, "global_batch");
    ASSIGN_OR_RETURN(j.seq_len, ToInt(*cell("seq_len"), at, "seq_len"));
    if (j.seq_len < 1) return InvalidArgument("must be at least 1", at, "seq_len");
    if (auto g = cell("requested_gpu")) j.requested_gpu = std::string(*g);
    if (auto g = cell("requested_gpus")) {
      ASSIGN_OR_RETURN(int64_t n, ToInt(*g, at, "requested_gpus"));
      if (n < 1) return InvalidArgument("must be at least 1", at, "requested_gpus");
      j.requested_gpus = n;
    }
    if (auto p = cell("precision")) {
      auto prec = ParsePrecision(*p);
      if (!prec) {
        return InvalidArgument(
            "unknown precision '" + std::string(*p) + "' (bf16, fp16, fp32, bf16-pure)", at,
            "precision");
      }
      j.precision = *prec;
    }
    if (auto p = cell("priority")) {
      ASSIGN_OR_RETURN(j.priority, ToInt(*p, at, "priority"));
    }
    if (auto u = cell("user")) j.user = std::string(*u);
    w.jobs.push_back(std::move(j));
  }
  if (!header) return InvalidArgument("empty workload: a header line is required", where);
  return w;
}

std::string WorkloadToCsv(const Workload& w) {
  std::string out =
      "job_id,submit_s,model,tokens,global_batch,seq_len,requested_gpu,requested_gpus,"
      "precision,priority,user\n";
  for (const auto& j : w.jobs) {
    out += fmt::format("{},{},{},{},{},{},{},{},{},{},{}\n", j.id, Num(j.submit_s), j.model,
                       Num(j.tokens), j.global_batch, j.seq_len, j.requested_gpu.value_or(""),
                       j.requested_gpus ? std::to_string(*j.requested_gpus) : "",
                       PrecisionName(j.precision), j.priority, j.user);
  }
  return out;
}

std::vector<std::string> BundledWorkloadNames() {
  std::vector<std::string> names;
  for (const auto& f : EmbeddedFiles()) {
    constexpr std::string_view kDir = "workloads/";
    if (f.path.starts_with(kDir) && f.path.ends_with(".csv")) {
      names.emplace_back(f.path.substr(kDir.size(), f.path.size() - kDir.size() - 4));
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

Result<Workload> ResolveWorkload(const std::string& name_or_path) {
  if (auto text = FindEmbeddedFile("workloads/" + name_or_path + ".csv")) {
    auto w = ParseWorkloadCsv(*text, name_or_path);
    if (w.ok()) w->name = name_or_path;
    return w;
  }
  std::ifstream in(name_or_path, std::ios::binary);
  if (!in) {
    std::string known;
    for (const auto& n : BundledWorkloadNames()) known += (known.empty() ? "" : ", ") + n;
    return NotFound("no bundled workload or readable file '" + name_or_path +
                        "' (bundled: " + (known.empty() ? "none" : known) + ")",
                    {}, "workload");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseWorkloadCsv(ss.str(), name_or_path);
}

}  // namespace frenzy
