// hpo-server: REST (Boost.Beast), the gRPC worker protocol, /metrics and the
// dashboard, over one store (SQLite by default, PostgreSQL for fleets).
//
// SIGTERM or SIGINT drains: no new connections, in-flight calls finish,
// then the process exits 0. Everything durable is in the store, so a
// restarted server continues every experiment where it was.
#include <malloc.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "common/cli_env.h"
#include "common/token.h"
#include "proto/mutex_mode.h"
#include "server/server.h"

namespace {

using namespace hpo;
using namespace hpo::server;

int Fail(const std::string& message) {
  std::fprintf(stderr, "hpo-server: error: %s\n", message.c_str());
  return 1;
}

// "host:port" -> (host, port); port 0 means any free port.
bool SplitHostPort(const std::string& s, std::string* host, uint16_t* port) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  char* end = nullptr;
  const long p = std::strtol(s.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || p < 0 || p > 65535 || colon + 1 == s.size()) return false;
  *host = s.substr(0, colon);
  *port = static_cast<uint16_t>(p);
  return true;
}

// Each HTTP connection is a descriptor: take what the hard limit allows.
void RaiseDescriptorLimit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

// glibc's malloc gives a thread that meets contention an arena of its own,
// up to 8 per core, and memory freed into an arena stays there for its
// threads. The server's gRPC and HTTP threads each allocate and free
// short-lived buffers of megabytes (a page of trials, 5,000 speed
// observations), so in the soak its RSS grew to five times its live heap
// and kept growing: 79 -> 131 MB in 5 minutes with a peak heap of 23 MB
// (bench/README.md, soak). Two arenas keep it near the heap (40 -> 57 MB,
// flat after the third minute). MALLOC_ARENA_MAX or a GLIBC_TUNABLES
// setting in the environment wins.
void LimitMallocArenas() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (std::getenv("MALLOC_ARENA_MAX") != nullptr ||
      (tunables != nullptr && std::strstr(tunables, "arena_max") != nullptr)) {
    return;
  }
  mallopt(M_ARENA_MAX, 2);
}

// hpo-server's flags, as parsed (DefineFlags).
struct Flags {
  std::string store_url = "sqlite://./hpo.db";
  std::string http_address = "127.0.0.1:8080";
  std::string grpc_address = "127.0.0.1:50051";
  std::string token, token_file;
  std::vector<std::string> allowed_hosts, allowed_origins;
  int http_max_connections = 4096;
  int http_read_nice = 10;
  int http_read_threads = 4;
  std::string web_root;
  std::string port_file;
  std::string log_level = "info";
  int lease_timeout_s = 60;
  std::optional<double> max_lease_wait_s;  // default: the smaller of 5 s and half the lease timeout
  int worker_gone_after = 3;
  int64_t worker_retention_s = int64_t{7} * 24 * 3600;
  int max_attempts = 3;
  int tick_ms = 1000;
  int trim_memory_s = 30;
  int history_cache_ms = 1000, fleet_cache_ms = 1000;
  std::string tls_cert, tls_key;
  bool migrate_only = false;
  bool public_metrics = false;
  bool group_commit = true;
  std::string artifacts;
  int64_t max_checkpoint_mb = 1024;
  CLI::Option* token_opt = nullptr;
  CLI::Option* token_file_opt = nullptr;
};

