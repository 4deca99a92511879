// The hpo-server binary end to end: REST and gRPC on free ports, a restart
// in the middle of an experiment, SIGTERM draining, /metrics by promtool.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "common/http_client.h"
#include "hpo/v1/worker.grpc.pb.h"
#include "testing/server_process.h"
#include "testing/store_backends.h"

namespace hpo {
namespace {

using nlohmann::json;

const char* kWorkerSpec = R"(
name: e2e
objective: {metric: loss, direction: minimize}
spaces:
  - name: a
    params: {x: {type: float, low: -1, high: 1}}
early_stopping: {rule: none}
budget: {max_trials: 6, max_parallel: 2, steps_per_trial: 3}
executor: {builtin: {trainer: fashion-mnist-mlp}}
)";

class ServerE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/hpo-e2e-" + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
    server_ = std::make_unique<testing::ServerProcess>(
        HPO_SERVER_BIN, dir_,
        std::vector<std::string>{"--store", "sqlite://" + dir_ + "/hpo.db", "--token", "tok"});
    ASSERT_TRUE(server_->Start().ok()) << server_->Log();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  HttpClientOptions Http() const {
    HttpClientOptions o;
    o.port = server_->http_port();
    o.token = "tok";
    return o;
  }
  std::unique_ptr<v1::WorkerService::Stub> Worker() const {
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->grpc_port()),
                                       grpc::InsecureChannelCredentials());
    return v1::WorkerService::NewStub(channel);
  }
  static void Auth(grpc::ClientContext& ctx) {
    ctx.AddMetadata("authorization", "Bearer tok");
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  }

  std::string dir_;
  std::unique_ptr<testing::ServerProcess> server_;
};

