#include "server/store/sql_store.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>
#include <tuple>
#include <type_traits>

#include "common/token.h"

namespace hpo::store {
namespace {

using TxMode = SqlConnection::TxMode;

constexpr const char* kTrialColumns =
    "id, experiment_id, space_id, number, params, system_params, state, priority, attempt, "
    "lease_owner, lease_expires_ms, created_ms, started_ms, finished_ms, updated_ms, "
    "final_metrics, reason, level, stop_step, resume_step, revision, curve_reset_revision";

TrialState TrialStateOrThrow(const std::string& s) {
  auto r = ParseTrialState(s);
  if (!r.ok()) Throw(Status::DataLoss("stored trial has unknown state '" + s + "'"));
  return *r;
}

TrialRecord ReadTrial(const SqlRow& r) {
  TrialRecord t;
  SqlColumns in(r);
  in >> t.id >> t.experiment_id >> t.space_id >> t.number >> t.params_json >> t.system_params_json;
  t.state = TrialStateOrThrow(in.Text());
  in >> t.priority >> t.attempt >> t.lease_owner >> t.lease_expires_ms >> t.created_ms >>
      t.started_ms >> t.finished_ms >> t.updated_ms >> t.final_metrics_json >> t.reason >>
      t.level >> t.stop_step >> t.resume_step >> t.revision >> t.curve_reset_revision;
  return t;
}

constexpr const char* kExperimentColumns =
    "id, name, spec, state, reason, created_ms, updated_ms, finished_ms";

ExperimentState ExperimentStateOrThrow(const std::string& name) {
  auto state = ParseExperimentState(name);
  if (!state.ok()) Throw(Status::DataLoss("stored experiment has unknown state '" + name + "'"));
  return *state;
}

ExperimentRecord ReadExperiment(const SqlRow& r) {
  ExperimentRecord e;
  SqlColumns in(r);
  in >> e.id >> e.name >> e.spec_json;
  e.state = ExperimentStateOrThrow(in.Text());
  in >> e.reason >> e.created_ms >> e.updated_ms >> e.finished_ms;
  return e;
}

SearchSpaceRecord ReadSpace(const SqlRow& r) {
  SearchSpaceRecord sp;
  SqlColumns(r) >> sp.id >> sp.experiment_id >> sp.name >> sp.spec_json;
  return sp;
}

std::string TrialName(Id id) { return "trial " + std::to_string(id); }

// Why a conditional update on a trial touched no row, as an error.
Status ExplainTrialConflict(SqlConnection& c, Id trial_id, const std::string& owner,
                            std::string_view action) {
  auto rows = c.Query("SELECT state, lease_owner FROM trials WHERE id = $1", {trial_id});
  if (rows.empty()) return Status::NotFound(TrialName(trial_id) + " does not exist");
  const TrialState state = TrialStateOrThrow(rows[0].Text(0));
  const std::string holder = rows[0].Text(1);
  std::string msg = "cannot " + std::string(action) + " " + TrialName(trial_id) + ": it is " +
                    std::string(ToString(state));
  if (IsFinished(state)) {
    msg += ", and finished trials are immutable";
  } else if (state == TrialState::kPending || state == TrialState::kPaused) {
    msg += " (not leased; its lease may have expired)";
  } else if (holder != owner) {
    msg += " under a lease held by '" + holder + "', not '" + owner + "'";
  }
  return Status::FailedPrecondition(msg);
}

bool IsFiniteNonNegative(double v) { return std::isfinite(v) && v >= 0; }

// A speed observation's insert, up to its values (SpeedObservation's
// fields in order, then the time observed).
constexpr const char* kInsertSpeed =
    "INSERT INTO speed_observations (device_id, device_class, workload, system_setting, "
    "samples_per_sec, trial_id, observed_ms) ";

Status CheckSpeedObservation(const SpeedObservation& o) {
  if (!IsFiniteNonNegative(o.samples_per_sec)) {
    return Status::InvalidArgument("samples_per_sec: must be a finite number >= 0");
  }
  if (o.workload.empty()) return Status::InvalidArgument("workload: must not be empty");
  return Status::OK();
}

Status CheckLeaseArgs(const std::string& owner, TimeMs lease_ms) {
  if (owner.empty()) return Status::InvalidArgument("owner: must not be empty");
  if (lease_ms <= 0) return Status::InvalidArgument("lease_ms: must be positive");
  // Far beyond any lease (a day is long): keeps now + lease_ms in range.
  constexpr TimeMs kMaxLeaseMs = TimeMs{365} * 24 * 3600 * 1000;
  if (lease_ms > kMaxLeaseMs) return Status::InvalidArgument("lease_ms: must be at most a year");
  return Status::OK();
}

}  // namespace

// ---------------------------------------------------------------------------
// Connection pool and transactions

SqlStore::SqlStore(std::unique_ptr<SqlDriver> driver, StoreOptions options)
    : driver_(std::move(driver)), options_(std::move(options)) {
  if (options_.group_commit) {
    CommitBatcher::Options b;
    b.max_batch = std::clamp(options_.group_commit_max_batch, 1, 64);
    b.window = std::max(options_.group_commit_window, std::chrono::microseconds(0));
    // Half the pool at most, so that leases and reads always find a
    // connection while batches commit.
    b.max_in_flight = std::max(1, driver_->max_connections() / 2);
    batcher_ = std::make_unique<CommitBatcher>(
        b, [this](const std::vector<const CommitBatcher::Call*>& batch) {
          return CommitBatch(batch);
        });
  }
}

TimeMs SqlStore::Now() const {
  if (options_.clock) return options_.clock();
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

std::unique_ptr<SqlConnection> SqlStore::Acquire() {
  {
    MutexLock lock(mu_);
    while (idle_.empty() && open_ >= driver_->max_connections()) cv_.Wait(mu_);
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
    ++open_;
  }
  try {
    return driver_->Connect();  // without the lock: connecting can take seconds
  } catch (...) {
    MutexLock lock(mu_);
    --open_;
    cv_.NotifyOne();
    throw;
  }
}

void SqlStore::Release(std::unique_ptr<SqlConnection> c) {
  MutexLock lock(mu_);
  if (c->healthy()) {
    idle_.push_back(std::move(c));
  } else {
    --open_;  // dropped; the next Acquire reconnects
  }
  cv_.NotifyOne();
}

bool SqlStore::RetryAfter(const Status& s, bool committing, int attempt) {
  if (!IsRetryable(s)) return false;
  if (s.IsAborted()) {
    // The database rolled the loser back whole, even when it was the COMMIT
    // that failed, so every body may run again. The pause lets the winner
    // finish; its jitter keeps two losers from meeting again in lockstep.
    if (attempt + 1 >= kMaxConflictAttempts) return false;
    thread_local std::minstd_rand rng(std::random_device{}());
    const int ceiling_ms = 5 << attempt;  // 5, 10, 20, 40 ms
    std::this_thread::sleep_for(std::chrono::milliseconds(
        std::uniform_int_distribution<int>(ceiling_ms / 2, ceiling_ms)(rng)));
  } else if (s.IsUnavailable()) {
    // The connection died (the database may have restarted): try once
    // more on a new one. Before COMMIT nothing was applied. A single
    // statement lost in flight may have been applied: every such call run
    // with LostStatement::kReplay is idempotent except a lease, whose
    // orphan expires and is reclaimed; kFail counts it as the COMMIT.
    // Past that, or once the COMMIT was sent, the caller decides.
    if (committing || attempt > 0) return false;
  } else {
    return false;  // a full disk or a slow database does not pass within one call
  }
  if (options_.on_retry) options_.on_retry(s, attempt + 2);
  return true;
}

template <typename F>
auto SqlStore::Run(TxMode mode, F&& body, LostStatement lost) {
  using T = std::invoke_result_t<F&, SqlConnection&>;
  using Out = std::conditional_t<std::is_void_v<T>, Status, Result<T>>;
  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<SqlConnection> conn;
    bool committing = false;
    try {
      conn = Acquire();
      conn->Begin(mode);
      // kSingle's statement commits itself: with kFail, once it may have
      // been sent, it counts as the COMMIT (a failed connect does not).
      if (mode == TxMode::kSingle && lost == LostStatement::kFail) committing = true;
      if constexpr (std::is_void_v<T>) {
        body(*conn);
        committing = true;
        conn->Commit();
        Release(std::move(conn));
        return Out(Status::OK());
      } else {
        T value = body(*conn);
        committing = true;
        conn->Commit();
        Release(std::move(conn));
        return Out(std::move(value));
      }
    } catch (const SqlError& e) {
      if (conn) {
        conn->Rollback();
        Release(std::move(conn));
      }
      if (!RetryAfter(e.status, committing, attempt)) return Out(e.status);
    } catch (const std::exception& e) {
      if (conn) {
        conn->Rollback();
        Release(std::move(conn));
      }
      return Out(Status::Internal(driver_->display_url() + ": " + e.what()));
    }
  }
}

template <typename F>
auto SqlStore::RunBatched(TxMode mode, int64_t order, F&& body) {
  using T = std::invoke_result_t<F&, SqlConnection&>;
  using Out = std::conditional_t<std::is_void_v<T>, Status, Result<T>>;
  if (batcher_ == nullptr) return Out(Run(mode, std::forward<F>(body)));
  if constexpr (std::is_void_v<T>) {
    return Out(batcher_->Submit({[&](SqlConnection& c) { body(c); }, mode, order}));
  } else {
    T value{};
    Status s = batcher_->Submit({[&](SqlConnection& c) { value = body(c); }, mode, order});
    if (!s.ok()) return Out(std::move(s));
    return Out(std::move(value));
  }
}

namespace {
// Whether a call's failure inside a batch fails the whole transaction: a
// lost race or connection, or an error that may have rolled the
// transaction back under us (SQLite does on a full disk or an I/O error),
// is not one call's to keep. Everything else (the call's own conflict, a
// bad argument, a constraint) is rolled back to that call's savepoint.
bool FailsTheBatch(const Status& s, const SqlConnection& c) {
  return IsRetryable(s) || !c.healthy();
}
}  // namespace

std::vector<Status> SqlStore::CommitBatch(const std::vector<const CommitBatcher::Call*>& batch) {
  if (batch.size() == 1) {
    Status s = Run(batch[0]->mode, batch[0]->work);
    if (options_.on_group_commit) options_.on_group_commit(1);
    return {std::move(s)};
  }
  std::vector<Status> out(batch.size());
  // First without savepoints, so that a call costs its own statements and
  // nothing more (on PostgreSQL a savepoint is a round trip per call). A
  // call that fails - rare: a conflict, a bad argument - sends the batch
  // back, rolled back whole, through savepoints, where a failing call
  // leaves no trace and the others commit. The work of a call may run more
  // than once, as it does when a transaction is retried.
  bool isolate = false;
  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<SqlConnection> conn;
    bool committing = false;
    try {
      conn = Acquire();
      conn->Begin(TxMode::kWrite);
      if (!isolate) {
        bool failed = false;
        for (size_t i = 0; i < batch.size() && !failed; ++i) {
          try {
            batch[i]->work(*conn);
            out[i] = Status::OK();
          } catch (const SqlError& e) {
            if (FailsTheBatch(e.status, *conn)) throw;
            failed = true;
          } catch (const std::exception&) {
            failed = true;
          }
        }
        if (!failed) {
          committing = true;
          conn->Commit();
          Release(std::move(conn));
          if (options_.on_group_commit) options_.on_group_commit(batch.size());
          return out;
        }
        conn->Rollback();
        Release(std::move(conn));
        isolate = true;
        --attempt;  // not a retry of a failed transaction
        continue;
      }
      for (size_t i = 0; i < batch.size(); ++i) {
        conn->Savepoint();
        try {
          batch[i]->work(*conn);
          conn->ReleaseSavepoint();
          out[i] = Status::OK();
        } catch (const SqlError& e) {
          if (FailsTheBatch(e.status, *conn)) throw;
          conn->RollbackToSavepoint();
          out[i] = e.status;
        } catch (const std::exception& e) {
          conn->RollbackToSavepoint();
          out[i] = Status::Internal(driver_->display_url() + ": " + e.what());
        }
      }
      committing = true;
      conn->Commit();
      Release(std::move(conn));
      if (options_.on_group_commit) options_.on_group_commit(batch.size());
      return out;
    } catch (const SqlError& e) {
      if (conn) {
        conn->Rollback();
        Release(std::move(conn));
      }
      // Nothing of the batch committed (or, after a COMMIT whose answer was
      // lost, nobody knows): every call gets the batch's failure, none an OK.
      if (!RetryAfter(e.status, committing, attempt)) {
        out.assign(batch.size(), e.status);
        if (options_.on_group_commit) options_.on_group_commit(batch.size());
        return out;
      }
    } catch (const std::exception& e) {
      if (conn) {
        conn->Rollback();
        Release(std::move(conn));
      }
      out.assign(batch.size(), Status::Internal(driver_->display_url() + ": " + e.what()));
      if (options_.on_group_commit) options_.on_group_commit(batch.size());
      return out;
    }
  }
}

