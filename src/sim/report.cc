#include "sim/report.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

#include "sim/metrics.h"

namespace frenzy {
namespace {

// A colour-blind-safe palette (Okabe & Ito, "Color Universal Design", 2008).
constexpr const char* kColours[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                    "#E69F00", "#56B4E9", "#000000", "#F0E442"};

std::string Hours(double s) { return fmt::format("{:.2f}", s / 3600); }

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

struct Frame {
  double x0 = 70, y0 = 30, w = 620, h = 300;  // plot area in SVG units
  double xmin = 0, xmax = 1, ymin = 0, ymax = 1;
  bool logx = false;
  double X(double x) const {
    double a = logx ? std::log10(std::max(x, xmin)) : x;
    double lo = logx ? std::log10(xmin) : xmin, hi = logx ? std::log10(xmax) : xmax;
    return x0 + (hi > lo ? (a - lo) / (hi - lo) : 0) * w;
  }
  double Y(double y) const { return y0 + h - (ymax > ymin ? (y - ymin) / (ymax - ymin) : 0) * h; }
};

std::string Axes(const Frame& f, const std::string& title, const std::string& xlabel,
                 const std::string& ylabel, const std::vector<double>& xticks,
                 const std::vector<double>& yticks, const std::string& ytick_fmt) {
  std::string s;
  s += fmt::format("<text x=\"{}\" y=\"18\" font-size=\"14\" text-anchor=\"middle\">{}</text>\n",
                   f.x0 + f.w / 2, Escape(title));
  s += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>\n", f.x0,
      f.y0, f.w, f.h);
  for (double x : xticks) {
    double px = f.X(x);
    s +=
        fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#ddd\"/>\n",
                    px, f.y0, f.y0 + f.h);
    s += fmt::format(
        "<text x=\"{:.1f}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">{:g}</text>\n", px,
        f.y0 + f.h + 15, x);
  }
  for (double y : yticks) {
    double py = f.Y(y);
    s += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n",
                     f.x0, py, f.x0 + f.w, py);
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"end\">{}</text>\n",
                     f.x0 - 5, py + 4, fmt::format(fmt::runtime(ytick_fmt), y));
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\">{}</text>\n",
                   f.x0 + f.w / 2, f.y0 + f.h + 32, Escape(xlabel));
  s += fmt::format(
      "<text x=\"15\" y=\"{0}\" font-size=\"12\" text-anchor=\"middle\" "
      "transform=\"rotate(-90 15 {0})\">{1}</text>\n",
      f.y0 + f.h / 2, Escape(ylabel));
  return s;
}

std::string Legend(const Frame& f, const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    double y = f.y0 + 12 + 16 * static_cast<double>(i);
    s += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" stroke-width=\"2.5\"/>"
        "<text x=\"{4}\" y=\"{5}\" font-size=\"11\">{6}</text>\n",
        f.x0 + f.w + 10, y, f.x0 + f.w + 30, kColours[i % std::size(kColours)], f.x0 + f.w + 35,
        y + 4, Escape(names[i]));
  }
  return s;
}

std::vector<double> NiceTicks(double lo, double hi, int n) {
  std::vector<double> t;
  if (!(hi > lo)) return {lo};
  double raw = (hi - lo) / n;
  double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  for (double x = std::ceil(lo / step) * step; x <= hi + 1e-9; x += step) t.push_back(x);
  return t;
}

// A CSV field: quoted (with quotes doubled) when it holds a comma, a quote or a newline.
std::string CsvField(const std::string& v) {
  if (v.find_first_of(",\"\n") == std::string::npos) return v;
  std::string out = "\"";
  for (char ch : v) {
    if (ch == '"') out += '"';
    out += ch;
  }
  return out + "\"";
}

std::string Header(double width, double height) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      width, height);
}

}  // namespace

nlohmann::json MetricsToJson(const PolicyMetrics& m) {
  return {{"policy", m.policy},
          {"jobs", m.jobs},
          {"finished", m.finished},
          {"given_up", m.given_up},
          {"unfinished", m.unfinished},
          {"impossible", m.impossible},
          {"failed", m.failed},
          {"jobs_lost", m.jobs_lost()},
          {"avg_jct_s", m.avg_jct_s},
          {"p50_jct_s", m.p50_jct_s},
          {"p95_jct_s", m.p95_jct_s},
          {"p99_jct_s", m.p99_jct_s},
          {"avg_jct_all_s", m.avg_jct_all_s},
          {"makespan_s", m.makespan_s},
          {"avg_queue_s", m.avg_queue_s},
          {"gpu_util", m.gpu_util},
          {"gpu_util_useful", m.gpu_util_useful},
          {"gpu_hours", m.gpu_hours},
          {"wasted_gpu_hours", m.wasted_gpu_hours},
          {"oom_wasted_gpu_hours", m.oom_wasted_gpu_hours},
          {"oom_events", m.oom_events},
          {"node_failures", m.node_failures},
          {"restarts", m.restarts},
          {"crashes", m.crashes},
          {"memory_replans", m.memory_replans},
          {"memory_moves", m.memory_moves},
          {"memory_requeues", m.memory_requeues},
          {"stragglers_detected", m.stragglers_detected},
          {"sched_calls", m.sched_calls},
          {"sched_overhead_ms_mean", m.sched_overhead_ms_mean},
          {"sched_overhead_ms_p99", m.sched_overhead_ms_p99},
          {"sched_overhead_ms_max", m.sched_overhead_ms_max},
          {"sched_overhead_ms_total", m.sched_overhead_ms_total},
          {"events", m.events},
          {"sim_wall_s", m.sim_wall_s}};
}

