// The gRPC worker service over a real server on 127.0.0.1:0, a real channel
// and a SQLite store: registration, a worker loop running an experiment to
// its end, command placeholders, auth, validation, heartbeats and leases.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "proto/grpc_status.h"
#include "server/engine/engine.h"
#include "server/grpc/worker_service.h"
#include "testing/store_backends.h"
#include "tests/event_log.h"

namespace hpo::server {
namespace {

using nlohmann::json;
using store::TrialState;
namespace v1 = hpo::v1;

constexpr const char* kToken = "s3cret-token";
const std::string kAuth = std::string("Bearer ") + kToken;

std::string Spec(const std::string& executor, int max_trials, int max_parallel) {
  return R"({"name": "quad", "objective": {"metric": "loss", "direction": "minimize"},
    "spaces": [{"name": "a", "params": {
        "x": {"type": "float", "low": -1, "high": 1},
        "opt": {"type": "categorical", "choices": ["sgd", "adam"]}}}],
    "system": {"threads": {"type": "int", "low": 1, "high": 4}},
    "algorithm": {"sampler": "random", "seed": 3},
    "early_stopping": {"rule": "none"},
    "budget": {"max_trials": )" +
         std::to_string(max_trials) + R"(, "max_parallel": )" + std::to_string(max_parallel) +
         R"(, "steps_per_trial": 3},
    "executor": )" +
         executor + "}";
}
const std::string kBuiltin =
    R"({"builtin": {"trainer": "fashion-mnist-mlp", "args": {"validation_fraction": 0.1}}})";

class GrpcWorkerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store::StoreOptions o;
    o.clock = clock_.fn();
    auto s = store::OpenStore(backend_.url(), o);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(s).value();
    EngineOptions eo;
    eo.on_event = events_.Recorder();
    engine_ = std::make_unique<Engine>(*store_, eo);
    WorkerServiceOptions options;
    options.token = kToken;
    options.retry_after_ms = 10;
    service_ = std::make_unique<WorkerServiceImpl>(*engine_, options);
    auto server = GrpcServer::Start("127.0.0.1:0", service_.get());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    ASSERT_GT(server_->port(), 0);
    stub_ = v1::WorkerService::NewStub(Connect(server_->port()));
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::seconds(1));
  }

  static std::shared_ptr<::grpc::Channel> Connect(int port) {
    return ::grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                 ::grpc::InsecureChannelCredentials());
  }

  // A context with a deadline (a hung server fails the test rather than
  // hanging it) and the given authorization header ("" sends none).
  static std::unique_ptr<::grpc::ClientContext> Ctx(const std::string& authorization = kAuth) {
    auto ctx = std::make_unique<::grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!authorization.empty()) ctx->AddMetadata("authorization", authorization);
    return ctx;
  }

  static v1::Device Cpu(int ordinal, const std::string& name, double cores) {
    v1::Device d;
    d.set_ordinal(ordinal);
    d.set_kind(v1::DEVICE_KIND_CPU);
    d.set_name(name);
    d.set_cores(cores);
    d.set_memory_bytes(8ll << 30);
    d.set_benchmark_gflops(50);
    return d;
  }
  static v1::Device Cuda(int ordinal, const std::string& name) {
    v1::Device d = Cpu(ordinal, name, 0);
    d.set_kind(v1::DEVICE_KIND_CUDA);
    d.set_benchmark_gflops(900);
    d.set_memory_bytes(int64_t{80} << 30);
    return d;
  }

  // Registers a one-CPU worker; returns {worker id, device id} and keeps
  // its session for the calls below.
  std::pair<int64_t, int64_t> RegisterCpuWorker(const std::string& host) {
    v1::RegisterRequest req;
    req.set_host(host);
    *req.add_devices() = Cpu(0, "Test CPU", 2);
    v1::RegisterResponse resp;
    ::grpc::Status s = stub_->Register(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.device_ids_size(), 1);
    EXPECT_EQ(resp.session().size(), 64u) << "32 random bytes as hex";
    std::lock_guard lock(sessions_mu_);
    sessions_[resp.worker_id()] = resp.session();
    return {resp.worker_id(), resp.device_ids_size() > 0 ? resp.device_ids(0) : 0};
  }
  // The session Register returned to `worker` ("" for one it did not).
  std::string SessionOf(int64_t worker) {
    std::lock_guard lock(sessions_mu_);
    auto it = sessions_.find(worker);
    return it == sessions_.end() ? "" : it->second;
  }

  ::grpc::Status Lease(int64_t worker, int64_t device, v1::LeaseResponse* resp) {
    v1::LeaseRequest req;
    req.set_worker_id(worker);
    req.set_session(SessionOf(worker));
    req.set_device_id(device);
    return stub_->Lease(Ctx().get(), req, resp);
  }

  // A report as `worker`, with `session` (its own when unset) and the
  // device it names (none when 0).
  ::grpc::Status Report(int64_t worker, int64_t trial, int64_t step, double loss,
                        v1::ReportResponse* resp, std::optional<std::string> session = std::nullopt,
                        int64_t device = 0) {
    v1::ReportRequest req;
    req.set_worker_id(worker);
    req.set_session(session ? *session : SessionOf(worker));
    req.set_device_id(device);
    req.set_trial_id(trial);
    req.set_step(step);
    (*req.mutable_metrics())["loss"] = loss;
    (*req.mutable_metrics())["accuracy"] = 1 - loss;
    req.set_samples_per_sec(1000);
    (*req.mutable_system()->mutable_values())["threads"] = "2";
    (*req.mutable_system()->mutable_values())["device"] = "cpu0";  // not JSON: kept as a string
    return stub_->Report(Ctx().get(), req, resp);
  }

  // The engine's events of one type so far.
  std::vector<json> Events(const std::string& type) const { return events_.Of(type); }

  testing::FakeClock clock_;
  testing::SqliteBackend backend_;
  std::unique_ptr<store::Store> store_;
  testing::EventLog events_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<WorkerServiceImpl> service_;
  std::unique_ptr<GrpcServer> server_;  // after service_: stops before the service goes
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  std::mutex sessions_mu_;
  std::map<int64_t, std::string> sessions_;  // GUARDED_BY(sessions_mu_)
};

