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
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>

#include "common/cli_env.h"
#include "common/token.h"
#include "proto/mutex_mode.h"
#include "server/engine/event_relay.h"
#include "server/grpc/worker_service.h"
#include "server/http/api.h"
#include "server/metrics/store_gauges.h"
#include "server/store/artifact_store.h"
#include "server/store/store.h"

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

}  // namespace

int main(int argc, char** argv) {
  LimitMallocArenas();  // before any thread starts
  TurnOffMutexDeadlockDetection();
  CLI::App app{"hpo-server: hardware-aware hyperparameter search server"};
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
  int64_t worker_retention_s = 7 * 24 * 3600;
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
  app.add_option("--store", store_url,
                 "store URL: sqlite:///abs/path.db, sqlite://rel.db, a plain path, or "
                 "postgresql://user:pass@host:port/db")
      ->envname("HPO_STORE")
      ->capture_default_str();
  app.add_option("--http", http_address, "REST, dashboard and /metrics address (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--grpc", grpc_address, "worker protocol address (port 0: any free port)")
      ->capture_default_str();
  // Their environment variables are read after parsing (common/cli_env.h).
  auto* token_opt = app.add_option("--token", token,
                                   "bearer token every call must carry (except /healthz); prefer HPO_TOKEN "
                                   "or --token-file: a command line shows in the process list (env: HPO_TOKEN)");
  auto* token_file_opt =
      app.add_option("--token-file", token_file, "read the bearer token from this file's first line (env: HPO_TOKEN_FILE)")
          ->excludes(token_opt);
  app.add_option("--allowed-host", allowed_hosts,
                 "a host name REST requests may carry in Host besides IP addresses and localhost, e.g. the "
                 "name of a load balancer or Service (repeatable, or comma-separated in HPO_ALLOWED_HOSTS; "
                 "* allows any: no DNS-rebinding protection)")
      ->envname("HPO_ALLOWED_HOSTS")
      ->delimiter(',');
  app.add_option("--allowed-origin", allowed_origins,
                 "a web origin (https://dash.example.com) whose pages may call the REST API besides the "
                 "server's own (repeatable, or comma-separated in HPO_ALLOWED_ORIGINS; * allows any)")
      ->envname("HPO_ALLOWED_ORIGINS")
      ->delimiter(',');
  app.add_option("--http-max-connections", http_max_connections,
                 "open REST connections; at the cap the longest-idle one is closed for a new one")
      ->check(CLI::Range(16, 1'000'000))
      ->capture_default_str();
  app.add_option("--http-read-nice", http_read_nice,
                 "how much lower the CPU priority of REST reads (GET: dashboards, listings, /metrics) is than "
                 "the rest of the server's (a nice increment): on a saturated machine they yield to writes and "
                 "to workers' RPCs, whose leases expire when answered late (0: the same priority)")
      ->check(CLI::Range(0, 19))
      ->capture_default_str();
  app.add_option("--http-read-threads", http_read_threads,
                 "REST reads (GET) handled at once, each holding at most one store connection while it reads; "
                 "more wait their turn, while writes and workers' RPCs keep the other connections")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--web-root", web_root, "directory of the dashboard's static files");
  app.add_option("--tls-cert", tls_cert,
                 "PEM certificate chain: serve HTTPS on --http and TLS on --grpc (needs --tls-key)")
      ->envname("HPO_TLS_CERT");
  app.add_option("--tls-key", tls_key, "PEM private key of --tls-cert")->envname("HPO_TLS_KEY");
  app.add_option("--lease-timeout", lease_timeout_s, "seconds a worker's lease lasts without a report or heartbeat")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  app.add_option(
         "--max-lease-wait", max_lease_wait_s,
         "seconds an idle worker's Lease may wait on the server for work to appear (a long poll), "
         "shorter than --lease-timeout; default: 5, or half the lease timeout if that is less")
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--worker-gone-after", worker_gone_after,
                 "lease timeouts a worker may go unseen before it is marked gone (listed no more, worker.gone)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--worker-retention", worker_retention_s,
                 "seconds a gone worker is kept (unseen) before it is deleted; its trials and measured speeds "
                 "stay (0: never deleted)")
      ->check(CLI::Range(int64_t{0}, int64_t{10} * 365 * 24 * 3600))
      ->capture_default_str();
  app.add_option("--max-attempts", max_attempts, "leases per trial before it is failed")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--history-cache-ms", history_cache_ms,
                 "how old the trials early stopping and suggestions read, and the running experiments a "
                 "lease looks through, may be (another replica's changes; 0: read them on every report, "
                 "top-up and lease)")
      ->check(CLI::Range(0, 60'000))
      ->capture_default_str();
  app.add_option("--fleet-cache-ms", fleet_cache_ms,
                 "how old the fleet (devices, measured speeds) that placement reads on a lease and GET /workers lists may be "
                 "(0: read it on every lease and listing)")
      ->check(CLI::Range(0, 60'000))
      ->capture_default_str();
  app.add_option("--artifacts", artifacts,
                 "where paused trials' checkpoints live: files:DIR (a directory; for a fleet, one every replica "
                 "mounts) or postgresql (the store's database). Default: the checkpoints directory next to the "
                 "SQLite file, or postgresql with a PostgreSQL store")
      ->envname("HPO_ARTIFACTS");
  app.add_option("--max-checkpoint-mb", max_checkpoint_mb, "the largest checkpoint a worker may upload, in MiB")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--port-file", port_file, "write {\"http\": PORT, \"grpc\": PORT} here once listening");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")->capture_default_str();
  app.add_flag("--public-metrics", public_metrics,
               "serve /metrics without the bearer token (for Prometheus; /healthz and /readyz never need it)");
  app.add_option("--trim-memory-s", trim_memory_s,
                 "every this many seconds, hand the free pages of malloc's arenas back to the system (0: never)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--group-commit", group_commit,
                 "batch the reports, heartbeats and completions (and on SQLite the trials made for leases) that "
                 "arrive while a commit is in flight into one transaction (false: one transaction each, for "
                 "comparing)")
      ->capture_default_str();
  app.add_flag("--migrate-only", migrate_only, "apply schema migrations, print the version, exit");
  CLI11_PARSE(app, argc, argv);

  spdlog::set_level(spdlog::level::from_str(log_level));
  if (Status s = FormFromEnvironment(*token_opt, token, "HPO_TOKEN", *token_file_opt, token_file, "HPO_TOKEN_FILE");
      !s.ok()) {
    return Fail(s.message());
  }
  if (!token_file.empty()) {
    auto t = ReadTokenFile(token_file);
    if (!t.ok()) return Fail(t.status().message());
    token = *t;
  }
  RaiseDescriptorLimit();
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");

  if (tls_cert.empty() != tls_key.empty()) {
    return Fail(tls_cert.empty() ? "--tls-key needs --tls-cert (TLS takes both or neither)"
                                 : "--tls-cert needs --tls-key (TLS takes both or neither)");
  }
  std::string http_host, grpc_host;
  uint16_t http_port = 0, grpc_port = 0;
  if (!SplitHostPort(http_address, &http_host, &http_port)) {
    return Fail("--http '" + http_address + "' must be HOST:PORT");
  }
  if (!SplitHostPort(grpc_address, &grpc_host, &grpc_port)) {
    return Fail("--grpc '" + grpc_address + "' must be HOST:PORT");
  }

  metrics::Registry registry;
  store::StoreOptions store_options;
  store_options.group_commit = group_commit;
  auto& batch_calls = registry.histogram(
      "hpo_store_group_commit_calls", "Store calls committed together in one group-commit transaction",
      {1, 2, 4, 8, 16, 32, 64});
  store_options.on_group_commit = [&batch_calls](size_t calls) { batch_calls.Observe(static_cast<double>(calls)); };
  auto opened = store::OpenStore(store_url, store_options);
  if (!opened.ok()) return Fail(opened.status().message());
  std::unique_ptr<store::Store> store = std::move(opened).value();
  auto version = store->SchemaVersion();
  if (!version.ok()) return Fail(version.status().message());
  spdlog::info("store {} ({}) at schema version {}", store->display_url(), store->backend(), *version);
  if (migrate_only) return 0;
  store::ArtifactStoreOptions artifact_options;
  artifact_options.max_checkpoint_bytes = max_checkpoint_mb << 20;
  auto artifact_store = store::OpenArtifactStore(artifacts, store_url, artifact_options);
  if (!artifact_store.ok()) return Fail(artifact_store.status().message());
  spdlog::info("checkpoints in {} (at most {} MiB each)", (*artifact_store)->description(), max_checkpoint_mb);

  // Signals are taken by sigwait below; threads started from here on
  // inherit the mask and never see them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error code, not a crash

  EventBus events;
  // Events go to this server's subscribers and, on PostgreSQL, to the
  // other replicas' (and theirs come here).
  EventRelay relay(*store, events);
  EngineOptions engine_options;
  engine_options.worker_lease_ms = int64_t{lease_timeout_s} * 1000;
  // A worker waiting in a Lease is seen only when it asked; a wait as long
  // as the lease timeout would let it, and its other devices' leases, look
  // lost meanwhile.
  if (max_lease_wait_s && *max_lease_wait_s >= lease_timeout_s) {
    char why[160];
    std::snprintf(why, sizeof why,
                  "--max-lease-wait (%g s) must be shorter than --lease-timeout (%d s): a worker "
                  "waiting that "
                  "long for work would look gone",
                  *max_lease_wait_s, lease_timeout_s);
    return Fail(why);
  }
  const int64_t lease_wait_ms = max_lease_wait_s
                                    ? static_cast<int64_t>(*max_lease_wait_s * 1000)
                                    : std::min<int64_t>(5000, int64_t{lease_timeout_s} * 500);
  engine_options.worker_gone_after = worker_gone_after;
  engine_options.worker_retention = std::chrono::seconds(worker_retention_s);
  engine_options.history_cache = std::chrono::milliseconds(history_cache_ms);
  engine_options.fleet_cache = std::chrono::milliseconds(fleet_cache_ms);
  engine_options.max_attempts = max_attempts;
  engine_options.metrics = &registry;
  engine_options.artifacts = artifact_store->get();
  auto& finished = registry.counter("hpo_trials_finished_total", "Trials finished by this server, by state",
                                    {{"state", "completed"}});
  auto& pruned = registry.counter("hpo_trials_finished_total", "Trials finished by this server, by state",
                                  {{"state", "pruned"}});
  auto& failed = registry.counter("hpo_trials_finished_total", "Trials finished by this server, by state",
                                  {{"state", "failed"}});
  auto& reports = registry.counter("hpo_reports_total", "Steps reported to this server");
  auto& requeued = registry.counter("hpo_trials_requeued_total",
                                    "Trials this server put back to pending because their lease expired");
  engine_options.on_event = [&](std::string type, const nlohmann::json& data) {
    LogEvent(type, data);
    if (type == "trial.reported") reports.Increment();
    if (type == "trial.requeued") requeued.Increment();
    if (type == "trial.finished") {
      const std::string state = data.value("state", "");
      if (state == "completed") finished.Increment();
      if (state == "pruned") pruned.Increment();
      if (state == "failed") failed.Increment();
    }
    relay.Publish(std::move(type), data);
  };
  StoreGaugeOptions gauge_options;
  gauge_options.live_for = std::chrono::milliseconds(engine_options.worker_lease_ms);
  RegisterStoreGauges(registry, *store, gauge_options);  // read from the store: every replica agrees
  Engine engine(*store, engine_options);
  ApiOptions api_options;
  api_options.token = token;
  api_options.web_root = web_root;
  api_options.public_metrics = public_metrics;
  api_options.guard.allowed_hosts = allowed_hosts;
  api_options.guard.allowed_origins = allowed_origins;
  RestApi api(engine, events, registry, api_options);

  HttpServerOptions http_options;
  http_options.address = http_host;
  http_options.port = http_port;
  http_options.tls_cert_file = tls_cert;
  http_options.tls_key_file = tls_key;
  http_options.max_connections = http_max_connections;
  http_options.read_nice = http_read_nice;
  http_options.read_handler_threads = http_read_threads;
  api.Attach(http_options);
  auto http = HttpServer::Start(http_options, [&](const HttpRequest& r) { return api.Handle(r); });
  if (!http.ok()) return Fail(http.status().message());
  WorkerServiceOptions worker_service_options{token, 1000};
  worker_service_options.max_lease_wait_ms = lease_wait_ms;
  WorkerServiceImpl worker_service(engine, worker_service_options);
  auto grpc = GrpcServer::Start(grpc_address, &worker_service, GrpcTlsFiles{tls_cert, tls_key});
  if (!grpc.ok()) return Fail(grpc.status().message());
  const bool tls = !tls_cert.empty();
  spdlog::info("{} listening on {}:{}", tls ? "https" : "http", http_host, (*http)->port());
  spdlog::info("grpc{} listening on {}:{}", tls ? " (TLS)" : "", grpc_host, (*grpc)->port());
  if (!token.empty()) {
    spdlog::info("bearer token required on every call but /healthz");
  } else {
    spdlog::warn("no token: anyone who can reach {}:{} or {} may submit experiments, and a command "
                 "experiment runs its program on every worker (set HPO_TOKEN or --token-file)",
                 http_host, (*http)->port(), grpc_address);
  }
  if (!port_file.empty()) {
    const std::string tmp = port_file + ".tmp";
    std::ofstream(tmp) << nlohmann::json{{"http", (*http)->port()}, {"grpc", (*grpc)->port()}}.dump() << "\n";
    std::rename(tmp.c_str(), port_file.c_str());  // readers never see half a file
  }

  // Housekeeping: requeue expired leases every kReclaimMs (a dead worker's
  // trial is pending again within that of its lease's expiry, not up to a
  // whole tick later), end experiments at their budget every tick_ms.
  constexpr int kReclaimMs = 100;
  // And hand the free pages of malloc's arenas back to the system every
  // --trim-memory-s: a whole read of a big experiment (at a start, after a
  // requeue) and a REST read of its trials peak at a hundred megabytes
  // that glibc would otherwise keep (bench/README.md, soak: 138 MB kept
  // after reads of 10,000 trials, 37 MB after a trim). A trim that frees
  // that much took 17 ms, one with nothing to free 0.1 ms; allocations in
  // an arena wait while it is trimmed.
  const auto trim_every = std::chrono::seconds(trim_memory_s);
  std::mutex tick_mu;
  std::condition_variable tick_cv;
  bool stopping = false;
  std::thread ticker([&] {
    const auto period = std::chrono::milliseconds(std::min(tick_ms, kReclaimMs));
    auto next_tick = std::chrono::steady_clock::now() + std::chrono::milliseconds(tick_ms);
    std::chrono::steady_clock::time_point last_warning;  // one a second while the store is down
    auto next_trim = std::chrono::steady_clock::now() + trim_every;
    std::unique_lock lock(tick_mu);
    while (!tick_cv.wait_for(lock, period, [&] { return stopping; })) {
      lock.unlock();
      const bool full = std::chrono::steady_clock::now() >= next_tick;
      if (full) next_tick = std::chrono::steady_clock::now() + std::chrono::milliseconds(tick_ms);
      Status s = full ? engine.Tick() : engine.ReclaimExpiredLeases();
      if (!s.ok() && std::chrono::steady_clock::now() - last_warning >= std::chrono::seconds(1)) {
        last_warning = std::chrono::steady_clock::now();
        spdlog::warn("housekeeping: {}", s.ToString());
      }
      if (trim_memory_s > 0 && std::chrono::steady_clock::now() >= next_trim) {
        const auto began = std::chrono::steady_clock::now();
        next_trim = began + trim_every;
        malloc_trim(0);
        spdlog::debug("malloc_trim: {:.1f} ms",
                      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count());
      }
      lock.lock();
    }
  });

  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("{} received: draining", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  {
    std::lock_guard lock(tick_mu);
    stopping = true;
  }
  tick_cv.notify_all();
  ticker.join();
  (*grpc)->Shutdown(std::chrono::milliseconds(5000));
  (*http)->Shutdown();
  spdlog::info("stopped");
  return 0;
}
