// bench/load: simulated workers (gRPC: Register, then Lease, Heartbeat and
// Report every step, Complete) and REST clients (experiments, trials, best,
// workers, /metrics) against one hpo-server for --seconds, on a private
// PostgreSQL this program starts (or --store URL). Every call has a 10 s
// deadline; any failed call is an error. Prints
//
//   bench=load workers=200 rest_clients=20 seconds=300 store=postgresql rpc_total=... rpc_errors=0
//       rest_total=... rest_errors=0 rpc_p50_ms=... rpc_p99_ms=... rest_p99_ms=...
//       server_peak_rss_mb=... lease_p99_ms=... report_p99_ms=... (one p99 per kind of RPC the
//       workers made)
//
// and exits 1 when there were errors.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "proto/mutex_mode.h"
#include "testing/harness.h"
#include "testing/scenarios.h"

int main(int argc, char** argv) {
  hpo::TurnOffMutexDeadlockDetection();  // as hpo-worker does
  using namespace hpo::testing;
  CLI::App app{"bench/load: many simulated workers and REST clients against one hpo-server"};
  Setup setup;
  setup.server_bin = HPO_SERVER_BIN;
  LoadOptions o;
  int seconds = 300, step_ms = static_cast<int>(o.step_time.count());
  std::string dir;
  bool sqlite = false;
  app.add_option("--workers", o.workers)->capture_default_str();
  app.add_option("--rest-clients", o.rest_clients)->capture_default_str();
  app.add_option("--seconds", seconds)->capture_default_str();
  app.add_option("--experiments", o.experiments)->capture_default_str();
  app.add_option("--steps", o.steps, "reports per trial")->capture_default_str();
  app.add_option("--step-ms", step_ms, "time a simulated step takes")->capture_default_str();
  app.add_option("--early-stopping", o.early_stopping,
                 "the experiments' rule: none, median, asha, hyperband")
      ->capture_default_str();
  app.add_option("--server-arg", o.server_args, "an extra hpo-server argument (repeat for several)")
      ->allow_extra_args(false);
  app.add_option("--store", setup.store_url,
                 "store URL (default: a private PostgreSQL started here)");
  app.add_flag("--sqlite", sqlite, "a SQLite file instead of the private PostgreSQL");
  app.add_option("--server-bin", setup.server_bin)->capture_default_str();
  app.add_option("--dir", dir,
                 "scratch directory (default: a new one under /tmp, removed on success)");
  app.add_flag("-v,--verbose", setup.verbose, "progress on stderr every 30 s");
  CLI11_PARSE(app, argc, argv);
  o.duration = std::chrono::seconds(seconds);
  o.step_time = std::chrono::milliseconds(step_ms);

  const bool own_dir = dir.empty();
  if (own_dir) {
    char tmpl[] = "/tmp/hpo-load-XXXXXX";
    dir = mkdtemp(tmpl);
  }
  setup.dir = dir;
  std::unique_ptr<PostgresInstance> pg;
  if (setup.store_url.empty() && !sqlite) {
    auto created = PostgresInstance::Create();
    if (!created.ok()) {
      std::fprintf(stderr, "load: %s\n", created.status().ToString().c_str());
      return 2;
    }
    pg = std::move(created).value();
    setup.store_url = pg->Url();
  }
  const std::string store =
      setup.store_url.empty() ? "sqlite" : setup.store_url.substr(0, setup.store_url.find(':'));

  std::string server_args;  // as one key=value token: "--history-cache-ms,0"
  for (const auto& a : o.server_args) server_args += (server_args.empty() ? "" : ",") + a;
  if (server_args.empty()) server_args = "none";
  auto r = RunLoad(setup, o);
  pg.reset();
  if (!r.ok()) {
    std::fprintf(stderr, "load: %s (logs in %s)\n", r.status().ToString().c_str(), dir.c_str());
    return 2;
  }
  std::printf(
      "bench=load workers=%d rest_clients=%d seconds=%d store=%s early_stopping=%s server_args=%s "
      "rpc_total=%lld rpc_errors=%lld "
      "rest_total=%lld rest_errors=%lld rpc_p50_ms=%.1f rpc_p99_ms=%.1f rpc_max_ms=%.0f "
      "rest_p50_ms=%.1f "
      "rest_p99_ms=%.1f rest_max_ms=%.0f reports=%lld trials_completed=%lld "
      "server_peak_rss_mb=%.0f",
      o.workers, o.rest_clients, seconds, store.c_str(), o.early_stopping.c_str(),
      server_args.c_str(), (long long)r->rpcs, (long long)r->rpc_errors, (long long)r->rest_calls,
      (long long)r->rest_errors, r->rpc_p50_ms, r->rpc_p99_ms, r->rpc_max_ms, r->rest_p50_ms,
      r->rest_p99_ms, r->rest_max_ms, (long long)r->reports, (long long)r->trials_completed,
      r->server_peak_rss_mb);
  for (const auto& [call, ms] : r->call_p99_ms) std::printf(" %s_p99_ms=%.1f", call.c_str(), ms);
  std::printf("\n");
  for (const auto& [code, n] : r->rpc_error_codes)
    std::fprintf(stderr, "load: rpc %s: %lld\n", code.c_str(), (long long)n);
  for (const auto& s : r->rpc_error_samples)
    std::fprintf(stderr, "load: RPC error: %s\n", s.c_str());
  for (const auto& s : r->rest_error_samples)
    std::fprintf(stderr, "load: REST error: %s\n", s.c_str());
  const bool clean = r->rpc_errors == 0 && r->rest_errors == 0;
  if (own_dir && clean) std::filesystem::remove_all(dir);
  if (!clean) std::fprintf(stderr, "load: logs in %s\n", dir.c_str());
  return clean ? 0 : 1;
}