Result<std::unique_ptr<Store>> SqlStore::Open(std::unique_ptr<SqlDriver> driver,
                                              StoreOptions options) {
  std::unique_ptr<SqlStore> store(new SqlStore(std::move(driver), std::move(options)));
  Status s = store->MigrateOnOneConnection();
  if (!s.ok()) return s;
  return std::unique_ptr<Store>(std::move(store));
}

Status SqlStore::MigrateOnOneConnection() {
  // Not through Run: the driver's steps before and after must reach the
  // connection the migrations run on, and a retry on another connection
  // would miss them.
  std::unique_ptr<SqlConnection> conn;
  try {
    conn = Acquire();
    driver_->BeforeMigrations(*conn);
    conn->Begin(TxMode::kWrite);
    try {
      Migrate(*conn);
      driver_->CheckMigrated(*conn);
      conn->Commit();
    } catch (...) {
      conn->Rollback();
      driver_->AfterMigrations(*conn);
      throw;
    }
    driver_->AfterMigrations(*conn);
    Release(std::move(conn));
    return Status::OK();
  } catch (const SqlError& e) {
    if (conn) Release(std::move(conn));
    return e.status;
  } catch (const std::exception& e) {
    if (conn) Release(std::move(conn));
    return Status::Internal(driver_->display_url() + ": " + e.what());
  }
}

void SqlStore::Migrate(SqlConnection& c) {
  driver_->LockForMigration(c);
  c.ExecScript(
      "CREATE TABLE IF NOT EXISTS schema_version ("
      " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_ms BIGINT NOT NULL)");
  const int current = static_cast<int>(
      c.Query("SELECT COALESCE(MAX(version), 0) FROM schema_version", {})[0].Int(0));
  auto pending = PendingMigrations(driver_->migrations(), current, driver_->display_url());
  if (!pending.ok()) Throw(pending.status());
  for (const Migration* m : *pending) {
    try {
      c.ExecScript(m->sql);
    } catch (const SqlError& e) {
      Throw(e.status.WithContext("migration " + std::to_string(m->version) + "_" +
                                 std::string(m->name) + " failed (nothing was applied)"));
    }
    c.Query("INSERT INTO schema_version (version, name, applied_ms) VALUES ($1, $2, $3)",
            {int64_t{m->version}, std::string(m->name), Now()});
  }
}

Result<int> SqlStore::SchemaVersion() {
  return Run(TxMode::kReadOne, [&](SqlConnection& c) {
    return static_cast<int>(
        c.Query("SELECT COALESCE(MAX(version), 0) FROM schema_version", {})[0].Int(0));
  });
}

// ---------------------------------------------------------------------------
// Experiments

Result<ExperimentRecord> SqlStore::CreateExperiment(const NewExperiment& e) {
  if (e.name.empty()) return Status::InvalidArgument("experiment name: must not be empty");
  std::set<std::string> names;
  for (size_t i = 0; i < e.spaces.size(); ++i) {
    const auto& name = e.spaces[i].name;
    if (name.empty()) {
      return Status::InvalidArgument("spaces[" + std::to_string(i) + "].name: must not be empty");
    }
    if (!names.insert(name).second) {
      return Status::InvalidArgument("spaces[" + std::to_string(i) + "].name: '" + name +
                                     "' is used by an earlier space");
    }
  }
  return Run(TxMode::kWrite, [&](SqlConnection& c) {
    const TimeMs now = Now();
    auto rows = c.Query(
        "INSERT INTO experiments (name, spec, state, created_ms, updated_ms) "
        "VALUES ($1, $2, 'running', $3, $3) RETURNING " +
            std::string(kExperimentColumns),
        {e.name, e.spec_json, now});
    ExperimentRecord rec = ReadExperiment(rows.at(0));
    for (const auto& s : e.spaces) {
      auto srow = c.Query(
          "INSERT INTO search_spaces (experiment_id, name, spec) VALUES ($1, $2, $3) "
          "RETURNING id, experiment_id, name, spec",
          {rec.id, s.name, s.spec_json});
      rec.spaces.push_back(ReadSpace(srow.at(0)));
    }
    return rec;
  });
}

Result<ExperimentRecord> SqlStore::GetExperiment(Id id) {
  return Run(TxMode::kReadOne, [&](SqlConnection& c) {
    auto rows = c.Query(
        "SELECT " + std::string(kExperimentColumns) + " FROM experiments WHERE id = $1", {id});
    if (rows.empty())
      Throw(Status::NotFound("experiment " + std::to_string(id) + " does not exist"));
    ExperimentRecord rec = ReadExperiment(rows[0]);
    for (const auto& r : c.Query("SELECT id, experiment_id, name, spec FROM search_spaces "
                                 "WHERE experiment_id = $1 ORDER BY id",
                                 {id})) {
      rec.spaces.push_back(ReadSpace(r));
    }
    return rec;
  });
}

Result<ExperimentState> SqlStore::GetExperimentState(Id id) {
  return Run(TxMode::kReadOne, [&](SqlConnection& c) {
    auto rows = c.Query("SELECT state FROM experiments WHERE id = $1", {id});
    if (rows.empty())
      Throw(Status::NotFound("experiment " + std::to_string(id) + " does not exist"));
    return ExperimentStateOrThrow(rows[0].Text(0));
  });
}

Result<std::vector<ExperimentRecord>> SqlStore::ListExperiments(int64_t offset, int64_t limit) {
  if (offset < 0 || limit < 0) {
    return Status::InvalidArgument("offset and limit: must not be negative");
  }
  return Run(TxMode::kReadOne, [&](SqlConnection& c) {
    std::vector<ExperimentRecord> out;
    for (const auto& r : c.Query("SELECT " + std::string(kExperimentColumns) +
                                     " FROM experiments ORDER BY id DESC LIMIT $1 OFFSET $2",
                                 {limit, offset})) {
      out.push_back(ReadExperiment(r));
    }
    if (out.empty()) return out;
    std::map<Id, ExperimentRecord*> by_id;
    for (auto& e : out) by_id[e.id] = &e;
    for (const auto& r : c.Query("SELECT id, experiment_id, name, spec FROM search_spaces "
                                 "WHERE experiment_id BETWEEN $1 AND $2 ORDER BY id",
                                 {out.back().id, out.front().id})) {
      auto it = by_id.find(r.Int(1));
      if (it != by_id.end()) it->second->spaces.push_back(ReadSpace(r));
    }
    return out;
  });
}

