// PostgreSQL driver over libpqxx 6.4: one pqxx::connection per SqlConnection,
// statements prepared once per connection, READ COMMITTED write transactions
// with row locks where SqlStore asks for them ({FOR_UPDATE}, {SKIP_LOCKED},
// and inside the store's functions, sql/postgresql/0007_create_trials.sql),
// REPEATABLE READ read-only transactions for reads (one snapshot).
#include <cstdio>
#include <deque>
#include <pqxx/pqxx>
#include <unordered_map>

#include "server/store/sql_driver.h"

namespace hpo::store {
namespace {

std::string Rewrite(std::string_view sql) {
  std::string out(sql);
  auto replace = [&](std::string_view token, std::string_view with) {
    for (size_t pos; (pos = out.find(token)) != std::string::npos;)
      out.replace(pos, token.size(), with);
  };
  replace("{FOR_UPDATE}", "FOR UPDATE");
  replace("{SKIP_LOCKED}", "SKIP LOCKED");
  replace(
      "{METRIC_4}",
      "CAST(json_extract_path_text(CAST(metrics AS json), CAST($4 AS text)) AS DOUBLE PRECISION)");
  return out;
}

// libpq messages may span lines; a log line should not.
std::string OneLine(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  for (char& c : s) {
    if (c == '\n' || c == '\t') c = ' ';
  }
  return s;
}

class PostgresConnection final : public SqlConnection {
 public:
  PostgresConnection(std::unique_ptr<pqxx::connection> conn, std::string display)
      : conn_(std::move(conn)), display_(std::move(display)) {}

  void Begin(TxMode mode) override {
    release_pending_ = false;
    Guard([&] {
      switch (mode) {
        case TxMode::kRead:
          // One snapshot for every statement: under READ COMMITTED a read of
          // workers then their devices could see a device whose worker
          // registered in between (ListWorkers failed with map::at under load).
          tx_ = std::make_unique<pqxx::transaction<pqxx::repeatable_read, pqxx::read_only>>(*conn_);
          break;
        case TxMode::kWrite:
          tx_ = std::make_unique<pqxx::work>(*conn_);
          break;
        case TxMode::kSingle:
        case TxMode::kReadOne:
          break;
      }
    });
  }
  void Commit() override {
    if (!tx_) return;  // autocommit: each statement committed itself
    Guard([&] {
      tx_->commit();
      tx_.reset();
    });
  }
  void Rollback() noexcept override {
    try {
      if (tx_) tx_->abort();
    } catch (...) {
      healthy_ = false;
    }
    tx_.reset();
  }
  bool healthy() const override { return healthy_ && conn_->is_open(); }

  // Each call of a batch is a round trip of its own; the release of the
  // previous call's savepoint rides along with the next SAVEPOINT (or the
  // COMMIT, which releases them all), so a call costs two round trips,
  // not three.
  void Savepoint() override {
    Guard([&] {
      tx_->exec(release_pending_ ? "RELEASE SAVEPOINT hpo_call; SAVEPOINT hpo_call"
                                 : "SAVEPOINT hpo_call");
    });
    release_pending_ = false;
  }
  void ReleaseSavepoint() override { release_pending_ = true; }
  void RollbackToSavepoint() override {
    Guard([&] { tx_->exec("ROLLBACK TO SAVEPOINT hpo_call"); });
    release_pending_ = true;  // ROLLBACK TO keeps it; the next SAVEPOINT drops it
  }

  void ExecScript(std::string_view sql) override {
    Guard([&] {
      if (tx_) {
        tx_->exec(std::string(sql));
      } else {
        pqxx::nontransaction n(*conn_);
        n.exec(std::string(sql));
      }
    });
  }

