// Runs the real hpo-server binary for end-to-end tests: starts it on free
// ports (--port-file), stops it with a signal, and keeps its log.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace hpo::testing {

// Forks and execs argv[0] with `argv`, stdout and stderr to `log`.
// `in_child` runs in the child first (e.g. to join a cgroup); false exits 126.
inline pid_t Spawn(std::vector<std::string> argv, const std::string& log,
                   const std::function<bool()>& in_child = nullptr) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (in_child && !in_child()) _exit(126);
    std::vector<char*> c;
    for (auto& a : argv) c.push_back(a.data());
    c.push_back(nullptr);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execv(c[0], c.data());
    _exit(127);
  }
  return pid;
}

class ServerProcess {
 public:
  // REQUIRES: HPO_SERVER_BIN is defined by the test target.
  ServerProcess(std::string dir, std::vector<std::string> args) : dir_(std::move(dir)), args_(std::move(args)) {}
  ~ServerProcess() { Kill(SIGKILL); }

  // Starts and waits (up to 20 s) until it listens. False if it exited.
  bool Start() {
    std::filesystem::create_directories(dir_);
    const std::string ports = dir_ + "/ports.json";
    std::filesystem::remove(ports);
    log_ = dir_ + "/server-" + std::to_string(++starts_) + ".log";
    std::vector<std::string> argv = {HPO_SERVER_BIN, "--port-file", ports};
    // Free ports unless the test chose its own.
    for (const char* flag : {"--http", "--grpc"}) {
      if (std::find(args_.begin(), args_.end(), flag) == args_.end()) {
        argv.insert(argv.end(), {flag, "127.0.0.1:0"});
      }
    }
    argv.insert(argv.end(), args_.begin(), args_.end());
    pid_ = Spawn(argv, log_);
    for (int i = 0; i < 400; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        exit_status_ = status;
        return false;
      }
      std::ifstream in(ports);
      nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
      if (!j.is_discarded() && j.contains("http")) {
        http_port_ = j["http"];
        grpc_port_ = j["grpc"];
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // Sends `sig` and waits for the exit; returns the wait status.
  int Kill(int sig) {
    if (pid_ <= 0) return exit_status_;
    ::kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    exit_status_ = status;
    return status;
  }

  // Sends `sig` and waits up to `within` for the exit: its wait status, or
  // -1 when it had not exited by then (it is then killed).
  int StopWithin(int sig, std::chrono::milliseconds within) {
    if (pid_ <= 0) return exit_status_;
    ::kill(pid_, sig);
    const auto deadline = std::chrono::steady_clock::now() + within;
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) != pid_) {
      if (std::chrono::steady_clock::now() >= deadline) {
        Kill(SIGKILL);
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid_ = -1;
    exit_status_ = status;
    return status;
  }

  std::string Log() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  uint16_t http_port() const { return http_port_; }
  uint16_t grpc_port() const { return grpc_port_; }

 private:
  std::string dir_;
  std::vector<std::string> args_;
  std::string log_;
  pid_t pid_ = -1;
  int exit_status_ = 0;
  int starts_ = 0;
  uint16_t http_port_ = 0, grpc_port_ = 0;
};

}  // namespace hpo::testing
