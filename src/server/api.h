// The HTTP/JSON API of frenzyd, versioned under /v1 (DESIGN.md section 4):
//   POST /v1/jobs, GET /v1/jobs[?state=S&limit=N], GET /v1/jobs/{id}, DELETE /v1/jobs/{id},
//   POST /v1/jobs/{id}/report, POST /v1/plan, GET /v1/cluster, POST /v1/nodes/{name}/heartbeat,
//   GET /healthz, GET /metrics (Prometheus text).
// Mutating calls need `Authorization: Bearer <token>`. Every error is a 4xx (or 500) with
// {"error": {"code", "message", "field"}}; a bad request changes nothing.
//
// Handle() is the whole API as a function of a request, so tests call it without a socket;
// Serve() puts it behind cpp-httplib.
#ifndef FRENZY_SERVER_API_H_
#define FRENZY_SERVER_API_H_

#include <atomic>
#include <map>
#include <string>

#include "common/status.h"
#include "server/daemon.h"

namespace frenzy::server {

struct HttpRequest {
  std::string method, path;
  std::map<std::string, std::string> query;
  std::string authorization;  // the Authorization header
  std::string body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

struct ApiOptions {
  std::string token;                 // "" only on a loopback address (the caller checks)
  size_t max_body_bytes = 1 << 20;   // larger bodies: 413
};

HttpResponse Handle(Daemon& daemon, const HttpRequest& request, const ApiOptions& options);

// Serves until `stop` becomes true (checked a few times a second). Fails when the address
// cannot be bound.
Status Serve(Daemon& daemon, const std::string& host, int port, const ApiOptions& options,
             const std::atomic<bool>& stop);

// True for 127.0.0.0/8, ::1 and "localhost".
bool IsLoopback(const std::string& host);

}  // namespace frenzy::server

#endif  // FRENZY_SERVER_API_H_