// A lease with nothing to run waits for work when it asks to (a long
// poll): an experiment created while it waits is its answer, where a lease
// that does not wait is told to retry.
TEST_F(GrpcWorkerServiceTest, ALeaseThatWaitsIsAnsweredByWorkThatAppears) {
  auto [worker, device] = RegisterCpuWorker("node-1");
  v1::LeaseResponse at_once;
  ASSERT_TRUE(Lease(worker, device, &at_once).ok());
  EXPECT_FALSE(at_once.has_trial());
  EXPECT_GT(at_once.retry_after_ms(), 0);

  v1::LeaseResponse waited;
  ::grpc::Status called;
  std::thread lease([&] {
    v1::LeaseRequest req;
    req.set_worker_id(worker);
    req.set_session(SessionOf(worker));
    req.set_device_id(device);
    req.set_max_wait_ms(60'000);  // beyond the server's bound: it waits 5 s at most
    called = stub_->Lease(Ctx().get(), req, &waited);
  });
  for (int i = 0; i < 500 && service_->waiting_leases() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(service_->waiting_leases(), 1) << "the lease did not wait";
  auto e = engine_->CreateExperiment(Spec(kBuiltin, 2, 1));
  ASSERT_TRUE(e.ok()) << e.status();
  lease.join();
  ASSERT_TRUE(called.ok()) << called.error_message();
  ASSERT_TRUE(waited.has_trial()) << "the waiting lease was not given the new experiment's trial";
  EXPECT_EQ(waited.trial().experiment_id(), e->id);
  EXPECT_EQ(service_->waiting_leases(), 0);
}

// The server's bound on waiting leases: past it a lease is answered at
// once, as without a wait.
TEST(GrpcWorkerServiceBounds, PastTheBoundOnWaitingLeasesALeaseIsAnsweredAtOnce) {
  testing::SqliteBackend backend;
  auto s = store::OpenStore(backend.url(), {});
  ASSERT_TRUE(s.ok()) << s.status();
  Engine engine(**s, {});
  WorkerServiceOptions options;
  options.max_waiting_leases = 0;
  WorkerServiceImpl service(engine, options);
  auto server = GrpcServer::Start("127.0.0.1:0", &service);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::WorkerService::NewStub(::grpc::CreateChannel(
      "127.0.0.1:" + std::to_string((*server)->port()), ::grpc::InsecureChannelCredentials()));
  v1::RegisterRequest reg;
  reg.set_host("node-1");
  v1::Device d;
  d.set_kind(v1::DEVICE_KIND_CPU);
  d.set_name("Test CPU");
  d.set_cores(1);
  *reg.add_devices() = d;
  v1::RegisterResponse registered;
  ::grpc::ClientContext rc;
  ASSERT_TRUE(stub->Register(&rc, reg, &registered).ok());
  v1::LeaseRequest req;
  req.set_worker_id(registered.worker_id());
  req.set_session(registered.session());
  req.set_device_id(registered.device_ids(0));
  req.set_max_wait_ms(5000);
  v1::LeaseResponse res;
  ::grpc::ClientContext lc;
  lc.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  ASSERT_TRUE(stub->Lease(&lc, req, &res).ok());
  EXPECT_FALSE(res.has_trial());
  EXPECT_EQ(res.retry_after_ms(), options.retry_after_ms)
      << "it waited: a waited lease says to ask again soon";
  (*server)->Shutdown(std::chrono::seconds(1));
}

TEST_F(GrpcWorkerServiceTest, RegisterStoresDevicesWithClassesFromWhatWasReported) {
  v1::RegisterRequest req;
  req.set_host("node-7");
  (*req.mutable_labels())["pool"] = "gpu";
  // The GPU first: classes come from each device's kind, not its position.
  *req.add_devices() = Cuda(1, "NVIDIA H100 80GB HBM3");
  *req.add_devices() = Cpu(0, "AMD EPYC 7B13", 2);
  v1::RegisterResponse resp;
  ::grpc::Status s = stub_->Register(Ctx().get(), req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_GT(resp.worker_id(), 0);
  ASSERT_EQ(resp.device_ids_size(), 2);
  EXPECT_NE(resp.device_ids(0), resp.device_ids(1));
  EXPECT_EQ(resp.lease_timeout_ms(), engine_->options().worker_lease_ms);

  auto workers = store_->ListWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(workers->size(), 1u);
  const store::WorkerRecord& w = workers->at(0);
  EXPECT_EQ(w.id, resp.worker_id());
  EXPECT_EQ(w.host, "node-7");
  EXPECT_EQ(json::parse(w.labels_json), json({{"pool", "gpu"}}));
  std::map<int64_t, store::DeviceRecord> by_id;
  for (const auto& d : w.devices) by_id[d.id] = d;
  ASSERT_EQ(by_id.size(), 2u);
  const store::DeviceRecord& gpu = by_id.at(resp.device_ids(0));
  EXPECT_EQ(gpu.kind, store::DeviceKind::kCuda);
  EXPECT_EQ(gpu.ordinal, 1);
  EXPECT_EQ(gpu.device_class, "cuda:NVIDIA H100 80GB HBM3:80GiB") << "the model and its memory";
  const store::DeviceRecord& cpu = by_id.at(resp.device_ids(1));
  EXPECT_EQ(cpu.kind, store::DeviceKind::kCpu);
  EXPECT_EQ(cpu.device_class, "cpu:AMD EPYC 7B13:x2.0");
  EXPECT_DOUBLE_EQ(cpu.cores, 2);
  EXPECT_EQ(cpu.memory_bytes, 8ll << 30);
}

TEST_F(GrpcWorkerServiceTest, BadRegistrationsNameTheFieldAndStoreNothing) {
  struct Case {
    std::function<void(v1::RegisterRequest&)> mutate;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](v1::RegisterRequest& r) { r.clear_host(); }, "host: must not be empty"},
      {[](v1::RegisterRequest& r) { r.clear_devices(); }, "devices: "},
      {[](v1::RegisterRequest& r) { r.mutable_devices(1)->clear_name(); },
       "devices[1].name: must not be empty"},
      {[](v1::RegisterRequest& r) { r.mutable_devices(0)->set_kind(v1::DEVICE_KIND_UNSPECIFIED); },
       "devices[0].kind: "},
      {[](v1::RegisterRequest& r) { r.mutable_devices(1)->set_cores(-1); }, "devices[1].cores: "},
      {[](v1::RegisterRequest& r) { r.mutable_devices(0)->set_memory_bytes(-5); },
       "devices[0].memory_bytes: "},
      {[](v1::RegisterRequest& r) { r.mutable_devices(1)->set_benchmark_gflops(-0.5); },
       "devices[1].benchmark_gflops: "},
      {[](v1::RegisterRequest& r) { r.mutable_devices(1)->set_ordinal(0); },
       "devices[1].ordinal: "},
  };
  for (const auto& c : cases) {
    v1::RegisterRequest req;
    req.set_host("h");
    *req.add_devices() = Cpu(0, "cpu", 4);
    *req.add_devices() = Cuda(1, "gpu");
    c.mutate(req);
    v1::RegisterResponse resp;
    ::grpc::Status s = stub_->Register(Ctx().get(), req, &resp);
    EXPECT_EQ(s.error_code(), ::grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_NE(s.error_message().find(c.field), std::string::npos)
        << "want \"" << c.field << "\" in \"" << s.error_message() << "\"";
  }
  EXPECT_TRUE(store_->ListWorkers()->empty());
}

TEST_F(GrpcWorkerServiceTest, TwoWorkersRunABuiltinExperimentToCompletion) {
  auto e = engine_->CreateExperiment(Spec(kBuiltin, 6, 2));
  ASSERT_TRUE(e.ok()) << e.status();
  const int64_t experiment_id = e->id;

  std::mutex mu;
  std::multiset<int64_t> leased;  // GUARDED_BY(mu)
  auto worker_loop = [&](const std::string& host) {
    const auto [worker, device] = RegisterCpuWorker(host);
    for (int i = 0; i < 2000; ++i) {
      v1::LeaseResponse lease;
      ::grpc::Status s = Lease(worker, device, &lease);
      if (!s.ok()) {
        ADD_FAILURE() << "lease: " << s.error_message();
        return;
      }
      if (!lease.has_trial()) {
        EXPECT_EQ(lease.retry_after_ms(), 10);
        if (store_->GetExperiment(experiment_id)->state != store::ExperimentState::kRunning) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(lease.retry_after_ms()));
        continue;
      }
      const v1::Trial& t = lease.trial();
      {
        std::lock_guard lock(mu);
        leased.insert(t.trial_id());
      }
      EXPECT_EQ(t.experiment_id(), experiment_id);
      EXPECT_EQ(t.space(), "a");
      EXPECT_EQ(t.objective_metric(), "loss");
      EXPECT_EQ(t.max_steps(), 3);
      EXPECT_EQ(t.attempt(), 1);
      EXPECT_GE(t.seed(), 0);
      EXPECT_GT(lease.lease_expires_ms(), 0);
      EXPECT_EQ(t.system().values().at("threads"), "2")
          << "the middle of [1, 4] is 3, beyond the 2 usable cores of this CPU; JSON-encoded";
      ASSERT_TRUE(t.executor().has_builtin());
      EXPECT_EQ(t.executor().builtin().trainer(), "fashion-mnist-mlp");
      EXPECT_EQ(t.executor().builtin().args().at("validation_fraction"), "0.1");
      const json params = json::parse(t.params_json());
      const double x = params.at("x").get<double>();
      bool stopped = false;
      for (int64_t step = 0; step < t.max_steps() && !stopped; ++step) {
        v1::ReportResponse rr;
        s = Report(worker, t.trial_id(), step, (x - 0.3) * (x - 0.3) + 1.0 / (step + 1), &rr);
        if (!s.ok()) {
          ADD_FAILURE() << "report: " << s.error_message();
          return;
        }
        // Co-tuning may ask for another system setting; the trial goes on.
        const bool goes_on =
            rr.decision() == v1::DECISION_CONTINUE || rr.decision() == v1::DECISION_CHANGE_SYSTEM;
        EXPECT_TRUE(goes_on) << rr.decision();
        stopped = !goes_on;
      }
      if (stopped) continue;
      v1::CompleteRequest done;
      done.set_worker_id(worker);
      done.set_session(SessionOf(worker));
      done.set_trial_id(t.trial_id());
      v1::CompleteResponse cr;
      s = stub_->Complete(Ctx().get(), done, &cr);
      EXPECT_TRUE(s.ok()) << "complete: " << s.error_message();
    }
    ADD_FAILURE() << host << " never saw the experiment end";
  };
  std::thread a(worker_loop, "node-a"), b(worker_loop, "node-b");
  a.join();
  b.join();

  auto exp = store_->GetExperiment(experiment_id);
  ASSERT_TRUE(exp.ok());
  EXPECT_EQ(exp->state, store::ExperimentState::kCompleted) << exp->reason;
  EXPECT_EQ(leased.size(), 6u);
  EXPECT_EQ(std::set<int64_t>(leased.begin(), leased.end()).size(), 6u) << "a trial ran twice";
  auto trials = store_->ListTrials(experiment_id, {});
  ASSERT_TRUE(trials.ok());
  ASSERT_EQ(trials->size(), 6u);
  for (const auto& t : *trials) {
    EXPECT_EQ(t.state, TrialState::kCompleted) << "trial " << t.id << ": " << t.reason;
    EXPECT_EQ(t.attempt, 1);
    EXPECT_TRUE(json::parse(t.final_metrics_json).contains("loss")) << t.final_metrics_json;
    auto ms = store_->ListMeasurements(t.id);
    ASSERT_TRUE(ms.ok());
    ASSERT_EQ(ms->size(), 3u);
    EXPECT_EQ(json::parse(ms->at(0).system_setting_json),
              json({{"threads", 2}, {"device", "cpu0"}}));
    EXPECT_DOUBLE_EQ(ms->at(0).samples_per_sec, 1000);
  }
}

TEST_F(GrpcWorkerServiceTest, CommandArgvPlaceholdersAreFilled) {
  auto e = engine_->CreateExperiment(Spec(R"({"command": {
      "argv": ["python3", "train.py", "--x={x}", "--opt={opt}", "--threads={threads}",
               "--trial={trial_id}", "--epochs={steps}", "--at={step}", "{x}:{opt}"],
      "env": {"PYTHONUNBUFFERED": "1"}, "timeout_s": 30}})",
                                          3, 1));
  ASSERT_TRUE(e.ok()) << e.status();
  const auto [worker, device] = RegisterCpuWorker("node");
  v1::LeaseResponse lease;
  ::grpc::Status s = Lease(worker, device, &lease);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_TRUE(lease.has_trial());
  const v1::Trial& t = lease.trial();
  ASSERT_TRUE(t.executor().has_command());
  const auto& c = t.executor().command();
  const json params = json::parse(t.params_json());
  const std::string x = params.at("x").dump();
  const std::string opt = params.at("opt").get<std::string>();
  EXPECT_TRUE(opt == "sgd" || opt == "adam") << opt;
  // threads: the middle of [1, 4] is 3, capped at the registered CPU's 2 cores.
  const std::vector<std::string> want = {"python3",     "train.py",
                                         "--x=" + x,    "--opt=" + opt,
                                         "--threads=2", "--trial=" + std::to_string(t.trial_id()),
                                         "--epochs=3",
                                         "--at={step}",  // per step: the worker's to fill
                                         x + ":" + opt};
  EXPECT_EQ(std::vector<std::string>(c.argv().begin(), c.argv().end()), want);
  EXPECT_EQ(c.env().at("PYTHONUNBUFFERED"), "1");
  EXPECT_EQ(c.timeout_ms(), 30'000);
}

