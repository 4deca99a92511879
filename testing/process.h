// Child processes for tests, benches and fuzzers: spawn, wait, kill, and
// what /proc says of them.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hpo::testing {

// Forks and execs argv[0]; stdout and stderr go to `log` (truncated).
// `in_child` runs in the child before the exec (e.g. to join a cgroup);
// false makes the child exit 126. Without it the child only calls
// async-signal-safe functions, as a multi-threaded parent's child must.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log,
            const std::function<bool()>& in_child = nullptr);
// Waits up to `timeout` for `pid` to exit; its wait status, or nullopt.
std::optional<int> WaitExit(pid_t pid, std::chrono::milliseconds timeout);
// SIGKILL and reap; nothing for pid <= 0.
void KillAndReap(pid_t pid);
// The peak resident set (VmHWM in /proc/PID/status) in MiB; 0 if unknown.
double PeakRssMb(pid_t pid);
// CPU seconds `pid` has used so far, user + system (utime + stime in
// /proc/PID/stat); 0 if unknown. The difference of two readings is what a
// process spent between them.
double CpuSeconds(pid_t pid);
// CPU seconds of each process named "postgres" on this machine, by pid (a
// shared PostgreSQL serves other clients too: a figure, not a proof).
std::map<pid_t, double> PostgresCpuByPid();
// The CPU the postgres processes alive at `end` spent since `start`: one
// started meanwhile counts whole; one that ended meanwhile (another client's
// backend) is left out. A sum over all of them at both ends went negative
// when other clients disconnected within the window (ctest -j2).
double PostgresCpuBetween(const std::map<pid_t, double>& start, const std::map<pid_t, double>& end);
// A port on 127.0.0.1 that was free a moment ago.
uint16_t FreePort();

// A CPU cgroup with a quota of `cpus` cores (cgroup v2 cpu.max, or v1
// cpu.cfs_quota_us), removed on destruction (REQUIRES: its processes ended
// first). hpo-worker takes the quota as its usable cores
// (worker/inventory.cc), so workers in cgroups of different quotas are
// devices of different classes and speeds on one machine. Needs root.
class CpuCgroup {
 public:
  // An empty path() when this machine offers no writable cgroup.
  CpuCgroup(const std::string& name, double cpus);
  ~CpuCgroup();
  CpuCgroup(const CpuCgroup&) = delete;
  CpuCgroup& operator=(const CpuCgroup&) = delete;
  const std::string& path() const { return path_; }
  // Moves the calling process into the cgroup, for Spawn's `in_child`:
  // async-signal-safe calls only.
  bool Enter() const;

 private:
  std::string path_, procs_;
};

}  // namespace hpo::testing