// Every flag, its help, default, range and environment variable.
void DefineFlags(CLI::App& app, Flags& f) {
  app.add_option("--store", f.store_url,
                 "store URL: sqlite:///abs/path.db, sqlite://rel.db, a plain path, or "
                 "postgresql://user:pass@host:port/db")
      ->envname("HPO_STORE")
      ->capture_default_str();
  app.add_option("--http", f.http_address,
                 "REST, dashboard and /metrics address (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--grpc", f.grpc_address, "worker protocol address (port 0: any free port)")
      ->capture_default_str();
  // Their environment variables are read after parsing (common/cli_env.h).
  f.token_opt =
      app.add_option("--token", f.token,
                     "bearer token every call must carry (except /healthz); prefer HPO_TOKEN "
                     "or --token-file: a command line shows in the process list (env: HPO_TOKEN)");
  f.token_file_opt =
      app.add_option("--token-file", f.token_file,
                     "read the bearer token from this file's first line (env: HPO_TOKEN_FILE)")
          ->excludes(f.token_opt);
  app.add_option(
         "--allowed-host", f.allowed_hosts,
         "a host name REST requests may carry in Host besides IP addresses and localhost, e.g. the "
         "name of a load balancer or Service (repeatable, or comma-separated in HPO_ALLOWED_HOSTS; "
         "* allows any: no DNS-rebinding protection)")
      ->envname("HPO_ALLOWED_HOSTS")
      ->delimiter(',');
  app.add_option(
         "--allowed-origin", f.allowed_origins,
         "a web origin (https://dash.example.com) whose pages may call the REST API besides the "
         "server's own (repeatable, or comma-separated in HPO_ALLOWED_ORIGINS; * allows any)")
      ->envname("HPO_ALLOWED_ORIGINS")
      ->delimiter(',');
  app.add_option("--http-max-connections", f.http_max_connections,
                 "open REST connections; at the cap the longest-idle one is closed for a new one")
      ->check(CLI::Range(16, 1'000'000))
      ->capture_default_str();
  app.add_option("--http-read-nice", f.http_read_nice,
                 "how much lower the CPU priority of REST reads (GET: dashboards, listings, "
                 "/metrics) is than "
                 "the rest of the server's (a nice increment): on a saturated machine they yield "
                 "to writes and "
                 "to workers' RPCs, whose leases expire when answered late (0: the same priority)")
      ->check(CLI::Range(0, 19))
      ->capture_default_str();
  app.add_option("--http-read-threads", f.http_read_threads,
                 "REST reads (GET) handled at once, each holding at most one store connection "
                 "while it reads; "
                 "more wait their turn, while writes and workers' RPCs keep the other connections")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--web-root", f.web_root, "directory of the dashboard's static files");
  app.add_option("--tls-cert", f.tls_cert,
                 "PEM certificate chain: serve HTTPS on --http and TLS on --grpc (needs --tls-key)")
      ->envname("HPO_TLS_CERT");
  app.add_option("--tls-key", f.tls_key, "PEM private key of --tls-cert")->envname("HPO_TLS_KEY");
  app.add_option("--lease-timeout", f.lease_timeout_s,
                 "seconds a worker's lease lasts without a report or heartbeat")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  app.add_option(
         "--max-lease-wait", f.max_lease_wait_s,
         "seconds an idle worker's Lease may wait on the server for work to appear (a long poll), "
         "shorter than --lease-timeout; default: 5, or half the lease timeout if that is less")
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--worker-gone-after", f.worker_gone_after,
                 "lease timeouts a worker may go unseen before it is marked gone (listed no more, "
                 "worker.gone)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--worker-retention", f.worker_retention_s,
                 "seconds a gone worker is kept (unseen) before it is deleted; its trials and "
                 "measured speeds "
                 "stay (0: never deleted)")
      ->check(CLI::Range(int64_t{0}, int64_t{10} * 365 * 24 * 3600))
      ->capture_default_str();
  app.add_option("--max-attempts", f.max_attempts, "leases per trial before it is failed")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option(
         "--history-cache-ms", f.history_cache_ms,
         "how old the trials early stopping and suggestions read, and the running experiments a "
         "lease looks through, may be (another replica's changes; 0: read them on every report, "
         "top-up and lease)")
      ->check(CLI::Range(0, 60'000))
      ->capture_default_str();
  app.add_option("--fleet-cache-ms", f.fleet_cache_ms,
                 "how old the fleet (devices, measured speeds) that placement reads on a lease and "
                 "GET /workers lists may be "
                 "(0: read it on every lease and listing)")
      ->check(CLI::Range(0, 60'000))
      ->capture_default_str();
  app.add_option("--artifacts", f.artifacts,
                 "where paused trials' checkpoints live: files:DIR (a directory; for a fleet, one "
                 "every replica "
                 "mounts) or postgresql (the store's database). Default: the checkpoints directory "
                 "next to the "
                 "SQLite file, or postgresql with a PostgreSQL store")
      ->envname("HPO_ARTIFACTS");
  app.add_option("--max-checkpoint-mb", f.max_checkpoint_mb,
                 "the largest checkpoint a worker may upload, in MiB")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--port-file", f.port_file,
                 "write {\"http\": PORT, \"grpc\": PORT} here once listening");
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn, error")
      ->capture_default_str();
  app.add_flag("--public-metrics", f.public_metrics,
               "serve /metrics without the bearer token (for Prometheus; /healthz and /readyz "
               "never need it)");
  app.add_option("--trim-memory-s", f.trim_memory_s,
                 "every this many seconds, hand the free pages of malloc's arenas back to the "
                 "system (0: never)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--group-commit", f.group_commit,
                 "batch the reports, heartbeats and completions (and on SQLite the trials made for "
                 "leases) that "
                 "arrive while a commit is in flight into one transaction (false: one transaction "
                 "each, for "
                 "comparing)")
      ->capture_default_str();
  app.add_flag("--migrate-only", f.migrate_only,
               "apply schema migrations, print the version, exit");
}

// The server's options from the flags; an error names the flag.
Result<ServerOptions> ServerOptionsFrom(const Flags& f) {
  if (f.tls_cert.empty() != f.tls_key.empty()) {
    return Status::InvalidArgument(f.tls_cert.empty()
                                       ? "--tls-key needs --tls-cert (TLS takes both or neither)"
                                       : "--tls-cert needs --tls-key (TLS takes both or neither)");
  }
  ServerOptions o;
  std::string grpc_host;
  uint16_t grpc_port = 0;
  if (!SplitHostPort(f.http_address, &o.http.address, &o.http.port)) {
    return Status::InvalidArgument("--http '" + f.http_address + "' must be HOST:PORT");
  }
  if (!SplitHostPort(f.grpc_address, &grpc_host, &grpc_port)) {
    return Status::InvalidArgument("--grpc '" + f.grpc_address + "' must be HOST:PORT");
  }
  o.store_url = f.store_url;
  o.store.group_commit = f.group_commit;
  o.artifacts_location = f.artifacts;
  o.artifacts->max_checkpoint_bytes = f.max_checkpoint_mb << 20;
  o.engine.worker_lease_ms = int64_t{f.lease_timeout_s} * 1000;
  o.engine.worker_gone_after = f.worker_gone_after;
  o.engine.worker_retention = std::chrono::seconds(f.worker_retention_s);
  o.engine.history_cache = std::chrono::milliseconds(f.history_cache_ms);
  o.engine.fleet_cache = std::chrono::milliseconds(f.fleet_cache_ms);
  o.engine.max_attempts = f.max_attempts;
  o.api.token = f.token;
  o.api.web_root = f.web_root;
  o.api.public_metrics = f.public_metrics;
  o.api.guard.allowed_hosts = f.allowed_hosts;
  o.api.guard.allowed_origins = f.allowed_origins;
  o.http.tls_cert_file = f.tls_cert;
  o.http.tls_key_file = f.tls_key;
  o.http.max_connections = f.http_max_connections;
  o.http.read_nice = f.http_read_nice;
  o.http.read_handler_threads = f.http_read_threads;
  o.grpc_address = f.grpc_address;
  o.grpc.retry_after_ms = 1000;
  o.grpc.max_lease_wait_ms = f.max_lease_wait_s
                                 ? static_cast<int64_t>(*f.max_lease_wait_s * 1000)
                                 : std::min<int64_t>(5000, int64_t{f.lease_timeout_s} * 500);
  o.port_file = f.port_file;
  o.tick_ms = f.tick_ms;
  o.trim_memory_s = f.trim_memory_s;
  return o;
}

// A worker waiting in a Lease is seen only when it asked; a wait as long as
// the lease timeout would let it, and its other devices' leases, look lost
// meanwhile.
Status CheckLeaseWait(const Flags& f) {
  if (!f.max_lease_wait_s || *f.max_lease_wait_s < f.lease_timeout_s) return Status::OK();
  char why[160];
  std::snprintf(why, sizeof why,
                "--max-lease-wait (%g s) must be shorter than --lease-timeout (%d s): a worker "
                "waiting that long for work would look gone",
                *f.max_lease_wait_s, f.lease_timeout_s);
  return Status::InvalidArgument(why);
}

}  // namespace

int main(int argc, char** argv) {
  LimitMallocArenas();  // before any thread starts
  TurnOffMutexDeadlockDetection();
  CLI::App app{"hpo-server: hardware-aware hyperparameter search server"};
  Flags f;
  DefineFlags(app, f);
  CLI11_PARSE(app, argc, argv);

  spdlog::set_level(spdlog::level::from_str(f.log_level));
  if (Status s = FormFromEnvironment(*f.token_opt, f.token, "HPO_TOKEN", *f.token_file_opt,
                                     f.token_file, "HPO_TOKEN_FILE");
      !s.ok()) {
    return Fail(s.message());
  }
  if (!f.token_file.empty()) {
    auto t = ReadTokenFile(f.token_file);
    if (!t.ok()) return Fail(t.status().message());
    f.token = *t;
  }
  RaiseDescriptorLimit();
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");

  auto options = ServerOptionsFrom(f);
  if (!options.ok()) return Fail(options.status().message());
  if (f.migrate_only) {
    const Status migrated = Server::Migrate(*options);
    return migrated.ok() ? 0 : Fail(migrated.message());
  }
  if (Status s = CheckLeaseWait(f); !s.ok()) return Fail(s.message());

  // Signals are taken by sigwait below; threads started from here on
  // inherit the mask and never see them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error code, not a crash

  auto server = Server::Start(std::move(options).value());
  if (!server.ok()) return Fail(server.status().message());
  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("{} received: draining", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  (*server)->Shutdown();
  spdlog::info("stopped");
  return 0;
}
