// Limits on the JSON the server reads from outside (common/json_limits.h):
// the parser itself, then a real hpo-server on loopback that is sent deeply
// nested JSON on every REST route that takes a JSON body and in a gRPC
// Report's system value. Each must be refused with an error that names the
// limit, and the server must still answer afterwards (it used to overflow
// its stack copying or serializing such values).
#include "common/json_limits.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/http_client.h"
#include "hpo/v1/worker.grpc.pb.h"
#include "testing/server_process.h"

namespace hpo {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// `levels` nested arrays: [[[...]]].
std::string NestedArrays(size_t levels) {
  return std::string(levels, '[') + std::string(levels, ']');
}

// --- The parser ------------------------------------------------------------------

TEST(ParseJsonTest, TakesJsonWithinTheLimits) {
  auto j = ParseJson(R"({"a": [1, 2.5, "x", null, true, {"b": {}}]})", "body");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["a"][5]["b"], json::object());
  // Exactly at the depth limit.
  auto deepest = ParseJson(NestedArrays(kMaxJsonDepth), "body");
  ASSERT_TRUE(deepest.ok()) << deepest.status();
  EXPECT_TRUE(deepest->is_array());
}

TEST(ParseJsonTest, RefusesNestingBeyondTheLimitNamingFieldAndLimit) {
  for (size_t levels : {size_t{kMaxJsonDepth} + 1, size_t{200'000}}) {
    auto j = ParseJson(NestedArrays(levels), "body");
    ASSERT_FALSE(j.ok()) << levels;
    EXPECT_TRUE(j.status().IsInvalidArgument());
    EXPECT_EQ(j.status().message(), "body: nested more than 32 levels deep") << levels;
  }
  // Objects count as arrays do, and unclosed nesting is caught as it opens.
  std::string objects;
  for (int i = 0; i < 40; ++i) objects += R"({"a":)";
  auto j = ParseJson(objects, "system.x");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().message(), "system.x: nested more than 32 levels deep");
  // A tighter limit of the caller's own.
  JsonLimits tight;
  tight.max_depth = 2;
  EXPECT_TRUE(ParseJson("[[1]]", "v", tight).ok());
  EXPECT_EQ(ParseJson("[[[1]]]", "v", tight).status().message(),
            "v: nested more than 2 levels deep");
}

TEST(ParseJsonTest, RefusesTextAndValueCountsBeyondTheLimits) {
  JsonLimits small;
  small.max_bytes = 10;
  EXPECT_TRUE(ParseJson("[1, 2, 3]", "body", small).ok());
  auto big = ParseJson("[1, 2, 3, 4]", "body", small);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().message(), "body: larger than 10 bytes");
  JsonLimits few;
  few.max_values = 4;  // the array itself and three numbers
  EXPECT_TRUE(ParseJson("[1, 2, 3]", "body", few).ok());
  auto many = ParseJson("[1, 2, 3, 4]", "body", few);
  ASSERT_FALSE(many.ok());
  EXPECT_EQ(many.status().message(), "body: more than 4 values");
}

