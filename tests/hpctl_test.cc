// hpctl against a real hpo-server: submit, status, trials in every format,
// best, cancel, and its errors and exit codes.
#include <gtest/gtest.h>

#include "common/http_client.h"
#include "tests/server_process.h"

namespace hpo {
namespace {

using nlohmann::json;

struct Out {
  int code;
  std::string text;
};

Out Hpctl(const std::string& args) {
  const std::string cmd = std::string(HPCTL_BIN) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[512];
  while (p && fgets(buf, sizeof buf, p)) out += buf;
  const int status = p ? pclose(p) : -1;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

class HpctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/hpo-hpctl-" + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
    server_ = std::make_unique<testing::ServerProcess>(dir_, std::vector<std::string>{"--store", "sqlite://" + dir_ + "/hpo.db"});
    ASSERT_TRUE(server_->Start()) << server_->Log();
    addr_ = "--server 127.0.0.1:" + std::to_string(server_->http_port());
    spec_ = dir_ + "/spec.yaml";
    std::ofstream(spec_) << R"(
name: cli
objective: {metric: loss}
spaces:
  - name: main
    params: {x: {type: float, low: -1, high: 1}}
budget: {max_trials: 3, max_parallel: 3, steps_per_trial: 1}
executor: {client: {}}
)";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs the experiment's trials as an ask/tell client would.
  void Finish(int64_t id) {
    HttpClientOptions o;
    o.port = server_->http_port();
    auto s = HttpRequestOnce(o, "POST", "/api/v1/experiments/" + std::to_string(id) + "/trials:suggest", R"({"count": 3})");
    ASSERT_TRUE(s.ok() && s->status == 200);
    const json suggested = json::parse(s->body);
    for (const auto& t : suggested["trials"]) {
      const std::string tid = std::to_string(t["id"].get<int64_t>());
      const double x = t["params"]["x"];
      auto reported = HttpRequestOnce(o, "POST", "/api/v1/trials/" + tid + "/measurements",
                                      json{{"step", 1}, {"metrics", {{"loss", x * x}}}}.dump());
      ASSERT_TRUE(reported.ok() && reported->status == 200);
      auto completed = HttpRequestOnce(o, "POST", "/api/v1/trials/" + tid + ":complete", "{}");
      ASSERT_TRUE(completed.ok() && completed->status == 200);
    }
  }

