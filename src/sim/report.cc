#include "sim/report.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "sim/metrics.h"

namespace frenzy {
namespace {

std::string Hours(double s) { return fmt::format("{:.2f}", s / 3600); }

// Text for HTML and SVG (XML): safe in element content and in quoted attribute values.
std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// The comparison's columns, shared by the text table and index.html.
struct Column {
  const char* head;  // in the text table
  const char* unit;  // its second header line
  int width;         // in the text table
  const char* html;  // in index.html, with its unit
  std::function<std::string(const PolicyMetrics&)> value;
};

const std::vector<Column>& Columns() {
  using M = PolicyMetrics;
  static const std::vector<Column> kColumns = {
      {"DONE", "jobs", 6, "Finished (jobs)", [](const M& m) { return std::to_string(m.finished); }},
      {"LOST", "jobs", 6, "Lost (jobs)",
       [](const M& m) {
         return std::to_string(m.given_up + m.failed + m.unfinished + m.impossible);
       }},
      {"AVG JCT", "h", 9, "Avg JCT (h)", [](const M& m) { return Hours(m.avg_jct_s); }},
      {"P50 JCT", "h", 9, "p50 JCT (h)", [](const M& m) { return Hours(m.p50_jct_s); }},
      {"P99 JCT", "h", 9, "p99 JCT (h)", [](const M& m) { return Hours(m.p99_jct_s); }},
      {"MAKESPAN", "h", 9, "Makespan (h)", [](const M& m) { return Hours(m.makespan_s); }},
      {"AVG QUEUE", "h", 10, "Avg queue (h)", [](const M& m) { return Hours(m.avg_queue_s); }},
      {"GPU-HOURS", "", 9, "GPU-hours",
       [](const M& m) { return fmt::format("{:.0f}", m.gpu_hours); }},
      {"UTIL", "%", 6, "Utilisation (%)",
       [](const M& m) { return fmt::format("{:.1f}", 100 * m.gpu_util); }},
      {"USEFUL", "%", 6, "Useful (%)",
       [](const M& m) { return fmt::format("{:.1f}", 100 * m.gpu_util_useful); }},
      {"OOMS", "", 5, "OOMs", [](const M& m) { return std::to_string(m.oom_events); }},
      {"ACTS", "mem", 5, "Memory actions",
       [](const M& m) {
         return std::to_string(m.memory_replans + m.memory_moves + m.memory_requeues);
       }},
      {"WASTED", "GPU-h", 9, "Wasted (GPU-h)",
       [](const M& m) { return fmt::format("{:.1f}", m.wasted_gpu_hours); }},
      {"SCHED MEAN", "ms", 10, "Sched mean (ms)",
       [](const M& m) { return fmt::format("{:.3f}", m.sched_overhead_ms_mean); }},
      {"SCHED MAX", "ms", 9, "Sched max (ms)",
       [](const M& m) { return fmt::format("{:.3f}", m.sched_overhead_ms_max); }},
  };
  return kColumns;
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
  std::string head = fmt::format("{:<18}", "POLICY"), units = fmt::format("{:<18}", "");
  for (const Column& c : Columns()) {
    head += fmt::format(" {:>{}}", c.head, c.width);
    units += fmt::format(" {:>{}}", c.unit, c.width);
  }
  std::string s = head + "\n" + units + "\n";
  for (const auto& r : results) {
    s += fmt::format("{:<18}", r.metrics.policy);
    for (const Column& c : Columns()) s += fmt::format(" {:>{}}", c.value(r.metrics), c.width);
    s += "\n";
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
      s +=
          fmt::format("{:<18} avg JCT {:>9} h\n", r.metrics.policy, Hours(r.metrics.avg_jct_all_s));
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
          "{},{},{},{:.1f},{},{},{},{},{},{},{},{},{},{},{:.4f},{:.4f},{:.4f},{},{},{:.4f},{:.4f},{"
          "}\n",
          r.metrics.policy, j.id, j.model, j.submit_s,
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

std::string RunsCsv(const std::vector<SimResult>& results) {
  std::string s =
      "policy,job_id,start_s,progress_from_s,end_s,gpu,gpus,layout,tokens_per_s,tokens,end\n";
  for (const auto& r : results) {
    for (const RunRecord& x : r.runs) {
      s += fmt::format("{},{},{:.1f},{:.1f},{:.1f},{},{},{},{:.1f},{:.0f},{}\n", r.metrics.policy,
                       x.job, x.start_s, x.progress_from_s, x.end_s, x.gpu, x.gpus, x.layout,
                       x.tokens_per_s, x.tokens, x.end);
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

std::vector<WindowMean> WindowMeans(const std::vector<TimelinePoint>& timeline, double span_s,
                                    int windows) {
  std::vector<WindowMean> out;
  if (timeline.empty() || !(span_s > 0) || windows <= 0) return out;
  const double end_s = std::min(span_s, timeline.back().t_s);
  const double width = span_s / windows;
  size_t next = 0;  // the first sample after time t; the one before it holds at t
  double t = 0;
  for (int w = 0; w < windows; ++w) {
    const double a = w * width, b = std::min((w + 1) * width, end_s);
    if (!(b > a)) break;
    WindowMean m;
    while (t < b) {
      while (next < timeline.size() && timeline[next].t_s <= t) ++next;
      const double until = next < timeline.size() ? std::min(b, timeline[next].t_s) : b;
      if (next > 0) {
        const TimelinePoint& p = timeline[next - 1];
        m.queued += static_cast<double>(p.queued) * (until - t);
        m.running += static_cast<double>(p.running) * (until - t);
        m.busy_gpus += static_cast<double>(p.busy_gpus) * (until - t);
      }
      t = until;
    }
    m.queued /= b - a;
    m.running /= b - a;
    m.busy_gpus /= b - a;
    m.t_s = (a + b) / 2;
    out.push_back(m);
  }
  return out;
}

namespace {

// Okabe & Ito, "Color Universal Design" (2008), ordered so that the first five (the default
// run's policies) have at least 3:1 contrast on white; orange and sky blue come last and the
// yellow is left out (1.3:1). A dash pattern per series keeps them apart without colour.
constexpr const char* kColours[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                    "#000000", "#E69F00", "#56B4E9"};
constexpr const char* kDashes[] = {"", "9 4", "2 3", "12 3 3 3", "5 5"};

std::string Stroke(size_t i, double width) {
  std::string s =
      fmt::format("stroke=\"{}\" stroke-width=\"{}\"", kColours[i % std::size(kColours)], width);
  const char* dash = kDashes[i % std::size(kDashes)];
  if (*dash) s += fmt::format(" stroke-dasharray=\"{}\"", dash);
  return s;
}

// Every plot is one or more panels kWidth wide. A panel's plot area leaves room on the left for
// the y tick labels and the rotated y label, on the right for the legend, above for the title
// and below for the x tick labels and the x label (all inside the panel: nothing is clipped).
constexpr double kWidth = 760, kLeft = 88, kRight = 180, kTop = 50, kBottom = 70;
constexpr double kCdfHeight = 560, kPanelHeight = 400;
constexpr size_t kLegendChars = 15;  // what fits in kRight at the legend's font size

struct Frame {
  double x0 = kLeft, y0 = kTop, w = kWidth - kLeft - kRight, h = 0;  // plot area in SVG units
  double xmin = 0, xmax = 1, ymin = 0, ymax = 1;
  bool logx = false;
  // A panel whose top edge is at `top` and which is `height` tall.
  static Frame Panel(double top, double height) {
    Frame f;
    f.y0 = top + kTop;
    f.h = height - kTop - kBottom;
    return f;
  }
  double X(double x) const {
    double a = logx ? std::log10(std::max(x, xmin)) : x;
    double lo = logx ? std::log10(xmin) : xmin, hi = logx ? std::log10(xmax) : xmax;
    return x0 + (hi > lo ? (a - lo) / (hi - lo) : 0) * w;
  }
  double Y(double y) const { return y0 + h - (ymax > ymin ? (y - ymin) / (ymax - ymin) : 0) * h; }
};

struct Ticks {
  std::vector<double> at;
  std::string format;  // of a label, e.g. "{:g}"
};

std::string Axes(const Frame& f, const std::string& title, const std::string& xlabel,
                 const std::string& ylabel, const Ticks& xt, const Ticks& yt) {
  std::string s;
  s += fmt::format(
      "<text class=\"title\" x=\"{}\" y=\"{}\" font-size=\"19\" font-weight=\"bold\" "
      "text-anchor=\"middle\">{}</text>\n",
      f.x0 + f.w / 2, f.y0 - 20, Escape(title));
  for (double x : xt.at) {
    double px = f.X(x);
    s += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#d9d9d9\"/>\n", px,
        f.y0, f.y0 + f.h);
    s += fmt::format(
        "<text x=\"{:.1f}\" y=\"{}\" font-size=\"15\" text-anchor=\"middle\">{}</text>\n", px,
        f.y0 + f.h + 22, fmt::format(fmt::runtime(xt.format), x));
  }
  for (double y : yt.at) {
    double py = f.Y(y);
    s += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#d9d9d9\"/>\n",
                     f.x0, py, f.x0 + f.w, py);
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" font-size=\"15\" text-anchor=\"end\">{}</text>\n",
                     f.x0 - 7, py + 5, fmt::format(fmt::runtime(yt.format), y));
  }
  s += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n", f.x0,
      f.y0, f.w, f.h);
  s += fmt::format(
      "<text class=\"xlabel\" x=\"{}\" y=\"{}\" font-size=\"16\" "
      "text-anchor=\"middle\">{}</text>\n",
      f.x0 + f.w / 2, f.y0 + f.h + 46, Escape(xlabel));
  s += fmt::format(
      "<text class=\"ylabel\" x=\"22\" y=\"{0}\" font-size=\"16\" text-anchor=\"middle\" "
      "transform=\"rotate(-90 22 {0})\">{1}</text>\n",
      f.y0 + f.h / 2, Escape(ylabel));
  return s;
}

// A policy's name in the legend, cut to what fits (the whole name in its tooltip).
std::string LegendName(const std::string& name) {
  if (name.size() <= kLegendChars) return Escape(name);
  return Escape(name.substr(0, kLegendChars - 1)) + "\u2026<title>" + Escape(name) + "</title>";
}

std::string Legend(const Frame& f, const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    double y = f.y0 + 14 + 24 * static_cast<double>(i);
    s += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" {3}/>"
        "<text x=\"{4}\" y=\"{5}\" font-size=\"15\">{6}</text>\n",
        f.x0 + f.w + 12, y, f.x0 + f.w + 42, Stroke(i, 2.5), f.x0 + f.w + 48, y + 5,
        LegendName(names[i]));
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
  for (double x = std::ceil(lo / step) * step; x <= hi + 1e-9 * step; x += step) t.push_back(x);
  return t;
}

// The smallest 1, 2 or 5 times a power of ten at or above x (x > 0), or the largest at or below.
double NiceUp(double x) {
  double mag = std::pow(10, std::floor(std::log10(x)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= x * (1 - 1e-9)) return m * mag;
  }
  return 10 * mag;
}
double NiceDown(double x) {
  double mag = std::pow(10, std::floor(std::log10(x)));
  for (double m : {5.0, 2.0, 1.0}) {
    if (m * mag <= x * (1 + 1e-9)) return m * mag;
  }
  return mag;
}

// Ticks of a log axis over [lo, hi] (both 1, 2 or 5 times a power of ten): 1, 2 and 5 of each
// decade over up to three decades, the powers of ten alone beyond.
std::vector<double> LogTicks(double lo, double hi) {
  const bool fine = std::log10(hi / lo) <= 3 + 1e-9;
  std::vector<double> t;
  for (double mag = std::pow(10, std::floor(std::log10(lo))); mag <= hi * (1 + 1e-9); mag *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      double x = m * mag;
      if ((m == 1 || fine) && x >= lo * (1 - 1e-9) && x <= hi * (1 + 1e-9)) t.push_back(x);
    }
  }
  return t;
}

// The opening of an SVG document that scales to whatever shows it (a viewBox, no pixel size).
std::string Header(double height, const std::string& title, const std::string& desc) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {} {}\" role=\"img\" "
      "font-family=\"'Liberation Sans', Arial, Helvetica, sans-serif\" fill=\"#1a1a1a\">\n"
      "<title>{}</title>\n<desc>{}</desc>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      kWidth, height, Escape(title), Escape(desc));
}

std::string Polyline(size_t series, double width, const std::string& points) {
  return fmt::format("<polyline fill=\"none\" stroke-linejoin=\"round\" {} points=\"{}\"/>\n",
                     Stroke(series, width), points);
}

std::vector<std::string> Names(const std::vector<SimResult>& results) {
  std::vector<std::string> names;
  for (const auto& r : results) names.push_back(r.metrics.policy);
  return names;
}

// A window's length in words: "45 s", "12 min", "2.4 h".
std::string Duration(double s) {
  if (s < 120) return fmt::format("{:.0f} s", s);
  if (s < 7200) return fmt::format("{:.0f} min", s / 60);
  return fmt::format("{:.3g} h", s / 3600);
}

// The longest run's end, s (1 h when no run has a timeline).
double Span(const std::vector<SimResult>& results) {
  double span = 0;
  for (const auto& r : results) {
    if (!r.timeline.empty()) span = std::max(span, r.timeline.back().t_s);
  }
  return span > 0 ? span : 3600;
}

enum class Series { kUtilisation, kQueue };

// One panel of the timeline: a windowed mean per policy over time.
std::string TimelinePanel(const std::vector<SimResult>& results, int64_t total_gpus, Series series,
                          double top) {
  const double span = Span(results);
  std::vector<std::vector<WindowMean>> means;
  double vmax = 0;
  for (const auto& r : results) {
    means.push_back(WindowMeans(r.timeline, span, kTimelineWindows));
    for (const WindowMean& m : means.back()) vmax = std::max(vmax, m.queued);
  }
  Frame f = Frame::Panel(top, kPanelHeight);
  f.xmax = span / 3600;
  const bool util = series == Series::kUtilisation;
  f.ymax = util ? 100 : NiceUp(std::max(vmax, 1.0));
  const std::string window = Duration(span / kTimelineWindows);
  std::string s =
      Axes(f, util ? "GPU utilisation" : "Queue length",
           fmt::format("time, hours (each point: the mean over a window of {})", window),
           util ? "allocated GPUs, % of all" : "jobs waiting", {NiceTicks(0, f.xmax, 8), "{:g}"},
           util ? Ticks{{0, 25, 50, 75, 100}, "{:g}%"} : Ticks{NiceTicks(0, f.ymax, 5), "{:g}"});
  for (size_t i = 0; i < means.size(); ++i) {
    std::string pts;
    for (const WindowMean& m : means[i]) {
      double v = util ? (total_gpus > 0 ? 100 * m.busy_gpus / static_cast<double>(total_gpus) : 0)
                      : m.queued;
      pts += fmt::format("{:.1f},{:.1f} ", f.X(m.t_s / 3600), f.Y(v));
    }
    if (!pts.empty()) s += Polyline(i, 2.2, pts);
  }
  return s + Legend(f, Names(results));
}

std::string TimelineDesc(Series series) {
  return fmt::format(
      "{} over simulated time, one line per policy: the time-weighted mean over each of {} equal "
      "windows of the longest run.",
      series == Series::kUtilisation ? "Allocated GPUs as a percentage of all GPUs"
                                     : "The number of jobs waiting to start",
      kTimelineWindows);
}

}  // namespace

