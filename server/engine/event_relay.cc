#include "server/engine/event_relay.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <random>
#include <utility>
#include <vector>

namespace hpo::server {
namespace {

std::string RandomOrigin() {
  std::random_device rd;
  const uint64_t v = (uint64_t{rd()} << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// JSON text; bytes that are not UTF-8 (a value quoted from a client) become
// U+FFFD rather than an exception in the call that published the event.
std::string DumpText(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

EventRelay::EventRelay(store::Store& store, EventBus& bus)
    : store_(store),
      bus_(bus),
      origin_(RandomOrigin()),
      own_prefix_("{\"origin\":\"" + origin_ + "\"") {
  auto listener = store_.ListenForChanges();
  if (!listener.ok()) return;  // Unimplemented: no other replica to hear from
  listener_ = std::move(listener).value();
  thread_ = std::thread([this] { Listen(); });
  sender_ = std::thread([this] { Send(); });
}

EventRelay::~EventRelay() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  queued_.NotifyAll();
  if (sender_.joinable()) sender_.join();
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void EventRelay::Publish(std::string type, const nlohmann::json& data) {
  bus_.Publish(type, data);
  if (!listener_) return;
  // Numbered: PostgreSQL delivers one of identical notifications sent in
  // one transaction, and a statement carries many.
  const uint64_t seq = ++sequence_;
  std::string payload = Envelope(seq, type, DumpText(data));
  if (payload.size() > store::Store::kMaxChangePayload) {
    // Too large for a NOTIFY (a trial's params, say): the other replicas'
    // clients get its ids and "trimmed", which tells them to read the
    // rows instead of applying the event.
    nlohmann::json ids = {{"trimmed", true}};
    for (const char* key : {"experiment_id", "trial_id", "number", "worker_id", "state", "step"}) {
      if (data.is_object() && data.contains(key)) ids[key] = data[key];
    }
    payload = Envelope(seq, type, DumpText(ids));
    spdlog::debug("event {} is too large to relay whole to other replicas; relayed trimmed", type);
  }
  MutexLock lock(mu_);
  if (queue_.size() >= kMaxQueued) {
    ++dropped_;  // the sender tells the other replicas to re-read
    return;
  }
  queue_.push_back(std::move(payload));
  // The sender waits for a statement's first, then for a full one or the
  // end of its window.
  if (queue_.size() == 1 || queue_.size() == kMaxPerStatement) queued_.NotifyOne();
}

std::string EventRelay::Envelope(uint64_t seq, const std::string& type,
                                 const std::string& data_json) const {
  return own_prefix_ + ",\"seq\":" + std::to_string(seq) +
         ",\"type\":" + nlohmann::json(type).dump() + ",\"data\":" + data_json + "}";
}

void EventRelay::Send() {
  std::vector<std::string> batch;
  for (;;) {
    size_t dropped = 0;
    {
      MutexLock lock(mu_);
      while (queue_.empty() && dropped_ == 0 && !stopping_) queued_.Wait(mu_);
      if (queue_.empty() && dropped_ == 0) return;  // stopping, and everything sent
      // A busy server's next events are a few milliseconds behind: they go
      // in the same statement.
      const auto until = std::chrono::steady_clock::now() + kSendWindow;
      while (!stopping_ && queue_.size() < kMaxPerStatement && queued_.WaitUntil(mu_, until)) {
      }
      const auto n = static_cast<std::ptrdiff_t>(std::min(queue_.size(), kMaxPerStatement));
      batch.assign(std::make_move_iterator(queue_.begin()),
                   std::make_move_iterator(queue_.begin() + n));
      queue_.erase(queue_.begin(), queue_.begin() + n);
      dropped = std::exchange(dropped_, 0);
    }
    if (dropped > 0) {
      spdlog::warn(
          "{} events were not relayed to other replicas ({} were queued already); their clients "
          "are "
          "told to re-read",
          dropped, kMaxQueued);
      const nlohmann::json why = {{"reason", "another replica dropped events it could not relay"}};
      batch.push_back(Envelope(++sequence_, "lagged", why.dump()));
    }
    if (Status s = store_.NotifyChanges(batch); !s.ok()) {
      spdlog::warn("relaying {} events to other replicas: {}", batch.size(), s.ToString());
      MutexLock lock(mu_);
      if (stopping_ && !queue_.empty()) {
        // Shutting down with the database unreachable: one failure is
        // enough, rather than one per statement of what is left.
        spdlog::warn("{} more events not relayed to other replicas: stopping", queue_.size());
        queue_.clear();
        dropped_ = 0;
      }
    }
    batch.clear();
  }
}

void EventRelay::Listen() {
  bool failing = false;
  while (!stop_) {
    auto next = listener_->Next(std::chrono::milliseconds(250));
    if (!next.ok()) {
      if (!failing)
        spdlog::warn("events of other replicas: {}; retrying", next.status().ToString());
      failing = true;
      for (int i = 0; i < 10 && !stop_; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    if (failing) {
      spdlog::info("events of other replicas: listening again");
      // What other replicas published meanwhile was not heard: tell this
      // server's clients to re-read, as when a slow client drops events.
      bus_.Publish("lagged", {{"reason",
                               "events of other replicas may have been missed while the listener "
                               "reconnected"}});
    }
    failing = false;
    if (!next->has_value()) continue;
    // Its own, heard back: skipped unparsed.
    if ((*next)->compare(0, own_prefix_.size(), own_prefix_) == 0) continue;
    // Anyone who may connect to the database can NOTIFY on the channel (and
    // a replica of another version may say it differently): what is not an
    // event of the shape below is skipped, never thrown out of this thread.
    const nlohmann::json n = nlohmann::json::parse(**next, nullptr, false);
    if (!n.is_object()) continue;
    const auto origin = n.find("origin"), type = n.find("type"), data = n.find("data");
    if (type == n.end() || !type->is_string()) continue;
    if (origin != n.end() &&
        (!origin->is_string() || origin->get_ref<const std::string&>() == origin_))
      continue;
    bus_.Publish(type->get<std::string>(),
                 data != n.end() && data->is_object() ? *data : nlohmann::json::object());
  }
}

}  // namespace hpo::server
