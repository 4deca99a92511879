#include "testing/world.h"

namespace hpo::testing {

Result<std::unique_ptr<World>> World::Create(WorldOptions o) {
  server::ServerOptions so;
  so.listen = false;
  so.store_url = o.store_url;
  so.store = o.store;
  so.artifacts = o.artifacts;
  so.wrap_store = std::move(o.wrap_store);
  so.engine = std::move(o.engine);
  so.api = std::move(o.api);
  HPO_ASSIGN_OR_RETURN(auto server, server::Server::Start(std::move(so)));
  return std::unique_ptr<World>(new World(std::move(server)));
}

}  // namespace hpo::testing