  SqlRows Query(std::string_view sql, std::initializer_list<SqlValue> params) override {
    std::vector<std::optional<std::string>> args;
    args.reserve(params.size());
    for (const SqlValue& v : params) {
      if (std::holds_alternative<std::monostate>(v)) {
        args.emplace_back(std::nullopt);
      } else if (auto* i = std::get_if<int64_t>(&v)) {
        args.emplace_back(std::to_string(*i));
      } else if (auto* d = std::get_if<double>(&v)) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.17g", *d);
        args.emplace_back(buf);
      } else {
        args.emplace_back(std::get<std::string>(v));
      }
    }
    SqlRows rows;
    Guard([&] {
      const std::string& name = Prepare(sql);
      pqxx::result r;
      if (tx_) {
        r = tx_->exec_prepared(name, pqxx::prepare::make_dynamic_params(args));
      } else {
        pqxx::nontransaction n(*conn_);  // sends nothing itself: no BEGIN
        r = n.exec_prepared(name, pqxx::prepare::make_dynamic_params(args));
      }
      rows.reserve(r.size());
      for (const auto& row : r) {
        std::vector<SqlValue> cols;
        cols.reserve(row.size());
        for (const auto& f : row) {
          if (f.is_null()) {
            cols.emplace_back(std::monostate{});
          } else {
            cols.emplace_back(std::string(f.c_str(), f.size()));
          }
        }
        rows.emplace_back(std::move(cols));
      }
    });
    return rows;
  }

 private:
  const std::string& Prepare(std::string_view sql) {
    auto it = prepared_.find(std::string(sql));
    if (it != prepared_.end()) return it->second;
    std::string name = "hpo_" + std::to_string(prepared_.size());
    conn_->prepare(name, Rewrite(sql));
    return prepared_.emplace(std::string(sql), std::move(name)).first->second;
  }

  // Runs f, turning libpqxx exceptions into SqlError with a code the caller
  // can act on.
  template <typename F>
  void Guard(F&& f) {
    try {
      f();
    } catch (const pqxx::broken_connection& e) {
      healthy_ = false;
      Throw(Status::Unavailable(display_ + ": connection lost: " + OneLine(e.what())));
    } catch (const pqxx::in_doubt_error& e) {
      healthy_ = false;
      Throw(Status::Unavailable(display_ + ": commit outcome unknown: " + OneLine(e.what())));
    } catch (const pqxx::unique_violation& e) {
      Throw(Status::AlreadyExists(display_ + ": " + OneLine(e.what())));
    } catch (const pqxx::integrity_constraint_violation& e) {
      Throw(Status::InvalidArgument(display_ + ": " + OneLine(e.what())));
    } catch (const pqxx::data_exception& e) {
      // Class 22: a value the database cannot hold (a NUL byte in text, a
      // number out of range).
      Throw(Status::InvalidArgument(display_ + ": " + OneLine(e.what())));
    } catch (const pqxx::serialization_failure& e) {
      Throw(Status::Aborted(display_ + ": " + OneLine(e.what())));
    } catch (const pqxx::deadlock_detected& e) {
      Throw(Status::Aborted(display_ + ": " + OneLine(e.what())));
    } catch (const pqxx::sql_error& e) {
      // Admin shutdown and friends arrive as sql_error with SQLSTATE class 57/08.
      const std::string& state = e.sqlstate();
      if (state.rfind("U0", 0) == 0) ThrowRaised(state, e.what());
      if (state.rfind("57", 0) == 0 || state.rfind("08", 0) == 0) {
        healthy_ = false;
        Throw(Status::Unavailable(display_ + ": " + OneLine(e.what())));
      }
      // Class 53, insufficient resources (a full disk, memory, too many
      // connections): the server may have room again later; the connection
      // itself is fine.
      if (state.rfind("53", 0) == 0)
        Throw(Status::Unavailable(display_ + ": " + OneLine(e.what())));
      Throw(Status::Internal(display_ + ": " + OneLine(e.what())));
    } catch (const pqxx::failure& e) {
      healthy_ = false;
      Throw(Status::Unavailable(display_ + ": " + OneLine(e.what())));
    }
  }

  // An error a store function raised (sql_driver.h, stored_functions):
  // its message is for the caller, without libpq's "ERROR:" and CONTEXT.
  [[noreturn]] static void ThrowRaised(const std::string& state, std::string_view what) {
    // "ERROR:  message\nCONTEXT: ...", the severity in the server's
    // lc_messages language: what follows the first ":  ".
    what = what.substr(0, what.find('\n'));
    if (const size_t colon = what.find(":  "); colon != std::string_view::npos)
      what.remove_prefix(colon + 3);
    std::string message(what);
    if (state == "U0404") Throw(Status::NotFound(std::move(message)));
    if (state == "U0412") Throw(Status::FailedPrecondition(std::move(message)));
    if (state == "U0400") Throw(Status::InvalidArgument(std::move(message)));
    Throw(Status::Internal("unknown SQLSTATE " + state + ": " + message));
  }

