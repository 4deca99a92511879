// The server's parts in one process, built by the code hpo-server runs
// (server::Server, server/server.h) without its transports: a store, an
// artifact store, the event bus and relay, the metrics registry, the engine
// and the REST API. For tests and fuzzers that drive the engine or the API
// without a server process.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "server/server.h"

namespace hpo::testing {

struct WorldOptions {
  std::string store_url;  // REQUIRED
  store::StoreOptions store;
  // Set: an artifact store for checkpoints beside the store (OpenArtifactStore's default location),
  // given to the engine as EngineOptions::artifacts.
  std::optional<store::ArtifactStoreOptions> artifacts;
  // Set: what the engine sees instead of the store, made from it (a counting or failing
  // StoreWrapper).
  std::function<std::unique_ptr<store::Store>(store::Store&)> wrap_store;
  // Every event is published on events() first, then given to engine.on_event when it is set.
  server::EngineOptions engine;
  server::ApiOptions api;
};

class World {
 public:
  static Result<std::unique_ptr<World>> Create(WorldOptions options);

  store::Store& store() { return server_->store(); }  // as opened, not wrapped
  store::Store& engine_store() { return server_->engine_store(); }
  store::ArtifactStore* artifacts() {
    return server_->artifacts();
  }  // null unless WorldOptions::artifacts
  server::EventBus& events() { return server_->events(); }
  metrics::Registry& metrics() { return server_->metrics(); }
  server::Engine& engine() { return server_->engine(); }
  server::RestApi& api() { return server_->api(); }

 private:
  explicit World(std::unique_ptr<server::Server> server) : server_(std::move(server)) {}
  std::unique_ptr<server::Server> server_;
};

}  // namespace hpo::testing
