// Reports of a simulation run: the comparison table, JSON, per-job and timeline CSVs, and SVG
// plots (JCT CDF per policy; GPU utilisation and queue length over time per policy). Pure
// functions from results to text; the caller writes the files.
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
std::string TimelineCsv(const std::vector<SimResult>& results, int64_t total_gpus);
// SVG documents.
std::string JctCdfSvg(const std::vector<SimResult>& results);
std::string TimelineSvg(const std::vector<SimResult>& results, int64_t total_gpus);

}  // namespace frenzy

#endif  // FRENZY_SIM_REPORT_H_
