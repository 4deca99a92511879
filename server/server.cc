#include "server/server.h"

#include <malloc.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <utility>

#include "server/metrics/store_gauges.h"

namespace hpo::server {
namespace {

using Clock = std::chrono::steady_clock;

// What an operator reads in the log of this server's own events (another
// replica logs its own): an experiment's start and end, with why it ended,
// and a trial handed out again, at info level. Trials are named as users
// name them, by their number within the experiment, with their id.
void LogEvent(const std::string& type, const nlohmann::json& data) {
  auto text = [&](const char* key) { return data.value(key, std::string()); };
  auto id = [&](const char* key) { return data.value(key, int64_t{0}); };
  if (type == "experiment.created") {
    spdlog::info("experiment {} ({}) created", id("experiment_id"), text("name"));
  } else if (type == "experiment.finished") {
    const std::string why = text("reason");
    spdlog::info("experiment {} ended: {}{}", id("experiment_id"), text("state"),
                 why.empty() ? "" : " (" + why + ")");
  } else if (type == "trial.requeued") {
    spdlog::info("trial {} of experiment {} (id {}) back to {}: {} after attempt {}", id("number"),
                 id("experiment_id"), id("trial_id"), text("state"), text("reason"), id("attempt"));
  }
}

using EventFn = std::function<void(std::string type, const nlohmann::json& data)>;

// The server's counters of its own events, and what it does with each:
// logs it, counts it and publishes it through the relay (to this server's
// bus and the other replicas'), then hands it to `then`.
EventFn CountAndPublish(metrics::Registry& registry, EventRelay& relay, const EventFn& then) {
  const char* const kFinishedHelp = "Trials finished by this server, by state";
  metrics::Counter* completed =
      &registry.counter("hpo_trials_finished_total", kFinishedHelp, {{"state", "completed"}});
  metrics::Counter* pruned =
      &registry.counter("hpo_trials_finished_total", kFinishedHelp, {{"state", "pruned"}});
  metrics::Counter* failed =
      &registry.counter("hpo_trials_finished_total", kFinishedHelp, {{"state", "failed"}});
  metrics::Counter* reports =
      &registry.counter("hpo_reports_total", "Steps reported to this server");
  metrics::Counter* requeued =
      &registry.counter("hpo_trials_requeued_total",
                        "Trials this server put back to pending because their lease expired");
  return [=, relay = &relay](std::string type, const nlohmann::json& data) {
    LogEvent(type, data);
    if (type == "trial.reported") reports->Increment();
    if (type == "trial.requeued") requeued->Increment();
    if (type == "trial.finished") {
      const std::string state = data.value("state", "");
      if (state == "completed") completed->Increment();
      if (state == "pruned") pruned->Increment();
      if (state == "failed") failed->Increment();
    }
    relay->Publish(type, data);
    if (then) then(std::move(type), data);
  };
}

// Opens the store, which applies its migrations, and logs its schema
// version.
Result<std::unique_ptr<store::Store>> OpenStoreAndSay(const std::string& url,
                                                      const store::StoreOptions& options) {
  HPO_ASSIGN_OR_RETURN(auto store, store::OpenStore(url, options));
  HPO_ASSIGN_OR_RETURN(const int64_t version, store->SchemaVersion());
  spdlog::info("store {} ({}) at schema version {}", store->display_url(), store->backend(),
               version);
  return store;
}

}  // namespace

Result<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  std::unique_ptr<Server> server(new Server(std::move(options)));
  HPO_RETURN_IF_ERROR(server->Build());
  if (server->options_.listen) HPO_RETURN_IF_ERROR(server->Listen());
  return server;
}

Status Server::Migrate(const ServerOptions& options) {
  return OpenStoreAndSay(options.store_url, options.store).status();
}

Status Server::Build() {
  store::StoreOptions store_options = options_.store;
  auto& batch_calls = metrics_.histogram(
      "hpo_store_group_commit_calls",
      "Store calls committed together in one group-commit transaction", {1, 2, 4, 8, 16, 32, 64});
  store_options.on_group_commit = [&batch_calls](size_t calls) {
    batch_calls.Observe(static_cast<double>(calls));
  };
  HPO_ASSIGN_OR_RETURN(store_, OpenStoreAndSay(options_.store_url, store_options));
  if (options_.artifacts) {
    HPO_ASSIGN_OR_RETURN(artifacts_,
                         store::OpenArtifactStore(options_.artifacts_location, options_.store_url,
                                                  *options_.artifacts));
    spdlog::info("checkpoints in {} (at most {} MiB each)", artifacts_->description(),
                 options_.artifacts->max_checkpoint_bytes >> 20);
  }
  if (options_.wrap_store) wrapped_ = options_.wrap_store(*store_);

  // Events go to this server's subscribers and, on PostgreSQL, to the
  // other replicas' (and theirs come here).
  relay_ = std::make_unique<EventRelay>(*store_, events_);
  EngineOptions engine_options = options_.engine;
  engine_options.metrics = &metrics_;
  engine_options.artifacts = artifacts_.get();
  engine_options.on_event = CountAndPublish(metrics_, *relay_, engine_options.on_event);
  StoreGaugeOptions gauge_options;
  gauge_options.live_for = std::chrono::milliseconds(engine_options.worker_lease_ms);
  RegisterStoreGauges(metrics_, *store_,
                      gauge_options);  // read from the store: every replica agrees
  engine_ = std::make_unique<Engine>(engine_store(), std::move(engine_options));
  api_ = std::make_unique<RestApi>(*engine_, events_, metrics_, options_.api);
  WorkerServiceOptions worker_options = options_.grpc;
  worker_options.token = options_.api.token;
  worker_service_ = std::make_unique<WorkerServiceImpl>(*engine_, worker_options);
  return Status::OK();
}