TEST_F(ServerE2eTest, AnExperimentSurvivesARestartWithNoLostOrRepeatedTrial) {
  auto created = HttpRequestOnce(Http(), "POST", "/api/v1/experiments", kWorkerSpec);
  ASSERT_TRUE(created.ok());
  ASSERT_EQ(created->status, 201) << created->body;
  const int64_t exp_id = json::parse(created->body)["id"];

  v1::RegisterRequest reg;
  reg.set_host("e2e-host");
  auto* dev = reg.add_devices();
  dev->set_kind(v1::DEVICE_KIND_CPU);
  dev->set_name("test cpu");
  dev->set_cores(1);
  v1::RegisterResponse registered;
  {
    grpc::ClientContext ctx;
    Auth(ctx);
    ASSERT_TRUE(Worker()->Register(&ctx, reg, &registered).ok());
  }
  std::set<int64_t> seen;
  // Runs one trial from lease to completion; stops after `steps` steps
  // when `steps` < 3 (the server is restarted in the middle).
  auto lease = [&](v1::Trial* out) {
    grpc::ClientContext ctx;
    Auth(ctx);
    v1::LeaseRequest req;
    req.set_worker_id(registered.worker_id());
    req.set_session(registered.session());
    req.set_device_id(registered.device_ids(0));
    v1::LeaseResponse res;
    grpc::Status s = Worker()->Lease(&ctx, req, &res);
    EXPECT_TRUE(s.ok()) << s.error_message();
    if (!res.has_trial()) return false;
    *out = res.trial();
    return true;
  };
  auto report = [&](const v1::Trial& t, int step) {
    grpc::ClientContext ctx;
    Auth(ctx);
    v1::ReportRequest req;
    req.set_worker_id(registered.worker_id());
    req.set_session(registered.session());
    req.set_trial_id(t.trial_id());
    req.set_step(step);
    const double x = json::parse(t.params_json())["x"];
    (*req.mutable_metrics())["loss"] = x * x + 1.0 / (step + 1);
    req.set_samples_per_sec(100 + step);
    req.set_device_id(registered.device_ids(0));
    (*req.mutable_system()->mutable_values())["threads"] = "2";
    v1::ReportResponse res;
    grpc::Status s = Worker()->Report(&ctx, req, &res);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return res.decision();
  };
  auto complete = [&](const v1::Trial& t) {
    grpc::ClientContext ctx;
    Auth(ctx);
    v1::CompleteRequest req;
    req.set_worker_id(registered.worker_id());
    req.set_session(registered.session());
    req.set_trial_id(t.trial_id());
    v1::CompleteResponse res;
    grpc::Status s = Worker()->Complete(&ctx, req, &res);
    EXPECT_TRUE(s.ok()) << s.error_message();
  };

  for (int i = 0; i < 2; ++i) {
    v1::Trial t;
    ASSERT_TRUE(lease(&t));
    EXPECT_TRUE(seen.insert(t.trial_id()).second);
    for (int step = 0; step < 3; ++step) report(t, step);
    complete(t);
  }
  v1::Trial inflight;
  ASSERT_TRUE(lease(&inflight));
  seen.insert(inflight.trial_id());
  report(inflight, 0);
  {
    auto w = HttpRequestOnce(Http(), "GET", "/api/v1/workers");
    ASSERT_TRUE(w.ok());
    const json current = json::parse(w->body)["workers"][0]["current_trials"];
    ASSERT_EQ(current.size(), 1u) << w->body;
    EXPECT_EQ(current[0]["trial_id"], inflight.trial_id());
    EXPECT_EQ(current[0]["state"], "running");
  }

  // Drain and restart: SIGTERM exits cleanly and the store keeps everything.
  const int status = server_->Stop(SIGTERM);
  ASSERT_TRUE(WIFEXITED(status)) << server_->Log();
  EXPECT_EQ(WEXITSTATUS(status), 0) << server_->Log();
  EXPECT_NE(server_->Log().find("draining"), std::string::npos);
  ASSERT_TRUE(server_->Start().ok()) << server_->Log();

  // The worker carries on with its lease against the new process.
  EXPECT_EQ(report(inflight, 1), v1::DECISION_CONTINUE);
  report(inflight, 2);
  complete(inflight);
  for (int i = 0; i < 20; ++i) {
    v1::Trial t;
    if (!lease(&t)) break;
    EXPECT_TRUE(seen.insert(t.trial_id()).second)
        << "trial " << t.trial_id() << " handed out twice";
    for (int step = 0; step < 3; ++step) report(t, step);
    complete(t);
  }
  EXPECT_EQ(seen.size(), 6u);
  auto exp = HttpRequestOnce(Http(), "GET", "/api/v1/experiments/" + std::to_string(exp_id));
  ASSERT_TRUE(exp.ok());
  json e = json::parse(exp->body);
  EXPECT_EQ(e["state"], "completed") << exp->body;
  EXPECT_EQ(e["trials"]["completed"], 6);
  EXPECT_EQ(e["trials"]["total"], 6);
  auto trial =
      HttpRequestOnce(Http(), "GET", "/api/v1/trials/" + std::to_string(inflight.trial_id()));
  const json got = json::parse(trial->body);
  EXPECT_EQ(got["measurements"].size(), 3u) << "a step was lost across the restart";
  // Where it ran: every step on the one worker's device, named with it.
  ASSERT_EQ(got["devices"].size(), 1u) << trial->body;
  EXPECT_EQ(got["devices"][0]["steps"], 3) << trial->body;
  EXPECT_FALSE(got["devices"][0]["host"].is_null()) << trial->body;
  EXPECT_EQ(got["devices"][0]["device_class"], got["measurements"][0]["device_class"])
      << trial->body;
  EXPECT_EQ(got["measurements"][2]["device_id"], got["devices"][0]["device_id"]) << trial->body;
  EXPECT_EQ(got["device_class"], got["devices"][0]["device_class"])
      << "the class that trained it longest: " << trial->body;
  EXPECT_FALSE(got["device_class"].get<std::string>().empty()) << trial->body;
  EXPECT_TRUE(got["events"].is_array()) << trial->body;

  auto m = HttpRequestOnce(Http(), "GET", "/metrics");
  ASSERT_TRUE(m.ok());
  const std::string path = dir_ + "/metrics.txt";
  std::ofstream(path) << m->body;
  EXPECT_EQ(std::system(
                ("promtool check metrics < " + path + " > " + dir_ + "/promtool.out 2>&1").c_str()),
            0)
      << m->body;
  EXPECT_NE(m->body.find("hpo_trials{state=\"completed\"} 6"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("hpo_leases_total{outcome=\"trial\"}"), std::string::npos);
  EXPECT_NE(m->body.find("hpo_report_duration_seconds_bucket"), std::string::npos);
  // Every report, heartbeat and completion went through group commit: each
  // transaction of it is one observation of its size.
  const std::string batches = "\nhpo_store_group_commit_calls_count ";
  const size_t at = m->body.find(batches);
  ASSERT_NE(at, std::string::npos) << m->body;
  EXPECT_GE(std::stod(m->body.substr(at + batches.size())), 3.0) << "three steps were reported";
  EXPECT_NE(m->body.find("hpo_device_samples_per_second{device_class=\"cpu:test "
                         "cpu:x1.0\",workload=\"fashion-mnist-mlp/a@"),
            std::string::npos)
      << m->body;
  // Workers come with their devices' measured speed.
  auto w = HttpRequestOnce(Http(), "GET", "/api/v1/workers");
  ASSERT_TRUE(w.ok());
  json workers = json::parse(w->body)["workers"];
  ASSERT_EQ(workers.size(), 1u);
  json measured = workers[0]["devices"][0]["measured"];
  ASSERT_EQ(measured.size(), 1u) << w->body;
  EXPECT_EQ(measured[0]["workload"].get<std::string>().rfind("fashion-mnist-mlp/a@", 0), 0u)
      << measured[0];
  EXPECT_EQ(measured[0]["system"]["threads"], 2);
  EXPECT_GE(measured[0]["samples_per_sec"].get<double>(), 100);
}

TEST_F(ServerE2eTest, BadFlagsAndStoresFailWithOneLine) {
  testing::ServerProcess bad(HPO_SERVER_BIN, dir_ + "/bad",
                             {"--store", "postgresql://u:pw@127.0.0.1:1/x?connect_timeout=2"});
  EXPECT_FALSE(bad.Start().ok());
  const std::string log = bad.Log();
  EXPECT_NE(log.find("postgresql://u:***@127.0.0.1:1/x"), std::string::npos) << log;
  EXPECT_EQ(log.find(":pw@"), std::string::npos) << log;
  // The port the first server holds cannot be bound twice.
  testing::ServerProcess clash(HPO_SERVER_BIN, dir_ + "/clash",
                               {"--store", "sqlite://" + dir_ + "/clash.db", "--http",
                                "127.0.0.1:" + std::to_string(server_->http_port())});
  EXPECT_FALSE(clash.Start().ok());
  EXPECT_NE(clash.Log().find("cannot listen on 127.0.0.1:" + std::to_string(server_->http_port())),
            std::string::npos)
      << clash.Log();
  // A long poll as long as the lease timeout would make a waiting worker look gone.
  testing::ServerProcess long_poll(HPO_SERVER_BIN, dir_ + "/long_poll",
                                   {"--store", "sqlite://" + dir_ + "/long_poll.db",
                                    "--lease-timeout", "3", "--max-lease-wait", "3"});
  EXPECT_FALSE(long_poll.Start().ok());
  EXPECT_NE(long_poll.Log().find("--max-lease-wait (3 s)"), std::string::npos) << long_poll.Log();
  EXPECT_NE(long_poll.Log().find("must be shorter than --lease-timeout (3 s)"), std::string::npos)
      << long_poll.Log();
}

}  // namespace
}  // namespace hpo
