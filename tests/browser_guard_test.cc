// A web page must not drive the REST API from a user's browser, against the real hpo-server in its
// default setup: no token. The requests are the ones a browser sends for a cross-site form or fetch
// and for a DNS-rebinding page; each is refused and nothing is created. See
// server/http/browser_guard.h.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "testing/server_process.h"
#include "tests/raw_http.h"

namespace hpo {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::RawRequest;
using testing::StatusOf;

// The attacker's spec from the issue: a command experiment, code on every worker.
constexpr const char* kCommandSpec =
    "name: p\nobjective: {metric: loss}\nspaces: [{name: s, params: {x: [1]}}]\n"
    "executor: {command: {argv: [sh, -c, id]}}";

class BrowserGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/hpo-browser-guard-" + std::to_string(getpid());
    fs::remove_all(dir_);
  }
  void TearDown() override {
    server_.reset();
    fs::remove_all(dir_);
  }
  void StartServer(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--store", "sqlite://" + dir_ + "/hpo.db"};
    args.insert(args.end(), extra.begin(), extra.end());
    server_ = std::make_unique<testing::ServerProcess>(HPO_SERVER_BIN, dir_, args);
    ASSERT_TRUE(server_->Start().ok()) << server_->Log();
    self_ = "127.0.0.1:" + std::to_string(server_->http_port());
  }
  // A request with exactly these headers (and Connection: close).
  std::string Send(const std::string& method, const std::string& target,
                   const std::vector<std::string>& headers, const std::string& body = "") {
    std::string r = method + " " + target + " HTTP/1.1\r\n";
    for (const auto& h : headers) r += h + "\r\n";
    r += "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    return RawRequest(server_->http_port(), r);
  }
  size_t ExperimentCount() {
    const std::string raw = Send("GET", "/api/v1/experiments", {"Host: " + self_});
    EXPECT_EQ(StatusOf(raw), 200) << raw;
    const json j = json::parse(raw.substr(raw.find("\r\n\r\n") + 4), nullptr, false);
    return j.is_object() ? j["experiments"].size() : 0;
  }

  std::string dir_;
  std::string self_;  // the Host a local client sends
  std::unique_ptr<testing::ServerProcess> server_;
};

TEST_F(BrowserGuardTest, CrossSiteAndRebindingRequestsAreRefusedAndCreateNothing) {
  StartServer();
  const std::string port = std::to_string(server_->http_port());
  // The issue's reproduction: a cross-site text/plain POST through a rebound name.
  std::string raw = Send(
      "POST", "/api/v1/experiments",
      {"Host: evil.example:" + port, "Origin: http://evil.example", "Content-Type: text/plain"},
      kCommandSpec);
  EXPECT_EQ(StatusOf(raw), 403) << raw;
  // A cross-site form or fetch to 127.0.0.1 (no preflight: a CORS-simple type).
  for (const char* type :
       {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"}) {
    raw = Send(
        "POST", "/api/v1/experiments",
        {"Host: " + self_, "Origin: http://evil.example", std::string("Content-Type: ") + type},
        kCommandSpec);
    EXPECT_EQ(StatusOf(raw), 403) << type << ": " << raw;
    EXPECT_NE(raw.find("cross-origin request from 'http://evil.example' refused"),
              std::string::npos)
        << raw;
  }
  // Browsers that send no Origin: the type alone stops it.
  raw = Send("POST", "/api/v1/experiments", {"Host: " + self_, "Content-Type: text/plain"},
             kCommandSpec);
  EXPECT_EQ(StatusOf(raw), 415) << raw;
  raw = Send("POST", "/api/v1/experiments", {"Host: " + self_}, kCommandSpec);
  EXPECT_EQ(StatusOf(raw), 415) << "no Content-Type at all: " << raw;
  // A JSON body from another origin (a preflight it would never pass).
  raw = Send("POST", "/api/v1/experiments",
             {"Host: " + self_, "Origin: http://evil.example", "Content-Type: application/json"},
             "{}");
  EXPECT_EQ(StatusOf(raw), 403) << raw;
  // A rebinding page reads data: its own name in Host, same-origin to the browser.
  raw = Send("GET", "/api/v1/experiments", {"Host: evil.example:" + port});
  EXPECT_EQ(StatusOf(raw), 403) << raw;
  EXPECT_NE(raw.find("--allowed-host"), std::string::npos) << raw;
  raw = Send("GET", "/api/v1/experiments",
             {"Host: evil.example:" + port, "Origin: http://evil.example:" + port});
  EXPECT_EQ(StatusOf(raw), 403) << raw;
  // A bodyless POST (fetch with mode no-cors) to cancel.
  raw = Send("POST", "/api/v1/experiments/1:cancel", {"Host: " + self_});
  EXPECT_EQ(StatusOf(raw), 415) << raw;
  EXPECT_EQ(ExperimentCount(), 0u) << "a refused request created an experiment";
  // Without a route there is nothing to protect: a 404, not a 415.
  raw = Send("POST", "/api/v1/no-such-route", {"Host: " + self_});
  EXPECT_EQ(StatusOf(raw), 404) << raw;
  raw = Send("DELETE", "/api/v1/experiments/1", {"Host: " + self_});
  EXPECT_EQ(StatusOf(raw), 404) << raw;
  // The probe answers any name.
  EXPECT_EQ(StatusOf(Send("GET", "/healthz", {"Host: evil.example"})), 200);
}

TEST_F(BrowserGuardTest, LocalClientsAndTheDashboardItselfGetThrough) {
  StartServer();
  const std::string port = std::to_string(server_->http_port());
  // hpctl, curl -H 'Content-Type: application/json', the Python client.
  EXPECT_EQ(StatusOf(Send("POST", "/api/v1/experiments",
                          {"Host: " + self_, "Content-Type: application/yaml"}, kCommandSpec)),
            201);
  EXPECT_EQ(
      StatusOf(Send("POST", "/api/v1/experiments",
                    {"Host: localhost:" + port, "Content-Type: application/json; charset=utf-8"},
                    R"({"name": "j", "objective": {"metric": "loss"}, "spaces": [{"name": "s",
                              "params": {"x": [1]}}], "executor": {"client": {}}})")),
      201);
  // The dashboard's own page: same origin.
  EXPECT_EQ(
      StatusOf(Send("POST", "/api/v1/experiments/1:cancel",
                    {"Host: " + self_, "Origin: http://" + self_, "Content-Type: application/json"},
                    "{}")),
      200);
  EXPECT_EQ(StatusOf(Send("GET", "/api/v1/experiments", {"Host: [::1]:" + port})), 200)
      << "an IPv6 literal";
  EXPECT_EQ(ExperimentCount(), 2u);
}

TEST_F(BrowserGuardTest, OperatorsAllowTheirNamesAndOrigins) {
  StartServer({"--allowed-host", "hpo.internal", "--allowed-origin", "https://dash.example.com"});
  const std::string port = std::to_string(server_->http_port());
  EXPECT_EQ(StatusOf(Send("GET", "/api/v1/experiments", {"Host: HPO.internal:" + port})), 200);
  EXPECT_EQ(StatusOf(Send("GET", "/api/v1/experiments", {"Host: other.internal:" + port})), 403);
  EXPECT_EQ(StatusOf(Send("GET", "/api/v1/experiments",
                          {"Host: hpo.internal:" + port, "Origin: https://dash.example.com:443"})),
            200);
  EXPECT_EQ(StatusOf(Send(
                "GET", "/api/v1/experiments",
                {"Host: hpo.internal:" + port, "Origin: https://dash.example.com.evil.example"})),
            403);
}

}  // namespace
}  // namespace hpo
