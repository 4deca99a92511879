// SQLite driver: one sqlite3 connection per SqlConnection, WAL journal with
// synchronous=FULL (a commit is fsynced before it returns), foreign keys on,
// write transactions as BEGIN IMMEDIATE so two writers queue on the busy
// timeout instead of failing on a lock upgrade.
#include <sqlite3.h>

#include <cctype>
#include <unordered_map>

#include "server/store/sql_driver.h"

namespace hpo::store {
namespace {

Status SqliteStatus(sqlite3* db, int rc, std::string_view what, const std::string& display) {
  const std::string msg =
      display + ": " + std::string(what) + ": " + (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_READONLY:
    case SQLITE_IOERR:
      return Status::Unavailable(msg);
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      return Status::DataLoss(msg + " (the file is not a usable SQLite database)");
    case SQLITE_FULL:
      // The disk is full: like an outage, the call may pass once space is
      // back (UNAVAILABLE, HTTP 503 with Retry-After), and the transaction
      // rolled back, so nothing of it is half written.
      return Status::Unavailable(msg + " (the disk holding the store is full)");
    case SQLITE_CONSTRAINT:
      if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY) {
        return Status::AlreadyExists(msg);
      }
      return Status::InvalidArgument(msg);
    default:
      return Status::Internal(msg);
  }
}

// $1 -> ?1; {FOR_UPDATE} and {SKIP_LOCKED} vanish (writers are serialized);
// {METRIC_4} reads the key by a JSON path quoted from the parameter.
std::string Rewrite(std::string_view sql) {
  constexpr std::string_view kMetric = "{METRIC_4}";
  std::string out;
  out.reserve(sql.size());
  for (size_t i = 0; i < sql.size(); ++i) {
    if (sql[i] == '$' && i + 1 < sql.size() &&
        std::isdigit(static_cast<unsigned char>(sql[i + 1]))) {
      out += '?';
    } else if (sql.compare(i, kMetric.size(), kMetric) == 0) {
      out += "json_extract(metrics, '$.' || json_quote(?4))";
      i += kMetric.size() - 1;
    } else if (sql.compare(i, 12, "{FOR_UPDATE}") == 0) {
      i += 11;
    } else if (sql.compare(i, 13, "{SKIP_LOCKED}") == 0) {
      i += 12;
    } else {
      out += sql[i];
    }
  }
  return out;
}

class SqliteConnection final : public SqlConnection {
 public:
  SqliteConnection(sqlite3* db, std::string display) : db_(db), display_(std::move(display)) {}
  ~SqliteConnection() override {
    for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
    sqlite3_close_v2(db_);
  }

  void Begin(TxMode mode) override {
    const bool reads_only = mode == TxMode::kRead || mode == TxMode::kReadOne;
    ExecScript(reads_only ? "BEGIN DEFERRED" : "BEGIN IMMEDIATE");
  }
  void Commit() override { ExecScript("COMMIT"); }
  void Rollback() noexcept override {
    if (sqlite3_get_autocommit(db_)) return;  // nothing open
    if (sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr) != SQLITE_OK) healthy_ = false;
  }
  bool healthy() const override { return healthy_; }
  void Savepoint() override { ExecScript("SAVEPOINT hpo_call"); }
  void ReleaseSavepoint() override { ExecScript("RELEASE hpo_call"); }
  // ROLLBACK TO keeps the savepoint on the stack; RELEASE drops it. Errors
  // that roll back the whole transaction (a full disk, I/O) leave no
  // savepoint to return to: that throws, and the batch fails whole.
  void RollbackToSavepoint() override { ExecScript("ROLLBACK TO hpo_call; RELEASE hpo_call"); }

