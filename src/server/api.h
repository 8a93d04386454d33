// The HTTP/JSON API of frenzyd, versioned under /v1 (DESIGN.md section 4):
//   POST /v1/jobs, GET /v1/jobs[?state=S&limit=N], GET /v1/jobs/{id}, DELETE /v1/jobs/{id},
//   POST /v1/jobs/{id}/report, POST /v1/plan, GET /v1/cluster, POST /v1/nodes/{name}/heartbeat,
//   GET /healthz, GET /metrics (Prometheus text); GET / and /ui/* the dashboard (ui_assets.h).
// Mutating calls need `Authorization: Bearer <token>`. Every error is a 4xx (or 500) with
// {"error": {"code", "message", "field"}}; a bad request changes nothing.
//
// Handle() is the whole API as a function of a request, so tests call it without a socket;
// Serve() puts it behind an event-driven HTTP/1.1 front (Boost.Beast).
#ifndef FRENZY_SERVER_API_H_
#define FRENZY_SERVER_API_H_

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "server/daemon.h"

namespace frenzy::server {

struct HttpRequest {
  std::string method, path;
  std::map<std::string, std::string> query;
  std::string authorization;  // the Authorization header
  std::string content_type;   // the Content-Type header
  std::string host, origin;   // the Host and Origin headers ("" when absent)
  std::string peer;           // the client's address
  std::string body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers (the dashboard's)
};

struct ApiOptions {
  std::string token;                // "" only on a loopback address (the caller checks)
  size_t max_body_bytes = 1 << 20;  // larger bodies: 413
  // The HTTP front's bounds (see http_front.cc): a request's line and headers must arrive
  // within header_timeout_s of the connection becoming idle (this also closes idle keep-alive
  // connections), its body within body_timeout_s of the headers.
  double header_timeout_s = 10;
  double body_timeout_s = 30;
  size_t max_connections = 1024;
  size_t max_connections_per_client = 128;
};

HttpResponse Handle(Daemon& daemon, const HttpRequest& request, const ApiOptions& options);

// Serves until `stop` becomes true (checked a few times a second). Fails when the address
// cannot be bound (in use by another process included: the port is never shared).
// `on_listening`, if set, is called with the bound port (useful with port 0) once connections
// are accepted. Defined in http_front.cc.
Status Serve(Daemon& daemon, const std::string& host, int port, const ApiOptions& options,
             const std::atomic<bool>& stop, const std::function<void(int)>& on_listening = {});

// The API's error body: {"error": {"code", "message", "field"}} (bytes that are not UTF-8
// replaced), for Handle() and the HTTP front alike.
std::string ErrorJson(const std::string& code, const std::string& message,
                      const std::string& field = {});

// True for an address in 127.0.0.0/8, ::1 and "localhost" (names under them are not).
bool IsLoopback(const std::string& host);

}  // namespace frenzy::server

#endif  // FRENZY_SERVER_API_H_
