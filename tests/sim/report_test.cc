// Reports of a simulation: the table names every policy; CSV and SVG are well formed.
#include "sim/report.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "sim/metrics.h"

namespace frenzy {
namespace {

SimResult Result(const std::string& policy, double jct_h) {
  SimResult r;
  r.metrics.policy = policy;
  r.metrics.finished = 2;
  r.metrics.avg_jct_s = jct_h * 3600;
  for (int i = 0; i < 2; ++i) {
    JobRecord j;
    j.id = "j" + std::to_string(i);
    j.model = "gpt2";
    j.submit_s = 0;
    j.first_start_s = 10;
    j.finish_s = (i + 1) * jct_h * 3600;
    j.outcome = JobOutcome::kFinished;
    r.jobs.push_back(j);
  }
  r.timeline = {{0, 2, 0, 0}, {10, 0, 2, 8}, {jct_h * 3600, 1, 1, 4}};
  return r;
}

TEST(Report, TableHasARowPerPolicyWithItsAverageJct) {
  std::string t = ComparisonTable({Result("fifo-static", 2), Result("frenzy", 1)});
  EXPECT_NE(t.find("fifo-static"), std::string::npos);
  EXPECT_NE(t.find("frenzy"), std::string::npos);
  EXPECT_NE(t.find("2.00"), std::string::npos);
  EXPECT_NE(t.find("1.00"), std::string::npos);
}

TEST(Report, JobsCsvHasOneLinePerJobAndPolicy) {
  std::string csv = JobsCsv({Result("a", 1), Result("b", 1)});
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 4);
  EXPECT_EQ(csv.rfind("policy,job_id,", 0), 0u);
}

TEST(Report, SvgPlotsAreCompleteDocumentsWithOneLinePerPolicy) {
  std::vector<SimResult> rs = {Result("a", 1), Result("b", 3)};
  for (const std::string& svg : {JctCdfSvg(rs), TimelineSvg(rs, 8)}) {
    EXPECT_EQ(svg.rfind("<svg", 0), 0u);
    EXPECT_NE(svg.find("</svg>"), std::string::npos);
    size_t lines = 0;
    for (size_t p = svg.find("<polyline"); p != std::string::npos;
         p = svg.find("<polyline", p + 1)) {
      ++lines;
    }
    EXPECT_GE(lines, 2u);
  }
  std::string tl = TimelineSvg(rs, 8);
  EXPECT_NE(tl.find("utilisation"), std::string::npos);
}

}  // namespace
}  // namespace frenzy

namespace frenzy {
namespace {

// Policy A finishes jobs 0, 1, 2 in 1, 2 and 10 h; policy B finishes 0 and 1 in 2 and 3 h and
// loses job 2 (its longest). On their own finished jobs A averages 13/3 = 4.33 h and B 2.5 h;
// over the 2 jobs both finished, A 1.5 h and B 2.5 h.
TEST(CommonFigures, ComparePoliciesOnTheJobsAllOfThemFinished) {
  auto result = [](std::vector<double> jct_h, std::vector<bool> done) {
    SimResult r;
    for (size_t i = 0; i < jct_h.size(); ++i) {
      JobRecord j;
      j.submit_s = 100;
      j.finish_s = done[i] ? 100 + jct_h[i] * 3600 : -1;
      j.outcome = done[i] ? JobOutcome::kFinished : JobOutcome::kGivenUp;
      j.gpu_s = 3600 * static_cast<double>(i + 1);  // 1, 2, 3 GPU-hours
      r.jobs.push_back(j);
    }
    return r;
  };
  const std::vector<SimResult> results = {result({1, 2, 10}, {true, true, true}),
                                          result({2, 3, 0}, {true, true, false})};
  const CommonFigures c = ComputeCommon(results);
  EXPECT_EQ(c.jobs, 2);
  ASSERT_EQ(c.avg_jct_s.size(), 2u);
  EXPECT_DOUBLE_EQ(c.avg_jct_s[0], 1.5 * 3600);
  EXPECT_DOUBLE_EQ(c.avg_jct_s[1], 2.5 * 3600);
  EXPECT_DOUBLE_EQ(c.gpu_hours[0], 3);  // jobs 0 and 1: 1 + 2 GPU-hours
  EXPECT_DOUBLE_EQ(c.gpu_hours[1], 3);
  // p99 of two values by linear interpolation: lo + 0.99 (hi - lo).
  EXPECT_DOUBLE_EQ(c.p99_jct_s[0], (1 + 0.99 * (2 - 1)) * 3600);
  EXPECT_NE(ComparisonTable(results).find("Over the 2 jobs every policy finished"),
            std::string::npos);
}

}  // namespace
}  // namespace frenzy