std::string ComparisonTable(const std::vector<SimResult>& results) {
  std::string s = fmt::format(
      "{:<18} {:>6} {:>6} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>6} {:>6} {:>5} {:>5} {:>9} "
      "{:>10} {:>9}\n",
      "POLICY", "DONE", "LOST", "AVG JCT", "P50 JCT", "P99 JCT", "MAKESPAN", "AVG QUEUE",
      "GPU-HOURS", "UTIL", "USEFUL", "OOMS", "ACTS", "WASTED", "SCHED MEAN", "SCHED MAX");
  s += fmt::format(
      "{:<18} {:>6} {:>6} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>6} {:>6} {:>5} {:>5} "
      "{:>9} {:>10} {:>9}\n",
      "", "jobs", "jobs", "h", "h", "h", "h", "h", "", "%", "%", "", "mem", "GPU-h", "ms", "ms");
  for (const auto& r : results) {
    const PolicyMetrics& m = r.metrics;
    s += fmt::format(
        "{:<18} {:>6} {:>6} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9.0f} {:>6.1f} {:>6.1f} {:>5} {:>5} "
        "{:>9.1f} {:>10.3f} {:>9.3f}\n",
        m.policy, m.finished, m.given_up + m.failed + m.unfinished + m.impossible,
        Hours(m.avg_jct_s), Hours(m.p50_jct_s), Hours(m.p99_jct_s), Hours(m.makespan_s),
        Hours(m.avg_queue_s), m.gpu_hours, 100 * m.gpu_util, 100 * m.gpu_util_useful, m.oom_events,
        m.memory_replans + m.memory_moves + m.memory_requeues, m.wasted_gpu_hours,
        m.sched_overhead_ms_mean, m.sched_overhead_ms_max);
  }
  if (results.size() > 1) {
    const CommonFigures c = ComputeCommon(results);
    s += fmt::format("\nOver the {} jobs every policy finished:\n", c.jobs);
    for (size_t i = 0; i < results.size(); ++i) {
      s += fmt::format("{:<18} avg JCT {:>9} h, p99 JCT {:>9} h, {:>9.0f} GPU-hours\n",
                       results[i].metrics.policy, Hours(c.avg_jct_s[i]), Hours(c.p99_jct_s[i]),
                       c.gpu_hours[i]);
    }
    s += "Over every job that arrived, one not finished counted to when the clock stopped (a "
         "lower bound for a policy that loses jobs):\n";
    for (const auto& r : results) {
      s += fmt::format("{:<18} avg JCT {:>9} h\n", r.metrics.policy, Hours(r.metrics.avg_jct_all_s));
    }
  }
  return s;
}

std::string JobsCsv(const std::vector<SimResult>& results) {
  std::string s =
      "policy,job_id,model,submit_s,first_start_s,finish_s,jct_s,queue_s,outcome,gpu,gpus,ooms,"
      "restarts,failures,gpu_hours,wasted_gpu_hours,memory_factor,crashes,memory_actions,"
      "memory_drift,planned_factor,note\n";
  for (const auto& r : results) {
    for (const auto& j : r.jobs) {
      bool done = j.outcome == JobOutcome::kFinished;
      s += fmt::format(
          "{},{},{},{:.1f},{},{},{},{},{},{},{},{},{},{},{:.4f},{:.4f},{:.4f},{},{},{:.4f},{:.4f},{}\n",
          r.metrics.policy,
          j.id, j.model, j.submit_s,
          j.first_start_s >= 0 ? fmt::format("{:.1f}", j.first_start_s) : "",
          done ? fmt::format("{:.1f}", j.finish_s) : "",
          done ? fmt::format("{:.1f}", j.jct_s()) : "",
          j.first_start_s >= 0 ? fmt::format("{:.1f}", j.first_start_s - j.submit_s) : "",
          JobOutcomeName(j.outcome), j.gpu, j.gpus, j.ooms, j.restarts, j.failures, j.gpu_s / 3600,
          j.wasted_gpu_s / 3600, j.memory_factor, j.crashes, j.memory_actions, j.memory_drift,
          j.planned_factor, CsvField(j.note));
    }
  }
  return s;
}

