// The REST API over a real HTTP server on 127.0.0.1:0 and a real store.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <thread>

#include "common/http_client.h"
#include "common/token.h"
#include "server/engine/trial_run.h"
#include "server/http/api.h"
#include "server/http/dashboard.h"
#include "server/http/http_status.h"
#include "testing/store_backends.h"
#include "testing/store_wrapper.h"
#include "testing/world.h"

namespace hpo::server {
namespace {

using nlohmann::json;

// The real store, counting the trial reads the API makes.
class CountingStore : public testing::StoreWrapper {
 public:
  using StoreWrapper::StoreWrapper;
  Result<std::vector<store::TrialRecord>> ListTrials(store::Id experiment_id,
                                                     const store::TrialFilter& filter) override {
    ++list_trials;
    return StoreWrapper::ListTrials(experiment_id, filter);
  }
  Result<std::vector<store::TrialRecord>> ListLeasedTrials(int64_t limit) override {
    ++list_leased_trials;
    return StoreWrapper::ListLeasedTrials(limit);
  }
  std::atomic<int> list_trials{0};
  std::atomic<int> list_leased_trials{0};
};

const char* kClientSpec = R"(
name: rest-test
objective: {metric: loss, direction: minimize}
spaces:
  - name: main
    params:
      x: {type: float, low: -1, high: 1}
budget: {max_trials: 3, max_parallel: 3, steps_per_trial: 2}
executor: {client: {}}
)";

class RestApiTest : public ::testing::Test {
 protected:
  void Start(const std::string& token = "", const std::string& web_root = "") {
    testing::WorldOptions wo;
    wo.store_url = backend_.url();
    wo.wrap_store = [this](store::Store& s) {
      auto counting = std::make_unique<CountingStore>(s);
      counting_ = counting.get();
      return std::unique_ptr<store::Store>(std::move(counting));
    };
    wo.api.token = token;
    wo.api.web_root = web_root;
    auto world = testing::World::Create(std::move(wo));
    ASSERT_TRUE(world.ok()) << world.status();
    world_ = std::move(world).value();
    store_ = &world_->store();
    engine_ = &world_->engine();
    api_ = &world_->api();
    HttpServerOptions ho;
    ho.port = 0;
    ho.max_body_bytes = 64 << 10;
    api_->Attach(ho);
    auto server = HttpServer::Start(ho, [this](const HttpRequest& r) { return api_->Handle(r); });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    client_.port = server_->port();
    client_.token = token;
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }
  HttpResult Call(const std::string& method, const std::string& target,
                  const std::string& body = "") {
    auto r = HttpRequestOnce(client_, method, target, body);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : HttpResult{};
  }
  json CallJson(const std::string& method, const std::string& target, int want_status,
                const std::string& body = "") {
    auto r = Call(method, target, body);
    EXPECT_EQ(r.status, want_status) << method << " " << target << ": " << r.body;
    json j = json::parse(r.body, nullptr, false);
    return j;
  }

