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
//
// The same held row stops a group-commit batch midway, after its first
// call's write and before its second's, to show what a failure of the
// whole batch does there: a conflict runs the batch again whole, and a
// connection lost twice fails every call of it and leaves nothing written.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <mutex>
#include <pqxx/pqxx>
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
    EXPECT_NE(WaitForALockWaiter(), 0)
        << "the store's call never waited for the row the test holds";
    tx.commit();
    return result.get();
  }

  // The pid of a backend of the test's database waiting for a lock (other
  // than `except`), once there is one; 0 if none came within a minute.
  // Polled on a connection of its own, one snapshot per query (a
  // transaction would keep showing the first one).
  int WaitForALockWaiter(int except = 0) {
    pqxx::connection watcher(backend_->url());
    for (int i = 0; i < 600; ++i) {  // a minute: a hang fails the test
      pqxx::nontransaction n(watcher);
      auto rows = n.exec(
          "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND "
          "wait_event_type = 'Lock' AND pid <> " +
          std::to_string(except));
      if (!rows.empty()) return rows[0][0].as<int>();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return 0;
  }

  // A second handle on the database whose group commit puts exactly two
  // calls in a batch: its window is long enough that the first caller
  // waits for the second, so two calls meet in one transaction without any
  // timing in the test. Batches run their calls in trial-id order.
  std::unique_ptr<Store> OpenBatchingPairs() {
    StoreOptions options;
    options.group_commit_max_batch = 2;
    options.group_commit_window = std::chrono::seconds(60);
    options.on_retry = [this](const Status& why, int attempt) {
      std::lock_guard lock(mu_);
      retries_.emplace_back(why, attempt);
    };
    options.on_group_commit = [this](size_t calls) {
      std::lock_guard lock(mu_);
      batches_.push_back(calls);
    };
    auto s = OpenStore(backend_->url(), options);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  // A second trial leased to w1; its id is above trial_'s, so in a batch
  // its call runs after trial_'s.
  Id SecondTrial() {
    NewTrial t;
    t.lease_owner = "w1";
    t.lease_ms = 600'000;
    auto e = store_->GetTrial(trial_);
    auto trials = store_->CreateTrials(e->experiment_id, {t});
    EXPECT_TRUE(trials.ok()) << trials.status();
    return trials.ok() ? trials->at(0).id : 0;
  }

  static Measurement Step1() { return {1, R"({"loss": 0.5})", 10, "{}"}; }

  // A batch stopped midway: the test's transaction holds `second`'s row,
  // then trial_'s and `second`'s reports go through `batching` together, so
  // that the batch writes trial_'s step (it runs first, by trial id) and
  // waits for the row. Until `tx` ends.
  struct HeldBatch {
    explicit HeldBatch(const std::string& url) : holder(url), tx(holder) {}
    pqxx::connection holder;
    pqxx::transaction<pqxx::repeatable_read> tx;
    std::future<Result<ReportResult>> first, second;
  };
  std::unique_ptr<HeldBatch> StartHeldBatch(Store& batching, Id second) {
    auto held = std::make_unique<HeldBatch>(backend_->url());
    held->tx.exec("UPDATE trials SET priority = priority + 1 WHERE id = " + std::to_string(second));
    held->first = std::async(std::launch::async, [this, &batching] {
      return batching.ReportMeasurement(trial_, "w1", Step1(), 60'000);
    });
    held->second = std::async(std::launch::async, [&batching, second] {
      return batching.ReportMeasurement(second, "w1", Step1(), 60'000);
    });
    return held;
  }

  size_t MeasurementsOf(Id trial) {
    auto ms = store_->ListMeasurements(trial);
    EXPECT_TRUE(ms.ok()) << ms.status();
    return ms.ok() ? ms->size() : 0;
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
  std::vector<size_t> batches_;                  // GUARDED_BY(mu_)
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
  EXPECT_NE(retries[0].first.message().find("could not serialize"), std::string::npos)
      << retries[0].first;
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
  auto renew =
      RaceWith("lease_owner = 'w2'", [&] { return store_->RenewLease(trial_, "w1", 60'000); });
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

// --- group commit: a failure of the whole batch, midway ----------------------

TEST_F(StoreRetryTest, ABatchWhoseSecondCallLosesARaceRunsAgainWholeAndAcknowledgesBoth) {
  const Id second = SecondTrial();
  auto batching = OpenBatchingPairs();
  ASSERT_NE(batching, nullptr);
  // The test holds the second trial's row, so the batch's first call (the
  // first trial's report) is written, then its second waits; the test's
  // commit makes that second call lose the race. A conflict is the whole
  // transaction's: PostgreSQL has rolled it back, the first call's write
  // included, so the batch runs again from its first call.
  auto held = StartHeldBatch(*batching, second);
  ASSERT_NE(WaitForALockWaiter(), 0) << "the batch never waited for the row the test holds";
  held->tx.commit();
  auto a = held->first.get(), b = held->second.get();
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(a->inserted);
  EXPECT_TRUE(b->inserted);
  {
    std::lock_guard lock(mu_);
    ASSERT_EQ(retries_.size(), 1u) << "one rerun of the batch";
    EXPECT_EQ(retries_[0].first.code(), StatusCode::kAborted) << retries_[0].first;
    EXPECT_EQ(batches_, std::vector<size_t>{2}) << "both calls in one transaction, committed once";
  }
  // Each step once: the first call's write was undone with the batch and
  // made again by the rerun, not kept twice.
  EXPECT_EQ(MeasurementsOf(trial_), 1u);
  EXPECT_EQ(MeasurementsOf(second), 1u);
  EXPECT_EQ(store_->GetTrial(second)->priority, 1) << "the winner's change is kept";
}

TEST_F(StoreRetryTest, ABatchWhoseConnectionDiesTwiceFailsEveryCallAndWritesNothing) {
  const Id second = SecondTrial();
  auto batching = OpenBatchingPairs();
  ASSERT_NE(batching, nullptr);
  auto held = StartHeldBatch(*batching, second);
  // The batch's connection is ended while its first call's write is in and
  // its second call waits: the batch is tried once more on a new
  // connection, which is ended the same way.
  pqxx::connection admin(backend_->url());
  int waiter = 0;
  for (int kill = 0; kill < 2; ++kill) {
    waiter = WaitForALockWaiter(waiter);
    ASSERT_NE(waiter, 0) << "kill " << kill
                         << ": the batch never waited for the row the test holds";
    pqxx::nontransaction(admin).exec("SELECT pg_terminate_backend(" + std::to_string(waiter) + ")");
  }
  auto a = held->first.get(), b = held->second.get();
  held->tx.abort();
  // Neither call is acknowledged, and neither is half-written: the first
  // call's write went with the batch.
  EXPECT_EQ(a.status().code(), StatusCode::kUnavailable) << a.status();
  EXPECT_EQ(b.status().code(), StatusCode::kUnavailable) << b.status();
  EXPECT_EQ(MeasurementsOf(trial_), 0u);
  EXPECT_EQ(MeasurementsOf(second), 0u);
  {
    std::lock_guard lock(mu_);
    ASSERT_EQ(retries_.size(), 1u) << "one more try after a lost connection, not two";
    EXPECT_EQ(retries_[0].first.code(), StatusCode::kUnavailable) << retries_[0].first;
  }
  // The caller's own retry then lands (on the test's handle: alone, a call
  // on the pairing one would wait out its window for a second).
  auto again = store_->ReportMeasurement(trial_, "w1", Step1(), 60'000);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->inserted);
  EXPECT_EQ(MeasurementsOf(trial_), 1u);
}

}  // namespace
}  // namespace hpo::store
