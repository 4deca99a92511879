// A gate for tests that hold a call under way: a store wrapper calls
// StallWhileArmed() where it should wait, the test arms the gate, waits
// until a call is stalled there, does what must not wait for it, and
// releases it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace hpo::testing {

// While armed, a call that reaches StallWhileArmed waits there until
// Release: a store call stays under way for as long as a test wants.
class StallGate {
 public:
  void Arm() {
    std::lock_guard lock(mu_);
    armed_ = true;
  }
  void Release() {
    {
      std::lock_guard lock(mu_);
      armed_ = false;
    }
    cv_.notify_all();
  }
  bool WaitUntilStalled(std::chrono::seconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return stalled_; });
  }

 protected:
  void StallWhileArmed() {
    std::unique_lock lock(mu_);
    if (armed_) {
      stalled_ = true;
      cv_.notify_all();
      cv_.wait(lock, [&] { return !armed_; });
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false;    // GUARDED_BY(mu_)
  bool stalled_ = false;  // GUARDED_BY(mu_)
};

}  // namespace hpo::testing
