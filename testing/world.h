// The server's parts in one process, wired as hpo-server wires them: a
// store, an artifact store, the event bus, the metrics registry, the engine
// and the REST API. For tests and fuzzers that drive the engine or the API
// without a server process.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "server/engine/engine.h"
#include "server/http/api.h"
#include "server/engine/event_bus.h"
#include "server/metrics/metrics.h"
#include "server/store/artifact_store.h"
#include "server/store/store.h"

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
  ~World();  // the API, the engine, then the stores

  store::Store& store() { return *store_; }  // as opened, not wrapped
  store::Store& engine_store() { return wrapped_ ? *wrapped_ : *store_; }
  store::ArtifactStore* artifacts() {
    return artifacts_.get();
  }  // null unless WorldOptions::artifacts
  server::EventBus& events() { return events_; }
  metrics::Registry& metrics() { return metrics_; }
  server::Engine& engine() { return *engine_; }
  server::RestApi& api() { return *api_; }

 private:
  World() = default;
  std::unique_ptr<store::Store> store_, wrapped_;
  std::unique_ptr<store::ArtifactStore> artifacts_;
  server::EventBus events_;
  metrics::Registry metrics_;
  std::unique_ptr<server::Engine> engine_;
  std::unique_ptr<server::RestApi> api_;
};

}  // namespace hpo::testing
