// bench/faults: the fault scenarios at full size against the
// real hpo-server and hpo-worker binaries (testing/scenarios.h says what each
// does and checks). One line per scenario and store:
//
//   bench=faults scenario=kill_worker store=sqlite kills=50 ... unfinished=0 not_requeued=0
//   bench=faults scenario=kill_server store=postgresql kills=20 acked_reports=... lost_reports=0
//   bench=faults scenario=restart_postgres restarts=5 ... unclean_errors=0 hung=0 lost_reports=0
//   bench=faults scenario=slow_worker store=sqlite ... long_step_attempts=1 paused_max_attempt=1
//   bench=faults scenario=promotion store=sqlite server_kills=5 upload_cuts=5 ... lost=0 ...
//   stuck=0 bench=faults scenario=migration store=sqlite kills=10 ... lost=0 corrupt=0 stuck=0
//
// PostgreSQL is a private instance the program starts (initdb under --dir,
// a free port) and removes. Exit status 1 when a scenario saw a fault it
// must survive (a stuck or lost trial, a lost report, a hung call, a lost or
// corrupt checkpoint, a trial resumed from the wrong step).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "proto/mutex_mode.h"
#include "testing/harness.h"
#include "testing/scenarios.h"

namespace {

using namespace hpo;
using namespace hpo::testing;

std::string Codes(const std::map<std::string, int64_t>& codes) {
  std::ostringstream out;
  for (const auto& [code, n] : codes) out << (out.tellp() > 0 ? "," : "") << code << ":" << n;
  return out.tellp() > 0 ? out.str() : "none";
}

}  // namespace

