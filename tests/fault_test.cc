// Small versions of the fault and load scenarios (testing/scenarios.h; the
// full-size runs are bench/faults and bench/load) against the real
// hpo-server and hpo-worker binaries. They assert what must hold after the
// fault - every trial ends, nothing acknowledged is lost, no call hangs, a
// live worker's trial is not taken away - and never how fast.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "testing/scenarios.h"
#include "testing/store_backends.h"

namespace hpo {
namespace {

using namespace std::chrono_literals;

class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setup_.server_bin = HPO_SERVER_BIN;
#ifdef HPO_WORKER_BIN
    setup_.worker_bin = HPO_WORKER_BIN;
#endif
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    setup_.dir =
        ::testing::TempDir() + "hpo-fault-" + std::to_string(getpid()) + "-" + info->name();
    std::filesystem::remove_all(setup_.dir);
    std::filesystem::create_directories(setup_.dir);
  }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(setup_.dir);
  }
  std::string Logs() const { return "logs in " + setup_.dir; }

  testing::Setup setup_;
};

#define REQUIRE_WORKER_BINARY() \
  if (setup_.worker_bin.empty()) GTEST_SKIP() << "hpo-worker is not built"

TEST_F(FaultTest, EveryTrialEndsWhenWorkersAreKilledMidTrial) {
  REQUIRE_WORKER_BINARY();
  testing::WorkerKillOptions o;
  o.kills = 5;
  o.workers = 2;
  o.lease_timeout_s = 2;
  o.steps = 6;
  o.step_ms = 250;
  auto r = testing::KillWorkers(setup_, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->kills, o.kills) << Logs();
  EXPECT_EQ(r->not_requeued, 0) << "a killed worker's trial was never handed out again; " << Logs();
  EXPECT_EQ(r->requeue_ms.size(), static_cast<size_t>(o.kills));
  EXPECT_EQ(r->experiment_state, "completed") << Logs();
  EXPECT_EQ(r->unfinished, 0) << Logs();
  EXPECT_EQ(r->completed + r->failed, r->trials);
  EXPECT_GT(r->completed, 0);
  EXPECT_LE(r->max_attempt, 3) << "max attempts is 3";
}

// Kills the server under load on each store; the reports it acknowledged
// must all be there afterwards.
template <typename Backend>
void AcknowledgedReportsSurviveServerKills(testing::Setup setup) {
  HPO_REQUIRE_BACKEND(Backend);
  Backend db;
  setup.store_url = db.url();
  testing::ServerKillOptions o;
  o.kills = 3;
  o.workers = 4;
  auto r = testing::KillServer(setup, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->kills, o.kills);
  EXPECT_GT(r->acked_reports, 0);
  EXPECT_EQ(r->lost_reports, 0) << (r->lost_samples.empty() ? "" : r->lost_samples[0]);
  EXPECT_EQ(r->recovery_ms.size(), static_cast<size_t>(o.kills))
      << "reports resumed after every restart";
}

TEST_F(FaultTest, AcknowledgedReportsSurviveServerKillsOnSqlite) {
  AcknowledgedReportsSurviveServerKills<testing::SqliteBackend>(setup_);
}

TEST_F(FaultTest, AcknowledgedReportsSurviveServerKillsOnPostgresql) {
  AcknowledgedReportsSurviveServerKills<testing::PostgresBackend>(setup_);
}

TEST_F(FaultTest, TheServerRidesOutPostgresqlRestartsWithoutHangingCalls) {
  testing::PostgresRestartOptions o;
  o.restarts = 2;
  o.workers = 4;
  o.rest_clients = 2;
  o.down = 1500ms;
  o.up = 1500ms;
  auto r = testing::RestartPostgres(setup_, o);
  if (!r.ok() && r.status().IsFailedPrecondition()) {
    // No PostgreSQL server binaries here.
    if (std::getenv("HPO_REQUIRE_POSTGRES")) FAIL() << r.status();
    GTEST_SKIP() << r.status();
  }
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->server_survived) << Logs();
  EXPECT_EQ(r->recovered, o.restarts)
      << "reports were acknowledged again after every restart; " << Logs();
  EXPECT_EQ(r->hung, 0) << "calls that ran into the " << o.bound.count() << " ms bound";
  EXPECT_EQ(r->unclean_errors, 0) << "errors other than UNAVAILABLE / 503: "
                                  << (r->error_samples.empty() ? "" : r->error_samples[0]);
  int64_t outage_errors = 0;
  for (const auto& [code, n] : r->rpc_errors) outage_errors += n;
  for (const auto& [code, n] : r->rest_errors) outage_errors += n;
  EXPECT_GT(outage_errors, 0) << "no call met the outage: the test did not test it";
  EXPECT_GT(r->acked_reports, 0);
  EXPECT_EQ(r->lost_reports, 0);
}

