// hpo-worker and hpo-server as real processes: a builtin and a command
// experiment run to completion; a worker started before its server waits
// and connects; SIGTERM lets the running trial finish.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/http_client.h"
#include "testing/files.h"
#include "testing/server_process.h"

namespace hpo {
namespace {

using nlohmann::json;

// Starts hpo-worker with `args`; returns its pid. Output goes to `log`.
pid_t StartWorker(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> argv = {HPO_WORKER_BIN, "--benchmark-seconds", "0.1", "--heartbeat-ms",
                                   "500"};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::Spawn(argv, log);
}

// Waits up to `seconds` for the process to exit; its wait status, or -1.
int WaitFor(pid_t pid, int seconds) {
  const std::optional<int> status = testing::WaitExit(pid, std::chrono::seconds(seconds));
  if (!status) testing::KillAndReap(pid);
  return status.value_or(-1);
}

using hpo::testing::ReadFile;

class WorkerE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/hpo-worker-e2e-" + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  json Get(const std::string& target) {
    HttpClientOptions o;
    o.port = server_->http_port();
    o.token = token_;
    auto r = HttpRequestOnce(o, "GET", target);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? json::parse(r->body, nullptr, false) : json();
  }
  int64_t Create(const std::string& spec) {
    HttpClientOptions o;
    o.port = server_->http_port();
    o.token = token_;
    auto r = HttpRequestOnce(o, "POST", "/api/v1/experiments", spec);
    EXPECT_TRUE(r.ok() && r->status == 201) << (r.ok() ? r->body : r.status().ToString());
    return r.ok() ? json::parse(r->body).value("id", int64_t{0}) : 0;
  }
  void StartServer(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"--store", "sqlite://" + dir_ + "/hpo.db"};
    args.insert(args.end(), extra.begin(), extra.end());
    server_ = std::make_unique<testing::ServerProcess>(HPO_SERVER_BIN, dir_, args);
    ASSERT_TRUE(server_->Start().ok()) << server_->Log();
  }
  std::string Grpc() const { return "127.0.0.1:" + std::to_string(server_->grpc_port()); }

  std::string dir_;
  std::string token_;  // what Get and Create send, for a server started with --token
  std::unique_ptr<testing::ServerProcess> server_;
};

const char* kBuiltin = R"(
name: builtin
objective: {metric: accuracy, direction: maximize}
spaces:
  - name: mlp
    params:
      lr: {type: float, low: 1.0e-3, high: 1.0e-2, log: true}
      width: {type: int, low: 32, high: 64}
system:
  batch_size: {type: int, low: 64, high: 256, log: true}
budget: {max_trials: 2, max_parallel: 1, steps_per_trial: 1}
executor: {builtin: {trainer: fashion-mnist-mlp, args: {max_train_samples: 2000}}}
)";

TEST_F(WorkerE2eTest, BuiltinTrainerRunsAnExperimentThroughTheServer) {
  StartServer();
  const int64_t id = Create(kBuiltin);
  const std::string log = dir_ + "/worker.log";
  const pid_t worker =
      StartWorker({"--server", Grpc(), "--max-trials", "2", "--labels", "pool=cpu,zone=a"}, log);
  const int status = WaitFor(worker, 120);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadFile(log);
  json e = Get("/api/v1/experiments/" + std::to_string(id));
  EXPECT_EQ(e["state"], "completed") << e.dump() << ReadFile(log);
  EXPECT_EQ(e["trials"]["completed"], 2);
  json best = Get("/api/v1/experiments/" + std::to_string(id) + "/best");
  EXPECT_GT(best["final_metrics"]["accuracy"].get<double>(), 0.5);
  EXPECT_GT(best["final_metrics"]["test_accuracy"].get<double>(), 0.5);
  json trial = Get("/api/v1/trials/" + std::to_string(best["id"].get<int64_t>()));
  ASSERT_EQ(trial["measurements"].size(), 1u);
  EXPECT_GT(trial["measurements"][0]["samples_per_sec"].get<double>(), 0);
  EXPECT_EQ(trial["measurements"][0]["system"]["batch_size"], trial["system"]["batch_size"]);
  // The worker stopped after its two trials and said so: it is gone, and
  // listed only with the gone ones.
  EXPECT_TRUE(Get("/api/v1/workers")["workers"].empty());
  json workers = Get("/api/v1/workers?include_gone=true")["workers"];
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0]["state"], "gone");
  EXPECT_EQ(workers[0]["labels"]["pool"], "cpu");
  EXPECT_GT(workers[0]["devices"][0]["benchmark_gflops"].get<double>(), 0);
  EXPECT_GT(workers[0]["devices"][0]["cores"].get<double>(), 0);
  EXPECT_FALSE(workers[0]["devices"][0]["measured"].empty());
}

