// One hpo-server, assembled in one place: the store, the artifact store, the
// event bus and the replicas' relay, the metrics, the engine and the REST
// API, and, when it listens, the HTTP and gRPC transports and the
// housekeeping thread. hpo-server's main (server/main.cc) parses its flags
// into ServerOptions and calls Server::Start; tests and fuzzers build the
// same parts without transports (ServerOptions::listen = false,
// testing/world.h) and drive the engine and the API in process.
//
// Thread-safe as its parts are: the engine and the API take calls from any
// thread; Shutdown once, from one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "server/engine/engine.h"
#include "server/engine/event_bus.h"
#include "server/engine/event_relay.h"
#include "server/grpc/worker_service.h"
#include "server/http/api.h"
#include "server/http/http_server.h"
#include "server/metrics/metrics.h"
#include "server/store/artifact_store.h"
#include "server/store/store.h"

namespace hpo::server {

struct ServerOptions {
  // --- The store: a URL as store::OpenStore reads it; on_group_commit is
  // the server's (the hpo_store_group_commit_calls histogram).
  std::string store_url = "sqlite://./hpo.db";
  store::StoreOptions store;
  // Checkpoints (store::OpenArtifactStore): files:DIR, postgresql, or empty
  // for the default beside the store. Unset: no artifact store (the engine
  // then pauses no trial with a checkpoint; for tests that need none).
  std::optional<store::ArtifactStoreOptions> artifacts = store::ArtifactStoreOptions{};
  std::string artifacts_location;
  // What the engine sees instead of the store, made from it (tests: a
  // counting or failing store::StoreWrapper); the relay and the metrics
  // read the store itself.
  std::function<std::unique_ptr<store::Store>(store::Store&)> wrap_store;

  // --- The engine and the REST API. The server sets the engine's metrics
  // and artifacts; its on_event, when set, sees every event after the
  // server has logged, counted and published it.
  EngineOptions engine;
  ApiOptions api;

  // --- The transports, when `listen`: REST on http (its address and port,
  // TLS files and limits), the worker protocol on grpc_address ("host:port",
  // port 0: any free port) with `grpc` (its token is api.token's) and the
  // same TLS files. port_file, when set, gets {"http": P, "grpc": P} once
  // both listen, written whole.
  bool listen = true;
  HttpServerOptions http;
  std::string grpc_address = "127.0.0.1:50051";
  WorkerServiceOptions grpc;
  std::string port_file;

  // --- Housekeeping, when `listen`: expired leases requeued every 100 ms,
  // experiments ended at their budgets every tick_ms, and the free pages of
  // malloc's arenas handed back every trim_memory_s (0: never).
  int tick_ms = 1000;
  int trim_memory_s = 30;
};

class Server {
 public:
  // Opens the store (applying its migrations) and the artifact store, then
  // builds the parts and, when options.listen, starts the transports and
  // housekeeping. Errors are the parts' own (the store's, a TLS file's, an
  // address in use); nothing is left running after one.
  static Result<std::unique_ptr<Server>> Start(ServerOptions options);

  // Opens the store, which applies its migrations, and logs its schema
  // version (hpo-server --migrate-only).
  static Status Migrate(const ServerOptions& options);

  // Shutdown(), then the parts in reverse order.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Drains: housekeeping stops, gRPC calls in flight get up to 5 s, then
  // HTTP closes. Idempotent.
  void Shutdown();

  uint16_t http_port() const;  // 0 unless listening
  uint16_t grpc_port() const;
  store::Store& store() { return *store_; }  // as opened, not wrapped
  store::Store& engine_store() { return wrapped_ ? *wrapped_ : *store_; }
  store::ArtifactStore* artifacts() {
    return artifacts_.get();
  }  // null unless ServerOptions::artifacts
  EventBus& events() { return events_; }
  metrics::Registry& metrics() { return metrics_; }
  Engine& engine() { return *engine_; }
  RestApi& api() { return *api_; }
  // The worker protocol's service, built whether or not it listens (a
  // fuzzer calls it in process).
  WorkerServiceImpl& worker_service() { return *worker_service_; }

 private:
  explicit Server(ServerOptions options) : options_(std::move(options)) {}
  Status Build();
  Status Listen();
  void Housekeep();

  ServerOptions options_;
  metrics::Registry metrics_;
  std::unique_ptr<store::Store> store_, wrapped_;
  std::unique_ptr<store::ArtifactStore> artifacts_;
  EventBus events_;
  std::unique_ptr<EventRelay> relay_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<RestApi> api_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<WorkerServiceImpl> worker_service_;
  std::unique_ptr<GrpcServer> grpc_;
  Mutex tick_mu_;
  CondVar tick_cv_;
  bool stopping_ HPO_GUARDED_BY(tick_mu_) = false;
  std::thread ticker_;
};

}  // namespace hpo::server