int main(int argc, char** argv) {
  hpo::TurnOffMutexDeadlockDetection();  // as hpo-worker does
  CLI::App app{
      "bench/faults: kill workers, kill the server, restart PostgreSQL, pause workers, cut "
      "checkpoint uploads, kill workers saving a migration's checkpoint"};
  std::string scenarios =
      "kill_worker,kill_server,kill_server_workers,restart_postgres,slow_worker,promotion,"
      "migration";
  std::string stores = "sqlite,postgresql";
  std::string dir;
  Setup base;
  base.server_bin = HPO_SERVER_BIN;
#ifdef HPO_WORKER_BIN
  base.worker_bin = HPO_WORKER_BIN;
#endif
  WorkerKillOptions wk;
  ServerKillOptions sk;
  ServerKillWorkersOptions skw;
  PostgresRestartOptions pr;
  SlowWorkerOptions sw;
  PromotionOptions po;
  MigrationOptions mo;
  int promotion_seconds = static_cast<int>(po.duration.count());
  app.add_option("--scenarios", scenarios, "comma-separated")->capture_default_str();
  app.add_option("--stores", stores,
                 "stores for kill_worker, kill_server(_workers), slow_worker, promotion, migration")
      ->capture_default_str();
  app.add_option("--dir", dir,
                 "scratch directory (default: a new one under /tmp, removed on success)");
  app.add_option("--server-bin", base.server_bin)->capture_default_str();
  app.add_option("--worker-bin", base.worker_bin)->capture_default_str();
  app.add_option("--worker-kills", wk.kills)->capture_default_str();
  app.add_option("--workers", wk.workers, "hpo-worker processes in kill_worker")
      ->capture_default_str();
  app.add_option("--lease-timeout", wk.lease_timeout_s,
                 "seconds, for kill_worker, slow_worker, promotion and migration")
      ->capture_default_str();
  app.add_option("--server-kills", sk.kills, "in kill_server and kill_server_workers")
      ->capture_default_str();
  app.add_option("--pg-restarts", pr.restarts)->capture_default_str();
  app.add_option("--pauses", sw.pauses, "SIGSTOP/SIGCONT cycles in slow_worker")
      ->capture_default_str();
  app.add_option("--promotion-kills", po.server_kills, "server kill -9s in promotion")
      ->capture_default_str();
  app.add_option("--upload-cuts", po.upload_cuts, "workers that die mid-upload in promotion")
      ->capture_default_str();
  app.add_option("--promotion-seconds", promotion_seconds, "how long promotion runs, at least")
      ->capture_default_str();
  app.add_option("--promotion-workers", po.workers, "simulated workers in promotion")
      ->capture_default_str();
  app.add_option("--migration-kills", mo.kills,
                 "workers killed -9 in a pause's checkpoint save in migration")
      ->capture_default_str();
  app.add_option("--migration-resumed-kills", mo.resumed_kills,
                 "of the migration kills, the last ones wait for a segment that had resumed")
      ->capture_default_str();
  app.add_option("--migration-trials", mo.max_trials, "the migration experiment's budget")
      ->capture_default_str();
  app.add_option("--migration-samples", mo.train_samples, "training examples per step in migration")
      ->capture_default_str();
  app.add_flag("-v,--verbose", base.verbose, "progress on stderr");
  CLI11_PARSE(app, argc, argv);
  sw.lease_timeout_s = wk.lease_timeout_s;
  skw.kills = sk.kills;
  po.lease_timeout_s = wk.lease_timeout_s;
  mo.lease_timeout_s = wk.lease_timeout_s;
  po.duration = std::chrono::seconds(promotion_seconds);

  const bool own_dir = dir.empty();
  if (own_dir) {
    char tmpl[] = "/tmp/hpo-faults-XXXXXX";
    dir = mkdtemp(tmpl);
  }
  auto wanted = [](const std::string& list, const std::string& name) {
    return ("," + list + ",").find("," + name + ",") != std::string::npos;
  };

  std::unique_ptr<PostgresInstance> pg;
  int databases = 0;
  // A Setup for one scenario run: its own directory and an empty store.
  auto setup_for = [&](const std::string& name, const std::string& store) -> Result<Setup> {
    Setup s = base;
    s.dir = dir + "/" + name + "-" + store;
    std::filesystem::create_directories(s.dir);
    if (store == "postgresql") {
      if (!pg) {
        HPO_ASSIGN_OR_RETURN(pg, PostgresInstance::Create());
      }
      const std::string db = "faults_" + std::to_string(++databases);
      HPO_RETURN_IF_ERROR(pg->CreateDatabase(db));
      s.store_url = pg->Url(db);
    }
    return s;
  };

  bool survived = true;
  auto fail = [&](const Status& s) {
    std::fprintf(stderr, "faults: %s\n", s.ToString().c_str());
    survived = false;
  };
  std::vector<std::string> store_list;
  for (std::stringstream ss(stores); ss.good();) {
    std::string s;
    std::getline(ss, s, ',');
    if (!s.empty()) store_list.push_back(s);
  }

  for (const std::string& store : store_list) {
    if (!wanted(scenarios, "kill_worker")) break;
    auto setup = setup_for("kill_worker", store);
    if (!setup.ok()) {
      fail(setup.status());
      continue;
    }
    auto r = KillWorkers(*setup, wk);
    if (!r.ok()) {
      fail(r.status());
      continue;
    }
    std::printf(
        "bench=faults scenario=kill_worker store=%s kills=%d workers=%d lease_timeout_ms=%d "
        "trials=%lld "
        "completed=%lld failed=%lld unfinished=%lld experiment=%s not_requeued=%d "
        "requeue_ms_p50=%.0f "
        "requeue_ms_max=%.0f release_ms_p50=%.0f release_ms_max=%.0f max_attempt=%d\n",
        store.c_str(), r->kills, wk.workers, wk.lease_timeout_s * 1000, (long long)r->trials,
        (long long)r->completed, (long long)r->failed, (long long)r->unfinished,
        r->experiment_state.c_str(), r->not_requeued, Quantile(r->requeue_ms, 0.5),
        Quantile(r->requeue_ms, 1), Quantile(r->release_ms, 0.5), Quantile(r->release_ms, 1),
        r->max_attempt);
    std::fflush(stdout);
    survived = survived && r->unfinished == 0 && r->not_requeued == 0 && r->kills == wk.kills;
  }

  for (const std::string& store : store_list) {
    if (!wanted(scenarios, "kill_server")) break;
    auto setup = setup_for("kill_server", store);
    if (!setup.ok()) {
      fail(setup.status());
      continue;
    }
    auto r = KillServer(*setup, sk);
    if (!r.ok()) {
      fail(r.status());
      continue;
    }
    std::printf(
        "bench=faults scenario=kill_server store=%s kills=%d workers=%d acked_reports=%lld "
        "lost_reports=%lld "
        "trials_completed=%lld restart_ms_p50=%.0f restart_ms_max=%.0f recovery_ms_p50=%.0f "
        "recovery_ms_max=%.0f "
        "rpc_errors=%s\n",
        store.c_str(), r->kills, sk.workers, (long long)r->acked_reports,
        (long long)r->lost_reports, (long long)r->trials_completed, Quantile(r->restart_ms, 0.5),
        Quantile(r->restart_ms, 1), Quantile(r->recovery_ms, 0.5), Quantile(r->recovery_ms, 1),
        Codes(r->rpc_errors).c_str());
    for (const auto& s : r->lost_samples) std::fprintf(stderr, "faults: lost: %s\n", s.c_str());
    std::fflush(stdout);
    survived = survived && r->lost_reports == 0 && r->acked_reports > 0;
  }

  for (const std::string& store : store_list) {
    if (!wanted(scenarios, "kill_server_workers")) break;
    auto setup = setup_for("kill_server_workers", store);
    if (!setup.ok()) {
      fail(setup.status());
      continue;
    }
    auto r = KillServerWorkers(*setup, skw);
    if (!r.ok()) {
      fail(r.status());
      continue;
    }
    std::printf(
        "bench=faults scenario=kill_server_workers store=%s kills=%d workers=%d not_recovered=%d "
        "trials_completed=%lld trials_failed=%lld restart_ms_p50=%.0f restart_ms_max=%.0f "
        "worker_recovery_ms_p50=%.0f worker_recovery_ms_p99=%.0f worker_recovery_ms_max=%.0f "
        "fleet_recovery_ms_p50=%.0f fleet_recovery_ms_p99=%.0f fleet_recovery_ms_max=%.0f\n",
        store.c_str(), r->kills, skw.workers, r->not_recovered, (long long)r->trials_completed,
        (long long)r->trials_failed, Quantile(r->restart_ms, 0.5), Quantile(r->restart_ms, 1),
        Quantile(r->worker_recovery_ms, 0.5), Quantile(r->worker_recovery_ms, 0.99),
        Quantile(r->worker_recovery_ms, 1), Quantile(r->fleet_recovery_ms, 0.5),
        Quantile(r->fleet_recovery_ms, 0.99), Quantile(r->fleet_recovery_ms, 1));
    std::fflush(stdout);
    survived = survived && r->not_recovered == 0 && r->trials_failed == 0 && r->kills == skw.kills;
  }

  if (wanted(scenarios, "restart_postgres")) {
    Setup setup = base;
    setup.dir = dir + "/restart_postgres";
    std::filesystem::create_directories(setup.dir);
    auto r = RestartPostgres(setup, pr);
    if (!r.ok()) {
      fail(r.status());
    } else {
      std::printf(
          "bench=faults scenario=restart_postgres restarts=%d recovered=%d workers=%d "
          "rest_clients=%d down_ms=%lld "
          "rpcs=%lld rest_calls=%lld rpc_errors=%s rest_errors=%s unclean_errors=%lld hung=%lld "
          "max_rpc_ms=%.0f "
          "max_rest_ms=%.0f recovery_ms_p50=%.0f recovery_ms_max=%.0f acked_reports=%lld "
          "lost_reports=%lld "
          "server_survived=%d\n",
          r->restarts, r->recovered, pr.workers, pr.rest_clients, (long long)pr.down.count(),
          (long long)r->rpcs, (long long)r->rest_calls, Codes(r->rpc_errors).c_str(),
          Codes(r->rest_errors).c_str(), (long long)r->unclean_errors, (long long)r->hung,
          r->max_rpc_ms, r->max_rest_ms, Quantile(r->recovery_ms, 0.5), Quantile(r->recovery_ms, 1),
          (long long)r->acked_reports, (long long)r->lost_reports, r->server_survived ? 1 : 0);
      // During an outage 503s are expected; the samples matter only when
      // something else went wrong.
      if (r->unclean_errors > 0 || r->hung > 0) {
        for (const auto& s : r->error_samples)
          std::fprintf(stderr, "faults: REST error: %s\n", s.c_str());
      }
      std::fflush(stdout);
      survived = survived && r->unclean_errors == 0 && r->hung == 0 &&
                 r->recovered == r->restarts && r->lost_reports == 0 && r->server_survived;
    }
  }

  for (const std::string& store : store_list) {
    if (!wanted(scenarios, "slow_worker")) break;
    auto setup = setup_for("slow_worker", store);
    if (!setup.ok()) {
      fail(setup.status());
      continue;
    }
    auto r = SlowWorker(*setup, sw);
    if (!r.ok()) {
      fail(r.status());
      continue;
    }
    std::printf(
        "bench=faults scenario=slow_worker store=%s lease_timeout_ms=%d long_step_ms=%d "
        "long_step=%s "
        "long_step_attempts=%d pauses=%d pause_ms=%.0f paused_trials=%lld paused_completed=%lld "
        "paused_max_attempt=%d control=%s control_attempts=%d\n",
        store.c_str(), sw.lease_timeout_s * 1000, 3 * sw.lease_timeout_s * 1000,
        r->long_step_state.c_str(), r->long_step_attempts, r->pauses, r->pause_ms,
        (long long)r->paused_trials, (long long)r->paused_completed, r->paused_max_attempt,
        r->control_state.c_str(), r->control_attempts);
    std::fflush(stdout);
    survived = survived && r->long_step_state == "completed" && r->long_step_attempts == 1 &&
               r->paused_completed == r->paused_trials && r->paused_max_attempt == 1 &&
               r->control_state == "completed" && r->control_attempts == 2;
  }

  for (const std::string& store : store_list) {
    if (!wanted(scenarios, "promotion")) break;
    auto setup = setup_for("promotion", store);
    if (!setup.ok()) {
      fail(setup.status());
      continue;
    }
    auto r = Promotion(*setup, po);
    if (!r.ok()) {
      fail(r.status());
      continue;
    }
    const int64_t lost = r->lost_reports + r->lost_completions + r->lost_pauses;
    std::printf(
        "bench=faults scenario=promotion store=%s workers=%d lease_timeout_ms=%d server_kills=%d "
        "upload_cuts=%d "
        "duration_s=%.0f trials=%lld promotions=%lld max_resume_step=%lld uploads=%lld pauses=%lld "
        "acked_reports=%lld completions=%lld lost=%lld lost_reports=%lld lost_completions=%lld "
        "lost_pauses=%lld "
        "dropped_reports=%lld bad_resumes=%lld restarted=%lld cut_previous_intact=%d "
        "cut_resumed=%d "
        "cut_wrong_resumes=%d cut_not_leased_again=%d paused=%lld "
        "checkpoints_intact=%lld stuck=%lld expired_segments=%lld rpc_errors=%s\n",
        store.c_str(), po.workers, po.lease_timeout_s * 1000, r->server_kills, r->upload_cuts,
        r->duration_s, (long long)r->trials, (long long)r->promotions,
        (long long)r->max_resume_step, (long long)r->uploads, (long long)r->pauses,
        (long long)r->acked_reports, (long long)r->acked_completions, (long long)lost,
        (long long)r->lost_reports, (long long)r->lost_completions, (long long)r->lost_pauses,
        (long long)r->dropped_reports, (long long)r->bad_resumes, (long long)r->restarted,
        r->cut_previous_intact, r->cut_resumed, r->cut_wrong_resumes, r->cut_not_leased_again,
        (long long)r->paused_at_end, (long long)r->checkpoints_intact, (long long)r->stuck,
        (long long)r->expired_segments, Codes(r->rpc_errors).c_str());
    for (const auto& s : r->samples) std::fprintf(stderr, "faults: promotion: %s\n", s.c_str());
    std::fflush(stdout);
    survived = survived && lost == 0 && r->acked_reports > 0 && r->promotions > 0 &&
               r->bad_resumes == 0 && r->restarted == 0 && r->server_kills == po.server_kills &&
               r->upload_cuts == po.upload_cuts && r->cut_previous_intact == r->upload_cuts &&
               r->cut_wrong_resumes == 0 &&
               r->cut_resumed + r->cut_not_leased_again == r->upload_cuts &&
               r->checkpoints_intact == r->paused_at_end && r->stuck == 0;
  }

  for (const std::string& store : store_list) {
    if (!wanted(scenarios, "migration")) break;
    auto setup = setup_for("migration", store);
    if (!setup.ok()) {
      fail(setup.status());
      continue;
    }
    auto r = Migration(*setup, mo);
    if (!r.ok() && r.status().IsFailedPrecondition()) {
      std::fprintf(stderr, "faults: migration skipped: %s\n", r.status().ToString().c_str());
      continue;
    }
    if (!r.ok()) {
      fail(r.status());
      continue;
    }
    std::printf(
        "bench=faults scenario=migration store=%s workers=%d fast_cpus=%.2f slow_cpus=%.2f "
        "lease_timeout_ms=%d hold_ms=%lld duration_s=%.0f trials=%lld completed=%lld pruned=%lld "
        "failed=%lld moves=%lld preemptions=%lld kills=%d kills_in_checkpoint=%d "
        "kills_mid_upload=%d kills_after_commit=%d kills_of_resumed=%d resumed=%d "
        "resumed_from_previous=%d resumed_from_new=%d lost=%d corrupt=%d not_followed=%d "
        "curve_gaps=%d stuck=%d experiment=%s\n",
        store.c_str(), mo.slow_workers + 1, mo.fast_cpus, mo.slow_cpus, mo.lease_timeout_s * 1000,
        (long long)mo.hold.count(), r->duration_s, (long long)r->trials, (long long)r->completed,
        (long long)r->pruned, (long long)r->failed, (long long)r->moves, (long long)r->preemptions,
        r->kills, r->kills_in_checkpoint, r->kills_mid_upload, r->kills_after_commit,
        r->kills_of_resumed, r->resumed, r->resumed_from_previous, r->resumed_from_new, r->lost,
        r->corrupt, r->not_followed, r->curve_gaps, r->stuck, r->experiment_state.c_str());
    for (const auto& s : r->samples) std::fprintf(stderr, "faults: migration: %s\n", s.c_str());
    std::fflush(stdout);
    survived = survived && r->kills_in_checkpoint > 0 && r->lost == 0 && r->corrupt == 0 &&
               r->stuck == 0 && r->curve_gaps == 0 && r->not_followed == 0 &&
               r->resumed_from_previous + r->resumed_from_new == r->resumed &&
               r->experiment_state == "completed";
  }

  pg.reset();
  if (own_dir && survived) std::filesystem::remove_all(dir);
  if (!survived) std::fprintf(stderr, "faults: logs are in %s\n", dir.c_str());
  return survived ? 0 : 1;
}