TEST_F(GrpcWorkerServiceTest, EveryRpcNeedsTheBearerToken) {
  auto e = engine_->CreateExperiment(Spec(kBuiltin, 2, 1));
  ASSERT_TRUE(e.ok());
  v1::RegisterRequest req;
  req.set_host("h");
  *req.add_devices() = Cpu(0, "cpu", 1);
  for (const std::string& bad :
       {std::string(), std::string("Bearer wrong"), std::string(kToken), kAuth + "x",
        kAuth.substr(0, kAuth.size() - 1), std::string("Basic ") + kToken}) {
    v1::RegisterResponse resp;
    ::grpc::Status s = stub_->Register(Ctx(bad).get(), req, &resp);
    EXPECT_EQ(s.error_code(), ::grpc::StatusCode::UNAUTHENTICATED) << "'" << bad << "'";
    EXPECT_EQ(s.error_message(), "missing or invalid bearer token");
    v1::LeaseRequest lr;
    v1::LeaseResponse lresp;
    EXPECT_EQ(stub_->Lease(Ctx(bad).get(), lr, &lresp).error_code(),
              ::grpc::StatusCode::UNAUTHENTICATED);
    v1::HeartbeatRequest hr;
    v1::HeartbeatResponse hresp;
    EXPECT_EQ(stub_->Heartbeat(Ctx(bad).get(), hr, &hresp).error_code(),
              ::grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_TRUE(store_->ListWorkers()->empty()) << "a refused call wrote something";
  const auto [worker, device] = RegisterCpuWorker("h");
  v1::LeaseResponse lease;
  ::grpc::Status s = Lease(worker, device, &lease);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(lease.has_trial());

  // Without a configured token, no header is needed.
  WorkerServiceImpl no_auth(*engine_, {});
  auto server = GrpcServer::Start("127.0.0.1:0", &no_auth);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::WorkerService::NewStub(Connect((*server)->port()));
  v1::RegisterResponse resp;
  s = stub->Register(Ctx("").get(), req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  (*server)->Shutdown(std::chrono::seconds(1));
}

TEST_F(GrpcWorkerServiceTest, HeartbeatTellsTheWorkerToStopTrialsOfACancelledExperiment) {
  auto e = engine_->CreateExperiment(Spec(kBuiltin, 4, 2));
  ASSERT_TRUE(e.ok());
  const auto [worker, device] = RegisterCpuWorker("node");
  v1::LeaseResponse l1, l2;
  ASSERT_TRUE(Lease(worker, device, &l1).ok());
  ASSERT_TRUE(Lease(worker, device, &l2).ok());
  ASSERT_TRUE(l1.has_trial() && l2.has_trial());

  v1::HeartbeatRequest hb;
  hb.set_worker_id(worker);
  hb.set_session(SessionOf(worker));
  hb.add_trial_ids(l1.trial().trial_id());
  hb.add_trial_ids(l2.trial().trial_id());
  v1::HeartbeatResponse resp;
  clock_.Advance(30'000);
  ::grpc::Status s = stub_->Heartbeat(Ctx().get(), hb, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.stop_trial_ids_size(), 0);
  EXPECT_EQ(*store_->GetTrial(l1.trial().trial_id())->lease_expires_ms,
            clock_.fn()() + engine_->options().worker_lease_ms)
      << "the lease was renewed";

  ASSERT_TRUE(engine_->CancelExperiment(e->id, "user").ok());
  hb.add_trial_ids(987654);  // unknown: stop it too, rather than fail the heartbeat
  resp.Clear();
  s = stub_->Heartbeat(Ctx().get(), hb, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(std::set<int64_t>(resp.stop_trial_ids().begin(), resp.stop_trial_ids().end()),
            (std::set<int64_t>{l1.trial().trial_id(), l2.trial().trial_id(), 987654}));

  // A report after the cancel says the same.
  v1::ReportResponse rr;
  s = Report(worker, l1.trial().trial_id(), 0, 0.5, &rr);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(rr.decision(), v1::DECISION_CANCEL);

  v1::HeartbeatRequest unknown;
  unknown.set_worker_id(worker + 100);
  EXPECT_EQ(stub_->Heartbeat(Ctx().get(), unknown, &resp).error_code(),
            ::grpc::StatusCode::NOT_FOUND);
}

TEST_F(GrpcWorkerServiceTest, AReportWithALostLeaseIsRefused) {
  auto e = engine_->CreateExperiment(Spec(kBuiltin, 3, 1));
  ASSERT_TRUE(e.ok());
  const auto [w1, d1] = RegisterCpuWorker("slow");
  const auto [w2, d2] = RegisterCpuWorker("fast");
  v1::LeaseResponse first;
  ASSERT_TRUE(Lease(w1, d1, &first).ok());
  ASSERT_TRUE(first.has_trial());
  clock_.Advance(engine_->options().worker_lease_ms + 1);
  ASSERT_TRUE(engine_->Tick().ok());
  v1::LeaseResponse second;
  ASSERT_TRUE(Lease(w2, d2, &second).ok());
  ASSERT_TRUE(second.has_trial());
  ASSERT_EQ(second.trial().trial_id(), first.trial().trial_id());
  EXPECT_EQ(second.trial().attempt(), 2);
  EXPECT_EQ(second.trial().seed(), first.trial().seed()) << "a retry repeats the same run";

  v1::ReportResponse rr;
  ::grpc::Status s = Report(w1, first.trial().trial_id(), 0, 0.5, &rr);
  EXPECT_EQ(s.error_code(), ::grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  s = Report(w2, second.trial().trial_id(), 0, 0.5, &rr);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(rr.decision() == v1::DECISION_CONTINUE || rr.decision() == v1::DECISION_CHANGE_SYSTEM)
      << rr.decision();
}

TEST_F(GrpcWorkerServiceTest, LeaseNeedsAKnownWorkerAndOneOfItsDevices) {
  auto e = engine_->CreateExperiment(Spec(kBuiltin, 3, 1));
  ASSERT_TRUE(e.ok());
  const auto [w1, d1] = RegisterCpuWorker("a");
  const auto [w2, d2] = RegisterCpuWorker("b");
  v1::LeaseResponse resp;
  ::grpc::Status s = Lease(w2 + 100, d1, &resp);
  EXPECT_EQ(s.error_code(), ::grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("worker " + std::to_string(w2 + 100)), std::string::npos);
  s = Lease(w1, d2, &resp);
  EXPECT_EQ(s.error_code(), ::grpc::StatusCode::NOT_FOUND) << "another worker's device";
  EXPECT_EQ(store_->CountTrials(e->id)->leased, 0) << "nothing was leased";
}

TEST_F(GrpcWorkerServiceTest, AFailedTrialKeepsItsReasonAndLogTail) {
  auto e = engine_->CreateExperiment(Spec(kBuiltin, 3, 1));
  ASSERT_TRUE(e.ok());
  const auto [worker, device] = RegisterCpuWorker("node");
  v1::LeaseResponse lease;
  ASSERT_TRUE(Lease(worker, device, &lease).ok());
  ASSERT_TRUE(lease.has_trial());
  v1::CompleteRequest req;
  req.set_worker_id(worker);
  req.set_session(SessionOf(worker));
  req.set_trial_id(lease.trial().trial_id());
  req.set_failed(true);
  req.set_reason("exit status 1");
  req.set_log_tail("Traceback: CUDA out of memory");
  v1::CompleteResponse resp;
  ::grpc::Status s = stub_->Complete(Ctx().get(), req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  auto t = store_->GetTrial(lease.trial().trial_id());
  EXPECT_EQ(t->state, TrialState::kFailed);
  EXPECT_NE(t->reason.find("exit status 1"), std::string::npos) << t->reason;
  EXPECT_NE(t->reason.find("CUDA out of memory"), std::string::npos) << t->reason;

  // Each part is cut to its own limit: the reason's start and the log's end
  // (where the error usually is) are what is kept.
  ASSERT_TRUE(Lease(worker, device, &lease).ok());
  ASSERT_TRUE(lease.has_trial());
  req.set_trial_id(lease.trial().trial_id());
  req.set_reason("exit status 2" + std::string(1 << 20, 'r'));
  req.set_log_tail(std::string(1 << 20, 'l') + "\nRuntimeError: the real cause");
  ASSERT_TRUE(stub_->Complete(Ctx().get(), req, &resp).ok());
  t = store_->GetTrial(lease.trial().trial_id());
  EXPECT_EQ(t->reason.rfind("exit status 2", 0), 0u) << t->reason.substr(0, 100);
  EXPECT_NE(t->reason.find("RuntimeError: the real cause"), std::string::npos)
      << "the log's end was cut off";
  EXPECT_LE(t->reason.size(), kMaxReasonLength + 1 + kMaxLogTailLength);
  EXPECT_NE(t->reason.find("... (cut)"), std::string::npos);
}

// Worker ids are sequential, so anyone with the token can send another
// worker's. The session Register returned is what proves a call is that
// worker's: with another worker's session, a made-up one or none, nothing
// of worker 1's trial can be reported, completed or renewed.
TEST_F(GrpcWorkerServiceTest, AnotherWorkerSendingTheOwnersIdCannotTouchItsTrial) {
  auto e = engine_->CreateExperiment(Spec(kBuiltin, 3, 1));
  ASSERT_TRUE(e.ok()) << e.status();
  const auto [owner, owner_device] = RegisterCpuWorker("owner");
  const auto [other, other_device] = RegisterCpuWorker("other");
  v1::LeaseResponse lease;
  ASSERT_TRUE(Lease(owner, owner_device, &lease).ok());
  ASSERT_TRUE(lease.has_trial());
  const int64_t trial = lease.trial().trial_id();
  const int64_t expires = *store_->GetTrial(trial)->lease_expires_ms;
  clock_.Advance(1000);  // a renewal would show

  const std::vector<std::string> wrong = {SessionOf(other), "", std::string(64, '0'),
                                          SessionOf(owner).substr(0, 63), SessionOf(owner) + "0"};
  for (const std::string& session : wrong) {
    auto expect_denied = [&](const ::grpc::Status& s, const char* rpc) {
      EXPECT_EQ(s.error_code(), ::grpc::StatusCode::PERMISSION_DENIED)
          << rpc << ": " << s.error_message();
      EXPECT_NE(s.error_message().find("worker " + std::to_string(owner) + ": the session"),
                std::string::npos)
          << s.error_message();
      if (!session.empty()) {
        EXPECT_EQ(s.error_message().find(session), std::string::npos)
            << rpc << " echoed the session it was sent";
      }
    };
    v1::ReportResponse rr;
    expect_denied(Report(owner, trial, 0, 0.5, &rr, session), "Report");

    v1::CompleteRequest complete;
    complete.set_worker_id(owner);
    complete.set_session(session);
    complete.set_trial_id(trial);
    (*complete.mutable_final_metrics())["loss"] = 0.01;
    v1::CompleteResponse cr;
    expect_denied(stub_->Complete(Ctx().get(), complete, &cr), "Complete");
    complete.set_failed(true);
    expect_denied(stub_->Complete(Ctx().get(), complete, &cr), "Complete (failed)");

    v1::HeartbeatRequest hb;
    hb.set_worker_id(owner);
    hb.set_session(session);
    hb.add_trial_ids(trial);
    v1::HeartbeatResponse hr;
    expect_denied(stub_->Heartbeat(Ctx().get(), hb, &hr), "Heartbeat");

    v1::LeaseRequest lr;
    lr.set_worker_id(owner);
    lr.set_session(session);
    lr.set_device_id(owner_device);
    v1::LeaseResponse lresp;
    expect_denied(stub_->Lease(Ctx().get(), lr, &lresp), "Lease");
  }
  auto t = store_->GetTrial(trial);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->state, TrialState::kLeased) << t->reason;
  EXPECT_EQ(*t->lease_expires_ms, expires) << "a heartbeat with a wrong session renewed the lease";
  EXPECT_TRUE(store_->ListMeasurements(trial)->empty())
      << "a report with a wrong session was stored";
  EXPECT_EQ(store_->CountTrials(e->id)->leased, 1) << "a lease with a wrong session was granted";

  // The owner, with its own session, carries on.
  v1::ReportResponse rr;
  ::grpc::Status s = Report(owner, trial, 0, 0.5, &rr);
  ASSERT_TRUE(s.ok()) << s.error_message();
  v1::CompleteRequest complete;
  complete.set_worker_id(owner);
  complete.set_session(SessionOf(owner));
  complete.set_trial_id(trial);
  v1::CompleteResponse cr;
  s = stub_->Complete(Ctx().get(), complete, &cr);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(store_->GetTrial(trial)->state, TrialState::kCompleted);
}

// A worker that stops says so (Leave): it is gone at once, not after the
// lease timeout, and a trial it still held goes back to pending, its
// max_parallel slot free for another worker now. Only its own session may
// say it leaves, and saying it again changes nothing more.
TEST_F(GrpcWorkerServiceTest, AWorkerThatLeavesIsGoneAtOnceAndItsTrialIsRequeued) {
  auto e = engine_->CreateExperiment(Spec(kBuiltin, 3, 1));
  ASSERT_TRUE(e.ok()) << e.status();
  const auto [leaving, leaving_device] = RegisterCpuWorker("leaving");
  const auto [staying, staying_device] = RegisterCpuWorker("staying");
  v1::LeaseResponse lease;
  ASSERT_TRUE(Lease(leaving, leaving_device, &lease).ok());
  ASSERT_TRUE(lease.has_trial());
  const int64_t trial = lease.trial().trial_id();
  v1::ReportResponse rr;
  ASSERT_TRUE(Report(leaving, trial, 1, 0.5, &rr, std::nullopt, leaving_device).ok());
  v1::LeaseResponse none;
  ASSERT_TRUE(Lease(staying, staying_device, &none).ok());
  ASSERT_FALSE(none.has_trial()) << "max_parallel 1: the slot is the leaving worker's";

  v1::LeaveRequest leave;
  leave.set_worker_id(leaving);
  leave.set_session(SessionOf(staying));
  v1::LeaveResponse left;
  EXPECT_EQ(stub_->Leave(Ctx().get(), leave, &left).error_code(),
            ::grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(stub_->Leave(Ctx("Bearer wrong").get(), leave, &left).error_code(),
            ::grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_FALSE(store_->GetWorker(leaving)->gone_ms.has_value())
      << "another's session made it leave";
  EXPECT_EQ(store_->GetTrial(trial)->state, TrialState::kRunning);

  leave.set_session(SessionOf(leaving));
  ::grpc::Status s = stub_->Leave(Ctx().get(), leave, &left);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(
      std::vector<int64_t>(left.requeued_trial_ids().begin(), left.requeued_trial_ids().end()),
      std::vector<int64_t>{trial});
  // No time passed: neither the lease timeout nor the worker's.
  EXPECT_EQ(engine_->WorkerState(*store_->GetWorker(leaving)), "gone");
  EXPECT_FALSE(store_->GetWorker(staying)->gone_ms.has_value());
  EXPECT_EQ(store_->GetTrial(trial)->state, TrialState::kPending);
  const auto gone = Events("worker.gone");
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0]["worker_id"], leaving);
  EXPECT_EQ(gone[0]["left"], true);
  const auto requeued = Events("trial.requeued");
  ASSERT_EQ(requeued.size(), 1u);
  EXPECT_EQ(requeued[0]["trial_id"], trial);
  EXPECT_EQ(requeued[0]["reason"], "worker left");

  // The other worker gets it at once, as the next attempt.
  v1::LeaseResponse again;
  ASSERT_TRUE(Lease(staying, staying_device, &again).ok());
  ASSERT_TRUE(again.has_trial());
  EXPECT_EQ(again.trial().trial_id(), trial);
  EXPECT_EQ(again.trial().attempt(), 2);
  s = Report(leaving, trial, 2, 0.4, &rr, std::nullopt, leaving_device);
  EXPECT_EQ(s.error_code(), ::grpc::StatusCode::FAILED_PRECONDITION)
      << "the left worker's lease ended";

  // Again: nothing more to end or to announce.
  left.Clear();
  s = stub_->Leave(Ctx().get(), leave, &left);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(left.requeued_trial_ids_size(), 0);
  EXPECT_EQ(Events("worker.gone").size(), 1u);
  leave.set_worker_id(staying + 100);
  EXPECT_EQ(stub_->Leave(Ctx().get(), leave, &left).error_code(), ::grpc::StatusCode::NOT_FOUND);

  // A worker that left and asks again is live again.
  v1::LeaseResponse back;
  ASSERT_TRUE(Lease(leaving, leaving_device, &back).ok());
  EXPECT_FALSE(store_->GetWorker(leaving)->gone_ms.has_value());
}

// A report's device must be the reporting worker's: another worker's
// device (or an unknown one) is refused before the step is stored, so no
// measurement and no speed observation is credited to the wrong device.
TEST_F(GrpcWorkerServiceTest, AReportNamingADeviceNotTheWorkersStoresNothing) {
  auto e = engine_->CreateExperiment(Spec(kBuiltin, 3, 1));
  ASSERT_TRUE(e.ok()) << e.status();
  const auto [w1, d1] = RegisterCpuWorker("one");
  const auto [w2, d2] = RegisterCpuWorker("two");
  v1::LeaseResponse lease;
  ASSERT_TRUE(Lease(w1, d1, &lease).ok());
  ASSERT_TRUE(lease.has_trial());
  const int64_t trial = lease.trial().trial_id();
  for (const int64_t device : {d2, d2 + 1000}) {
    v1::ReportResponse rr;
    ::grpc::Status s = Report(w1, trial, 0, 0.5, &rr, std::nullopt, device);
    EXPECT_EQ(s.error_code(), ::grpc::StatusCode::NOT_FOUND) << s.error_message();
    EXPECT_NE(s.error_message().find("device " + std::to_string(device) +
                                     " is not a device of worker " + std::to_string(w1)),
              std::string::npos)
        << s.error_message();
  }
  EXPECT_TRUE(store_->ListMeasurements(trial)->empty())
      << "a step was stored with another worker's device";
  EXPECT_TRUE(store_->ListSpeedObservations("", 100)->empty())
      << "another worker's device got a speed";
  EXPECT_EQ(store_->GetTrial(trial)->state, TrialState::kLeased);

  v1::ReportResponse rr;
  ::grpc::Status s = Report(w1, trial, 0, 0.5, &rr, std::nullopt, d1);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(store_->ListMeasurements(trial)->size(), 1u);
  auto observed = store_->ListSpeedObservations("", 100);
  ASSERT_EQ(observed->size(), 1u);
  EXPECT_EQ(observed->at(0).device_id, d1);
}

// A worker's report of a step past the trial's steps_per_trial (3 here) is
// refused naming the step and the limit, and stores nothing; the trial's
// own last step is taken.
TEST_F(GrpcWorkerServiceTest, AReportPastTheTrialsLastStepIsRefusedAndStoresNothing) {
  auto e = engine_->CreateExperiment(Spec(kBuiltin, 3, 1));
  ASSERT_TRUE(e.ok()) << e.status();
  const auto [worker, device] = RegisterCpuWorker("node");
  v1::LeaseResponse lease;
  ASSERT_TRUE(Lease(worker, device, &lease).ok());
  ASSERT_TRUE(lease.has_trial());
  EXPECT_EQ(lease.trial().max_steps(), 3);
  const int64_t trial = lease.trial().trial_id();
  for (const int64_t step : {int64_t{4}, int64_t{4611686018427387904}}) {
    v1::ReportResponse rr;
    ::grpc::Status s = Report(worker, trial, step, 0.5, &rr, std::nullopt, device);
    EXPECT_EQ(s.error_code(), ::grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_EQ(s.error_message(), "step: " + std::to_string(step) +
                                     " is past the trial's last step, 3 (budget.steps_per_trial)");
  }
  EXPECT_TRUE(store_->ListMeasurements(trial)->empty());
  EXPECT_TRUE(Events("trial.reported").empty());
  v1::ReportResponse rr;
  ::grpc::Status s = Report(worker, trial, 3, 0.5, &rr, std::nullopt, device);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(store_->ListMeasurements(trial)->size(), 1u);
  EXPECT_EQ(store_->ListMeasurements(trial)->at(0).step, 3);
}

// A spec's system parameters with what a worker declares about them, for
// the tests below: threads (mutable by default), inter_op_threads that the
// spec lets change mid-trial and foo, which no trainer knows.
std::string DeclaredSpec(const std::string& threads_high) {
  std::string spec = Spec(kBuiltin, 1, 1);
  const std::string threads = R"("system": {"threads": {"type": "int", "low": 1, "high": 4}})";
  spec.replace(spec.find(threads), threads.size(),
               R"("system": {"threads": {"type": "int", "low": 1, "high": )" + threads_high + R"(},
                             "inter_op_threads": {"type": "int", "low": 1, "high": 4, "mutable": true},
                             "foo": {"type": "int", "low": 1, "high": 3}})");
  const std::string steps = R"("steps_per_trial": 3)";
  spec.replace(spec.find(steps), steps.size(), R"("steps_per_trial": 10)");
  return spec;
}

// The worker's declaration travels with its reports: inter_op_threads,
// which it can change only at a restart, is never probed inside the trial
// although the spec says `mutable: true`; threads, which it can change, is;
// foo, which it does not declare, is unknown to its program, said once in a
// trial.system_unknown event naming it, and the trial goes on. Without a
// declaration (an older worker) the same spec probes inter_op_threads too.
TEST_F(GrpcWorkerServiceTest, TheWorkersDeclarationDecidesWhatIsProbedMidTrial) {
  for (const bool declares : {true, false}) {
    SCOPED_TRACE(declares ? "declared" : "not declared");
    auto e = engine_->CreateExperiment(DeclaredSpec("4"));
    ASSERT_TRUE(e.ok()) << e.status();
    v1::RegisterRequest reg;
    reg.set_host(declares ? "new" : "old");
    *reg.add_devices() = Cpu(0, "Test CPU", 8);
    v1::RegisterResponse me;
    ASSERT_TRUE(stub_->Register(Ctx().get(), reg, &me).ok());
    v1::LeaseRequest lr;
    lr.set_worker_id(me.worker_id());
    lr.set_session(me.session());
    lr.set_device_id(me.device_ids(0));
    v1::LeaseResponse lease;
    ASSERT_TRUE(stub_->Lease(Ctx().get(), lr, &lease).ok());
    ASSERT_TRUE(lease.has_trial());
    const int64_t trial = lease.trial().trial_id();
    auto system = lease.trial().system().values();
    std::set<std::string> probed;
    for (int64_t step = 1; step <= 10; ++step) {
      v1::ReportRequest req;
      req.set_worker_id(me.worker_id());
      req.set_session(me.session());
      req.set_device_id(me.device_ids(0));
      req.set_trial_id(trial);
      req.set_step(step);
      (*req.mutable_metrics())["loss"] = 1.0 / step;
      // Faster with more threads and more inter-op threads: a probe of
      // either always looks worth it.
      req.set_samples_per_sec(1000 * std::stod(system.at("threads")) +
                              100 * std::stod(system.at("inter_op_threads")));
      *req.mutable_system()->mutable_values() = system;
      if (declares) {
        auto& changes = *req.mutable_system_changes();
        changes["threads"] = v1::SYSTEM_CHANGE_MID_TRIAL;
        changes["inter_op_threads"] = v1::SYSTEM_CHANGE_AT_RESTART;
        changes["batch_size"] = v1::SYSTEM_CHANGE_MID_TRIAL;  // known, not in this spec
        // Applied: what the program runs, foo not among it.
        auto& applied = *req.mutable_applied()->mutable_values();
        applied["threads"] = system.at("threads");
        applied["inter_op_threads"] = system.at("inter_op_threads");
      }
      v1::ReportResponse rr;
      ::grpc::Status s = stub_->Report(Ctx().get(), req, &rr);
      ASSERT_TRUE(s.ok()) << s.error_message();
      ASSERT_TRUE(rr.decision() == v1::DECISION_CONTINUE ||
                  rr.decision() == v1::DECISION_CHANGE_SYSTEM)
          << rr.decision();
      if (rr.decision() != v1::DECISION_CHANGE_SYSTEM) continue;
      for (const auto& [name, value] : rr.new_system().values()) {
        if (system.at(name) != value) probed.insert(name);
      }
      system = rr.new_system().values();
    }
    EXPECT_EQ(probed.count("inter_op_threads"), declares ? 0u : 1u)
        << "the spec says mutable, the worker can change it only at a restart";
    if (declares) {
      EXPECT_TRUE(probed.count("threads")) << "threads may change mid-trial on both counts";
      EXPECT_FALSE(probed.count("foo")) << "the program does not know foo";
    }
    EXPECT_EQ(store_->GetTrial(trial)->state, TrialState::kRunning) << "nothing failed the trial";
    EXPECT_EQ(store_->GetExperiment(e->id)->state, store::ExperimentState::kRunning);
    ASSERT_TRUE(engine_->CancelExperiment(e->id, "next").ok());
  }
  const auto unknown = Events("trial.system_unknown");
  ASSERT_EQ(unknown.size(), 1u)
      << "once, at the declaring worker's first report; never for an older worker";
  EXPECT_EQ(unknown[0]["parameter"], "foo");
  const std::string reason = unknown[0]["reason"];
  EXPECT_EQ(
      reason.rfind("system.foo: the program running this trial does not know this parameter", 0),
      0u)
      << reason;
  EXPECT_NE(reason.find("batch_size, inter_op_threads, threads"), std::string::npos) << reason;
}

// What the program says it applied is what the step is stored and credited
// with, where it differs from the setting reported.
TEST_F(GrpcWorkerServiceTest, AppliedValuesAreWhatTheStepIsRecordedWith) {
  auto e = engine_->CreateExperiment(Spec(kBuiltin, 1, 1));
  ASSERT_TRUE(e.ok()) << e.status();
  const auto [worker, device] = RegisterCpuWorker("node");
  v1::LeaseResponse lease;
  ASSERT_TRUE(Lease(worker, device, &lease).ok());
  ASSERT_TRUE(lease.has_trial());
  v1::ReportRequest req;
  req.set_worker_id(worker);
  req.set_session(SessionOf(worker));
  req.set_device_id(device);
  req.set_trial_id(lease.trial().trial_id());
  req.set_step(1);
  (*req.mutable_metrics())["loss"] = 0.5;
  req.set_samples_per_sec(1000);
  (*req.mutable_system()->mutable_values())["threads"] = "2";
  (*req.mutable_system()->mutable_values())["inter_op_threads"] = "2";
  (*req.mutable_applied()->mutable_values())["inter_op_threads"] = "1";  // LibTorch had it already
  v1::ReportResponse rr;
  ::grpc::Status s = stub_->Report(Ctx().get(), req, &rr);
  ASSERT_TRUE(s.ok()) << s.error_message();
  auto ms = store_->ListMeasurements(lease.trial().trial_id());
  ASSERT_TRUE(ms.ok());
  ASSERT_EQ(ms->size(), 1u);
  EXPECT_EQ(json::parse(ms->at(0).system_setting_json),
            json({{"threads", 2}, {"inter_op_threads", 1}}));
  auto observed = store_->ListSpeedObservations("", 10);
  ASSERT_EQ(observed->size(), 1u);
  EXPECT_EQ(json::parse(observed->at(0).system_setting_json),
            json({{"threads", 2}, {"inter_op_threads", 1}}));

  // A bad applied value is refused naming its field, and nothing is stored.
  req.set_step(2);
  (*req.mutable_applied()->mutable_values())["threads"] = std::string(200'000, '[');
  s = stub_->Report(Ctx().get(), req, &rr);
  EXPECT_EQ(s.error_code(), ::grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("applied.threads"), std::string::npos) << s.error_message();
  EXPECT_EQ(store_->ListMeasurements(lease.trial().trial_id())->size(), 1u);
}

// threads: {high: 16} on a CPU with 2 usable cores: the trial starts within
// them, the co-tuner never asks for more, a trial.system_capped event names
// the parameter and the device's limit, and nothing fails.
TEST_F(GrpcWorkerServiceTest, ThreadsBeyondTheDevicesCoresAreCappedWithAnEvent) {
  auto e = engine_->CreateExperiment(DeclaredSpec("16"));
  ASSERT_TRUE(e.ok()) << e.status();
  const auto [worker, device] = RegisterCpuWorker("node");  // 2 cores
  v1::LeaseResponse lease;
  ASSERT_TRUE(Lease(worker, device, &lease).ok());
  ASSERT_TRUE(lease.has_trial());
  const int64_t trial = lease.trial().trial_id();
  auto system = lease.trial().system().values();
  EXPECT_LE(std::stoi(system.at("threads")), 2)
      << "the middle of [1, 16] was asked of a 2-core device";
  const auto capped = Events("trial.system_capped");
  ASSERT_EQ(capped.size(), 1u);
  EXPECT_EQ(capped[0]["parameter"], "threads");
  EXPECT_EQ(capped[0]["limit"], 2);
  EXPECT_EQ(capped[0]["device_id"], device);
  EXPECT_EQ(capped[0]["trial_id"], trial);
  const std::string reason = capped[0]["reason"];
  EXPECT_EQ(
      reason.rfind("system.threads: the spec allows up to 16, device " + std::to_string(device), 0),
      0u)
      << reason;
  EXPECT_NE(reason.find("has 2 usable core(s)"), std::string::npos) << reason;

  std::set<int> asked;
  for (int64_t step = 1; step <= 10; ++step) {
    v1::ReportRequest req;
    req.set_worker_id(worker);
    req.set_session(SessionOf(worker));
    req.set_device_id(device);
    req.set_trial_id(trial);
    req.set_step(step);
    (*req.mutable_metrics())["loss"] = 1.0 / step;
    req.set_samples_per_sec(1000 *
                            std::stod(system.at("threads")));  // more threads, faster: probes go up
    *req.mutable_system()->mutable_values() = system;
    v1::ReportResponse rr;
    ::grpc::Status s = stub_->Report(Ctx().get(), req, &rr);
    ASSERT_TRUE(s.ok()) << s.error_message();
    if (rr.decision() == v1::DECISION_CHANGE_SYSTEM) system = rr.new_system().values();
    asked.insert(std::stoi(system.at("threads")));
  }
  EXPECT_LE(*asked.rbegin(), 2) << "asked for more threads than the device's cores";
  EXPECT_EQ(asked.count(2), 1u) << "it still co-tunes within them";
  EXPECT_EQ(store_->GetTrial(trial)->state, TrialState::kRunning);
  EXPECT_EQ(store_->GetExperiment(e->id)->state, store::ExperimentState::kRunning);
}

// One heartbeat renews at most kMaxTrialsPerHeartbeat leases (one per
// device a worker may have); each costs a statement.
TEST_F(GrpcWorkerServiceTest, AHeartbeatCarriesAtMostTheLimitOfTrials) {
  const auto [worker, device] = RegisterCpuWorker("node");
  v1::HeartbeatRequest hb;
  hb.set_worker_id(worker);
  hb.set_session(SessionOf(worker));
  for (size_t i = 0; i < kMaxTrialsPerHeartbeat; ++i)
    hb.add_trial_ids(100'000 + static_cast<int64_t>(i));
  v1::HeartbeatResponse resp;
  ::grpc::Status s = stub_->Heartbeat(Ctx().get(), hb, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.stop_trial_ids_size(), static_cast<int>(kMaxTrialsPerHeartbeat))
      << "unknown trials are to stop";
  hb.add_trial_ids(1);
  resp.Clear();
  s = stub_->Heartbeat(Ctx().get(), hb, &resp);
  EXPECT_EQ(s.error_code(), ::grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(
      s.error_message().find("trial_ids: 257 trials in one heartbeat, more than the limit of 256"),
      std::string::npos)
      << s.error_message();
}

// Completing a finished trial again: the owner's same completion (a
// retried call) is acknowledged; other metrics, or another worker, are
// refused, and neither changes the stored trial.
TEST_F(GrpcWorkerServiceTest, CompletingAFinishedTrialAgainIsOkOnlyForTheOwnersSameCompletion) {
  auto e = engine_->CreateExperiment(Spec(kBuiltin, 3, 1));
  ASSERT_TRUE(e.ok()) << e.status();
  const auto [owner, device] = RegisterCpuWorker("owner");
  const auto [other, other_device] = RegisterCpuWorker("other");
  v1::LeaseResponse lease;
  ASSERT_TRUE(Lease(owner, device, &lease).ok());
  ASSERT_TRUE(lease.has_trial());
  const int64_t trial = lease.trial().trial_id();
  auto complete = [&](int64_t worker, double loss) {
    v1::CompleteRequest req;
    req.set_worker_id(worker);
    req.set_session(SessionOf(worker));
    req.set_trial_id(trial);
    (*req.mutable_final_metrics())["loss"] = loss;
    v1::CompleteResponse resp;
    return stub_->Complete(Ctx().get(), req, &resp);
  };
  ASSERT_TRUE(complete(owner, 0.25).ok());
  ::grpc::Status s = complete(owner, 0.25);
  EXPECT_TRUE(s.ok()) << "a retried completion: " << s.error_message();
  s = complete(owner, 0.01);
  EXPECT_EQ(s.error_code(), ::grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("other final metrics"), std::string::npos) << s.error_message();
  s = complete(other, 0.25);
  EXPECT_EQ(s.error_code(), ::grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("not 'worker/" + std::to_string(other) + "'"), std::string::npos)
      << s.error_message();
  auto t = store_->GetTrial(trial);
  EXPECT_EQ(t->state, TrialState::kCompleted);
  EXPECT_EQ(json::parse(t->final_metrics_json), json({{"loss", 0.25}}));
}

TEST(GrpcServerTest, AnUnusableAddressIsAnErrorNamingIt) {
  hpo::v1::WorkerService::Service unimplemented;
  auto bad = GrpcServer::Start("256.0.0.1:notaport", &unimplemented);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("256.0.0.1:notaport"), std::string::npos) << bad.status();

  auto first = GrpcServer::Start("127.0.0.1:0", &unimplemented);
  ASSERT_TRUE(first.ok()) << first.status();
  hpo::v1::WorkerService::Service other;
  const std::string taken = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = GrpcServer::Start(taken, &other);
  ASSERT_FALSE(second.ok()) << "two servers on one port";
  EXPECT_NE(second.status().message().find(taken), std::string::npos) << second.status();
}

TEST(GrpcStatusTest, EveryCodeRoundTripsWithItsMessage) {
  const std::vector<std::pair<StatusCode, ::grpc::StatusCode>> pairs = {
      {StatusCode::kCancelled, ::grpc::StatusCode::CANCELLED},
      {StatusCode::kInvalidArgument, ::grpc::StatusCode::INVALID_ARGUMENT},
      {StatusCode::kDeadlineExceeded, ::grpc::StatusCode::DEADLINE_EXCEEDED},
      {StatusCode::kNotFound, ::grpc::StatusCode::NOT_FOUND},
      {StatusCode::kAlreadyExists, ::grpc::StatusCode::ALREADY_EXISTS},
      {StatusCode::kPermissionDenied, ::grpc::StatusCode::PERMISSION_DENIED},
      {StatusCode::kResourceExhausted, ::grpc::StatusCode::RESOURCE_EXHAUSTED},
      {StatusCode::kFailedPrecondition, ::grpc::StatusCode::FAILED_PRECONDITION},
      {StatusCode::kAborted, ::grpc::StatusCode::ABORTED},
      {StatusCode::kUnimplemented, ::grpc::StatusCode::UNIMPLEMENTED},
      {StatusCode::kInternal, ::grpc::StatusCode::INTERNAL},
      {StatusCode::kUnavailable, ::grpc::StatusCode::UNAVAILABLE},
      {StatusCode::kDataLoss, ::grpc::StatusCode::DATA_LOSS},
      {StatusCode::kUnauthenticated, ::grpc::StatusCode::UNAUTHENTICATED},
  };
  for (const auto& [ours, theirs] : pairs) {
    const Status s(ours, "trial 7: why");
    const ::grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(g.error_code(), theirs) << s;
    EXPECT_EQ(g.error_message(), "trial 7: why");
    const Status back = FromGrpcStatus(g);
    EXPECT_EQ(back.code(), ours) << s;
    EXPECT_EQ(back.message(), "trial 7: why");
  }
  EXPECT_TRUE(ToGrpcStatus(Status::OK()).ok());
  EXPECT_TRUE(FromGrpcStatus(::grpc::Status::OK).ok());
  EXPECT_EQ(FromGrpcStatus(::grpc::Status(::grpc::StatusCode::UNKNOWN, "?")).code(),
            StatusCode::kInternal);
}

// Worker identity: a token holder who read a worker's (host, instance) from
// GET /api/v1/workers registers under it.

// Registers a one-CPU worker under (host, instance), presenting `secret`.
::grpc::Status RegisterAs(v1::WorkerService::Stub& stub, const std::string& host,
                          const std::string& instance, const std::string& secret,
                          v1::RegisterResponse* resp) {
  v1::RegisterRequest req;
  req.set_host(host);
  req.set_instance(instance);
  req.set_identity_secret(secret);
  v1::Device* d = req.add_devices();
  d->set_kind(v1::DEVICE_KIND_CPU);
  d->set_name("Test CPU");
  d->set_cores(2);
  ::grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  ctx.AddMetadata("authorization", kAuth);
  return stub.Register(&ctx, req, resp);
}

// While the worker is live, registering its identity without its secret is
// refused and changes nothing: the worker's session, lease and trial stay
// its own; the worker itself, restarted with its secret, is the same worker.
// (Failed before: the caller got the worker's id and a new session, the
// worker's next heartbeat was refused, and the caller completed its trial.)
TEST_F(GrpcWorkerServiceTest, RegisteringALiveWorkersIdentityWithoutItsSecretIsRefused) {
  auto e = engine_->CreateExperiment(Spec(kBuiltin, 3, 1));
  ASSERT_TRUE(e.ok()) << e.status();
  v1::RegisterResponse victim;
  ASSERT_TRUE(RegisterAs(*stub_, "node-7", "pod-a", "", &victim).ok());
  EXPECT_EQ(victim.identity_secret().size(), 64u) << "a new identity comes with its secret";
  EXPECT_NE(victim.identity_secret(), victim.session());
  {
    std::lock_guard lock(sessions_mu_);
    sessions_[victim.worker_id()] = victim.session();
  }
  v1::LeaseResponse lease;
  ASSERT_TRUE(Lease(victim.worker_id(), victim.device_ids(0), &lease).ok());
  ASSERT_TRUE(lease.has_trial());
  const int64_t trial = lease.trial().trial_id();

  for (const std::string& secret : {std::string(), std::string(64, 'a'), victim.session(),
                                    victim.identity_secret().substr(0, 63)}) {
    v1::RegisterResponse taker;
    ::grpc::Status s = RegisterAs(*stub_, "node-7", "pod-a", secret, &taker);
    EXPECT_EQ(s.error_code(), ::grpc::StatusCode::ALREADY_EXISTS) << s.error_message();
    EXPECT_NE(s.error_message().find("host 'node-7', instance 'pod-a' is worker " +
                                     std::to_string(victim.worker_id())),
              std::string::npos)
        << s.error_message();
    EXPECT_NE(s.error_message().find("identity secret"), std::string::npos) << s.error_message();
    EXPECT_NE(s.error_message().find("another --instance"), std::string::npos) << "says what to do";
    EXPECT_EQ(s.error_message().find(victim.identity_secret()), std::string::npos);
    EXPECT_TRUE(taker.session().empty() && taker.worker_id() == 0);
  }
  EXPECT_EQ(Events("worker.registered").size(), 1u);

  // The victim carries on: heartbeat, report, complete.
  v1::HeartbeatRequest hb;
  hb.set_worker_id(victim.worker_id());
  hb.set_session(victim.session());
  hb.add_trial_ids(trial);
  v1::HeartbeatResponse hr;
  ::grpc::Status s = stub_->Heartbeat(Ctx().get(), hb, &hr);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(hr.stop_trial_ids_size(), 0);
  v1::ReportResponse rr;
  s = Report(victim.worker_id(), trial, 1, 0.5, &rr);
  ASSERT_TRUE(s.ok()) << s.error_message();

  // The victim restarted, with its secret: the same worker, a new session.
  v1::RegisterResponse again;
  s = RegisterAs(*stub_, "node-7", "pod-a", victim.identity_secret(), &again);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(again.worker_id(), victim.worker_id());
  EXPECT_EQ(again.device_ids(0), victim.device_ids(0));
  EXPECT_NE(again.session(), victim.session());
  EXPECT_TRUE(again.identity_secret().empty()) << "the secret it has stays the one";
  v1::RegisterResponse third;
  EXPECT_TRUE(RegisterAs(*stub_, "node-7", "pod-a", victim.identity_secret(), &third).ok())
      << "and stays valid";
}

// Once the worker is no longer live (unseen for a lease timeout), its
// identity goes to the next registration of it, as a new worker: the old
// id, its session and its lease stay the old worker's, so the caller cannot
// touch its trial. The listing shows the old worker without its instance.
TEST_F(GrpcWorkerServiceTest, AnIdentityOutOfUseGoesToANewWorkerNeverToTheOldId) {
  auto e = engine_->CreateExperiment(Spec(kBuiltin, 3, 1));
  ASSERT_TRUE(e.ok()) << e.status();
  v1::RegisterResponse old;
  ASSERT_TRUE(RegisterAs(*stub_, "node-7", "pod-a", "", &old).ok());
  {
    std::lock_guard lock(sessions_mu_);
    sessions_[old.worker_id()] = old.session();
  }
  v1::LeaseResponse lease;
  ASSERT_TRUE(Lease(old.worker_id(), old.device_ids(0), &lease).ok());
  ASSERT_TRUE(lease.has_trial());
  const int64_t trial = lease.trial().trial_id();
  clock_.Advance(engine_->options().worker_lease_ms + 1);

  v1::RegisterResponse taker;
  ::grpc::Status s = RegisterAs(*stub_, "node-7", "pod-a", "", &taker);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_NE(taker.worker_id(), old.worker_id());
  EXPECT_NE(taker.device_ids(0), old.device_ids(0));
  EXPECT_EQ(taker.identity_secret().size(), 64u);
  EXPECT_NE(taker.identity_secret(), old.identity_secret());
  const auto registered = Events("worker.registered");
  ASSERT_EQ(registered.size(), 2u);
  EXPECT_EQ(registered[1]["took_identity_of"], old.worker_id());
  EXPECT_EQ(store_->GetWorker(old.worker_id())->instance, "");
  EXPECT_EQ(store_->GetWorker(taker.worker_id())->instance, "pod-a");

  // The old worker's trial is not the new one's to report or complete.
  v1::CompleteRequest complete;
  complete.set_worker_id(taker.worker_id());
  complete.set_session(taker.session());
  complete.set_trial_id(trial);
  (*complete.mutable_final_metrics())["loss"] = 0.01;
  v1::CompleteResponse cr;
  s = stub_->Complete(Ctx().get(), complete, &cr);
  EXPECT_EQ(s.error_code(), ::grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  v1::ReportResponse rr;
  s = Report(taker.worker_id(), trial, 1, 0.01, &rr, taker.session());
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(store_->ListMeasurements(trial)->empty());
  // The old worker, back with its session, is still itself.
  v1::HeartbeatRequest hb;
  hb.set_worker_id(old.worker_id());
  hb.set_session(old.session());
  v1::HeartbeatResponse hr;
  s = stub_->Heartbeat(Ctx().get(), hb, &hr);
  EXPECT_TRUE(s.ok()) << s.error_message();
  // And the identity's new holder, now live, is refused to the old secret.
  s = RegisterAs(*stub_, "node-7", "pod-a", old.identity_secret(), &taker);
  EXPECT_EQ(s.error_code(), ::grpc::StatusCode::ALREADY_EXISTS) << s.error_message();
}

}  // namespace
}  // namespace hpo::server
