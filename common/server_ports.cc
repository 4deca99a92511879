#include "common/server_ports.h"

#include <sys/wait.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

namespace hpo {

Result<ServerPorts> WaitForServerPorts(const std::string& port_file, pid_t pid,
                                       std::chrono::milliseconds timeout, int* exit_status) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    if (pid > 0 && waitpid(pid, &status, WNOHANG) == pid) {
      if (exit_status) *exit_status = status;
      return Status::Unavailable("hpo-server exited before it listened");
    }
    // The server renames the whole file into place: until then there is none.
    std::ifstream in(port_file);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_object() && j.contains("http") && j["http"].is_number_unsigned() &&
        j.contains("grpc") && j["grpc"].is_number_unsigned()) {
      return ServerPorts{j["http"].get<uint16_t>(), j["grpc"].get<uint16_t>()};
    }
    if (std::chrono::steady_clock::now() >= until) {
      return Status::DeadlineExceeded("hpo-server did not write " + port_file + " within " +
                                      std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace hpo
