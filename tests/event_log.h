// The engine's events (EngineOptions::on_event), kept for a test to read.
#pragma once

#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace hpo::testing {

class EventLog {
 public:
  // For EngineOptions::on_event; the log must outlive the engine.
  std::function<void(std::string, const nlohmann::json&)> Recorder() {
    return [this](std::string type, const nlohmann::json& data) {
      std::lock_guard lock(mu_);
      events_.emplace_back(std::move(type), data);
    };
  }

  // The data of the events of one type so far, oldest first.
  std::vector<nlohmann::json> Of(const std::string& type) const {
    std::lock_guard lock(mu_);
    std::vector<nlohmann::json> out;
    for (const auto& [t, data] : events_) {
      if (t == type) out.push_back(data);
    }
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<std::string, nlohmann::json>> events_;  // GUARDED_BY(mu_)
};

}  // namespace hpo::testing