  testing::SqliteBackend backend_;
  std::unique_ptr<testing::World> world_;
  store::Store* store_ = nullptr;
  CountingStore* counting_ = nullptr;  // between the store and the engine
  Engine* engine_ = nullptr;
  RestApi* api_ = nullptr;
  std::unique_ptr<HttpServer> server_;
  HttpClientOptions client_;
};

// Requests the fuzzer (fuzz/fuzz_rest.cc) found: each used to read out of
// bounds, throw or answer 500; each is now a 4xx with a JSON body.
TEST_F(RestApiTest, HostileRequestsGetA4xxNotACrash) {
  Start();
  auto handle = [&](const std::string& method, const std::string& target,
                    const std::string& body = "") {
    HttpRequest req;
    req.method = method;
    ParseRequestTarget(target, req);
    req.body = body;
    if (method != "GET") req.headers["content-type"] = "application/json";  // as every client sends
    HttpResponse r = api_->Handle(req);
    EXPECT_GE(r.status, 400) << method << " " << target;
    EXPECT_LT(r.status, 500) << method << " " << target << ": " << r.body;
    EXPECT_FALSE(json::parse(r.body, nullptr, false).is_discarded()) << r.body;
    return r;
  };
  // Another method on the collection read a path segment that is not there.
  EXPECT_EQ(handle("DELETE", "/api/v1/experiments").status, 404);
  EXPECT_EQ(handle("PUT", "/api/v1/experiments?offset=0").status, 404);
  // Bytes that are not UTF-8, echoed in an error message, made the JSON writer throw.
  EXPECT_EQ(handle("GET", "/api/v1/trials/%bc%ff").status, 400);
  EXPECT_EQ(handle("G\xbcT", "/api/v1/nope").status, 404);
  // A cancel reason that is not a string threw.
  const int64_t id = CallJson("POST", "/api/v1/experiments", 201, kClientSpec)["id"];
  EXPECT_EQ(
      handle("POST", "/api/v1/experiments/" + std::to_string(id) + ":cancel", R"({"reason": 5})")
          .status,
      400);
  // A suggest count of 2^32 + 1 wrapped to 1.
  EXPECT_EQ(handle("POST", "/api/v1/experiments/" + std::to_string(id) + "/trials:suggest",
                   R"({"count": 4294967297})")
                .status,
            400);
  // Invented methods share one metrics label instead of adding one each.
  handle("FOO", "/api/v1/nope");
  const std::string text = world_->metrics().Render();
  EXPECT_EQ(text.find("method=\"FOO\""), std::string::npos);
  EXPECT_NE(text.find("method=\"other\""), std::string::npos);
}

TEST_F(RestApiTest, ATargetWithoutAPathIsNoFile) {
  const std::string root = ::testing::TempDir() + "/hpo-web-nopath-" + std::to_string(getpid());
  std::filesystem::create_directories(root);
  std::ofstream(root + "/index.html") << "<html></html>";
  Start("", root);
  HttpRequest req;
  req.method = "GET";
  ParseRequestTarget("?readyz", req);  // path "": substr(1) threw
  EXPECT_EQ(api_->Handle(req).status, 404);
  std::filesystem::remove_all(root);
}

TEST_F(RestApiTest, AskTellRoundTrip) {
  Start();
  json created = CallJson("POST", "/api/v1/experiments", 201, kClientSpec);
  const int64_t id = created["id"];
  json suggested = CallJson("POST", "/api/v1/experiments/" + std::to_string(id) + "/trials:suggest",
                            200, R"({"count": 3})");
  ASSERT_EQ(suggested["trials"].size(), 3u);
  for (const auto& t : suggested["trials"]) {
    const std::string tid = std::to_string(t["id"].get<int64_t>());
    EXPECT_EQ(t["space"], "main");
    const double x = t["params"]["x"];
    for (int step = 0; step < 2; ++step) {
      json d =
          CallJson("POST", "/api/v1/trials/" + tid + "/measurements", 200,
                   json{{"step", step}, {"metrics", {{"loss", x * x + 1.0 / (step + 1)}}}}.dump());
      EXPECT_EQ(d["decision"], "continue");
    }
    CallJson("POST", "/api/v1/trials/" + tid + ":complete", 200, "{}");
    json got = CallJson("GET", "/api/v1/trials/" + tid, 200);
    EXPECT_EQ(got["state"], "completed");
    EXPECT_EQ(got["measurements"].size(), 2u);
    EXPECT_DOUBLE_EQ(got["final_metrics"]["loss"].get<double>(), x * x + 0.5);
  }
  json exp = CallJson("GET", "/api/v1/experiments/" + std::to_string(id), 200);
  EXPECT_EQ(exp["state"], "completed");
  EXPECT_EQ(exp["trials"]["completed"], 3);
  json best = CallJson("GET", "/api/v1/experiments/" + std::to_string(id) + "/best", 200);
  double best_loss = 1e9;
  for (const auto& t : suggested["trials"]) {
    best_loss = std::min(best_loss, std::pow(t["params"]["x"].get<double>(), 2) + 0.5);
  }
  EXPECT_DOUBLE_EQ(best["final_metrics"]["loss"].get<double>(), best_loss);
  json list = CallJson("GET", "/api/v1/experiments", 200);
  EXPECT_EQ(list["experiments"].size(), 1u);
  json page = CallJson(
      "GET",
      "/api/v1/experiments/" + std::to_string(id) + "/trials?state=completed&offset=1&limit=1",
      200);
  ASSERT_EQ(page["trials"].size(), 1u);
  EXPECT_EQ(page["trials"][0]["number"], 1);
}

// Every trial in a list or read alone carries how far it got: its last
// step's metrics (what a running, paused or pruned trial reached, with no
// final metrics yet) and its device time; null and 0 before any report.
TEST_F(RestApiTest, TrialsShowTheirLatestReportBeforeTheyFinish) {
  Start();
  const int64_t id = CallJson("POST", "/api/v1/experiments", 201, kClientSpec)["id"];
  json suggested = CallJson("POST", "/api/v1/experiments/" + std::to_string(id) + "/trials:suggest",
                            200, R"({"count": 3})");
  ASSERT_EQ(suggested["trials"].size(), 3u);
  std::vector<std::string> ids;
  for (const auto& t : suggested["trials"]) {
    EXPECT_TRUE(t["latest"].is_null()) << t;
    ids.push_back(std::to_string(t["id"].get<int64_t>()));
  }
  const auto report = [&](const std::string& tid, int step, double loss) {
    CallJson("POST", "/api/v1/trials/" + tid + "/measurements", 200,
             json{{"step", step}, {"metrics", {{"loss", loss}}}}.dump());
  };
  report(ids[0], 0, 0.9);
  report(ids[0], 1, 0.4);
  report(ids[1], 0, 0.7);
  json page = CallJson("GET", "/api/v1/experiments/" + std::to_string(id) + "/trials", 200);
  ASSERT_EQ(page["trials"].size(), 3u);
  std::map<std::string, json> by_id;
  for (const auto& t : page["trials"]) by_id[std::to_string(t["id"].get<int64_t>())] = t;
  EXPECT_TRUE(by_id[ids[0]]["final_metrics"].is_null());
  EXPECT_EQ(by_id[ids[0]]["latest"]["step"], 1) << by_id[ids[0]];
  EXPECT_DOUBLE_EQ(by_id[ids[0]]["latest"]["metrics"]["loss"].get<double>(), 0.4);
  EXPECT_EQ(by_id[ids[0]]["best"]["step"], 1) << "the smaller loss";
  report(ids[1], 1, 0.8);
  EXPECT_EQ(CallJson("GET", "/api/v1/trials/" + ids[1], 200)["best"]["step"], 0)
      << "its earlier, smaller loss";
  page = CallJson("GET", "/api/v1/experiments/" + std::to_string(id) + "/trials", 200);
  for (const auto& t : page["trials"]) by_id[std::to_string(t["id"].get<int64_t>())] = t;
  EXPECT_EQ(by_id[ids[1]]["latest"]["step"], 1) << by_id[ids[1]];
  EXPECT_DOUBLE_EQ(by_id[ids[1]]["best"]["metrics"]["loss"].get<double>(), 0.7);
  EXPECT_TRUE(by_id[ids[2]]["latest"].is_null()) << by_id[ids[2]];
  EXPECT_TRUE(by_id[ids[2]]["best"].is_null()) << by_id[ids[2]];
  EXPECT_EQ(by_id[ids[0]]["device_seconds"], 0)
      << "an ask/tell client's steps run on no device of ours";
  EXPECT_TRUE(by_id[ids[0]]["device_class"].is_null()) << by_id[ids[0]];
  // A page that starts past the first trial still finds its own.
  json second = CallJson(
      "GET", "/api/v1/experiments/" + std::to_string(id) + "/trials?offset=1&limit=1", 200);
  ASSERT_EQ(second["trials"].size(), 1u);
  EXPECT_EQ(second["trials"][0]["latest"]["step"], 1) << second;
  json one = CallJson("GET", "/api/v1/trials/" + ids[0], 200);
  EXPECT_EQ(one["latest"]["step"], 1) << one;
  json best = CallJson("GET", "/api/v1/experiments/" + std::to_string(id) + "/best", 200);
  EXPECT_EQ(best["latest"]["step"], 1) << best;
}

// A step past the trial's steps_per_trial is refused naming the step and
// the limit, and stores nothing; an ask/tell spec that gives no
// steps_per_trial sets no limit of its own, and its client's steps go on.
TEST_F(RestApiTest, AReportPastTheLastStepIsRefusedAndStoresNothing) {
  Start();
  const int64_t id =
      CallJson("POST", "/api/v1/experiments", 201, kClientSpec)["id"];  // steps_per_trial: 2
  json suggested = CallJson("POST", "/api/v1/experiments/" + std::to_string(id) + "/trials:suggest",
                            200, R"({"count": 1})");
  const std::string trial =
      "/api/v1/trials/" + std::to_string(suggested["trials"][0]["id"].get<int64_t>());
  auto report = [&](const json& step, int want) {
    return CallJson("POST", trial + "/measurements", want,
                    json{{"step", step}, {"metrics", {{"loss", 1}}}}.dump());
  };
  for (const json& step : {json(3), json(4611686018427387904), json(INT64_MAX)}) {
    json e = report(step, 400);
    EXPECT_EQ(e["error"]["code"], "InvalidArgument");
    EXPECT_EQ(e["error"]["message"],
              "step: " + step.dump() + " is past the trial's last step, 2 (budget.steps_per_trial)")
        << e.dump();
  }
  EXPECT_EQ(report(2, 200)["decision"], "continue")
      << "steps_per_trial itself is a step of the trial";
  EXPECT_EQ(report(0, 200)["decision"], "continue") << "so is 0, for a client that counts from 0";
  EXPECT_EQ(CallJson("GET", trial, 200)["measurements"].size(), 2u);

  std::string unlimited = kClientSpec;
  unlimited.replace(unlimited.find(", steps_per_trial: 2"), 20, "");
  const int64_t free_id = CallJson("POST", "/api/v1/experiments", 201, unlimited)["id"];
  suggested = CallJson("POST", "/api/v1/experiments/" + std::to_string(free_id) + "/trials:suggest",
                       200, R"({"count": 1})");
  const std::string free_trial =
      "/api/v1/trials/" + std::to_string(suggested["trials"][0]["id"].get<int64_t>());
  for (int step : {0, 10, 11, 500}) {
    json d = CallJson("POST", free_trial + "/measurements", 200,
                      json{{"step", step}, {"metrics", {{"loss", 1}}}}.dump());
    EXPECT_EQ(d["decision"], "continue") << step;
  }
  json e = CallJson("POST", free_trial + "/measurements", 400,
                    json{{"step", 4611686018427387904}, {"metrics", {{"loss", 1}}}}.dump());
  EXPECT_NE(e["error"]["message"].get<std::string>().find("past the trial's last step, 1000000000"),
            std::string::npos)
      << e.dump();
  EXPECT_EQ(CallJson("GET", free_trial, 200)["measurements"].size(), 4u);
}

// A duration beyond the bound is refused naming its field, before anything
// multiplies it: 1e16 s used to make an experiment whose wall-time budget
// had already passed.
TEST_F(RestApiTest, ADurationBeyondTheBoundIsRefusedNamingTheField) {
  Start();
  std::string spec = kClientSpec;
  spec.replace(spec.find("steps_per_trial: 2"), 18, "steps_per_trial: 2, max_wall_time_s: 1e16");
  json e = CallJson("POST", "/api/v1/experiments", 400, spec);
  EXPECT_EQ(e["error"]["code"], "InvalidArgument");
  EXPECT_EQ(e["error"]["message"].get<std::string>().rfind(
                "budget.max_wall_time_s: must be at most 315360000 s", 0),
            0u)
      << e.dump();
  CallJson("POST", "/api/v1/experiments:validate", 400, spec);
  EXPECT_TRUE(CallJson("GET", "/api/v1/experiments", 200)["experiments"].empty());
}

// An ask/tell trial carries the seed a worker's lease of it would
// (server/engine/trial_run.h), the same in every answer that shows it.
TEST_F(RestApiTest, AskTellTrialsCarryTheSeedAWorkersLeaseWould) {
  Start();
  const int64_t id = CallJson("POST", "/api/v1/experiments", 201, kClientSpec)["id"];
  json suggested = CallJson("POST", "/api/v1/experiments/" + std::to_string(id) + "/trials:suggest",
                            200, R"({"count": 3})");
  ASSERT_EQ(suggested["trials"].size(), 3u);
  auto spec = engine_->Spec(id);
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::set<int64_t> seeds;
  for (const auto& t : suggested["trials"]) {
    ASSERT_TRUE(t["seed"].is_number_integer()) << t.dump();
    const int64_t seed = t["seed"];
    EXPECT_EQ(seed, TrialSeed(**spec, t["number"].get<int64_t>()));
    seeds.insert(seed);
    json got = CallJson("GET", "/api/v1/trials/" + std::to_string(t["id"].get<int64_t>()), 200);
    EXPECT_EQ(got["seed"], seed);
  }
  EXPECT_EQ(seeds.size(), 3u) << "each trial has its own seed";
  json page = CallJson("GET", "/api/v1/experiments/" + std::to_string(id) + "/trials", 200);
  for (const auto& t : page["trials"])
    EXPECT_TRUE(seeds.count(t["seed"].get<int64_t>())) << t.dump();
}

TEST_F(RestApiTest, ErrorsAreJsonWithTheRightStatusAndFieldPath) {
  Start();
  std::string bad = kClientSpec;
  bad.replace(bad.find("low: -1"), 7, "low: 5");
  json e = CallJson("POST", "/api/v1/experiments", 400, bad);
  EXPECT_EQ(e["error"]["code"], "InvalidArgument");
  EXPECT_NE(e["error"]["message"].get<std::string>().find("spaces[0].params.x.low: must be < high"),
            std::string::npos)
      << e.dump();
  CallJson("GET", "/api/v1/experiments/99", 404);
  CallJson("GET", "/api/v1/experiments/abc", 400);
  CallJson("GET", "/api/v1/nothing", 404);
  CallJson("GET", "/api/v1/experiments?limit=-3", 400);
  json created = CallJson("POST", "/api/v1/experiments", 201, kClientSpec);
  const std::string id = std::to_string(created["id"].get<int64_t>());
  json t = CallJson("POST", "/api/v1/experiments/" + id + "/trials:suggest", 200, "{}");
  const std::string tid = std::to_string(t["trials"][0]["id"].get<int64_t>());
  json missing = CallJson("POST", "/api/v1/trials/" + tid + "/measurements", 400,
                          R"({"step": 0, "metrics": {"acc": 1}})");
  EXPECT_NE(missing["error"]["message"].get<std::string>().find("metrics.loss"), std::string::npos);
  CallJson("POST", "/api/v1/trials/" + tid + "/measurements", 400, "not json");
  CallJson("POST", "/api/v1/experiments/" + id + ":cancel", 200);
  CallJson("POST", "/api/v1/experiments/" + id + ":cancel", 409);
  CallJson("POST", "/api/v1/experiments/" + id + "/trials:suggest", 409, "{}");
  // A body over the limit is refused before it is read whole.
  auto big = Call("POST", "/api/v1/experiments", std::string(100 << 10, 'x'));
  EXPECT_EQ(big.status, 413);
}

TEST_F(RestApiTest, TokenGuardsEveryRouteButTheProbes) {
  Start("s3cret-token");
  EXPECT_EQ(Call("GET", "/healthz").status, 200);
  EXPECT_EQ(Call("GET", "/api/v1/experiments").status, 200);
  HttpClientOptions anonymous = client_;
  anonymous.token = "";
  // The readiness probe is open (it says only whether the store answers).
  EXPECT_EQ(HttpRequestOnce(anonymous, "GET", "/readyz")->status, 200);
  for (const char* path : {"/api/v1/experiments", "/metrics", "/openapi.json", "/api/v1/workers"}) {
    auto r = HttpRequestOnce(anonymous, "GET", path);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->status, 401) << path;
    EXPECT_EQ(r->body.find("s3cret"), std::string::npos);
  }
  HttpClientOptions wrong = client_;
  wrong.token = "s3cret-tokeN";
  EXPECT_EQ(HttpRequestOnce(wrong, "GET", "/api/v1/experiments")->status, 401);
  EXPECT_TRUE(TokenEquals("abc", "abc"));
  EXPECT_FALSE(TokenEquals("abc", "abcd"));
  EXPECT_FALSE(TokenEquals("abcd", "abc"));
  EXPECT_FALSE(TokenEquals("", "a"));
  EXPECT_EQ(BearerToken("bEaReR  t0k").value_or(""), "t0k");
  EXPECT_FALSE(BearerToken("Basic t0k"));
  EXPECT_FALSE(BearerToken("Bearer"));
}

