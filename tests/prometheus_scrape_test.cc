// A real Prometheus scrapes a real hpo-server: /usr/bin/prometheus (Debian
// package 'prometheus', which scripts/setup installs) on a private loopback
// port with its own TSDB directory, scraping every second with the token as
// its bearer credential. After two scrapes, its HTTP API must hold what the
// server holds: trials by state (as REST counts them), the latency
// histograms' _count and the counters. And the /metrics contract as a
// scraper meets it: without the token a scrape is refused (401, the target
// is down), with --public-metrics it needs none.
//
// No timing assertions: every wait polls for up to a minute, and the values
// compared are ones nothing changes once the test's own requests are done.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "common/http_client.h"
#include "testing/files.h"
#include "testing/server_process.h"

namespace hpo {
namespace {

using nlohmann::json;

constexpr const char* kPrometheus = "/usr/bin/prometheus";
constexpr const char* kToken = "scrape-test-token";
constexpr auto kPatience = std::chrono::seconds(60);

using Clock = std::chrono::steady_clock;

// Calls `done` every 250 ms until it returns true or `deadline` passes. The
// checks after one wait share a deadline, so that a test that fails does so
// within a minute or two, not a minute per check.
bool PollUntil(Clock::time_point deadline, const std::function<bool()>& done) {
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return true;
}
bool PollUntil(const std::function<bool()>& done) {
  return PollUntil(Clock::now() + kPatience, done);
}

using hpo::testing::ReadFile;

std::string UrlEncode(const std::string& s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (const unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// The value of `sample` (name with labels, as the page spells it) in a
// /metrics page; nullopt when absent.
std::optional<double> PageValue(const std::string& page, const std::string& sample) {
  const std::string line_start = "\n" + sample + " ";
  const auto at = ("\n" + page).find(line_start);
  if (at == std::string::npos) return std::nullopt;
  return std::strtod(page.c_str() + at + sample.size() + 1, nullptr);
}

// One Prometheus server process, killed (and waited for) on every exit path:
// by the destructor when the test returns or an assertion fails, and by the
// kernel (PR_SET_PDEATHSIG) if the test process itself dies.
class PrometheusProcess {
 public:
  struct Job {
    std::string name;
    uint16_t target_port;
    std::string token_file;  // empty: scrape without a credential
  };

  PrometheusProcess(std::string dir, const std::vector<Job>& jobs) : dir_(std::move(dir)) {
    std::ofstream config(dir_ + "/prometheus.yml");
    config << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n";
    for (const Job& job : jobs) {
      config << "  - job_name: " << job.name << "\n";
      if (!job.token_file.empty()) {
        config << "    authorization:\n      type: Bearer\n      credentials_file: "
               << job.token_file << "\n";
      }
      config << "    static_configs:\n      - targets: ['127.0.0.1:" << job.target_port << "']\n";
    }
  }
  ~PrometheusProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  PrometheusProcess(const PrometheusProcess&) = delete;
  PrometheusProcess& operator=(const PrometheusProcess&) = delete;

  // Starts it on 127.0.0.1 and a port the kernel picks, and waits until it
  // says which port that is and answers /-/ready. False (see Log) if it
  // exited or did not get there in time.
  bool Start() {
    log_ = dir_ + "/prometheus.log";
    const pid_t parent = getpid();
    pid_ = testing::Spawn(
        {kPrometheus, "--config.file=" + dir_ + "/prometheus.yml",
         "--storage.tsdb.path=" + dir_ + "/tsdb", "--web.listen-address=127.0.0.1:0",
         "--log.level=info"},
        log_, [parent] { return prctl(PR_SET_PDEATHSIG, SIGKILL) == 0 && getppid() == parent; });
    // Its web server logs the address it got: msg="Listening on" address=127.0.0.1:NNNNN
    const std::regex listening(R"(msg="Listening on" address=127\.0\.0\.1:(\d+))");
    return PollUntil([&] {
             if (Exited()) return true;
             std::smatch m;
             const std::string log = ReadFile(log_);
             if (port_ == 0 && std::regex_search(log, m, listening)) port_ = std::stoi(m[1]);
             if (port_ == 0) return false;
             auto ready = Get("/-/ready");
             return ready.ok() && ready->status == 200;
           }) &&
           !Exited();
  }

  Result<HttpResult> Get(const std::string& target) const {
    HttpClientOptions o;
    o.port = port_;
    o.timeout = std::chrono::seconds(10);
    return HttpRequestOnce(o, "GET", target);
  }

  // The "data" of an HTTP API answer, or null when it failed.
  json Api(const std::string& target) const {
    auto r = Get(target);
    if (!r.ok() || r->status != 200) return nullptr;
    json j = json::parse(r->body, nullptr, false);
    if (j.is_discarded() || j.value("status", "") != "success") return nullptr;
    return j["data"];
  }

  // An instant query's result vector (an empty array when it failed).
  json Query(const std::string& promql) const {
    json data = Api("/api/v1/query?query=" + UrlEncode(promql));
    if (!data.is_object() || !data["result"].is_array()) return json::array();
    return data["result"];
  }

  // The value of a query that returns one sample; nullopt otherwise.
  std::optional<double> Scalar(const std::string& promql) const {
    json result = Query(promql);
    if (result.size() != 1) return std::nullopt;
    return std::stod(result[0]["value"][1].get<std::string>());
  }

  // The active target of `job`, or null.
  json Target(const std::string& job) const {
    json data = Api("/api/v1/targets?state=active");
    if (!data.is_object()) return nullptr;
    for (const json& t : data["activeTargets"]) {
      if (t["labels"].value("job", "") == job) return t;
    }
    return nullptr;
  }

  // Waits until `job`'s target has been scraped at least twice.
  bool WaitForTwoScrapes(const std::string& job) const {
    return PollUntil([&] {
      auto n = Scalar("count_over_time(up{job=\"" + job + "\"}[10m])");
      return n && *n >= 2;
    });
  }

  bool Exited() {
    if (pid_ <= 0) return true;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return true;
    }
    return false;
  }
  std::string Log() const { return ReadFile(log_); }

 private:
  std::string dir_;
  std::string log_;
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

class PrometheusScrapeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(access(kPrometheus, X_OK), 0)
        << kPrometheus << " is missing; it comes with the Debian package 'prometheus', "
        << "which scripts/setup installs (this test does not skip without it)";
    char tmpl[] = "/tmp/hpo-prometheus-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr) << "mkdtemp failed";
    dir_ = tmpl;
    token_file_ = dir_ + "/token";
    {
      std::ofstream token(token_file_);
      token << kToken << "\n";  // Prometheus trims the trailing newline
    }
  }
  void TearDown() override {
    // Prometheus and the servers are stopped by their destructors first.
    prometheus_.reset();
    servers_.clear();
    std::filesystem::remove_all(dir_);
  }

  // Starts an hpo-server on free loopback ports with its own SQLite file.
  testing::ServerProcess& StartServer(const std::string& name, std::vector<std::string> args) {
    const std::string dir = dir_ + "/" + name;
    args.insert(args.end(), {"--store", "sqlite://" + dir + "/hpo.db", "--token", kToken});
    servers_.push_back(std::make_unique<testing::ServerProcess>(HPO_SERVER_BIN, dir, args));
    EXPECT_TRUE(servers_.back()->Start().ok()) << servers_.back()->Log();
    return *servers_.back();
  }

  bool StartPrometheus(const std::vector<PrometheusProcess::Job>& jobs) {
    std::filesystem::create_directories(dir_ + "/prometheus");
    prometheus_ = std::make_unique<PrometheusProcess>(dir_ + "/prometheus", jobs);
    return prometheus_->Start();
  }

  static HttpClientOptions Http(const testing::ServerProcess& server) {
    HttpClientOptions o;
    o.port = server.http_port();
    o.token = kToken;
    return o;
  }

  std::string dir_;
  std::string token_file_;
  std::vector<std::unique_ptr<testing::ServerProcess>> servers_;
  std::unique_ptr<PrometheusProcess> prometheus_;
};

constexpr const char* kSpec = R"(
name: scraped
objective: {metric: loss, direction: minimize}
spaces:
  - name: main
    params: {x: {type: float, low: -5, high: 5}}
algorithm: {sampler: random, seed: 1}
budget: {max_trials: 20, max_parallel: 4, steps_per_trial: 5}
executor: {client: {}}
)";

TEST_F(PrometheusScrapeTest, PrometheusHoldsTheValuesTheServerHolds) {
  testing::ServerProcess& server = StartServer("server", {});
  ASSERT_GT(server.http_port(), 0);
  const HttpClientOptions http = Http(server);

  // Work first, so that the histograms and counters are not zero: ask for
  // three trials, tell two steps of each, complete two and fail one.
  auto created = HttpRequestOnce(http, "POST", "/api/v1/experiments", kSpec, "application/yaml");
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_EQ(created->status, 201) << created->body;
  const int64_t exp_id = json::parse(created->body)["id"];
  const std::string exp_path = "/api/v1/experiments/" + std::to_string(exp_id);
  auto suggested = HttpRequestOnce(http, "POST", exp_path + "/trials:suggest", R"({"count": 3})");
  ASSERT_TRUE(suggested.ok()) << suggested.status();
  ASSERT_EQ(suggested->status, 200) << suggested->body;
  const json trials = json::parse(suggested->body)["trials"];
  ASSERT_EQ(trials.size(), 3u) << suggested->body;
  int reports = 0;
  for (size_t i = 0; i < trials.size(); ++i) {
    const std::string trial_path =
        "/api/v1/trials/" + std::to_string(trials[i]["id"].get<int64_t>());
    for (int step = 0; step < 2; ++step) {
      const json body = {{"step", step}, {"metrics", {{"loss", 1.0 + i + 0.1 * step}}}};
      auto told = HttpRequestOnce(http, "POST", trial_path + "/measurements", body.dump());
      ASSERT_TRUE(told.ok()) << told.status();
      ASSERT_EQ(told->status, 200) << told->body;
      ++reports;
    }
    const std::string verb = i < 2 ? ":complete" : ":fail";
    auto finished = HttpRequestOnce(http, "POST", trial_path + verb, "{}");
    ASSERT_TRUE(finished.ok()) << finished.status();
    ASSERT_EQ(finished->status, 200) << finished->body;
  }

  ASSERT_TRUE(StartPrometheus({{"hpo", server.http_port(), token_file_}})) << prometheus_->Log();
  ASSERT_TRUE(prometheus_->WaitForTwoScrapes("hpo"))
      << "target: " << prometheus_->Target("hpo").dump() << "\n"
      << prometheus_->Log();
  const json target = prometheus_->Target("hpo");
  ASSERT_EQ(target.value("health", ""), "up") << target.dump();
  const Clock::time_point deadline = Clock::now() + kPatience;

  // Trials by state: what REST counts for the one experiment, state by state.
  auto experiment = HttpRequestOnce(http, "GET", exp_path);
  ASSERT_TRUE(experiment.ok()) << experiment.status();
  const json counts = json::parse(experiment->body)["trials"];
  EXPECT_EQ(counts["completed"], 2) << counts.dump();
  EXPECT_EQ(counts["failed"], 1) << counts.dump();
  std::map<std::string, double> from_rest, from_prometheus;
  for (const char* state :
       {"pending", "leased", "running", "paused", "completed", "pruned", "failed", "cancelled"}) {
    from_rest[state] = counts[state].get<double>();
  }
  // The store gauges are read at most once a second; poll until a scrape
  // has the settled totals (they do not change after the work above).
  const bool trials_match = PollUntil(deadline, [&] {
    from_prometheus.clear();
    for (const json& sample : prometheus_->Query("hpo_trials{job=\"hpo\"}")) {
      from_prometheus[sample["metric"].value("state", "?")] =
          std::stod(sample["value"][1].get<std::string>());
    }
    return from_prometheus == from_rest;
  });
  EXPECT_TRUE(trials_match) << "Prometheus: " << json(from_prometheus).dump()
                            << "\nREST: " << json(from_rest).dump();

  // Histograms and counters: Prometheus's value, the server's own /metrics
  // and (where the test knows it) the work done must agree.
  auto page = HttpRequestOnce(http, "GET", "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->status, 200) << page->body;
  struct Expect {
    std::string promql;        // what Prometheus is asked
    std::string sample;        // the same series on the server's page
    std::optional<double> is;  // what the work above makes it, if certain
  };
  const std::vector<Expect> expected = {
      {"hpo_report_duration_seconds_count{job=\"hpo\"}", "hpo_report_duration_seconds_count",
       double(reports)},
      {"hpo_report_duration_seconds_bucket{job=\"hpo\",le=\"+Inf\"}",
       "hpo_report_duration_seconds_bucket{le=\"+Inf\"}", double(reports)},
      {"hpo_suggest_duration_seconds_count{job=\"hpo\"}", "hpo_suggest_duration_seconds_count",
       std::nullopt},
      {"hpo_reports_total{job=\"hpo\"}", "hpo_reports_total", double(reports)},
      {"hpo_trials_finished_total{job=\"hpo\",state=\"completed\"}",
       "hpo_trials_finished_total{state=\"completed\"}", 2.0},
      {"hpo_trials_finished_total{job=\"hpo\",state=\"failed\"}",
       "hpo_trials_finished_total{state=\"failed\"}", 1.0},
      {"hpo_experiments{job=\"hpo\",state=\"running\"}", "hpo_experiments{state=\"running\"}", 1.0},
  };
  for (const Expect& e : expected) {
    const std::optional<double> on_page = PageValue(page->body, e.sample);
    ASSERT_TRUE(on_page.has_value()) << e.sample << " is not on the server's page:\n" << page->body;
    if (e.is) {
      EXPECT_EQ(*on_page, *e.is) << e.sample << " on the server's page";
    }
    std::optional<double> in_prometheus;
    PollUntil(deadline, [&] {
      in_prometheus = prometheus_->Scalar(e.promql);
      return in_prometheus == on_page;
    });
    EXPECT_EQ(in_prometheus, on_page)
        << e.promql << " in Prometheus vs " << e.sample << " on the server's page";
  }
  EXPECT_GE(PageValue(page->body, "hpo_suggest_duration_seconds_count").value_or(0), 1.0);
  // A histogram Prometheus can compute with: its quantile over the scraped
  // buckets is a number (not NaN, which an empty or broken one gives).
  const std::optional<double> p99 = prometheus_->Scalar(
      "histogram_quantile(0.99, hpo_report_duration_seconds_bucket{job=\"hpo\"})");
  ASSERT_TRUE(p99.has_value());
  EXPECT_FALSE(std::isnan(*p99));
}

TEST_F(PrometheusScrapeTest, AScrapeWithoutTheTokenIsRefusedUnlessMetricsArePublic) {
  testing::ServerProcess& closed = StartServer("closed", {});
  testing::ServerProcess& open = StartServer("public", {"--public-metrics"});
  ASSERT_GT(closed.http_port(), 0);
  ASSERT_GT(open.http_port(), 0);
  ASSERT_TRUE(StartPrometheus({{"no-token", closed.http_port(), ""},
                               {"with-token", closed.http_port(), token_file_},
                               {"public", open.http_port(), ""}}))
      << prometheus_->Log();
  for (const char* job : {"no-token", "with-token", "public"}) {
    ASSERT_TRUE(prometheus_->WaitForTwoScrapes(job))
        << job << ": " << prometheus_->Target(job).dump() << "\n"
        << prometheus_->Log();
  }

  const json refused = prometheus_->Target("no-token");
  EXPECT_EQ(refused.value("health", ""), "down") << refused.dump();
  EXPECT_NE(refused.value("lastError", "").find("401"), std::string::npos) << refused.dump();
  EXPECT_EQ(prometheus_->Scalar("up{job=\"no-token\"}"), 0.0);
  EXPECT_EQ(prometheus_->Query("hpo_workers{job=\"no-token\"}").size(), 0u)
      << "a refused scrape must not yield the server's metrics";

  EXPECT_EQ(prometheus_->Target("with-token").value("health", ""), "up")
      << prometheus_->Target("with-token").dump();
  EXPECT_EQ(prometheus_->Scalar("up{job=\"with-token\"}"), 1.0);
  // The closed server counted the refusals it answered, and the scrapes
  // with the token carry that count to Prometheus.
  std::optional<double> refusals;
  PollUntil([&] {
    refusals = prometheus_->Scalar(
        "hpo_http_requests_total{job=\"with-token\",method=\"GET\",code=\"401\"}");
    return refusals && *refusals >= 1;
  });
  EXPECT_GE(refusals.value_or(0), 1.0);

  const json open_target = prometheus_->Target("public");
  EXPECT_EQ(open_target.value("health", ""), "up") << open_target.dump();
  EXPECT_EQ(prometheus_->Scalar("hpo_workers{job=\"public\"}"), 0.0);
}

}  // namespace
}  // namespace hpo
