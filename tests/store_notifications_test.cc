// Store change notifications (Store::NotifyChange / ListenForChanges), which
// carry live events between server replicas: on PostgreSQL a notification
// from one Store handle reaches the listeners of every handle, in order; on
// SQLite there is nobody to tell.
#include <gtest/gtest.h>

#include "server/store/store.h"
#include "testing/store_backends.h"

namespace hpo::store {
namespace {

std::unique_ptr<Store> Open(const std::string& url) {
  auto s = OpenStore(url);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(s).value() : nullptr;
}

TEST(StoreNotificationsTest, PostgresqlDeliversToTheListenersOfEveryHandleInOrder) {
  HPO_REQUIRE_BACKEND(testing::PostgresBackend);
  testing::PostgresBackend db;
  auto a = Open(db.url()), b = Open(db.url());
  ASSERT_TRUE(a && b);
  auto listener = b->ListenForChanges();
  ASSERT_TRUE(listener.ok()) << listener.status();
  // Nothing yet: the wait times out.
  auto none = (*listener)->Next(std::chrono::milliseconds(100));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(a->NotifyChange(R"({"n":1})").ok());
  ASSERT_TRUE(a->NotifyChange(R"({"n":2})").ok());
  for (const char* want : {R"({"n":1})", R"({"n":2})"}) {
    auto got = (*listener)->Next(std::chrono::seconds(5));
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(got->has_value()) << "no notification within 5 s";
    EXPECT_EQ(**got, want);
  }
  EXPECT_TRUE(a->NotifyChange(std::string(Store::kMaxChangePayload + 1, 'x')).IsInvalidArgument());
}

TEST(StoreNotificationsTest, SqliteHasNoOtherProcessToTell) {
  testing::SqliteBackend db;
  auto s = Open(db.url());
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->NotifyChange("{}").ok());
  EXPECT_EQ(s->ListenForChanges().status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace hpo::store