// A container's environment beside a pod's arguments: --token-file and
// --id-file on the command line win over HPO_TOKEN and HPO_WORKER_INSTANCE
// in the environment (CLI11 once refused the pair as "excludes"), and both
// variables of one setting at once is an error that names them.
TEST_F(WorkerE2eTest, TheCommandLineWinsOverTheEnvironmentAndTwoVariablesForOneSettingAreRefused) {
  const std::string token = "worker-e2e-token";
  StartServer({"--token", token});
  std::ofstream(dir_ + "/token") << token << "\n";
  std::ofstream(dir_ + "/id") << "from-the-file\n";
  ::setenv("HPO_TOKEN", "not-the-token", 1);
  ::setenv("HPO_WORKER_INSTANCE", "from-the-environment", 1);
  const std::string log = dir_ + "/worker.log";
  const pid_t worker = StartWorker(
      {"--server", Grpc(), "--token-file", dir_ + "/token", "--id-file", dir_ + "/id"}, log);
  ::unsetenv("HPO_TOKEN");
  ::unsetenv("HPO_WORKER_INSTANCE");
  HttpClientOptions o;
  o.port = server_->http_port();
  o.token = token;
  json workers;
  for (int i = 0; i < 200 && workers.empty(); ++i) {
    auto r = HttpRequestOnce(o, "GET", "/api/v1/workers");
    if (r.ok() && r->status == 200)
      workers = json::parse(r->body, nullptr, false).value("workers", json::array());
    if (workers.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(worker, SIGKILL);
  WaitFor(worker, 10);
  ASSERT_EQ(workers.size(), 1u) << "the worker did not register with the token from --token-file\n"
                                << ReadFile(log);
  EXPECT_EQ(workers[0]["instance"], "from-the-file");

  ::setenv("HPO_TOKEN", token.c_str(), 1);
  ::setenv("HPO_TOKEN_FILE", (dir_ + "/token").c_str(), 1);
  const std::string refused_log = dir_ + "/refused.log";
  const pid_t refused = StartWorker({"--server", Grpc()}, refused_log);
  ::unsetenv("HPO_TOKEN");
  ::unsetenv("HPO_TOKEN_FILE");
  const int status = WaitFor(refused, 30);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << ReadFile(refused_log);
  EXPECT_NE(ReadFile(refused_log).find("HPO_TOKEN and HPO_TOKEN_FILE are both set"),
            std::string::npos)
      << ReadFile(refused_log);
}

// The worker id registered, from a worker's log ("registered as worker N");
// 0 before it registered.
int64_t RegisteredAs(const std::string& log) {
  const std::string text = ReadFile(log);
  const std::string key = "registered as worker ";
  const auto at = text.rfind(key);
  return at == std::string::npos ? 0 : std::atoll(text.c_str() + at + key.size());
}

// Polls (every 100 ms, up to a minute) until `done` holds.
bool Eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 600 && !done(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return done();
}

// The id file keeps the identity secret the server issues, so the worker,
// restarted, is the same worker at once. A copy of the file without the
// secret (one an older hpo-worker wrote, or someone's who read the instance
// off GET /api/v1/workers) is refused while that worker is live, saying
// why, and is registered as a new worker once that one stopped: it never
// gets the worker's id.
TEST_F(WorkerE2eTest, TheIdFileKeepsTheIdentitySecretSoOnlyTheWorkerItselfComesBackUnderItsId) {
  StartServer({"--lease-timeout", "2"});
  const std::string id_file = dir_ + "/id";
  std::ofstream(id_file) << "pod-e2e\n";  // as an older hpo-worker wrote it: the instance alone
  auto lines = [](const std::string& path) {
    std::vector<std::string> out;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  };
  const std::vector<std::string> worker_args = {"--server", Grpc(),      "--device",
                                                "cpu",      "--id-file", id_file};
  const std::string first_log = dir_ + "/first.log";
  pid_t worker = StartWorker(worker_args, first_log);
  ASSERT_TRUE(Eventually([&] { return lines(id_file).size() == 2; })) << ReadFile(first_log);
  const int64_t id = RegisteredAs(first_log);
  ASSERT_GT(id, 0) << ReadFile(first_log);
  EXPECT_EQ(lines(id_file)[0], "pod-e2e");
  const std::string secret = lines(id_file)[1];
  EXPECT_EQ(secret.size(), 64u);
  EXPECT_EQ(ReadFile(first_log).find(secret), std::string::npos) << "the secret was logged";
  const auto perms = std::filesystem::status(id_file).permissions();
  EXPECT_EQ(perms & (std::filesystem::perms::group_all | std::filesystem::perms::others_all),
            std::filesystem::perms::none)
      << "the id file is readable by others";
  kill(worker, SIGKILL);
  WaitFor(worker, 10);

  // Restarted at once, while its old registration is live: the same worker.
  const std::string second_log = dir_ + "/second.log";
  worker = StartWorker(worker_args, second_log);
  ASSERT_TRUE(Eventually([&] { return RegisteredAs(second_log) != 0; })) << ReadFile(second_log);
  EXPECT_EQ(RegisteredAs(second_log), id);
  EXPECT_EQ(lines(id_file)[1], secret);

  // The instance without the secret, while the worker runs: refused.
  const std::string copy = dir_ + "/copy";
  std::ofstream(copy) << "pod-e2e\n";
  const std::string copy_log = dir_ + "/copy.log";
  const pid_t other =
      StartWorker({"--server", Grpc(), "--device", "cpu", "--id-file", copy}, copy_log);
  ASSERT_TRUE(Eventually([&] {
    return ReadFile(copy_log).find("identity secret") != std::string::npos;
  })) << ReadFile(copy_log);
  EXPECT_NE(ReadFile(copy_log).find("instance 'pod-e2e' is worker " + std::to_string(id)),
            std::string::npos)
      << ReadFile(copy_log);
  EXPECT_EQ(RegisteredAs(copy_log), 0) << ReadFile(copy_log);
  EXPECT_EQ(Get("/api/v1/workers")["workers"].size(), 1u);

  // The worker stops; once the server no longer counts it live, the copy
  // registers, as a new worker with its own secret.
  kill(worker, SIGKILL);
  WaitFor(worker, 10);
  ASSERT_TRUE(Eventually([&] { return RegisteredAs(copy_log) != 0; })) << ReadFile(copy_log);
  EXPECT_NE(RegisteredAs(copy_log), id);
  ASSERT_TRUE(Eventually([&] { return lines(copy).size() == 2; }));
  EXPECT_NE(lines(copy)[1], secret);
  kill(other, SIGKILL);
  WaitFor(other, 10);
}

// HPO_SERVER was the REST address for hpctl and the gRPC one for the
// worker: the worker reads HPO_GRPC_SERVER now, which wins over the old name
// (set here to a REST address, as a shell for hpctl would have it), and the
// old name alone still works, with a one-line warning.
TEST_F(WorkerE2eTest, TheGrpcAddressComesFromHpoGrpcServerAndTheOldNameStillWorks) {
  StartServer();
  const std::string rest = "127.0.0.1:" + std::to_string(server_->http_port());
  struct Case {
    const char* grpc_server;
    const char* old_server;
    bool warns;
  };
  const std::string grpc = Grpc();
  for (const Case c :
       {Case{grpc.c_str(), rest.c_str(), false}, Case{nullptr, grpc.c_str(), true}}) {
    SCOPED_TRACE(c.grpc_server ? "HPO_GRPC_SERVER" : "HPO_SERVER alone");
    if (c.grpc_server) ::setenv("HPO_GRPC_SERVER", c.grpc_server, 1);
    ::setenv("HPO_SERVER", c.old_server, 1);
    const std::string log = dir_ + "/worker-" + (c.warns ? "old" : "new") + ".log";
    const pid_t worker = StartWorker({"--device", "cpu"}, log);
    ::unsetenv("HPO_GRPC_SERVER");
    ::unsetenv("HPO_SERVER");
    const bool registered = Eventually([&] { return RegisteredAs(log) != 0; });
    kill(worker, SIGKILL);
    WaitFor(worker, 10);
    EXPECT_TRUE(registered) << ReadFile(log);
    const std::string warning =
        "hpo-worker: warning: HPO_SERVER is deprecated (hpo-worker reads it as the gRPC address, "
        "hpctl "
        "as the REST one): set HPO_GRPC_SERVER instead\n";
    EXPECT_EQ(ReadFile(log).find(warning) != std::string::npos, c.warns) << ReadFile(log);
  }
}

TEST_F(WorkerE2eTest, CommandExecutorRunsTheUsersProgram) {
  StartServer();
  const std::string script = dir_ + "/train.sh";
  std::ofstream(script) << "#!/bin/sh\n"
                           "for step in 1 2 3; do\n"
                           "  echo \"hpo: step=$step loss=$(echo \"$1 $step\" | awk '{print "
                           "($1-0.3)^2 + 1/$2}') samples_per_sec=50\"\n"
                           "done\n";
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  const int64_t id = Create(R"({"name": "cmd", "objective": {"metric": "loss"},
      "spaces": [{"name": "s", "params": {"x": {"type": "float", "low": 0, "high": 1}}}],
      "early_stopping": {"rule": "none"},
      "budget": {"max_trials": 3, "max_parallel": 1, "steps_per_trial": 3},
      "executor": {"command": {"argv": [")" +
                            script + R"(", "{x}"], "timeout_s": 30}}})");
  const std::string log = dir_ + "/worker.log";
  const pid_t worker = StartWorker({"--server", Grpc(), "--max-trials", "3"}, log);
  const int status = WaitFor(worker, 60);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadFile(log);
  json e = Get("/api/v1/experiments/" + std::to_string(id));
  EXPECT_EQ(e["state"], "completed") << e.dump() << ReadFile(log);
  json trials = Get("/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"];
  ASSERT_EQ(trials.size(), 3u);
  for (const auto& t : trials) {
    const double x = t["params"]["x"];
    EXPECT_NEAR(t["final_metrics"]["loss"].get<double>(), (x - 0.3) * (x - 0.3) + 1.0 / 3, 1e-4)
        << t.dump();
  }
}

// A program that prints 20,000 metric lines on a 3-step trial: the worker
// sends the trial's 3 steps and no more (the server would refuse the rest,
// and a refused report stops the trial), the program runs to its end, and
// the trial completes with 3 stored steps, not 20,000.
TEST_F(WorkerE2eTest, AProgramsLinesPastTheTrialsStepsAreNeitherSentNorStored) {
  StartServer();
  const std::string script = dir_ + "/chatty.sh";
  std::ofstream(script) << "#!/bin/sh\n"
                           "i=1\n"
                           "while [ $i -le 20000 ]; do echo \"hpo: loss=$i\"; i=$((i+1)); done\n"
                           "touch \"$0.finished\"\n";
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  const int64_t id = Create(R"({"name": "chatty", "objective": {"metric": "loss"},
      "spaces": [{"name": "s", "params": {"x": {"type": "float", "low": 0, "high": 1}}}],
      "budget": {"max_trials": 1, "max_parallel": 1, "steps_per_trial": 3},
      "executor": {"command": {"argv": [")" +
                            script + R"("], "timeout_s": 60}}})");
  const std::string log = dir_ + "/worker.log";
  const pid_t worker = StartWorker({"--server", Grpc(), "--max-trials", "1"}, log);
  const int status = WaitFor(worker, 90);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadFile(log);
  EXPECT_TRUE(std::filesystem::exists(script + ".finished")) << "the program was stopped";
  json trials = Get("/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"];
  ASSERT_EQ(trials.size(), 1u);
  json trial = Get("/api/v1/trials/" + std::to_string(trials[0]["id"].get<int64_t>()));
  EXPECT_EQ(trial["state"], "completed") << trial.dump() << ReadFile(log);
  ASSERT_EQ(trial["measurements"].size(), 3u);
  EXPECT_EQ(trial["measurements"][2]["step"], 3);
  EXPECT_EQ(trial["final_metrics"]["loss"], 3);
  EXPECT_EQ(ReadFile(log).find("report refused"), std::string::npos) << ReadFile(log);
}