namespace frenzy {
namespace {

// Four jobs, the clock stopped at 10,000 s: job 0 finished in 1 h (submitted at 0); job 1
// (submitted at 1,000 s) was given up, so it counts 10,000 - 1,000 = 9,000 s; job 2 (submitted
// at 4,000 s) never ran and counts 6,000 s; job 3, due at 12,000 s, never arrived and does not
// count. All jobs: (3,600 + 9,000 + 6,000) / 3 = 6,200 s; the finished one alone: 3,600 s.
TEST(Metrics, TheAllJobsAverageCountsALostJobToWhenTheClockStopped) {
  std::vector<JobRecord> jobs(4);
  jobs[0].submit_s = 0;
  jobs[0].first_start_s = 0;
  jobs[0].finish_s = 3600;
  jobs[0].outcome = JobOutcome::kFinished;
  jobs[1].submit_s = 1000;
  jobs[1].first_start_s = 1000;
  jobs[1].outcome = JobOutcome::kGivenUp;
  jobs[2].submit_s = 4000;
  jobs[2].outcome = JobOutcome::kUnfinished;
  jobs[3].submit_s = 12000;
  jobs[3].outcome = JobOutcome::kUnfinished;
  RunTotals t;
  t.first_arrival_s = 0;
  t.last_finish_s = 3600;
  t.end_s = 10000;
  t.cluster_gpus = 8;
  PolicyMetrics m = ComputeMetrics(PolicyMetrics{}, jobs, {}, t);
  EXPECT_DOUBLE_EQ(m.avg_jct_s, 3600);
  EXPECT_DOUBLE_EQ(m.avg_jct_all_s, 6200);
  EXPECT_EQ(m.finished, 1);
}

}  // namespace
}  // namespace frenzy