Status SqlStore::FinishExperiment(Id id, ExperimentState state, std::string_view reason) {
  if (state == ExperimentState::kRunning) {
    return Status::InvalidArgument(
        "state: an experiment can only be finished as completed, "
        "cancelled or failed");
  }
  return Run(TxMode::kWrite, [&](SqlConnection& c) {
    const TimeMs now = Now();
    auto rows = c.Query(
        "UPDATE experiments SET state = $2, reason = $3, updated_ms = $4, finished_ms = $4 "
        "WHERE id = $1 AND state = 'running' RETURNING id",
        {id, std::string(ToString(state)), std::string(reason), now});
    if (rows.empty()) {
      auto cur = c.Query("SELECT state FROM experiments WHERE id = $1", {id});
      if (cur.empty())
        Throw(Status::NotFound("experiment " + std::to_string(id) + " does not exist"));
      Throw(Status::FailedPrecondition("experiment " + std::to_string(id) + " has already ended (" +
                                       cur[0].Text(0) + ")"));
    }
    // Pending trials never start once the experiment ended; cancelling or
    // failing it also stops the trials in flight (workers see it on their
    // next report). The reason stays on the experiment's row alone: copied
    // into each trial, one long reason multiplied by the trial count (50
    // trials and a 1 MiB reason grew the store by 107 MB).
    const std::string why = "experiment " + std::string(ToString(state));
    const bool stop_running = state != ExperimentState::kCompleted;
    // A paused trial of a completed experiment was never promoted: for
    // successive halving that is being stopped at its rung.
    c.Query(
        "UPDATE trials SET state = $2, reason = $3, finished_ms = $4, updated_ms = $4 "
        "WHERE experiment_id = $1 AND state = 'paused'",
        {id, std::string(stop_running ? "cancelled" : "pruned"),
         stop_running ? why : std::string("not promoted before the experiment ended"), now});
    c.Query(
        "UPDATE trials SET state = 'cancelled', reason = $2, finished_ms = $3, updated_ms = $3, "
        "lease_expires_ms = NULL "
        "WHERE experiment_id = $1 AND (state = 'pending' OR (CAST($4 AS INTEGER) = 1 AND state IN "
        "('leased', "
        "'running')))",
        {id, why, now, int64_t{stop_running ? 1 : 0}});
  });
}

// ---------------------------------------------------------------------------
// Trials

Result<std::vector<TrialRecord>> SqlStore::CreateTrialsUpTo(Id experiment_id,
                                                            const std::vector<NewTrial>& trials,
                                                            const TrialLimits& limits) {
  for (size_t i = 0; i < trials.size(); ++i) {
    if (!std::isfinite(trials[i].priority)) {
      return Status::InvalidArgument("trials[" + std::to_string(i) + "].priority: must be finite");
    }
    if (!trials[i].lease_owner.empty()) {
      HPO_RETURN_IF_ERROR(CheckLeaseArgs(trials[i].lease_owner, trials[i].lease_ms)
                              .WithContext("trials[" + std::to_string(i) + "]"));
    }
  }
  if (driver_->stored_functions()) return CreateTrialsInOneCall(experiment_id, trials, limits);
  const auto create = [&](SqlConnection& c) {
    auto exp = c.Query("SELECT state, next_number FROM experiments WHERE id = $1 {FOR_UPDATE}",
                       {experiment_id});
    const std::string name = "experiment " + std::to_string(experiment_id);
    if (exp.empty()) Throw(Status::NotFound(name + " does not exist"));
    if (exp[0].Text(0) != "running") {
      Throw(Status::FailedPrecondition(name + " has ended (" + exp[0].Text(0) +
                                       "); it takes no new trials"));
    }
    int64_t number = exp[0].Int(1);
    int64_t n = static_cast<int64_t>(trials.size());
    if (limits.max_total) n = std::clamp<int64_t>(*limits.max_total - number, 0, n);
    if (limits.max_unfinished && n > 0) {
      // The experiment's row is locked above: no other server counts or
      // inserts in between.
      const int64_t unfinished = c.Query(
                                      "SELECT COUNT(*) FROM trials WHERE experiment_id = $1 AND "
                                      "state IN ('pending', 'leased', 'running')",
                                      {experiment_id})
                                     .at(0)
                                     .Int(0);
      n = std::clamp<int64_t>(*limits.max_unfinished - unfinished, 0, n);
    }
    std::set<Id> spaces;
    for (const auto& r :
         c.Query("SELECT id FROM search_spaces WHERE experiment_id = $1", {experiment_id})) {
      spaces.insert(r.Int(0));
    }
    const TimeMs now = Now();
    std::vector<TrialRecord> out;
    out.reserve(n);
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      const NewTrial& t = trials[i];
      if (t.space_id && !spaces.count(*t.space_id)) {
        Throw(Status::InvalidArgument("trials[" + std::to_string(i) + "].space_id: search space " +
                                      std::to_string(*t.space_id) + " is not part of " + name));
      }
      const bool leased = !t.lease_owner.empty();
      auto rows = c.Query(
          "INSERT INTO trials (experiment_id, space_id, number, params, system_params, state, "
          "priority, created_ms, updated_ms, attempt, lease_owner, lease_expires_ms, started_ms, "
          "stop_step) "
          "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9, $10, $11, $12, $13) "
          "RETURNING " +
              std::string(kTrialColumns),
          {experiment_id, Opt(t.space_id), number++, t.params_json, t.system_params_json,
           std::string(leased ? "leased" : "pending"), t.priority, now, int64_t{leased ? 1 : 0},
           t.lease_owner, leased ? SqlValue(now + t.lease_ms) : Null(),
           leased ? SqlValue(now) : Null(), Opt(t.stop_step)});
      out.push_back(ReadTrial(rows.at(0)));
    }
    c.Query("UPDATE experiments SET next_number = $2, updated_ms = $3 WHERE id = $1",
            {experiment_id, number, now});
    return out;
  };
  // With one connection (SQLite) a write waits for the batch in flight
  // anyway: the trials made for a lease join the next batch and share its
  // commit (its fsync) instead of paying one of their own (server CPU per
  // trial at 16 workers, bench/server_bench: 0.93-0.95 -> 0.85-0.89 ms).
  // With a pool they commit on their own (PostgreSQL, which has the
  // one-statement path above, did so before it): inside a batch, the
  // experiment's row lock taken above would be held while the rest of the
  // batch runs, and the leases making trials for that experiment in other
  // batches would queue behind it (bench/load, 200 workers: lease p99
  // 178-197 -> 263-284 ms). In a batch they come first (the lowest order).
  if (driver_->max_connections() == 1) {
    return RunBatched(TxMode::kWrite, std::numeric_limits<int64_t>::min(), create);
  }
  return Run(TxMode::kWrite, create);
}

// PostgreSQL: the rules above in one statement, hpo_create_trials
// (sql/postgresql/0007_create_trials.sql). The separate statements cost 6
// round trips per batch of new trials plus one per trial, with the
// experiment's row locked across them: 13% of the server's context
// switches at 16 workers. In one statement the server's CPU per trial
// fell 4-8% at 1 to 16 workers (bench/README.md, server_bench, "New trials
// in one statement").
Result<std::vector<TrialRecord>> SqlStore::CreateTrialsInOneCall(
    Id experiment_id, const std::vector<NewTrial>& trials, const TrialLimits& limits) {
  nlohmann::json items = nlohmann::json::array();
  for (const NewTrial& t : trials) {
    items.push_back({{"space_id", t.space_id ? nlohmann::json(*t.space_id) : nlohmann::json()},
                     {"params", t.params_json},
                     {"system_params", t.system_params_json},
                     {"priority", t.priority},
                     {"lease_owner", t.lease_owner},
                     {"lease_ms", t.lease_ms},
                     {"stop_step", t.stop_step ? nlohmann::json(*t.stop_step) : nlohmann::json()}});
  }
  std::string json;
  try {
    json = items.dump();
  } catch (const nlohmann::json::exception&) {  // text that is not UTF-8
    return Status::InvalidArgument(
        "trials: params, system params and lease owners must be UTF-8 text");
  }
  // `now` is read before the statement waits for the experiment's row, as
  // every other write here reads it before its statements run.
  // Not replayed after a lost connection: the trials may have been made
  // (the separate statements' COMMIT is not replayed either). The caller
  // asks again, and a leased orphan expires and is reclaimed.
  return Run(
      TxMode::kSingle,
      [&](SqlConnection& c) {
        std::vector<TrialRecord> out;
        for (const auto& r : c.Query(
                 "SELECT " + std::string(kTrialColumns) +
                     " FROM hpo_create_trials($1, $2, $3, $4, $5) ORDER BY number",
                 {experiment_id, Opt(limits.max_total), Opt(limits.max_unfinished), Now(), json})) {
          out.push_back(ReadTrial(r));
        }
        return out;
      },
      LostStatement::kFail);
}

Result<TrialRecord> SqlStore::GetTrial(Id id) {
  return Run(TxMode::kReadOne, [&](SqlConnection& c) {
    auto rows =
        c.Query("SELECT " + std::string(kTrialColumns) + " FROM trials WHERE id = $1", {id});
    if (rows.empty()) Throw(Status::NotFound(TrialName(id) + " does not exist"));
    return ReadTrial(rows[0]);
  });
}

namespace {
void RequireExperiment(SqlConnection& c, Id experiment_id) {
  if (c.Query("SELECT id FROM experiments WHERE id = $1", {experiment_id}).empty()) {
    Throw(Status::NotFound("experiment " + std::to_string(experiment_id) + " does not exist"));
  }
}
}  // namespace