// A program the worker runs is the worker's user, so it can read what /proc
// shows of its parent: /proc/$PPID/environ and /proc/$PPID/cmdline. Neither
// holds the token, whether the worker took it from HPO_TOKEN or from
// --token, and the worker still authenticates with the copy it kept. The
// worker is also not dumpable, which hides its environ from a process of its
// user without CAP_SYS_PTRACE; as root (how these tests usually run) the file
// stays readable, and what is checked is that the bytes are gone from it.
TEST_F(WorkerE2eTest, ACommandProgramCannotReadTheWorkersToken) {
  token_ = "worker-token-that-no-program-may-read";
  StartServer({"--token", token_});
  const std::string script = dir_ + "/peek.sh";
  std::ofstream(script)
      << "#!/bin/sh\n"
         "cat /proc/$PPID/environ > \"$1/environ\" 2>/dev/null; echo $? > \"$1/environ.rc\"\n"
         "cat /proc/$PPID/cmdline > \"$1/cmdline\"\n"
         "echo 'hpo: step=1 loss=1'\n";
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  struct Way {
    const char* name;
    bool in_environment;
  };
  for (const Way way : {Way{"HPO_TOKEN", true}, Way{"--token", false}}) {
    SCOPED_TRACE(way.name);
    const std::string out = dir_ + "/" + (way.in_environment ? "env" : "flag");
    std::filesystem::create_directories(out);
    const int64_t id = Create(R"({"name": "peek", "objective": {"metric": "loss"},
        "spaces": [{"name": "s", "params": {"x": {"type": "float", "low": 0, "high": 1}}}],
        "budget": {"max_trials": 1, "max_parallel": 1, "steps_per_trial": 1},
        "executor": {"command": {"argv": [")" +
                              script + R"(", ")" + out + R"("], "timeout_s": 30}}})");
    // A variable of the worker's that is no secret: it shows the program read the real environ.
    ::setenv("HPO_E2E_MARKER", "worker-environment", 1);
    std::vector<std::string> args = {"--server", Grpc(), "--max-trials", "1"};
    if (way.in_environment) {
      ::setenv("HPO_TOKEN", token_.c_str(), 1);
    } else {
      args.insert(args.end(), {"--token", token_});
    }
    const std::string log = out + "/worker.log";
    const pid_t worker = StartWorker(args, log);
    ::unsetenv("HPO_TOKEN");
    ::unsetenv("HPO_E2E_MARKER");
    const int status = WaitFor(worker, 60);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadFile(log);
    EXPECT_EQ(Get("/api/v1/experiments/" + std::to_string(id))["trials"]["completed"], 1)
        << ReadFile(log);

    const std::string environ_text = ReadFile(out + "/environ");
    if (geteuid() == 0) {
      ASSERT_EQ(ReadFile(out + "/environ.rc"), "0\n");
      EXPECT_NE(environ_text.find("HPO_E2E_MARKER=worker-environment"), std::string::npos)
          << "the program did not read the worker's environment";
    } else {
      EXPECT_NE(ReadFile(out + "/environ.rc"), "0\n")
          << "a non-dumpable worker's environ is root's";
    }
    EXPECT_EQ(environ_text.find(token_), std::string::npos)
        << "the token is in /proc/$PPID/environ";
    EXPECT_EQ(environ_text.find("HPO_TOKEN="), std::string::npos);
    const std::string cmdline = ReadFile(out + "/cmdline");
    EXPECT_NE(cmdline.find("--max-trials"), std::string::npos)
        << "the program did not read the worker's cmdline";
    EXPECT_EQ(cmdline.find(token_), std::string::npos) << "the token is in /proc/$PPID/cmdline";
  }
}