// The plots as a person sees them, read back from the SVG text: where titles and labels sit,
// how many points a line has, how much of the canvas a curve spans.
namespace frenzy {
namespace {

struct SvgText {
  double x = 0, y = 0, size = 0;
  std::string anchor, cls, text;
  bool rotated = false;
};

std::string Attr(const std::string& attrs, const std::string& name) {
  const std::string key = name + "=\"";
  size_t p = attrs.find(key);
  while (p != std::string::npos && p > 0 && attrs[p - 1] != ' ') p = attrs.find(key, p + 1);
  if (p == std::string::npos) return "";
  const size_t from = p + key.size();
  return attrs.substr(from, attrs.find('"', from) - from);
}

// The viewBox's width and height (0, 0 without one).
std::pair<double, double> ViewBox(const std::string& svg) {
  const std::string box = Attr(svg.substr(0, svg.find('>')), "viewBox");
  double x = 0, y = 0, width = 0, height = 0;
  std::istringstream(box) >> x >> y >> width >> height;
  return {width, height};
}

// The elements named `tag`: each one's attributes and, for a closed element, its content.
// (No std::regex over a whole document: libstdc++'s recurses per character and overflows the
// stack on a long polyline.)
std::vector<std::pair<std::string, std::string>> Elements(const std::string& svg,
                                                          const std::string& tag) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::string open = "<" + tag + " ", close = "</" + tag + ">";
  for (size_t p = svg.find(open); p != std::string::npos; p = svg.find(open, p + 1)) {
    const size_t end = svg.find('>', p);
    std::string content;
    if (svg[end - 1] != '/') content = svg.substr(end + 1, svg.find(close, end) - end - 1);
    out.emplace_back(svg.substr(p + open.size(), end - p - open.size()), content);
  }
  return out;
}

std::vector<SvgText> Texts(const std::string& svg) {
  std::vector<SvgText> out;
  for (const auto& [attrs, content] : Elements(svg, "text")) {
    SvgText t;
    t.x = std::stod(Attr(attrs, "x"));
    t.y = std::stod(Attr(attrs, "y"));
    t.size = std::stod(Attr(attrs, "font-size"));
    t.anchor = Attr(attrs, "text-anchor");
    t.cls = Attr(attrs, "class");
    t.rotated = !Attr(attrs, "transform").empty();
    // What is shown: a tooltip's <title> dropped, an entity one character.
    const std::string shown = content.substr(0, content.find("<title>"));
    t.text = std::regex_replace(shown, std::regex("&[a-z#0-9]+;"), "_");
    out.push_back(t);
  }
  return out;
}

std::vector<std::vector<std::pair<double, double>>> Polylines(const std::string& svg) {
  std::vector<std::vector<std::pair<double, double>>> out;
  for (const auto& element : Elements(svg, "polyline")) {
    std::istringstream pts(Attr(element.first, "points"));
    out.emplace_back();
    double x = 0, y = 0;
    char comma = 0;
    while (pts >> x >> comma >> y) out.back().emplace_back(x, y);
  }
  return out;
}

// Every text's box — its width estimated at 0.6 em a character (wider than most sans-serif
// glyphs), from 0.8 em above its baseline to 0.25 em below — lies inside the viewBox.
void ExpectTextsInside(const std::string& svg) {
  const auto [width, height] = ViewBox(svg);
  ASSERT_GT(width, 0);
  for (const SvgText& t : Texts(svg)) {
    const double len = 0.6 * t.size * static_cast<double>(t.text.size());
    double left = t.anchor == "middle" ? t.x - len / 2 : t.anchor == "end" ? t.x - len : t.x;
    double right = left + len, top = t.y - 0.8 * t.size, bottom = t.y + 0.25 * t.size;
    if (t.rotated) {  // rotated -90 degrees about (x, y), centred there
      left = t.x - 0.8 * t.size;
      right = t.x + 0.25 * t.size;
      top = t.y - len / 2;
      bottom = t.y + len / 2;
    }
    EXPECT_GE(left, 0) << t.text;
    EXPECT_LE(right, width) << t.text;
    EXPECT_GE(top, 0) << t.text;
    EXPECT_LE(bottom, height) << t.text;
  }
}

// A busy run: 4,000 samples over 100 h, the cluster flipping between full and empty.
SimResult Busy(const std::string& policy) {
  SimResult r;
  r.metrics.policy = policy;
  for (int i = 0; i < 4000; ++i) {
    r.timeline.push_back({i * 90.0, i % 3, i % 2, i % 2 == 0 ? 8 : 0});
  }
  return r;
}

TEST(ReportPlots, TimelinePanelTitlesStandApartAndNoTextIsClipped) {
  const std::string svg = TimelineSvg({Busy("fifo-static"), Busy("frenzy")}, 8);
  std::vector<double> title_y;
  for (const SvgText& t : Texts(svg)) {
    if (t.cls == "title") title_y.push_back(t.y);
  }
  ASSERT_EQ(title_y.size(), 2u);
  EXPECT_GT(std::abs(title_y[0] - title_y[1]), 100);  // a panel apart, not one over the other
  size_t xlabels = 0;
  for (const SvgText& t : Texts(svg)) xlabels += t.cls == "xlabel";
  EXPECT_EQ(xlabels, 2u);
  ExpectTextsInside(svg);
  ExpectTextsInside(JctCdfSvg({Result("fifo-static", 2), Result("frenzy", 1)}));
  ExpectTextsInside(UtilisationSvg({Busy("a")}, 8));
  ExpectTextsInside(QueueSvg({Busy("a")}));
}

TEST(ReportPlots, TimelineLinesAreWindowedMeansNotEveryEvent) {
  const std::vector<SimResult> rs = {Busy("a"), Busy("b"), Busy("c")};
  for (const std::string& svg : {TimelineSvg(rs, 8), UtilisationSvg(rs, 8), QueueSvg(rs)}) {
    const auto lines = Polylines(svg);
    ASSERT_FALSE(lines.empty());
    for (const auto& line : lines) {
      EXPECT_LE(line.size(), static_cast<size_t>(kTimelineWindows));
      EXPECT_GE(line.size(), static_cast<size_t>(kTimelineWindows) - 1);
    }
  }
  // Full every other 90 s sample: a window of 100 h / 60 = 6,000 s holds 66 or 67 samples, so
  // its mean is 50% within 1.5%: a flat line halfway between the 0% and 100% gridlines.
  const std::string util = UtilisationSvg({Busy("a")}, 8);
  // The plot area (the frame, drawn unfilled) runs from 100% at its top to 0% at its bottom.
  double top = 0, height = 0;
  for (const auto& [attrs, content] : Elements(util, "rect")) {
    if (Attr(attrs, "fill") == "none") {
      top = std::stod(Attr(attrs, "y"));
      height = std::stod(Attr(attrs, "height"));
    }
  }
  ASSERT_GT(height, 100);
  const auto util_lines = Polylines(util);
  ASSERT_EQ(util_lines.size(), 1u);
  for (const auto& p : util_lines.front()) {
    EXPECT_NEAR(p.second, top + height / 2, 0.02 * height);
  }
}

TEST(ReportPlots, TheCdfScalesToItsWindowAndSpansTheWholePlotHeight) {
  const std::string svg = JctCdfSvg({Result("a", 1), Result("b", 3)});
  // A viewBox and no pixel size: a browser scales it to the window.
  EXPECT_EQ(svg.find("<svg", 0), 0u);
  const std::string root = svg.substr(0, svg.find('>'));
  EXPECT_EQ(root.find(" width="), std::string::npos);
  EXPECT_EQ(root.find(" height="), std::string::npos);
  const auto [width, height] = ViewBox(svg);
  ASSERT_GT(height, 0);
  // Each policy's curve runs from fraction 0 to 1, and that is at least 3/4 of the canvas.
  const auto lines = Polylines(svg);
  ASSERT_EQ(lines.size(), 2u);
  double bottom = lines[0].front().second, top = lines[0].back().second;
  for (const auto& line : lines) {
    EXPECT_DOUBLE_EQ(line.front().second, bottom);
    EXPECT_DOUBLE_EQ(line.back().second, top);
  }
  EXPECT_GE(bottom - top, 0.75 * height);
  EXPECT_LE(bottom, height);
}

// Jobs of 1 to 6 h (Result(.., 3): 3 and 6 h): the log axis runs 1 to 10 h (1, 2 or 5 times a
// power of ten around the data), labelled 1, 2, 5, 10, not over whole empty decades.
TEST(ReportPlots, TheCdfLogAxisHugsTheData) {
  const std::string svg = JctCdfSvg({Result("a", 1), Result("b", 3)});
  std::vector<std::string> xticks;
  for (const SvgText& t : Texts(svg)) {
    if (t.anchor == "middle" && t.cls.empty()) xticks.push_back(t.text);
  }
  EXPECT_EQ(xticks, (std::vector<std::string>{"1", "2", "5", "10"}));
}

// Samples: t=0 two queued; t=10 s eight GPUs busy, none queued; t=30 s (the end) four busy.
// Over two windows of 15 s: the first holds 0 busy for 10 s and 8 for 5 s, a mean of
// 40 / 15 = 2.667, and 2 queued for 10 s, 20 / 15 = 1.333; the second 8 busy throughout.
TEST(ReportPlots, WindowMeansAreTimeWeighted) {
  const std::vector<TimelinePoint> tl = {{0, 2, 0, 0}, {10, 0, 2, 8}, {30, 1, 1, 4}};
  const auto w = WindowMeans(tl, 30, 2);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_DOUBLE_EQ(w[0].t_s, 7.5);
  EXPECT_NEAR(w[0].busy_gpus, 40.0 / 15, 1e-12);
  EXPECT_NEAR(w[0].queued, 20.0 / 15, 1e-12);
  EXPECT_NEAR(w[0].running, 10.0 / 15, 1e-12);
  EXPECT_DOUBLE_EQ(w[1].busy_gpus, 8);
  EXPECT_DOUBLE_EQ(w[1].queued, 0);
}

// Before the first sample (at 5 s) nothing ran. The run ends at 30 s in a 40 s span of four
// windows: the last window, [30, 40), starts at the end and is left out.
TEST(ReportPlots, WindowMeansStartEmptyAndStopAtTheRunsEnd) {
  const std::vector<TimelinePoint> tl = {{5, 0, 1, 4}, {30, 0, 0, 0}};
  const auto w = WindowMeans(tl, 40, 4);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_DOUBLE_EQ(w[0].busy_gpus, 2);  // 4 GPUs for 5 of its 10 s
  EXPECT_DOUBLE_EQ(w[1].busy_gpus, 4);
  EXPECT_DOUBLE_EQ(w[2].busy_gpus, 4);
  // A span that ends mid-window: the run's end at 25 s of [20, 30) averages over [20, 25).
  const auto cut = WindowMeans({{0, 0, 1, 4}, {25, 0, 0, 0}}, 30, 3);
  ASSERT_EQ(cut.size(), 3u);
  EXPECT_DOUBLE_EQ(cut[2].busy_gpus, 4);
  EXPECT_DOUBLE_EQ(cut[2].t_s, 22.5);
  EXPECT_TRUE(WindowMeans({}, 30, 3).empty());
}

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(ReportHtml, IndexHoldsATableRowPerPolicyAndTheThreePlots) {
  const std::string html =
      IndexHtml({Result("fifo-static", 2), Result("frenzy", 1)}, {"lab-synthetic", "lab", 24, 7});
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("<html lang=\"en\">"), std::string::npos);
  EXPECT_NE(html.find("<th scope=\"row\">fifo-static</th>"), std::string::npos);
  EXPECT_NE(html.find("<th scope=\"row\">frenzy</th>"), std::string::npos);
  // The comparison and the common-jobs tables, each with a row per policy.
  EXPECT_EQ(Count(html, "<table"), 2u);
  EXPECT_EQ(Count(html, "<th scope=\"row\">"), 4u);
  EXPECT_GE(Count(html, "<th scope=\"col\">"), 10u);
  EXPECT_EQ(Count(html, "<caption>"), 2u);
  // Three figures, each an inline SVG named by its <title>, captioned.
  EXPECT_EQ(Count(html, "<figure"), 3u);
  EXPECT_EQ(Count(html, "<svg "), 3u);
  EXPECT_EQ(Count(html, "role=\"img\""), 3u);
  EXPECT_EQ(Count(html, "<figcaption>"), 3u);
  EXPECT_NE(html.find("<title>Job completion time: CDF per policy</title>"), std::string::npos);
  EXPECT_NE(html.find("seed 7"), std::string::npos);
}

