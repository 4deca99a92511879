// hpo-server's start-up on bad stores: one clear line naming the URL (with
// the password masked), a non-zero exit, and nothing half-applied.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "server/store/migrations.h"
#include "testing/files.h"
#include "testing/store_backends.h"

namespace {

struct Run {
  int exit_code;
  std::string output;
};

Run RunServer(const std::string& args) {
  const std::string cmd = std::string(HPO_SERVER_BIN) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 512> buf;
  while (p && fgets(buf.data(), buf.size(), p)) out += buf.data();
  const int status = p ? pclose(p) : -1;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

int Lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

TEST(ServerStoreErrors, BadSchemeIsOneLineNamingTheUrl) {
  auto r = RunServer("--migrate-only --store 'mysql://root:hunter2@127.0.0.1/x'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(Lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("mysql://root:***@127.0.0.1/x"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("hunter2"), std::string::npos) << r.output;
}

TEST(ServerStoreErrors, UnreachablePostgresIsOneLineWithPasswordMasked) {
  // Port 1 on loopback: nothing listens there.
  auto r = RunServer(
      "--migrate-only --store 'postgresql://hpo:hunter2@127.0.0.1:1/hpo?connect_timeout=2'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(Lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("postgresql://hpo:***@127.0.0.1:1/hpo"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("hunter2"), std::string::npos) << r.output;
}

TEST(ServerStoreErrors, CorruptSqliteFileIsRefusedAndLeftAlone) {
  hpo::testing::SqliteBackend b;
  const std::string path = b.url().substr(9);
  const std::string junk(8192, 'x');
  std::ofstream(path) << junk;
  auto r = RunServer("--migrate-only --store " + b.url());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(Lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find(b.url()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not a usable SQLite database"), std::string::npos) << r.output;
  const std::string after = hpo::testing::ReadFile(path);
  EXPECT_EQ(after, junk) << "the corrupt file was modified";
}

TEST(ServerStoreErrors, MigrateTwiceIsANoOpAndNewerSchemaIsRefused) {
  hpo::testing::SqliteBackend b;
  auto first = RunServer("--migrate-only --store " + b.url());
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto second = RunServer("--migrate-only --store " + b.url());
  ASSERT_EQ(second.exit_code, 0) << second.output;
  const int latest = hpo::store::SqliteMigrations().back().version;
  EXPECT_NE(second.output.find("schema version " + std::to_string(latest)), std::string::npos)
      << second.output;
  b.Raw("INSERT INTO schema_version (version, name, applied_ms) VALUES (42, 'future', 0)");
  auto newer = RunServer("--migrate-only --store " + b.url());
  EXPECT_NE(newer.exit_code, 0);
  EXPECT_EQ(Lines(newer.output), 1) << newer.output;
  EXPECT_NE(newer.output.find("schema version 42 is newer"), std::string::npos) << newer.output;
}

TEST(ServerStoreErrors, AFailedMigrationLeavesNothingBehind) {
  hpo::testing::SqliteBackend b;
  // A table in the way makes migration 1 fail half-way through.
  b.Raw("CREATE TABLE trials (x INTEGER)");
  auto r = RunServer("--migrate-only --store " + b.url());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("migration 1_initial failed"), std::string::npos) << r.output;
  // The tables made before the failing statement, and the version table,
  // were rolled back: creating them again succeeds (Raw asserts it).
  b.Raw("CREATE TABLE experiments (y INTEGER)");
  b.Raw("CREATE TABLE schema_version (z INTEGER)");
}

}  // namespace
