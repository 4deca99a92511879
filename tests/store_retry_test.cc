// Conflicts on a real PostgreSQL: a store call whose transaction loses a
// race to a concurrent one (a serialization failure, SQLSTATE 40001) runs it
// again and succeeds, and what it meets on the rerun that is not a conflict
// is returned, not retried.
//
// The race is forced, not hoped for: the test's database runs every
// transaction under REPEATABLE READ, a transaction of the test's own updates
// the trial's row and holds it, the store's call blocks on that row (the
// test waits until PostgreSQL shows it waiting on a lock), and the test's
// transaction commits. PostgreSQL then fails the store's UPDATE with
// "could not serialize access due to concurrent update".
#include <gtest/gtest.h>

#include <pqxx/pqxx>

#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include "testing/store_backends.h"

namespace hpo::store {
namespace {

using testing::PostgresBackend;

class StoreRetryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HPO_REQUIRE_BACKEND(PostgresBackend);
    backend_ = std::make_unique<PostgresBackend>();
    // The store's write transactions take the database's default isolation
    // (READ COMMITTED unless an operator chose otherwise); REPEATABLE READ is
    // where two updates of one row conflict instead of queueing.
    backend_->Raw(
        "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_isolation = %L', "
        "current_database(), 'repeatable read'); END $$");
    StoreOptions options;
    options.on_retry = [this](const Status& why, int attempt) {
      std::lock_guard lock(mu_);
      retries_.emplace_back(why, attempt);
    };
    auto s = OpenStore(backend_->url(), options);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(s).value();
    auto e = store_->CreateExperiment({"exp", "{}", {}});
    ASSERT_TRUE(e.ok()) << e.status();
    NewTrial t;
    t.lease_owner = "w1";
    t.lease_ms = 600'000;
    auto trials = store_->CreateTrials(e->id, {t});
    ASSERT_TRUE(trials.ok()) << trials.status();
    trial_ = trials->at(0).id;
  }

  // Runs `call` on another thread while a transaction of the test's holds
  // an update of the trial's row (`update`, a SET clause), and commits that
  // transaction once `call` waits for the row. Returns what `call` returned.
  template <typename F>
  auto RaceWith(const std::string& update, F call) {
    pqxx::connection holder(backend_->url());
    pqxx::transaction<pqxx::repeatable_read> tx(holder);
    tx.exec("UPDATE trials SET " + update + " WHERE id = " + std::to_string(trial_));
    auto result = std::async(std::launch::async, call);
    // Polled on a connection of its own, one snapshot per query (a
    // transaction would keep showing the first one).
    pqxx::connection watcher(backend_->url());
    bool waiting = false;
    for (int i = 0; i < 600 && !waiting; ++i) {  // a minute: a hang fails the test
      pqxx::nontransaction n(watcher);
      waiting = n.exec("SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND "
                       "wait_event_type = 'Lock'")[0][0]
                    .as<int>() > 0;
      if (!waiting) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_TRUE(waiting) << "the store's call never waited for the row the test holds";
    tx.commit();
    return result.get();
  }

  std::vector<std::pair<Status, int>> Retries() {
    std::lock_guard lock(mu_);
    return retries_;
  }

  std::unique_ptr<PostgresBackend> backend_;
  std::unique_ptr<Store> store_;
  Id trial_ = 0;
  std::mutex mu_;
  std::vector<std::pair<Status, int>> retries_;  // GUARDED_BY(mu_)
};

TEST_F(StoreRetryTest, AReportThatLosesARaceIsRunAgainAndAcknowledged) {
  auto report = RaceWith("priority = priority + 1", [&] {
    return store_->ReportMeasurement(trial_, "w1", {1, R"({"loss": 0.5})", 10, "{}"}, 60'000);
  });
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->inserted);
  const auto retries = Retries();
  ASSERT_EQ(retries.size(), 1u);
  EXPECT_EQ(retries[0].first.code(), StatusCode::kAborted) << retries[0].first;
  EXPECT_NE(retries[0].first.message().find("could not serialize"), std::string::npos) << retries[0].first;
  EXPECT_EQ(retries[0].second, 2);
  // Both writes are there: the rerun saw the winner's change and kept it.
  auto measurements = store_->ListMeasurements(trial_);
  ASSERT_TRUE(measurements.ok()) << measurements.status();
  ASSERT_EQ(measurements->size(), 1u);
  EXPECT_EQ(measurements->at(0).metrics_json, R"({"loss": 0.5})");
  EXPECT_EQ(store_->GetTrial(trial_)->priority, 1);
  EXPECT_EQ(store_->GetTrial(trial_)->state, TrialState::kRunning);
}

TEST_F(StoreRetryTest, WhatTheRerunFindsIsAnsweredNotRetried) {
  // The winner hands the trial to another worker: the rerun's answer is
  // that w1 no longer holds it, a FailedPrecondition, returned at once.
  auto renew = RaceWith("lease_owner = 'w2'", [&] { return store_->RenewLease(trial_, "w1", 60'000); });
  EXPECT_EQ(renew.code(), StatusCode::kFailedPrecondition) << renew;
  EXPECT_NE(renew.message().find("held by 'w2'"), std::string::npos) << renew;
  const auto retries = Retries();
  ASSERT_EQ(retries.size(), 1u) << "one rerun for the conflict, none for the refusal";
  EXPECT_EQ(retries[0].first.code(), StatusCode::kAborted) << retries[0].first;
}

TEST_F(StoreRetryTest, ARefusalWithoutAConflictIsNotRetried) {
  EXPECT_EQ(store_->RenewLease(trial_, "w2", 60'000).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->RenewLease(trial_ + 1000, "w1", 60'000).code(), StatusCode::kNotFound);
  EXPECT_TRUE(Retries().empty());
}

}  // namespace
}  // namespace hpo::store