TEST(ReportHtml, IndexIsOfflineAndEscapesWhatComesFromData) {
  const std::string html = IndexHtml({Result("<x>&", 2), Result("b\"'", 1)}, {"<w>", "c&d", 8, 1});
  EXPECT_NE(html.find("<th scope=\"row\">&lt;x&gt;&amp;</th>"), std::string::npos);
  EXPECT_NE(html.find("&lt;w&gt;"), std::string::npos);
  EXPECT_NE(html.find("c&amp;d"), std::string::npos);
  EXPECT_NE(html.find("b&quot;&#39;"), std::string::npos);
  EXPECT_EQ(html.find("<x>"), std::string::npos);
  EXPECT_EQ(html.find("<w>"), std::string::npos);
  EXPECT_EQ(html.find("c&d"), std::string::npos);
  // No script and nothing fetched: the only URL is the SVG namespace, links are sibling files.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find(" src="), std::string::npos);
  EXPECT_EQ(html.find("@import"), std::string::npos);
  EXPECT_EQ(Count(html, "http"), Count(html, "xmlns=\"http://www.w3.org/2000/svg\""));
  for (size_t p = html.find("href=\""); p != std::string::npos; p = html.find("href=\"", p + 1)) {
    const std::string link = html.substr(p + 6, html.find('"', p + 6) - p - 6);
    EXPECT_TRUE(std::regex_match(link, std::regex("[a-z_]+\\.(csv|json|svg)"))) << link;
  }
}

}  // namespace
}  // namespace frenzy
