// hpctl against a real hpo-server: submit, status, trials in every format,
// best, cancel, and its errors and exit codes; submit --dry-run, export
// (read back by Python's csv module), --quiet, and the completion scripts
// run in a real bash (and zsh, where installed); a redirect refused (against
// a stand-in server), and the mode of `hpctl run`'s token file; watch's ETA
// (by the wall time, the trials and the cost budget, none once ended), logs
// by a trial's number, and `hpctl run`'s workers sharing the cores; status
// as a readable block, floats rounded for people and whole for programs,
// trials -o csv in the export's columns, the REST address from
// HPO_REST_SERVER (HPO_SERVER with a warning), and the server's log of each
// experiment's start and end.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/http_client.h"
#include "testing/files.h"
#include "testing/process.h"
#include "testing/server_process.h"

namespace hpo {
namespace {

using nlohmann::json;

struct Out {
  int code;
  std::string text;
};

// Runs a shell command line; its stdout and stderr together.
Out Shell(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[512];
  while (p && fgets(buf, sizeof buf, p)) out += buf;
  const int status = p ? pclose(p) : -1;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

Out Hpctl(const std::string& args) { return Shell(std::string(HPCTL_BIN) + " " + args); }

class HpctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/hpo-hpctl-" + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
    // At debug level the server logs one line per REST request.
    const std::vector<std::string> args = {"--store", "sqlite://" + dir_ + "/hpo.db", "--log-level",
                                           "debug"};
    server_ = std::make_unique<testing::ServerProcess>(HPO_SERVER_BIN, dir_, args);
    ASSERT_TRUE(server_->Start().ok()) << server_->Log();
    addr_ = "--server 127.0.0.1:" + std::to_string(server_->http_port());
    spec_ = dir_ + "/spec.yaml";
    WriteSpec(3);
  }
  // The spec file: an ask/tell experiment of `max_trials`, three at once;
  // `more` adds to its budget (", max_wall_time_s: 5").
  void WriteSpec(int max_trials, const std::string& more = "") {
    std::ofstream(spec_) << R"(
name: cli
objective: {metric: loss}
spaces:
  - name: main
    params: {x: {type: float, low: -1, high: 1}}
budget: {max_trials: )" << max_trials
                         << R"(, max_parallel: 3, steps_per_trial: 1)" << more << R"(}
executor: {client: {}}
)";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs the experiment's trials as an ask/tell client would, each
  // reporting loss(x).
  void Finish(
      int64_t id, double (*loss)(double) = [](double x) { return x * x; }) {
    HttpClientOptions o;
    o.port = server_->http_port();
    auto s =
        HttpRequestOnce(o, "POST", "/api/v1/experiments/" + std::to_string(id) + "/trials:suggest",
                        R"({"count": 3})");
    ASSERT_TRUE(s.ok() && s->status == 200);
    const json suggested = json::parse(s->body);
    for (const auto& t : suggested["trials"]) {
      const std::string tid = std::to_string(t["id"].get<int64_t>());
      const double x = t["params"]["x"];
      auto reported = HttpRequestOnce(o, "POST", "/api/v1/trials/" + tid + "/measurements",
                                      json{{"step", 1}, {"metrics", {{"loss", loss(x)}}}}.dump());
      ASSERT_TRUE(reported.ok() && reported->status == 200);
      auto completed = HttpRequestOnce(o, "POST", "/api/v1/trials/" + tid + ":complete", "{}");
      ASSERT_TRUE(completed.ok() && completed->status == 200);
    }
  }

