#include "testing/store_backends.h"

#include <sqlite3.h>
#include <unistd.h>

#include <pqxx/pqxx>

namespace hpo::testing {

namespace {
std::string Env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}
}  // namespace

SqliteBackend::SqliteBackend() {
  char tmpl[] = "/tmp/hpo-store-test-XXXXXX";
  dir_ = mkdtemp(tmpl);
  path_ = dir_ / "hpo.db";
}

SqliteBackend::~SqliteBackend() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void SqliteBackend::Raw(const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  const std::string msg = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << msg;
}

std::string PostgresBackend::UrlFor(const std::string& db) {
  return "postgresql://" + Env("HPO_TEST_PG_USER", "postgres") + "@" +
         Env("HPO_TEST_PG_HOST", "127.0.0.1") + ":" + Env("HPO_TEST_PG_PORT", "5432") + "/" + db;
}

bool PostgresBackend::Available(std::string* why) {
  if (!std::getenv("HPO_TEST_PG_PORT")) {
    *why = "HPO_TEST_PG_PORT is not set (scripts/test starts a private PostgreSQL and sets it)";
    return false;
  }
  return true;
}

PostgresBackend::PostgresBackend() {
  static std::atomic<int> counter{0};
  db_ = "hpo_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  pqxx::connection admin(UrlFor("postgres"));
  pqxx::nontransaction n(admin);
  n.exec("DROP DATABASE IF EXISTS " + db_);
  n.exec("CREATE DATABASE " + db_);
}

PostgresBackend::~PostgresBackend() {
  try {
    pqxx::connection admin(UrlFor("postgres"));
    pqxx::nontransaction n(admin);
    n.exec("DROP DATABASE IF EXISTS " + db_ + " WITH (FORCE)");
  } catch (const std::exception& e) {
    ADD_FAILURE() << "dropping " << db_ << ": " << e.what();
  }
}

void PostgresBackend::Raw(const std::string& sql) {
  pqxx::connection c(url());
  pqxx::work w(c);
  w.exec(sql);
  w.commit();
}

}  // namespace hpo::testing
