// A full disk under the SQLite store: SQLITE_FULL is an outage
// the caller may retry once there is room (UNAVAILABLE / HTTP 503 with
// Retry-After), named as a full disk, and the transaction it hit leaves
// nothing behind. `PRAGMA max_page_count` makes SQLite answer SQLITE_FULL
// exactly as a full file system does, without one.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "common/status.h"
#include "server/store/sql_driver.h"

namespace hpo::store {
namespace {

TEST(SqliteFull, AFullDatabaseIsUnavailableNamingTheCauseAndKeepsWhatWasCommitted) {
  char tmpl[] = "/tmp/hpo-sqlite-full-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string path = dir + "/hpo.db";
  auto driver = MakeSqliteDriver(path, "sqlite://" + path, 1000);
  auto c = driver->Connect();
  c->ExecScript("CREATE TABLE t (x TEXT)");
  c->ExecScript("PRAGMA max_page_count = 16");  // of 4 KiB: 64 KiB in all
  const std::string row(3000, 'x');
  int committed = 0;
  std::optional<Status> failure;
  for (int i = 0; i < 1000 && !failure; ++i) {
    try {
      c->Begin(SqlConnection::TxMode::kWrite);
      // Two rows per transaction: the second may be the one that does not fit.
      c->Query("INSERT INTO t (x) VALUES ($1)", {row});
      c->Query("INSERT INTO t (x) VALUES ($1)", {row});
      c->Commit();
      committed += 2;
    } catch (const SqlError& e) {
      failure = e.status;
      c->Rollback();
    }
  }
  ASSERT_TRUE(failure.has_value()) << "64 KiB never filled";
  EXPECT_EQ(failure->code(), StatusCode::kUnavailable) << failure->ToString();
  EXPECT_TRUE(IsRetryable(*failure));
  EXPECT_NE(failure->message().find("the disk holding the store is full"), std::string::npos)
      << failure->ToString();
  // Nothing of the transaction that did not fit was kept.
  c->Begin(SqlConnection::TxMode::kRead);
  const SqlRows rows = c->Query("SELECT COUNT(*) FROM t", {});
  c->Commit();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].Int(0), committed);
  // With room again, the same write passes.
  c->ExecScript("PRAGMA max_page_count = 100000");
  c->Begin(SqlConnection::TxMode::kWrite);
  c->Query("INSERT INTO t (x) VALUES ($1)", {row});
  c->Commit();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hpo::store
