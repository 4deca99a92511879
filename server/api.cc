#include "server/api.h"

#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/json_limits.h"
#include "common/token.h"
#include "server/dashboard.h"

namespace hpo::server {

using nlohmann::json;
using store::Id;

int HttpStatusFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kUnauthenticated: return 401;
    case StatusCode::kPermissionDenied: return 403;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kAborted: return 409;
    case StatusCode::kResourceExhausted: return 429;
    case StatusCode::kCancelled: return 499;
    case StatusCode::kUnimplemented: return 501;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kDeadlineExceeded: return 504;
    case StatusCode::kInternal:
    case StatusCode::kDataLoss: return 500;
  }
  return 500;
}

HttpResponse ErrorResponse(const Status& s, int http_status) {
  HttpResponse r;
  r.status = http_status ? http_status : HttpStatusFor(s);
  // Messages may quote what a client sent; bytes that are not UTF-8 become
  // U+FFFD instead of an exception.
  r.body = json{{"error", {{"code", std::string(StatusCodeName(s.code()))}, {"message", s.message()}}}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
  // The same rule as every other retry decision: a lost race (409), a full
  // disk (429), an outage (503) or a slow answer (504) may pass; a client
  // that honours Retry-After tries again after a second.
  if (IsRetryable(s)) r.headers["Retry-After"] = "1";
  return r;
}

namespace {

HttpResponse Json(int status, const json& body) {
  HttpResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

// What the server stored itself: no size limit (a spec's JSON form may be
// larger than its YAML text), but the nesting limit all the same, so a value
// written by an older server cannot overflow the stack of the reply's dump().
json ParseOr(const std::string& text, json fallback) {
  const JsonLimits stored{kMaxJsonDepth, SIZE_MAX, SIZE_MAX};
  auto j = ParseJson(text, "stored value", stored);
  return j.ok() ? std::move(j).value() : fallback;
}

json Opt(const std::optional<int64_t>& v) { return v ? json(*v) : json(nullptr); }

json TrialJson(const store::TrialRecord& t, const std::map<Id, std::string>& space_names) {
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
            {"final_metrics", t.final_metrics_json.empty() ? json(nullptr) : ParseOr(t.final_metrics_json, nullptr)},
            {"reason", t.reason},
            {"level", t.level},
            {"stop_step", Opt(t.stop_step)},
            {"resume_step", t.resume_step}};
  if (t.space_id) {
    auto it = space_names.find(*t.space_id);
    if (it != space_names.end()) j["space"] = it->second;
  }
  return j;
}

std::map<Id, std::string> SpaceNames(const store::ExperimentRecord& e) {
  std::map<Id, std::string> out;
  for (const auto& s : e.spaces) out[s.id] = s.name;
  return out;
}

json CountsJson(const store::TrialCounts& n) {
  return {{"pending", n.pending},     {"leased", n.leased}, {"running", n.running}, {"paused", n.paused},
          {"completed", n.completed}, {"pruned", n.pruned}, {"failed", n.failed},
          {"cancelled", n.cancelled}, {"total", n.total()}};
}

Result<Id> ParseId(const std::string& text, const char* what) {
  Id id = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (ec != std::errc() || p != text.data() + text.size() || id <= 0) {
    return Status::InvalidArgument(std::string(what) + " id '" + text + "' is not a positive integer");
  }
  return id;
}

Result<int64_t> QueryInt(const HttpRequest& req, const std::string& key, int64_t fallback, int64_t lo,
                         int64_t hi) {
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
  return Status::InvalidArgument("query parameter " + key + ": must be true or false, not '" + it->second + "'");
}

// Every JSON body goes through the limits of json_limits.h before a route
// copies or walks any of it.
Result<json> Body(const HttpRequest& req) {
  if (req.body.empty()) return json::object();
  HPO_ASSIGN_OR_RETURN(json j, ParseJson(req.body, "body"));
  if (!j.is_object()) return Status::InvalidArgument("body: must be a JSON object");
  return j;
}

// Splits "/api/v1/experiments/12:cancel" into {"experiments", "12", ":cancel"}-like parts:
// segments after /api/v1, with a trailing ":verb" split off the last one.
struct Path {
  std::vector<std::string> segments;
  std::string verb;
};
Path SplitApiPath(const std::string& path) {
  Path out;
  std::string rest = path.substr(std::string("/api/v1/").size());
  std::stringstream ss(rest);
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

}  // namespace

RestApi::RestApi(Engine& engine, EventBus& events, metrics::Registry& metrics, ApiOptions options)
    : engine_(engine), events_(events), metrics_(metrics), options_(std::move(options)) {
  request_seconds_ = &metrics_.histogram("hpo_http_request_duration_seconds",
                                         "REST request latency, all routes",
                                         metrics::ExponentialBuckets(0.0005, 2, 14));
}

bool RestApi::IsDashboardFile(const HttpRequest& req) const {
  return req.method == "GET" && !options_.web_root.empty() && req.path.rfind("/api/", 0) != 0 &&
         req.path != "/readyz" && req.path != "/metrics" && req.path != "/openapi.json";
}

bool RestApi::Authorized(const HttpRequest& req) const {
  if (options_.token.empty()) return true;
  // The dashboard's files hold no data, and a browser sends no header when
  // it opens a page; the data those pages fetch needs the token.
  if (IsDashboardFile(req)) return true;
  const std::string authorization = req.Header("authorization");
  if (const auto given = BearerToken(authorization)) return TokenEquals(*given, options_.token);
  // A browser's EventSource cannot set headers: the event stream (and only
  // it) also takes the token as ?access_token=.
  if (req.path == "/api/v1/events") {
    const auto it = req.query.find("access_token");
    return it != req.query.end() && TokenEquals(it->second, options_.token);
  }
  return false;
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
  // Any other method is "other": a label per invented method would grow
  // /metrics without bound.
  static const std::set<std::string> kMethods = {"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"};
  metrics_
      .counter("hpo_http_requests_total", "REST requests by method and status",
               {{"method", kMethods.count(original.method) ? original.method : "other"},
                {"code", std::to_string(r.status)}})
      .Increment();
  return r;
}

HttpResponse RestApi::Answer(const HttpRequest& req) {
  if (req.path == "/healthz") return HttpResponse{200, "text/plain", "ok\n", {}, {}};
  if (auto refused = CheckRequestSource(req, options_.guard)) {
    return ErrorResponse(refused->status, refused->http_status);
  }
  // Kubernetes probes and Prometheus scrapers carry no bearer token.
  // /readyz tells only whether the store answers; /metrics is open when the
  // operator chose public_metrics.
  if (req.path == "/readyz" && req.method == "GET") {
    auto v = engine_.store().SchemaVersion();
    if (!v.ok()) return ErrorResponse(v.status());
    return HttpResponse{200, "text/plain", "ready\n", {}, {}};
  }
  const bool metrics = req.path == "/metrics" && req.method == "GET";
  if (!(metrics && options_.public_metrics) && !Authorized(req)) {
    HttpResponse r = ErrorResponse(Status::Unauthenticated("missing or invalid bearer token"));
    r.headers["WWW-Authenticate"] = "Bearer";
    return r;
  }
  if (metrics) return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", metrics_.Render(), {}, {}};
  if (auto refused = CheckContentType(req)) return ErrorResponse(refused->status, refused->http_status);
  return Route(req);
}

HttpResponse RestApi::Route(const HttpRequest& req) {
  if (req.path == "/openapi.json") return HttpResponse{200, "application/json", OpenApi(), {}, {}};
  if (req.path.rfind("/api/v1/", 0) != 0) {
    if (IsDashboardFile(req)) return Static(req);
    return ErrorResponse(Status::NotFound("no route for " + req.method + " " + req.path));
  }

  const Path p = SplitApiPath(req.path);
  const auto& seg = p.segments;
  const std::string& m = req.method;
  auto fail = [](const Status& s) { return ErrorResponse(s); };
  auto no_route = [&] {
    return fail(Status::NotFound("no route for " + req.method + " " + req.path + " (see /openapi.json)"));
  };
  if (seg.empty()) return no_route();

  if (seg[0] == "events" && seg.size() == 1 && m == "GET") return Events(req);

  if (seg[0] == "workers" && seg.size() == 1 && m == "GET") {
    // Gone workers (Engine::SweepWorkers) are history, not fleet: listed
    // only when asked for.
    auto include_gone = QueryBool(req, "include_gone", false);
    if (!include_gone.ok()) return fail(include_gone.status());
    auto workers = engine_.store().ListWorkers();
    if (!workers.ok()) return fail(workers.status());
    // The newest measured speed per (device, workload).
    auto speeds = engine_.store().ListSpeedObservations("", 5000);
    if (!speeds.ok()) return fail(speeds.status());
    std::map<Id, std::map<std::string, const store::SpeedObservationRecord*>> latest;
    for (const auto& o : *speeds) latest[o.device_id][o.workload] = &o;
    // What each worker is running now: leased and running trials of running
    // experiments, by lease owner.
    std::map<std::string, json> current;
    // Running experiments with prices (cost-aware placement): what each
    // device costs them per hour.
    std::vector<std::pair<Id, std::shared_ptr<const ExperimentSpec>>> priced;
    if (auto exps = engine_.store().ListExperiments(0, 10'000); exps.ok()) {
      for (const auto& e : *exps) {
        if (e.state != store::ExperimentState::kRunning) continue;
        if (auto spec = engine_.Spec(e.id); spec.ok() && !(*spec)->prices.empty()) priced.emplace_back(e.id, *spec);
        for (auto state : {store::TrialState::kLeased, store::TrialState::kRunning}) {
          store::TrialFilter f;
          f.state = state;
          f.limit = 10'000;
          if (auto ts = engine_.store().ListTrials(e.id, f); ts.ok()) {
            for (const auto& t : *ts) {
              current[t.lease_owner].push_back({{"trial_id", t.id}, {"experiment_id", e.id}, {"number", t.number},
                                                {"state", store::ToString(t.state)}});
            }
          }
        }
      }
    }
    json out = json::array();
    for (const auto& w : *workers) {
      const std::string_view state = engine_.WorkerState(w);
      if (state == "gone" && !*include_gone) continue;
      json devices = json::array();
      const json labels = ParseOr(w.labels_json, json::object());
      for (const auto& d : w.devices) {
        // The price of the class itself, else of one of the worker's labels
        // (as placement reads it, server/engine/lease.cc).
        json prices = json::array();
        for (const auto& [experiment_id, spec] : priced) {
          std::optional<double> price;
          if (auto it = spec->prices.find(d.device_class); it != spec->prices.end()) price = it->second;
          for (auto l = labels.begin(); !price && l != labels.end(); ++l) {
            if (!l->is_string()) continue;
            if (auto it = spec->prices.find(l.key() + "=" + l->get<std::string>()); it != spec->prices.end()) {
              price = it->second;
            }
          }
          if (price) prices.push_back({{"experiment_id", experiment_id}, {"per_hour", *price}});
        }
        devices.push_back({{"id", d.id}, {"ordinal", d.ordinal}, {"kind", store::ToString(d.kind)},
                           {"name", d.name}, {"device_class", d.device_class}, {"cores", d.cores},
                           {"memory_bytes", d.memory_bytes}, {"benchmark_gflops", d.benchmark_gflops},
                           {"measured", json::array()}, {"prices", prices}});
        for (const auto& [workload, o] : latest[d.id]) {
          devices.back()["measured"].push_back({{"workload", workload}, {"samples_per_sec", o->samples_per_sec},
                                                {"system", ParseOr(o->system_setting_json, json::object())},
                                                {"observed_ms", o->observed_ms}, {"trial_id", Opt(o->trial_id)}});
        }
      }
      auto running = current.find(Engine::WorkerOwner(w.id));
      out.push_back({{"id", w.id}, {"host", w.host}, {"instance", w.instance}, {"labels", labels},
                     {"state", state}, {"gone_ms", Opt(w.gone_ms)},
                     {"registered_ms", w.registered_ms}, {"last_seen_ms", w.last_seen_ms},
                     {"devices", devices},
                     {"current_trials", running == current.end() ? json::array() : running->second}});
    }
    return Json(200, {{"workers", out}});
  }

  if (seg[0] == "experiments") {
    if (seg.size() == 1 && p.verb.empty() && m == "POST") {
      auto e = engine_.CreateExperiment(req.body);
      if (!e.ok()) return fail(e.status());
      return Json(201, {{"id", e->id}, {"name", e->name}, {"state", store::ToString(e->state)}});
    }
    // A dry run: the same checks as creating, nothing written, and the spec
    // as the server read it (DescribeSpec) in the answer.
    if (seg.size() == 1 && p.verb == "validate" && m == "POST") {
      auto spec = engine_.ValidateExperiment(req.body);
      if (!spec.ok()) return fail(spec.status());
      return Json(200, {{"valid", true}, {"spec", DescribeSpec(*spec)}});
    }
    if (seg.size() == 1 && m == "GET") {
      auto offset = QueryInt(req, "offset", 0, 0, INT64_MAX);
      auto limit = QueryInt(req, "limit", 100, 0, options_.max_page);
      if (!offset.ok()) return fail(offset.status());
      if (!limit.ok()) return fail(limit.status());
      auto list = engine_.store().ListExperiments(*offset, *limit);
      if (!list.ok()) return fail(list.status());
      json out = json::array();
      for (const auto& e : *list) {
        auto n = engine_.store().CountTrials(e.id);
        out.push_back({{"id", e.id}, {"name", e.name}, {"state", store::ToString(e.state)},
                       {"reason", e.reason}, {"created_ms", e.created_ms}, {"finished_ms", Opt(e.finished_ms)},
                       {"trials", n.ok() ? CountsJson(*n) : json(nullptr)}});
      }
      return Json(200, {{"experiments", out}});
    }
    // Any other method on the collection (DELETE /api/v1/experiments) has
    // no id to read.
    if (seg.size() < 2) return no_route();
    auto id = ParseId(seg[1], "experiment");
    if (!id.ok()) return fail(id.status());
    if (seg.size() == 2 && p.verb == "cancel" && m == "POST") {
      auto body = Body(req);
      if (!body.ok()) return fail(body.status());
      const json reason = body->value("reason", json("cancelled by user"));
      if (!reason.is_string()) return fail(Status::InvalidArgument("reason: must be a string"));
      Status s = engine_.CancelExperiment(*id, reason.get<std::string>());
      if (!s.ok()) return fail(s);
      return Json(200, {{"id", *id}, {"state", "cancelled"}});
    }
    if (seg.size() == 2 && p.verb.empty() && m == "GET") {
      auto e = engine_.store().GetExperiment(*id);
      if (!e.ok()) return fail(e.status());
      auto n = engine_.store().CountTrials(*id);
      if (!n.ok()) return fail(n.status());
      json spaces = json::array();
      for (const auto& s : e->spaces) spaces.push_back(s.name);
      json out = {{"id", e->id}, {"name", e->name}, {"state", store::ToString(e->state)},
                  {"reason", e->reason}, {"created_ms", e->created_ms}, {"updated_ms", e->updated_ms},
                  {"finished_ms", Opt(e->finished_ms)}, {"spaces", spaces},
                  {"spec", ParseOr(e->spec_json, nullptr)}, {"trials", CountsJson(*n)}};
      return Json(200, out);
    }
    if (seg.size() == 3 && seg[2] == "best" && m == "GET") {
      auto e = engine_.store().GetExperiment(*id);
      if (!e.ok()) return fail(e.status());
      auto best = engine_.BestTrial(*id);
      if (!best.ok()) return fail(best.status());
      if (!*best) return fail(Status::NotFound("experiment " + seg[1] + " has no completed trial yet"));
      return Json(200, TrialJson(**best, SpaceNames(*e)));
    }
    if (seg.size() == 3 && seg[2] == "measurements" && p.verb.empty() && m == "GET") {
      return LearningCurves(req, *id);
    }
    if (seg.size() == 3 && seg[2] == "system-tuning" && p.verb.empty() && m == "GET") {
      return SystemTuning(*id);
    }
    if (seg.size() == 3 && seg[2] == "trials" && p.verb == "suggest" && m == "POST") {
      auto body = Body(req);
      if (!body.ok()) return fail(body.status());
      const json count = body->value("count", json(1));
      if (!count.is_number_integer()) return fail(Status::InvalidArgument("count: must be an integer"));
      // Checked here as well as by the engine: get<int> would wrap 2^32 + 1 to 1.
      if (count.is_number_unsigned() ? count.get<uint64_t>() > 1000
                                     : (count.get<int64_t>() < 1 || count.get<int64_t>() > 1000)) {
        return fail(Status::InvalidArgument("count: must be between 1 and 1000"));
      }
      auto out = engine_.Suggest(*id, count.get<int>());
      if (!out.ok()) return fail(out.status());
      auto e = engine_.store().GetExperiment(*id);
      if (!e.ok()) return fail(e.status());
      json trials = json::array();
      for (const auto& a : *out) trials.push_back(TrialJson(a.trial, SpaceNames(*e)));
      return Json(200, {{"trials", trials}});
    }
    if (seg.size() == 3 && seg[2] == "trials" && p.verb.empty() && m == "GET") {
      auto e = engine_.store().GetExperiment(*id);
      if (!e.ok()) return fail(e.status());
      store::TrialFilter f;
      if (auto st = req.query.find("state"); st != req.query.end()) {
        auto parsed = store::ParseTrialState(st->second);
        if (!parsed.ok()) return fail(parsed.status().WithContext("query parameter state"));
        f.state = *parsed;
      }
      if (auto sp = req.query.find("space"); sp != req.query.end()) {
        for (const auto& s : e->spaces) {
          if (s.name == sp->second) f.space_id = s.id;
        }
        if (!f.space_id) return fail(Status::InvalidArgument("query parameter space: no space '" + sp->second + "'"));
      }
      auto offset = QueryInt(req, "offset", 0, 0, INT64_MAX);
      auto limit = QueryInt(req, "limit", 100, 0, options_.max_page);
      if (!offset.ok()) return fail(offset.status());
      if (!limit.ok()) return fail(limit.status());
      f.offset = *offset;
      f.limit = *limit;
      auto list = engine_.store().ListTrials(*id, f);
      if (!list.ok()) return fail(list.status());
      json trials = json::array();
      const auto names = SpaceNames(*e);
      for (const auto& t : *list) trials.push_back(TrialJson(t, names));
      return Json(200, {{"trials", trials}, {"offset", f.offset}, {"limit", f.limit}});
    }
    return no_route();
  }

  if (seg[0] == "trials" && seg.size() >= 2) {
    auto id = ParseId(seg[1], "trial");
    if (!id.ok()) return fail(id.status());
    if (seg.size() == 2 && p.verb.empty() && m == "GET") {
      auto t = engine_.store().GetTrial(*id);
      if (!t.ok()) return fail(t.status());
      auto e = engine_.store().GetExperiment(t->experiment_id);
      if (!e.ok()) return fail(e.status());
      auto ms = engine_.store().ListMeasurements(*id);
      if (!ms.ok()) return fail(ms.status());
      json out = TrialJson(*t, SpaceNames(*e));
      json measurements = json::array();
      for (const auto& mm : *ms) {
        measurements.push_back({{"step", mm.step}, {"metrics", ParseOr(mm.metrics_json, json::object())},
                                {"samples_per_sec", mm.samples_per_sec},
                                {"system", ParseOr(mm.system_setting_json, json::object())},
                                {"created_ms", mm.created_ms}});
      }
      out["measurements"] = measurements;
      return Json(200, out);
    }
    if (seg.size() == 3 && seg[2] == "measurements" && m == "POST") {
      auto body = Body(req);
      if (!body.ok()) return fail(body.status());
      TrialReport r;
      r.trial_id = *id;
      r.owner = Engine::kClientOwner;
      const json step = body->value("step", json(nullptr));
      if (!step.is_number_integer()) return fail(Status::InvalidArgument("step: must be an integer"));
      r.step = step.get<int64_t>();
      r.metrics = body->value("metrics", json(nullptr));
      if (!r.metrics.is_object()) return fail(Status::InvalidArgument("metrics: must be an object"));
      const json sps = body->value("samples_per_sec", json(0));
      if (!sps.is_number()) return fail(Status::InvalidArgument("samples_per_sec: must be a number"));
      r.samples_per_sec = sps.get<double>();
      r.system = body->value("system", json::object());
      auto d = engine_.Report(r);
      if (!d.ok()) return fail(d.status());
      json out = {{"decision", ToString(d->decision)}};
      if (d->new_system) out["system"] = *d->new_system;
      if (!d->reason.empty()) out["reason"] = d->reason;
      return Json(200, out);
    }
    if (seg.size() == 2 && (p.verb == "complete" || p.verb == "fail") && m == "POST") {
      auto body = Body(req);
      if (!body.ok()) return fail(body.status());
      const bool failed = p.verb == "fail";
      const json metrics = body->value("metrics", json::object());
      if (!metrics.is_object()) return fail(Status::InvalidArgument("metrics: must be an object"));
      const json reason = body->value("reason", json(""));
      if (!reason.is_string()) return fail(Status::InvalidArgument("reason: must be a string"));
      Status s = engine_.Complete(*id, Engine::kClientOwner, failed, metrics, reason.get<std::string>());
      if (!s.ok()) return fail(s);
      return Json(200, {{"id", *id}, {"state", failed ? "failed" : "completed"}});
    }
    return no_route();
  }
  return no_route();
}

HttpResponse RestApi::LearningCurves(const HttpRequest& req, Id experiment_id) {
  auto spec = engine_.Spec(experiment_id);
  if (!spec.ok()) return ErrorResponse(spec.status());
  const auto metric = req.query.find("metric");
  auto max_points = QueryInt(req, "max_points", 20'000, 1, 1'000'000);
  if (!max_points.ok()) return ErrorResponse(max_points.status());
  auto ms = engine_.store().ListExperimentMeasurements(experiment_id);
  if (!ms.ok()) return ErrorResponse(ms.status());
  return Json(200, dashboard::LearningCurves(*ms, metric == req.query.end() ? (*spec)->metric : metric->second,
                                             *max_points));
}

HttpResponse RestApi::SystemTuning(Id experiment_id) {
  auto spec = engine_.Spec(experiment_id);
  if (!spec.ok()) return ErrorResponse(spec.status());
  std::vector<std::string> workloads;
  std::vector<store::SpeedObservationRecord> observations;
  for (const auto& space : (*spec)->spaces) {
    workloads.push_back(Engine::Workload(experiment_id, **spec, space.name));
    // The newest 5000 per workload, as many as the engine's speed model reads.
    auto some = engine_.store().ListSpeedObservations(workloads.back(), 5000);
    if (!some.ok()) return ErrorResponse(some.status());
    observations.insert(observations.end(), some->begin(), some->end());
  }
  return Json(200, dashboard::SystemTuning(observations, workloads, Engine::TunableNames(**spec),
                                          Engine::kMinObservationsToReuseSetting));
}

HttpResponse RestApi::Events(const HttpRequest&) {
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
      if (!w.Write("id: " + std::to_string(e->id) + "\nevent: " + e->type + "\ndata: " + e->data + "\n\n")) return;
    }
  };
  return r;
}

HttpResponse RestApi::Static(const HttpRequest& req) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // A target may be "?x" or "*": only "/..." names a file; and no file
  // name holds a NUL (%00), which the file system would cut the name at.
  if (req.path.empty() || req.path[0] != '/' || req.path.find('\0') != std::string::npos) {
    return ErrorResponse(Status::NotFound("no such file: " + req.path));
  }
  const fs::path root = fs::weakly_canonical(options_.web_root, ec);
  std::string rel = req.path == "/" ? "index.html" : req.path.substr(1);
  fs::path file = fs::weakly_canonical(root / rel, ec);
  // Nothing outside the web root, whatever the path says (.., symlinks).
  const auto [end, _] = std::mismatch(root.begin(), root.end(), file.begin(), file.end());
  if (ec || end != root.end()) return ErrorResponse(Status::NotFound("no such file: " + req.path));
  if (fs::is_directory(file, ec)) file /= "index.html";
  std::ifstream in(file, std::ios::binary);
  if (!in) return ErrorResponse(Status::NotFound("no such file: " + req.path));
  std::ostringstream body;
  body << in.rdbuf();
  HttpResponse r{200, ContentType(file), body.str(), {{"Cache-Control", "no-cache"}}, {}};
  // What the API returns is data, never markup: the pages build DOM from it
  // (web/README.md), and this policy stops any script but the dashboard's
  // own files should one slip through; frame-ancestors (which a <meta> tag
  // cannot set) keeps other sites from framing the dashboard.
  r.headers["X-Content-Type-Options"] = "nosniff";
  if (file.extension() == ".html") {
    r.headers["Content-Security-Policy"] =
        "default-src 'none'; script-src 'self'; style-src 'self'; style-src-attr 'unsafe-inline'; "
        "img-src data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";
  }
  return r;
}

}  // namespace hpo::server
