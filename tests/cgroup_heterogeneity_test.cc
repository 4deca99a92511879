// Real heterogeneity on one machine: two workers in CPU cgroups (1.0 and
// 0.25 CPU) report different device classes and measured speeds. Needs a
// writable cgroup (root, cgroup v1 cpu controller or v2 cpu.max); skips
// with a message where there is none.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "common/http_client.h"
#include "testing/server_process.h"

namespace hpo {
namespace {

using nlohmann::json;

// A CPU cgroup with a quota, removed on destruction.
class CpuCgroup {
 public:
  // Creates it; empty path() when this machine offers no writable cgroup.
  CpuCgroup(const std::string& name, double cpus) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::exists("/sys/fs/cgroup/cgroup.controllers")) {  // v2
      const std::string dir = "/sys/fs/cgroup/" + name;
      if (fs::create_directory(dir, ec) && Write(dir + "/cpu.max", std::to_string(int(cpus * 100000)) + " 100000")) {
        path_ = dir;
      }
    } else if (fs::exists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")) {  // v1
      const std::string dir = "/sys/fs/cgroup/cpu/" + name;
      if (fs::create_directory(dir, ec) && Write(dir + "/cpu.cfs_period_us", "100000") &&
          Write(dir + "/cpu.cfs_quota_us", std::to_string(int(cpus * 100000)))) {
        path_ = dir;
      }
    }
  }
  ~CpuCgroup() {
    if (!path_.empty()) ::rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }

  static bool Write(const std::string& file, const std::string& value) {
    const int fd = ::open(file.c_str(), O_WRONLY);
    if (fd < 0) return false;
    const bool ok = ::write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
    ::close(fd);
    return ok;
  }

 private:
  std::string path_;
};

// Starts hpo-worker inside `cgroup`.
pid_t StartWorkerIn(const std::string& cgroup, const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> argv = {HPO_WORKER_BIN, "--benchmark-seconds", "0.5"};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::Spawn(argv, log, [&] {
    return CpuCgroup::Write(cgroup + "/cgroup.procs", std::to_string(getpid()));
  });
}

TEST(CgroupHeterogeneity, ThrottledWorkersReportSlowerDevicesAndSpeeds) {
  const std::string tag = std::to_string(getpid());
  CpuCgroup fast("hpo-test-fast-" + tag, 1.0), slow("hpo-test-slow-" + tag, 0.25);
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
  const pid_t a = StartWorkerIn(fast.path(), {"--server", grpc, "--max-trials", "2", "--labels", "cg=fast"},
                                dir + "/fast.log");
  const pid_t b = StartWorkerIn(slow.path(), {"--server", grpc, "--max-trials", "2", "--labels", "cg=slow"},
                                dir + "/slow.log");
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
  const double fast_sps = f["measured"][0]["samples_per_sec"], slow_sps = s["measured"][0]["samples_per_sec"];
  // A 4x quota difference shows as a clear speed difference (not a timing
  // bound on either worker).
  EXPECT_GT(fast_sps, 1.5 * slow_sps) << "fast " << fast_sps << " slow " << slow_sps;
  EXPECT_GT(f["benchmark_gflops"].get<double>(), s["benchmark_gflops"].get<double>());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hpo
