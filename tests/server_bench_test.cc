// A smoke run of bench/server_bench with tiny counts: it prints one line per
// measurement with positive figures, no call failed, and the trials the
// clients were told were completed are completed in the store. Never how
// fast: the figures only have to be there.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <sstream>

#include "server/store/store.h"
#include "testing/harness.h"
#include "testing/store_backends.h"

namespace hpo {
namespace {

using Line = std::map<std::string, std::string>;

class ServerBenchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = ::testing::TempDir() + "hpo-sbench-" + std::to_string(getpid()) + "-" + info->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  // Runs server_bench with `args` (and a scratch --dir); its bench= lines,
  // each as key -> value. Fails the test on a non-zero exit.
  std::vector<Line> Run(std::vector<std::string> args) {
    args.insert(args.begin(), HPO_SERVER_BENCH_BIN);
    args.insert(args.end(), {"--dir", dir_ + "/run"});
    const std::string log = dir_ + "/server_bench.log";
    const pid_t pid = testing::Spawn(args, log);
    const auto status = testing::WaitExit(pid, std::chrono::seconds(240));
    if (!status) testing::KillAndReap(pid);
    const std::string out = testing::ReadFile(log);
    EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << out;
    std::vector<Line> lines;
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);) {
      if (l.rfind("bench=", 0) != 0) continue;
      Line fields;
      std::istringstream words(l);
      for (std::string w; words >> w;) {
        const size_t eq = w.find('=');
        if (eq != std::string::npos) fields[w.substr(0, eq)] = w.substr(eq + 1);
      }
      fields["line"] = l;
      lines.push_back(fields);
    }
    return lines;
  }

  // A line of hpo-server's own (not a peer's) as the README describes it.
  static void ExpectServerLine(const Line& l) {
    SCOPED_TRACE(l.at("line"));
    const bool rest = l.count("rest_clients") > 0;
    const char* first = rest ? "suggest" : "lease";
    for (const std::string key :
         {"trials_per_s", "cpu_ms_per_trial", "report_p50_ms", "report_p99_ms", "complete_p50_ms",
          "complete_p99_ms", "client_cpu_ms_per_trial"}) {
      ASSERT_TRUE(l.count(key)) << key << " is missing";
      EXPECT_GT(std::stod(l.at(key)), 0) << key;
    }
    for (const std::string suffix : {"_p50_ms", "_p99_ms"}) {
      ASSERT_TRUE(l.count(first + suffix)) << first + suffix << " is missing";
      EXPECT_GT(std::stod(l.at(first + suffix)), 0) << first + suffix;
    }
    EXPECT_EQ(l.at("errors"), "0");
    EXPECT_GT(std::stoll(l.at("acked_completed")), 0);
    EXPECT_EQ(l.at("store_completed"), l.at("acked_completed"))
        << "completions the clients were told of are not in the store";
    EXPECT_GE(std::stoll(l.at("acked_completed")), std::stoll(l.at("trials")));
  }

  std::string dir_;
};

const std::vector<std::string> kTiny = {
    "--workers",          "2",   "--rest-clients",          "2",
    "--seconds",          "1.5", "--warmup-seconds",        "0.5",
    "--min-trials",       "5",   "--existing-trials",       "30",
    "--existing-workers", "2",   "--existing-rest-clients", "1"};

TEST_F(ServerBenchTest, SqlitePrintsEveryLineAndTheStoreHasTheCompletions) {
  std::vector<std::string> args = kTiny;
  args.insert(args.end(), {"--stores", "sqlite", "--existing-stores", "sqlite"});
  const auto lines = Run(args);
  ASSERT_EQ(lines.size(), 4u) << "gRPC, REST and two existing-trials lines";
  EXPECT_EQ(lines[0].at("workers"), "2");
  EXPECT_EQ(lines[1].at("rest_clients"), "2");
  EXPECT_EQ(lines[2].at("existing_trials"), "30");
  EXPECT_EQ(lines[2].at("workers"), "2");
  EXPECT_EQ(lines[3].at("existing_trials"), "30");
  EXPECT_EQ(lines[3].at("rest_clients"), "1");
  for (const auto& l : lines) {
    EXPECT_EQ(l.at("bench"), "server");
    EXPECT_EQ(l.at("store"), "sqlite");
    EXPECT_EQ(l.at("sampler"), "tpe");
    ExpectServerLine(l);
  }
  // The bench's own count, checked once more from the file it leaves: the
  // gRPC line's experiment (the first in its database).
  auto st = store::OpenStore("sqlite://" + dir_ + "/run/sqlite-grpc2/hpo.db");
  ASSERT_TRUE(st.ok()) << st.status();
  auto counts = (*st)->CountTrials(1);
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(std::to_string(counts->completed), lines[0].at("acked_completed"));
}

TEST_F(ServerBenchTest, PostgresPrintsEveryLineWithThePeers) {
  HPO_REQUIRE_BACKEND(testing::PostgresBackend);
  std::vector<std::string> args = kTiny;
  args.insert(args.end(), {"--stores", "postgresql"});
  // The peers need Debian's Optuna with psycopg2; without them the lines of
  // hpo-server are still checked.
  const bool peers =
      testing::WaitExit(testing::Spawn({"/usr/bin/python3", "-c", "import optuna, psycopg2"},
                                       dir_ + "/import.log"),
                        std::chrono::seconds(60))
          .value_or(1) == 0;
  if (peers)
    args.insert(args.end(), {"--with-peers", "--peer-seconds", "2", "--peer-processes", "2"});
  const auto lines = Run(args);
  ASSERT_EQ(lines.size(), peers ? 6u : 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(lines[i].at("store"), "postgresql");
    ExpectServerLine(lines[i]);
    EXPECT_GT(std::stod(lines[i].at("pg_cpu_ms_per_trial")), 0);
  }
  if (!peers)
    GTEST_SKIP() << "no python3-optuna or python3-psycopg2 for /usr/bin/python3: peers not run";
  for (size_t i = 4; i < 6; ++i) {
    SCOPED_TRACE(lines[i].at("line"));
    EXPECT_EQ(lines[i].at("peer"), "optuna-3.1");
    EXPECT_EQ(lines[i].at("sampler"), i == 4 ? "random" : "tpe");
    EXPECT_EQ(lines[i].at("workers"), "2");
    EXPECT_GT(std::stod(lines[i].at("trials_per_s")), 0);
  }
}

}  // namespace
}  // namespace hpo
