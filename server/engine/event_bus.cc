#include "server/engine/event_bus.h"

#include <algorithm>

namespace hpo::server {

std::optional<Event> EventBus::Subscription::Next(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(mu_);
  while (queue_.empty()) {
    if (!cv_.WaitUntil(mu_, deadline) && queue_.empty()) return std::nullopt;
  }
  Event e = std::move(queue_.front());
  queue_.pop_front();
  return e;
}

uint64_t EventBus::Subscription::TakeDropped() {
  MutexLock lock(mu_);
  return std::exchange(dropped_, 0);
}

void EventBus::Publish(std::string type, const nlohmann::json& data) {
  std::vector<std::shared_ptr<Subscription>> live;
  Event e;
  {
    MutexLock lock(mu_);
    e.id = next_id_++;
    subs_.erase(std::remove_if(subs_.begin(), subs_.end(),
                               [&](const std::weak_ptr<Subscription>& w) {
                                 auto s = w.lock();
                                 if (!s) return true;  // its subscriber is gone
                                 live.push_back(std::move(s));
                                 return false;
                               }),
                subs_.end());
  }
  if (live.empty()) return;
  e.type = std::move(type);
  e.data = data.dump();
  for (auto& s : live) {
    MutexLock lock(s->mu_);
    if (s->queue_.size() >= s->capacity_) {
      s->queue_.pop_front();
      ++s->dropped_;
    }
    s->queue_.push_back(e);
    s->cv_.NotifyOne();
  }
}

std::shared_ptr<EventBus::Subscription> EventBus::Subscribe(size_t capacity) {
  auto s = std::make_shared<Subscription>();
  s->capacity_ = std::max<size_t>(1, capacity);
  MutexLock lock(mu_);
  subs_.push_back(s);
  return s;
}

size_t EventBus::subscribers() {
  MutexLock lock(mu_);
  return std::count_if(subs_.begin(), subs_.end(), [](const auto& w) { return !w.expired(); });
}

}  // namespace hpo::server
