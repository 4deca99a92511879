#include "proto/mutex_mode.h"

#include <absl/synchronization/mutex.h>

namespace hpo {

void TurnOffMutexDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace hpo