TEST_F(RestApiTest, MetricsPassPromtool) {
  Start();
  CallJson("POST", "/api/v1/experiments", 201, kClientSpec);
  auto r = Call("GET", "/metrics");
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("hpo_http_requests_total"), std::string::npos);
  const std::string path = ::testing::TempDir() + "/rest_metrics.txt";
  std::ofstream(path) << r.body;
  const std::string cmd = "promtool check metrics < " + path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[256];
  while (fgets(buf, sizeof buf, p)) out += buf;
  EXPECT_EQ(pclose(p), 0) << out << "\n" << r.body;
  EXPECT_EQ(out, "");
}

TEST_F(RestApiTest, OpenApiDescribesEveryRoute) {
  Start();
  json doc = CallJson("GET", "/openapi.json", 200);
  for (const char* path :
       {"/healthz", "/readyz", "/metrics", "/api/v1/experiments", "/api/v1/experiments/{id}",
        "/api/v1/experiments/{id}:cancel", "/api/v1/experiments/{id}/trials",
        "/api/v1/experiments/{id}/best", "/api/v1/experiments/{id}/trials:suggest",
        "/api/v1/trials/{id}", "/api/v1/trials/{id}/measurements", "/api/v1/trials/{id}:complete",
        "/api/v1/trials/{id}:fail", "/api/v1/workers", "/api/v1/events",
        "/api/v1/experiments/{id}/measurements", "/api/v1/experiments/{id}/system-tuning"}) {
    EXPECT_TRUE(doc["paths"].contains(path)) << path;
  }
  EXPECT_EQ(Call("GET", "/readyz").status, 200);
}