TEST_F(FaultTest, ALiveButSlowWorkerKeepsItsTrial) {
  REQUIRE_WORKER_BINARY();
  testing::SlowWorkerOptions o;
  o.lease_timeout_s = 2;
  o.heartbeat_ms = 500;
  o.pauses = 2;
  auto r = testing::SlowWorker(setup_, o);
  ASSERT_TRUE(r.ok()) << r.status();
  // A step three lease timeouts long, with heartbeats: the lease holds.
  EXPECT_EQ(r->long_step_state, "completed") << Logs();
  EXPECT_EQ(r->long_step_attempts, 1)
      << "the heartbeating worker's trial was taken away; " << Logs();
  // SIGSTOP for less than the lease: no false failure, no second attempt.
  EXPECT_EQ(r->pauses, o.pauses);
  EXPECT_EQ(r->paused_trials, o.pauses);
  EXPECT_EQ(r->paused_completed, r->paused_trials) << Logs();
  EXPECT_EQ(r->paused_max_attempt, 1) << Logs();
  // The control: stopped past the lease, the trial is handed out again
  // and still completes.
  EXPECT_EQ(r->control_state, "completed") << Logs();
  EXPECT_EQ(r->control_attempts, 2) << Logs();
}

// Promotion-type ASHA with server kills and workers that die mid-upload:
// nothing acknowledged is lost, a cut upload leaves the previous checkpoint
// whole, promoted trials resume from the step their checkpoint is of, and
// none is left leased.
template <typename Backend>
void PromotedTrialsSurviveKillsAndCutUploads(testing::Setup setup) {
  HPO_REQUIRE_BACKEND(Backend);
  Backend db;
  setup.store_url = db.url();
  testing::PromotionOptions o;
  o.workers = 4;
  o.step_time = 50ms;
  o.server_kills = 2;
  o.upload_cuts = 2;
  o.lease_timeout_s = 2;
  o.duration = 10s;
  auto r = testing::Promotion(setup, o);
  ASSERT_TRUE(r.ok()) << r.status();
  std::string samples;
  for (const auto& s : r->samples) samples += "\n  " + s;
  EXPECT_EQ(r->server_kills, o.server_kills);
  EXPECT_EQ(r->upload_cuts, o.upload_cuts)
      << "the run found no promoted trial to cut the upload of";
  EXPECT_GT(r->promotions, 0);
  EXPECT_GT(r->acked_reports, 0);
  EXPECT_EQ(r->lost_reports, 0) << samples;
  EXPECT_EQ(r->lost_completions, 0) << samples;
  EXPECT_EQ(r->lost_pauses, 0) << samples;
  EXPECT_EQ(r->bad_resumes, 0) << samples;
  EXPECT_EQ(r->restarted, 0) << samples;
  EXPECT_EQ(r->cut_previous_intact, r->upload_cuts) << samples;
  EXPECT_EQ(r->cut_wrong_resumes, 0)
      << "a cut trial was promoted again from another step" << samples;
  EXPECT_EQ(r->cut_resumed + r->cut_not_leased_again, r->upload_cuts) << samples;
  EXPECT_GT(r->paused_at_end, 0);
  EXPECT_EQ(r->checkpoints_intact, r->paused_at_end) << samples;
  EXPECT_EQ(r->stuck, 0) << samples;
}

