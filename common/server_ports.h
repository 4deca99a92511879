// Waiting for a just-started hpo-server: it writes its bound ports to the
// file named by --port-file once it listens (port 0 binds a free one). hpctl
// run, the tests' and the benches' server processes all wait through this.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace hpo {

struct ServerPorts {
  uint16_t http = 0;
  uint16_t grpc = 0;
};

// Polls `port_file` until it holds {"http": N, "grpc": M}. Unavailable when
// the child `pid` exits first (it is then reaped and, when `exit_status` is
// given, its wait status stored there); DeadlineExceeded when `timeout`
// passes first (the process is left running: the caller decides).
Result<ServerPorts> WaitForServerPorts(const std::string& port_file, pid_t pid,
                                       std::chrono::milliseconds timeout,
                                       int* exit_status = nullptr);

}  // namespace hpo