// The route table is the router and the document's paths: /openapi.json
// lists exactly the table's (method, path) pairs, and every one of them is
// answered by its route (never "no route"), with ids filled in.
TEST_F(RestApiTest, EveryRouteIsDocumentedAndEveryDocumentedRouteAnswers) {
  Start();
  const json doc = CallJson("GET", "/openapi.json", 200);
  std::set<std::pair<std::string, std::string>> documented;
  for (const auto& [path, methods] : doc.at("paths").items()) {
    for (const auto& [method, _] : methods.items()) {
      std::string m = method;
      for (char& c : m) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      documented.emplace(m, path);
    }
  }
  std::set<std::pair<std::string, std::string>> routed;
  for (const auto& r : RestApi::Routes()) {
    EXPECT_TRUE(routed.emplace(r.method, r.path).second)
        << "two rows for " << r.method << " " << r.path;
  }
  EXPECT_EQ(documented, routed);
  EXPECT_GE(routed.size(), 20u);
  const int64_t id = CallJson("POST", "/api/v1/experiments", 201, kClientSpec)["id"];
  for (const auto& [method, path] : documented) {
    if (path == "/api/v1/events") continue;  // a stream: it would not end
    std::string target = path;
    if (const auto at = target.find("{id}"); at != std::string::npos)
      target.replace(at, 4, std::to_string(id));
    const HttpResult r = Call(method, target, method == "POST" ? "{}" : "");
    EXPECT_EQ(r.body.find("no route for"), std::string::npos)
        << method << " " << target << ": " << r.body;
    EXPECT_LT(r.status, 500) << method << " " << target << ": " << r.body;
  }
}

