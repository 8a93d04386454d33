#include "server/api.h"

#include <arpa/inet.h>
#include <fmt/core.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <regex>
#include <string_view>

#include "common/json_limits.h"
#include "common/strings.h"
#include "server/ui_assets.h"

namespace frenzy::server {
namespace {

using nlohmann::json;

HttpResponse Error(int status, const std::string& code, const std::string& message,
                   const std::string& field = {}) {
  HttpResponse r;
  r.status = status;
  r.body = ErrorJson(code, message, field);
  return r;
}

HttpResponse FromStatus(const Status& st) {
  switch (st.code()) {
    case StatusCode::kInvalidArgument:
      return Error(400, "invalid_argument", st.message(), st.field());
    case StatusCode::kNotFound:
      return Error(404, "not_found", st.message(), st.field());
    case StatusCode::kFailedPrecondition:
      return Error(409, "failed_precondition", st.message(), st.field());
    default:
      return Error(500, "internal", st.ToString(), st.field());
  }
}

HttpResponse Json(const Result<json>& r, int status = 200) {
  if (!r.ok()) return FromStatus(r.status());
  HttpResponse out;
  out.status = status;
  out.body = DumpJson(*r);
  return out;
}

// The bearer token of the request ("" if none or not a bearer).
std::string BearerToken(const HttpRequest& req) {
  const std::string prefix = "Bearer ";
  if (req.authorization.compare(0, prefix.size(), prefix) != 0) return {};
  return req.authorization.substr(prefix.size());
}

bool IsAdmin(const HttpRequest& req, const ApiOptions& o) {
  if (o.token.empty()) return true;
  return EqualConstantTime(BearerToken(req), o.token);
}

// "127.0.0.1:8470", "localhost", "[::1]:8470" -> the host part.
std::string HostPart(std::string_view host) {
  if (host.starts_with("[")) {
    size_t close = host.find(']');
    return std::string(host.substr(1, close == std::string_view::npos ? host.npos : close - 1));
  }
  size_t colon = host.rfind(':');
  if (colon != std::string_view::npos && host.find(':') == colon) host = host.substr(0, colon);
  return std::string(host);
}

// Without a token the API trusts whoever can reach the loopback address, so it must not be
// reachable from a web page: a browser sends any page's form or fetch to 127.0.0.1, and DNS
// rebinding sends it under a foreign name. A page cannot send application/json cross-origin
// without a preflight (which nothing here answers), and cannot forge Host or Origin.
std::optional<HttpResponse> RefuseBrowsers(const HttpRequest& req, bool mutating) {
  if (!req.host.empty() && !IsLoopback(HostPart(req.host))) {
    return Error(403, "forbidden", "no token is configured: only loopback Host names are served",
                 "Host");
  }
  if (!req.origin.empty()) {
    std::string_view origin = req.origin;
    size_t scheme = origin.find("://");
    std::string_view rest = scheme == std::string_view::npos ? origin : origin.substr(scheme + 3);
    if (!IsLoopback(HostPart(rest.substr(0, rest.find('/'))))) {
      return Error(403, "forbidden", "no token is configured: cross-origin requests are refused",
                   "Origin");
    }
  }
  if (mutating && req.method == "POST") {
    std::string_view type = req.content_type;
    type = type.substr(0, type.find(';'));
    while (!type.empty() && type.back() == ' ') type.remove_suffix(1);
    if (type != "application/json") {
      return Error(415, "unsupported_media_type", "the body must be sent as application/json",
                   "Content-Type");
    }
  }
  return std::nullopt;
}

// The integer query parameter `name` within [lo, hi], `fallback` when absent; nullopt when it is
// not a whole integer in range.
std::optional<int64_t> QueryInt(const HttpRequest& req, const std::string& name, int64_t lo,
                                int64_t hi, int64_t fallback) {
  auto it = req.query.find(name);
  if (it == req.query.end()) return fallback;
  char* end = nullptr;
  errno = 0;
  const int64_t v = std::strtoll(it->second.c_str(), &end, 10);
  if (end == it->second.c_str() || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
    return std::nullopt;
  }
  return v;
}

// A dashboard file, with headers that keep the page to itself: scripts, styles and requests
// from this origin only (no inline script, so injected markup cannot run), never framed, no
// content-type sniffing, no referrer. The page holds no token: a user types it, the page keeps
// it in the tab's session storage and sends it as a bearer header.
HttpResponse UiResponse(const UiAsset& asset) {
  HttpResponse r;
  r.content_type = std::string(asset.content_type);
  r.body = std::string(asset.body);
  r.headers = {{"Content-Security-Policy",
                "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                "img-src 'self' data:; base-uri 'none'; form-action 'none'; "
                "frame-ancestors 'none'"},
               {"X-Content-Type-Options", "nosniff"},
               {"X-Frame-Options", "DENY"},
               {"Referrer-Policy", "no-referrer"},
               {"Cache-Control", "no-cache"}};
  return r;
}

}  // namespace

std::string ErrorJson(const std::string& code, const std::string& message,
                      const std::string& field) {
  return DumpJson(json{{"error", {{"code", code}, {"message", message}, {"field", field}}}});
}

bool IsLoopback(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  // A whole dotted quad in 127.0.0.0/8: "127.0.0.1.evil.example" is a name anyone can own.
  in_addr a{};
  return inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

HttpResponse Handle(Daemon& d, const HttpRequest& req, const ApiOptions& o) {
  if (req.body.size() > o.max_body_bytes) {
    return Error(
        413, "too_large",
        fmt::format("request body of {} bytes; at most {}", req.body.size(), o.max_body_bytes));
  }
  const std::string& m = req.method;
  const std::string& p = req.path;
  // Echoed in errors, cut short: a path may be kilobytes long.
  const std::string what = Utf8Prefix(m, 16) + " " + Utf8Prefix(p, 256);
  bool mutating = m == "POST" || m == "DELETE" || m == "PUT" || m == "PATCH";
  if (o.token.empty()) {
    if (auto refused = RefuseBrowsers(req, mutating)) return *refused;
  }
  const bool admin = IsAdmin(req, o);
  auto body = [&]() -> Result<json> {
    // Bounded before parsing: a deeply nested value would overflow the stack when stored or
    // served back (json_limits.h).
    return ParseJsonBounded(req.body, "body", JsonLimits{64, o.max_body_bytes});
  };
  static const std::regex kReport("^/v1/jobs/([A-Za-z0-9_-]{1,64})/report$");
  std::smatch match;
  if (std::regex_match(p, match, kReport)) {
    if (m != "POST") return Error(405, "method_not_allowed", what);
    // A run's own token reports for its own job, and is good for nothing else.
    if (!admin && !d.RunTokenValid(match[1], BearerToken(req))) {
      return BearerToken(req).empty()
                 ? Error(401, "unauthorized", "this call needs 'Authorization: Bearer <token>'")
                 : Error(403, "forbidden", "this token may not report for this job");
    }
    auto j = body();
    if (!j.ok()) return FromStatus(j.status());
    return Json(d.Report(match[1], *j));
  }
  if (const UiAsset* asset = FindUiAsset(p)) {
    if (m != "GET") return Error(405, "method_not_allowed", what);
    return UiResponse(*asset);
  }
  if ((p == "/healthz" || p == "/metrics" || p == "/v1/cluster") && m != "GET") {
    return Error(405, "method_not_allowed", what);
  }
  if (mutating && !admin) {
    return Error(401, "unauthorized", "this call needs 'Authorization: Bearer <token>'");
  }
  static const std::regex kJob("^/v1/jobs/([A-Za-z0-9_-]{1,64})$");
  static const std::regex kLog("^/v1/jobs/([A-Za-z0-9_-]{1,64})/log$");
  static const std::regex kNode("^/v1/nodes/([A-Za-z0-9_.-]{1,128})/heartbeat$");
  if (p == "/healthz" && m == "GET") {
    HttpResponse r;
    r.body = json{{"ok", true}, {"backend", d.backend_name()}}.dump();
    return r;
  }
  if (p == "/metrics" && m == "GET") {
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4";
    r.body = d.Metrics();
    return r;
  }
  if (p == "/v1/jobs") {
    if (m == "POST") {
      auto j = body();
      if (!j.ok()) return FromStatus(j.status());
      return Json(d.Submit(*j), 201);
    }
    if (m == "GET") {
      const auto limit =
          QueryInt(req, "limit", 0, std::numeric_limits<int64_t>::max(), /*fallback=*/-1);
      if (!limit) return Error(400, "invalid_argument", "must be a non-negative integer", "limit");
      auto st = req.query.find("state");
      return Json(d.ListJobs(st == req.query.end() ? "" : st->second, *limit));
    }
    return Error(405, "method_not_allowed", what);
  }
  if (std::regex_match(p, match, kJob)) {
    if (m == "GET") return Json(d.GetJob(match[1]));
    if (m == "DELETE") return Json(d.Cancel(match[1]));
    return Error(405, "method_not_allowed", what);
  }
  if (std::regex_match(p, match, kLog)) {
    if (m != "GET") return Error(405, "method_not_allowed", what);
    // What a training script prints may be private: the token shows it.
    if (!admin)
      return Error(401, "unauthorized", "this call needs 'Authorization: Bearer <token>'");
    const auto lines = QueryInt(req, "lines", 1, 200, /*fallback=*/50);
    if (!lines) return Error(400, "invalid_argument", "must be an integer from 1 to 200", "lines");
    return Json(d.LogTail(match[1], static_cast<int>(*lines)));
  }
  if (std::regex_match(p, match, kNode)) {
    if (m != "POST") return Error(405, "method_not_allowed", what);
    auto j = body();
    if (!j.ok()) return FromStatus(j.status());
    return Json(d.Heartbeat(match[1], *j));
  }
  if (p == "/v1/cluster") return Json(Result<json>(d.ClusterJson()));
  if (p == "/v1/plan") {
    if (m != "POST") return Error(405, "method_not_allowed", what);
    auto j = body();
    if (!j.ok()) return FromStatus(j.status());
    return Json(d.Plan(*j));
  }
  return Error(404, "not_found", "no such endpoint: " + what);
}

}  // namespace frenzy::server
