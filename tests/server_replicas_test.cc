// Two hpo-server replicas on one PostgreSQL, as a fleet runs them: eight
// real hpo-worker processes, four on each replica, run one 500-trial
// experiment whose trials are a one-line shell command. Every trial must run
// exactly once (one lease, one measurement, one worker saw it), the
// experiment must complete, and both replicas' /metrics must report the
// same totals. Prints a bench line with the wall time; asserts no timing.
// And live events: a subscriber of one replica sees changes made through
// the other.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/http_client.h"
#include "testing/files.h"
#include "testing/server_process.h"
#include "testing/store_backends.h"

namespace hpo {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kTrials = 500;
constexpr int kWorkersPerServer = 4;

using hpo::testing::ReadFile;

// The samples of one metric family in a /metrics page, by their label text
// ({state="completed"} -> value).
std::map<std::string, double> Samples(const std::string& page, const std::string& name) {
  std::map<std::string, double> out;
  std::istringstream in(page);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name, 0) != 0) continue;
    const std::string rest = line.substr(name.size());
    if (rest.empty() || (rest[0] != '{' && rest[0] != ' ')) continue;  // another family's prefix
    const auto space = rest.rfind(' ');
    out[rest.substr(0, space)] = std::stod(rest.substr(space + 1));
  }
  return out;
}

class ServerReplicasTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HPO_REQUIRE_BACKEND(testing::PostgresBackend);
    db_ = std::make_unique<testing::PostgresBackend>();
    dir_ = ::testing::TempDir() + "/hpo-replicas-" + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    for (pid_t pid : workers_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    servers_.clear();  // SIGKILLs what is still running
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  HttpClientOptions Http(size_t server) const {
    HttpClientOptions o;
    o.port = servers_.at(server)->http_port();
    return o;
  }
  std::string Get(size_t server, const std::string& target) {
    auto r = HttpRequestOnce(Http(server), "GET", target);
    EXPECT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(!r.ok() || r->status == 200) << target << ": " << r->body;
    return r.ok() ? r->body : "";
  }
  std::string WorkerLogs() const {
    std::string out;
    for (size_t i = 0; i < workers_.size(); ++i) {
      out += "--- worker " + std::to_string(i) + "\n" +
             ReadFile(dir_ + "/worker-" + std::to_string(i) + ".log");
    }
    return out;
  }

  void StartServers() {
    for (int i = 0; i < 2; ++i) {
      servers_.push_back(std::make_unique<testing::ServerProcess>(
          HPO_SERVER_BIN, dir_ + "/server-" + std::to_string(i),
          std::vector<std::string>{"--store", db_->url()}));
      ASSERT_TRUE(servers_.back()->Start().ok()) << servers_.back()->Log();
    }
  }

  std::unique_ptr<testing::PostgresBackend> db_;
  std::string dir_;
  std::vector<std::unique_ptr<testing::ServerProcess>> servers_;
  std::vector<pid_t> workers_;
};