TEST(ParseJsonTest, SyntaxErrorsSayWhereAndAreToldApart) {
  auto j = ParseJson(R"({"a": 1,})", "body");
  ASSERT_FALSE(j.ok());
  EXPECT_TRUE(j.status().IsInvalidArgument());
  EXPECT_EQ(j.status().message().rfind("body: not valid JSON (at byte 9: ", 0), 0u) << j.status();
  // The optional form: text that is not JSON at all is no error, one that
  // is JSON beyond a limit still is.
  auto word = ParseJsonIfJson("cuda:0", "system.device");
  ASSERT_TRUE(word.ok()) << word.status();
  EXPECT_FALSE(word->has_value());
  auto number = ParseJsonIfJson("4", "system.threads");
  ASSERT_TRUE(number.ok() && word->has_value() == false && number->has_value());
  EXPECT_EQ(**number, 4);
  auto deep = ParseJsonIfJson(NestedArrays(100'000), "system.x");
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().message(), "system.x: nested more than 32 levels deep");
  // The form that keeps a bare word as the string it says.
  auto kept = ParseJsonOrString("cuda:0", "system.device");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(*kept, "cuda:0");
  auto parsed = ParseJsonOrString(R"("cuda:0")", "system.device");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, "cuda:0");
  EXPECT_EQ(ParseJsonOrString("4", "system.threads").value_or(nullptr), 4);
  EXPECT_EQ(ParseJsonOrString(NestedArrays(100'000), "system.x").status().message(),
            "system.x: nested more than 32 levels deep");
}

TEST(ParseJsonTest, SurrogatePairsAreOneCharacterAndLoneOnesAreRefused) {
  auto j = ParseJson(R"({"name": "smile \ud83d\ude00"})", "body");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["name"], "smile \xF0\x9F\x98\x80");
  auto lone = ParseJson(R"({"name": "\ud83d"})", "body");
  ASSERT_FALSE(lone.ok());
  EXPECT_NE(lone.status().message().find("surrogate"), std::string::npos) << lone.status();
}

TEST(JsonDepthTest, MeasuresWithoutRecursion) {
  EXPECT_EQ(JsonDepth(json(1)), 0);
  EXPECT_EQ(JsonDepth(json::array()), 1);
  EXPECT_EQ(JsonDepth(json{{"a", {{"b", {1, {2}}}}}}), 4);
  // Built in code (no parser involved): 300k levels, as a caller of the
  // engine could hand it; JsonDepth walks it with a heap stack.
  json deep = json::array();
  for (int i = 0; i < 300'000; ++i) {
    json outer = json::array();
    outer.push_back(std::move(deep));
    deep = std::move(outer);
  }
  EXPECT_EQ(JsonDepth(deep), 300'001);
  EXPECT_EQ(JsonDepth(deep, 40), 41) << "stops once past the bound it is given";
}

// --- A real server ------------------------------------------------------------------

constexpr const char* kToken = "tok-json-limits";

class DeepJsonServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/hpo-json-limits-" + std::to_string(getpid());
    fs::remove_all(dir_);
    server_ = std::make_unique<testing::ServerProcess>(
        HPO_SERVER_BIN, dir_,
        std::vector<std::string>{"--token", kToken, "--store", "sqlite://" + dir_ + "/hpo.db"});
    ASSERT_TRUE(server_->Start().ok()) << server_->Log();
  }
  void TearDown() override {
    server_.reset();
    fs::remove_all(dir_);
  }

  Result<HttpResult> Call(const std::string& method, const std::string& target,
                          const std::string& body = "") {
    HttpClientOptions o;
    o.port = server_->http_port();
    o.token = kToken;
    return HttpRequestOnce(o, method, target, body);
  }

  // The server answers /healthz: it did not crash on what came before.
  void ExpectAlive(const std::string& after) {
    auto r = Call("GET", "/healthz");
    ASSERT_TRUE(r.ok()) << "the server is gone after " << after << ": " << r.status() << "\n"
                        << server_->Log();
    EXPECT_EQ(r->status, 200) << after;
  }

  std::string dir_;
  std::unique_ptr<testing::ServerProcess> server_;
};