TEST_F(WorkerE2eTest, AWorkerWaitsForItsServerAndFinishesItsTrialOnSigterm) {
  // Reserve a port for the server by starting and stopping one.
  StartServer();
  const uint16_t grpc_port = server_->grpc_port();
  server_->Stop(SIGTERM);
  const std::string log = dir_ + "/worker.log";
  const pid_t worker = StartWorker({"--server", "127.0.0.1:" + std::to_string(grpc_port)}, log);
  // Start the server only once the worker has found it missing.
  for (int i = 0; i < 600 && ReadFile(log).find("retrying") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  StartServer({"--grpc", "127.0.0.1:" + std::to_string(grpc_port)});
  std::string spec = kBuiltin;
  spec.replace(spec.find("max_trials: 2"), 13, "max_trials: 5");
  spec.replace(spec.find("steps_per_trial: 1"), 18, "steps_per_trial: 4");
  spec.replace(spec.find("max_train_samples: 2000"), 23, "max_train_samples: 9000");
  const int64_t id = Create(spec);
  // Wait until a trial runs, then ask the worker to stop.
  for (int i = 0;
       i < 600 && Get("/api/v1/experiments/" + std::to_string(id))["trials"]["running"] == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // Trials take seconds here, so the one running now is the one SIGTERM
  // interrupts.
  const int64_t completed_before =
      Get("/api/v1/experiments/" + std::to_string(id))["trials"]["completed"];
  kill(worker, SIGTERM);
  const int status = WaitFor(worker, 120);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadFile(log);
  const std::string out = ReadFile(log);
  EXPECT_NE(out.find("retrying"), std::string::npos) << out;
  json e = Get("/api/v1/experiments/" + std::to_string(id));
  EXPECT_EQ(e["trials"]["completed"], completed_before + 1)
      << "the running trial finished, no new one started\n"
      << out;
  EXPECT_EQ(e["trials"]["running"], 0);
  // It said it leaves (Leave): gone now, not after the 60 s lease timeout.
  EXPECT_NE(out.find("left the fleet"), std::string::npos) << out;
  EXPECT_TRUE(Get("/api/v1/workers")["workers"].empty())
      << "the stopped worker is still listed live";
  json all = Get("/api/v1/workers?include_gone=true")["workers"];
  ASSERT_EQ(all.size(), 1u) << all.dump();
  EXPECT_EQ(all[0]["state"], "gone");
}

// Promotion-type ASHA end to end, through the real lease path: real workers
// run examples/train_example.py (which keeps the checkpoint contract); trials
// pause at the first rung with their checkpoints, the best are resumed -
// on whichever worker the policy picks - from where they stopped, the rest
// are pruned when the budget is spent. Users name trials by number: every
// trial event on /api/v1/events carries it beside the id, and so does every
// worker log line about a trial. A trial paused, then pruned, says the
// attempt it ran (1), not 0.
TEST_F(WorkerE2eTest, PromotedTrialsResumeFromTheirCheckpointsOnRealWorkers) {
  StartServer();
  std::vector<std::pair<std::string, json>> events;
  std::thread listener([&] {
    HttpClientOptions o;
    o.port = server_->http_port();
    o.timeout = std::chrono::milliseconds(150'000);
    Status s =
        ReadEventStream(o, "/api/v1/events", [&](const std::string& type, const std::string& data) {
          events.emplace_back(type, json::parse(data, nullptr, false));
          return type != "experiment.finished";
        });
    EXPECT_TRUE(s.ok()) << s;
  });
  std::this_thread::sleep_for(
      std::chrono::milliseconds(500));  // subscribed before anything happens
  const int64_t id = Create(std::string(R"({"name": "promote", "objective": {"metric": "loss"},
      "spaces": [{"name": "logreg", "params": {"lr": {"type": "float", "low": 0.001, "high": 1.0, "log": true},
                                             "width": {"type": "int", "low": 2, "high": 16}}}],
      "early_stopping": {"rule": "asha", "type": "promotion", "min_resource": 1, "reduction_factor": 3},
      "budget": {"max_trials": 6, "max_parallel": 2, "steps_per_trial": 3},
      "executor": {"command": {"argv": ["python3", ")") +
                            HPO_SOURCE_DIR + R"(/examples/train_example.py",
                                        "--lr={lr}", "--width={width}"], "timeout_s": 60, "checkpoints": true}}})");
  std::vector<pid_t> workers;
  for (int i = 0; i < 2; ++i) {
    workers.push_back(
        StartWorker({"--server", Grpc(), "--scratch-dir", dir_ + "/scratch-" + std::to_string(i)},
                    dir_ + "/worker-" + std::to_string(i) + ".log"));
  }
  json e;
  for (int i = 0; i < 600; ++i) {  // 120 s at most
    e = Get("/api/v1/experiments/" + std::to_string(id));
    if (e.value("state", "") != "running") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  for (pid_t w : workers) {
    kill(w, SIGTERM);
    WaitFor(w, 30);
  }
  listener.join();
  const std::string logs = ReadFile(dir_ + "/worker-0.log") + ReadFile(dir_ + "/worker-1.log");
  ASSERT_EQ(e["state"], "completed") << e.dump() << logs;
  EXPECT_EQ(e["trials"]["total"], 6);
  EXPECT_EQ(e["trials"]["paused"], 0) << "paused trials end with the experiment";
  EXPECT_GE(e["trials"]["completed"].get<int>(), 1) << "at least one trial was promoted to the end";
  EXPECT_GE(e["trials"]["pruned"].get<int>(), 1) << "some were never promoted";
  json trials = Get("/api/v1/experiments/" + std::to_string(id) + "/trials")["trials"];
  int promoted = 0;
  for (const auto& t : trials) {
    if (t["state"] != "completed") continue;
    EXPECT_GE(t["level"].get<int>(), 1) << t.dump();
    json full = Get("/api/v1/trials/" + std::to_string(t["id"].get<int64_t>()));
    ASSERT_EQ(full["measurements"].size(), 3u) << full.dump();
    // Resumed from its checkpoint: step 1 was kept from before the pause.
    EXPECT_EQ(full["resume_step"], 1) << full.dump();
    ++promoted;
  }
  EXPECT_GE(promoted, 1);
  EXPECT_NE(logs.find("resuming after step 1"), std::string::npos) << logs;

  std::map<int64_t, int64_t> number_of;  // trial id -> number
  for (const auto& t : trials) {
    number_of[t["id"].get<int64_t>()] = t["number"].get<int64_t>();
    EXPECT_EQ(t["attempt"], 1) << "every trial ran each segment on its first lease: " << t.dump();
    const std::string name = "trial " + std::to_string(t["number"].get<int64_t>()) +
                             " of experiment " + std::to_string(id) + " (id " +
                             std::to_string(t["id"].get<int64_t>()) + ")";
    EXPECT_NE(logs.find(name + " on cpu (space logreg, attempt 1)"), std::string::npos)
        << "the worker names the trial by its number\n"
        << logs;
  }
  std::set<std::string> kinds;
  for (const auto& [type, data] : events) {
    if (!data.is_object() || !data.contains("trial_id")) continue;
    kinds.insert(type);
    ASSERT_TRUE(number_of.count(data["trial_id"].get<int64_t>())) << type << " " << data.dump();
    EXPECT_EQ(data["number"], number_of[data["trial_id"].get<int64_t>()])
        << type << " " << data.dump();
  }
  for (const char* kind :
       {"trial.created", "trial.reported", "trial.paused", "trial.resumed", "trial.finished"}) {
    EXPECT_TRUE(kinds.count(kind)) << "no " << kind << " event arrived";
  }
  EXPECT_EQ(logs.find("restart"), std::string::npos) << "a checkpoint was unusable:\n" << logs;
}

}  // namespace
}  // namespace hpo