// The one conversion from Status to HTTP, including the causes HTTP names
// more precisely than a Status code.
TEST(HttpStatusTest, OneMappingWithCausesThatRefineOnlyTheirOwnCode) {
  EXPECT_EQ(HttpStatusFor(Status::ResourceExhausted("disk full")), 429);
  EXPECT_EQ(HttpStatusFor(Status::ResourceExhausted("big"), HttpCause::kBodyTooLarge), 413);
  EXPECT_EQ(HttpStatusFor(Status::ResourceExhausted("big"), HttpCause::kHeadersTooLarge), 431);
  EXPECT_EQ(HttpStatusFor(Status::InvalidArgument("type"), HttpCause::kUnsupportedMediaType), 415);
  // A cause given with another code does not change it.
  EXPECT_EQ(HttpStatusFor(Status::Unavailable("down"), HttpCause::kBodyTooLarge), 503);
  EXPECT_EQ(HttpStatusFor(Status::Internal("bug")), 500);
  // A load limit may pass; a body too large fails the same way each time.
  EXPECT_EQ(ErrorResponse(Status::ResourceExhausted("disk full")).headers.count("Retry-After"), 1u);
  const HttpResponse big =
      ErrorResponse(Status::ResourceExhausted("big"), HttpCause::kBodyTooLarge);
  EXPECT_EQ(big.status, 413);
  EXPECT_EQ(big.headers.count("Retry-After"), 0u);
  EXPECT_EQ(json::parse(big.body)["error"]["code"], "ResourceExhausted");
}

// The HTTP server's own refusals go through the same conversion: a body
// over max_body_bytes is a 413 ResourceExhausted without Retry-After, and a
// handler that throws is a 500 Internal with the same error shape.
TEST_F(RestApiTest, TheServersOwnRefusalsUseTheOneConversion) {
  Start();
  auto big = Call("POST", "/api/v1/experiments", std::string(100 << 10, 'x'));
  EXPECT_EQ(big.status, 413);
  EXPECT_EQ(json::parse(big.body, nullptr, false)["error"]["code"], "ResourceExhausted")
      << big.body;
  EXPECT_EQ(big.headers.count("retry-after"), 0u);
  HttpServerOptions ho;
  ho.port = 0;
  auto throwing = HttpServer::Start(
      ho, [](const HttpRequest&) -> HttpResponse { throw std::runtime_error("bug"); });
  ASSERT_TRUE(throwing.ok()) << throwing.status();
  HttpClientOptions o;
  o.port = (*throwing)->port();
  auto r = HttpRequestOnce(o, "GET", "/anything");
  (*throwing)->Shutdown();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 500);
  EXPECT_EQ(json::parse(r->body, nullptr, false)["error"]["code"], "Internal") << r->body;
}

// What every worker runs now is one read of the store for all experiments,
// not one per experiment and trial state.
TEST_F(RestApiTest, WorkersListReadsTheRunningTrialsOnce) {
  Start();
  for (int i = 0; i < 3; ++i) {
    const int64_t id = CallJson("POST", "/api/v1/experiments", 201, kClientSpec)["id"];
    CallJson("POST", "/api/v1/experiments/" + std::to_string(id) + "/trials:suggest", 200, "{}");
  }
  const int before = counting_->list_trials;
  CallJson("GET", "/api/v1/workers", 200);
  EXPECT_EQ(counting_->list_trials - before, 0);
  EXPECT_EQ(counting_->list_leased_trials, 1);
}

