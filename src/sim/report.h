// Reports of a simulation run: the comparison table, JSON, per-job and timeline CSVs, SVG plots
// (JCT CDF per policy; GPU utilisation and queue length over time per policy) and one HTML page
// that holds the table and the plots. Pure functions from results to text; the caller writes
// the files. No clock, no I/O.
//
// The plots are made to be read by a person (docs/simulator.md, "Reports"):
//  * every SVG has a viewBox and no fixed pixel size, so it scales to the window or page that
//    shows it, and a <title> and <desc> that say what it shows (its accessible name);
//  * the JCT CDF has a log-scale x axis (JCTs span minutes to days) and is drawn as a step
//    function from 0 to 1 over the whole plot height;
//  * utilisation and queue length are time-weighted means over kTimelineWindows equal windows of
//    the longest run, not every event's step: five policies' per-event steps are a tangle;
//  * each policy has its own colour (Okabe & Ito's colour-blind-safe palette, the pale ones
//    last) and its own dash pattern, so that colour is not the only cue.
// Every text that comes from data (policy, workload and cluster names) is escaped.
#ifndef FRENZY_SIM_REPORT_H_
#define FRENZY_SIM_REPORT_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/engine.h"

namespace frenzy {

nlohmann::json MetricsToJson(const PolicyMetrics& m);
// A fixed-width table, one row per policy.
std::string ComparisonTable(const std::vector<SimResult>& results);
// policy,job_id,model,submit_s,first_start_s,finish_s,jct_s,queue_s,outcome,gpu,gpus,ooms,...
std::string JobsCsv(const std::vector<SimResult>& results);
// policy,t_s,queued,running,busy_gpus,util
// One line per run of a job per policy (SimOptions::record_runs): policy, job_id, start_s,
// progress_from_s, end_s, gpu, gpus, layout, tokens_per_s (true), tokens (kept), end.
std::string RunsCsv(const std::vector<SimResult>& results);
std::string TimelineCsv(const std::vector<SimResult>& results, int64_t total_gpus);

// The number of windows the timeline plots average over.
inline constexpr int kTimelineWindows = 60;

// One window of a timeline: the time-weighted means of its samples over the window.
struct WindowMean {
  double t_s = 0;  // the window's midpoint
  double queued = 0, running = 0, busy_gpus = 0;
};
// The timeline (a step function: each sample holds until the next; zero before the first) over
// `windows` equal windows of [0, span_s]. The last sample marks the end of the run: windows that
// start at or after it are left out, and the one it falls in is averaged over its part before it.
// REQUIRES: timeline sorted by t_s.
std::vector<WindowMean> WindowMeans(const std::vector<TimelinePoint>& timeline, double span_s,
                                    int windows);

// SVG documents. TimelineSvg is UtilisationSvg's and QueueSvg's panels stacked in one picture.
std::string JctCdfSvg(const std::vector<SimResult>& results);
std::string UtilisationSvg(const std::vector<SimResult>& results, int64_t total_gpus);
std::string QueueSvg(const std::vector<SimResult>& results);
std::string TimelineSvg(const std::vector<SimResult>& results, int64_t total_gpus);

// What index.html says about the run besides the results.
struct ReportInfo {
  std::string workload, cluster;
  int64_t total_gpus = 0;
  uint64_t seed = 0;
};
// A self-contained HTML page (no script, no external resource; it links the sibling files):
// the comparison table, the comparison over common jobs, and the three plots inline.
std::string IndexHtml(const std::vector<SimResult>& results, const ReportInfo& info);

}  // namespace frenzy

#endif  // FRENZY_SIM_REPORT_H_
