// The narrow seam between SqlStore (the store's rules, written once) and a
// database client library. A driver turns a connection into SQL text in,
// rows of SqlValues out; it knows nothing of trials or leases.
//
// Internal to server/store: drivers and SqlStore report errors by throwing
// SqlError, which SqlStore converts to a Status at its public boundary.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"
#include "server/store/migrations.h"
#include "server/store/store.h"

namespace hpo::store {

// A thrown Status. Never leaves server/store.
struct SqlError {
  Status status;
};
[[noreturn]] inline void Throw(Status s) { throw SqlError{std::move(s)}; }

// NULL, integer, real or text.
using SqlValue = std::variant<std::monostate, int64_t, double, std::string>;

inline SqlValue Null() { return std::monostate{}; }
template <typename T>
SqlValue Opt(const std::optional<T>& v) {
  return v ? SqlValue(*v) : Null();
}

// One result row. Accessors convert (PostgreSQL returns text).
class SqlRow {
 public:
  explicit SqlRow(std::vector<SqlValue> cols) : cols_(std::move(cols)) {}
  bool IsNull(size_t i) const { return std::holds_alternative<std::monostate>(cols_.at(i)); }
  int64_t Int(size_t i) const;
  double Real(size_t i) const;
  std::string Text(size_t i) const;
  std::optional<int64_t> OptInt(size_t i) const {
    return IsNull(i) ? std::nullopt : std::optional<int64_t>(Int(i));
  }
  size_t size() const { return cols_.size(); }

 private:
  std::vector<SqlValue> cols_;
};
using SqlRows = std::vector<SqlRow>;

// Reads a row's columns in the order its SELECT names them, so that a
// record reader lists fields rather than column numbers:
//   SqlColumns in(row);
//   in >> t.id >> t.name >> t.finished_ms;
// A column of another type throws as SqlRow's accessors do; reading past the
// last column throws std::out_of_range.
class SqlColumns {
 public:
  explicit SqlColumns(const SqlRow& row) : row_(row) {}
  SqlColumns& operator>>(int64_t& v) { return v = row_.Int(next_++), *this; }
  SqlColumns& operator>>(int& v) { return v = static_cast<int>(row_.Int(next_++)), *this; }
  SqlColumns& operator>>(double& v) { return v = row_.Real(next_++), *this; }
  SqlColumns& operator>>(std::string& v) { return v = row_.Text(next_++), *this; }
  SqlColumns& operator>>(std::optional<int64_t>& v) { return v = row_.OptInt(next_++), *this; }
  // The next column as text, for a field parsed from it (a state's name).
  std::string Text() { return row_.Text(next_++); }