TEST_F(RestApiTest, EventsStreamTrialChangesLive) {
  Start();
  json created = CallJson("POST", "/api/v1/experiments", 201, kClientSpec);
  const std::string id = std::to_string(created["id"].get<int64_t>());
  json t = CallJson("POST", "/api/v1/experiments/" + id + "/trials:suggest", 200, "{}");
  const std::string tid = std::to_string(t["trials"][0]["id"].get<int64_t>());
  std::atomic<bool> got_finished{false};
  std::thread listener([&] {
    HttpClientOptions o = client_;
    o.timeout = std::chrono::milliseconds(10'000);
    Status s =
        ReadEventStream(o, "/api/v1/events", [&](const std::string& type, const std::string& data) {
          if (type == "trial.finished" && json::parse(data)["trial_id"] == std::stoll(tid)) {
            got_finished = true;
            return false;
          }
          return true;
        });
    EXPECT_TRUE(s.ok()) << s;
  });
  for (int i = 0; i < 100 && world_->events().subscribers() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CallJson("POST", "/api/v1/trials/" + tid + "/measurements", 200,
           R"({"step": 0, "metrics": {"loss": 0.5}})");
  CallJson("POST", "/api/v1/trials/" + tid + ":complete", 200, "{}");
  listener.join();
  EXPECT_TRUE(got_finished);
}

TEST_F(RestApiTest, ServesTheWebRootAndNothingOutsideIt) {
  const std::string root = ::testing::TempDir() + "/hpo-web-" + std::to_string(getpid());
  std::filesystem::create_directories(root + "/js");
  const std::string page = "<html><script type=\"module\" src=\"/js/app.js\"></script></html>";
  std::ofstream(root + "/index.html") << page;
  std::ofstream(root + "/js/app.js") << "console.log(1)";
  std::ofstream(::testing::TempDir() + "/secret.txt") << "do not serve";
  Start("", root);
  auto index = Call("GET", "/");
  EXPECT_EQ(index.status, 200);
  EXPECT_EQ(index.body, page);
  EXPECT_EQ(index.headers["content-type"], "text/html; charset=utf-8");
  EXPECT_EQ(Call("GET", "/js/app.js").status, 200);
  for (const char* evil :
       {"/../secret.txt", "/js/../../secret.txt", "/%2e%2e/secret.txt", "/nope.html"}) {
    auto r = Call("GET", evil);
    EXPECT_EQ(r.status, 404) << evil;
    EXPECT_EQ(r.body.find("do not serve"), std::string::npos) << evil;
  }
  std::filesystem::remove_all(root);
}

TEST_F(RestApiTest, DashboardFilesAndTheEventStreamOpenToABrowser) {
  const std::string root = ::testing::TempDir() + "/hpo-web-auth-" + std::to_string(getpid());
  std::filesystem::create_directories(root);
  std::ofstream(root + "/index.html") << "<html>dashboard</html>";
  Start("s3cret-token", root);
  HttpClientOptions browser = client_;
  browser.token = "";
  // A page opens without a header; the data behind it stays guarded.
  EXPECT_EQ(HttpRequestOnce(browser, "GET", "/")->status, 200);
  EXPECT_EQ(HttpRequestOnce(browser, "GET", "/index.html")->status, 200);
  EXPECT_EQ(HttpRequestOnce(browser, "GET", "/api/v1/experiments")->status, 401);
  EXPECT_EQ(HttpRequestOnce(browser, "GET", "/metrics")->status, 401);
  EXPECT_EQ(
      HttpRequestOnce(browser, "GET", "/api/v1/experiments?access_token=s3cret-token")->status, 401)
      << "only the event stream takes the token in the URL";
  EXPECT_EQ(HttpRequestOnce(browser, "GET", "/api/v1/events?access_token=wrong")->status, 401);
  bool got = false;
  std::thread listener([&] {
    HttpClientOptions o = browser;
    o.timeout = std::chrono::milliseconds(10'000);
    Status s = ReadEventStream(o, "/api/v1/events?access_token=s3cret-token",
                               [&](const std::string& type, const std::string&) {
                                 got = type == "test.ping";
                                 return !got;
                               });
    EXPECT_TRUE(s.ok()) << s;
  });
  for (int i = 0; i < 250 && world_->events().subscribers() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  world_->events().Publish("test.ping", json::object());
  listener.join();
  EXPECT_TRUE(got);
  std::filesystem::remove_all(root);
}

TEST_F(RestApiTest, LearningCurvesAndSystemTuningForTheDashboard) {
  Start();
  std::string spec = kClientSpec;
  spec.replace(spec.find("steps_per_trial: 2"), 18, "steps_per_trial: 10");
  json created = CallJson("POST", "/api/v1/experiments", 201, spec);
  const std::string id = std::to_string(created["id"].get<int64_t>());
  json suggested =
      CallJson("POST", "/api/v1/experiments/" + id + "/trials:suggest", 200, R"({"count": 3})");
  ASSERT_EQ(suggested["trials"].size(), 3u);
  for (const auto& t : suggested["trials"]) {
    EXPECT_GT(t["priority"].get<double>(), 0) << "the space's share when the trial was created";
    for (int step = 0; step < 10; ++step) {
      CallJson("POST", "/api/v1/trials/" + std::to_string(t["id"].get<int64_t>()) + "/measurements",
               200,
               json{{"step", step}, {"metrics", {{"loss", 1.0 / (step + 1)}, {"acc", step * 0.1}}}}
                   .dump());
    }
  }
  json all = CallJson("GET", "/api/v1/experiments/" + id + "/measurements", 200);
  EXPECT_EQ(all["metric"], "loss");
  EXPECT_EQ(all["points"], 30);
  EXPECT_EQ(all["downsampled"], false);
  ASSERT_EQ(all["trials"].size(), 3u);
  EXPECT_EQ(all["trials"][0]["trial_id"], suggested["trials"][0]["id"]);
  EXPECT_DOUBLE_EQ(all["trials"][0]["values"][9].get<double>(), 0.1);
  // 9 points for 3 trials: 3 per curve, first, middle and last step.
  json thin =
      CallJson("GET", "/api/v1/experiments/" + id + "/measurements?metric=acc&max_points=9", 200);
  EXPECT_EQ(thin["metric"], "acc");
  EXPECT_EQ(thin["points"], 9);
  EXPECT_EQ(thin["downsampled"], true);
  EXPECT_EQ(thin["trials"][2]["steps"], json::parse("[0, 5, 9]"));
  CallJson("GET", "/api/v1/experiments/" + id + "/measurements?max_points=0", 400);
  CallJson("GET", "/api/v1/experiments/77/measurements", 404);
}

// The co-tuning view: samples/s against the tuned parameter (threads), a
// line per bucket of the searched batch size, and in each bucket what a
// trial of that batch size starts from, chosen by the fit in log batch size
// (SpeedModel::BestTunables), not by the fastest whole setting.
TEST_F(RestApiTest, SystemTuningShowsSpeedAgainstTheTunedParameterPerBatchBucket) {
  Start();
  std::string spec = kClientSpec;
  spec.replace(spec.find("budget:"), 0,
               "system:\n  threads: {type: int, low: 1, high: 4}\n"
               "  batch_size: {type: int, low: 32, high: 512, log: true}\n");
  json created = CallJson("POST", "/api/v1/experiments", 201, spec);
  const std::string id = std::to_string(created["id"].get<int64_t>());
  // Speed observations come from workers' reports; write them directly.
  store::NewWorker w;
  w.host = "h";
  store::DeviceInfo device;
  device.name = "cpu";
  device.device_class = "cpu:fast";
  w.devices.push_back(device);
  auto worker = store_->RegisterWorker(w);
  ASSERT_TRUE(worker.ok()) << worker.status();
  const std::string workload = Engine::Workload(*ParseExperimentSpec(spec), "main");
  auto observe = [&](const std::string& device_class, int threads, int batch, double sps) {
    store::SpeedObservation o;
    o.device_id = worker->devices[0].id;
    o.device_class = device_class;
    o.workload = workload;
    o.system_setting_json = json{{"threads", threads}, {"batch_size", batch}}.dump();
    o.samples_per_sec = sps;
    auto added = store_->AddSpeedObservation(o);
    ASSERT_TRUE(added.ok()) << added.status();
  };
  // Two threads are faster at every batch size; one thread was only ever
  // seen with the big batch, the fastest whole setting.
  observe("cpu:fast", 2, 64, 180);
  observe("cpu:fast", 2, 64, 220);
  observe("cpu:fast", 2, 256, 400);
  observe("cpu:fast", 2, 256, 420);
  observe("cpu:fast", 1, 512, 490);
  observe("cpu:fast", 1, 512, 510);
  observe("cpu:slow", 1, 64, 50);
  // Another workload does not show.
  store::SpeedObservation other;
  other.device_id = worker->devices[0].id;
  other.device_class = "cpu:fast";
  other.workload = "other-program/main@0000000000000000";
  other.system_setting_json = R"({"threads": 3, "batch_size": 64})";
  other.samples_per_sec = 5000;
  ASSERT_TRUE(store_->AddSpeedObservation(other).ok());

  json tuning = CallJson("GET", "/api/v1/experiments/" + id + "/system-tuning", 200);
  ASSERT_EQ(tuning["workloads"].size(), 1u) << tuning.dump();
  EXPECT_EQ(tuning["workloads"][0]["workload"], workload);
  EXPECT_EQ(tuning["workloads"][0]["tunable"], json::parse(R"(["threads"])"));
  const json& classes = tuning["workloads"][0]["device_classes"];
  ASSERT_EQ(classes.size(), 2u) << classes.dump();
  EXPECT_EQ(classes[0]["device_class"], "cpu:fast");
  const json& buckets = classes[0]["buckets"];
  ASSERT_EQ(buckets.size(), 3u) << buckets.dump();
  EXPECT_EQ(buckets[0]["batch_size"], 64);
  EXPECT_EQ(buckets[1]["batch_size"], 256);
  EXPECT_EQ(buckets[2]["batch_size"], 512);
  ASSERT_EQ(buckets[0]["points"].size(), 1u);
  EXPECT_EQ(buckets[0]["points"][0]["tunables"], json::parse(R"({"threads": 2})"));
  EXPECT_DOUBLE_EQ(buckets[0]["points"][0]["samples_per_sec"].get<double>(), 200);
  EXPECT_EQ(buckets[0]["points"][0]["observations"], 2);
  ASSERT_EQ(buckets[2]["points"].size(), 1u);
  EXPECT_EQ(buckets[2]["points"][0]["tunables"], json::parse(R"({"threads": 1})"));
  EXPECT_DOUBLE_EQ(buckets[2]["points"][0]["samples_per_sec"].get<double>(), 500);
  // Two threads in every bucket, although the fastest whole setting seen
  // (500 samples/s) had one thread: it had the biggest batch, and two
  // threads at 256 scale up to more than that at 512.
  for (const json& b : buckets)
    EXPECT_EQ(b["chosen"], json::parse(R"({"threads": 2})")) << buckets.dump();
  // Seen once: not reused yet.
  EXPECT_EQ(classes[1]["buckets"][0]["chosen"], nullptr) << classes.dump();
}

TEST(DashboardLearningCurves, SkipsStepsWithoutTheMetricAndKeepsEveryTrialsEnds) {
  std::vector<store::MeasurementRecord> ms;
  auto add = [&](store::Id trial, int64_t step, const std::string& metrics) {
    store::MeasurementRecord m;
    m.trial_id = trial;
    m.step = step;
    m.metrics_json = metrics;
    ms.push_back(m);
  };
  for (int step = 0; step < 100; ++step) add(1, step, json{{"loss", step}}.dump());
  add(2, 0, R"({"acc": 1})");
  add(2, 1, R"({"loss": "nan"})");
  add(2, 2, R"({"loss": 7})");
  json c = dashboard::LearningCurves(ms, "loss", 10);
  ASSERT_EQ(c["trials"].size(), 2u);
  EXPECT_EQ(c["trials"][0]["steps"].size(), 5u);
  EXPECT_EQ(c["trials"][0]["steps"].front(), 0);
  EXPECT_EQ(c["trials"][0]["steps"].back(), 99);
  EXPECT_EQ(c["trials"][1]["steps"], json::parse("[2]"));
  EXPECT_EQ(c["points"], 6);
  EXPECT_TRUE(dashboard::LearningCurves({}, "loss", 10)["trials"].empty());
}

// Cost-aware placement's spec through REST: prices must name a class or a
// label some registered worker has, a deadline must lie ahead, and the
// workers' listing shows what each device costs each priced experiment.
TEST_F(RestApiTest, PricesAndDeadlinesAreCheckedAndShownPerDevice) {
  Start();
  auto add = [&](const std::string& host, const std::string& pool) {
    WorkerRegistration w;
    w.host = host;
    w.labels = {{"pool", pool}};
    store::DeviceInfo d;
    d.kind = store::DeviceKind::kCpu;
    d.name = "cpu-" + host;
    d.cores = 1;
    d.benchmark_gflops = 10;
    w.devices.push_back(d);
    auto r = engine_->RegisterWorker(w);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->worker.devices.at(0).device_class : std::string();
  };
  const std::string cheap_class = add("cheap", "cpu");
  add("dear", "gpu");
  auto spec_with = [](const json& cost) {
    json spec = {
        {"name", "priced"},
        {"objective", {{"metric", "loss"}}},
        {"spaces",
         {{{"name", "s"}, {"params", {{"x", {{"type", "float"}, {"low", 0}, {"high", 1}}}}}}}},
        {"executor", {{"command", {{"argv", {"true"}}}}}},
        {"cost", cost}};
    return spec.dump();
  };
  json r =
      CallJson("POST", "/api/v1/experiments", 400, spec_with({{"prices", {{"pool=tpu", 9.0}}}}));
  EXPECT_NE(
      r["error"]["message"].get<std::string>().find("cost.prices.pool=tpu: no registered worker"),
      std::string::npos)
      << r;
  r = CallJson("POST", "/api/v1/experiments", 400,
               spec_with({{"prices", {{"pool=cpu", 1.0}}}, {"deadline", "2001-01-01T00:00:00Z"}}));
  EXPECT_NE(r["error"]["message"].get<std::string>().find("cost.deadline"), std::string::npos) << r;
  EXPECT_NE(r["error"]["message"].get<std::string>().find("has passed"), std::string::npos) << r;
  r = CallJson("POST", "/api/v1/experiments", 400, spec_with({{"deadline_s", 60}}));
  EXPECT_NE(r["error"]["message"].get<std::string>().find("give the prices too"), std::string::npos)
      << r;
  r = CallJson("POST", "/api/v1/experiments", 400, spec_with({{"prices", {{"pool=cpu", -1.0}}}}));
  EXPECT_NE(r["error"]["message"].get<std::string>().find("cost.prices.pool=cpu"),
            std::string::npos)
      << r;

  const int64_t id = CallJson("POST", "/api/v1/experiments", 201,
                              spec_with({{"prices", {{"pool=gpu", 30.0}, {cheap_class, 1.5}}},
                                         {"deadline_s", 3600}}))["id"];
  json workers = CallJson("GET", "/api/v1/workers", 200)["workers"];
  ASSERT_EQ(workers.size(), 2u);
  std::map<std::string, double> per_hour;
  for (const auto& w : workers) {
    for (const auto& d : w["devices"]) {
      ASSERT_EQ(d["prices"].size(), 1u) << d;
      EXPECT_EQ(d["prices"][0]["experiment_id"], id);
      per_hour[w["host"]] = d["prices"][0]["per_hour"];
    }
  }
  EXPECT_DOUBLE_EQ(per_hour["cheap"], 1.5) << "by its class";
  EXPECT_DOUBLE_EQ(per_hour["dear"], 30.0) << "by its worker's label";
  // What it has used so far, and its budget, with the experiment.
  json e = CallJson("GET", "/api/v1/experiments/" + std::to_string(id), 200);
  EXPECT_EQ(e["usage"]["device_seconds"], 0) << e["usage"];
  EXPECT_EQ(e["usage"]["cost"], 0) << e["usage"];
  EXPECT_TRUE(e["usage"]["budget"].is_null()) << e["usage"];
  const int64_t budgeted =
      CallJson("POST", "/api/v1/experiments", 201,
               spec_with({{"prices", {{"pool=cpu", 1.0}}}, {"budget", 2.5}}))["id"];
  e = CallJson("GET", "/api/v1/experiments/" + std::to_string(budgeted), 200);
  EXPECT_EQ(e["usage"]["budget"], 2.5) << e["usage"];
  r = CallJson("POST", "/api/v1/experiments", 400, spec_with({{"budget", 2.5}}));
  EXPECT_NE(r["error"]["message"].get<std::string>().find("cost.budget"), std::string::npos) << r;
}

}  // namespace
}  // namespace hpo::server
