// The REST API (under /api/v1), health checks, /metrics, /openapi.json and
// the dashboard's static files, as one HTTP handler over the Engine.
//
// Every route is one row of a table (RestApi::Routes()): its method, its
// path, who may call it, its handler and its OpenAPI description. The table
// is the router and the source of /openapi.json's paths, so a route cannot
// be served undocumented or documented unserved. A handler returns a
// Result<json> (or, for the few answers that are no JSON document, a
// Result<HttpResponse>); its errors become HTTP in one place, ErrorResponse
// (server/http/http_status.h).
//
// Auth: with a token set, every route except /healthz, /readyz (and
// /metrics with public_metrics) and the dashboard's static files (only
// those the dashboard loads: server/http/web_files.h) needs
// "Authorization: Bearer <token>" (the scheme in any case, RFC 7235);
// /api/v1/events also takes it as ?access_token= (a browser's EventSource
// cannot set headers). Tokens are compared in constant time.
//
// Before auth, every request but /healthz passes the browser guard
// (server/http/browser_guard.h: Host, Origin, Content-Type), token or not.
// A request with a body is checked on its headers, before the body is read
// (Admit, through HttpServerOptions::admit).
// HEAD is answered as GET (the HTTP server sends no body).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "server/engine/engine.h"
#include "server/engine/event_bus.h"
#include "server/http/browser_guard.h"
#include "server/http/http_server.h"
#include "server/http/http_status.h"
#include "server/metrics/metrics.h"

namespace hpo::server {

struct ApiOptions {
  std::string token;      // empty: no auth
  std::string web_root;   // empty: no dashboard files
  int max_page = 10'000;  // largest page a list call returns
  // Serve /metrics without the token (Prometheus scrapers often carry none).
  bool public_metrics = false;
  BrowserGuardOptions guard;
};

class RestApi {
 public:
  RestApi(Engine& engine, EventBus& events, metrics::Registry& metrics, ApiOptions options);
  HttpResponse Handle(const HttpRequest& req);
  // Sets the HTTP server's hooks that belong to this API: is_read
  // (IsBackgroundRead), is_probe (IsProbe) and admit (Admit). The API must
  // outlive the server.
  void Attach(HttpServerOptions& options);
  // Before a request's body is read: the browser guard, the token and the
  // Content-Type, as Handle checks them; the refusal, or nullopt when the
  // body may be read. So no one without the token makes the server buffer
  // a body.
  std::optional<HttpResponse> Admit(const HttpRequest& req);
  // /healthz and /readyz: answered even when the HTTP server's budgets for
  // bodies and responses are spent (HttpServerOptions::is_probe).
  static bool IsProbe(const HttpRequest& req);
  // Whether `req` is a read that yields to the workers' RPCs under load
  // (HttpServerOptions::is_read): a GET or HEAD, except the health probes,
  // which must answer a saturated server within their timeout (a liveness
  // probe's is 1 s on Kubernetes, and one that times out restarts the
  // server). /metrics is a read: a scrape waits up to its timeout (10 s by
  // default), and rendering it at the server's priority, as often as
  // bench/load's REST clients ask, raised the RPC p99 from 197 to 413-524 ms.
  static bool IsBackgroundRead(const HttpRequest& req);
  // The OpenAPI 3 document served at /openapi.json: the fixed parts of
  // server/http/openapi.cc and one operation per row of Routes().
  static const std::string& OpenApi();

  // Who may call a route.
  enum class Access {
    kProbe,    // anyone, before the browser guard (/healthz: load balancers probe it by name)
    kOpen,     // anyone who passes the browser guard (/readyz)
    kMetrics,  // the token, unless ApiOptions::public_metrics
    kToken,    // the token
    kStream,   // the token, in the header or as ?access_token= (the event stream)
  };
  // What a matched route's handler sees: the request and the {id} of its
  // path ("" for paths without one).
  struct RouteCall {
    const HttpRequest& req;
    std::string id;
  };
  using JsonHandler = Result<nlohmann::json> (RestApi::*)(const RouteCall&);
  using RawHandler = Result<HttpResponse> (RestApi::*)(const RouteCall&);
  struct Route {
    const char* method;  // "GET", "POST"
    // As OpenAPI writes it: "/api/v1/experiments/{id}:cancel". "{id}" matches
    // one path segment; a ":verb" ends the last one.
    const char* path;
    Access access;
    int ok_status;  // what a JsonHandler's success answers: 200, 201 for a create
    std::variant<JsonHandler, RawHandler> handler;
    const char* openapi;  // the OpenAPI operation object, as JSON text
  };
  static const std::vector<Route>& Routes();

