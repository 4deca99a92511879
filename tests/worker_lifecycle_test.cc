// Workers that go away, on SQLite and PostgreSQL: the
// engine marks a worker unseen for N lease timeouts gone, once across
// servers; a worker that registers again under its identity is the same
// worker on every server; and the real hpo-server drops gone workers from
// its fleet (REST, /metrics), takes one back under its old id, and prunes
// it after --worker-retention while its trials and measured speed stay.
// Times come from a fake clock for the engine and from short configured
// timeouts, waited for by polling, for the server: nothing asserts a duration.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/http_client.h"
#include "hpo/v1/worker.grpc.pb.h"
#include "server/engine/engine.h"
#include "testing/server_process.h"
#include "testing/store_backends.h"
#include "tests/event_log.h"

namespace hpo {
namespace {

using nlohmann::json;
namespace v1 = hpo::v1;

template <typename Backend>
class WorkerLifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HPO_REQUIRE_BACKEND(Backend);
    backend_ = std::make_unique<Backend>();
  }

  std::unique_ptr<store::Store> OpenStore() {
    store::StoreOptions o;
    o.clock = clock_.fn();
    auto s = store::OpenStore(backend_->url(), o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  server::EngineOptions Options() {
    server::EngineOptions o;
    o.clock = clock_.fn();
    o.worker_lease_ms = 1000;
    o.worker_gone_after = 3;
    o.worker_retention = std::chrono::milliseconds(0);
    o.on_event = events_.Recorder();
    return o;
  }
  static server::WorkerRegistration Registration(const std::string& host,
                                                 const std::string& instance) {
    server::WorkerRegistration w;
    w.host = host;
    w.instance = instance;
    store::DeviceInfo d;
    d.name = "cpu";
    d.cores = 1;
    d.benchmark_gflops = 10;
    w.devices.push_back(d);
    return w;
  }
  std::vector<json> EventsOf(const std::string& type) const { return events_.Of(type); }

  testing::FakeClock clock_;
  std::unique_ptr<Backend> backend_;
  testing::EventLog events_;
};

using Backends = ::testing::Types<testing::SqliteBackend, testing::PostgresBackend>;
struct BackendNames {
  template <typename T>
  static std::string GetName(int) {
    return T::kName;
  }
};
TYPED_TEST_SUITE(WorkerLifecycleTest, Backends, BackendNames);

TYPED_TEST(WorkerLifecycleTest, AWorkerUnseenForNLeaseTimeoutsIsGoneOnceAcrossServers) {
  auto store_a = this->OpenStore(), store_b = this->OpenStore();
  ASSERT_TRUE(store_a && store_b);
  server::Engine one(*store_a, this->Options()), two(*store_b, this->Options());
  auto a = one.RegisterWorker(this->Registration("node", "pod-a"));
  auto b = one.RegisterWorker(this->Registration("node", "pod-b"));
  ASSERT_TRUE(a.ok() && b.ok());
  const server::WorkerCaller caller_a{a->worker.id, a->session}, caller_b{b->worker.id, b->session};

  this->clock_.Advance(1500);  // past one lease timeout: silent, not gone
  ASSERT_TRUE(one.SweepWorkers().ok());
  EXPECT_TRUE(this->EventsOf("worker.gone").empty());
  EXPECT_EQ(one.WorkerState(*store_a->GetWorker(a->worker.id)), "silent");
  ASSERT_TRUE(two.Heartbeat(caller_b, {}).ok());
  EXPECT_EQ(one.WorkerState(*store_a->GetWorker(b->worker.id)), "live");

  this->clock_.Advance(1600);  // a: 3.1 lease timeouts unseen; b: 1.6
  ASSERT_TRUE(two.SweepWorkers().ok());
  ASSERT_TRUE(one.SweepWorkers().ok());
  auto gone = this->EventsOf("worker.gone");
  ASSERT_EQ(gone.size(), 1u) << "one announcement from either server";
  EXPECT_EQ(gone[0]["worker_id"], a->worker.id);
  EXPECT_EQ(gone[0]["instance"], "pod-a");
  EXPECT_EQ(gone[0]["last_seen_ms"], a->worker.last_seen_ms);
  EXPECT_EQ(one.WorkerState(*store_a->GetWorker(a->worker.id)), "gone");

  // A gone worker that calls again is back.
  ASSERT_TRUE(one.Heartbeat(caller_a, {}).ok());
  EXPECT_EQ(one.WorkerState(*store_a->GetWorker(a->worker.id)), "live");
}

// The session of a registration made through one server is accepted by
// another that already knew the worker's older one (failed before: the
// other server kept the first registration's session for good, so a
// re-registered worker was refused there and registered again, forever).
TYPED_TEST(WorkerLifecycleTest, ARegistrationAgainCountsOnEveryServer) {
  auto store_a = this->OpenStore(), store_b = this->OpenStore();
  ASSERT_TRUE(store_a && store_b);
  server::Engine one(*store_a, this->Options()), two(*store_b, this->Options());
  auto first = one.RegisterWorker(this->Registration("node", "pod-a"));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(two.Heartbeat({first->worker.id, first->session}, {}).ok());

  ASSERT_EQ(first->identity_secret.size(), 64u);
  server::WorkerRegistration restarted = this->Registration("node", "pod-a");
  restarted.identity_secret = first->identity_secret;
  auto again = one.RegisterWorker(restarted);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->identity_secret.empty()) << "the identity keeps the secret it has";
  EXPECT_EQ(again->worker.id, first->worker.id);
  EXPECT_EQ(again->worker.devices.at(0).id, first->worker.devices.at(0).id);
  EXPECT_NE(again->session, first->session);
  auto hb = two.Heartbeat({again->worker.id, again->session}, {});
  EXPECT_TRUE(hb.ok()) << hb.status();
  auto lease =
      two.LeaseForWorker({again->worker.id, again->session}, again->worker.devices.at(0).id);
  EXPECT_TRUE(lease.ok()) << lease.status();
  // The older session is the worker's no more, on either server.
  EXPECT_TRUE(one.Heartbeat({first->worker.id, first->session}, {}).status().code() ==
              StatusCode::kPermissionDenied);
  EXPECT_TRUE(two.Heartbeat({first->worker.id, first->session}, {}).status().code() ==
              StatusCode::kPermissionDenied);
  EXPECT_EQ(store_a->ListWorkers()->size(), 1u);
  EXPECT_EQ(this->EventsOf("worker.registered").size(), 2u);
}

// --- the real server -------------------------------------------------------

const char* kSpec = R"(
name: lifecycle
objective: {metric: loss, direction: minimize}
spaces:
  - name: a
    params: {x: {type: float, low: -1, high: 1}}
budget: {max_trials: 4, max_parallel: 1, steps_per_trial: 2}
executor: {builtin: {trainer: fashion-mnist-mlp}}
)";

