// The REST API over a real HTTP server on 127.0.0.1:0 and a real store.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/http_client.h"
#include "server/api.h"
#include "tests/store_backends.h"

namespace hpo::server {
namespace {

using nlohmann::json;

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
    auto s = store::OpenStore(backend_.url());
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(s).value();
    EngineOptions eo;
    eo.on_event = [this](std::string type, const json& data) { events_.Publish(std::move(type), data); };
    engine_ = std::make_unique<Engine>(*store_, eo);
    api_ = std::make_unique<RestApi>(*engine_, events_, metrics_, ApiOptions{token, web_root});
    HttpServerOptions ho;
    ho.port = 0;
    ho.max_body_bytes = 64 << 10;
    auto server = HttpServer::Start(ho, [this](const HttpRequest& r) { return api_->Handle(r); });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    client_.port = server_->port();
    client_.token = token;
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }
  HttpResult Call(const std::string& method, const std::string& target, const std::string& body = "") {
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
  std::unique_ptr<store::Store> store_;
  EventBus events_;
  metrics::Registry metrics_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<RestApi> api_;
  std::unique_ptr<HttpServer> server_;
  HttpClientOptions client_;
};

TEST_F(RestApiTest, AskTellRoundTrip) {
  Start();
  json created = CallJson("POST", "/api/v1/experiments", 201, kClientSpec);
  const int64_t id = created["id"];
  json suggested = CallJson("POST", "/api/v1/experiments/" + std::to_string(id) + "/trials:suggest", 200,
                            R"({"count": 3})");
  ASSERT_EQ(suggested["trials"].size(), 3u);
  for (const auto& t : suggested["trials"]) {
    const std::string tid = std::to_string(t["id"].get<int64_t>());
    EXPECT_EQ(t["space"], "main");
    const double x = t["params"]["x"];
    for (int step = 0; step < 2; ++step) {
      json d = CallJson("POST", "/api/v1/trials/" + tid + "/measurements", 200,
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
  json page = CallJson("GET", "/api/v1/experiments/" + std::to_string(id) + "/trials?state=completed&offset=1&limit=1", 200);
  ASSERT_EQ(page["trials"].size(), 1u);
  EXPECT_EQ(page["trials"][0]["number"], 1);
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
  json missing = CallJson("POST", "/api/v1/trials/" + tid + "/measurements", 400, R"({"step": 0, "metrics": {"acc": 1}})");
  EXPECT_NE(missing["error"]["message"].get<std::string>().find("metrics.loss"), std::string::npos);
  CallJson("POST", "/api/v1/trials/" + tid + "/measurements", 400, "not json");
  CallJson("POST", "/api/v1/experiments/" + id + ":cancel", 200);
  CallJson("POST", "/api/v1/experiments/" + id + ":cancel", 409);
  CallJson("POST", "/api/v1/experiments/" + id + "/trials:suggest", 409, "{}");
  // A body over the limit is refused before it is read whole.
  auto big = Call("POST", "/api/v1/experiments", std::string(100 << 10, 'x'));
  EXPECT_EQ(big.status, 413);
}

TEST_F(RestApiTest, TokenGuardsEveryRouteButHealthz) {
  Start("s3cret-token");
  EXPECT_EQ(Call("GET", "/healthz").status, 200);
  EXPECT_EQ(Call("GET", "/api/v1/experiments").status, 200);
  HttpClientOptions anonymous = client_;
  anonymous.token = "";
  for (const char* path : {"/api/v1/experiments", "/metrics", "/readyz", "/openapi.json", "/api/v1/workers"}) {
    auto r = HttpRequestOnce(anonymous, "GET", path);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->status, 401) << path;
    EXPECT_EQ(r->body.find("s3cret"), std::string::npos);
  }
  HttpClientOptions wrong = client_;
  wrong.token = "s3cret-tokeN";
  EXPECT_EQ(HttpRequestOnce(wrong, "GET", "/api/v1/experiments")->status, 401);
  EXPECT_TRUE(SecureEquals("abc", "abc"));
  EXPECT_FALSE(SecureEquals("abc", "abcd"));
  EXPECT_FALSE(SecureEquals("", "a"));
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
  for (const char* path : {"/healthz", "/readyz", "/metrics", "/api/v1/experiments", "/api/v1/experiments/{id}",
                           "/api/v1/experiments/{id}:cancel", "/api/v1/experiments/{id}/trials",
                           "/api/v1/experiments/{id}/best", "/api/v1/experiments/{id}/trials:suggest",
                           "/api/v1/trials/{id}", "/api/v1/trials/{id}/measurements", "/api/v1/trials/{id}:complete",
                           "/api/v1/trials/{id}:fail", "/api/v1/workers", "/api/v1/events"}) {
    EXPECT_TRUE(doc["paths"].contains(path)) << path;
  }
  EXPECT_EQ(Call("GET", "/readyz").status, 200);
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
    Status s = ReadEventStream(o, "/api/v1/events", [&](const std::string& type, const std::string& data) {
      if (type == "trial.finished" && json::parse(data)["trial_id"] == std::stoll(tid)) {
        got_finished = true;
        return false;
      }
      return true;
    });
    EXPECT_TRUE(s.ok()) << s;
  });
  for (int i = 0; i < 100 && events_.subscribers() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CallJson("POST", "/api/v1/trials/" + tid + "/measurements", 200, R"({"step": 0, "metrics": {"loss": 0.5}})");
  CallJson("POST", "/api/v1/trials/" + tid + ":complete", 200, "{}");
  listener.join();
  EXPECT_TRUE(got_finished);
}

TEST_F(RestApiTest, ServesTheWebRootAndNothingOutsideIt) {
  const std::string root = ::testing::TempDir() + "/hpo-web-" + std::to_string(getpid());
  std::filesystem::create_directories(root + "/js");
  std::ofstream(root + "/index.html") << "<html>dashboard</html>";
  std::ofstream(root + "/js/app.js") << "console.log(1)";
  std::ofstream(::testing::TempDir() + "/secret.txt") << "do not serve";
  Start("", root);
  auto index = Call("GET", "/");
  EXPECT_EQ(index.status, 200);
  EXPECT_EQ(index.body, "<html>dashboard</html>");
  EXPECT_EQ(index.headers["content-type"], "text/html; charset=utf-8");
  EXPECT_EQ(Call("GET", "/js/app.js").status, 200);
  for (const char* evil : {"/../secret.txt", "/js/../../secret.txt", "/%2e%2e/secret.txt", "/nope.html"}) {
    auto r = Call("GET", evil);
    EXPECT_EQ(r.status, 404) << evil;
    EXPECT_EQ(r.body.find("do not serve"), std::string::npos) << evil;
  }
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace hpo::server
