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

// Two handles on one PostgreSQL, the second listening.
struct ListeningPair {
  testing::PostgresBackend db;
  std::unique_ptr<Store> a = Open(db.url()), b = Open(db.url());
  std::unique_ptr<ChangeListener> listener;
};
std::unique_ptr<ListeningPair> Listening() {
  auto p = std::make_unique<ListeningPair>();
  if (!p->a || !p->b) return nullptr;
  auto l = p->b->ListenForChanges();
  EXPECT_TRUE(l.ok()) << l.status();
  if (!l.ok()) return nullptr;
  p->listener = std::move(l).value();
  return p;
}

TEST(StoreNotificationsTest, PostgresqlDeliversToTheListenersOfEveryHandleInOrder) {
  HPO_REQUIRE_BACKEND(testing::PostgresBackend);
  auto pair = Listening();
  ASSERT_TRUE(pair);
  auto& a = pair->a;
  auto& listener = pair->listener;
  // Nothing yet: the wait times out.
  auto none = listener->Next(std::chrono::milliseconds(100));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(a->NotifyChange(R"({"n":1})").ok());
  ASSERT_TRUE(a->NotifyChange(R"({"n":2})").ok());
  for (const char* want : {R"({"n":1})", R"({"n":2})"}) {
    auto got = listener->Next(std::chrono::seconds(5));
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(got->has_value()) << "no notification within 5 s";
    EXPECT_EQ(**got, want);
  }
  EXPECT_TRUE(a->NotifyChange(std::string(Store::kMaxChangePayload + 1, 'x')).IsInvalidArgument());
}

TEST(StoreNotificationsTest, SeveralInOneCallArriveWholeAndInOrder) {
  HPO_REQUIRE_BACKEND(testing::PostgresBackend);
  auto pair = Listening();
  ASSERT_TRUE(pair);
  auto& a = pair->a;
  auto& listener = pair->listener;
  ASSERT_TRUE(listener->Next(std::chrono::milliseconds(100)).ok());  // listening from here on
  // What an array literal would mistake for its own syntax, and text that
  // is not ASCII.
  const std::vector<std::string> sent = {R"({"q":"a \"quoted\" word"})",
                                         R"(back\slash)",
                                         "{a,b}",
                                         "",
                                         "NULL",
                                         "caf\u00e9 \xc3\xa9",
                                         std::string(Store::kMaxChangePayload, 'y')};
  ASSERT_TRUE(a->NotifyChanges(sent).ok());
  for (const std::string& want : sent) {
    auto got = listener->Next(std::chrono::seconds(5));
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(got->has_value()) << "no notification within 5 s for '" << want.substr(0, 40)
                                  << "'";
    EXPECT_EQ(**got, want);
  }
  // One too large: none of them is sent.
  const auto bad = a->NotifyChanges({"first", std::string(Store::kMaxChangePayload + 1, 'x')});
  EXPECT_TRUE(bad.IsInvalidArgument()) << bad;
  EXPECT_NE(bad.message().find("payloads[1]"), std::string::npos) << bad;
  ASSERT_TRUE(a->NotifyChange("after").ok());
  auto next = listener->Next(std::chrono::seconds(5));
  ASSERT_TRUE(next.ok() && next->has_value());
  EXPECT_EQ(**next, "after") << "the refused call sent nothing";
}

TEST(StoreNotificationsTest, SqliteHasNoOtherProcessToTell) {
  testing::SqliteBackend db;
  auto s = Open(db.url());
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->NotifyChange("{}").ok());
  EXPECT_TRUE(s->NotifyChanges({"{}", "{}"}).ok());
  EXPECT_EQ(s->ListenForChanges().status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace hpo::store