TEST_F(ServerReplicasTest, TwoServersOnOnePostgresqlRunEveryTrialExactlyOnce) {
  ASSERT_NO_FATAL_FAILURE(StartServers());
  const std::string spec = R"({"name": "replicas", "objective": {"metric": "loss"},
      "spaces": [{"name": "s", "params": {"x": {"type": "float", "low": 0, "high": 1}}}],
      "algorithm": {"sampler": "random", "seed": 3},
      "budget": {"max_trials": )" +
                           std::to_string(kTrials) + R"(, "max_parallel": 16, "steps_per_trial": 1},
      "executor": {"command": {"argv": ["/bin/sh", "-c", "echo hpo: step=1 loss={x}"], "timeout_s": 60}}})";
  const auto start = Clock::now();
  auto created = HttpRequestOnce(Http(0), "POST", "/api/v1/experiments", spec);
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_EQ(created->status, 201) << created->body;
  const int64_t id = json::parse(created->body)["id"];

  for (int i = 0; i < 2 * kWorkersPerServer; ++i) {
    const size_t server = i % 2;
    workers_.push_back(testing::Spawn(
        {HPO_WORKER_BIN, "--server", "127.0.0.1:" + std::to_string(servers_[server]->grpc_port()),
         "--device", "cpu", "--threads", "1", "--benchmark-seconds", "0.05", "--heartbeat-ms",
         "1000", "--labels", "pool=cpu,server=" + std::to_string(server)},
        dir_ + "/worker-" + std::to_string(i) + ".log"));
  }

  // Both replicas must see the experiment end: it is read from the store.
  const std::string path = "/api/v1/experiments/" + std::to_string(id);
  json e;
  for (auto deadline = Clock::now() + std::chrono::seconds(240); Clock::now() < deadline;) {
    e = json::parse(Get(1, path), nullptr, false);
    if (e.is_object() && e.value("state", "") != "running") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_EQ(e.value("state", ""), "completed") << e.dump() << "\n" << WorkerLogs();
  std::printf("bench=two_servers trials=%d workers=%d seconds=%.1f\n", kTrials,
              2 * kWorkersPerServer, seconds);
  EXPECT_EQ(json::parse(Get(0, path))["state"], "completed");

  // Stop the workers (SIGTERM: they finish what they run, which is nothing).
  for (pid_t pid : workers_) kill(pid, SIGTERM);
  for (pid_t& pid : workers_) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << WorkerLogs();
    pid = -1;
  }
  workers_.clear();

  // The database: 500 completed trials, each leased once, each with one
  // measurement, and nothing else.
  pqxx::connection c(db_->url());
  pqxx::nontransaction q(c);
  const auto counts = q.exec1(
      "SELECT COUNT(*), COUNT(*) FILTER (WHERE state = 'completed'), COALESCE(MAX(attempt), 0), "
      "COALESCE(MIN(attempt), 0), COUNT(DISTINCT lease_owner) FROM trials WHERE experiment_id = " +
      std::to_string(id));
  EXPECT_EQ(counts[0].as<int64_t>(), kTrials) << "trials created";
  EXPECT_EQ(counts[1].as<int64_t>(), kTrials) << "trials completed";
  EXPECT_EQ(counts[2].as<int64_t>(), 1) << "a trial was leased more than once";
  EXPECT_EQ(counts[3].as<int64_t>(), 1) << "a trial was never leased";
  EXPECT_GE(counts[4].as<int64_t>(), 2) << "workers that ran trials";
  const auto ms = q.exec1(
      "SELECT COUNT(*), COUNT(DISTINCT m.trial_id) FROM measurements m JOIN trials t ON t.id = "
      "m.trial_id "
      "WHERE t.experiment_id = " +
      std::to_string(id));
  EXPECT_EQ(ms[0].as<int64_t>(), kTrials) << "measurements";
  EXPECT_EQ(ms[1].as<int64_t>(), kTrials) << "trials with a measurement";

  // The workers: each trial appears in exactly one worker's log, once, and
  // the workers of both replicas ran trials. A lease's line: "trial NUMBER
  // of experiment ID (id TRIAL_ID) on DEVICE (...".
  std::map<int64_t, int> runs;
  std::set<int> servers_that_ran;
  const std::regex started(R"(trial (\d+) of experiment (\d+) \(id \d+\) on )");
  for (size_t i = 0; i < 2 * kWorkersPerServer; ++i) {
    const std::string log = ReadFile(dir_ + "/worker-" + std::to_string(i) + ".log");
    for (std::sregex_iterator it(log.begin(), log.end(), started), end; it != end; ++it) {
      if (std::stoll((*it)[2]) != id) continue;
      ++runs[std::stoll((*it)[1])];
      servers_that_ran.insert(static_cast<int>(i % 2));
    }
  }
  EXPECT_EQ(runs.size(), static_cast<size_t>(kTrials)) << "distinct trials the workers started";
  for (const auto& [trial, n] : runs)
    EXPECT_EQ(n, 1) << "trial " << trial << " started " << n << " times";
  EXPECT_EQ(servers_that_ran.size(), 2u) << "the workers of one replica ran nothing";

  // /metrics: the store-backed totals agree (each replica reads them from
  // the database; wait out the one-second cache), and the per-replica
  // counters of finished trials add up to 500 with none counted twice.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  const std::string page0 = Get(0, "/metrics"), page1 = Get(1, "/metrics");
  auto trials0 = Samples(page0, "hpo_trials"), trials1 = Samples(page1, "hpo_trials");
  EXPECT_EQ(trials0, trials1) << page0 << "\n----\n" << page1;
  EXPECT_EQ(trials0[R"({state="completed"})"], kTrials) << page0;
  for (const char* state : {"pending", "leased", "running", "failed", "pruned", "cancelled"}) {
    EXPECT_EQ(trials0[std::string("{state=\"") + state + "\"}"], 0) << state << "\n" << page0;
  }
  EXPECT_EQ(Samples(page0, "hpo_experiments"), Samples(page1, "hpo_experiments"));
  EXPECT_EQ(Samples(page0, "hpo_workers"), Samples(page1, "hpo_workers"));
  // The workers stopped and left (Leave): gone at once, on both replicas.
  EXPECT_EQ(Samples(page0, "hpo_workers")[""], 0) << page0;
  EXPECT_EQ(Samples(page0, "hpo_workers_gone"), Samples(page1, "hpo_workers_gone"));
  EXPECT_EQ(Samples(page0, "hpo_workers_gone")[""], 2 * kWorkersPerServer) << page0;
  const double finished0 = Samples(page0, "hpo_trials_finished_total")[R"({state="completed"})"];
  const double finished1 = Samples(page1, "hpo_trials_finished_total")[R"({state="completed"})"];
  EXPECT_EQ(finished0 + finished1, kTrials);
  EXPECT_GT(finished0, 0);
  EXPECT_GT(finished1, 0);
}

