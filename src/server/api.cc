#include "server/api.h"

#include <arpa/inet.h>
#include <fmt/core.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <regex>
#include <thread>

namespace frenzy::server {
namespace {

using nlohmann::json;

// Debian's cpp-httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed when the
// library was built) and does not expose its socket. More clients connecting at once than that
// (the load bench's 8, a gang of ranks reporting after a restart) overflowed the queue: the
// dropped SYNs were retransmitted a second later, a 1 s request. Linux lets a listening socket
// call listen() again with a longer queue, so find ours by its port and do that.
void RaiseListenBacklog(int port) {
  for (int fd = 3; fd < 1024; ++fd) {
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || listening == 0) {
      continue;
    }
    sockaddr_storage addr{};
    socklen_t addr_len = sizeof(addr);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &addr_len) != 0) continue;
    int bound = -1;
    if (addr.ss_family == AF_INET) {
      bound = ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
    } else if (addr.ss_family == AF_INET6) {
      bound = ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
    }
    if (bound == port) ::listen(fd, SOMAXCONN);
  }
}

HttpResponse Error(int status, const std::string& code, const std::string& message,
                   const std::string& field = {}) {
  HttpResponse r;
  r.status = status;
  r.body = json{{"error", {{"code", code}, {"message", message}, {"field", field}}}}.dump();
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
  out.body = r->dump();
  return out;
}

bool Authorized(const HttpRequest& req, const ApiOptions& o) {
  if (o.token.empty()) return true;
  const std::string prefix = "Bearer ";
  if (req.authorization.size() != prefix.size() + o.token.size()) return false;
  if (req.authorization.compare(0, prefix.size(), prefix) != 0) return false;
  // Constant time over the token's length.
  unsigned char diff = 0;
  for (size_t i = 0; i < o.token.size(); ++i) {
    diff |= static_cast<unsigned char>(req.authorization[prefix.size() + i] ^ o.token[i]);
  }
  return diff == 0;
}

}  // namespace

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

HttpResponse Handle(Daemon& d, const HttpRequest& req, const ApiOptions& o) {
  if (req.body.size() > o.max_body_bytes) {
    return Error(
        413, "too_large",
        fmt::format("request body of {} bytes; at most {}", req.body.size(), o.max_body_bytes));
  }
  const std::string& m = req.method;
  const std::string& p = req.path;
  bool mutating = m == "POST" || m == "DELETE" || m == "PUT" || m == "PATCH";
  if (mutating && !Authorized(req, o)) {
    return Error(401, "unauthorized", "this call needs 'Authorization: Bearer <token>'");
  }
  auto body = [&]() -> Result<json> {
    json j = json::parse(req.body, nullptr, false);
    if (j.is_discarded()) return InvalidArgument("the body is not valid JSON", {}, "body");
    return j;
  };
  static const std::regex kJob("^/v1/jobs/([A-Za-z0-9_-]{1,64})$");
  static const std::regex kReport("^/v1/jobs/([A-Za-z0-9_-]{1,64})/report$");
  static const std::regex kNode("^/v1/nodes/([A-Za-z0-9_.-]{1,128})/heartbeat$");
  std::smatch match;
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
      int64_t limit = -1;
      if (auto it = req.query.find("limit"); it != req.query.end()) {
        char* end = nullptr;
        limit = std::strtoll(it->second.c_str(), &end, 10);
        if (end == it->second.c_str() || *end != '\0' || limit < 0) {
          return Error(400, "invalid_argument", "must be a non-negative integer", "limit");
        }
      }
      auto st = req.query.find("state");
      return Json(d.ListJobs(st == req.query.end() ? "" : st->second, limit));
    }
    return Error(405, "method_not_allowed", m + " " + p);
  }
  if (std::regex_match(p, match, kReport)) {
    if (m != "POST") return Error(405, "method_not_allowed", m + " " + p);
    auto j = body();
    if (!j.ok()) return FromStatus(j.status());
    return Json(d.Report(match[1], *j));
  }
  if (std::regex_match(p, match, kJob)) {
    if (m == "GET") return Json(d.GetJob(match[1]));
    if (m == "DELETE") return Json(d.Cancel(match[1]));
    return Error(405, "method_not_allowed", m + " " + p);
  }
  if (std::regex_match(p, match, kNode)) {
    if (m != "POST") return Error(405, "method_not_allowed", m + " " + p);
    auto j = body();
    if (!j.ok()) return FromStatus(j.status());
    return Json(d.Heartbeat(match[1], *j));
  }
  if (p == "/v1/cluster" && m == "GET") return Json(Result<json>(d.ClusterJson()));
  if (p == "/v1/plan" && m == "POST") {
    auto j = body();
    if (!j.ok()) return FromStatus(j.status());
    return Json(d.Plan(*j));
  }
  return Error(404, "not_found", "no such endpoint: " + m + " " + p);
}

// Connections served at once (runs' reports, agents' heartbeats, CLI and API clients).
constexpr size_t kHttpWorkers = 64;

Status Serve(Daemon& d, const std::string& host, int port, const ApiOptions& o,
             const std::atomic<bool>& stop) {
  httplib::Server server;
  // Let bodies through to Handle, which answers 413 in the API's own format.
  server.set_payload_max_length(o.max_body_bytes * 4);
  server.set_read_timeout(5, 0);
  // Responses go out as header and body writes: without this, Nagle and delayed ACKs add
  // ~40 ms to every keep-alive request.
  server.set_tcp_nodelay(true);
  // Every open keep-alive connection holds one worker thread, and cpp-httplib's defaults (as
  // many workers as cores, at least 8, and a connection closed after 5 requests) made clients
  // beyond the eighth, and every fifth request, wait for a worker: up to a second.
  server.new_task_queue = [] { return new httplib::ThreadPool(kHttpWorkers); };
  server.set_keep_alive_max_count(1000);
  auto handler = [&](const httplib::Request& in, httplib::Response& out) {
    HttpRequest req;
    req.method = in.method;
    req.path = in.path;
    for (const auto& [k, v] : in.params) req.query[k] = v;
    req.authorization = in.get_header_value("Authorization");
    req.body = in.body;
    HttpResponse r;
    try {
      r = Handle(d, req, o);
    } catch (const std::exception& e) {
      r = Error(500, "internal", e.what());
    }
    out.status = r.status;
    out.set_content(r.body, r.content_type);
  };
  server.Get(".*", handler);
  server.Post(".*", handler);
  server.Delete(".*", handler);
  server.Put(".*", handler);
  if (!server.bind_to_port(host, port)) {
    return InvalidArgument(fmt::format("cannot listen on {}:{}", host, port), {}, "listen");
  }
  RaiseListenBacklog(port);
  std::thread watcher([&] {
    while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    server.stop();
  });
  server.listen_after_bind();
  watcher.join();
  return Status::Ok();
}

}  // namespace frenzy::server
