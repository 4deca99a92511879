// How the process's absl::Mutex (gRPC's locks) runs. Part of hpo_proto, so
// that hpo-server, hpo-worker and the benches' simulated workers run gRPC
// alike.
#pragma once

namespace hpo {

// Debian builds Abseil without NDEBUG, so absl::Mutex runs its debug-mode
// deadlock detection: every lock and unlock of gRPC's mutexes updates a
// graph of lock order, and a cycle found there aborts the process. It is
// a check for developing Abseil's users, not for a service in production,
// and it cost about 1% of the server's CPU at one worker (bench/README.md,
// server_bench). This turns it off, as Abseil's release builds have it.
// Call it first in main(), before any thread starts.
void TurnOffMutexDeadlockDetection();

}  // namespace hpo