std::string JctCdfSvg(const std::vector<SimResult>& results) {
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  std::vector<std::vector<double>> jcts;
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
  }
  if (!(hi > 0)) {  // no policy finished a job
    lo = 0.1;
    hi = 1;
  }
  Frame f = Frame::Panel(0, kCdfHeight);
  f.logx = true;
  f.xmin = NiceDown(lo);
  f.xmax = NiceUp(hi);
  if (f.xmax <= f.xmin) f.xmax = f.xmin * 10;
  std::string s = Header(kCdfHeight, "Job completion time: CDF per policy",
                         "For each policy, the fraction of its finished jobs that completed "
                         "(submit to finish) within a given time; log-scale time axis.");
  s += Axes(f, "Job completion time (CDF over finished jobs)", "JCT, hours (log scale)",
            "fraction of finished jobs", {LogTicks(f.xmin, f.xmax), "{:g}"},
            {{0, 0.2, 0.4, 0.6, 0.8, 1}, "{:.1f}"});
  for (size_t i = 0; i < jcts.size(); ++i) {
    const auto& v = jcts[i];
    if (v.empty()) continue;
    // The empirical CDF as steps: 0 up to the shortest JCT, then up 1/n at each finished job
    // (every step-th of them in a large run, so that a line stays under ~3,000 points).
    const double n = static_cast<double>(v.size());
    const size_t step = std::max<size_t>(1, v.size() / 1500);
    std::string pts = fmt::format("{:.1f},{:.1f} ", f.X(v.front()), f.Y(0));
    double y = 0;
    for (size_t k = 0; k < v.size(); k += step) {
      const double x = f.X(v[k]);
      pts += fmt::format("{:.1f},{:.1f} ", x, f.Y(y));
      y = static_cast<double>(k + 1) / n;
      pts += fmt::format("{:.1f},{:.1f} ", x, f.Y(y));
    }
    pts += fmt::format("{0:.1f},{1:.1f} {0:.1f},{2:.1f}", f.X(v.back()), f.Y(y), f.Y(1.0));
    s += Polyline(i, 2.2, pts);
  }
  s += Legend(f, Names(results));
  return s + "</svg>\n";
}

