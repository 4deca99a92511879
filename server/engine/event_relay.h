// Carries live events between hpo-server replicas on one database. What
// this server's engine publishes goes to its own EventBus and, as a store
// change notification (PostgreSQL NOTIFY), to every other replica, whose
// relay publishes it on its EventBus. So /api/v1/events on any replica
// shows the changes made through every replica, and a dashboard behind a
// load balancer misses nothing.
//
// On a store without notifications (SQLite: one server per file) it only
// publishes locally. Delivery between replicas is best effort: a
// notification that fails to send, or that arrives while a listener
// reconnects, is lost and logged, never retried. When the listener is back
// after a failure the relay publishes "lagged" on the local bus, the event
// that tells a client of /api/v1/events to re-read the REST lists (as when
// it fell behind and events were dropped).
//
// Thread-safe: Publish may be called from any thread.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "server/http/events.h"
#include "server/store/store.h"

namespace hpo::server {

class EventRelay {
 public:
  // Starts listening when the store has notifications.
  // REQUIRES: `store` and `bus` outlive the relay.
  EventRelay(store::Store& store, EventBus& bus);
  ~EventRelay();  // stops listening
  EventRelay(const EventRelay&) = delete;
  EventRelay& operator=(const EventRelay&) = delete;

  // Publishes on the local bus, then notifies the other replicas.
  void Publish(std::string type, const nlohmann::json& data);
  // Whether other replicas are told (the store has notifications).
  bool relaying() const { return listener_ != nullptr; }

 private:
  void Listen();

  store::Store& store_;
  EventBus& bus_;
  const std::string origin_;  // tells this process's notifications from others'
  std::unique_ptr<store::ChangeListener> listener_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace hpo::server
