// hpo-server: the HeteroTune server. This first cut opens and migrates the
// store; REST, gRPC and the experiment loop arrive with issue #4.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

#include "server/store/store.h"

int main(int argc, char** argv) {
  CLI::App app{"hpo-server: hardware-aware hyperparameter search server"};
  std::string store_url = "sqlite://./hpo.db";
  bool migrate_only = false;
  app.add_option("--store", store_url,
                 "store URL: sqlite:///abs/path.db, sqlite://rel.db, a plain path, or "
                 "postgresql://user:pass@host:port/db")
      ->envname("HPO_STORE")
      ->capture_default_str();
  app.add_flag("--migrate-only", migrate_only, "apply schema migrations, print the version, exit");
  CLI11_PARSE(app, argc, argv);

  auto store = hpo::store::OpenStore(store_url);
  if (!store.ok()) {
    std::fprintf(stderr, "hpo-server: error: %s\n", store.status().message().c_str());
    return 1;
  }
  auto version = (*store)->SchemaVersion();
  if (!version.ok()) {
    std::fprintf(stderr, "hpo-server: error: %s\n", version.status().message().c_str());
    return 1;
  }
  spdlog::info("store {} ({}) at schema version {}", (*store)->display_url(),
               (*store)->backend(), *version);
  if (migrate_only) return 0;
  std::fprintf(stderr,
               "hpo-server: the REST and gRPC services are not part of this build yet "
               "(issue #4); use --migrate-only to prepare a store\n");
  return 2;
}
