// The REST API (under /api/v1), health checks, /metrics, /openapi.json and
// the dashboard's static files, as one HTTP handler over the Engine.
// Status -> HTTP status conversion happens here and nowhere else.
//
// Auth: with a token set, every route except /healthz, /readyz (and
// /metrics with public_metrics) and the dashboard's static files needs
// "Authorization: Bearer <token>" (the scheme in any case, RFC 7235);
// /api/v1/events also takes it as ?access_token= (a browser's EventSource
// cannot set headers). Tokens are compared in constant time.
//
// Before auth, every request but /healthz passes the browser guard
// (server/http/browser_guard.h: Host, Origin, Content-Type), token or not.
// HEAD is answered as GET (the HTTP server sends no body).
#pragma once

#include <memory>
#include <string>

#include "server/engine.h"
#include "server/events.h"
#include "server/http/browser_guard.h"
#include "server/http/http_server.h"
#include "server/metrics.h"

namespace hpo::server {

struct ApiOptions {
  std::string token;     // empty: no auth
  std::string web_root;  // empty: no dashboard files
  int max_page = 10'000; // largest page a list call returns
  // Serve /metrics without the token (Prometheus scrapers often carry none).
  bool public_metrics = false;
  BrowserGuardOptions guard;
};

// HTTP status for an error Status (the one place this mapping lives).
int HttpStatusFor(const Status& s);
// {"error": {"code": "InvalidArgument", "message": "..."}}, with the status
// HttpStatusFor gives or, where HTTP has a more precise one than the code
// (415 for a media type), `http_status`.
HttpResponse ErrorResponse(const Status& s, int http_status = 0);

class RestApi {
 public:
  RestApi(Engine& engine, EventBus& events, metrics::Registry& metrics, ApiOptions options);
  HttpResponse Handle(const HttpRequest& req);
  // The OpenAPI 3 document served at /openapi.json.
  static const std::string& OpenApi();

 private:
  // A GET the dashboard's static files answer (a web root is set and the
  // path is no API, health, metrics or OpenAPI route).
  bool IsDashboardFile(const HttpRequest& req) const;
  bool Authorized(const HttpRequest& req) const;
  // Health, the browser guard, auth, then Route.
  HttpResponse Answer(const HttpRequest& req);
  HttpResponse Route(const HttpRequest& req);
  HttpResponse Static(const HttpRequest& req);
  HttpResponse Events(const HttpRequest& req);
  // The dashboard's read models (server/dashboard.h).
  HttpResponse LearningCurves(const HttpRequest& req, store::Id experiment_id);
  HttpResponse SystemTuning(store::Id experiment_id);

  Engine& engine_;
  EventBus& events_;
  metrics::Registry& metrics_;
  ApiOptions options_;
  metrics::Histogram* request_seconds_;
};

}  // namespace hpo::server