  // `hpctl watch 1` in the background, writing to `out`; with
  // `first_block`, returned once it printed its first block. 0 when it
  // could not start.
  pid_t StartWatch(const std::string& out, bool first_block = true) {
    const pid_t watch = testing::Spawn(
        {HPCTL_BIN, "--server", "127.0.0.1:" + std::to_string(server_->http_port()), "watch", "1"},
        out);
    for (int i = 0; watch > 0 && first_block && i < 600 &&
                    testing::ReadFile(out).find("elapsed") == std::string::npos;
         ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return watch;
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
  EXPECT_NE(watched.text.find("trials 3 of 3 finished"), std::string::npos) << watched.text;
  Out best = Hpctl(addr_ + " best 1 -o json");
  ASSERT_EQ(best.code, 0) << best.text;
  json b = json::parse(best.text);
  EXPECT_EQ(b["state"], "completed");
  Out status = Hpctl(addr_ + " status 1");
  EXPECT_NE(status.text.find("completed"), std::string::npos);
  Out list = Hpctl(addr_ + " list");
  EXPECT_NE(list.text.find("cli"), std::string::npos) << list.text;
}

// hpctl watch keeps the best trial from reads of what changed: its first
// read of the completed trials is whole, every later one carries the
// cursor (since=), and the best it shows at the end is one that only such a
// read could have brought. The server's debug log lists the reads.
TEST_F(HpctlTest, WatchReadsOnlyWhatChangedAfterItsFirstRead) {
  WriteSpec(6);
  ASSERT_EQ(Hpctl(addr_ + " submit " + spec_).code, 0);
  Finish(1);
  const std::string out = dir_ + "/watch.out";
  const pid_t watch = StartWatch(out, /*first_block=*/false);
  ASSERT_GT(watch, 0);
  const auto reads = [&] {
    std::vector<std::string> lines;
    std::istringstream log(server_->Log());
    for (std::string line; std::getline(log, line);) {
      if (line.find("http GET /api/v1/experiments/1/trials?") != std::string::npos &&
          line.find("state=completed") != std::string::npos) {
        lines.push_back(line);
      }
    }
    return lines;
  };
  // Two reads: the whole one, then one since its cursor, before anything new.
  for (int i = 0; i < 600 && reads().size() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_GE(reads().size(), 2u) << testing::ReadFile(out) << server_->Log();
  EXPECT_NE(testing::ReadFile(out).find("trials 3 of 6 finished"), std::string::npos)
      << testing::ReadFile(out);
  // Three more trials, each better than any of the first three (x*x >= 0).
  Finish(1, [](double x) { return x * x - 10; });
  const auto status = testing::WaitExit(watch, std::chrono::seconds(60));
  if (!status) testing::KillAndReap(watch);
  ASSERT_TRUE(status) << "watch did not end with its experiment:\n" << testing::ReadFile(out);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << testing::ReadFile(out);
  const std::string text = testing::ReadFile(out);
  EXPECT_NE(text.find("trials 6 of 6 finished"), std::string::npos) << text;

  const auto lines = reads();
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines[0].find("since="), std::string::npos) << "the first read is whole: " << lines[0];
  for (size_t i = 1; i < lines.size(); ++i) {
    EXPECT_NE(lines[i].find("since="), std::string::npos)
        << "read " << i << " is not since a cursor: " << lines[i];
  }
  // The best it shows last is the server's best, from the later trials.
  Out best = Hpctl(addr_ + " best 1 -o json");
  ASSERT_EQ(best.code, 0) << best.text;
  const json b = json::parse(best.text);
  EXPECT_LT(b["final_metrics"]["loss"].get<double>(), -9.0) << best.text;
  const size_t shown = text.rfind("best: trial ");
  ASSERT_NE(shown, std::string::npos) << text;
  EXPECT_EQ(text.substr(shown, text.find(' ', shown + 12) - shown),
            "best: trial " + std::to_string(b["number"].get<int64_t>()))
      << text;
}

// A duration as hpctl prints it (5s, 3m10s, 1h02m), in seconds; -1 when it
// is not one.
int DurationSeconds(const std::string& text) {
  int a = 0, b = 0;
  char u1 = 0, u2 = 0;
  const int n = std::sscanf(text.c_str(), "%d%c%d%c", &a, &u1, &b, &u2);
  if (n == 2 && u1 == 's') return a;
  if (n == 4 && u1 == 'm' && u2 == 's') return a * 60 + b;
  if (n == 4 && u1 == 'h' && u2 == 'm') return a * 3600 + b * 60;
  return -1;
}

// One block of the watch view as printed to a pipe: its state and its last
// line, "elapsed E[, eta ...]".
struct WatchBlock {
  std::string state;
  std::string elapsed_line;
  int elapsed = -1;
};

std::vector<WatchBlock> WatchBlocks(const std::string& text) {
  std::vector<WatchBlock> blocks;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("experiment ", 0) == 0 && line.find("): ") != std::string::npos) {
      blocks.push_back({line.substr(line.find("): ") + 3), "", -1});
    } else if (!blocks.empty() && line.rfind("  elapsed ", 0) == 0) {
      blocks.back().elapsed_line = line;
      blocks.back().elapsed = DurationSeconds(line.substr(10, line.find(',') - 10));
    }
  }
  return blocks;
}

// 3 of 1,000 trials done: a rate in trials alone would put the end far past
// the wall-time budget's. While the experiment runs the ETA is that budget's
// end at most, and says so; the block that says the budget ended it has none.
TEST_F(HpctlTest, WatchEtaNeverPassesTheWallTimeBudgetAndEndsWithIt) {
  constexpr int kWallSeconds = 5;
  WriteSpec(1000, ", max_wall_time_s: " + std::to_string(kWallSeconds));
  ASSERT_EQ(Hpctl(addr_ + " submit " + spec_).code, 0);
  Finish(1);
  Out watched = Hpctl(addr_ + " watch 1");
  ASSERT_EQ(watched.code, 0) << watched.text;
  const auto blocks = WatchBlocks(watched.text);
  ASSERT_GE(blocks.size(), 2u) << watched.text;
  const std::string kAtMost = ", eta at most ";
  for (size_t i = 0; i + 1 < blocks.size(); ++i) {
    const WatchBlock& b = blocks[i];
    ASSERT_EQ(b.state, "running") << watched.text;
    const size_t eta = b.elapsed_line.find(kAtMost);
    if (eta == std::string::npos &&
        b.elapsed_line.find(", wall-time budget reached") != std::string::npos) {
      continue;  // the server has not swept it yet
    }
    ASSERT_NE(eta, std::string::npos) << b.elapsed_line;
    const std::string rest = b.elapsed_line.substr(eta + kAtMost.size());
    EXPECT_EQ(rest.substr(rest.find(' ')), " (wall-time budget)") << b.elapsed_line;
    const int left = DurationSeconds(rest.substr(0, rest.find(' ')));
    ASSERT_GE(left, 0) << b.elapsed_line;
    ASSERT_GE(b.elapsed, 0) << b.elapsed_line;
    EXPECT_LE(b.elapsed + left, kWallSeconds) << "past the budget's end: " << b.elapsed_line;
  }
  EXPECT_EQ(blocks.back().state, "completed") << watched.text;
  EXPECT_EQ(blocks.back().elapsed_line.find("eta"), std::string::npos)
      << blocks.back().elapsed_line;
  EXPECT_NE(watched.text.find("ended: wall-time budget of 5 s reached"), std::string::npos)
      << watched.text;
}

TEST_F(HpctlTest, WatchShowsNoEtaForACancelledExperiment) {
  WriteSpec(1000);
  ASSERT_EQ(Hpctl(addr_ + " submit " + spec_).code, 0);
  Finish(1);
  ASSERT_EQ(Hpctl(addr_ + " cancel 1").code, 0);
  Out watched = Hpctl(addr_ + " watch 1");
  EXPECT_EQ(watched.code, 4) << watched.text;
  const auto blocks = WatchBlocks(watched.text);
  ASSERT_EQ(blocks.size(), 1u) << watched.text;
  EXPECT_EQ(blocks[0].state, "cancelled");
  EXPECT_EQ(blocks[0].elapsed_line.find("eta"), std::string::npos) << blocks[0].elapsed_line;
}

// Half the trials done, far inside the wall-time budget: the estimate comes
// from the trials, says so, and is marked rough on so few.
TEST_F(HpctlTest, WatchEtaFromTheTrialsSaysSoAndHowRoughItIs) {
  WriteSpec(6, ", max_wall_time_s: 3600");
  ASSERT_EQ(Hpctl(addr_ + " submit " + spec_).code, 0);
  Finish(1);
  const std::string out = dir_ + "/watch.out";
  const pid_t watch = StartWatch(out);
  ASSERT_GT(watch, 0);
  Finish(1);
  const auto status = testing::WaitExit(watch, std::chrono::seconds(60));
  if (!status) testing::KillAndReap(watch);
  ASSERT_TRUE(status) << testing::ReadFile(out);
  const auto blocks = WatchBlocks(testing::ReadFile(out));
  ASSERT_GE(blocks.size(), 2u) << testing::ReadFile(out);
  EXPECT_EQ(blocks[0].state, "running");
  const std::string& running = blocks[0].elapsed_line;
  EXPECT_NE(running.find(", eta "), std::string::npos) << running;
  EXPECT_NE(running.find(" (trials; rough, 3 of 6 done)"), std::string::npos) << running;
  EXPECT_EQ(running.find("at most"), std::string::npos) << "the trials end it first: " << running;
  EXPECT_EQ(blocks.back().state, "completed");
  EXPECT_EQ(blocks.back().elapsed_line.find("eta"), std::string::npos)
      << blocks.back().elapsed_line;
}

// With cost.budget, spending bounds the experiment too: a worker priced at
// 1 per second runs a trial that reports a step and waits; no trial is done
// to estimate from, so the ETA is the spending's, and says so.
TEST_F(HpctlTest, WatchEtaFromTheCostBudgetSaysSo) {
#ifndef HPO_HAVE_WORKER
  GTEST_SKIP() << "needs hpo-worker, which this build (HPO_BUILD_WORKER=OFF) does not have";
#endif
  const std::string worker_bin =
      (std::filesystem::path(HPCTL_BIN).parent_path().parent_path() / "worker" / "hpo-worker")
          .string();
  const pid_t worker = testing::Spawn({worker_bin, "--server", server_->grpc_address(), "--labels",
                                       "pool=eta", "--threads", "1", "--benchmark-seconds", "0.1"},
                                      dir_ + "/worker.log");
  ASSERT_GT(worker, 0);
  HttpClientOptions o;
  o.port = server_->http_port();
  for (int i = 0; i < 600; ++i) {
    auto r = HttpRequestOnce(o, "GET", "/api/v1/workers");
    if (r.ok() && r->status == 200 && !json::parse(r->body)["workers"].empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::ofstream(spec_) << R"(
name: cost
objective: {metric: loss}
spaces:
  - name: s
    params: {x: {type: float, low: 0, high: 1}}
early_stopping: {rule: none}
budget: {max_trials: 1000, max_parallel: 1, steps_per_trial: 2}
cost: {prices: {"pool=eta": 3600}, budget: 100000}
executor:
  command:
    argv: [sh, -c, 'sleep 1; echo "hpo: step=1 loss=1"; exec sleep 600']
)";
  Out submitted = Hpctl(addr_ + " submit " + spec_);
  ASSERT_EQ(submitted.code, 0) << submitted.text << testing::ReadFile(dir_ + "/worker.log");
  // The first step charged: usage.cost > 0.
  for (int i = 0; i < 600; ++i) {
    auto r = HttpRequestOnce(o, "GET", "/api/v1/experiments/1");
    if (r.ok() && r->status == 200 && json::parse(r->body)["usage"].value("cost", 0.0) > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const std::string out = dir_ + "/watch.out";
  const pid_t watch = StartWatch(out);
  ASSERT_GT(watch, 0);
  EXPECT_EQ(Hpctl(addr_ + " cancel 1").code, 0);
  const auto status = testing::WaitExit(watch, std::chrono::seconds(60));
  if (!status) testing::KillAndReap(watch);
  ::kill(worker, SIGTERM);
  ::kill(worker, SIGTERM);
  if (!testing::WaitExit(worker, std::chrono::seconds(30))) testing::KillAndReap(worker);
  const auto blocks = WatchBlocks(testing::ReadFile(out));
  ASSERT_GE(blocks.size(), 2u) << testing::ReadFile(out);
  EXPECT_EQ(blocks[0].state, "running");
  EXPECT_NE(blocks[0].elapsed_line.find(", eta "), std::string::npos) << blocks[0].elapsed_line;
  EXPECT_NE(blocks[0].elapsed_line.find(" (cost budget)"), std::string::npos)
      << blocks[0].elapsed_line;
  EXPECT_EQ(blocks.back().state, "cancelled");
  EXPECT_EQ(blocks.back().elapsed_line.find("eta"), std::string::npos)
      << blocks.back().elapsed_line;
}

// hpctl names a trial by its number within its experiment; the id (global
// across experiments) only where it is labelled so. `logs` takes
// EXPERIMENT/NUMBER, and still a bare id.
TEST_F(HpctlTest, LogsNamesATrialByExperimentAndNumber) {
  ASSERT_EQ(Hpctl(addr_ + " submit " + spec_).code, 0);
  ASSERT_EQ(Hpctl(addr_ + " submit " + spec_).code, 0);
  Finish(1);
  Finish(2, [](double x) { return x + 10; });
  HttpClientOptions o;
  o.port = server_->http_port();
  auto listed = HttpRequestOnce(o, "GET", "/api/v1/experiments/2/trials");
  ASSERT_TRUE(listed.ok() && listed->status == 200);
  const json t = json::parse(listed->body)["trials"][1];
  ASSERT_EQ(t["number"], 1);
  const std::string id = std::to_string(t["id"].get<int64_t>());
  ASSERT_NE(id, "1") << "ids and numbers differ in the second experiment";

  Out by_number = Hpctl(addr_ + " logs 2/1");
  ASSERT_EQ(by_number.code, 0) << by_number.text;
  EXPECT_EQ(
      by_number.text.rfind("trial 1 of experiment 2 (id " + id + "): completed, attempt 1\n", 0),
      0u)
      << by_number.text;
  char loss[32];  // as hpctl shows floats: four significant digits
  std::snprintf(loss, sizeof loss, "%.4g", t["params"]["x"].get<double>() + 10);
  EXPECT_NE(by_number.text.find("  step 1 {\"loss\":" + std::string(loss) + "}"), std::string::npos)
      << "its own measurement, not trial 1 of experiment 1's\n"
      << by_number.text;
  Out by_id = Hpctl(addr_ + " logs " + id);
  EXPECT_EQ(by_id.code, 0) << by_id.text;
  EXPECT_EQ(by_id.text, by_number.text) << "a bare id still works, and says the number";
  Out first = Hpctl(addr_ + " logs 1/0");
  EXPECT_EQ(first.text.rfind("trial 0 of experiment 1 (id 1)", 0), 0u) << first.text;

  Out missing = Hpctl(addr_ + " logs 2/3");
  EXPECT_EQ(missing.code, 1) << missing.text;
  EXPECT_EQ(missing.text, "hpctl: experiment 2 has no trial 3 (`hpctl trials 2` lists them)\n");
  Out no_experiment = Hpctl(addr_ + " logs 9/0");
  EXPECT_EQ(no_experiment.code, 1) << no_experiment.text;
  EXPECT_NE(no_experiment.text.find("experiment 9 does not exist"), std::string::npos)
      << no_experiment.text;
  for (const char* bad : {"2/x", "0/1", "2/", "x", "0"}) {
    Out r = Hpctl(addr_ + " logs " + bad);
    EXPECT_EQ(r.code, 2) << bad << ": " << r.text;
    EXPECT_NE(r.text.find("expected EXPERIMENT/NUMBER"), std::string::npos)
        << bad << ": " << r.text;
  }
}

// The table for people, JSON as the server has it, and CSV with the
// export's flat columns: a column per param, system parameter and metric,
// no JSON in a cell.
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
  EXPECT_EQ(csv.text.find('{'), std::string::npos) << "a JSON object in a cell: " << csv.text;
  EXPECT_EQ(csv.text.substr(0, csv.text.find('\n')),
            "number,id,space,state,attempt,level,started_ms,finished_ms,stop_step,reason,"
            "device_seconds,device_class,latest_step,best_step,params.x,metrics.loss,latest.loss,"
            "best.loss")
      << csv.text;
  Out exported = Hpctl(addr_ + " export 1 -o csv");
  EXPECT_EQ(csv.text, exported.text) << "the export's columns, from the export's code";
  Out none = Hpctl(addr_ + " trials 1 -o csv --state failed");
  EXPECT_EQ(none.text.find('\n'), none.text.size() - 1) << "the header alone\n" << none.text;
  Out bad = Hpctl(addr_ + " trials 1 -o xml");
  EXPECT_EQ(bad.code, 2);
}

// Floats in what people read (tables, status, best, logs) have four
// significant digits; what programs read (JSON, CSV) keeps every digit.
TEST_F(HpctlTest, HumanOutputRoundsFloatsAndDataKeepsEveryDigit) {
  ASSERT_EQ(Hpctl(addr_ + " submit " + spec_).code, 0);
  Finish(1, [](double) { return 0.912345678; });
  HttpClientOptions o;
  o.port = server_->http_port();
  auto listed = HttpRequestOnce(o, "GET", "/api/v1/experiments/1/trials");
  ASSERT_TRUE(listed.ok() && listed->status == 200);
  const json first = json::parse(listed->body)["trials"][0];
  const std::string x = first["params"]["x"].dump();  // a sampled float: many digits
  ASSERT_GT(x.size(), 8u) << x;
  const std::string ref = "1/" + std::to_string(first["number"].get<int64_t>());
  for (const std::string& command :
       std::vector<std::string>{" trials 1", " status 1", " best 1", " logs " + ref}) {
    Out human = Hpctl(addr_ + command);
    ASSERT_EQ(human.code, 0) << command << "\n" << human.text;
    EXPECT_NE(human.text.find("0.9123"), std::string::npos) << command << "\n" << human.text;
    EXPECT_EQ(human.text.find("0.912345678"), std::string::npos) << command << "\n" << human.text;
    EXPECT_EQ(human.text.find(x), std::string::npos) << command << ": x in full\n" << human.text;
  }
  for (const std::string& command :
       std::vector<std::string>{" trials 1 -o csv", " trials 1 -o json", " best 1 -o json",
                                " status 1 -o json", " export 1"}) {
    Out data = Hpctl(addr_ + command);
    ASSERT_EQ(data.code, 0) << command << "\n" << data.text;
    if (command.find("status") == std::string::npos) {
      EXPECT_NE(data.text.find("0.912345678"), std::string::npos) << command << "\n" << data.text;
    }
  }
  Out csv = Hpctl(addr_ + " trials 1 -o csv");
  EXPECT_NE(csv.text.find(x), std::string::npos) << csv.text;
}

// status is a block of watch's view, once, not the server's counts as JSON;
// -o json is that JSON.
TEST_F(HpctlTest, StatusIsAReadableBlockAndJsonOnRequest) {
  ASSERT_EQ(Hpctl(addr_ + " submit " + spec_).code, 0);
  Finish(1, [](double) { return 0.25; });
  Out done = Hpctl(addr_ + " status 1");
  ASSERT_EQ(done.code, 0) << done.text;
  EXPECT_EQ(
      done.text.rfind("experiment 1 (cli): completed\n"
                      "  trials 3 of 3 finished: 3 completed, 0 pruned, 0 running, 0 paused at a "
                      "rung, 0 failed\n"
                      "  best: trial 0 (main) loss=0.25 {\"x\":",
                      0),
      0u)
      << done.text;
  EXPECT_NE(done.text.find("\n  elapsed "), std::string::npos) << done.text;
  EXPECT_NE(done.text.find("\n  ended: all 3 trials finished\n"), std::string::npos) << done.text;
  EXPECT_EQ(done.text.find("\"completed\""), std::string::npos) << "raw JSON\n" << done.text;

  ASSERT_EQ(Hpctl(addr_ + " submit " + spec_).code, 0);
  Out running = Hpctl(addr_ + " status 2");
  ASSERT_EQ(running.code, 0) << running.text;
  EXPECT_EQ(running.text.rfind("experiment 2 (cli): running\n  trials 0 of 3 finished: ", 0), 0u)
      << running.text;
  EXPECT_NE(running.text.find("\n  best: none yet\n"), std::string::npos) << running.text;
  EXPECT_EQ(running.text.find("ended"), std::string::npos) << running.text;

  Out js = Hpctl(addr_ + " status 1 -o json");
  ASSERT_EQ(js.code, 0) << js.text;
  const json e = json::parse(js.text, nullptr, false);
  ASSERT_TRUE(e.is_object()) << js.text;
  EXPECT_EQ(e["state"], "completed");
  EXPECT_EQ(e["trials"]["completed"], 3);
  EXPECT_EQ(Hpctl(addr_ + " status 1 -o csv").code, 2);
}

// hpo-server says at info level when an experiment starts and when it
// ends, and why.
TEST_F(HpctlTest, TheServerLogsEachExperimentsStartAndEnd) {
  ASSERT_EQ(Hpctl(addr_ + " submit " + spec_).code, 0);
  Finish(1);
  ASSERT_EQ(Hpctl(addr_ + " submit " + spec_).code, 0);
  ASSERT_EQ(Hpctl(addr_ + " cancel 2").code, 0);
  std::string log;
  for (int i = 0; i < 100; ++i) {
    log = server_->Log();
    if (log.find("experiment 2 ended") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (const char* line :
       {" info experiment 1 (cli) created\n",
        " info experiment 1 ended: completed (all 3 trials finished)\n",
        " info experiment 2 (cli) created\n", " info experiment 2 ended: cancelled"}) {
    EXPECT_NE(log.find(line), std::string::npos) << line << "\n" << log;
  }
}

// hpctl reads the REST address from HPO_REST_SERVER; HPO_SERVER, which
// hpo-worker read as the gRPC one, still works alone, with a warning.
TEST_F(HpctlTest, TheRestAddressComesFromHpoRestServerAndTheOldNameStillWorks) {
  const std::string rest = "127.0.0.1:" + std::to_string(server_->http_port());
  const std::string warning =
      "hpctl: warning: HPO_SERVER is deprecated (hpctl reads it as the REST address, hpo-worker as "
      "the gRPC one): set HPO_REST_SERVER instead\n";
  Out by_new = Shell("HPO_REST_SERVER=" + rest + " HPO_SERVER=127.0.0.1:1 " + HPCTL_BIN + " list");
  EXPECT_EQ(by_new.code, 0) << by_new.text;
  EXPECT_EQ(by_new.text.find("warning"), std::string::npos) << by_new.text;
  Out by_old = Shell("env -u HPO_REST_SERVER HPO_SERVER=" + rest + " " + HPCTL_BIN + " list");
  EXPECT_EQ(by_old.code, 0) << by_old.text;
  EXPECT_EQ(by_old.text.rfind(warning, 0), 0u) << "one line, first\n" << by_old.text;
  Out flag = Shell("HPO_SERVER=127.0.0.1:1 HPO_REST_SERVER=127.0.0.1:1 " + std::string(HPCTL_BIN) +
                   " " + addr_ + " list");
  EXPECT_EQ(flag.code, 0) << "--server wins over both\n" << flag.text;
  EXPECT_EQ(flag.text.find("warning"), std::string::npos) << flag.text;
  Out down =
      Shell("env -u HPO_SERVER HPO_REST_SERVER=127.0.0.1:1 " + std::string(HPCTL_BIN) + " list");
  EXPECT_EQ(down.code, 3) << down.text;
  EXPECT_NE(down.text.find("set --server or HPO_REST_SERVER"), std::string::npos) << down.text;
}

TEST_F(HpctlTest, ErrorsAreOneClearLineWithAnExitCode) {
  std::ofstream(dir_ + "/bad.yaml")
      << "name: bad\nobjective: {metric: loss}\nspaces:\n  - name: s\n    params: {x: {type: "
         "float, low: 2, high: 1}}\nexecutor: {client: {}}\n";
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

// A spec with what the dry run and the export have to carry: a categorical
// whose choice holds a comma and quotes, a conditional parameter under it,
// and a co-tuned system parameter.
constexpr const char* kRichSpec = R"(
name: rich
objective: {metric: loss}
spaces:
  - name: main
    params:
      x: {type: float, low: -1, high: 1}
      opt:
        type: categorical
        choices: [sgd, 'a,b "c"']
        conditional: {sgd: {momentum: {type: float, low: 0, high: 0.99}}}
system:
  threads: {type: int, low: 1, high: 4}
budget: {max_trials: 5, max_parallel: 5, steps_per_trial: 1}
executor: {client: {}}
)";

json Experiments(uint16_t port) {
  HttpClientOptions o;
  o.port = port;
  auto r = HttpRequestOnce(o, "GET", "/api/v1/experiments");
  return r.ok() ? json::parse(r->body)["experiments"] : json();
}

TEST_F(HpctlTest, DryRunPrintsTheParsedSpacesAndCreatesNothing) {
  std::ofstream(dir_ + "/rich.yaml") << kRichSpec;
  Out table = Hpctl(addr_ + " submit --dry-run " + dir_ + "/rich.yaml");
  ASSERT_EQ(table.code, 0) << table.text;
  EXPECT_NE(table.text.find("a valid spec (dry run: nothing created)"), std::string::npos)
      << table.text;
  EXPECT_NE(table.text.find("experiment rich: minimize loss, sampler auto"), std::string::npos)
      << table.text;
  EXPECT_NE(table.text.find("space main (3 params"), std::string::npos) << table.text;
  EXPECT_NE(table.text.find("float [-1.0, 1.0]"), std::string::npos) << table.text;
  EXPECT_NE(table.text.find("categorical {sgd, a,b \"c\"}"), std::string::npos) << table.text;
  EXPECT_NE(table.text.find("when opt=sgd"), std::string::npos)
      << "the conditional names its parent\n"
      << table.text;
  EXPECT_NE(table.text.find("int [1, 4]  co-tuned epoch by epoch"), std::string::npos)
      << table.text;

  Out js = Hpctl(addr_ + " submit --dry-run -o json " + dir_ + "/rich.yaml");
  ASSERT_EQ(js.code, 0) << js.text;
  const json spec = json::parse(js.text, nullptr, false);
  ASSERT_TRUE(spec.is_object()) << "JSON alone on stdout: " << js.text;
  ASSERT_EQ(spec["spaces"].size(), 1u);
  const json& params = spec["spaces"][0]["params"];
  ASSERT_EQ(params.size(), 3u) << params;
  // In sampling order: a parent before the parameters that hang on it.
  EXPECT_EQ(params[0]["name"], "opt");
  EXPECT_EQ(params[0]["choices"], json::array({"sgd", "a,b \"c\""}));
  EXPECT_EQ(params[1]["name"], "momentum");
  EXPECT_EQ(params[1]["when"], (json{{"param", "opt"}, {"is", "sgd"}}));
  EXPECT_EQ(params[2]["name"], "x");
  EXPECT_EQ(params[2]["low"], -1.0);
  EXPECT_EQ(spec["system"][0]["name"], "threads");
  EXPECT_EQ(spec["early_stopping"]["type"], "stop") << "defaults are filled in";
  EXPECT_EQ(spec["budget"]["max_trials"], 5);

  EXPECT_EQ(Hpctl(addr_ + " submit --dry-run --watch " + dir_ + "/rich.yaml").code, 2)
      << "they exclude each other";
  EXPECT_EQ(Experiments(server_->http_port()).size(), 0u) << "a dry run creates nothing";
}

TEST_F(HpctlTest, DryRunOfABadSpecNamesTheFieldAndFails) {
  std::ofstream(dir_ + "/bad.yaml")
      << "name: bad\nobjective: {metric: loss}\nspaces:\n  - name: s\n    params: {x: {type: "
         "float, low: 2, high: 1}}\nexecutor: {client: {}}\n";
  Out bad = Hpctl(addr_ + " submit --dry-run " + dir_ + "/bad.yaml");
  EXPECT_EQ(bad.code, 1) << bad.text;
  EXPECT_EQ(bad.text, "hpctl: spaces[0].params.x.low: must be < high\n");
  // A check the spec parser cannot make alone (the engine builds the pruner
  // to judge it): the dry run takes the same route as creating.
  std::ofstream(dir_ + "/eta.yaml")
      << "name: eta\nobjective: {metric: loss}\nspaces:\n  - name: s\n    params: {x: {type: "
         "float, low: 0, high: 1}}\nearly_stopping: {rule: asha, reduction_factor: 1}\nexecutor: "
         "{client: {}}\n";
  Out eta = Hpctl(addr_ + " submit --dry-run " + dir_ + "/eta.yaml");
  EXPECT_EQ(eta.code, 1) << eta.text;
  EXPECT_NE(eta.text.find("early_stopping"), std::string::npos) << eta.text;
  EXPECT_NE(eta.text.find("reduction_factor"), std::string::npos) << eta.text;
  Out submitted = Hpctl(addr_ + " submit " + dir_ + "/eta.yaml");
  EXPECT_EQ(submitted.text, eta.text) << "dry run and submit judge alike";
  EXPECT_EQ(Hpctl(addr_ + " submit --dry-run " + dir_ + "/nope.yaml").code, 2);
  EXPECT_EQ(Experiments(server_->http_port()).size(), 0u);
}

// Issue #46: a promotion budget whose max_trials cannot bring any trial to
// the last rung is valid, but the dry run says so (stderr, exit 0).
TEST_F(HpctlTest, DryRunWarnsWhenNoTrialCanReachTheLastRung) {
  const auto spec = [&](int max_trials) {
    const std::string file = dir_ + "/rungs-" + std::to_string(max_trials) + ".yaml";
    std::ofstream(file)
        << "name: rungs\nobjective: {metric: loss}\nspaces:\n  - name: s\n"
           "    params: {x: {type: float, low: 0, high: 1}}\n"
           "early_stopping: {rule: asha, type: promotion, min_resource: 1, reduction_factor: 3}\n"
           "budget: {max_trials: "
        << max_trials
        << ", steps_per_trial: 9}\nexecutor: {command: {argv: [train, '{x}'], checkpoints: "
           "true}}\n";
    return file;
  };
  // Rungs 1, 3, 9: a rung keeps floor(n / 3), so the last needs 9 trials.
  Out few = Hpctl(addr_ + " submit --dry-run " + spec(8));
  ASSERT_EQ(few.code, 0) << few.text;
  EXPECT_NE(
      few.text.find(
          "hpctl: warning: budget.max_trials: 8 trials cannot bring any trial to the last rung "
          "(step 9 of rungs 1, 3, 9)"),
      std::string::npos)
      << few.text;
  EXPECT_NE(few.text.find("about 9 trials"), std::string::npos) << few.text;
  Out js = Shell("(" + std::string(HPCTL_BIN) + " " + addr_ + " submit --dry-run -o json " +
                 spec(8) + " 2>/dev/null)");
  ASSERT_EQ(js.code, 0);
  EXPECT_TRUE(json::parse(js.text, nullptr, false).is_object())
      << "the warning is not in the JSON: " << js.text;
  Out enough = Hpctl(addr_ + " submit --dry-run " + spec(9));
  ASSERT_EQ(enough.code, 0) << enough.text;
  EXPECT_EQ(enough.text.find("warning"), std::string::npos) << enough.text;
}

// An ask/tell experiment of 5-step trials, ended by a 1 s wall-time budget.
std::string WallTimeSpec(const std::string& dir) {
  const std::string file = dir + "/wall.yaml";
  std::ofstream(file)
      << "name: wall\nobjective: {metric: loss}\nspaces:\n  - name: main\n"
         "    params: {x: {type: float, low: -1, high: 1}}\n"
         "budget: {max_trials: 3, max_parallel: 3, steps_per_trial: 5, max_wall_time_s: 1}\n"
         "executor: {client: {}}\n";
  return file;
}

// Issue #46: trials that reported steps but never completed (the budget ran
// out first) leave a best, said to be partial; watch ends 0.
TEST_F(HpctlTest, AnExperimentWithoutACompletedTrialHasAPartialBest) {
  ASSERT_EQ(Hpctl(addr_ + " submit " + WallTimeSpec(dir_)).code, 0);
  HttpClientOptions o;
  o.port = server_->http_port();
  auto s = HttpRequestOnce(o, "POST", "/api/v1/experiments/1/trials:suggest", R"({"count": 3})");
  ASSERT_TRUE(s.ok() && s->status == 200) << (s.ok() ? s->body : s.status().message());
  const json suggested = json::parse(s->body);
  ASSERT_EQ(suggested["trials"].size(), 3u);
  int64_t best_number = -1;
  double losses[] = {0.5, 0.2, 0.9};
  for (size_t i = 0; i < 3; ++i) {
    const json& t = suggested["trials"][i];
    if (i == 1) best_number = t["number"];
    const std::string tid = std::to_string(t["id"].get<int64_t>());
    for (int step = 1; step <= 2; ++step) {
      // Step 1 is each trial's best: the best is found at a step, not the last.
      auto r = HttpRequestOnce(
          o, "POST", "/api/v1/trials/" + tid + "/measurements",
          json{{"step", step}, {"metrics", {{"loss", step == 1 ? losses[i] : losses[i] + 1}}}}
              .dump());
      ASSERT_TRUE(r.ok() && r->status == 200) << (r.ok() ? r->body : r.status().message());
    }
  }
  Out watched = Hpctl(addr_ + " watch 1");
  EXPECT_EQ(watched.code, 0) << "measured trials are a result\n" << watched.text;
  EXPECT_NE(watched.text.find("best so far: trial " + std::to_string(best_number)),
            std::string::npos)
      << watched.text;
  Out best = Hpctl(addr_ + " best 1");
  ASSERT_EQ(best.code, 0) << best.text;
  EXPECT_NE(
      best.text.find("best so far: trial " + std::to_string(best_number) +
                     " (main; running, best at step 1, not trained to its full budget): loss 0.2"),
      std::string::npos)
      << best.text;
  Out js = Hpctl(addr_ + " best 1 -o json");
  ASSERT_EQ(js.code, 0) << js.text;
  const json b = json::parse(js.text);
  EXPECT_EQ(b["partial"], true);
  EXPECT_EQ(b["best_step"], 1);
  EXPECT_EQ(b["best_metrics"], json({{"loss", 0.2}}));
  EXPECT_EQ(b["number"], best_number);
}

// Issue #46: an experiment that ended with no measurement at all is not a
// success: watch says why and exits 5.
TEST_F(HpctlTest, WatchOfAnExperimentEndedWithNoMeasurementExitsFive) {
  ASSERT_EQ(Hpctl(addr_ + " submit " + WallTimeSpec(dir_)).code, 0);
  Out watched = Hpctl(addr_ + " watch 1");
  EXPECT_EQ(watched.code, 5) << watched.text;
  EXPECT_NE(watched.text.find(
                "hpctl: experiment 1 ended with no result: no trial completed or reported loss"),
            std::string::npos)
      << watched.text;
  Out quiet = Hpctl(addr_ + " -q watch 1");
  EXPECT_EQ(quiet.code, 5) << quiet.text;
  Out best = Hpctl(addr_ + " best 1");
  EXPECT_EQ(best.code, 1) << best.text;
  EXPECT_NE(best.text.find("no completed trial and no measurement yet"), std::string::npos)
      << best.text;
}

TEST_F(HpctlTest, ExportWritesEveryTrialForPandas) {
  std::ofstream(dir_ + "/rich.yaml") << kRichSpec;
  ASSERT_EQ(Hpctl(addr_ + " submit " + dir_ + "/rich.yaml").code, 0);
  HttpClientOptions o;
  o.port = server_->http_port();
  auto s = HttpRequestOnce(o, "POST", "/api/v1/experiments/1/trials:suggest", R"({"count": 5})");
  ASSERT_TRUE(s.ok() && s->status == 200);
  const json suggested = json::parse(s->body)["trials"];
  ASSERT_EQ(suggested.size(), 5u);
  // Three complete (the third with a second final metric, which only it
  // has), one fails with a reason that needs CSV quoting, one still runs:
  // its latest report is all it has.
  const std::string reason = "diverged, \"nan\"\nsecond line";
  for (size_t i = 0; i < suggested.size(); ++i) {
    const std::string tid = std::to_string(suggested[i]["id"].get<int64_t>());
    const double x = suggested[i]["params"]["x"];
    auto r = HttpRequestOnce(o, "POST", "/api/v1/trials/" + tid + "/measurements",
                             json{{"step", 1}, {"metrics", {{"loss", x * x}}}}.dump());
    ASSERT_TRUE(r.ok() && r->status == 200);
    if (i == 4) continue;
    const json final_metrics = i == 2 ? json{{"accuracy", 0.5}} : json::object();
    auto done = i == 3 ? HttpRequestOnce(o, "POST", "/api/v1/trials/" + tid + ":fail",
                                         json{{"reason", reason}}.dump())
                       : HttpRequestOnce(o, "POST", "/api/v1/trials/" + tid + ":complete",
                                         json{{"metrics", final_metrics}}.dump());
    ASSERT_TRUE(done.ok() && done->status == 200) << (done.ok() ? done->body : "");
  }
  auto listed = HttpRequestOnce(o, "GET", "/api/v1/experiments/1/trials");
  const json trials = json::parse(listed->body)["trials"];

  const std::string csv = dir_ + "/trials.csv";
  Out written = Hpctl(addr_ + " export 1 " + csv);
  ASSERT_EQ(written.code, 0) << written.text;
  EXPECT_EQ(written.text, "wrote 5 trials of experiment 1 to " + csv + " (csv)\n");
  // Read back by Python's csv module, as pandas' reader would.
  Out parsed = Shell(
      "python3 -c 'import csv, json, sys; r = csv.reader(open(sys.argv[1], newline=\"\")); "
      "print(json.dumps(list(r)))' " +
      csv);
  ASSERT_EQ(parsed.code, 0) << parsed.text;
  const json rows = json::parse(parsed.text);
  ASSERT_EQ(rows.size(), 6u) << parsed.text;
  const std::vector<std::string> header = {"number",
                                           "id",
                                           "space",
                                           "state",
                                           "attempt",
                                           "level",
                                           "started_ms",
                                           "finished_ms",
                                           "stop_step",
                                           "reason",
                                           "device_seconds",
                                           "device_class",
                                           "latest_step",
                                           "best_step",
                                           "params.momentum",
                                           "params.opt",
                                           "params.x",
                                           "system.threads",
                                           "metrics.accuracy",
                                           "metrics.loss",
                                           "latest.loss",
                                           "best.loss"};
  EXPECT_EQ(rows[0], json(header))
      << "one column per param, system parameter and metric, sorted in each group";
  auto col = [&](const std::string& name) {
    return static_cast<size_t>(std::find(header.begin(), header.end(), name) - header.begin());
  };
  for (size_t i = 0; i < trials.size(); ++i) {
    const json& t = trials[i];
    const json& row = rows[i + 1];
    ASSERT_EQ(row.size(), header.size()) << row;
    EXPECT_EQ(row[col("number")], std::to_string(t["number"].get<int64_t>()));
    EXPECT_EQ(row[col("state")], t["state"]);
    EXPECT_EQ(row[col("space")], "main");
    EXPECT_EQ(row[col("params.opt")], t["params"]["opt"])
        << "a choice with a comma and quotes reads back whole";
    EXPECT_EQ(std::stod(row[col("params.x")].get<std::string>()), t["params"]["x"].get<double>())
        << "numbers keep every digit";
    if (t["params"].contains("momentum")) {
      EXPECT_EQ(std::stod(row[col("params.momentum")].get<std::string>()),
                t["params"]["momentum"].get<double>());
    } else {
      EXPECT_EQ(row[col("params.momentum")], "") << "an inactive parameter is an empty cell";
    }
    EXPECT_EQ(row[col("latest_step")], "1");
    EXPECT_EQ(row[col("best_step")], "1");
    EXPECT_EQ(row[col("best.loss")], row[col("latest.loss")]) << "one step: its last is its best";
    EXPECT_EQ(std::stod(row[col("latest.loss")].get<std::string>()),
              std::pow(t["params"]["x"].get<double>(), 2))
        << "every trial's last report, whether or not it finished";
    if (t["state"] == "failed") {
      EXPECT_EQ(row[col("reason")], reason)
          << "a reason with a line break, a comma and quotes reads back whole";
    } else if (t["state"] == "running") {
      EXPECT_EQ(row[col("metrics.loss")], "") << "no final metrics yet";
    } else {
      EXPECT_EQ(std::stod(row[col("metrics.loss")].get<std::string>()),
                t["final_metrics"]["loss"].get<double>());
    }
    EXPECT_EQ(row[col("metrics.accuracy")], t["id"] == suggested[2]["id"] ? "0.5" : "")
        << "a metric one trial lacks is empty";
    EXPECT_EQ(std::stoi(row[col("system.threads")].get<std::string>()),
              t["system"]["threads"].get<int>());
  }

  Out table = Hpctl(addr_ + " trials 1");
  ASSERT_EQ(table.code, 0) << table.text;
  EXPECT_NE(table.text.find(" @ step 1"), std::string::npos)
      << "the running trial's latest report\n"
      << table.text;
  EXPECT_NE(table.text.find("best_loss"), std::string::npos) << table.text;

  Out to_stdout = Hpctl(addr_ + " export 1 -o csv");
  ASSERT_EQ(to_stdout.code, 0) << to_stdout.text;
  const std::string file_text = testing::ReadFile(csv);
  EXPECT_EQ(to_stdout.text, file_text) << "stdout carries the data alone";

  Out js = Hpctl(addr_ + " export 1 -o json");
  ASSERT_EQ(js.code, 0) << js.text;
  const json records = json::parse(js.text, nullptr, false);
  ASSERT_TRUE(records.is_array()) << js.text;
  ASSERT_EQ(records.size(), 5u);
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(records[i]["params"], trials[i]["params"]);
    EXPECT_EQ(records[i]["system"], trials[i]["system"]);
    EXPECT_EQ(records[i]["number"], trials[i]["number"]);
    if (trials[i]["state"] != "failed" && trials[i]["state"] != "running") {
      EXPECT_EQ(records[i]["metrics"], trials[i]["final_metrics"]);
    }
    EXPECT_EQ(records[i]["latest"], trials[i]["latest"]["metrics"]);
    EXPECT_EQ(records[i]["latest_step"], 1);
    EXPECT_EQ(records[i]["best"], trials[i]["best"]["metrics"]);
  }

  Out missing = Hpctl(addr_ + " export 99 -o csv");
  EXPECT_EQ(missing.code, 1) << missing.text;
  EXPECT_NE(missing.text.find("experiment 99"), std::string::npos) << missing.text;
  Out unwritable = Hpctl(addr_ + " export 1 " + dir_ + "/no/such/dir/t.csv");
  EXPECT_EQ(unwritable.code, 2) << unwritable.text;
  EXPECT_NE(unwritable.text.find(dir_ + "/no/such/dir/t.csv: cannot write"), std::string::npos)
      << unwritable.text;
  EXPECT_EQ(Hpctl(addr_ + " export 1 -o xml").code, 2);
}

// Several objectives and a constraint: the dry run says them, a report or
// a completion without an objective is refused naming it, GET .../pareto
// and `hpctl best` give the feasible non-dominated trials, and the export
// carries each trial's feasibility, why not, and its rank.
TEST_F(HpctlTest, AFrontOfSeveralObjectivesInTheDryRunBestAndExport) {
  std::ofstream(dir_ + "/front.yaml") << R"(
name: front
objectives:
  - {metric: loss, direction: minimize}
  - {metric: latency_ms, direction: minimize}
constraints: [{metric: size, max: 5}]
spaces:
  - name: main
    params: {x: {type: float, low: -1, high: 1}}
early_stopping: {rule: asha}
budget: {max_trials: 6, max_parallel: 6, steps_per_trial: 3}
executor: {client: {}}
)";
  Out dry = Hpctl(addr_ + " submit --dry-run " + dir_ + "/front.yaml");
  ASSERT_EQ(dry.code, 0) << dry.text;
  EXPECT_NE(dry.text.find("experiment front: minimize loss, minimize latency_ms, sampler auto"),
            std::string::npos)
      << dry.text;
  EXPECT_NE(dry.text.find("constraint: size <= 5"), std::string::npos) << dry.text;
  ASSERT_EQ(Hpctl(addr_ + " submit " + dir_ + "/front.yaml").code, 0);

  HttpClientOptions o;
  o.port = server_->http_port();
  auto s = HttpRequestOnce(o, "POST", "/api/v1/experiments/1/trials:suggest", R"({"count": 6})");
  ASSERT_TRUE(s.ok() && s->status == 200);
  const json suggested = json::parse(s->body)["trials"];
  ASSERT_EQ(suggested.size(), 6u);
  auto id = [&](size_t i) { return std::to_string(suggested[i]["id"].get<int64_t>()); };
  // A report without the second objective: early stopping ranks by both.
  auto partial = HttpRequestOnce(o, "POST", "/api/v1/trials/" + id(0) + "/measurements",
                                 json{{"step", 1}, {"metrics", {{"loss", 1}}}}.dump());
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(partial->status, 400);
  EXPECT_NE(partial->body.find("metrics.latency_ms"), std::string::npos) << partial->body;
  // A completion without it, and no report to take it from.
  auto bare = HttpRequestOnce(o, "POST", "/api/v1/trials/" + id(0) + ":complete",
                              json{{"metrics", {{"loss", 1}, {"size", 1}}}}.dump());
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->status, 400);
  EXPECT_NE(bare->body.find("final_metrics.latency_ms"), std::string::npos) << bare->body;
  // loss, latency, size (null: not reported): 0 and 1 on the front, 2
  // dominated by 0, 3 better than all but too big, 4 never says its size,
  // 5 on the front with a value the others do not reach.
  const std::vector<std::array<double, 3>> finals = {{1, 10, 3},  {2, 5, 3},     {2, 12, 3},
                                                     {0.5, 1, 9}, {0.2, 2, NAN}, {5, 0.5, 5}};
  for (size_t i = 0; i < finals.size(); ++i) {
    json m = {{"loss", finals[i][0]}, {"latency_ms", finals[i][1]}};
    if (!std::isnan(finals[i][2])) m["size"] = finals[i][2];
    auto done = HttpRequestOnce(o, "POST", "/api/v1/trials/" + id(i) + ":complete",
                                json{{"metrics", m}}.dump());
    ASSERT_TRUE(done.ok() && done->status == 200) << (done.ok() ? done->body : "");
  }
  auto front = HttpRequestOnce(o, "GET", "/api/v1/experiments/1/pareto");
  ASSERT_TRUE(front.ok() && front->status == 200);
  const json f = json::parse(front->body);
  EXPECT_EQ(f["completed"], 6);
  EXPECT_EQ(f["feasible"], 4);
  EXPECT_EQ(f["front_size"], 3);
  std::set<int64_t> numbers;
  for (const auto& t : f["trials"]) {
    numbers.insert(t["number"].get<int64_t>());
    EXPECT_EQ(t["rank"], 0);
    EXPECT_EQ(t["values"].size(), 2u);
  }
  const auto number = [&](size_t i) { return suggested[i]["number"].get<int64_t>(); };
  EXPECT_EQ(numbers, (std::set<int64_t>{number(0), number(1), number(5)})) << f.dump();

  // Every command that reads the objective reads the first of several.
  Out watched = Hpctl(addr_ + " watch 1");
  EXPECT_EQ(watched.code, 0) << watched.text;
  EXPECT_NE(watched.text.find("trials 6 of 6 finished"), std::string::npos) << watched.text;
  // The best by the first objective within the constraint: trial 0's loss
  // of 1 (3's 0.5 is too big, 4's 0.2 never said its size).
  EXPECT_NE(
      watched.text.find("best: trial " + std::to_string(suggested[0]["number"].get<int64_t>()) +
                        " (main) loss=1 "),
      std::string::npos)
      << watched.text;
  Out table = Hpctl(addr_ + " trials 1");
  EXPECT_EQ(table.code, 0) << table.text;
  Out status = Hpctl(addr_ + " status 1");
  EXPECT_EQ(status.code, 0) << status.text;

  Out best = Hpctl(addr_ + " best 1");
  ASSERT_EQ(best.code, 0) << best.text;
  EXPECT_NE(best.text.find("loss (min)"), std::string::npos) << best.text;
  EXPECT_NE(best.text.find("latency_ms (min)"), std::string::npos) << best.text;
  EXPECT_NE(best.text.find("3 on the front of 4 feasible, 6 completed"), std::string::npos)
      << best.text;

  Out exported = Hpctl(addr_ + " export 1 -o json");
  ASSERT_EQ(exported.code, 0) << exported.text;
  const json records = json::parse(exported.text);
  ASSERT_EQ(records.size(), 6u);
  std::map<int64_t, json> by_number;
  for (const auto& r : records) by_number[r["number"].get<int64_t>()] = r;
  EXPECT_EQ(by_number[number(2)]["rank"], 1) << "dominated by trial " << number(0);
  EXPECT_EQ(by_number[number(2)]["feasible"], true);
  EXPECT_EQ(by_number[number(3)]["feasible"], false);
  EXPECT_TRUE(by_number[number(3)]["rank"].is_null());
  EXPECT_EQ(by_number[number(3)]["infeasible_reasons"], "size: 9 is above the max 5");
  EXPECT_EQ(by_number[number(4)]["infeasible_reasons"], "size: not reported")
      << "never silently feasible";
  Out csv = Hpctl(addr_ + " export 1");
  ASSERT_EQ(csv.code, 0) << csv.text;
  EXPECT_NE(csv.text.find(",feasible,rank,infeasible_reasons,"), std::string::npos) << csv.text;
}

TEST_F(HpctlTest, QuietKeepsTheDataAndTheErrors) {
  Out submitted = Hpctl("--quiet " + addr_ + " submit " + spec_);
  ASSERT_EQ(submitted.code, 0) << submitted.text;
  EXPECT_EQ(submitted.text, "1\n") << "the id alone, for ID=$(hpctl -q submit FILE)";
  Finish(1);
  Out watched = Hpctl(addr_ + " watch 1 -q");
  EXPECT_EQ(watched.code, 0) << watched.text;
  EXPECT_EQ(watched.text, "") << "no progress view; the exit code says how it ended";
  Out exported = Hpctl(addr_ + " -q export 1 " + dir_ + "/t.csv");
  EXPECT_EQ(exported.code, 0) << exported.text;
  EXPECT_EQ(exported.text, "");
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/t.csv"));
  Out table = Hpctl("-q " + addr_ + " trials 1 -o csv");
  EXPECT_EQ(std::count(table.text.begin(), table.text.end(), '\n'), 4)
      << "the data asked for stays\n"
      << table.text;
  std::ofstream(dir_ + "/rich.yaml") << kRichSpec;
  Out dry = Hpctl("-q " + addr_ + " submit --dry-run " + dir_ + "/rich.yaml");
  EXPECT_EQ(dry.code, 0) << dry.text;
  EXPECT_EQ(dry.text.find("a valid spec"), std::string::npos) << dry.text;
  EXPECT_EQ(dry.text.rfind("experiment rich:", 0), 0u) << "the parsed spec is the data\n"
                                                       << dry.text;
  Out unknown = Hpctl("-q " + addr_ + " status 99");
  EXPECT_EQ(unknown.code, 1);
  EXPECT_NE(unknown.text.find("experiment 99 does not exist"), std::string::npos) << "errors stay\n"
                                                                                  << unknown.text;
  Out second = Hpctl("-q " + addr_ + " submit " + spec_);
  ASSERT_EQ(second.text, "2\n");
  Out cancelled = Hpctl("-q " + addr_ + " cancel 2");
  EXPECT_EQ(cancelled.code, 0);
  EXPECT_EQ(cancelled.text, "");
  Out loud = Hpctl(addr_ + " submit " + spec_);
  EXPECT_EQ(loud.text, "submitted experiment 3 (cli)\n") << "without --quiet the news is there";
}

// The commands `hpctl --help` lists, from its Subcommands section.
std::vector<std::string> HelpCommands() {
  const std::string help = Hpctl("--help").text;
  std::vector<std::string> out;
  const size_t section = help.find("Subcommands:");
  if (section == std::string::npos) return out;
  std::istringstream in(help.substr(section));
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string first;
    if (words >> first) out.push_back(first);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// What the bash script completes for the words of a command line (the last
// one being completed), the real completion function called as bash does.
std::vector<std::string> BashComplete(const std::string& script,
                                      const std::vector<std::string>& words) {
  std::string cmd =
      "bash --norc --noprofile -c 'source \"$0\"; COMP_WORDS=(\"${@}\"); COMP_CWORD=$(($# - 1)); "
      "_hpctl; printf \"%s\\n\" \"${COMPREPLY[@]}\"' " +
      script;
  for (const auto& w : words) cmd += " '" + w + "'";
  Out r = Shell(cmd);
  std::vector<std::string> out;
  std::istringstream in(r.text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(HpctlCompletion, BashCompletesCommandsOptionsAndValues) {
  const std::string dir =
      ::testing::TempDir() + "/hpo-hpctl-completion-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string script = dir + "/hpctl.bash";
  Out generated = Hpctl("completion bash > " + script);
  ASSERT_EQ(generated.code, 0) << generated.text;
  Out registered = Shell("bash --norc --noprofile -c 'source " + script + " && complete -p hpctl'");
  EXPECT_EQ(registered.text, "complete -o filenames -F _hpctl hpctl\n");

  const std::vector<std::string> commands = HelpCommands();
  ASSERT_GE(commands.size(), 12u) << "--help's Subcommands section";
  EXPECT_EQ(BashComplete(script, {"hpctl", ""}), commands)
      << "every command of the app, from the app";
  EXPECT_EQ(BashComplete(script, {"hpctl", "ex"}), std::vector<std::string>{"export"});
  EXPECT_EQ(BashComplete(script, {"hpctl", "--server", "h:1", "su"}),
            std::vector<std::string>{"submit"})
      << "a global option's value is not the command";
  EXPECT_EQ(BashComplete(script, {"hpctl", "submit", "--d"}),
            std::vector<std::string>{"--dry-run"});
  const auto export_options = BashComplete(script, {"hpctl", "export", "1", "-"});
  for (const char* o : {"-o", "--output", "--quiet", "-q", "--server", "--help"}) {
    EXPECT_NE(std::find(export_options.begin(), export_options.end(), o), export_options.end())
        << o;
  }
  EXPECT_EQ(BashComplete(script, {"hpctl", "export", "1", "-o", ""}),
            (std::vector<std::string>{"csv", "json"}));
  EXPECT_EQ(BashComplete(script, {"hpctl", "trials", "1", "--output", "c"}),
            std::vector<std::string>{"csv"});
  EXPECT_EQ(BashComplete(script, {"hpctl", "trials", "1", "--state", "pa"}),
            std::vector<std::string>{"paused"});
  EXPECT_EQ(BashComplete(script, {"hpctl", "completion", ""}),
            (std::vector<std::string>{"bash", "zsh"}));
  std::ofstream(dir + "/spec-one.yaml") << "name: x\n";
  EXPECT_EQ(BashComplete(script, {"hpctl", "submit", dir + "/spec-o"}),
            std::vector<std::string>{dir + "/spec-one.yaml"})
      << "a spec file completes as a path";
  EXPECT_EQ(BashComplete(script, {"hpctl", "status", ""}), std::vector<std::string>{})
      << "an id: nothing to offer";
  std::filesystem::remove_all(dir);
}

TEST(HpctlCompletion, ZshScriptLoadsAndRegisters) {
  if (std::system("command -v zsh > /dev/null") != 0)
    GTEST_SKIP() << "zsh is not installed (scripts/setup installs it)";
  const std::string dir = ::testing::TempDir() + "/hpo-hpctl-zsh-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  ASSERT_EQ(Hpctl("completion zsh > " + dir + "/_hpctl").code, 0);
  Out syntax = Shell("zsh -n " + dir + "/_hpctl");
  EXPECT_EQ(syntax.code, 0) << syntax.text;
  Out loaded = Shell("zsh -f -c 'autoload -U compinit && compinit -u -d " + dir +
                     "/zcompdump && source " + dir + "/_hpctl && print -r -- $_comps[hpctl]'");
  EXPECT_EQ(loaded.text, "_hpctl\n");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hpo

namespace hpo {
namespace {

TEST(HpctlRun, RunsAnExperimentOnThisMachineAndCleansUp) {
#ifndef HPO_HAVE_WORKER
  GTEST_SKIP()
      << "hpctl run needs hpo-worker, which this build (HPO_BUILD_WORKER=OFF) does not have";
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
early_stopping: {rule: none}
budget: {max_trials: 2, max_parallel: 2, steps_per_trial: 2}
executor: {builtin: {trainer: fashion-mnist, args: {max_train_samples: 2000}}}
)";
  Out r = Hpctl("run " + dir + "/tiny.yaml --workers 1 --data-dir " + dir + "/data");
  EXPECT_EQ(r.code, 0) << r.text;
  EXPECT_NE(r.text.find("dashboard: http://127.0.0.1:"), std::string::npos)
      << "the embedded server serves this checkout's web/\n"
      << r.text;
  EXPECT_NE(r.text.find("trials 2 of 2 finished: 2 completed"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("best trial"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("test_accuracy"), std::string::npos) << r.text;
  EXPECT_TRUE(std::filesystem::exists(dir + "/data/hpo.db"));
  // Nothing it started is left running.
  // ("dat[a]" keeps pgrep's own shell from matching the pattern.)
  EXPECT_NE(std::system(("pgrep -f '" + dir + "/dat[a]' > /dev/null").c_str()), 0);
  std::filesystem::remove_all(dir);
}

// hpctl run gives each of its workers its share of this machine's usable
// cores: two workers on N cores report N/2 each (at least one) to the
// server, which hands every trial at most that many threads. Each trial
// reports the threads it was given (HPO_THREADS, as its loss too) and then
// waits, so both workers hold one while the test looks; Ctrl-C ends the run.
TEST(HpctlRun, SharesTheCoresAmongItsWorkers) {
#ifndef HPO_HAVE_WORKER
  GTEST_SKIP()
      << "hpctl run needs hpo-worker, which this build (HPO_BUILD_WORKER=OFF) does not have";
#endif
  const std::string dir = ::testing::TempDir() + "/hpo-hpctl-share-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/share.yaml") << R"(
name: share
objective: {metric: loss}
spaces:
  - name: s
    params: {x: {type: float, low: 0, high: 1}}
system:
  threads: {type: int, low: 1, high: 64}
early_stopping: {rule: none}
budget: {max_trials: 2, max_parallel: 2, steps_per_trial: 2}
executor:
  command:
    argv: [sh, -c, 'echo "hpo: step=1 loss=$HPO_THREADS threads=$HPO_THREADS"; exec sleep 600']
)";
  const std::string data = dir + "/data", out = dir + "/run.out";
  const pid_t run = testing::Spawn(
      {HPCTL_BIN, "run", dir + "/share.yaml", "--workers", "2", "--data-dir", data}, out);
  ASSERT_GT(run, 0);
  // The embedded server's address and token, then both trials' first reports.
  std::string at;
  json trials;
  for (int i = 0; i < 1200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const json ports = json::parse(testing::ReadFile(data + "/ports.json"), nullptr, false);
    if (!ports.is_object() || !std::filesystem::exists(data + "/token")) continue;
    at = "HPO_TOKEN=$(cat " + data + "/token) " + HPCTL_BIN +
         " --server 127.0.0.1:" + std::to_string(ports["http"].get<int>()) + " ";
    Out listed = Shell(at + "trials 1 -o json");
    trials = json::parse(listed.text, nullptr, false);
    if (!trials.is_array() || trials.size() < 2) continue;
    if (Shell(at + "logs 1/0").text.find("step 1") != std::string::npos &&
        Shell(at + "logs 1/1").text.find("step 1") != std::string::npos) {
      break;
    }
  }
  Out workers = Shell(at + "workers");
  Out workers_json = Shell(at + "workers -o json");
  Out logs[] = {Shell(at + "logs 1/0"), Shell(at + "logs 1/1")};
  ::kill(run, SIGINT);
  const auto status = testing::WaitExit(run, std::chrono::seconds(120));
  if (!status) testing::KillAndReap(run);
  const std::string text = testing::ReadFile(out);
  ASSERT_TRUE(status) << text;
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 130) << text;

  // What hpctl says it gave each worker.
  int threads = 0;
  double cores = 0;
  const size_t said = text.find("2 workers on ");
  ASSERT_NE(said, std::string::npos) << text;
  ASSERT_EQ(std::sscanf(text.c_str() + said, "2 workers on %lf usable cores: %d thread", &cores,
                        &threads),
            2)
      << text;
  EXPECT_EQ(threads, std::max(1, static_cast<int>(cores / 2))) << text;
  EXPECT_NE(text.find("(hpo-worker --threads " + std::to_string(threads) + ")"), std::string::npos)
      << text;
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  EXPECT_LE(cores, CPU_COUNT(&set)) << "no more than this process may use";

  // What the workers told the server, and what the trials were given.
  const json registered = json::parse(workers_json.text, nullptr, false);
  ASSERT_TRUE(registered.is_object()) << workers_json.text;
  ASSERT_EQ(registered["workers"].size(), 2u) << workers_json.text;
  for (const auto& w : registered["workers"]) {
    for (const auto& d : w["devices"]) {
      if (d["kind"] == "cpu") {
        EXPECT_EQ(d["cores"].get<double>(), threads) << workers_json.text;
      }
    }
  }
  for (int n = 0; n < 2; ++n) {
    const std::string& log = logs[n].text;
    EXPECT_EQ(log.rfind("trial " + std::to_string(n) + " of experiment 1 (id ", 0), 0u) << log;
    const size_t system = log.find("system={");
    ASSERT_NE(system, std::string::npos) << log;
    const json given =
        json::parse(log.substr(system + 7, log.find('\n', system) - system - 7), nullptr, false);
    ASSERT_TRUE(given.is_object() && given["threads"].is_number()) << log;
    EXPECT_LE(given["threads"].get<int>(), threads) << "a trial ran wider than its worker's share\n"
                                                    << log;
  }
  // Each worker's current trial, by experiment and number.
  EXPECT_NE(workers.text.find("current trial (experiment/number)"), std::string::npos)
      << workers.text;
  EXPECT_NE(workers.text.find(" 1/0 ("), std::string::npos) << workers.text;
  EXPECT_NE(workers.text.find(" 1/1 ("), std::string::npos) << workers.text;
  // ("dat[a]" keeps pgrep's own shell from matching the pattern.)
  EXPECT_NE(std::system(("pgrep -f '" + dir + "/dat[a]' > /dev/null").c_str()), 0)
      << "left running";
  std::filesystem::remove_all(dir);
}

TEST(HpctlRun, RefusesAWebRootWithoutTheDashboard) {
  const std::string dir = ::testing::TempDir() + "/hpo-hpctl-webroot-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/spec.yaml") << "name: x\n";
  Out r = Hpctl("run " + dir + "/spec.yaml --web-root " + dir + " --data-dir " + dir + "/data");
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("--web-root " + dir + ": no index.html there"), std::string::npos)
      << r.text;
  EXPECT_FALSE(std::filesystem::exists(dir + "/data")) << "nothing started";
  std::filesystem::remove_all(dir);
}

// A listening socket on 127.0.0.1 with a free port; -1 when none could be made.
int ListenOnLoopback(uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(fd, 16) != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  port = ntohs(addr.sin_port);
  return fd;
}

// Stands in for a server: answers every request on 127.0.0.1 with `response`
// and keeps each request's head (request line and headers) as it came.
class CannedHttpServer {
 public:
  explicit CannedHttpServer(std::string response) : response_(std::move(response)) {
    fd_ = ListenOnLoopback(port_);
    if (fd_ >= 0) thread_ = std::thread([this] { Serve(); });
  }
  ~CannedHttpServer() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  uint16_t port() const { return port_; }
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      timeval tv{5, 0};
      ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      std::string head;
      char buf[4096];
      while (head.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        head.append(buf, static_cast<size_t>(n));
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.push_back(head.substr(0, head.find("\r\n\r\n")));
      }
      // The body, if any, is left unread: the answer does not depend on it.
      (void)!::send(c, response_.data(), response_.size(), MSG_NOSIGNAL);
      ::shutdown(c, SHUT_WR);
      ::close(c);
    }
  }

  const std::string response_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<std::string> requests_;  // guarded by mu_
  std::thread thread_;
};

// hpctl follows no redirect: the request, and the token with it, go to
// --server only, and a 3xx is an error that says where it pointed rather
// than an answer read from the redirect's empty body.
TEST(HpctlRedirect, IsRefusedWithAClearErrorAndTheTokenGoesNowhereElse) {
  uint16_t elsewhere_port = 0;
  // Never accepted: a connection hpctl made to it would wait in its backlog.
  const int elsewhere = ListenOnLoopback(elsewhere_port);
  ASSERT_GE(elsewhere, 0);
  const std::string target =
      "http://127.0.0.1:" + std::to_string(elsewhere_port) + "/api/v1/experiments";
  for (const int status : {301, 302, 303, 307, 308}) {
    CannedHttpServer server("HTTP/1.1 " + std::to_string(status) + " Moved\r\nLocation: " + target +
                            "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    ASSERT_TRUE(server.ok());
    const std::string at = "--server 127.0.0.1:" + std::to_string(server.port()) + " ";
    for (const std::string command : {"list", "status 7", "cancel 7"}) {
      Out r = Shell("HPO_TOKEN=redirect-secret " + std::string(HPCTL_BIN) + " " + at + command);
      EXPECT_EQ(r.code, 1) << command << " after a " << status << ":\n" << r.text;
      EXPECT_NE(r.text.find("answered " + std::to_string(status) + ", a redirect to " + target +
                            "; hpctl follows no redirect"),
                std::string::npos)
          << command << ":\n"
          << r.text;
    }
    const auto requests = server.requests();
    EXPECT_EQ(requests.size(), 3u);
    for (const auto& head : requests) {
      EXPECT_NE(head.find("Authorization: Bearer redirect-secret"), std::string::npos) << head;
    }
  }
  ::fcntl(elsewhere, F_SETFL, O_NONBLOCK);
  const int got = ::accept(elsewhere, nullptr, nullptr);
  EXPECT_LT(got, 0) << "hpctl connected to where the redirect pointed";
  if (got >= 0) ::close(got);
  ::close(elsewhere);
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0;
}

// hpctl run writes DATA_DIR/token afresh with mode 0600: an existing file
// does not keep a wider mode, and a symlink in its place is replaced, not
// written through. The spec is refused by the server, so the run stops right
// after the token is written and the embedded server has started.
TEST(HpctlRun, WritesTheTokenFileWithMode0600AndFollowsNoSymlink) {
  const std::string dir = ::testing::TempDir() + "/hpo-hpctl-token-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/bad.yaml") << "name: refused\n";
  auto run = [&](const std::string& data) {
    Out r = Hpctl("run " + dir + "/bad.yaml --data-dir " + data);
    EXPECT_EQ(r.code, 1) << "the server refuses the spec\n" << r.text;
  };
  auto expect_fresh_token = [&](const std::string& data, const std::string& old) {
    const std::string token = data + "/token";
    EXPECT_FALSE(std::filesystem::is_symlink(token));
    EXPECT_TRUE(std::filesystem::is_regular_file(token));
    EXPECT_EQ(ModeOf(token), 0600u) << std::oct << ModeOf(token);
    const std::string text = testing::ReadFile(token);
    EXPECT_FALSE(text.empty());
    EXPECT_NE(text, old);
    for (const auto& entry : std::filesystem::directory_iterator(data)) {
      EXPECT_EQ(entry.path().filename().string().rfind("token.", 0), std::string::npos)
          << "a temporary file was left: " << entry.path();
    }
  };

  // A token file from before, readable by everyone.
  const std::string existing = dir + "/existing";
  std::filesystem::create_directories(existing);
  std::ofstream(existing + "/token") << "old-token";
  ::chmod((existing + "/token").c_str(), 0644);
  run(existing);
  expect_fresh_token(existing, "old-token");

  // A symlink named token, to a file elsewhere and to a file not there yet.
  const std::string linked = dir + "/linked";
  std::filesystem::create_directories(linked);
  std::ofstream(dir + "/target") << "not the token";
  ::chmod((dir + "/target").c_str(), 0644);
  std::filesystem::create_symlink(dir + "/target", linked + "/token");
  run(linked);
  expect_fresh_token(linked, "not the token");
  EXPECT_EQ(testing::ReadFile(dir + "/target"), "not the token") << "written through the symlink";
  EXPECT_EQ(ModeOf(dir + "/target"), 0644u);

  const std::string dangling = dir + "/dangling";
  std::filesystem::create_directories(dangling);
  std::filesystem::create_symlink(dir + "/made-through-the-link", dangling + "/token");
  run(dangling);
  expect_fresh_token(dangling, "");
  EXPECT_FALSE(std::filesystem::exists(dir + "/made-through-the-link"))
      << "created through the symlink";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hpo