Result<std::vector<TrialRecord>> SqlStore::ListTrials(Id experiment_id, const TrialFilter& f) {
  if (f.offset < 0 || f.limit < 0) {
    return Status::InvalidArgument("offset and limit: must not be negative");
  }
  return Run(TxMode::kReadOne, [&](SqlConnection& c) {
    RequireExperiment(c, experiment_id);
    std::vector<TrialRecord> out;
    SqlValue state = f.state ? SqlValue(std::string(ToString(*f.state))) : Null();
    for (const auto& r : c.Query("SELECT " + std::string(kTrialColumns) +
                                     " FROM trials WHERE experiment_id = $1"
                                     " AND (CAST($2 AS TEXT) IS NULL OR state = $2)"
                                     " AND (CAST($3 AS BIGINT) IS NULL OR space_id = $3)"
                                     " AND (CAST($6 AS BIGINT) IS NULL OR number > $6)"
                                     " AND (CAST($7 AS BIGINT) IS NULL OR revision >= $7)"
                                     " ORDER BY number LIMIT $4 OFFSET $5",
                                 {experiment_id, state, Opt(f.space_id), f.limit, f.offset,
                                  Opt(f.after_number), Opt(f.since_revision)})) {
      out.push_back(ReadTrial(r));
    }
    return out;
  });
}

Result<std::vector<TrialRecord>> SqlStore::ListLeasedTrials(int64_t limit) {
  if (limit < 0) return Status::InvalidArgument("limit: must not be negative");
  return Run(TxMode::kReadOne, [&](SqlConnection& c) {
    std::vector<TrialRecord> out;
    // "leased" sorts before "running", as the order promises.
    for (const auto& r :
         c.Query("SELECT " + std::string(kTrialColumns) +
                     " FROM trials WHERE state IN ($1, $2)"
                     " AND experiment_id IN (SELECT id FROM experiments WHERE state = $3)"
                     " ORDER BY experiment_id DESC, state, number LIMIT $4",
                 {std::string(ToString(TrialState::kLeased)),
                  std::string(ToString(TrialState::kRunning)),
                  std::string(ToString(ExperimentState::kRunning)), limit})) {
      out.push_back(ReadTrial(r));
    }
    return out;
  });
}

Result<TrialCounts> SqlStore::CountTrials(Id experiment_id) {
  return Run(TxMode::kReadOne, [&](SqlConnection& c) {
    RequireExperiment(c, experiment_id);
    TrialCounts n;
    for (const auto& r : c.Query("SELECT state, COUNT(*) FROM trials WHERE experiment_id = $1 "
                                 "GROUP BY state",
                                 {experiment_id})) {
      const int64_t k = r.Int(1);
      switch (TrialStateOrThrow(r.Text(0))) {
        case TrialState::kPending:
          n.pending = k;
          break;
        case TrialState::kLeased:
          n.leased = k;
          break;
        case TrialState::kRunning:
          n.running = k;
          break;
        case TrialState::kPaused:
          n.paused = k;
          break;
        case TrialState::kCompleted:
          n.completed = k;
          break;
        case TrialState::kPruned:
          n.pruned = k;
          break;
        case TrialState::kFailed:
          n.failed = k;
          break;
        case TrialState::kCancelled:
          n.cancelled = k;
          break;
      }
    }
    return n;
  });
}

Result<std::optional<TrialRecord>> SqlStore::LeaseNextTrial(const LeaseRequest& req) {
  HPO_RETURN_IF_ERROR(CheckLeaseArgs(req.owner, req.lease_ms));
  return Run(TxMode::kSingle, [&](SqlConnection& c) -> std::optional<TrialRecord> {
    const TimeMs now = Now();
    // The inner SELECT locks one pending row and skips rows other leasers
    // hold, so concurrent leasers get different trials without waiting.
    auto rows = c.Query(
        "UPDATE trials SET state = 'leased', lease_owner = $1, lease_expires_ms = $2, "
        "attempt = attempt + 1, started_ms = COALESCE(started_ms, $3), updated_ms = $3 "
        "WHERE state = 'pending' AND id = (SELECT id FROM trials WHERE state = 'pending'"
        " AND (CAST($4 AS BIGINT) IS NULL OR experiment_id = $4)"
        " AND (CAST($5 AS BIGINT) IS NULL OR space_id = $5)"
        " ORDER BY priority DESC, id LIMIT 1 {FOR_UPDATE} {SKIP_LOCKED}) "
        "RETURNING " +
            std::string(kTrialColumns),
        {req.owner, now + req.lease_ms, now, Opt(req.experiment_id), Opt(req.space_id)});
    if (rows.empty()) return std::nullopt;
    return ReadTrial(rows[0]);
  });
}

Result<TrialRecord> SqlStore::LeaseTrial(Id trial_id, const std::string& owner, TimeMs lease_ms) {
  HPO_RETURN_IF_ERROR(CheckLeaseArgs(owner, lease_ms));
  return Run(TxMode::kSingle, [&](SqlConnection& c) {
    const TimeMs now = Now();
    auto rows = c.Query(
        "UPDATE trials SET state = 'leased', lease_owner = $1, lease_expires_ms = $2, "
        "attempt = attempt + 1, started_ms = COALESCE(started_ms, $3), updated_ms = $3 "
        "WHERE id = $4 AND state = 'pending' RETURNING " +
            std::string(kTrialColumns),
        {owner, now + lease_ms, now, trial_id});
    if (rows.empty()) Throw(ExplainTrialConflict(c, trial_id, owner, "lease"));
    return ReadTrial(rows[0]);
  });
}

namespace {
constexpr const char* kRenew =
    "UPDATE trials SET lease_expires_ms = $3, updated_ms = $4 "
    "WHERE id = $1 AND lease_owner = $2 AND state IN ('leased', 'running') RETURNING id";
}  // namespace

Status SqlStore::RenewLease(Id trial_id, const std::string& owner, TimeMs lease_ms) {
  HPO_RETURN_IF_ERROR(CheckLeaseArgs(owner, lease_ms));
  return RunBatched(TxMode::kSingle, trial_id, [&](SqlConnection& c) {
    const TimeMs now = Now();
    auto rows = c.Query(kRenew, {trial_id, owner, now + lease_ms, now});
    if (rows.empty()) Throw(ExplainTrialConflict(c, trial_id, owner, "renew the lease of"));
  });
}

Result<std::vector<Id>> SqlStore::RenewLeases(const std::vector<Id>& trial_ids,
                                              const std::string& owner, TimeMs lease_ms) {
  HPO_RETURN_IF_ERROR(CheckLeaseArgs(owner, lease_ms));
  if (trial_ids.empty()) return std::vector<Id>{};
  // One transaction (one commit, one fsync on SQLite) for the whole
  // heartbeat rather than one per trial.
  return RunBatched(TxMode::kWrite, *std::min_element(trial_ids.begin(), trial_ids.end()),
                    [&](SqlConnection& c) {
                      const TimeMs now = Now();
                      std::vector<Id> lost;
                      for (const Id id : trial_ids) {
                        if (c.Query(kRenew, {id, owner, now + lease_ms, now}).empty())
                          lost.push_back(id);
                      }
                      return lost;
                    });
}