TEST_F(ServerReplicasTest, EventsMadeThroughOneReplicaReachTheOthersSubscribers) {
  ASSERT_NO_FATAL_FAILURE(StartServers());
  // Subscribe on replica 1; create experiments through replica 0 until one
  // shows up there (the subscription may take a moment to open).
  std::atomic<bool> seen{false};
  std::string seen_data;
  std::thread subscriber([&] {
    HttpClientOptions o = Http(1);
    o.timeout = std::chrono::seconds(20);
    (void)ReadEventStream(o, "/api/v1/events",
                          [&](const std::string& type, const std::string& data) {
                            if (type != "experiment.created") return true;
                            seen_data = data;
                            seen = true;
                            return false;
                          });
  });
  const std::string spec = R"({"name": "relayed", "objective": {"metric": "loss"},
      "spaces": [{"name": "s", "params": {"x": {"type": "float", "low": 0, "high": 1}}}],
      "budget": {"max_trials": 1}, "executor": {"client": {}}})";
  std::vector<int64_t> created;
  for (int i = 0; i < 30 && !seen; ++i) {
    auto r = HttpRequestOnce(Http(0), "POST", "/api/v1/experiments", spec);
    if (!r.ok() || r->status != 201) {
      ADD_FAILURE() << (r.ok() ? r->body : r.status().ToString());
      break;  // the subscriber gives up at its timeout
    }
    created.push_back(json::parse(r->body)["id"]);
    for (int j = 0; j < 10 && !seen; ++j)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  subscriber.join();
  ASSERT_TRUE(seen) << "replica 1's subscribers never saw an experiment created through replica 0\n"
                    << servers_[1]->Log();
  const int64_t id = json::parse(seen_data)["experiment_id"];
  EXPECT_NE(std::find(created.begin(), created.end(), id), created.end()) << seen_data;
}

}  // namespace
}  // namespace hpo