 private:
  const SqlRow& row_;
  size_t next_ = 0;
};

// One open connection. Not thread-safe: SqlStore hands each to one thread at
// a time. SQL uses $1, $2, ... placeholders and three tokens the driver
// rewrites for its dialect: {FOR_UPDATE} (row lock, or nothing where writes
// are serialized anyway), {SKIP_LOCKED}, and {METRIC_4}: the number under
// the key given as parameter $4 in the `metrics` column (JSON text) of the
// innermost table that has one, NULL when missing.
class SqlConnection {
 public:
  // kRead and kWrite open a transaction (SQLite: BEGIN / BEGIN IMMEDIATE).
  // kRead bodies only read, and all their statements see one snapshot
  // (PostgreSQL: REPEATABLE READ, READ ONLY; SQLite's reads already do).
  // kSingle promises the body's effect is one statement, which is atomic on
  // its own: PostgreSQL then skips BEGIN/COMMIT (one round trip instead of
  // three); SQLite still uses BEGIN IMMEDIATE. Statements that only explain
  // why that one statement changed nothing may follow.
  // kReadOne promises a body that only reads and needs no common snapshot:
  // one statement, or one after checks of rows never deleted or changed
  // once visible (an experiment exists; its spaces). PostgreSQL then skips
  // BEGIN/COMMIT as for kSingle (each statement its own snapshot); SQLite
  // reads as for kRead, without the write lock. The hot reads (a trial, an
  // experiment's counts) were three round trips each, and bench/load's
  // PostgreSQL spent more statement time on COMMIT than on anything else.
  enum class TxMode { kRead, kWrite, kSingle, kReadOne };
  virtual ~SqlConnection() = default;
  virtual void Begin(TxMode mode) = 0;
  virtual void Commit() = 0;
  virtual void Rollback() noexcept = 0;  // best effort; marks broken on failure
  virtual SqlRows Query(std::string_view sql, std::initializer_list<SqlValue> params) = 0;
  // Group commit (commit_batcher.h): one savepoint per call inside a kWrite
  // transaction, so that one call's failure undoes that call alone.
  // Savepoint marks the point; ReleaseSavepoint keeps what came after it
  // (the driver may send that with the next statement); RollbackToSavepoint
  // undoes it and leaves the transaction usable again, also after a
  // statement that failed (PostgreSQL aborts the whole transaction then).
  virtual void Savepoint() = 0;
  virtual void ReleaseSavepoint() = 0;
  virtual void RollbackToSavepoint() = 0;
  // Runs several statements without parameters (migrations).
  virtual void ExecScript(std::string_view sql) = 0;
  // False once the connection failed in a way that needs a new one.
  virtual bool healthy() const = 0;
};

class SqlDriver {
 public:
  virtual ~SqlDriver() = default;
  virtual std::string_view backend() const = 0;
  virtual const std::vector<Migration>& migrations() const = 0;
  virtual const std::string& display_url() const = 0;
  // Opens a new connection (throws SqlError: Unavailable, DataLoss, ...).
  virtual std::unique_ptr<SqlConnection> Connect() = 0;
  // Connections worth keeping open at once.
  virtual int max_connections() const = 0;
  // Whether INSERT/UPDATE may appear inside WITH (PostgreSQL yes, SQLite no).
  virtual bool writable_cte() const = 0;
  // Whether the migrations created the store's functions (PostgreSQL's
  // hpo_create_trials), so that a rule that would take several round trips
  // runs in one. Errors raised there carry SQLSTATE U0404, U0412 or U0400,
  // which the driver throws as NotFound, FailedPrecondition or
  // InvalidArgument with the function's message alone.
  virtual bool stored_functions() const = 0;
  // Serializes migrations across processes (advisory lock, exclusive lock);
  // called inside the migration transaction.
  virtual void LockForMigration(SqlConnection& c) = 0;
  // Around the migration transaction, on its connection and outside the
  // transaction: SQLite turns foreign-key enforcement off, so that a
  // migration may rebuild a table others refer to (the only way to change
  // a CHECK constraint there), and on again after. CheckMigrated runs
  // inside the transaction after the last migration, before the commit
  // (SQLite: every foreign key still points at a row).
  virtual void BeforeMigrations(SqlConnection&) {}
  virtual void CheckMigrated(SqlConnection&) {}
  virtual void AfterMigrations(SqlConnection&) {}

  // The query answering (store id, revision) for Store::ReadHorizon: one
  // row, see sql/<dialect>/0006_revisions.sql for why it is right.
  virtual std::string_view horizon_sql() const = 0;

  // Change notifications (see Store::NotifyChanges). The statement that
  // sends each element of the text array `$1`, in order, as one, or empty
  // when the database has none; and a listener
  // on its own connection, or null.
  virtual std::string_view notify_sql() const { return {}; }
  virtual std::unique_ptr<ChangeListener> Listen() { return nullptr; }
};

std::unique_ptr<SqlDriver> MakeSqliteDriver(std::string path, std::string display_url,
                                            int busy_timeout_ms);
std::unique_ptr<SqlDriver> MakePostgresDriver(std::string url, std::string display_url,
                                              int pool_size);

}  // namespace hpo::store
