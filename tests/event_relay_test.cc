// The relay of live events between replicas (server/engine/event_relay.h) on a
// real PostgreSQL: another replica's events reach this server's bus, and
// when the listening connection breaks, the relay reconnects and publishes
// "lagged" so that clients re-read what they may have missed.
#include "server/engine/event_relay.h"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <thread>

#include "testing/store_backends.h"

namespace hpo::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::unique_ptr<store::Store> Open(const std::string& url) {
  auto s = store::OpenStore(url);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(s).value() : nullptr;
}

// Notifies as another replica would until `sub` sees an event of `type`
// (the relay's listener connects in the background); false after 10 s.
bool RelayedFromOtherReplica(store::Store& other, EventBus::Subscription& sub,
                             const std::string& type) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < deadline) {
    const std::string payload =
        json{{"origin", "another-replica"}, {"type", type}, {"data", {{"n", 1}}}}.dump();
    if (!other.NotifyChange(payload).ok()) return false;
    for (auto e = sub.Next(std::chrono::milliseconds(200)); e;
         e = sub.Next(std::chrono::milliseconds(0))) {
      if (e->type == type) return true;
    }
  }
  return false;
}

// The next event of `type` on `sub` within `wait`, if one comes.
std::optional<Event> NextOf(EventBus::Subscription& sub, const std::string& type,
                            std::chrono::milliseconds wait = std::chrono::seconds(10)) {
  for (const auto deadline = Clock::now() + wait; Clock::now() < deadline;) {
    auto e = sub.Next(std::chrono::milliseconds(200));
    if (e && e->type == type) return e;
  }
  return std::nullopt;
}

// Two replicas on one PostgreSQL: this one (`mine`, its relay listening
// and heard from) and the other one, whose relay each test starts.
class EventRelayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HPO_REQUIRE_BACKEND(testing::PostgresBackend);
    db_ = std::make_unique<testing::PostgresBackend>();
    mine_ = Open(db_->url());
    other_ = Open(db_->url());
    ASSERT_TRUE(mine_ && other_);
    sub_ = bus_.Subscribe(4096);  // room for a burst
    relay_ = std::make_unique<EventRelay>(*mine_, bus_);
    ASSERT_TRUE(relay_->relaying());
    ASSERT_TRUE(RelayedFromOtherReplica(*other_, *sub_, "probe")) << "no event relayed within 10 s";
  }

  std::unique_ptr<testing::PostgresBackend> db_;
  std::unique_ptr<store::Store> mine_, other_;
  EventBus bus_, other_bus_;
  std::shared_ptr<EventBus::Subscription> sub_;
  std::unique_ptr<EventRelay> relay_;
};

TEST_F(EventRelayTest, AfterTheListenerReconnectsClientsAreToldToReread) {
  // The listening connection dies (a PostgreSQL restart or a network cut
  // looks the same to it).
  db_->Raw(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
      "WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()");
  EXPECT_TRUE(NextOf(*sub_, "lagged"))
      << "no lagged event within 10 s of the listener's connection ending";
  // And relaying goes on.
  EXPECT_TRUE(RelayedFromOtherReplica(*other_, *sub_, "trial.finished"));
}

TEST_F(EventRelayTest, ABurstOfEventsReachesTheOtherReplicasWholeAndInOrder) {
  // More than one statement carries, published faster than they are sent.
  constexpr int kEvents = static_cast<int>(EventRelay::kMaxPerStatement) * 2 + 7;
  {
    EventRelay other_relay(*other_, other_bus_);
    for (int i = 0; i < kEvents; ++i)
      other_relay.Publish("trial.reported", {{"trial_id", 1}, {"step", i / 2}});
  }  // what is queued is sent before the relay stops
  int next = 0;
  for (std::optional<Event> e; next < kEvents && (e = NextOf(*sub_, "trial.reported")); ++next) {
    // Each twice: PostgreSQL would deliver one of two identical
    // notifications of one statement, were they not numbered.
    ASSERT_EQ(json::parse(e->data), (json{{"trial_id", 1}, {"step", next / 2}}))
        << "out of order or changed";
  }
  EXPECT_EQ(next, kEvents) << "events lost on the way";
}

TEST_F(EventRelayTest, AReplicasOwnEventsAreNotPublishedTwiceOnItsBus) {
  EventRelay other_relay(*other_, other_bus_);
  ASSERT_TRUE(RelayedFromOtherReplica(*mine_, *other_bus_.Subscribe(), "probe"))
      << "the other relay never listened";
  auto other_sub = other_bus_.Subscribe();
  other_relay.Publish("trial.finished", {{"trial_id", 5}});
  ASSERT_TRUE(NextOf(*sub_, "trial.finished")) << "never reached this replica";
  // By now its own listener has heard it back too.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  int seen = 0;
  while (auto e = other_sub->Next(std::chrono::milliseconds(0)))
    seen += e->type == "trial.finished";
  EXPECT_EQ(seen, 1) << "its clients got its own event more than once";
}

// Anyone who may connect can NOTIFY on the channel: notifications that are
// not events (a number for a type or an origin, no type, not JSON) are
// skipped, and the relay goes on relaying (a type error once ended the
// server through std::terminate).
TEST_F(EventRelayTest, NotificationsThatAreNotEventsAreSkippedAndTheRelayGoesOn) {
  for (const std::string bad :
       {R"({"type": 1})", R"({"origin": 1, "type": "trial.finished"})", R"({"origin": "x"})",
        R"([1, 2])", "not json", R"({"type": "trial.bad", "data": 3})"}) {
    ASSERT_TRUE(other_->NotifyChange(bad).ok()) << bad;
  }
  ASSERT_TRUE(other_
                  ->NotifyChange(json{
                      {"origin", "another-replica"}, {"type", "trial.after"}, {"data", {{"n", 2}}}}
                                     .dump())
                  .ok());
  const auto after = NextOf(*sub_, "trial.after");
  ASSERT_TRUE(after) << "the relay stopped relaying after notifications that are not events";
  EXPECT_EQ(json::parse(after->data)["n"], 2);
}

TEST_F(EventRelayTest, AnEventTooLargeToRelayWholeReachesTheOtherReplicasTrimmed) {
  EventRelay other_relay(*other_, other_bus_);
  auto other_sub = other_bus_.Subscribe();
  // A trial whose params alone are past what one NOTIFY may carry.
  const json data = {{"experiment_id", 3},
                     {"trial_id", 7},
                     {"state", "leased"},
                     {"params", {{"note", std::string(store::Store::kMaxChangePayload, 'x')}}}};
  other_relay.Publish("trial.created", data);
  auto own = other_sub->Next(std::chrono::seconds(1));
  ASSERT_TRUE(own && own->type == "trial.created");
  EXPECT_EQ(json::parse(own->data), data) << "its own replica's clients get it whole";
  const std::optional<Event> got = NextOf(*sub_, "trial.created");
  ASSERT_TRUE(got) << "the large event never reached the other replica";
  const json trimmed = json::parse(got->data);
  EXPECT_EQ(trimmed,
            (json{{"trimmed", true}, {"experiment_id", 3}, {"trial_id", 7}, {"state", "leased"}}))
      << "its ids, and word to read the rest";
}

}  // namespace
}  // namespace hpo::server
