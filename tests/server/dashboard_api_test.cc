// What the dashboard reads and is served, through Handle() without a socket: the embedded page
// and its headers, a job's options and memory readings, the cluster's usage history, the log
// tail, the plan's Pareto set. The page itself runs in Chromium in
// tests/integration/dashboard_browser.py.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "daemon_fixture.h"
#include "server/api.h"

namespace frenzy::server {
namespace {

using nlohmann::json;
using test_util::Fixture;
using test_util::Spec;

constexpr const char* kToken = "s3cret-dash";

HttpResponse Call(Daemon& d, const std::string& method, const std::string& path,
                  const std::string& body = "", bool auth = false,
                  std::map<std::string, std::string> query = {}) {
  HttpRequest r;
  r.method = method;
  r.path = path;
  r.body = body;
  r.query = std::move(query);
  if (auth) r.authorization = std::string("Bearer ") + kToken;
  ApiOptions o;
  o.token = kToken;
  return Handle(d, r, o);
}

std::string Header(const HttpResponse& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return "";
}

TEST(Dashboard, PageAndAssetsAreServedLockedDownAndWithoutTheToken) {
  Fixture f("dash-assets");
  auto d = f.Make();
  HttpResponse page = Call(*d, "GET", "/");
  ASSERT_EQ(page.status, 200);
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  EXPECT_NE(page.body.find("<script src=\"/ui/app.js\""), std::string::npos);
  EXPECT_EQ(page.body.find(kToken), std::string::npos);
  // Scripts only from the daemon itself, no inline script, no framing, no sniffing.
  const std::string csp = Header(page, "Content-Security-Policy");
  EXPECT_NE(csp.find("default-src 'none'"), std::string::npos) << csp;
  EXPECT_NE(csp.find("script-src 'self'"), std::string::npos) << csp;
  EXPECT_EQ(csp.find("unsafe-inline"), std::string::npos) << csp;
  EXPECT_NE(csp.find("frame-ancestors 'none'"), std::string::npos) << csp;
  EXPECT_EQ(Header(page, "X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(Header(page, "X-Frame-Options"), "DENY");
  EXPECT_EQ(Call(*d, "GET", "/index.html").body, page.body);

  HttpResponse js = Call(*d, "GET", "/ui/app.js");
  ASSERT_EQ(js.status, 200);
  EXPECT_EQ(js.content_type, "text/javascript; charset=utf-8");
  EXPECT_NE(js.body.find("sessionStorage"), std::string::npos);  // where the typed token lives
  EXPECT_EQ(js.body.find("localStorage"), std::string::npos);
  EXPECT_EQ(Call(*d, "GET", "/ui/app.css").content_type, "text/css; charset=utf-8");

  EXPECT_EQ(Call(*d, "POST", "/", "", true).status, 405);
  EXPECT_EQ(Call(*d, "DELETE", "/ui/app.js", "", true).status, 405);
  EXPECT_EQ(Call(*d, "GET", "/ui/other.js").status, 404);
  EXPECT_EQ(Call(*d, "GET", "/ui/../frenzy.db").status, 404);
}

TEST(Dashboard, AJobShowsItsOptionsTheChosenOneAndItsMemoryReadings) {
  Fixture f("dash-job");
  auto d = f.Make();
  // 1e11 tokens: days at the sim backend's 3,600 simulated seconds a second, so it still runs.
  ASSERT_EQ(Call(*d, "POST", "/v1/jobs", Spec("llama-2-7b", 1e11).dump(), true).status, 201);
  ASSERT_TRUE(d->Tick().ok());
  for (int i = 0; i < 4; ++i) {
    f.now += 10;
    ASSERT_TRUE(d->Tick().ok());
  }
  json j = json::parse(Call(*d, "GET", "/v1/jobs/j-000001").body);
  ASSERT_EQ(j["state"], "running") << j.dump();
  const json& plan = j["plan"];
  int chosen = 0;
  for (const json& o : j["options"]) {
    // Every option the table offers is memory-safe: its prediction within its GPU's memory.
    EXPECT_LE(o["device_bytes"].get<int64_t>(), o["gpu_memory_bytes"].get<int64_t>()) << o;
    EXPECT_GT(o["tokens_per_s"].get<double>(), 0) << o;
    if (o["chosen"].get<bool>()) {
      ++chosen;
      EXPECT_EQ(o["gpu"], plan["gpu"]);
      EXPECT_EQ(o["gpus"], plan["gpus"]);
      EXPECT_DOUBLE_EQ(o["tokens_per_s"].get<double>(), plan["tokens_per_s"].get<double>());
      // Time left: the tokens not yet trained at the option's speed.
      const double left =
          j["progress"]["tokens_total"].get<double>() - j["progress"]["tokens_done"].get<double>();
      EXPECT_NEAR(o["time_left_s"].get<double>(), left / o["tokens_per_s"].get<double>(), 1e-6);
    }
  }
  EXPECT_EQ(chosen, 1) << j["options"].dump();
  EXPECT_GE(j["options"].size(), 2u);  // the lab has three GPU types: more than one choice

  const json& readings = j["memory"]["readings"];
  ASSERT_GE(readings.size(), 2u) << j["memory"].dump();
  for (size_t i = 0; i < readings.size(); ++i) {
    EXPECT_GT(readings[i]["peak_bytes"].get<int64_t>(), 0);
    EXPECT_EQ(readings[i]["predicted_bytes"], plan["device_bytes"]);
    if (i) {
      EXPECT_GT(readings[i]["t_s"].get<double>(), readings[i - 1]["t_s"].get<double>());
    }
  }
  // A job that has ended has no option table left to show.
  ASSERT_EQ(Call(*d, "DELETE", "/v1/jobs/j-000001", "", true).status, 200);
  ASSERT_TRUE(d->Tick().ok());
  EXPECT_TRUE(json::parse(Call(*d, "GET", "/v1/jobs/j-000001").body)["options"].empty());
}

TEST(Dashboard, TheClusterCountsUsedGpusPerTypeOverTime) {
  Fixture f("dash-usage");
  auto d = f.Make();
  ASSERT_TRUE(d->Tick().ok());
  json c = json::parse(Call(*d, "GET", "/v1/cluster").body);
  ASSERT_FALSE(c["usage"].empty());
  const json& first = c["usage"].back();
  ASSERT_EQ(first.size(), c["types"].size() + 1);  // [t, used of each type]
  for (size_t t = 1; t < first.size(); ++t) EXPECT_EQ(first[t], 0);

  ASSERT_EQ(Call(*d, "POST", "/v1/jobs", Spec("llama-2-7b", 5e9).dump(), true).status, 201);
  f.now += 120;
  ASSERT_TRUE(d->Tick().ok());
  json plan = json::parse(Call(*d, "GET", "/v1/jobs/j-000001").body)["plan"];
  c = json::parse(Call(*d, "GET", "/v1/cluster").body);
  const json& last = c["usage"].back();
  EXPECT_DOUBLE_EQ(last[0].get<double>(), f.now);
  EXPECT_DOUBLE_EQ(c["now_s"].get<double>(), f.now);
  for (size_t t = 0; t < c["types"].size(); ++t) {
    const json& type = c["types"][t];
    const int64_t used = type["gpu"] == plan["gpu"] ? plan["gpus"].get<int64_t>() : 0;
    EXPECT_EQ(last[t + 1].get<int64_t>(), used) << type;
    EXPECT_EQ(type["gpus"].get<int64_t>() - type["free"].get<int64_t>(), used) << type;
  }
}

TEST(Dashboard, TheLogTailIsTheNewestRunLogsLastLinesForTheTokenOnly) {
  Fixture f("dash-log");
  auto d = f.Make();
  ASSERT_EQ(Call(*d, "POST", "/v1/jobs", Spec("gpt2", 1e9, 1024).dump(), true).status, 201);
  auto tail = [&](const std::string& lines, bool auth = true) {
    return Call(*d, "GET", "/v1/jobs/j-000001/log", "", auth, {{"lines", lines}});
  };
  // No run log yet: an empty answer, not an error.
  HttpResponse none = tail("10");
  ASSERT_EQ(none.status, 200) << none.body;
  EXPECT_EQ(json::parse(none.body), json::parse(R"({"file": "", "lines": []})"));

  namespace fs = std::filesystem;
  const fs::path dir = fs::path(f.runs) / "j-000001";
  fs::create_directories(dir);
  {
    std::ofstream old(dir / "slurm-7.out");
    old << "an older attempt's output\n";
  }
  fs::last_write_time(dir / "slurm-7.out",
                      fs::file_time_type::clock::now() - std::chrono::hours(1));
  {
    std::ofstream log(dir / "rank-0.log");
    for (int i = 0; i < 300; ++i) log << "step " << i << "\n";
    log << std::string(5000, 'x') << "\n";
  }
  {
    std::ofstream other(dir / "plan.json");  // neither .log nor .out: never shown
    other << "{}\n";
  }
  HttpResponse r = tail("3");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["file"], "rank-0.log");
  ASSERT_EQ(j["lines"].size(), 3u);
  EXPECT_EQ(j["lines"][0], "step 298");
  EXPECT_EQ(j["lines"][1], "step 299");
  EXPECT_EQ(j["lines"][2].get<std::string>(), std::string(1000, 'x'));  // cut at 1,000 bytes

  EXPECT_EQ(tail("3", false).status, 401);
  EXPECT_EQ(tail("0").status, 400);
  EXPECT_EQ(tail("201").status, 400);
  EXPECT_EQ(tail("5x").status, 400);
  EXPECT_EQ(json::parse(tail("0").body)["error"]["field"], "lines");
  EXPECT_EQ(Call(*d, "GET", "/v1/jobs/j-000404/log", "", true).status, 404);
  EXPECT_EQ(Call(*d, "POST", "/v1/jobs/j-000001/log", "", true).status, 405);
  EXPECT_EQ(Call(*d, "GET", "/v1/jobs/..%2F/log", "", true).status, 404);
}

TEST(Dashboard, ThePlanAnswerHoldsItsParetoSet) {
  Fixture f("dash-plan");
  auto d = f.Make();
  HttpResponse r = Call(*d, "POST", "/v1/plan", Spec("llama-2-7b", 2e9).dump(), true);
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  const json& front = j["pareto"];
  ASSERT_GE(front.size(), 2u) << j.dump();
  // Fewest GPUs first; each more GPUs is faster, or it would not be on the front.
  for (size_t i = 0; i < front.size(); ++i) {
    EXPECT_TRUE(front[i]["pareto"].get<bool>());
    if (i) {
      EXPECT_GT(front[i]["gpus"].get<int64_t>(), front[i - 1]["gpus"].get<int64_t>());
      EXPECT_LT(front[i]["total_s"].get<double>(), front[i - 1]["total_s"].get<double>());
    }
  }
  // No plan among the best is both faster than and on as few GPUs as a front member.
  for (const json& p : j["plans"]) {
    for (const json& q : front) {
      EXPECT_FALSE(p["gpus"].get<int64_t>() <= q["gpus"].get<int64_t>() &&
                   p["total_s"].get<double>() < q["total_s"].get<double>() * (1 - 1e-9))
          << p.dump() << " beats " << q.dump();
    }
  }
}

}  // namespace
}  // namespace frenzy::server