  std::unique_ptr<pqxx::connection> conn_;
  std::string display_;
  std::unique_ptr<pqxx::dbtransaction> tx_;
  bool healthy_ = true;
  bool release_pending_ = false;  // see Savepoint
  std::unordered_map<std::string, std::string> prepared_;
};

// Every HeteroTune process on a database notifies and listens on this channel.
constexpr const char* kChangeChannel = "hpo_changes";

// LISTEN on a connection of its own (a pooled one would be handed to other
// threads between calls).
class PostgresListener final : public ChangeListener {
 public:
  PostgresListener(std::string url, std::string display)
      : url_(std::move(url)), display_(std::move(display)) {}
  ~PostgresListener() override {
    receiver_.reset();  // unregisters from the connection before it closes
  }

  Result<std::optional<std::string>> Next(std::chrono::milliseconds timeout) override {
    try {
      if (conn_ == nullptr) {
        conn_ = std::make_unique<pqxx::connection>(url_);
        receiver_ = std::make_unique<Receiver>(*conn_, &queue_);
      }
      if (queue_.empty()) {
        const auto us = std::chrono::duration_cast<std::chrono::microseconds>(timeout).count();
        conn_->await_notification(us / 1'000'000, us % 1'000'000);
      }
    } catch (const std::exception& e) {
      receiver_.reset();
      conn_.reset();
      return Status::Unavailable(display_ + ": listening for changes: " + OneLine(e.what()));
    }
    if (queue_.empty()) return std::optional<std::string>();
    std::string payload = std::move(queue_.front());
    queue_.pop_front();
    return std::optional<std::string>(std::move(payload));
  }

 private:
  class Receiver final : public pqxx::notification_receiver {
   public:
    Receiver(pqxx::connection& c, std::deque<std::string>* queue)
        : pqxx::notification_receiver(c, kChangeChannel), queue_(queue) {}
    void operator()(const std::string& payload, int) override { queue_->push_back(payload); }

   private:
    std::deque<std::string>* queue_;
  };

  const std::string url_, display_;
  std::unique_ptr<pqxx::connection> conn_;
  std::unique_ptr<Receiver> receiver_;
  std::deque<std::string> queue_;  // delivered by await_notification, not yet returned
};

class PostgresDriver final : public SqlDriver {
 public:
  PostgresDriver(std::string url, std::string display, int pool_size)
      : url_(std::move(url)), display_(std::move(display)), pool_size_(pool_size) {}

  std::string_view backend() const override { return "postgresql"; }
  const std::vector<Migration>& migrations() const override { return PostgresqlMigrations(); }
  const std::string& display_url() const override { return display_; }
  int max_connections() const override { return pool_size_; }
  bool writable_cte() const override { return true; }
  bool stored_functions() const override { return true; }
  // Every transaction below the snapshot's xmin has ended.
  std::string_view horizon_sql() const override {
    return "SELECT (SELECT id FROM store_identity), "
           "pg_snapshot_xmin(pg_current_snapshot())::text::bigint";
  }

  std::unique_ptr<SqlConnection> Connect() override {
    try {
      auto conn = std::make_unique<pqxx::connection>(url_);
      return std::make_unique<PostgresConnection>(std::move(conn), display_);
    } catch (const pqxx::broken_connection& e) {
      Throw(Status::Unavailable("cannot connect to " + display_ + ": " + OneLine(e.what())));
    } catch (const std::exception& e) {
      // libpq rejects a malformed URI before it tries to connect.
      Throw(Status::InvalidArgument("cannot use " + display_ + ": " + OneLine(e.what())));
    }
  }

  void LockForMigration(SqlConnection& c) override {
    // Any constant works; all HeteroTune processes on this database agree on it.
    c.ExecScript("SELECT pg_advisory_xact_lock(7246031)");
  }

  std::string_view notify_sql() const override {
    static const std::string sql =
        std::string("SELECT pg_notify('") + kChangeChannel + "', p) FROM unnest($1::text[]) AS p";
    return sql;
  }
  std::unique_ptr<ChangeListener> Listen() override {
    return std::make_unique<PostgresListener>(url_, display_);
  }

 private:
  std::string url_;
  std::string display_;
  int pool_size_;
};

}  // namespace

std::unique_ptr<SqlDriver> MakePostgresDriver(std::string url, std::string display_url,
                                              int pool_size) {
  return std::make_unique<PostgresDriver>(std::move(url), std::move(display_url), pool_size);
}

}  // namespace hpo::store
