#include "server/http/api.h"

#include <spdlog/spdlog.h>

#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/json_limits.h"
#include "common/token.h"
#include "server/engine/space_map.h"
#include "server/engine/trial_run.h"
#include "server/http/dashboard.h"
#include "server/http/read_cursor.h"
#include "server/http/web_files.h"

namespace hpo::server {

using nlohmann::json;
using store::Id;

namespace {

// What the server stored itself: no size limit (a spec's JSON form may be
// larger than its YAML text), but the nesting limit all the same, so a value
// written by an older server cannot overflow the stack of the reply's dump().
json ParseOr(const std::string& text, const json& fallback) {
  const JsonLimits stored{kMaxJsonDepth, SIZE_MAX, SIZE_MAX};
  auto j = ParseJson(text, "stored value", stored);
  return j.ok() ? std::move(j).value() : fallback;
}

template <typename T>
json Opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

// `spec`: the trial's experiment's, for its seed (null when it cannot be
// read: the trial is still shown, with a null seed).
json TrialJson(const store::TrialRecord& t, const SpaceMap& space_names,
               const ExperimentSpec* spec) {
  json j = {{"id", t.id},
            {"experiment_id", t.experiment_id},
            {"number", t.number},
            {"space", nullptr},
            {"params", ParseOr(t.params_json, json::object())},
            {"system", ParseOr(t.system_params_json, json::object())},
            {"state", store::ToString(t.state)},
            {"priority", t.priority},
            {"attempt", t.attempt},
            {"lease_owner", t.lease_owner},
            {"lease_expires_ms", Opt(t.lease_expires_ms)},
            {"created_ms", t.created_ms},
            {"started_ms", Opt(t.started_ms)},
            {"finished_ms", Opt(t.finished_ms)},
            {"final_metrics",
             t.final_metrics_json.empty() ? json(nullptr) : ParseOr(t.final_metrics_json, nullptr)},
            {"reason", t.reason},
            {"level", t.level},
            {"stop_step", Opt(t.stop_step)},
            {"resume_step", t.resume_step},
            // The same seed a worker's lease carries (Trial.seed), so an
            // ask/tell client can run the trial reproducibly too.
            {"seed", spec ? json(TrialSeed(*spec, t.number)) : json(nullptr)},
            // How far it got (SetProgress): what a paused, pruned or cut
            // trial reached, and its training time without pauses.
            {"latest", nullptr},
            {"best", nullptr},
            {"device_seconds", 0},
            {"device_class", nullptr}};
  if (t.space_id) {
    if (const std::string& name = space_names.NameOf(*t.space_id); !name.empty()) j["space"] = name;
  }
  return j;
}

// A trial's last and best stored steps, its training time and the device
// class that trained it longest, in TrialJson's fields.
void SetProgress(json& trial, const store::TrialProgress& p) {
  if (p.steps == 0) return;
  trial["latest"] = {{"step", p.last_step},
                     {"metrics", ParseOr(p.last_metrics_json, json::object())}};
  trial["best"] = {{"step", p.best_step},
                   {"metrics", ParseOr(p.best_metrics_json, json::object())}};
  trial["device_seconds"] = static_cast<double>(p.device_ms) / 1000.0;
  if (!p.device_class.empty()) trial["device_class"] = p.device_class;
}

// The experiment's spec, or null when it cannot be read (TrialJson then
// shows no seed rather than failing the whole answer).
std::shared_ptr<const ExperimentSpec> SpecOrNull(Engine& engine, Id experiment_id) {
  auto spec = engine.Spec(experiment_id);
  return spec.ok() ? *spec : nullptr;
}

json CountsJson(const store::TrialCounts& n) {
  return {{"pending", n.pending}, {"leased", n.leased},       {"running", n.running},
          {"paused", n.paused},   {"completed", n.completed}, {"pruned", n.pruned},
          {"failed", n.failed},   {"cancelled", n.cancelled}, {"total", n.total()}};
}

Result<Id> ParseId(const std::string& text, const char* what) {
  Id id = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (ec != std::errc() || p != text.data() + text.size() || id <= 0) {
    return Status::InvalidArgument(std::string(what) + " id '" + text +
                                   "' is not a positive integer");
  }
  return id;
}

Result<int64_t> QueryInt(const HttpRequest& req, const std::string& key, int64_t fallback,
                         int64_t lo, int64_t hi) {
  auto it = req.query.find(key);
  if (it == req.query.end()) return fallback;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
  if (ec != std::errc() || p != it->second.data() + it->second.size() || v < lo || v > hi) {
    return Status::InvalidArgument("query parameter " + key + ": must be an integer in [" +
                                   std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v;
}

Result<bool> QueryBool(const HttpRequest& req, const std::string& key, bool fallback) {
  auto it = req.query.find(key);
  if (it == req.query.end()) return fallback;
  if (it->second == "true" || it->second == "1") return true;
  if (it->second == "false" || it->second == "0") return false;
  return Status::InvalidArgument("query parameter " + key + ": must be true or false, not '" +
                                 it->second + "'");
}

// Every JSON body goes through the limits of json_limits.h before a route
// copies or walks any of it.
Result<json> Body(const HttpRequest& req) {
  if (req.body.empty()) return json::object();
  HPO_ASSIGN_OR_RETURN(json j, ParseJson(req.body, "body"));
  if (!j.is_object()) return Status::InvalidArgument("body: must be a JSON object");
  return j;
}

// Splits "/api/v1/experiments/12:cancel" into its segments
// {"api", "v1", "experiments", "12"} and the verb "cancel": a trailing
// ":verb" is split off the last segment; empty segments are skipped. Route
// paths and request paths are split alike and compared segment by segment.
struct Path {
  std::vector<std::string> segments;
  std::string verb;
};
Path SplitPath(const std::string& path) {
  Path out;
  std::stringstream ss(path);
  for (std::string seg; std::getline(ss, seg, '/');) {
    if (!seg.empty()) out.segments.push_back(seg);
  }
  if (!out.segments.empty()) {
    auto& last = out.segments.back();
    const auto colon = last.find(':');
    if (colon != std::string::npos) {
      out.verb = last.substr(colon + 1);
      last = last.substr(0, colon);
    }
  }
  return out;
}

// Whether `req` matches a route's path (split by SplitPath); the text of its
// "{id}" segment goes to *id.
bool Matches(const Path& route, const Path& req, std::string* id) {
  if (route.segments.size() != req.segments.size() || route.verb != req.verb) return false;
  std::string bound;
  for (size_t i = 0; i < route.segments.size(); ++i) {
    if (route.segments[i] == "{id}") {
      bound = req.segments[i];
    } else if (route.segments[i] != req.segments[i]) {
      return false;
    }
  }
  *id = std::move(bound);
  return true;
}

const char* ContentType(const std::filesystem::path& p) {
  const std::string ext = p.extension().string();
  if (ext == ".html") return "text/html; charset=utf-8";
  if (ext == ".js" || ext == ".mjs") return "text/javascript; charset=utf-8";
  if (ext == ".css") return "text/css; charset=utf-8";
  if (ext == ".json") return "application/json";
  if (ext == ".svg") return "image/svg+xml";
  if (ext == ".png") return "image/png";
  if (ext == ".ico") return "image/x-icon";
  return "application/octet-stream";
}

// Leased and running trials GET /api/v1/workers reads, for every experiment
// together: far more than a fleet runs at once.
constexpr int64_t kMaxLeasedTrials = 100'000;

}  // namespace

RestApi::RestApi(Engine& engine, EventBus& events, metrics::Registry& metrics, ApiOptions options)
    : engine_(engine), events_(events), metrics_(metrics), options_(std::move(options)) {
  if (!options_.web_root.empty()) web_files_ = DashboardFiles(options_.web_root);
  request_seconds_ =
      &metrics_.histogram("hpo_http_request_duration_seconds", "REST request latency, all routes",
                          metrics::ExponentialBuckets(0.0005, 2, 14));
}

const RestApi::Route* RestApi::Find(const HttpRequest& req, std::string* id) {
  // Split once: the table is fixed for the life of the process.
  static const std::vector<Path> kPaths = [] {
    std::vector<Path> out;
    for (const Route& r : Routes()) out.push_back(SplitPath(r.path));
    return out;
  }();
  const Path path = SplitPath(req.path);
  const auto& routes = Routes();
  for (size_t i = 0; i < routes.size(); ++i) {
    if (req.method == routes[i].method && Matches(kPaths[i], path, id)) return &routes[i];
  }
  return nullptr;
}

bool RestApi::IsDashboardFile(const HttpRequest& req, const Route* route) const {
  return route == nullptr && req.method == "GET" && !options_.web_root.empty() &&
         req.path.rfind("/api/", 0) != 0;
}

bool RestApi::Authorized(const HttpRequest& req, const Route* route) const {
  if (options_.token.empty()) return true;
  // The dashboard's files hold no data, and a browser sends no header when
  // it opens a page; the data those pages fetch needs the token.
  if (IsDashboardFile(req, route)) return true;
  const std::string authorization = req.Header("authorization");
  if (const auto given = BearerToken(authorization)) return TokenEquals(*given, options_.token);
  // A browser's EventSource cannot set headers: the event stream (and only
  // it) also takes the token as ?access_token=.
  if (route != nullptr && route->access == Access::kStream) {
    const auto it = req.query.find("access_token");
    return it != req.query.end() && TokenEquals(it->second, options_.token);
  }
  return false;
}

bool IsCredentialName(const std::string& name) {
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* word : {"token", "secret", "password", "passwd", "key", "auth"}) {
    if (lower.find(word) != std::string::npos) return true;
  }
  return false;
}

void RestApi::Attach(HttpServerOptions& options) {
  options.is_read = &RestApi::IsBackgroundRead;
  options.is_probe = &RestApi::IsProbe;
  options.admit = [this](const HttpRequest& req) { return Admit(req); };
}

bool RestApi::IsProbe(const HttpRequest& req) {
  return req.path == "/healthz" || req.path == "/readyz";
}

std::optional<HttpResponse> RestApi::Admit(const HttpRequest& req) {
  std::string id;
  const Route* route = Find(req, &id);
  std::optional<HttpResponse> refused = Gate(req, route);
  if (refused) Count(req, *refused);
  return refused;
}

HttpResponse RestApi::Handle(const HttpRequest& original) {
  metrics::ScopedTimer timer(*request_seconds_);
  // HEAD is GET without the body, which the HTTP server leaves out.
  HttpRequest as_get;
  const bool head = original.method == "HEAD";
  if (head) {
    as_get = original;
    as_get.method = "GET";
  }
  const HttpRequest& req = head ? as_get : original;
  HttpResponse r = Answer(req);
  Count(original, r);
  return r;
}

void RestApi::Count(const HttpRequest& req, const HttpResponse& r) {
  // Any other method is "other": a label per invented method would grow
  // /metrics without bound.
  static const std::set<std::string> kMethods = {"GET",   "POST", "PUT",    "DELETE",
                                                 "PATCH", "HEAD", "OPTIONS"};
  metrics_
      .counter("hpo_http_requests_total", "REST requests by method and status",
               {{"method", kMethods.count(req.method) ? req.method : "other"},
                {"code", std::to_string(r.status)}})
      .Increment();
  if (spdlog::should_log(spdlog::level::debug)) LogRequest(req, r);
}

void RestApi::LogRequest(const HttpRequest& req, const HttpResponse& r) {
  // The query as the client sent it, with the value of anything that may be
  // a credential replaced: a log must not hold one. The event stream takes
  // ?access_token=, the dashboard's link carries ?token=, and a client may
  // send others. Control characters a client sent become '?', so that one
  // request is one line.
  std::string target = req.path;
  char sep = '?';
  for (const auto& [name, value] : req.query) {
    target += sep + name + "=" + (IsCredentialName(name) ? std::string("REDACTED") : value);
    sep = '&';
  }
  for (char& ch : target) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  }
  spdlog::debug("http {} {} {} {}B from {}", req.method, target, r.status, r.body.size(),
                req.remote);
}

std::optional<HttpResponse> RestApi::Gate(const HttpRequest& req, const Route* route) const {
  if (route != nullptr && route->access == Access::kProbe) return std::nullopt;
  if (auto refused = CheckRequestSource(req, options_.guard))
    return ErrorResponse(refused->status, refused->cause);
  // Kubernetes probes and Prometheus scrapers carry no bearer token:
  // /readyz tells only whether the store answers; /metrics is open when the
  // operator chose public_metrics.
  const bool open =
      route != nullptr && (route->access == Access::kOpen ||
                           (route->access == Access::kMetrics && options_.public_metrics));
  if (!open && !Authorized(req, route)) {
    HttpResponse r = ErrorResponse(Status::Unauthenticated("missing or invalid bearer token"));
    r.headers["WWW-Authenticate"] = "Bearer";
    return r;
  }
  // Only a route acts on a request; one without a route is a 404 whatever
  // its Content-Type.
  if (route != nullptr) {
    if (auto refused = CheckContentType(req)) return ErrorResponse(refused->status, refused->cause);
  }
  return std::nullopt;
}

HttpResponse RestApi::Answer(const HttpRequest& req) {
  std::string id;
  const Route* route = Find(req, &id);
  const RouteCall call{req, id};
  if (auto refused = Gate(req, route)) return std::move(*refused);
  // Every error below, the route's own included, is answered by the one
  // conversion (ErrorResponse).
  auto answer = [&](Result<HttpResponse> r) {
    return r.ok() ? std::move(r).value() : ErrorResponse(r.status());
  };
  if (route != nullptr) return answer(Dispatch(*route, call));
  if (IsDashboardFile(req, route)) return answer(Static(req));
  if (req.path.rfind("/api/v1/", 0) == 0) {
    return ErrorResponse(
        Status::NotFound("no route for " + req.method + " " + req.path + " (see /openapi.json)"));
  }
  return ErrorResponse(Status::NotFound("no route for " + req.method + " " + req.path));
}

Result<HttpResponse> RestApi::Dispatch(const Route& route, const RouteCall& call) {
  if (const auto* raw = std::get_if<RawHandler>(&route.handler)) return (this->**raw)(call);
  HPO_ASSIGN_OR_RETURN(json body, (this->*std::get<JsonHandler>(route.handler))(call));
  HttpResponse r;
  r.status = route.ok_status;
  // Values quoted from a client or a stored spec may hold bytes that are
  // not UTF-8: they become U+FFFD instead of an exception.
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

// Health, metrics, the document, the event stream -----------------------

Result<HttpResponse> RestApi::Healthz(const RouteCall&) {
  return HttpResponse{200, "text/plain", "ok\n", {}, {}, {}};
}

bool RestApi::IsBackgroundRead(const HttpRequest& req) {
  if (req.method != "GET" && req.method != "HEAD") return false;
  return req.path != "/healthz" && req.path != "/readyz";
}

Result<HttpResponse> RestApi::Readyz(const RouteCall&) {
  HPO_RETURN_IF_ERROR(engine_.CheckStore());
  return HttpResponse{200, "text/plain", "ready\n", {}, {}, {}};
}

Result<HttpResponse> RestApi::Metrics(const RouteCall&) {
  return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", metrics_.Render(), {}, {},
                      {}};
}

Result<HttpResponse> RestApi::OpenApiDocument(const RouteCall&) {
  return HttpResponse{200, "application/json", OpenApi(), {}, {}, {}};
}

Result<HttpResponse> RestApi::Events(const RouteCall&) {
  HttpResponse r;
  r.content_type = "text/event-stream";
  auto sub = events_.Subscribe();
  r.stream = [sub](StreamWriter& w) {
    // A comment first, so clients see the stream open at once.
    if (!w.Write(": connected\n\n")) return;
    int idle_ms = 0;
    while (!w.stopping()) {
      auto e = sub->Next(std::chrono::milliseconds(500));
      if (const uint64_t lost = sub->TakeDropped()) {
        if (!w.Write("event: lagged\ndata: {\"dropped\":" + std::to_string(lost) + "}\n\n")) return;
      }
      if (!e) {
        idle_ms += 500;
        if (idle_ms >= 15'000) {  // keeps proxies from closing an idle stream
          idle_ms = 0;
          if (!w.Write(": keep-alive\n\n")) return;
        }
        continue;
      }
      idle_ms = 0;
      if (!w.Write("id: " + std::to_string(e->id) + "\nevent: " + e->type + "\ndata: " + e->data +
                   "\n\n"))
        return;
    }
  };
  return r;
}

// Workers ------------------------------------------------------------------

Result<json> RestApi::ListWorkers(const RouteCall& call) {
  // Gone workers (Engine::SweepWorkers) are history, not fleet: listed
  // only when asked for.
  HPO_ASSIGN_OR_RETURN(const bool include_gone, QueryBool(call.req, "include_gone", false));
  HPO_ASSIGN_OR_RETURN(auto workers, engine_.ListWorkers());
  // The newest measured speed per (device, workload).
  HPO_ASSIGN_OR_RETURN(MeasuredSpeeds latest, engine_.Measured());
  // What each worker is running now: leased and running trials of running
  // experiments, by lease owner, in one query for every experiment.
  std::map<std::string, json> current;
  if (auto ts = engine_.ListLeasedTrials(kMaxLeasedTrials); ts.ok()) {
    for (const auto& t : *ts) {
      current[t.lease_owner].push_back({{"trial_id", t.id},
                                        {"experiment_id", t.experiment_id},
                                        {"number", t.number},
                                        {"state", store::ToString(t.state)}});
    }
  }
  // Running experiments with prices (cost-aware placement): what each
  // device costs them per hour.
  std::vector<std::pair<Id, std::shared_ptr<const ExperimentSpec>>> priced;
  if (auto exps = engine_.ListExperiments(0, 10'000); exps.ok()) {
    for (const auto& e : *exps) {
      if (e.state != store::ExperimentState::kRunning) continue;
      if (auto spec = engine_.Spec(e.id); spec.ok() && !(*spec)->prices.empty())
        priced.emplace_back(e.id, *spec);
    }
  }
  // Built by moving each part into place: nlohmann's initializer lists copy
  // what they are given, and at 200 workers those copies (the devices into
  // the worker, the workers into the answer) were most of this call's CPU
  // and a fifth of the server's under bench/load.
  json out = json::array();
  for (const auto& w : workers) {
    const std::string_view state = engine_.WorkerState(w);
    if (state == "gone" && !include_gone) continue;
    json devices = json::array();
    std::map<std::string, std::string> labels;
    const json labels_json = ParseOr(w.labels_json, json::object());
    for (auto l = labels_json.begin(); l != labels_json.end(); ++l) {
      if (l->is_string()) labels[l.key()] = l->get<std::string>();
    }
    for (const auto& d : w.devices) {
      // The price placement and the charge for device time go by.
      json prices = json::array();
      for (const auto& [experiment_id, spec] : priced) {
        if (const auto price = PricePerHour(*spec, d.device_class, labels)) {
          prices.push_back({{"experiment_id", experiment_id}, {"per_hour", *price}});
        }
      }
      json measured = json::array();
      if (const auto m = latest.find(d.id); m != latest.end()) {
        for (const auto& [workload, o] : m->second) {
          json one = json::object();
          one["workload"] = workload;
          one["samples_per_sec"] = o.samples_per_sec;
          one["system"] = o.system;
          one["observed_ms"] = o.observed_ms;
          one["trial_id"] = Opt(o.trial_id);
          measured.push_back(std::move(one));
        }
      }
      json device = json::object();
      device["id"] = d.id;
      device["ordinal"] = d.ordinal;
      device["kind"] = store::ToString(d.kind);
      device["name"] = d.name;
      device["device_class"] = d.device_class;
      device["cores"] = d.cores;
      device["memory_bytes"] = d.memory_bytes;
      device["benchmark_gflops"] = d.benchmark_gflops;
      device["measured"] = std::move(measured);
      device["prices"] = std::move(prices);
      devices.push_back(std::move(device));
    }
    auto running = current.find(Engine::WorkerOwner(w.id));
    json worker = json::object();
    worker["id"] = w.id;
    worker["host"] = w.host;
    worker["instance"] = w.instance;
    worker["labels"] = labels_json;
    worker["state"] = state;
    worker["gone_ms"] = Opt(w.gone_ms);
    worker["registered_ms"] = w.registered_ms;
    worker["last_seen_ms"] = w.last_seen_ms;
    worker["devices"] = std::move(devices);
    worker["current_trials"] =
        running == current.end() ? json::array() : std::move(running->second);
    out.push_back(std::move(worker));
  }
  json answer = json::object();
  answer["workers"] = std::move(out);
  return answer;
}

// Experiments --------------------------------------------------------------

Result<json> RestApi::CreateExperiment(const RouteCall& call) {
  HPO_ASSIGN_OR_RETURN(auto e, engine_.CreateExperiment(call.req.body));
  return json{{"id", e.id}, {"name", e.name}, {"state", store::ToString(e.state)}};
}

// A dry run: the same checks as creating, nothing written, and the spec as
// the server read it (DescribeSpec) in the answer.
Result<json> RestApi::ValidateExperiment(const RouteCall& call) {
  HPO_ASSIGN_OR_RETURN(auto spec, engine_.ValidateExperiment(call.req.body));
  return json{
      {"valid", true}, {"spec", DescribeSpec(spec)}, {"warnings", Engine::SpecWarnings(spec)}};
}

Result<json> RestApi::ListExperiments(const RouteCall& call) {
  HPO_ASSIGN_OR_RETURN(const int64_t offset, QueryInt(call.req, "offset", 0, 0, INT64_MAX));
  HPO_ASSIGN_OR_RETURN(const int64_t limit, QueryInt(call.req, "limit", 100, 0, options_.max_page));
  HPO_ASSIGN_OR_RETURN(auto list, engine_.ListExperiments(offset, limit));
  json out = json::array();
  for (const auto& e : list) {
    auto n = engine_.CountTrials(e.id);
    out.push_back({{"id", e.id},
                   {"name", e.name},
                   {"state", store::ToString(e.state)},
                   {"reason", e.reason},
                   {"created_ms", e.created_ms},
                   {"finished_ms", Opt(e.finished_ms)},
                   {"trials", n.ok() ? CountsJson(*n) : json(nullptr)}});
  }
  return json{{"experiments", out}};
}

Result<json> RestApi::GetExperiment(const RouteCall& call) {
  HPO_ASSIGN_OR_RETURN(const Id id, ParseId(call.id, "experiment"));
  HPO_ASSIGN_OR_RETURN(auto e, engine_.GetExperiment(id));
  HPO_ASSIGN_OR_RETURN(auto n, engine_.CountTrials(id));
  HPO_ASSIGN_OR_RETURN(const store::Usage used, engine_.ExperimentUsage(id));
  json spaces = json::array();
  for (const auto& s : e.spaces) spaces.push_back(s.name);
  const json spec = ParseOr(e.spec_json, nullptr);
  // The budget as the server read it, not dug out of the stored JSON again.
  const auto typed = SpecOrNull(engine_, id);
  const json budget = typed && typed->budget ? json(*typed->budget) : json(nullptr);
  return json{
      {"id", e.id},
      {"name", e.name},
      {"state", store::ToString(e.state)},
      {"reason", e.reason},
      {"created_ms", e.created_ms},
      {"updated_ms", e.updated_ms},
      {"finished_ms", Opt(e.finished_ms)},
      {"spaces", spaces},
      {"spec", spec},
      {"trials", CountsJson(n)},
      {"usage",
       {{"device_seconds", used.device_ms / 1000.0}, {"cost", used.cost}, {"budget", budget}}}};
}

Result<json> RestApi::CancelExperiment(const RouteCall& call) {
  HPO_ASSIGN_OR_RETURN(const Id id, ParseId(call.id, "experiment"));
  HPO_ASSIGN_OR_RETURN(const json body, Body(call.req));
  const json reason = body.value("reason", json("cancelled by user"));
  if (!reason.is_string()) return Status::InvalidArgument("reason: must be a string");
  HPO_RETURN_IF_ERROR(engine_.CancelExperiment(id, reason.get<std::string>()));
  return json{{"id", id}, {"state", "cancelled"}};
}

Status RestApi::AddProgress(json& out, const store::TrialRecord& t) {
  HPO_ASSIGN_OR_RETURN(const auto progress,
                       engine_.ListTrialProgress(t.experiment_id, t.number, t.number));
  if (auto p = progress.find(t.id); p != progress.end()) SetProgress(out, p->second);
  return Status::OK();
}

Result<json> RestApi::BestTrial(const RouteCall& call) {
  HPO_ASSIGN_OR_RETURN(const Id id, ParseId(call.id, "experiment"));
  HPO_ASSIGN_OR_RETURN(auto e, engine_.GetExperiment(id));
  HPO_ASSIGN_OR_RETURN(auto best, engine_.BestTrial(id));
  if (!best) {
    HPO_ASSIGN_OR_RETURN(auto spec, engine_.Spec(id));
    if (!spec->constraints.empty()) {
      return Status::NotFound("experiment " + call.id +
                              " has no completed trial within its constraints yet");
    }
    return Status::NotFound("experiment " + call.id +
                            " has no completed trial and no measurement yet");
  }
  json out = TrialJson(best->trial, SpaceMap(e.spaces), SpecOrNull(engine_, id).get());
  HPO_RETURN_IF_ERROR(AddProgress(out, best->trial));
  // A partial best keeps its own final_metrics (null while paused, the last
  // report when pruned); best_metrics is the report that made it the best.
  out["partial"] = best->partial;
  out["best_step"] = best->step;
  out["best_metrics"] = ParseOr(best->metrics_json, json::object());
  if (best->partial) out["checkpoint_step"] = Opt(best->checkpoint_step);
  return out;
}

// The feasible non-dominated trials (with all=true, every completed trial,
// its rank and feasibility), and the objectives and constraints they are
// judged by.
Result<json> RestApi::Pareto(const RouteCall& call) {
  HPO_ASSIGN_OR_RETURN(const Id id, ParseId(call.id, "experiment"));
  HPO_ASSIGN_OR_RETURN(auto e, engine_.GetExperiment(id));
  HPO_ASSIGN_OR_RETURN(const bool all, QueryBool(call.req, "all", false));
  HPO_ASSIGN_OR_RETURN(auto spec, engine_.Spec(id));
  HPO_ASSIGN_OR_RETURN(const auto ranked, engine_.RankTrials(id));
  const SpaceMap spaces(e.spaces);
  json objectives = json::array();
  for (const auto& o : spec->objectives) {
    objectives.push_back(
        {{"metric", o.metric},
         {"direction", o.direction == search::Direction::kMaximize ? "maximize" : "minimize"}});
  }
  json constraints = json::array();
  for (const auto& c : spec->constraints) {
    constraints.push_back({{"metric", c.metric}, {"max", Opt(c.max)}, {"min", Opt(c.min)}});
  }
  json trials = json::array();
  int64_t feasible = 0;
  int64_t on_front = 0;
  for (const auto& r : ranked) {
    feasible += r.feasible ? 1 : 0;
    const bool front = r.rank == 0;
    on_front += front ? 1 : 0;
    if (!all && !front) continue;
    json t = TrialJson(r.trial, spaces, spec.get());
    t["values"] = r.values;
    t["feasible"] = r.feasible;
    t["infeasible_reasons"] = r.reasons;
    t["rank"] = Opt(r.rank);
    trials.push_back(std::move(t));
  }
  return json{{"objectives", objectives},   {"constraints", constraints},
              {"completed", ranked.size()}, {"feasible", feasible},
              {"front_size", on_front},     {"trials", trials}};
}

Result<json> RestApi::LearningCurves(const RouteCall& call) {
  HPO_ASSIGN_OR_RETURN(const Id id, ParseId(call.id, "experiment"));
  HPO_ASSIGN_OR_RETURN(auto spec, engine_.Spec(id));
  const auto metric = call.req.query.find("metric");
  HPO_ASSIGN_OR_RETURN(const int64_t max_points,
                       QueryInt(call.req, "max_points", 20'000, 1, 1'000'000));
  const std::string name = metric == call.req.query.end() ? spec->metric : metric->second;
  // Before the read: what it sees is then at least what the cursor says.
  HPO_ASSIGN_OR_RETURN(const auto now, engine_.ReadHorizon());
  HPO_ASSIGN_OR_RETURN(const auto since, SinceRevision(call.req, now));
  json out;
  if (since) {
    HPO_ASSIGN_OR_RETURN(out, CurveChanges(id, name, *since));
  } else {
    HPO_ASSIGN_OR_RETURN(auto ms, engine_.ListExperimentMeasurements(id));
    out = dashboard::LearningCurves(ms, name, max_points);
  }
  out["cursor"] = FormatCursor(now);
  return out;
}

// The points written at revision `since` or later, unthinned; a trial that
// lost measurements since (a reclaimed or restarted attempt) comes whole,
// marked "replace", so that the client drops what it held of it.
Result<json> RestApi::CurveChanges(Id experiment_id, const std::string& metric, int64_t since) {
  HPO_ASSIGN_OR_RETURN(auto ms, engine_.ListExperimentMeasurementsSince(experiment_id, since));
  store::TrialFilter changed;
  changed.since_revision = since;
  changed.limit = INT64_MAX;
  HPO_ASSIGN_OR_RETURN(const auto trials, engine_.ListTrials(experiment_id, changed));
  std::set<Id> reset;
  for (const auto& t : trials) {
    if (t.curve_reset_revision < since) continue;
    reset.insert(t.id);
    HPO_ASSIGN_OR_RETURN(auto whole, engine_.ListMeasurements(t.id));
    ms.insert(ms.end(), whole.begin(), whole.end());
  }
  // The whole curves overlap the new points: sorted, each (trial, step) once.
  std::stable_sort(ms.begin(), ms.end(), [](const auto& a, const auto& b) {
    return std::tie(a.trial_id, a.step) < std::tie(b.trial_id, b.step);
  });
  ms.erase(std::unique(ms.begin(), ms.end(),
                       [](const auto& a, const auto& b) {
                         return a.trial_id == b.trial_id && a.step == b.step;
                       }),
           ms.end());
  json out = dashboard::LearningCurves(ms, metric, INT64_MAX);
  for (json& c : out["trials"]) c["replace"] = reset.count(c["trial_id"].get<Id>()) > 0;
  return out;
}

Result<json> RestApi::SystemTuning(const RouteCall& call) {
  HPO_ASSIGN_OR_RETURN(const Id id, ParseId(call.id, "experiment"));
  HPO_ASSIGN_OR_RETURN(auto spec, engine_.Spec(id));
  std::vector<std::string> workloads;
  std::vector<store::SpeedObservationRecord> observations;
  for (const auto& space : spec->spaces) {
    workloads.push_back(Engine::Workload(*spec, space.name));
    // The newest 5000 per workload, as many as the engine's speed model reads.
    HPO_ASSIGN_OR_RETURN(auto some, engine_.ListSpeedObservations(workloads.back(), 5000));
    observations.insert(observations.end(), some.begin(), some.end());
  }
  return dashboard::SystemTuning(observations, workloads, Engine::TunableNames(*spec),
                                 Engine::kMinObservationsToReuseSetting);
}

Result<json> RestApi::SuggestTrials(const RouteCall& call) {
  HPO_ASSIGN_OR_RETURN(const Id id, ParseId(call.id, "experiment"));
  HPO_ASSIGN_OR_RETURN(const json body, Body(call.req));
  const json count = body.value("count", json(1));
  if (!count.is_number_integer()) return Status::InvalidArgument("count: must be an integer");
  // Checked here as well as by the engine: get<int> would wrap 2^32 + 1 to 1.
  if (count.is_number_unsigned() ? count.get<uint64_t>() > 1000
                                 : (count.get<int64_t>() < 1 || count.get<int64_t>() > 1000)) {
    return Status::InvalidArgument("count: must be between 1 and 1000");
  }
  HPO_ASSIGN_OR_RETURN(auto out, engine_.Suggest(id, count.get<int>()));
  HPO_ASSIGN_OR_RETURN(auto e, engine_.GetExperiment(id));
  json trials = json::array();
  for (const auto& a : out) trials.push_back(TrialJson(a.trial, SpaceMap(e.spaces), a.spec.get()));
  return json{{"trials", trials}};
}

Result<json> RestApi::ListTrials(const RouteCall& call) {
  HPO_ASSIGN_OR_RETURN(const Id id, ParseId(call.id, "experiment"));
  const HttpRequest& req = call.req;
  HPO_ASSIGN_OR_RETURN(auto e, engine_.GetExperiment(id));
  store::TrialFilter f;
  if (auto st = req.query.find("state"); st != req.query.end()) {
    auto parsed = store::ParseTrialState(st->second);
    if (!parsed.ok()) return parsed.status().WithContext("query parameter state");
    f.state = *parsed;
  }
  if (auto sp = req.query.find("space"); sp != req.query.end()) {
    f.space_id = SpaceMap(e.spaces).IdOf(sp->second);
    if (!f.space_id)
      return Status::InvalidArgument("query parameter space: no space '" + sp->second + "'");
  }
  HPO_ASSIGN_OR_RETURN(f.offset, QueryInt(req, "offset", 0, 0, INT64_MAX));
  HPO_ASSIGN_OR_RETURN(f.limit, QueryInt(req, "limit", 100, 0, options_.max_page));
  if (req.query.count("after")) {
    if (f.offset != 0)
      return Status::InvalidArgument("query parameter after: give after or offset, not both");
    HPO_ASSIGN_OR_RETURN(f.after_number, QueryInt(req, "after", 0, -1, INT64_MAX));
  }
  // Before the read: what it sees is then at least what the cursor says.
  HPO_ASSIGN_OR_RETURN(const auto now, engine_.ReadHorizon());
  HPO_ASSIGN_OR_RETURN(f.since_revision, SinceRevision(req, now));
  HPO_ASSIGN_OR_RETURN(auto list, engine_.ListTrials(id, f));
  json trials = json::array();
  const auto names = SpaceMap(e.spaces);
  const auto spec = SpecOrNull(engine_, id);
  std::map<Id, store::TrialProgress> progress;
  if (!list.empty()) {  // ordered by number
    HPO_ASSIGN_OR_RETURN(progress,
                         engine_.ListTrialProgress(id, list.front().number, list.back().number));
  }
  for (const auto& t : list) {
    trials.push_back(TrialJson(t, names, spec.get()));
    if (auto p = progress.find(t.id); p != progress.end()) SetProgress(trials.back(), p->second);
  }
  // A full page may have more after it; a short one is the last.
  const bool full = f.limit > 0 && static_cast<int64_t>(list.size()) == f.limit;
  return json{{"trials", trials},
              {"offset", f.offset},
              {"limit", f.limit},
              {"next_after", full ? json(list.back().number) : json()},
              {"cursor", FormatCursor(now)}};
}

// Trials -------------------------------------------------------------------

Result<json> RestApi::GetTrial(const RouteCall& call) {
  HPO_ASSIGN_OR_RETURN(const Id id, ParseId(call.id, "trial"));
  HPO_ASSIGN_OR_RETURN(auto t, engine_.GetTrial(id));
  HPO_ASSIGN_OR_RETURN(auto e, engine_.GetExperiment(t.experiment_id));
  HPO_ASSIGN_OR_RETURN(auto ms, engine_.ListMeasurements(id));
  json out = TrialJson(t, SpaceMap(e.spaces), SpecOrNull(engine_, t.experiment_id).get());
  HPO_RETURN_IF_ERROR(AddProgress(out, t));
  json measurements = json::array();
  // The devices it ran on, in the order it first ran on each, with their
  // worker while the store still has it (a pruned worker's are gone).
  std::vector<store::Id> order;
  std::map<store::Id, json> devices;
  for (const auto& m : ms) {
    measurements.push_back({{"step", m.step},
                            {"metrics", ParseOr(m.metrics_json, json::object())},
                            {"samples_per_sec", m.samples_per_sec},
                            {"system", ParseOr(m.system_setting_json, json::object())},
                            {"created_ms", m.created_ms},
                            {"device_ms", m.device_ms},
                            {"cost", m.cost},
                            {"device_id", Opt(m.device_id)},
                            {"device_class", m.device_class}});
    if (!m.device_id) continue;
    auto [it, added] = devices.emplace(*m.device_id, json{{"device_id", *m.device_id},
                                                          {"device_class", m.device_class},
                                                          {"worker_id", nullptr},
                                                          {"host", nullptr},
                                                          {"name", nullptr},
                                                          {"steps", 0},
                                                          {"device_seconds", 0.0}});
    if (added) order.push_back(*m.device_id);
    it->second["steps"] = it->second["steps"].get<int64_t>() + 1;
    it->second["device_seconds"] =
        it->second["device_seconds"].get<double>() + m.device_ms / 1000.0;
  }
  out["measurements"] = measurements;
  if (!devices.empty()) {
    HPO_ASSIGN_OR_RETURN(const auto workers, engine_.ListWorkers());
    for (const auto& w : workers) {
      for (const auto& d : w.devices) {
        auto it = devices.find(d.id);
        if (it == devices.end()) continue;
        it->second["worker_id"] = w.id;
        it->second["host"] = w.host;
        it->second["name"] = d.name;
      }
    }
  }
  json ran_on = json::array();
  for (const store::Id device : order) ran_on.push_back(devices[device]);
  out["devices"] = ran_on;
  constexpr int64_t kEvents = 1000;  // the newest; a trial paused at every rung has a few dozen
  HPO_ASSIGN_OR_RETURN(const auto events, engine_.ListTrialEvents(id, kEvents));
  json kept = json::array();
  for (const auto& ev : events) {
    kept.push_back({{"type", ev.type},
                    {"created_ms", ev.created_ms},
                    {"data", ParseOr(ev.data_json, json::object())}});
  }
  out["events"] = kept;
  return out;
}

Result<json> RestApi::ReportMeasurement(const RouteCall& call) {
  HPO_ASSIGN_OR_RETURN(const Id id, ParseId(call.id, "trial"));
  HPO_ASSIGN_OR_RETURN(const json body, Body(call.req));
  TrialReport r;
  r.trial_id = id;
  r.owner = Engine::kClientOwner;
  const json step = body.value("step", json(nullptr));
  if (!step.is_number_integer()) return Status::InvalidArgument("step: must be an integer");
  r.step = step.get<int64_t>();
  r.metrics = body.value("metrics", json(nullptr));
  if (!r.metrics.is_object()) return Status::InvalidArgument("metrics: must be an object");
  const json sps = body.value("samples_per_sec", json(0));
  if (!sps.is_number()) return Status::InvalidArgument("samples_per_sec: must be a number");
  r.samples_per_sec = sps.get<double>();
  r.system = body.value("system", json::object());
  HPO_ASSIGN_OR_RETURN(auto d, engine_.Report(r));
  json out = {{"decision", ToString(d.decision)}};
  if (d.new_system) out["system"] = *d.new_system;
  if (!d.reason.empty()) out["reason"] = d.reason;
  return out;
}

Result<json> RestApi::CompleteTrial(const RouteCall& call) { return FinishTrial(call, false); }
Result<json> RestApi::FailTrial(const RouteCall& call) { return FinishTrial(call, true); }

Result<json> RestApi::FinishTrial(const RouteCall& call, bool failed) {
  HPO_ASSIGN_OR_RETURN(const Id id, ParseId(call.id, "trial"));
  HPO_ASSIGN_OR_RETURN(const json body, Body(call.req));
  const json metrics = body.value("metrics", json::object());
  if (!metrics.is_object()) return Status::InvalidArgument("metrics: must be an object");
  const json reason = body.value("reason", json(""));
  if (!reason.is_string()) return Status::InvalidArgument("reason: must be a string");
  HPO_RETURN_IF_ERROR(
      engine_.Complete(id, Engine::kClientOwner, failed, metrics, reason.get<std::string>()));
  return json{{"id", id}, {"state", failed ? "failed" : "completed"}};
}

// The dashboard's files -----------------------------------------------------

Result<HttpResponse> RestApi::Static(const HttpRequest& req) {
  namespace fs = std::filesystem;
  // Only the files the dashboard loads (server/http/web_files.h): not the
  // package tree under node_modules, its source maps or its tests.
  // "/js/../js/app.js" names /js/app.js; what climbs above the root names nothing.
  const std::string path =
      req.path == "/" ? "/index.html" : fs::path(req.path).lexically_normal().generic_string();
  if (!web_files_.count(path)) return Status::NotFound("no such file: " + req.path);
  const auto file = FileUnderRoot(options_.web_root, path);  // again: it may be a symlink by now
  if (!file) return Status::NotFound("no such file: " + req.path);
  HttpResponse r{200, ContentType(*file), "", {{"Cache-Control", "no-cache"}}, file->string(), {}};
  // What the API returns is data, never markup: the pages build DOM from it
  // (web/README.md), and this policy stops any script but the dashboard's
  // own files should one slip through; frame-ancestors (which a <meta> tag
  // cannot set) keeps other sites from framing the dashboard.
  r.headers["X-Content-Type-Options"] = "nosniff";
  if (file->extension() == ".html") {
    r.headers["Content-Security-Policy"] =
        "default-src 'none'; script-src 'self'; style-src 'self'; style-src-attr 'unsafe-inline'; "
        "img-src data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors "
        "'none'";
  }
  return r;
}

}  // namespace hpo::server