  std::string dir_, addr_, spec_;
  std::unique_ptr<testing::ServerProcess> server_;
};

TEST_F(HpctlTest, SubmitWatchAndBest) {
  Out submitted = Hpctl(addr_ + " submit " + spec_);
  ASSERT_EQ(submitted.code, 0) << submitted.text;
  EXPECT_NE(submitted.text.find("submitted experiment 1"), std::string::npos) << submitted.text;
  Finish(1);
  Out watched = Hpctl(addr_ + " watch 1");
  EXPECT_EQ(watched.code, 0) << watched.text;
  EXPECT_NE(watched.text.find("completed"), std::string::npos) << watched.text;
  EXPECT_NE(watched.text.find("trials 3/3"), std::string::npos) << watched.text;
  Out best = Hpctl(addr_ + " best 1 -o json");
  ASSERT_EQ(best.code, 0) << best.text;
  json b = json::parse(best.text);
  EXPECT_EQ(b["state"], "completed");
  Out status = Hpctl(addr_ + " status 1");
  EXPECT_NE(status.text.find("completed"), std::string::npos);
  Out list = Hpctl(addr_ + " list");
  EXPECT_NE(list.text.find("cli"), std::string::npos) << list.text;
}

TEST_F(HpctlTest, TrialsInEveryFormat) {
  ASSERT_EQ(Hpctl(addr_ + " submit " + spec_).code, 0);
  Finish(1);
  Out table = Hpctl(addr_ + " trials 1");
  ASSERT_EQ(table.code, 0) << table.text;
  EXPECT_EQ(std::count(table.text.begin(), table.text.end(), '\n'), 4) << table.text;
  EXPECT_EQ(table.text.rfind("number", 0), 0u) << table.text;
  Out js = Hpctl(addr_ + " trials 1 -o json");
  json j = json::parse(js.text, nullptr, false);
  ASSERT_TRUE(j.is_array()) << js.text;
  EXPECT_EQ(j.size(), 3u);
  Out csv = Hpctl(addr_ + " trials 1 -o csv --state completed");
  EXPECT_EQ(std::count(csv.text.begin(), csv.text.end(), '\n'), 4) << csv.text;
  EXPECT_NE(csv.text.find("\"{\"\"x\"\""), std::string::npos) << "JSON cells are quoted: " << csv.text;
  Out bad = Hpctl(addr_ + " trials 1 -o xml");
  EXPECT_EQ(bad.code, 2);
}

TEST_F(HpctlTest, ErrorsAreOneClearLineWithAnExitCode) {
  std::ofstream(dir_ + "/bad.yaml") << "name: bad\nobjective: {metric: loss}\nspaces:\n  - name: s\n    params: {x: {type: float, low: 2, high: 1}}\nexecutor: {client: {}}\n";
  Out bad = Hpctl(addr_ + " submit " + dir_ + "/bad.yaml");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.text.find("spaces[0].params.x.low: must be < high"), std::string::npos) << bad.text;
  EXPECT_EQ(std::count(bad.text.begin(), bad.text.end(), '\n'), 1) << bad.text;
  Out missing = Hpctl(addr_ + " submit " + dir_ + "/nope.yaml");
  EXPECT_EQ(missing.code, 2) << missing.text;
  Out unknown = Hpctl(addr_ + " status 99");
  EXPECT_EQ(unknown.code, 1);
  EXPECT_NE(unknown.text.find("experiment 99 does not exist"), std::string::npos) << unknown.text;
  Out down = Hpctl("--server 127.0.0.1:1 list");
  EXPECT_EQ(down.code, 3) << down.text;
  EXPECT_NE(down.text.find("127.0.0.1:1"), std::string::npos) << down.text;
  EXPECT_EQ(std::count(down.text.begin(), down.text.end(), '\n'), 1) << down.text;
  ASSERT_EQ(Hpctl(addr_ + " submit " + spec_).code, 0);
  EXPECT_EQ(Hpctl(addr_ + " cancel 1").code, 0);
  EXPECT_EQ(Hpctl(addr_ + " cancel 1").code, 1);
  EXPECT_EQ(Hpctl(addr_ + " watch 1").code, 4) << "a cancelled experiment is not a success";
}

}  // namespace
}  // namespace hpo

namespace hpo {
namespace {

TEST(HpctlRun, RunsAnExperimentOnThisMachineAndCleansUp) {
#ifndef HPO_HAVE_WORKER
  GTEST_SKIP() << "hpctl run needs hpo-worker, which this build (HPO_BUILD_WORKER=OFF) does not have";
#endif
  const std::string dir = ::testing::TempDir() + "/hpo-hpctl-run-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tiny.yaml") << R"(
name: tiny
objective: {metric: accuracy, direction: maximize}
spaces:
  - name: mlp
    params: {lr: {type: float, low: 1.0e-3, high: 1.0e-2, log: true}}
system:
  threads: {type: int, low: 1, high: 2}
budget: {max_trials: 2, max_parallel: 2, steps_per_trial: 2}
executor: {builtin: {trainer: fashion-mnist, args: {max_train_samples: 2000}}}
)";
  Out r = Hpctl("run " + dir + "/tiny.yaml --workers 1 --data-dir " + dir + "/data");
  EXPECT_EQ(r.code, 0) << r.text;
  EXPECT_NE(r.text.find("dashboard: http://127.0.0.1:"), std::string::npos)
      << "the embedded server serves this checkout's web/\n" << r.text;
  EXPECT_NE(r.text.find("trials 2/2: 2 completed"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("best trial"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("test_accuracy"), std::string::npos) << r.text;
  EXPECT_TRUE(std::filesystem::exists(dir + "/data/hpo.db"));
  // Nothing it started is left running.
  // ("dat[a]" keeps pgrep's own shell from matching the pattern.)
  EXPECT_NE(std::system(("pgrep -f '" + dir + "/dat[a]' > /dev/null").c_str()), 0);
  std::filesystem::remove_all(dir);
}

TEST(HpctlRun, RefusesAWebRootWithoutTheDashboard) {
  const std::string dir = ::testing::TempDir() + "/hpo-hpctl-webroot-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/spec.yaml") << "name: x\n";
  Out r = Hpctl("run " + dir + "/spec.yaml --web-root " + dir + " --data-dir " + dir + "/data");
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("--web-root " + dir + ": no index.html there"), std::string::npos) << r.text;
  EXPECT_FALSE(std::filesystem::exists(dir + "/data")) << "nothing started";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hpo
