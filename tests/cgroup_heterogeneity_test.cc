// Real heterogeneity on one machine: two workers in CPU cgroups (1.0 and
// 0.25 CPU) report different device classes and measured speeds. Needs a
// writable cgroup (root, cgroup v1 cpu controller or v2 cpu.max); skips
// with a message where there is none.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/http_client.h"
#include "testing/server_process.h"

namespace hpo {
namespace {

using nlohmann::json;

// Starts hpo-worker inside `cgroup`.
pid_t StartWorkerIn(const testing::CpuCgroup& cgroup, const std::vector<std::string>& args,
                    const std::string& log) {
  std::vector<std::string> argv = {HPO_WORKER_BIN, "--benchmark-seconds", "0.5"};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::Spawn(argv, log, [&] { return cgroup.Enter(); });
}

TEST(CgroupHeterogeneity, ThrottledWorkersReportSlowerDevicesAndSpeeds) {
  const std::string tag = std::to_string(getpid());
  testing::CpuCgroup fast("hpo-test-fast-" + tag, 1.0), slow("hpo-test-slow-" + tag, 0.25);
  if (fast.path().empty() || slow.path().empty()) {
    GTEST_SKIP() << "no writable CPU cgroup here (needs root and cgroup v1 cpu or v2 cpu.max)";
  }
  const std::string dir = ::testing::TempDir() + "/hpo-cgroup-" + tag;
  std::filesystem::create_directories(dir);
  testing::ServerProcess server(HPO_SERVER_BIN, dir, {"--store", "sqlite://" + dir + "/hpo.db"});
  ASSERT_TRUE(server.Start().ok()) << server.Log();
  HttpClientOptions http;
  http.port = server.http_port();
  auto created = HttpRequestOnce(http, "POST", "/api/v1/experiments", R"(
name: heterogeneous
objective: {metric: accuracy, direction: maximize}
spaces:
  - name: mlp
    params: {lr: {type: float, low: 1.0e-3, high: 1.0e-2, log: true}}
system:
  threads: {type: int, low: 1, high: 2}
budget: {max_trials: 4, max_parallel: 2, steps_per_trial: 2}
executor: {builtin: {trainer: fashion-mnist-mlp, args: {max_train_samples: 20000}}}
)");
  ASSERT_TRUE(created.ok() && created->status == 201) << (created.ok() ? created->body : "");
  const std::string grpc = "127.0.0.1:" + std::to_string(server.grpc_port());
  const pid_t a = StartWorkerIn(
      fast, {"--server", grpc, "--max-trials", "2", "--labels", "cg=fast"}, dir + "/fast.log");
  const pid_t b = StartWorkerIn(
      slow, {"--server", grpc, "--max-trials", "2", "--labels", "cg=slow"}, dir + "/slow.log");
  for (pid_t p : {a, b}) {
    int status = 0;
    waitpid(p, &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "worker exit status " << status;
  }
  // Both stopped after their trials and left: listed with the gone ones.
  auto r = HttpRequestOnce(http, "GET", "/api/v1/workers?include_gone=true");
  ASSERT_TRUE(r.ok());
  json workers = json::parse(r->body)["workers"];
  ASSERT_EQ(workers.size(), 2u) << r->body;
  std::map<std::string, json> by_label;
  for (const auto& w : workers) by_label[w["labels"]["cg"]] = w["devices"][0];
  const json& f = by_label["fast"];
  const json& s = by_label["slow"];
  EXPECT_DOUBLE_EQ(f["cores"].get<double>(), 1.0) << f.dump();
  EXPECT_DOUBLE_EQ(s["cores"].get<double>(), 0.25) << s.dump();
  EXPECT_NE(f["device_class"], s["device_class"]) << "classes come from measured capacity";
  ASSERT_FALSE(f["measured"].empty());
  ASSERT_FALSE(s["measured"].empty());
  const double fast_sps = f["measured"][0]["samples_per_sec"],
               slow_sps = s["measured"][0]["samples_per_sec"];
  // A 4x quota difference shows as a clear speed difference (not a timing
  // bound on either worker).
  EXPECT_GT(fast_sps, 1.5 * slow_sps) << "fast " << fast_sps << " slow " << slow_sps;
  EXPECT_GT(f["benchmark_gflops"].get<double>(), s["benchmark_gflops"].get<double>());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hpo
