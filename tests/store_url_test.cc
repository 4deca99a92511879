#include "server/store/store_url.h"

#include <gtest/gtest.h>

#include "server/store/migrations.h"

namespace hpo::store {
namespace {

TEST(StoreUrl, ChoosesTheBackendByScheme) {
  auto a = ParseStoreUrl("sqlite:///var/lib/hpo/hpo.db");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->backend, StoreUrl::Backend::kSqlite);
  EXPECT_EQ(a->target, "/var/lib/hpo/hpo.db");
  auto b = ParseStoreUrl("sqlite://./hpo.db");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->target, "./hpo.db");
  auto c = ParseStoreUrl("data/hpo.db");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->backend, StoreUrl::Backend::kSqlite);
  EXPECT_EQ(c->target, "data/hpo.db");
  auto d = ParseStoreUrl("postgresql://hpo:s3cret@db.internal:5432/hpo");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->backend, StoreUrl::Backend::kPostgresql);
  EXPECT_EQ(d->target, "postgresql://hpo:s3cret@db.internal:5432/hpo");
  EXPECT_EQ(d->display, "postgresql://hpo:***@db.internal:5432/hpo");
  EXPECT_EQ(ParseStoreUrl("postgres://h/db")->backend, StoreUrl::Backend::kPostgresql);
}

TEST(StoreUrl, RejectsBadUrlsWithoutLeakingPasswords) {
  for (const char* bad :
       {"", "mysql://root:hunter2@h/db", "sqlite:relative.db", "sqlite://", "postgresql://"}) {
    auto r = ParseStoreUrl(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_TRUE(r.status().IsInvalidArgument()) << bad;
    EXPECT_EQ(r.status().message().find("hunter2"), std::string::npos) << r.status();
  }
  EXPECT_NE(ParseStoreUrl("mysql://root:hunter2@h/db").status().message().find("'mysql'"),
            std::string::npos);
}

TEST(StoreUrl, MasksPasswordsInEveryForm) {
  EXPECT_EQ(MaskPassword("postgresql://u:p@h/db"), "postgresql://u:***@h/db");
  EXPECT_EQ(MaskPassword("postgresql://u@h/db"), "postgresql://u@h/db");
  EXPECT_EQ(MaskPassword("postgresql://h/db?user=u&password=p&sslmode=require"),
            "postgresql://h/db?user=u&password=***&sslmode=require");
  EXPECT_EQ(MaskPassword("host=h password=p dbname=x"), "host=h password=*** dbname=x");
  EXPECT_EQ(MaskPassword("sqlite:///a:b@c.db"), "sqlite:///a:b@c.db");
}

TEST(Migrations, RefusesNewerSchemasAndListsPendingOnes) {
  const std::vector<Migration> known = {{1, "a", ""}, {2, "b", ""}, {3, "c", ""}};
  auto todo = PendingMigrations(known, 1, "x");
  ASSERT_TRUE(todo.ok());
  ASSERT_EQ(todo->size(), 2u);
  EXPECT_EQ((*todo)[0]->version, 2);
  EXPECT_TRUE(PendingMigrations(known, 3, "x")->empty());
  auto newer = PendingMigrations(known, 4, "sqlite://x.db");
  ASSERT_EQ(newer.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(newer.status().message().find("sqlite://x.db"), std::string::npos);
  const std::vector<Migration> gap = {{1, "a", ""}, {3, "c", ""}};
  EXPECT_EQ(PendingMigrations(gap, 0, "x").status().code(), StatusCode::kInternal);
}

TEST(Migrations, EveryDialectHasTheSameVersions) {
  const auto& a = SqliteMigrations();
  const auto& b = PostgresqlMigrations();
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].version, b[i].version);
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_FALSE(a[i].sql.empty());
  }
}

}  // namespace
}  // namespace hpo::store
