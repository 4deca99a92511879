#include "testing/process.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/server_ports.h"
#include "testing/files.h"
#include "testing/server_process.h"

namespace hpo::testing {

using Clock = std::chrono::steady_clock;

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Processes -------------------------------------------------------------------

pid_t Spawn(const std::vector<std::string>& argv, const std::string& log,
            const std::function<bool()>& in_child) {
  // Everything the child needs is prepared before fork: a multi-threaded
  // parent's child may only call async-signal-safe functions.
  std::vector<std::string> args = argv;
  std::vector<char*> c;
  for (auto& a : args) c.push_back(a.data());
  c.push_back(nullptr);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const pid_t pid = fork();
  if (pid == 0) {
    if (in_child && !in_child()) _exit(126);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execv(c[0], c.data());
    _exit(127);
  }
  if (fd >= 0) ::close(fd);
  return pid;
}

std::optional<int> WaitExit(pid_t pid, std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  for (;;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    if (Clock::now() >= until) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void KillAndReap(pid_t pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

double PeakRssMb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  }
  return 0;
}

double CpuSeconds(pid_t pid) {
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  // The command name (field 2) is in parentheses and may hold spaces: count
  // fields from the last ')'. utime and stime are fields 14 and 15.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream in(stat.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i >= 14) ticks += std::stod(field);
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

std::map<pid_t, double> PostgresCpuByPid() {
  std::map<pid_t, double> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    if (ReadFile(std::string("/proc/") + e->d_name + "/comm") != "postgres\n") continue;
    const auto pid = static_cast<pid_t>(std::atol(e->d_name));
    out[pid] = CpuSeconds(pid);
  }
  closedir(d);
  return out;
}

double PostgresCpuBetween(const std::map<pid_t, double>& start,
                          const std::map<pid_t, double>& end) {
  double total = 0;
  for (const auto& [pid, cpu] : end) {
    const auto before = start.find(pid);
    total += std::max(0.0, cpu - (before == start.end() ? 0.0 : before->second));
  }
  return total;
}

uint16_t FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

// ServerProcess ----------------------------------------------------------------

ServerProcess::ServerProcess(std::string binary, std::string dir, std::vector<std::string> args)
    : binary_(std::move(binary)), dir_(std::move(dir)), args_(std::move(args)) {}

ServerProcess::~ServerProcess() { Stop(SIGKILL); }

Status ServerProcess::Start() {
  if (pid_ > 0) return Status::FailedPrecondition("hpo-server is already running");
  std::filesystem::create_directories(dir_);
  const std::string ports = dir_ + "/ports.json";
  auto named = [&](const char* flag) {
    return std::find(args_.begin(), args_.end(), flag) != args_.end();
  };
  // A port a killed server held can stay busy for a moment: try again, but
  // only for ports of ours that an earlier run held (a port the caller chose
  // may be meant to clash).
  const bool restart = http_port_ != 0 && !named("--http") && !named("--grpc");
  for (int attempt = 0; attempt < (restart ? 20 : 1); ++attempt) {
    std::filesystem::remove(ports);
    log_ = dir_ + "/server-" + std::to_string(++starts_) + ".log";
    std::vector<std::string> argv = {binary_, "--port-file", ports};
    if (!named("--http"))
      argv.insert(argv.end(), {"--http", "127.0.0.1:" + std::to_string(http_port_)});
    if (!named("--grpc"))
      argv.insert(argv.end(), {"--grpc", "127.0.0.1:" + std::to_string(grpc_port_)});
    argv.insert(argv.end(), args_.begin(), args_.end());
    pid_ = Spawn(argv, log_);
    auto listening = WaitForServerPorts(ports, pid_, std::chrono::seconds(30), &exit_status_);
    if (listening.ok()) {
      http_port_ = listening->http;
      grpc_port_ = listening->grpc;
      return Status::OK();
    }
    if (listening.status().code() == StatusCode::kDeadlineExceeded) {
      KillAndReap(pid_);
      pid_ = -1;
      return Status::DeadlineExceeded("hpo-server did not listen within 30 s; see " + log_);
    }
    pid_ = -1;  // exited (and reaped)
    if (Log().find("cannot listen") == std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return Status::Unavailable("hpo-server exited at start-up: " + Log());
}

int ServerProcess::Stop(int sig) {
  if (pid_ <= 0) return exit_status_;
  ::kill(pid_, sig);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  exit_status_ = status;
  return status;
}

int ServerProcess::StopWithin(int sig, std::chrono::milliseconds within) {
  if (pid_ <= 0) return exit_status_;
  ::kill(pid_, sig);
  if (auto status = WaitExit(pid_, within)) {
    pid_ = -1;
    exit_status_ = *status;
    return *status;
  }
  Stop(SIGKILL);
  return -1;
}

std::string ServerProcess::Log() const { return ReadFile(log_); }

namespace {

bool WriteFile(const char* file, const char* value, size_t n) {
  const int fd = ::open(file, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, value, n) == static_cast<ssize_t>(n);
  ::close(fd);
  return ok;
}

bool WriteFile(const std::string& file, const std::string& value) {
  return WriteFile(file.c_str(), value.data(), value.size());
}

}  // namespace

CpuCgroup::CpuCgroup(const std::string& name, double cpus) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string quota = std::to_string(static_cast<int>(cpus * 100000));
  std::string dir;
  bool set = false;
  if (fs::exists("/sys/fs/cgroup/cgroup.controllers", ec)) {  // v2
    dir = "/sys/fs/cgroup/" + name;
    set = fs::create_directory(dir, ec) && WriteFile(dir + "/cpu.max", quota + " 100000");
  } else if (fs::exists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", ec)) {  // v1
    dir = "/sys/fs/cgroup/cpu/" + name;
    set = fs::create_directory(dir, ec) && WriteFile(dir + "/cpu.cfs_period_us", "100000") &&
          WriteFile(dir + "/cpu.cfs_quota_us", quota);
  }
  if (set) {
    path_ = dir;
    procs_ = dir + "/cgroup.procs";
  } else if (!dir.empty()) {
    ::rmdir(dir.c_str());  // made, but its quota could not be set
  }
}

CpuCgroup::~CpuCgroup() {
  if (!path_.empty()) ::rmdir(path_.c_str());
}

bool CpuCgroup::Enter() const {
  if (procs_.empty()) return false;
  // getpid() as decimal, without allocating.
  char digits[24];
  size_t n = 0;
  for (pid_t pid = getpid(); pid > 0 && n < sizeof digits; pid /= 10)
    digits[n++] = static_cast<char>('0' + pid % 10);
  char text[24];
  for (size_t i = 0; i < n; ++i) text[i] = digits[n - 1 - i];
  return WriteFile(procs_.c_str(), text, n);
}

}  // namespace hpo::testing