Result<std::vector<Id>> SqlStore::ReclaimExpiredLeases(int max_attempts) {
  if (max_attempts < 1) return Status::InvalidArgument("max_attempts: must be at least 1");
  return Run(TxMode::kWrite, [&](SqlConnection& c) {
    const TimeMs now = Now();
    std::vector<Id> out;
    // A segment that resumed from a checkpoint (resume_step > 0) goes back
    // to paused at its previous level; others start over as pending.
    auto rows = c.Query(
        "UPDATE trials SET "
        " state = CASE WHEN attempt >= CAST($2 AS INTEGER) THEN 'failed'"
        "  WHEN resume_step > 0 THEN 'paused' ELSE 'pending' END,"
        " reason = CASE WHEN attempt >= CAST($2 AS INTEGER) THEN 'lease expired after attempt ' || "
        "CAST(attempt AS TEXT) || ' of ' || CAST(CAST($2 AS INTEGER) AS TEXT) || ' (last held by ' "
        "|| lease_owner || ')'"
        " ELSE reason END,"
        " finished_ms = CASE WHEN attempt >= CAST($2 AS INTEGER) THEN $1 ELSE NULL END,"
        " level = CASE WHEN attempt < CAST($2 AS INTEGER) AND resume_step > 0 AND level > 0 THEN "
        "level - 1"
        "  ELSE level END,"
        " stop_step = CASE WHEN attempt < CAST($2 AS INTEGER) AND resume_step > 0 THEN NULL ELSE "
        "stop_step END,"
        " lease_owner = CASE WHEN attempt >= CAST($2 AS INTEGER) THEN lease_owner ELSE '' END,"
        " lease_expires_ms = NULL, updated_ms = $1 "
        "WHERE state IN ('leased', 'running') AND lease_expires_ms < $1 RETURNING id, state, "
        "resume_step",
        {now, int64_t{max_attempts}});
    for (const auto& r : rows) {
      out.push_back(r.Int(0));
      // The dead attempt's curve says nothing about the next one: all of it
      // for a trial that starts over, what came after its checkpoint for a
      // paused one.
      if (r.Text(1) == "pending")
        c.Query("DELETE FROM measurements WHERE trial_id = $1", {r.Int(0)});
      if (r.Text(1) == "paused") {
        c.Query("DELETE FROM measurements WHERE trial_id = $1 AND step > $2", {r.Int(0), r.Int(2)});
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  });
}

Result<std::vector<Id>> SqlStore::ExpireLeasesNotHeld(const std::string& owner,
                                                      const std::vector<Id>& held) {
  if (owner.empty()) return Status::InvalidArgument("owner: must not be empty");
  // Asked on every lease of a worker that lists what it holds, and almost
  // always nothing is lost: a read first, a write only when there is one.
  const std::set<Id> kept(held.begin(), held.end());
  HPO_ASSIGN_OR_RETURN(
      std::vector<Id> lost, Run(TxMode::kReadOne, [&](SqlConnection& c) {
        std::vector<Id> ids;
        // Not those expired already: the next ReclaimExpiredLeases takes them.
        // Sorted here, not by an ORDER BY: with one, SQLite's planner scanned
        // the whole table instead of the live leases' index (trials_lease_idx),
        // on every lease (a quarter of the server's CPU at 8,000 trials,
        // bench/server_bench).
        for (const auto& r : c.Query(
                 "SELECT id FROM trials WHERE lease_owner = $1 AND state IN ('leased', 'running')"
                 " AND lease_expires_ms >= $2",
                 {owner, Now()})) {
          if (!kept.count(r.Int(0))) ids.push_back(r.Int(0));
        }
        std::sort(ids.begin(), ids.end());
        return ids;
      }));
  if (lost.empty()) return lost;
  return Run(TxMode::kWrite, [&](SqlConnection& c) {
    std::vector<Id> expired;
    for (const Id id : lost) {
      // Still this owner's lease: meanwhile it may have expired and gone to
      // another owner.
      if (!c.Query("UPDATE trials SET lease_expires_ms = 0 WHERE id = $1 AND lease_owner = $2"
                   " AND state IN ('leased', 'running') RETURNING id",
                   {id, owner})
               .empty()) {
        expired.push_back(id);
      }
    }
    return expired;
  });
}

Status SqlStore::PauseTrial(Id trial_id, const std::string& owner, int64_t step) {
  if (owner.empty()) return Status::InvalidArgument("owner: must not be empty");
  if (step < 0) return Status::InvalidArgument("step: must not be negative");
  return RunBatched(TxMode::kWrite, trial_id, [&](SqlConnection& c) {
    auto cur =
        c.Query("SELECT state, lease_owner, resume_step FROM trials WHERE id = $1", {trial_id});
    if (cur.empty()) Throw(Status::NotFound(TrialName(trial_id) + " does not exist"));
    const TrialState state = TrialStateOrThrow(cur[0].Text(0));
    if (state == TrialState::kPaused && cur[0].Text(1) == owner && cur[0].Int(2) == step)
      return;  // a retry
    if ((state != TrialState::kLeased && state != TrialState::kRunning) ||
        cur[0].Text(1) != owner) {
      Throw(ExplainTrialConflict(c, trial_id, owner, "pause"));
    }
    if (step < cur[0].Int(2)) {
      Throw(Status::InvalidArgument("step: " + TrialName(trial_id) + " resumed after step " +
                                    std::to_string(cur[0].Int(2)) + "; it cannot pause at " +
                                    std::to_string(step)));
    }
    // lease_owner stays: it says who paused it (and makes a retry
    // recognisable), and that the segment ended here, so the next lease
    // starts a new one (ResumeTrial). attempt stays too: it is the attempt
    // the trial paused on, not 0 (which read as "never ran").
    c.Query(
        "UPDATE trials SET state = 'paused', resume_step = $2, stop_step = NULL, "
        "lease_expires_ms = NULL, updated_ms = $3 WHERE id = $1",
        {trial_id, step, Now()});
  });
}

Result<TrialRecord> SqlStore::ResumeTrial(Id trial_id, const std::string& owner, TimeMs lease_ms,
                                          std::optional<int64_t> stop_step, bool restart) {
  HPO_RETURN_IF_ERROR(CheckLeaseArgs(owner, lease_ms));
  return Run(TxMode::kWrite, [&](SqlConnection& c) {
    const TimeMs now = Now();
    auto rows = c.Query(
        // A trial paused by its owner starts a new segment, attempt 1; one
        // whose resumed segment's lease expired (reclaimed: no owner) tries
        // that segment again, attempt + 1.
        "UPDATE trials SET state = 'leased', lease_owner = $1, lease_expires_ms = $2, "
        "attempt = CASE WHEN lease_owner = '' THEN attempt + 1 ELSE 1 END, "
        "level = level + 1, stop_step = $3, resume_step = CASE WHEN CAST($5 AS INTEGER) = 1 THEN 0 "
        "ELSE resume_step END, updated_ms = $4 "
        "WHERE id = $6 AND state = 'paused' AND (SELECT state FROM experiments WHERE id = "
        "trials.experiment_id) = "
        "'running' RETURNING " +
            std::string(kTrialColumns),
        {owner, now + lease_ms, Opt(stop_step), now, int64_t{restart ? 1 : 0}, trial_id});
    if (rows.empty()) {
      auto cur = c.Query(
          "SELECT t.state, e.state FROM trials t JOIN experiments e ON e.id = t.experiment_id "
          "WHERE t.id = $1",
          {trial_id});
      if (cur.empty()) Throw(Status::NotFound(TrialName(trial_id) + " does not exist"));
      if (cur[0].Text(0) != "paused") {
        Throw(Status::FailedPrecondition("cannot resume " + TrialName(trial_id) + ": it is " +
                                         cur[0].Text(0) + ", not paused"));
      }
      Throw(Status::FailedPrecondition("cannot resume " + TrialName(trial_id) +
                                       ": its experiment has ended (" + cur[0].Text(1) + ")"));
    }
    if (restart) c.Query("DELETE FROM measurements WHERE trial_id = $1", {trial_id});
    return ReadTrial(rows[0]);
  });
}

Status SqlStore::RestartTrial(Id trial_id, const std::string& owner) {
  if (owner.empty()) return Status::InvalidArgument("owner: must not be empty");
  return Run(TxMode::kWrite, [&](SqlConnection& c) {
    auto rows = c.Query(
        "UPDATE trials SET resume_step = 0, updated_ms = $3 "
        "WHERE id = $1 AND lease_owner = $2 AND state IN ('leased', 'running') RETURNING id",
        {trial_id, owner, Now()});
    if (rows.empty()) Throw(ExplainTrialConflict(c, trial_id, owner, "restart"));
    c.Query("DELETE FROM measurements WHERE trial_id = $1", {trial_id});
  });
}

Result<ReportResult> SqlStore::ReportMeasurement(Id trial_id, const std::string& owner,
                                                 const Measurement& m,
                                                 std::optional<TimeMs> renew_lease_ms,
                                                 const std::optional<SpeedObservation>& speed) {
  if (m.step < 0) return Status::InvalidArgument("step: must not be negative");
  if (!IsFiniteNonNegative(m.samples_per_sec)) {
    return Status::InvalidArgument("samples_per_sec: must be a finite number >= 0");
  }
  if (renew_lease_ms && *renew_lease_ms <= 0) {
    return Status::InvalidArgument("renew_lease_ms: must be positive");
  }
  if (speed) HPO_RETURN_IF_ERROR(CheckSpeedObservation(*speed));
  const TimeMs now = Now();
  const SqlValue expires = renew_lease_ms ? SqlValue(now + *renew_lease_ms) : Null();
  const SqlValue renew_before =
      renew_lease_ms ? SqlValue(ReportRenewsBefore(now, *renew_lease_ms)) : Null();
  // Whether the trial is the owner's to report on, at this step.
  static const std::string kClaimable =
      "id = $1 AND lease_owner = $2 AND state IN ('leased', 'running') AND (stop_step IS NULL OR "
      "stop_step >= $5)";
  // The trial's row is written only when the report changes it: its first
  // (leased -> running), or a lease to renew (Store::ReportRenewsBefore).
  static const std::string kClaimWrite =
      "UPDATE trials SET state = 'running', updated_ms = $3,"
      " lease_expires_ms = COALESCE(CAST($4 AS BIGINT), lease_expires_ms) "
      "WHERE " +
      kClaimable +
      " AND (state = 'leased' OR (CAST($6 AS BIGINT) IS NOT NULL AND"
      " (lease_expires_ms IS NULL OR lease_expires_ms < $6)))";
  // Why the claim took no row.
  auto refused = [&](SqlConnection& c) {
    auto rows =
        c.Query("SELECT state, lease_owner, stop_step FROM trials WHERE id = $1", {trial_id});
    if (!rows.empty() && (rows[0].Text(0) == "leased" || rows[0].Text(0) == "running") &&
        rows[0].Text(1) == owner && !rows[0].IsNull(2) && rows[0].Int(2) < m.step) {
      Throw(Status::FailedPrecondition(
          "step: " + std::to_string(m.step) + " is past the lease's stop_step " +
          std::to_string(rows[0].Int(2)) + " of " + TrialName(trial_id) +
          " (a lease that ends at a rung covers the steps up to it; the report "
          "of that step was answered pause: upload the checkpoint and pause)"));
    }
    Throw(ExplainTrialConflict(c, trial_id, owner, "report on"));
  };
  // The trial's experiment's state, as the report's result carries it.
  constexpr const char* kExperimentStateOfTrial =
      "(SELECT e.state FROM experiments e JOIN trials tr ON tr.experiment_id = e.id WHERE tr.id = "
      "$1)";
  // The observation goes in with a new step only, and only while its
  // device is registered (its foreign key would fail the report otherwise).
  if (driver_->writable_cte()) {
    // One statement, one round trip; its text made once, with and without
    // the speed observation. `t` is the trial as the report leaves it:
    // written (w), or else read and locked against a concurrent finish
    // (FOR SHARE, which a finish's UPDATE waits for), so that the finish
    // cannot slip between the check and the insert.
    const auto statement = [](bool with_speed) {
      std::string sql =
          "WITH w AS (" + kClaimWrite + " RETURNING " + std::string(kTrialColumns) +
          "), r AS (SELECT " + std::string(kTrialColumns) + " FROM trials WHERE " + kClaimable +
          " AND NOT EXISTS (SELECT 1 FROM w) FOR SHARE), t AS (SELECT * FROM w UNION ALL "
          "SELECT * FROM r), ins AS (INSERT INTO measurements (trial_id, step, metrics, "
          "samples_per_sec, system_setting, created_ms, device_ms, cost, device_id, device_class) "
          "SELECT id, $5, $7, $8, $9, $3, $10, $11, $12, $13 FROM t "
          "ON CONFLICT (trial_id, step) DO NOTHING RETURNING step)";
      if (with_speed) {
        sql += std::string(", sp AS (") + kInsertSpeed +
               "SELECT $14, $15, $16, $17, $18, $19, $3 FROM ins WHERE EXISTS (SELECT 1 FROM "
               "devices WHERE id = $14))";
      }
      // One row whether or not the claim took the trial: its columns (NULL
      // when not), the steps inserted, the experiment's state.
      sql += " SELECT " + std::string(kTrialColumns) + ", (SELECT COUNT(*) FROM ins), " +
             std::string(kExperimentStateOfTrial) + " FROM (SELECT 1) AS one LEFT JOIN t ON TRUE";
      return sql;
    };
    static const std::string kWithSpeed = statement(true), kWithoutSpeed = statement(false);
    const std::string& sql = speed ? kWithSpeed : kWithoutSpeed;
    return RunBatched(TxMode::kSingle, trial_id, [&](SqlConnection& c) {
      const SqlRow row =
          speed ? c.Query(sql, {trial_id, owner, now, expires, m.step, renew_before, m.metrics_json,
                                m.samples_per_sec, m.system_setting_json, m.device_ms, m.cost,
                                Opt(m.device_id), m.device_class, speed->device_id,
                                speed->device_class, speed->workload, speed->system_setting_json,
                                speed->samples_per_sec, Opt(speed->trial_id)})
                      .at(0)
                : c.Query(sql, {trial_id, owner, now, expires, m.step, renew_before, m.metrics_json,
                                m.samples_per_sec, m.system_setting_json, m.device_ms, m.cost,
                                Opt(m.device_id), m.device_class})
                      .at(0);
      if (row.IsNull(0)) refused(c);
      const size_t n = row.size();
      return ReportResult{row.Int(n - 2) == 1, TrialState::kRunning,
                          ExperimentStateOrThrow(row.Text(n - 1)), ReadTrial(row)};
    });
  }
  // One writer at a time (SQLite): the write, if any, then the trial as it
  // left it, read in the same transaction. (A read, not RETURNING, which
  // SQLite buffers in a temporary table of its own.)
  return RunBatched(TxMode::kWrite, trial_id, [&](SqlConnection& c) {
    c.Query(kClaimWrite, {trial_id, owner, now, expires, m.step, renew_before});
    const SqlRows claimed =
        c.Query("SELECT " + std::string(kTrialColumns) + " FROM trials WHERE " + kClaimable,
                {trial_id, owner, Null(), Null(), m.step});
    if (claimed.empty()) refused(c);
    const bool inserted =
        !c.Query(
              "INSERT INTO measurements (trial_id, step, metrics, samples_per_sec, system_setting, "
              "created_ms, device_ms, cost, device_id, device_class) "
              "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) "
              "ON CONFLICT (trial_id, step) DO NOTHING RETURNING step",
              {trial_id, m.step, m.metrics_json, m.samples_per_sec, m.system_setting_json, now,
               m.device_ms, m.cost, Opt(m.device_id), m.device_class})
             .empty();
    if (inserted && speed) {
      c.Query(std::string(kInsertSpeed) +
                  "SELECT $1, $2, $3, $4, $5, $6, $7 WHERE EXISTS (SELECT 1 FROM devices WHERE id "
                  "= $1)",
              {speed->device_id, speed->device_class, speed->workload, speed->system_setting_json,
               speed->samples_per_sec, Opt(speed->trial_id), now});
    }
    const std::string experiment_state =
        c.Query("SELECT " + std::string(kExperimentStateOfTrial), {trial_id}).at(0).Text(0);
    return ReportResult{inserted, TrialState::kRunning, ExperimentStateOrThrow(experiment_state),
                        ReadTrial(claimed[0])};
  });
}

namespace {
constexpr const char* kMeasurementColumns =
    "trial_id, step, metrics, samples_per_sec, system_setting, created_ms, revision, device_ms, "
    "cost, device_id, device_class";
MeasurementRecord ReadMeasurement(const SqlRow& r) {
  MeasurementRecord m;
  SqlColumns(r) >> m.trial_id >> m.step >> m.metrics_json >> m.samples_per_sec >>
      m.system_setting_json >> m.created_ms >> m.revision >> m.device_ms >> m.cost >> m.device_id >>
      m.device_class;
  return m;
}
}  // namespace

Result<std::vector<MeasurementRecord>> SqlStore::ListMeasurements(Id trial_id) {
  return Run(TxMode::kReadOne, [&](SqlConnection& c) {
    if (c.Query("SELECT id FROM trials WHERE id = $1", {trial_id}).empty()) {
      Throw(Status::NotFound(TrialName(trial_id) + " does not exist"));
    }
    std::vector<MeasurementRecord> out;
    for (const auto& r : c.Query("SELECT " + std::string(kMeasurementColumns) +
                                     " FROM measurements WHERE trial_id = $1 ORDER BY step",
                                 {trial_id})) {
      out.push_back(ReadMeasurement(r));
    }
    return out;
  });
}

Result<std::vector<MeasurementRecord>> SqlStore::ListExperimentMeasurements(Id experiment_id) {
  return Run(TxMode::kReadOne, [&](SqlConnection& c) {
    RequireExperiment(c, experiment_id);
    std::vector<MeasurementRecord> out;
    for (const auto& r :
         c.Query("SELECT m.trial_id, m.step, m.metrics, m.samples_per_sec, m.system_setting, "
                 "m.created_ms, "
                 "m.revision, m.device_ms, m.cost, m.device_id, m.device_class FROM measurements m "
                 "JOIN trials t ON t.id = m.trial_id WHERE t.experiment_id = $1 "
                 "ORDER BY m.trial_id, m.step",
                 {experiment_id})) {
      out.push_back(ReadMeasurement(r));
    }
    return out;
  });
}

Status SqlStore::AddTrialEvent(Id trial_id, std::string_view type, const std::string& data_json) {
  // Grouped with the reports and heartbeats that commit at the same time.
  return RunBatched(TxMode::kWrite, trial_id, [&](SqlConnection& c) {
    if (c.Query("INSERT INTO trial_events (trial_id, created_ms, type, data) "
                "SELECT id, $2, $3, $4 FROM trials WHERE id = $1 RETURNING id",
                {trial_id, Now(), std::string(type), data_json})
            .empty()) {
      Throw(Status::NotFound(TrialName(trial_id) + " does not exist"));
    }
  });
}

Result<std::vector<TrialEventRecord>> SqlStore::ListTrialEvents(Id trial_id, int64_t limit) {
  if (limit < 0) return Status::InvalidArgument("limit: must be at least 0");
  return Run(TxMode::kReadOne, [&](SqlConnection& c) {
    if (c.Query("SELECT id FROM trials WHERE id = $1", {trial_id}).empty()) {
      Throw(Status::NotFound(TrialName(trial_id) + " does not exist"));
    }
    std::vector<TrialEventRecord> out;
    for (const auto& r : c.Query("SELECT id, trial_id, created_ms, type, data FROM trial_events "
                                 "WHERE trial_id = $1 ORDER BY id DESC LIMIT $2",
                                 {trial_id, limit})) {
      TrialEventRecord e;
      SqlColumns(r) >> e.id >> e.trial_id >> e.created_ms >> e.type >> e.data_json;
      out.push_back(std::move(e));
    }
    std::reverse(out.begin(), out.end());
    return out;
  });
}

Result<Usage> SqlStore::ExperimentUsage(Id experiment_id) {
  return Run(TxMode::kReadOne, [&](SqlConnection& c) {
    RequireExperiment(c, experiment_id);
    const SqlRow row =
        c.Query(
             "SELECT COALESCE(SUM(m.device_ms), 0), COALESCE(SUM(m.cost), 0) FROM measurements m "
             "JOIN trials t ON t.id = m.trial_id WHERE t.experiment_id = $1",
             {experiment_id})
            .at(0);
    return Usage{row.Int(0), row.Real(1)};
  });
}

Result<std::map<Id, TrialProgress>> SqlStore::ListTrialProgress(Id experiment_id,
                                                                int64_t first_number,
                                                                int64_t last_number,
                                                                const Objective& objective) {
  return Run(TxMode::kReadOne, [&](SqlConnection& c) {
    RequireExperiment(c, experiment_id);
    std::map<Id, TrialProgress> out;
    // A page of trials by the (experiment, number) index, each one's steps
    // by the (trial, step) key: the last step newest first, the best by its
    // objective value ($5 = 1 minimizes, -1 maximizes; a step without the
    // metric sorts last on both backends as NULL does not), and the device
    // class with the most device time.
    constexpr const char* kBest =
        "FROM measurements b WHERE b.trial_id = t.id "
        "ORDER BY CASE WHEN {METRIC_4} IS NULL THEN 1 ELSE 0 END, {METRIC_4} * $5, b.step LIMIT 1";
    static const std::string kSql =
        std::string(
            "SELECT t.id, COUNT(*), MAX(m.step), COALESCE(SUM(m.device_ms), 0), "
            "COALESCE(SUM(m.cost), 0), "
            "(SELECT l.metrics FROM measurements l WHERE l.trial_id = t.id ORDER BY l.step DESC "
            "LIMIT 1), "
            "(SELECT b.step ") +
        kBest + "), (SELECT b.metrics " + kBest + "), " +
        "(SELECT d.device_class FROM measurements d WHERE d.trial_id = t.id AND "
        "d.device_class <> '' GROUP BY d.device_class ORDER BY SUM(d.device_ms) DESC, "
        "d.device_class LIMIT 1) "
        "FROM trials t JOIN measurements m ON m.trial_id = t.id "
        "WHERE t.experiment_id = $1 AND t.number BETWEEN $2 AND $3 GROUP BY t.id";
    for (const auto& r : c.Query(kSql, {experiment_id, first_number, last_number, objective.metric,
                                        int64_t{objective.maximize ? -1 : 1}})) {
      out[r.Int(0)] =
          TrialProgress{r.Int(1),  r.Int(2), r.Text(5), r.Int(6),
                        r.Text(7), r.Int(3), r.Real(4), r.IsNull(8) ? std::string() : r.Text(8)};
    }
    return out;
  });
}

Result<std::vector<MeasurementRecord>> SqlStore::ListExperimentMeasurementsSince(Id experiment_id,
                                                                                 int64_t since) {
  return Run(TxMode::kReadOne, [&](SqlConnection& c) {
    RequireExperiment(c, experiment_id);
    std::vector<MeasurementRecord> out;
    // By revision first: a recent cursor reads a short range of the index.
    // The unary plus keeps the planner off the experiment's index (SQLite
    // walked all of the experiment's measurements by it, 40-60 ms at
    // 100,000, against under a millisecond by revision), and the order is
    // made here rather than by a sort that would make the planner prefer
    // (trial, step) order too.
    for (const auto& r :
         c.Query("SELECT m.trial_id, m.step, m.metrics, m.samples_per_sec, m.system_setting, "
                 "m.created_ms, "
                 "m.revision, m.device_ms, m.cost, m.device_id, m.device_class FROM measurements m "
                 "JOIN trials t ON t.id = m.trial_id WHERE m.revision >= $2 "
                 "AND +t.experiment_id = $1",
                 {experiment_id, since})) {
      out.push_back(ReadMeasurement(r));
    }
    std::sort(out.begin(), out.end(), [](const MeasurementRecord& a, const MeasurementRecord& b) {
      return std::tie(a.trial_id, a.step) < std::tie(b.trial_id, b.step);
    });
    return out;
  });
}

Result<ReadCursor> SqlStore::ReadHorizon() {
  return Run(TxMode::kReadOne, [&](SqlConnection& c) {
    auto rows = c.Query(driver_->horizon_sql(), {});
    return ReadCursor{rows.at(0).Text(0), rows.at(0).Int(1)};
  });
}

Result<FinishResult> SqlStore::FinishTrial(Id trial_id, const std::string& owner,
                                           const FinishRequest& f) {
  if (!IsFinished(f.state)) {
    return Status::InvalidArgument(
        "state: a trial can only be finished as completed, pruned, "
        "failed or cancelled, not " +
        std::string(ToString(f.state)));
  }
  return RunBatched(TxMode::kSingle, trial_id, [&](SqlConnection& c) {
    const TimeMs now = Now();
    const std::string state(ToString(f.state));
    // Anyone may cancel a trial nobody runs (pending or paused); only the lease holder may finish
    // it otherwise (a stale worker must not fail a requeued trial).
    const bool may_skip_lease = f.state == TrialState::kCancelled;
    auto rows = c.Query(
        "UPDATE trials SET state = $3, final_metrics = $4, reason = $5, finished_ms = $6, "
        "updated_ms = $6, lease_expires_ms = NULL "
        "WHERE id = $1 AND ((state IN ('leased', 'running') AND lease_owner = $2)"
        " OR (CAST($7 AS INTEGER) = 1 AND state IN ('pending', 'paused'))) RETURNING id",
        {trial_id, owner, state, f.final_metrics_json, f.reason, now,
         int64_t{may_skip_lease ? 1 : 0}});
    if (!rows.empty()) return FinishResult::kFinished;
    auto cur =
        c.Query("SELECT state, lease_owner, final_metrics FROM trials WHERE id = $1", {trial_id});
    if (cur.empty() || !IsFinished(TrialStateOrThrow(cur[0].Text(0)))) {
      Throw(ExplainTrialConflict(c, trial_id, owner, "finish"));
    }
    // The same finish again, from the one who finished it, is a retried
    // call: acknowledge it and change nothing. Anything else would let a
    // caller who does not hold the trial pass off its own metrics as the
    // trial's end (in the answer and, above the store, in events).
    const std::string was = cur[0].Text(0);
    const std::string holder = cur[0].Text(1);
    std::string why;
    if (was != state) {
      why = "it is already " + was;
    } else if (holder != owner) {
      why = "it was " + was + " under a lease held by '" + holder + "', not '" + owner + "'";
    } else if (cur[0].Text(2) != f.final_metrics_json) {
      why = "it was already " + was + " with other final metrics";
    } else {
      return FinishResult::kRepeated;
    }
    Throw(Status::FailedPrecondition("cannot finish " + TrialName(trial_id) + " as " + state +
                                     ": " + why + ", and finished trials are immutable"));
  });
}

// ---------------------------------------------------------------------------
// Workers, devices, speed

namespace {
DeviceRecord ReadDevice(const SqlRow& r) {
  DeviceRecord d;
  SqlColumns in(r);
  in >> d.id >> d.worker_id >> d.ordinal;
  const std::string kind_name = in.Text();
  auto kind = ParseDeviceKind(kind_name);
  if (!kind.ok()) Throw(Status::DataLoss("stored device has unknown kind '" + kind_name + "'"));
  d.kind = *kind;
  in >> d.name >> d.device_class >> d.cores >> d.memory_bytes >> d.benchmark_gflops;
  return d;
}
constexpr const char* kDeviceColumns =
    "id, worker_id, ordinal, kind, name, device_class, cores, memory_bytes, benchmark_gflops";
}  // namespace

Result<WorkerRecord> SqlStore::RegisterWorker(const NewWorker& w) {
  if (w.host.empty()) return Status::InvalidArgument("host: must not be empty");
  std::set<int> ordinals;
  for (size_t i = 0; i < w.devices.size(); ++i) {
    const auto& d = w.devices[i];
    const std::string path = "devices[" + std::to_string(i) + "]";
    if (d.name.empty()) return Status::InvalidArgument(path + ".name: must not be empty");
    if (d.device_class.empty())
      return Status::InvalidArgument(path + ".device_class: must not be empty");
    if (!ordinals.insert(d.ordinal).second) {
      return Status::InvalidArgument(path + ".ordinal: " + std::to_string(d.ordinal) +
                                     " is used by an earlier device");
    }
    if (!IsFiniteNonNegative(d.cores) || !IsFiniteNonNegative(d.benchmark_gflops) ||
        d.memory_bytes < 0) {
      return Status::InvalidArgument(path +
                                     ": cores, memory_bytes and benchmark_gflops must be "
                                     "finite and >= 0");
    }
  }
  return Run(TxMode::kWrite, [&](SqlConnection& c) {
    const TimeMs now = Now();
    WorkerRecord rec{
        0, w.host, w.labels_json, now, now, {}, w.session_hash, w.instance, std::nullopt, "", {}};
    // unless_taken: nothing is inserted when the identity's row exists.
    auto insert = [&](bool unless_taken) {
      static constexpr const char* kInsert =
          "INSERT INTO workers (host, labels, registered_ms, last_seen_ms, session_hash, instance, "
          "identity_hash) "
          "VALUES ($1, $2, $3, $3, $4, $5, $6) RETURNING id, registered_ms";
      static constexpr const char* kInsertUnlessTaken =
          "INSERT INTO workers (host, labels, registered_ms, last_seen_ms, session_hash, instance, "
          "identity_hash) "
          "VALUES ($1, $2, $3, $3, $4, $5, $6) ON CONFLICT (host, instance) WHERE instance <> '' "
          "DO NOTHING "
          "RETURNING id, registered_ms";
      auto rows = c.Query(unless_taken ? kInsertUnlessTaken : kInsert,
                          {w.host, w.labels_json, now, w.session_hash, w.instance,
                           w.instance.empty() ? "" : w.identity_hash});
      if (rows.empty()) return false;
      rec.id = rows.at(0).Int(0);
      rec.registered_ms = rows.at(0).Int(1);
      rec.identity_hash = w.instance.empty() ? "" : w.identity_hash;
      return true;
    };
    if (w.instance.empty()) {
      insert(false);  // outside the (partial) unique index: always a new row
    } else {
      // Read, judge, write, with the identity's row locked (PostgreSQL; a
      // SQLite writer is alone). A registration of the same identity that
      // inserts first meets ours at the unique index: our insert does
      // nothing and the loop judges against its row.
      for (int attempt = 0;; ++attempt) {
        auto held = c.Query(
            "SELECT id, identity_hash, last_seen_ms, gone_ms FROM workers "
            "WHERE host = $1 AND instance = $2 {FOR_UPDATE}",
            {w.host, w.instance});
        if (held.empty()) {
          if (insert(true)) break;
          if (attempt >= 2)
            Throw(Status::Aborted("worker identity registered concurrently; try again"));
          continue;
        }
        const Id id = held[0].Int(0);
        const std::string stored_hash = held[0].Text(1);
        const TimeMs last_seen = held[0].Int(2);
        const bool gone = held[0].OptInt(3).has_value();
        // Compared in constant time; an empty stored hash proves nothing.
        if (!stored_hash.empty() && TokenEquals(w.presented_identity_hash, stored_hash)) {
          auto rows = c.Query(
              "UPDATE workers SET labels = $2, last_seen_ms = $3, session_hash = $4, gone_ms = "
              "NULL "
              "WHERE id = $1 RETURNING registered_ms",
              {id, w.labels_json, now, w.session_hash});
          rec.id = id;
          rec.registered_ms = rows.at(0).Int(0);
          rec.identity_hash = stored_hash;
          break;
        }
        if (!gone && last_seen >= now - w.in_use_ms) {
          const TimeMs ago = std::max<TimeMs>(0, now - last_seen);
          Throw(Status::AlreadyExists(
              "host '" + w.host + "', instance '" + w.instance + "' is worker " +
              std::to_string(id) + ", seen " + std::to_string(ago) +
              " ms ago: registering it again needs the identity secret its first "
              "registration returned"));
        }
        // Out of use and not proven: the old worker keeps its id, session,
        // devices and leases, only without the name; the name goes to a new
        // worker, so nothing of the old one's passes to the caller.
        c.Query("UPDATE workers SET instance = '' WHERE id = $1", {id});
        insert(false);
        rec.took_identity_of = id;
        break;
      }
    }
    std::map<int, Id> stored;  // the devices it had, by ordinal (none for a new worker)
    for (const auto& r :
         c.Query("SELECT ordinal, id FROM devices WHERE worker_id = $1", {rec.id})) {
      stored[static_cast<int>(r.Int(0))] = r.Int(1);
    }
    for (const auto& d : w.devices) {
      const std::string kind(ToString(d.kind));
      SqlRows drow;
      if (auto it = stored.find(d.ordinal); it != stored.end()) {
        // The same device back (perhaps with another quota, hence class):
        // its id stays, so its measured speed stays linked to it.
        drow = c.Query(
            "UPDATE devices SET kind = $2, name = $3, device_class = $4, cores = $5, memory_bytes "
            "= $6, "
            "benchmark_gflops = $7 WHERE id = $1 RETURNING " +
                std::string(kDeviceColumns),
            {it->second, kind, d.name, d.device_class, d.cores, d.memory_bytes,
             d.benchmark_gflops});
        stored.erase(it);
      } else {
        drow = c.Query(
            "INSERT INTO devices (worker_id, ordinal, kind, name, device_class, cores, "
            "memory_bytes, "
            "benchmark_gflops) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING " +
                std::string(kDeviceColumns),
            {rec.id, int64_t{d.ordinal}, kind, d.name, d.device_class, d.cores, d.memory_bytes,
             d.benchmark_gflops});
      }
      rec.devices.push_back(ReadDevice(drow.at(0)));
    }
    for (const auto& [ordinal, id] : stored) c.Query("DELETE FROM devices WHERE id = $1", {id});
    return rec;
  });
}

Status SqlStore::TouchWorker(Id worker_id) {
  // Ordered after every trial: a batch locks trial rows, then workers.
  constexpr int64_t kWorkersAfterTrials = int64_t{1} << 62;
  return RunBatched(TxMode::kSingle, kWorkersAfterTrials + worker_id, [&](SqlConnection& c) {
    if (c.Query("UPDATE workers SET last_seen_ms = $2, gone_ms = NULL WHERE id = $1 RETURNING id",
                {worker_id, Now()})
            .empty()) {
      Throw(Status::NotFound("worker " + std::to_string(worker_id) + " is not registered"));
    }
  });
}

namespace {
constexpr const char* kWorkerColumns =
    "id, host, labels, registered_ms, last_seen_ms, session_hash, instance, gone_ms, identity_hash";
WorkerRecord ReadWorker(const SqlRow& r) {
  WorkerRecord w;  // its devices are read apart
  SqlColumns(r) >> w.id >> w.host >> w.labels_json >> w.registered_ms >> w.last_seen_ms >>
      w.session_hash >> w.instance >> w.gone_ms >> w.identity_hash;
  return w;
}
}  // namespace

Result<WorkerRecord> SqlStore::GetWorker(Id worker_id) {
  return Run(TxMode::kRead, [&](SqlConnection& c) {
    auto rows = c.Query("SELECT " + std::string(kWorkerColumns) + " FROM workers WHERE id = $1",
                        {worker_id});
    if (rows.empty())
      Throw(Status::NotFound("worker " + std::to_string(worker_id) + " is not registered"));
    WorkerRecord w = ReadWorker(rows[0]);
    for (const auto& r : c.Query("SELECT " + std::string(kDeviceColumns) +
                                     " FROM devices WHERE worker_id = $1 ORDER BY ordinal",
                                 {worker_id})) {
      w.devices.push_back(ReadDevice(r));
    }
    return w;
  });
}

Result<std::vector<WorkerRecord>> SqlStore::ListWorkers() {
  return Run(TxMode::kRead, [&](SqlConnection& c) {
    std::vector<WorkerRecord> out;
    std::map<Id, size_t> index;
    for (const auto& r :
         c.Query("SELECT " + std::string(kWorkerColumns) + " FROM workers ORDER BY id", {})) {
      index[r.Int(0)] = out.size();
      out.push_back(ReadWorker(r));
    }
    for (const auto& r : c.Query(
             "SELECT " + std::string(kDeviceColumns) + " FROM devices ORDER BY worker_id, ordinal",
             {})) {
      auto d = ReadDevice(r);
      out[index.at(d.worker_id)].devices.push_back(std::move(d));
    }
    return out;
  });
}

Result<std::vector<WorkerRecord>> SqlStore::MarkWorkersGone(TimeMs unseen_ms) {
  return Run(TxMode::kWrite, [&](SqlConnection& c) {
    const TimeMs now = Now();
    // A compare-and-set per row (gone_ms IS NULL): of two replicas' ticks
    // only one returns a worker, so it is announced once.
    std::vector<WorkerRecord> out;
    for (const auto& r :
         c.Query("UPDATE workers SET gone_ms = $2 WHERE gone_ms IS NULL AND last_seen_ms < $1 "
                 "RETURNING " +
                     std::string(kWorkerColumns),
                 {now - unseen_ms, now})) {
      out.push_back(ReadWorker(r));
    }
    std::sort(out.begin(), out.end(),
              [](const WorkerRecord& a, const WorkerRecord& b) { return a.id < b.id; });
    return out;
  });
}

Result<std::optional<WorkerRecord>> SqlStore::MarkWorkerGone(Id worker_id) {
  return Run(TxMode::kWrite, [&](SqlConnection& c) -> std::optional<WorkerRecord> {
    // A compare-and-set, as MarkWorkersGone's: announced once.
    auto rows =
        c.Query("UPDATE workers SET gone_ms = $2 WHERE id = $1 AND gone_ms IS NULL RETURNING " +
                    std::string(kWorkerColumns),
                {worker_id, Now()});
    if (!rows.empty()) return ReadWorker(rows[0]);
    if (c.Query("SELECT id FROM workers WHERE id = $1", {worker_id}).empty()) {
      Throw(Status::NotFound("worker " + std::to_string(worker_id) + " is not registered"));
    }
    return std::nullopt;
  });
}

Result<std::vector<Id>> SqlStore::PruneGoneWorkers(TimeMs unseen_ms) {
  return Run(TxMode::kWrite, [&](SqlConnection& c) {
    std::vector<Id> out;
    // Devices go with their worker (ON DELETE CASCADE), speed observations
    // stay with device_id NULL (ON DELETE SET NULL, migration 5).
    for (const auto& r :
         c.Query("DELETE FROM workers WHERE gone_ms IS NOT NULL AND last_seen_ms < $1 RETURNING id",
                 {Now() - unseen_ms})) {
      out.push_back(r.Int(0));
    }
    std::sort(out.begin(), out.end());
    return out;
  });
}

Result<Id> SqlStore::AddSpeedObservation(const SpeedObservation& o) {
  HPO_RETURN_IF_ERROR(CheckSpeedObservation(o));
  // Inserts only (no row lock to order): after the batch's updates.
  constexpr int64_t kAfterUpdates = std::numeric_limits<int64_t>::max();
  return RunBatched(TxMode::kWrite, kAfterUpdates, [&](SqlConnection& c) {
    if (c.Query("SELECT id FROM devices WHERE id = $1", {o.device_id}).empty()) {
      Throw(Status::NotFound("device " + std::to_string(o.device_id) + " is not registered"));
    }
    return c
        .Query(std::string(kInsertSpeed) + "VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
               {o.device_id, o.device_class, o.workload, o.system_setting_json, o.samples_per_sec,
                Opt(o.trial_id), Now()})
        .at(0)
        .Int(0);
  });
}

Result<std::vector<SpeedObservationRecord>> SqlStore::ListSpeedObservations(
    std::string_view workload, int64_t limit) {
  if (limit < 0) return Status::InvalidArgument("limit: must not be negative");
  return Run(TxMode::kReadOne, [&](SqlConnection& c) {
    std::vector<SpeedObservationRecord> out;
    for (const auto& r :
         c.Query("SELECT id, device_id, device_class, workload, system_setting, samples_per_sec, "
                 "trial_id, observed_ms FROM speed_observations WHERE ($1 = '' OR workload = $1) "
                 "ORDER BY id DESC LIMIT $2",
                 {std::string(workload), limit})) {
      SpeedObservationRecord o;
      o.id = r.Int(0);
      o.device_id = r.OptInt(1).value_or(0);  // NULL: its device was pruned
      o.device_class = r.Text(2);
      o.workload = r.Text(3);
      o.system_setting_json = r.Text(4);
      o.samples_per_sec = r.Real(5);
      o.trial_id = r.OptInt(6);
      o.observed_ms = r.Int(7);
      out.push_back(std::move(o));
    }
    std::reverse(out.begin(), out.end());  // the newest `limit`, oldest first
    return out;
  });
}

// ---------------------------------------------------------------------------
// Change notifications

Status SqlStore::NotifyChanges(const std::vector<std::string>& payloads) {
  for (size_t i = 0; i < payloads.size(); ++i) {
    if (payloads[i].size() > kMaxChangePayload) {
      return Status::InvalidArgument(
          "payloads[" + std::to_string(i) + "]: " + std::to_string(payloads[i].size()) +
          " bytes, more than the " + std::to_string(kMaxChangePayload) + " a notification holds");
    }
    if (payloads[i].find('\0') != std::string::npos) {
      return Status::InvalidArgument("payloads[" + std::to_string(i) + "]: holds a NUL byte");
    }
  }
  const std::string_view sql = driver_->notify_sql();
  if (sql.empty() || payloads.empty()) return Status::OK();
  // One text array literal: each element quoted, its quotes and
  // backslashes escaped (PostgreSQL's array input syntax).
  std::string array = "{";
  for (const std::string& p : payloads) {
    if (array.size() > 1) array += ',';
    array += '"';
    for (const char ch : p) {
      if (ch == '"' || ch == '\\') array += '\\';
      array += ch;
    }
    array += '"';
  }
  array += '}';
  return Run(TxMode::kSingle, [&](SqlConnection& c) { c.Query(sql, {std::move(array)}); });
}

Result<std::unique_ptr<ChangeListener>> SqlStore::ListenForChanges() {
  auto listener = driver_->Listen();
  if (listener == nullptr) {
    return Status::Unimplemented(std::string(driver_->backend()) + " has no change notifications");
  }
  return listener;
}

}  // namespace hpo::store