std::string UtilisationSvg(const std::vector<SimResult>& results, int64_t total_gpus) {
  return Header(kPanelHeight, "GPU utilisation over time", TimelineDesc(Series::kUtilisation)) +
         TimelinePanel(results, total_gpus, Series::kUtilisation, 0) + "</svg>\n";
}

std::string QueueSvg(const std::vector<SimResult>& results) {
  return Header(kPanelHeight, "Queue length over time", TimelineDesc(Series::kQueue)) +
         TimelinePanel(results, 0, Series::kQueue, 0) + "</svg>\n";
}

std::string TimelineSvg(const std::vector<SimResult>& results, int64_t total_gpus) {
  return Header(2 * kPanelHeight, "GPU utilisation and queue length over time",
                TimelineDesc(Series::kUtilisation) + " " + TimelineDesc(Series::kQueue)) +
         TimelinePanel(results, total_gpus, Series::kUtilisation, 0) +
         TimelinePanel(results, total_gpus, Series::kQueue, kPanelHeight) + "</svg>\n";
}

namespace {

// Readable on a laptop: body text 16 px; the table scrolls sideways on a narrow screen rather
// than squeezing; from 1,120 px wide the JCT CDF stands on the left beside utilisation above
// queue length (the CDF is about as tall as the two), one plot a row below that. Text is
// #1a1a1a on white (17:1), links #0b57a4 (7:1).
constexpr const char* kStyle = R"css(
body { margin: 0; font: 16px/1.45 'Liberation Sans', Arial, Helvetica, sans-serif;
  color: #1a1a1a; background: #fff; }
main { max-width: 1900px; margin: 0 auto; padding: 0.75rem 1.5rem 2rem; }
h1 { font-size: 1.6rem; margin: 0.3rem 0; }
h2 { font-size: 1.25rem; margin: 1.5rem 0 0.5rem; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
caption { caption-side: top; text-align: left; padding: 0.25rem 0 0.5rem; }
th, td { padding: 0.3rem 0.65rem; border-bottom: 1px solid #c8c8c8; text-align: right; }
thead th { background: #e9edf2; border-bottom: 2px solid #4a4a4a; vertical-align: bottom; }
thead th:first-child, tbody th { text-align: left; }
tbody th { white-space: nowrap; }
tbody tr:nth-child(even) { background: #f5f6f8; }
.note { font-size: 0.95rem; color: #333; max-width: 70rem; }
.figures { display: grid; gap: 1.25rem; align-items: start; }
@media (min-width: 70rem) {
  .figures { grid-template-columns: 1fr 1fr; }
  #jct-cdf { grid-row: span 2; }
}
figure { margin: 0; border: 1px solid #c8c8c8; padding: 0.5rem; }
figure svg { display: block; width: 100%; height: auto; }
figcaption { font-size: 0.95rem; color: #333; margin-top: 0.4rem; }
a { color: #0b57a4; }
)css";

std::string HtmlComparison(const std::vector<SimResult>& results) {
  std::string s =
      "<div class=\"scroll\"><table id=\"comparison\">\n<caption>One row per policy: JCT and "
      "queueing over its own finished jobs, the rest over its whole run.</caption>\n<thead><tr>"
      "<th scope=\"col\">Policy</th>";
  for (const Column& c : Columns()) {
    s += fmt::format("<th scope=\"col\">{}</th>", c.html);
  }
  s += "</tr></thead>\n<tbody>\n";
  for (const auto& r : results) {
    s += fmt::format("<tr><th scope=\"row\">{}</th>", Escape(r.metrics.policy));
    for (const Column& c : Columns()) s += "<td>" + Escape(c.value(r.metrics)) + "</td>";
    s += "</tr>\n";
  }
  s += "</tbody></table></div>\n";
  s += "<p class=\"note\">Lost: given up, failed, unfinished or impossible. Memory actions: the "
       "runtime's re-plans, moves and requeues. Wasted: GPU-hours of crashed runs, progress lost "
       "to failures and restart pauses. Sched: wall time of one call of the policy.</p>\n";
  return s;
}

// The fair comparisons of several policies (docs/simulator.md, "Metrics").
std::string HtmlCommon(const std::vector<SimResult>& results) {
  const CommonFigures c = ComputeCommon(results);
  std::string s = fmt::format(
      "<div class=\"scroll\"><table id=\"common\">\n<caption>Over the {} jobs every policy "
      "finished, and over every job that arrived (one a policy did not finish counted to when "
      "the clock stopped: a lower bound).</caption>\n<thead><tr><th scope=\"col\">Policy</th>"
      "<th scope=\"col\">Avg JCT, common jobs (h)</th><th scope=\"col\">p99 JCT, common jobs "
      "(h)</th><th scope=\"col\">GPU-hours, common jobs</th><th scope=\"col\">Avg JCT, all "
      "jobs (h)</th></tr></thead>\n<tbody>\n",
      c.jobs);
  for (size_t i = 0; i < results.size(); ++i) {
    s += fmt::format(
        "<tr><th scope=\"row\">{}</th><td>{}</td><td>{}</td><td>{:.0f}</td><td>{}</td></tr>\n",
        Escape(results[i].metrics.policy), Hours(c.avg_jct_s[i]), Hours(c.p99_jct_s[i]),
        c.gpu_hours[i], Hours(results[i].metrics.avg_jct_all_s));
  }
  return s + "</tbody></table></div>\n";
}

std::string HtmlFigure(const std::string& id, const std::string& svg, const std::string& file,
                       const std::string& caption) {
  return fmt::format(
      "<figure id=\"{}\">\n{}<figcaption>{} (<a href=\"{}\">{}</a>)</figcaption>\n</figure>\n", id,
      svg, caption, file, file);
}

}  // namespace

std::string IndexHtml(const std::vector<SimResult>& results, const ReportInfo& info) {
  const std::string workload = Escape(info.workload), cluster = Escape(info.cluster);
  const size_t jobs = results.empty() ? 0 : results.front().jobs.size();
  std::string s = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<title>Simulation: {0} on {1}</title>\n<style>{2}</style>\n</head>\n<body>\n<main>\n"
      "<h1>Simulation: {0} on {1}</h1>\n<p>{3} jobs of {0} on {1} ({4} GPUs), seed {5}, {6} "
      "{7}; written by <code>frenzy simulate</code> (docs/simulator.md).</p>\n"
      "<h2>Comparison</h2>\n",
      workload, cluster, kStyle, jobs, info.total_gpus, info.seed, results.size(),
      results.size() == 1 ? "policy" : "policies");
  s += HtmlComparison(results);
  if (results.size() > 1) s += HtmlCommon(results);
  s += "<h2>Plots</h2>\n<div class=\"figures\">\n";
  s += HtmlFigure("jct-cdf", JctCdfSvg(results), "jct_cdf.svg",
                  "Job completion time: for each policy, the fraction of its finished jobs done "
                  "within a time (log scale). Further left and higher is better.");
  s += HtmlFigure("utilisation", UtilisationSvg(results, info.total_gpus), "timeline.svg",
                  fmt::format("GPU utilisation: allocated GPUs as a share of all {}, averaged "
                              "over {} equal windows of the longest run.",
                              info.total_gpus, kTimelineWindows));
  s += HtmlFigure("queue", QueueSvg(results), "timeline.svg",
                  fmt::format("Queue length: jobs waiting to start, averaged over the same {} "
                              "windows.",
                              kTimelineWindows));
  s += "</div>\n<h2>Files</h2>\n<ul>\n"
       "<li><a href=\"summary.json\">summary.json</a>: every policy's metrics</li>\n"
       "<li><a href=\"jobs.csv\">jobs.csv</a>: one line per job and policy</li>\n"
       "<li><a href=\"timeline.csv\">timeline.csv</a>: queue, running jobs and busy GPUs at "
       "every event</li>\n"
       "<li><a href=\"jct_cdf.svg\">jct_cdf.svg</a> and <a href=\"timeline.svg\">timeline.svg"
       "</a>: the plots above</li>\n</ul>\n</main>\n</body>\n</html>\n";
  return s;
}

}  // namespace frenzy