TEST_F(FaultTest, PromotedTrialsSurviveServerKillsAndCutUploadsOnSqlite) {
  PromotedTrialsSurviveKillsAndCutUploads<testing::SqliteBackend>(setup_);
}

// Was disabled while one run in about four on PostgreSQL (under load) saw
// no acknowledged report within 30 s of a server restart: the stalled
// reconnects after a server restart, since fixed (a worker waits on its
// channel between retries; a lease whose answer was lost ends at the next
// lease). 16 runs in a row then passed, 8 of them beside two busy loops.
TEST_F(FaultTest, PromotedTrialsSurviveServerKillsAndCutUploadsOnPostgresql) {
  PromotedTrialsSurviveKillsAndCutUploads<testing::PostgresBackend>(setup_);
}

// Migration (stop-type ASHA moving trials to the fast device, preempting
// less advanced ones there) with the worker of a pausing trial killed -9
// inside its checkpoint's save, once before the new checkpoint is committed
// and once after: each trial goes back to the newest whole checkpoint (the
// previous one, or none, before the commit; the new one after it), runs
// again from there rather than from step 1, keeps a curve without gaps, and
// the experiment ends with no trial left behind. Real hpo-worker processes
// in CPU cgroups; skipped without root or Fashion-MNIST.
TEST_F(FaultTest, AWorkerKilledSavingAMigrationsCheckpointLosesNothing) {
  REQUIRE_WORKER_BINARY();
  testing::MigrationOptions o;
  o.kills = 2;
  o.resumed_kills = 0;  // resumed segments' pauses are too rare for a short run
  o.max_trials = 14;
  o.lease_timeout_s = 2;
  o.hold = 1000ms;
  o.timeout = 300s;
  auto r = testing::Migration(setup_, o);
  if (!r.ok() && r.status().IsFailedPrecondition()) GTEST_SKIP() << r.status();
  ASSERT_TRUE(r.ok()) << r.status();
  std::string samples;
  for (const auto& s : r->samples) samples += "\n  " + s;
  EXPECT_GT(r->moves, 0);
  ASSERT_EQ(r->kills, o.kills) << "the budget ran out before every kill; " << Logs() << samples;
  EXPECT_EQ(r->kills_in_checkpoint, r->kills) << samples;
  EXPECT_GE(r->kills_after_commit, 1) << samples;
  EXPECT_EQ(r->lost, 0) << "a killed trial went back before its newest whole checkpoint" << samples;
  EXPECT_EQ(r->corrupt, 0) << samples;
  EXPECT_EQ(r->not_followed, 0) << samples;
  EXPECT_EQ(r->resumed, r->kills_in_checkpoint) << samples;
  EXPECT_EQ(r->resumed_from_new, r->kills_after_commit)
      << "a committed checkpoint was not resumed from" << samples;
  EXPECT_EQ(r->resumed_from_previous + r->resumed_from_new, r->resumed) << samples;
  EXPECT_EQ(r->curve_gaps, 0) << samples;
  EXPECT_EQ(r->stuck, 0) << samples;
  EXPECT_EQ(r->experiment_state, "completed") << Logs();
  EXPECT_EQ(r->completed, r->trials) << "no trial is pruned (bootstrap) or failed; " << Logs();
}

TEST_F(FaultTest, ShortLoadOnPostgresqlHasNoErrors) {
  HPO_REQUIRE_BACKEND(testing::PostgresBackend);
  testing::PostgresBackend db;
  setup_.store_url = db.url();
  testing::LoadOptions o;
  o.workers = 20;
  o.rest_clients = 5;
  o.duration = 10s;
  o.experiments = 2;
  o.step_time = 100ms;
  auto r = testing::RunLoad(setup_, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->reports, 0);
  EXPECT_GT(r->rest_calls, 0);
  std::string codes;
  for (const auto& [code, n] : r->rpc_error_codes) codes += code + ":" + std::to_string(n) + " ";
  EXPECT_EQ(r->rpc_errors, 0) << codes << Logs();
  EXPECT_EQ(r->rest_errors, 0) << (r->rest_error_samples.empty() ? "" : r->rest_error_samples[0]);
}

}  // namespace
}  // namespace hpo