std::string TimelineCsv(const std::vector<SimResult>& results, int64_t total_gpus) {
  std::string s = "policy,t_s,queued,running,busy_gpus,util\n";
  for (const auto& r : results) {
    for (const auto& p : r.timeline) {
      s += fmt::format(
          "{},{:.1f},{},{},{},{:.4f}\n", r.metrics.policy, p.t_s, p.queued, p.running, p.busy_gpus,
          total_gpus > 0 ? static_cast<double>(p.busy_gpus) / static_cast<double>(total_gpus)
                         : 0.0);
    }
  }
  return s;
}

std::string JctCdfSvg(const std::vector<SimResult>& results) {
  Frame f;
  f.logx = true;
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  std::vector<std::vector<double>> jcts;
  std::vector<std::string> names;
  for (const auto& r : results) {
    std::vector<double> v;
    for (const auto& j : r.jobs) {
      if (j.outcome == JobOutcome::kFinished) v.push_back(std::max(j.jct_s() / 3600, 1e-3));
    }
    std::sort(v.begin(), v.end());
    if (!v.empty()) {
      lo = std::min(lo, v.front());
      hi = std::max(hi, v.back());
    }
    jcts.push_back(std::move(v));
    names.push_back(r.metrics.policy);
  }
  if (!(hi > 0)) {
    lo = 0.1;
    hi = 1;
  }
  f.xmin = std::pow(10, std::floor(std::log10(lo)));
  f.xmax = std::pow(10, std::ceil(std::log10(hi)));
  if (f.xmax <= f.xmin) f.xmax = f.xmin * 10;
  std::vector<double> xt;
  for (double x = f.xmin; x <= f.xmax * 1.0001; x *= 10) xt.push_back(x);
  std::string s = Header(820, 370);
  s += Axes(f, "Job completion time (CDF over finished jobs)", "JCT, hours (log scale)",
            "fraction of jobs", xt, {0, 0.25, 0.5, 0.75, 1}, "{:.2f}");
  for (size_t i = 0; i < jcts.size(); ++i) {
    const auto& v = jcts[i];
    if (v.empty()) continue;
    std::string pts;
    size_t step = std::max<size_t>(1, v.size() / 1500);
    for (size_t k = 0; k < v.size(); k += step) {
      double y = static_cast<double>(k + 1) / static_cast<double>(v.size());
      pts += fmt::format("{:.1f},{:.1f} ", f.X(v[k]), f.Y(y));
    }
    pts += fmt::format("{:.1f},{:.1f}", f.X(v.back()), f.Y(1.0));
    s += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>\n",
                     kColours[i % std::size(kColours)], pts);
  }
  s += Legend(f, names);
  s += "</svg>\n";
  return s;
}

std::string TimelineSvg(const std::vector<SimResult>& results, int64_t total_gpus) {
  double tmax = 0, qmax = 1;
  std::vector<std::string> names;
  for (const auto& r : results) {
    if (!r.timeline.empty()) tmax = std::max(tmax, r.timeline.back().t_s / 3600);
    for (const auto& p : r.timeline) qmax = std::max(qmax, static_cast<double>(p.queued));
    names.push_back(r.metrics.policy);
  }
  if (!(tmax > 0)) tmax = 1;
  std::string s = Header(820, 720);
  Frame top;
  top.xmax = tmax;
  top.ymax = 1;
  Frame bottom = top;
  bottom.y0 = 390;
  bottom.ymax = qmax;
  s += Axes(top, "GPU utilisation (allocated GPUs / all GPUs)", "time, hours", "utilisation",
            NiceTicks(0, tmax, 8), {0, 0.25, 0.5, 0.75, 1}, "{:.2f}");
  s += Axes(bottom, "Queue length (jobs waiting)", "time, hours", "jobs waiting",
            NiceTicks(0, tmax, 8), NiceTicks(0, qmax, 5), "{:g}");
  for (size_t i = 0; i < results.size(); ++i) {
    // Step lines: a value holds until the next sample.
    std::string u, q;
    double prev_util = -1, prev_queued = -1;
    for (const auto& p : results[i].timeline) {
      double t = p.t_s / 3600;
      double util =
          total_gpus > 0 ? static_cast<double>(p.busy_gpus) / static_cast<double>(total_gpus) : 0;
      double queued = static_cast<double>(p.queued);
      if (prev_util >= 0) {
        u += fmt::format("{:.1f},{:.1f} ", top.X(t), top.Y(prev_util));
        q += fmt::format("{:.1f},{:.1f} ", bottom.X(t), bottom.Y(prev_queued));
      }
      u += fmt::format("{:.1f},{:.1f} ", top.X(t), top.Y(util));
      q += fmt::format("{:.1f},{:.1f} ", bottom.X(t), bottom.Y(queued));
      prev_util = util;
      prev_queued = queued;
    }
    const char* c = kColours[i % std::size(kColours)];
    s += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.3\" points=\"{}\"/>\n",
                     c, u);
    s += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.3\" points=\"{}\"/>\n",
                     c, q);
  }
  s += Legend(top, names);
  s += "</svg>\n";
  return s;
}

}  // namespace frenzy
