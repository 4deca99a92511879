#include "testing/world.h"

namespace hpo::testing {

Result<std::unique_ptr<World>> World::Create(WorldOptions o) {
  std::unique_ptr<World> w(new World());
  HPO_ASSIGN_OR_RETURN(w->store_, store::OpenStore(o.store_url, o.store));
  if (o.artifacts) {
    HPO_ASSIGN_OR_RETURN(w->artifacts_, store::OpenArtifactStore("", o.store_url, *o.artifacts));
    o.engine.artifacts = w->artifacts_.get();
  }
  if (o.wrap_store) w->wrapped_ = o.wrap_store(*w->store_);
  auto then = std::move(o.engine.on_event);
  server::EventBus* bus = &w->events_;
  o.engine.on_event = [bus, then](std::string type, const nlohmann::json& data) {
    bus->Publish(type, data);
    if (then) then(std::move(type), data);
  };
  w->engine_ = std::make_unique<server::Engine>(w->engine_store(), std::move(o.engine));
  w->api_ =
      std::make_unique<server::RestApi>(*w->engine_, w->events_, w->metrics_, std::move(o.api));
  return w;
}

World::~World() {
  api_.reset();
  engine_.reset();
  wrapped_.reset();
  artifacts_.reset();
  store_.reset();
}

}  // namespace hpo::testing