// A fake worker speaking the real protocol.
class FakeWorker {
 public:
  FakeWorker(int port, std::string host, std::string instance)
      : stub_(v1::WorkerService::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                             grpc::InsecureChannelCredentials()))),
        host_(std::move(host)),
        instance_(std::move(instance)) {}

  grpc::Status Register() {
    v1::RegisterRequest req;
    req.set_host(host_);
    req.set_instance(instance_);
    req.set_identity_secret(identity_secret);
    auto* d = req.add_devices();
    d->set_kind(v1::DEVICE_KIND_CPU);
    d->set_name("test cpu");
    d->set_cores(1);
    d->set_benchmark_gflops(10);
    v1::RegisterResponse res;
    grpc::ClientContext ctx;
    Auth(ctx);
    grpc::Status s = stub_->Register(&ctx, req, &res);
    if (s.ok()) {
      worker_id = res.worker_id();
      device_id = res.device_ids(0);
      session = res.session();
      if (!res.identity_secret().empty()) identity_secret = res.identity_secret();
    }
    return s;
  }
  grpc::Status Heartbeat(const std::string& with_session) {
    v1::HeartbeatRequest req;
    req.set_worker_id(worker_id);
    req.set_session(with_session);
    v1::HeartbeatResponse res;
    grpc::ClientContext ctx;
    Auth(ctx);
    return stub_->Heartbeat(&ctx, req, &res);
  }
  // Leases a trial and runs it to completion, reporting its speed.
  void RunOneTrial() {
    v1::LeaseRequest lr;
    lr.set_worker_id(worker_id);
    lr.set_session(session);
    lr.set_device_id(device_id);
    v1::LeaseResponse lres;
    {
      grpc::ClientContext ctx;
      Auth(ctx);
      grpc::Status s = stub_->Lease(&ctx, lr, &lres);
      ASSERT_TRUE(s.ok()) << s.error_message();
      ASSERT_TRUE(lres.has_trial());
    }
    for (int step = 0; step < 2; ++step) {
      v1::ReportRequest r;
      r.set_worker_id(worker_id);
      r.set_session(session);
      r.set_trial_id(lres.trial().trial_id());
      r.set_step(step);
      (*r.mutable_metrics())["loss"] = 1.0 / (step + 1);
      r.set_samples_per_sec(100);
      r.set_device_id(device_id);
      v1::ReportResponse res;
      grpc::ClientContext ctx;
      Auth(ctx);
      grpc::Status s = stub_->Report(&ctx, r, &res);
      ASSERT_TRUE(s.ok()) << s.error_message();
    }
    v1::CompleteRequest c;
    c.set_worker_id(worker_id);
    c.set_session(session);
    c.set_trial_id(lres.trial().trial_id());
    v1::CompleteResponse cres;
    grpc::ClientContext ctx;
    Auth(ctx);
    grpc::Status s = stub_->Complete(&ctx, c, &cres);
    ASSERT_TRUE(s.ok()) << s.error_message();
    trial_id = lres.trial().trial_id();
  }

  int64_t worker_id = 0, device_id = 0, trial_id = 0;
  std::string session;
  std::string
      identity_secret;  // as the server issued it; a restarted worker keeps it (its id file)

 private:
  static void Auth(grpc::ClientContext& ctx) {
    ctx.AddMetadata("authorization", "Bearer tok");
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  }
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  std::string host_, instance_;
};

