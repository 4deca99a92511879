// Carries live events between hpo-server replicas on one database. What
// this server's engine publishes goes to its own EventBus and, as a store
// change notification (PostgreSQL NOTIFY), to every other replica, whose
// relay publishes it on its EventBus. So /api/v1/events on any replica
// shows the changes made through every replica, and a dashboard behind a
// load balancer misses nothing.
//
// On a store without notifications (SQLite: one server per file) it only
// publishes locally. The notifications are sent by a thread of the relay,
// all those queued since its last statement in one (Store::NotifyChanges):
// Publish does not wait for the database, and a busy server's events cost
// one round trip per batch, not one each (a NOTIFY per event was
// a twelfth of the server's CPU under bench/server_bench). Delivery between
// replicas is best effort: a notification that fails to send, that does
// not fit the queue, or that arrives while a listener reconnects, is lost
// and logged, never retried; when the queue overflowed, the other replicas
// get "lagged" in place of what was dropped. When the listener is back
// after a failure the relay publishes "lagged" on the local bus, the event
// that tells a client of /api/v1/events to re-read the REST lists (as when
// it fell behind and events were dropped).
//
// Thread-safe: Publish may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "server/engine/event_bus.h"
#include "server/store/store.h"

namespace hpo::server {

class EventRelay {
 public:
  // Starts listening when the store has notifications.
  // REQUIRES: `store` and `bus` outlive the relay.
  EventRelay(store::Store& store, EventBus& bus);
  ~EventRelay();  // sends what is queued (gives up at the first failure), then stops listening
  EventRelay(const EventRelay&) = delete;
  EventRelay& operator=(const EventRelay&) = delete;

  // Publishes on the local bus, then queues the notification of the other
  // replicas.
  void Publish(std::string type, const nlohmann::json& data) HPO_EXCLUDES(mu_);
  // Whether other replicas are told (the store has notifications).
  bool relaying() const { return listener_ != nullptr; }

  // Notifications queued at most (the sender is that far behind), and sent
  // in one statement at most.
  static constexpr size_t kMaxQueued = 10000;
  static constexpr size_t kMaxPerStatement = 500;
  // How long the sender waits for more after the first of a statement.
  static constexpr std::chrono::milliseconds kSendWindow{5};

 private:
  void Listen();
  void Send() HPO_EXCLUDES(mu_);
  // A notification's text: this relay's origin first (its listener hears
  // its own too, and skips them by that prefix without parsing them), then
  // its number, type and data (JSON text).
  std::string Envelope(uint64_t seq, const std::string& type, const std::string& data_json) const;

  store::Store& store_;
  EventBus& bus_;
  const std::string origin_;      // tells this process's notifications from others'
  const std::string own_prefix_;  // how each of this relay's notifications begins
  std::unique_ptr<store::ChangeListener> listener_;
  std::atomic<bool> stop_{false};
  std::thread thread_;                 // listens
  std::atomic<uint64_t> sequence_{0};  // of this relay's notifications

  Mutex mu_;
  CondVar queued_;  // signalled when there is something to send, or on stopping
  std::deque<std::string> queue_ HPO_GUARDED_BY(mu_);
  size_t dropped_ HPO_GUARDED_BY(mu_) = 0;  // since the last "lagged" sent
  bool stopping_ HPO_GUARDED_BY(mu_) = false;
  std::thread sender_;
};

}  // namespace hpo::server
