#include "server/engine/work_signal.h"

namespace hpo::server {

uint64_t WorkSignal::Epoch() const {
  MutexLock lock(mu_);
  return epoch_;
}

void WorkSignal::Notify() {
  MutexLock lock(mu_);
  ++epoch_;
  cv_.NotifyAll();
}

uint64_t WorkSignal::WaitChange(uint64_t seen, Clock::time_point deadline) const {
  MutexLock lock(mu_);
  while (epoch_ == seen) {
    if (!cv_.WaitUntil(mu_, deadline)) break;
  }
  return epoch_;
}

}  // namespace hpo::server