TEST_F(DeepJsonServerTest, RestBodiesNestedTooDeepGetA400AndTheServerStaysUp) {
  // Ids that do not exist: the body is judged before anything is looked up.
  const std::string deep = NestedArrays(200'000);  // 400 KB, within the size limit
  const std::vector<std::pair<std::string, std::string>> requests = {
      {"/api/v1/experiments/1:cancel", R"({"reason": )" + deep + "}"},
      {"/api/v1/experiments/1/trials:suggest", R"({"count": )" + deep + "}"},
      {"/api/v1/trials/1/measurements", R"({"step": )" + deep + "}"},
      {"/api/v1/trials/1/measurements",
       R"({"step": 1, "metrics": {"loss": 1}, "system": {"x": )" + deep + "}}"},
      {"/api/v1/trials/1:complete", R"({"metrics": )" + deep + "}"},
      {"/api/v1/trials/1:fail", R"({"reason": "r", "metrics": )" + deep + "}"},
  };
  for (const auto& [target, body] : requests) {
    auto r = Call("POST", target, body);
    ASSERT_TRUE(r.ok()) << target << ": no reply (" << r.status() << ")\n" << server_->Log();
    EXPECT_EQ(r->status, 400) << target << ": " << r->body.substr(0, 300);
    EXPECT_NE(r->body.find("body: nested more than 32 levels deep"), std::string::npos)
        << target << ": " << r->body.substr(0, 300);
    ExpectAlive(target);
  }
  // Deeper still (2 MB): refused by its size before it is parsed.
  auto r = Call("POST", "/api/v1/experiments/1:cancel",
                R"({"reason": )" + NestedArrays(1'000'000) + "}");
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << server_->Log();
  EXPECT_EQ(r->status, 400) << r->body.substr(0, 300);
  EXPECT_NE(r->body.find("body: larger than 1048576 bytes"), std::string::npos)
      << r->body.substr(0, 300);
  ExpectAlive("a 2 MB body");
  // A spec nested too deep, as JSON and as block YAML.
  r = Call("POST", "/api/v1/experiments", R"({"name": )" + deep + "}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("nested more than 32 levels deep"), std::string::npos)
      << r->body.substr(0, 300);
  std::string yaml = "name:\n";
  for (int i = 0; i < 100'000; ++i) yaml += "- ";
  r = Call("POST", "/api/v1/experiments", yaml + "x\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("nested more than 32 levels deep"), std::string::npos)
      << r->body.substr(0, 300);
  ExpectAlive("deep specs");
}

TEST_F(DeepJsonServerTest, AGrpcSystemValueNestedTooDeepIsInvalidAndTheServerStaysUp) {
  // A trial that exists and no worker holds (an ask/tell client's).
  auto created =
      Call("POST", "/api/v1/experiments", R"({"name": "deep", "objective": {"metric": "loss"},
      "spaces": [{"name": "s", "params": {"x": [1, 2]}}], "budget": {"max_trials": 2, "max_parallel": 1},
      "executor": {"client": {}}})");
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_EQ(created->status, 201) << created->body;
  auto trials =
      Call("POST",
           "/api/v1/experiments/" +
               std::to_string(json::parse(created->body)["id"].get<int64_t>()) + "/trials:suggest",
           "{}");
  ASSERT_TRUE(trials.ok() && trials->status == 200) << trials.status();
  const int64_t pending = json::parse(trials->body)["trials"][0]["id"];

  auto stub = hpo::v1::WorkerService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(server_->grpc_port()), grpc::InsecureChannelCredentials()));
  for (const int64_t trial :
       {pending, int64_t{12345}}) {  // one nobody holds, one that does not exist
    hpo::v1::ReportRequest req;
    req.set_worker_id(1);
    req.set_trial_id(trial);
    req.set_step(1);
    (*req.mutable_metrics())["loss"] = 0.5;
    (*req.mutable_system()->mutable_values())["threads"] = NestedArrays(100'000);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    ctx.AddMetadata("authorization", std::string("Bearer ") + kToken);
    hpo::v1::ReportResponse res;
    const grpc::Status s = stub->Report(&ctx, req, &res);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << "trial " << trial << ": " << s.error_message();
    EXPECT_EQ(s.error_message(), "system.threads: nested more than 32 levels deep")
        << "trial " << trial;
    ExpectAlive("a gRPC Report for trial " + std::to_string(trial));
  }
}

}  // namespace
}  // namespace hpo