Status Server::Listen() {
  HttpServerOptions http_options = options_.http;
  api_->Attach(http_options);
  HPO_ASSIGN_OR_RETURN(http_, HttpServer::Start(http_options, [this](const HttpRequest& r) {
                         return api_->Handle(r);
                       }));
  HPO_ASSIGN_OR_RETURN(grpc_, GrpcServer::Start(options_.grpc_address, worker_service_.get(),
                                                GrpcTlsFiles{http_options.tls_cert_file,
                                                             http_options.tls_key_file}));
  const bool tls = !http_options.tls_cert_file.empty();
  spdlog::info("{} listening on {}:{}", tls ? "https" : "http", http_options.address,
               http_->port());
  spdlog::info("grpc{} listening on {}", tls ? " (TLS)" : "",
               options_.grpc_address.substr(0, options_.grpc_address.rfind(':') + 1) +
                   std::to_string(grpc_->port()));
  if (!options_.api.token.empty()) {
    spdlog::info("bearer token required on every call but /healthz");
  } else {
    spdlog::warn(
        "no token: anyone who can reach {}:{} or {} may submit experiments, and a command "
        "experiment runs its program on every worker (set HPO_TOKEN or --token-file)",
        http_options.address, http_->port(), options_.grpc_address);
  }
  if (!options_.port_file.empty()) {
    const std::string tmp = options_.port_file + ".tmp";
    std::ofstream(tmp) << nlohmann::json{{"http", http_->port()}, {"grpc", grpc_->port()}}.dump()
                       << "\n";
    std::rename(tmp.c_str(), options_.port_file.c_str());  // readers never see half a file
  }
  ticker_ = std::thread([this] { Housekeep(); });
  return Status::OK();
}

// Requeues expired leases every kReclaimMs (a dead worker's trial is
// pending again within that of its lease's expiry, not up to a whole tick
// later), ends experiments at their budget every tick_ms, and hands the
// free pages of malloc's arenas back to the system every trim_memory_s: a
// whole read of a big experiment (at a start, after a requeue) and a REST
// read of its trials peak at a hundred megabytes that glibc would
// otherwise keep (bench/README.md, soak: 138 MB kept after reads of 10,000
// trials, 37 MB after a trim). A trim that frees that much took 17 ms, one
// with nothing to free 0.1 ms; allocations in an arena wait while it is
// trimmed.
void Server::Housekeep() {
  constexpr int kReclaimMs = 100;
  const auto tick = std::chrono::milliseconds(options_.tick_ms);
  const auto trim_every = std::chrono::seconds(options_.trim_memory_s);
  const auto period = std::chrono::milliseconds(std::min(options_.tick_ms, kReclaimMs));
  auto next_tick = Clock::now() + tick;
  Clock::time_point last_warning;  // one a second while the store is down
  auto next_trim = Clock::now() + trim_every;
  for (;;) {
    {
      // The period's wait, cut short by Shutdown.
      MutexLock lock(tick_mu_);
      const auto until = Clock::now() + period;
      while (!stopping_) {
        if (!tick_cv_.WaitUntil(tick_mu_, until)) break;  // the period is over
      }
      if (stopping_) return;
    }
    const bool full = Clock::now() >= next_tick;
    if (full) next_tick = Clock::now() + tick;
    const Status s = full ? engine_->Tick() : engine_->ReclaimExpiredLeases();
    if (!s.ok() && Clock::now() - last_warning >= std::chrono::seconds(1)) {
      last_warning = Clock::now();
      spdlog::warn("housekeeping: {}", s.ToString());
    }
    if (options_.trim_memory_s > 0 && Clock::now() >= next_trim) {
      const auto began = Clock::now();
      next_trim = began + trim_every;
      malloc_trim(0);
      spdlog::debug("malloc_trim: {:.1f} ms",
                    std::chrono::duration<double, std::milli>(Clock::now() - began).count());
    }
  }
}

void Server::Shutdown() {
  {
    MutexLock lock(tick_mu_);
    stopping_ = true;
  }
  tick_cv_.NotifyAll();
  if (ticker_.joinable()) ticker_.join();
  if (grpc_) grpc_->Shutdown(std::chrono::milliseconds(5000));
  if (http_) http_->Shutdown();
}

uint16_t Server::http_port() const { return http_ ? http_->port() : 0; }
uint16_t Server::grpc_port() const { return grpc_ ? static_cast<uint16_t>(grpc_->port()) : 0; }

Server::~Server() {
  Shutdown();
  grpc_.reset();
  worker_service_.reset();
  http_.reset();
  api_.reset();
  engine_.reset();
  relay_.reset();
  wrapped_.reset();
  artifacts_.reset();
  store_.reset();
}

}  // namespace hpo::server