  void ExecScript(std::string_view sql) override {
    char* err = nullptr;
    const std::string text(sql);
    const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err);
    if (rc != SQLITE_OK) {
      std::string what = err ? err : "error";
      sqlite3_free(err);
      Throw(SqliteStatus(nullptr, rc, what, display_));
    }
  }

  SqlRows Query(std::string_view sql, std::initializer_list<SqlValue> params) override {
    sqlite3_stmt* stmt = Prepare(sql);
    struct Reset {
      sqlite3_stmt* s;
      ~Reset() {
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
      }
    } reset{stmt};
    int index = 1;
    for (const SqlValue& v : params) {
      int rc = SQLITE_OK;
      if (std::holds_alternative<std::monostate>(v)) {
        rc = sqlite3_bind_null(stmt, index);
      } else if (auto* i = std::get_if<int64_t>(&v)) {
        rc = sqlite3_bind_int64(stmt, index, *i);
      } else if (auto* d = std::get_if<double>(&v)) {
        rc = sqlite3_bind_double(stmt, index, *d);
      } else {
        const auto& s = std::get<std::string>(v);
        rc = sqlite3_bind_text(stmt, index, s.data(), static_cast<int>(s.size()), SQLITE_STATIC);
      }
      if (rc != SQLITE_OK) Throw(SqliteStatus(db_, rc, "bind", display_));
      ++index;
    }
    SqlRows rows;
    for (;;) {
      const int rc = sqlite3_step(stmt);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) Throw(SqliteStatus(db_, rc, "query", display_));
      const int n = sqlite3_column_count(stmt);
      std::vector<SqlValue> cols;
      cols.reserve(n);
      for (int c = 0; c < n; ++c) {
        switch (sqlite3_column_type(stmt, c)) {
          case SQLITE_NULL:
            cols.emplace_back(std::monostate{});
            break;
          case SQLITE_INTEGER:
            cols.emplace_back(static_cast<int64_t>(sqlite3_column_int64(stmt, c)));
            break;
          case SQLITE_FLOAT:
            cols.emplace_back(sqlite3_column_double(stmt, c));
            break;
          default: {
            const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt, c));
            cols.emplace_back(std::string(p ? p : "", sqlite3_column_bytes(stmt, c)));
          }
        }
      }
      rows.emplace_back(std::move(cols));
    }
    return rows;
  }

 private:
  sqlite3_stmt* Prepare(std::string_view sql) {
    auto it = cache_.find(std::string(sql));
    if (it != cache_.end()) return it->second;
    const std::string text = Rewrite(sql);
    sqlite3_stmt* stmt = nullptr;
    const int rc =
        sqlite3_prepare_v3(db_, text.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) Throw(SqliteStatus(db_, rc, "prepare", display_));
    cache_.emplace(std::string(sql), stmt);
    return stmt;
  }

  sqlite3* db_;
  std::string display_;
  bool healthy_ = true;
  // Keyed by the statement text as SqlStore wrote it.
  std::unordered_map<std::string, sqlite3_stmt*> cache_;
};

class SqliteDriver final : public SqlDriver {
 public:
  SqliteDriver(std::string path, std::string display, int busy_timeout_ms)
      : path_(std::move(path)), display_(std::move(display)), busy_timeout_ms_(busy_timeout_ms) {}

  std::string_view backend() const override { return "sqlite"; }
  const std::vector<Migration>& migrations() const override { return SqliteMigrations(); }
  const std::string& display_url() const override { return display_; }
  // One connection: SQLite runs one writer at a time anyway, and ":memory:"
  // is private to its connection.
  int max_connections() const override { return 1; }
  bool writable_cte() const override { return false; }
  bool stored_functions() const override { return false; }
  // One writer at a time: the counter's value is committed.
  std::string_view horizon_sql() const override {
    return "SELECT (SELECT id FROM store_identity), (SELECT value FROM revision_counter) + 1";
  }

  std::unique_ptr<SqlConnection> Connect() override {
    sqlite3* db = nullptr;
    const int rc =
        sqlite3_open_v2(path_.c_str(), &db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) {
      Status s = SqliteStatus(db, rc, "cannot open", display_);
      sqlite3_close_v2(db);
      Throw(s);
    }
    auto conn = std::make_unique<SqliteConnection>(db, display_);
    sqlite3_busy_timeout(db, busy_timeout_ms_);
    // Touches the file header first, so a corrupt file fails here, clearly.
    conn->ExecScript("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;");
    return conn;
  }

  void LockForMigration(SqlConnection&) override {}  // BEGIN IMMEDIATE already excludes writers
  // SQLite's own procedure for schema changes ALTER TABLE cannot make
  // (sqlite.org/lang_altertable.html, "other kinds of table schema
  // changes"): with enforcement on, dropping the old table would cascade
  // its deletes into every table that refers to it.
  void BeforeMigrations(SqlConnection& c) override { c.ExecScript("PRAGMA foreign_keys=OFF"); }
  void CheckMigrated(SqlConnection& c) override {
    const auto broken = c.Query("PRAGMA foreign_key_check", {});
    if (!broken.empty()) {
      Throw(Status::DataLoss(display_ + ": after migrating, table " + broken[0].Text(0) +
                             " refers to rows that do not exist (nothing was applied)"));
    }
  }
  void AfterMigrations(SqlConnection& c) override { c.ExecScript("PRAGMA foreign_keys=ON"); }

 private:
  std::string path_;
  std::string display_;
  int busy_timeout_ms_;
};

}  // namespace

std::unique_ptr<SqlDriver> MakeSqliteDriver(std::string path, std::string display_url,
                                            int busy_timeout_ms) {
  return std::make_unique<SqliteDriver>(std::move(path), std::move(display_url), busy_timeout_ms);
}

}  // namespace hpo::store