 private:
  // The row for the request's method and path, or null.
  static const Route* Find(const HttpRequest& req, std::string* id);
  // A GET the dashboard's static files answer (a web root is set and the
  // path is no route and not under /api/).
  bool IsDashboardFile(const HttpRequest& req, const Route* route) const;
  bool Authorized(const HttpRequest& req, const Route* route) const;
  // The browser guard, auth and Content-Type, in that order; the refusal,
  // or nullopt when the request may go on to its route or file.
  std::optional<HttpResponse> Gate(const HttpRequest& req, const Route* route) const;
  // hpo_http_requests_total and, at debug level, the log line.
  void Count(const HttpRequest& req, const HttpResponse& r);
  // Health, the browser guard, auth, then the route or a static file.
  HttpResponse Answer(const HttpRequest& req);
  // One line per request at --log-level debug: method, path and query (the
  // value of any parameter IsCredentialName names replaced by REDACTED),
  // status, body size, peer.
  static void LogRequest(const HttpRequest& req, const HttpResponse& r);
  Result<HttpResponse> Dispatch(const Route& route, const RouteCall& call);
  Result<HttpResponse> Static(const HttpRequest& req);

  // The handlers, one per row of Routes().
  Result<HttpResponse> Healthz(const RouteCall& call);
  Result<HttpResponse> Readyz(const RouteCall& call);
  Result<HttpResponse> Metrics(const RouteCall& call);
  Result<HttpResponse> OpenApiDocument(const RouteCall& call);
  Result<HttpResponse> Events(const RouteCall& call);
  Result<nlohmann::json> ListWorkers(const RouteCall& call);
  Result<nlohmann::json> CreateExperiment(const RouteCall& call);
  Result<nlohmann::json> ValidateExperiment(const RouteCall& call);
  Result<nlohmann::json> ListExperiments(const RouteCall& call);
  Result<nlohmann::json> GetExperiment(const RouteCall& call);
  Result<nlohmann::json> CancelExperiment(const RouteCall& call);
  Result<nlohmann::json> BestTrial(const RouteCall& call);
  Result<nlohmann::json> Pareto(const RouteCall& call);
  Result<nlohmann::json> LearningCurves(const RouteCall& call);  // server/http/dashboard.h
  Result<nlohmann::json> SystemTuning(const RouteCall& call);    // server/http/dashboard.h
  Result<nlohmann::json> CurveChanges(store::Id experiment_id, const std::string& metric,
                                      int64_t since);
  Result<nlohmann::json> SuggestTrials(const RouteCall& call);
  Result<nlohmann::json> ListTrials(const RouteCall& call);
  Result<nlohmann::json> GetTrial(const RouteCall& call);
  Result<nlohmann::json> ReportMeasurement(const RouteCall& call);
  Result<nlohmann::json> CompleteTrial(const RouteCall& call);
  Result<nlohmann::json> FailTrial(const RouteCall& call);
  Result<nlohmann::json> FinishTrial(const RouteCall& call, bool failed);
  // A trial's `latest` and `device_seconds` (TrialJson), read for it alone.
  Status AddProgress(nlohmann::json& trial_json, const store::TrialRecord& t);

  Engine& engine_;
  EventBus& events_;
  metrics::Registry& metrics_;
  ApiOptions options_;
  metrics::Histogram* request_seconds_;
  std::set<std::string> web_files_;  // DashboardFiles(web_root), as request paths
};

// Whether a query parameter's name may carry a credential: it holds
// "token", "secret", "password", "passwd", "key" or "auth", in any case.
bool IsCredentialName(const std::string& name);

}  // namespace hpo::server
