// The real hpo-server binary as a process that tests and benches start,
// signal, restart and read the log of. It binds 127.0.0.1 only. With it come
// the process and file helpers (Spawn, WaitExit, ReadFile) that such tests use.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "testing/files.h"
#include "testing/process.h"

namespace hpo::testing {

class ServerProcess {
 public:
  // `binary`: the hpo-server to run (tests pass HPO_SERVER_BIN). `args`
  // follow --port-file and, unless `args` name their own, --http and --grpc
  // on ports of ours. Logs and ports.json go to `dir` (created).
  ServerProcess(std::string binary, std::string dir, std::vector<std::string> args);
  ~ServerProcess();  // SIGKILL
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Starts and waits (up to 30 s) until it listens. The first Start binds
  // free ports; every later Start binds the same ones, so workers reconnect
  // as they would to a restarted server (retrying for a while when a killed
  // server's port is still busy). Unavailable (its log in the message) when
  // it exited; DeadlineExceeded when it did not listen in time (killed).
  Status Start();
  // Sends `sig` and waits for the exit; returns the wait status (that of the
  // last run when it is not running).
  int Stop(int sig);
  // Sends `sig` and waits up to `within` for the exit: its wait status, or
  // -1 when it had not exited by then (it is then killed).
  int StopWithin(int sig, std::chrono::milliseconds within);

  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  uint16_t http_port() const { return http_port_; }
  uint16_t grpc_port() const { return grpc_port_; }
  std::string grpc_address() const { return "127.0.0.1:" + std::to_string(grpc_port_); }
  // The log of the current (or last) run: its path and its text.
  std::string log_path() const { return log_; }
  std::string Log() const;

 private:
  std::string binary_, dir_;
  std::vector<std::string> args_;
  std::string log_;
  pid_t pid_ = -1;
  int exit_status_ = 0;
  int starts_ = 0;
  uint16_t http_port_ = 0, grpc_port_ = 0;
};

}  // namespace hpo::testing
