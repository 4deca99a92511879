// In-process publish/subscribe of trial and experiment changes: the engine
// and the replicas' relay (event_relay.h) publish, /api/v1/events
// (Server-Sent Events, server/http) subscribes. A slow subscriber loses its
// oldest events rather than slowing publishers; it is told how many it
// missed.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace hpo::server {

struct Event {
  uint64_t id = 0;
  std::string type;  // "experiment.created", "trial.reported", ...
  std::string data;  // JSON text
};

class EventBus {
 public:
  class Subscription {
   public:
    // The next event, or nullopt after `timeout` without one.
    std::optional<Event> Next(std::chrono::milliseconds timeout);
    // Events dropped because this subscriber fell behind (then reset to 0).
    uint64_t TakeDropped();

   private:
    friend class EventBus;
    Mutex mu_;
    CondVar cv_;
    std::deque<Event> queue_ HPO_GUARDED_BY(mu_);
    uint64_t dropped_ HPO_GUARDED_BY(mu_) = 0;
    size_t capacity_ = 1024;
  };

  void Publish(std::string type, const nlohmann::json& data);
  std::shared_ptr<Subscription> Subscribe(size_t capacity = 1024);
  size_t subscribers();

 private:
  Mutex mu_;
  uint64_t next_id_ HPO_GUARDED_BY(mu_) = 1;
  std::vector<std::weak_ptr<Subscription>> subs_ HPO_GUARDED_BY(mu_);
};

}  // namespace hpo::server