// Heartbeats in the background (every 100 ms) until destroyed: a live worker.
class KeepAlive {
 public:
  explicit KeepAlive(FakeWorker& w)
      : thread_([this, &w] {
          while (!stop_) {
            w.Heartbeat(w.session);
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
          }
        }) {}
  ~KeepAlive() {
    stop_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

template <typename Backend>
class ServerLifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HPO_REQUIRE_BACKEND(Backend);
    backend_ = std::make_unique<Backend>();
    dir_ = ::testing::TempDir() + "/hpo-lifecycle-" + std::string(Backend::kName) + "-" +
           std::to_string(getpid());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  // (Re)starts the server on the test's store with a one-second lease
  // timeout: a worker is gone after one unheard second.
  void StartServer(const std::string& retention_s) {
    server_.reset();
    server_ = std::make_unique<testing::ServerProcess>(
        HPO_SERVER_BIN, dir_,
        std::vector<std::string>{"--store", backend_->url(), "--token", "tok", "--lease-timeout",
                                 "1", "--worker-gone-after", "1", "--worker-retention",
                                 retention_s});
    ASSERT_TRUE(server_->Start().ok()) << server_->Log();
  }
  json Get(const std::string& path) {
    HttpClientOptions o;
    o.port = server_->http_port();
    o.token = "tok";
    auto r = HttpRequestOnce(o, "GET", path);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return json();
    EXPECT_EQ(r->status, 200) << r->body;
    return path == "/metrics" ? json(r->body) : json::parse(r->body, nullptr, false);
  }
  static const json* Find(const json& workers, int64_t id) {
    for (const auto& w : workers) {
      if (w["id"] == id) return &w;
    }
    return nullptr;
  }
  // Polls (every 100 ms, up to 60 s) until `done` holds.
  static bool Eventually(const std::function<bool()>& done) {
    for (int i = 0; i < 600; ++i) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  // The value of an unlabelled /metrics series, or -1.
  double Metric(const std::string& name) {
    const std::string text = Get("/metrics").template get<std::string>();
    const std::string line = "\n" + name + " ";
    auto at = text.find(line);
    return at == std::string::npos ? -1 : std::stod(text.substr(at + line.size()));
  }

  std::unique_ptr<Backend> backend_;
  std::string dir_;
  std::unique_ptr<testing::ServerProcess> server_;
};
TYPED_TEST_SUITE(ServerLifecycleTest, Backends, BackendNames);

TYPED_TEST(ServerLifecycleTest,
           AGoneWorkerLeavesTheFleetComesBackUnderItsIdAndIsPrunedKeepingItsTrials) {
  ASSERT_NO_FATAL_FAILURE(this->StartServer("0"));  // never pruned, for now
  HttpClientOptions http;
  http.port = this->server_->http_port();
  http.token = "tok";
  auto created = HttpRequestOnce(http, "POST", "/api/v1/experiments", kSpec);
  ASSERT_TRUE(created.ok());
  ASSERT_EQ(created->status, 201) << created->body;
  const int64_t experiment = json::parse(created->body)["id"];

  FakeWorker a(this->server_->grpc_port(), "node", "pod-a"),
      b(this->server_->grpc_port(), "node", "pod-b");
  ASSERT_TRUE(a.Register().ok());
  ASSERT_TRUE(b.Register().ok());
  ASSERT_NO_FATAL_FAILURE(a.RunOneTrial());
  const int64_t a_id = a.worker_id, a_device = a.device_id;
  const std::string old_session = a.session;
  {
    KeepAlive live(b);
    // a stops calling: it leaves the fleet's list and count.
    ASSERT_TRUE(this->Eventually([&] {
      const json list = this->Get("/api/v1/workers");
      return list["workers"].size() == 1 && list["workers"][0]["id"] == b.worker_id;
    })) << this->server_->Log();
    const json all = this->Get("/api/v1/workers?include_gone=true")["workers"];
    ASSERT_EQ(all.size(), 2u) << all.dump();
    ASSERT_NE(this->Find(all, a_id), nullptr);
    EXPECT_EQ((*this->Find(all, a_id))["state"], "gone");
    EXPECT_TRUE((*this->Find(all, a_id))["gone_ms"].is_number());
    EXPECT_EQ((*this->Find(all, b.worker_id))["state"], "live");
    EXPECT_EQ(this->Metric("hpo_workers_gone"), 1);
    EXPECT_EQ(this->Metric("hpo_workers_gone_total"), 1);
    EXPECT_EQ(this->Metric("hpo_workers"), 1) << "only the live one";
    auto bad = HttpRequestOnce(http, "GET", "/api/v1/workers?include_gone=maybe");
    ASSERT_TRUE(bad.ok());
    EXPECT_EQ(bad->status, 400);
    EXPECT_NE(bad->body.find("include_gone"), std::string::npos) << bad->body;

    // a comes back (a restarted process: same host and instance).
    ASSERT_TRUE(a.Register().ok());
    EXPECT_EQ(a.worker_id, a_id);
    EXPECT_EQ(a.device_id, a_device);
    EXPECT_EQ(a.Heartbeat(old_session).error_code(), grpc::StatusCode::PERMISSION_DENIED);
    const json back = this->Get("/api/v1/workers")["workers"];
    ASSERT_EQ(back.size(), 2u) << back.dump();
    ASSERT_NE(this->Find(back, a_id), nullptr);
    EXPECT_EQ((*this->Find(back, a_id))["state"], "live");
    EXPECT_EQ((*this->Find(back, a_id))["instance"], "pod-a");
    EXPECT_EQ((*this->Find(back, a_id))["devices"][0]["measured"].size(), 1u)
        << "its speed history stays its own";
    EXPECT_EQ(this->Get("/api/v1/workers?include_gone=true")["workers"].size(), 2u)
        << "no second row";
  }

  // With a retention of a second, a is deleted once gone again (b is too,
  // now that nothing heartbeats it); what they did stays.
  ASSERT_NO_FATAL_FAILURE(this->StartServer("1"));
  ASSERT_TRUE(this->Eventually([&] {
    return this->Get("/api/v1/workers?include_gone=true")["workers"].empty();
  })) << this->server_->Log();
  const json trials =
      this->Get("/api/v1/experiments/" + std::to_string(experiment) + "/trials")["trials"];
  bool found = false;
  for (const auto& t : trials) {
    if (t["id"] == a.trial_id) {
      found = true;
      EXPECT_EQ(t["state"], "completed") << t.dump();
    }
  }
  EXPECT_TRUE(found) << trials.dump();
  EXPECT_NE(
      this->Get("/metrics").template get<std::string>().find("hpo_device_samples_per_second{"),
      std::string::npos)
      << "the measured speed outlives the device";
  EXPECT_EQ(this->Metric("hpo_workers"), 0);
  EXPECT_EQ(this->Metric("hpo_workers_gone"), 0);
}

}  // namespace
}  // namespace hpo
