// The worker's CPU inventory: what it may use of the machine it runs on, as
// the kernel enforces it (affinity mask, cgroup CPU quota and memory limit),
// not what the hardware has. A container limited to half a CPU on a 64-core
// host reports 0.5 cores, so the server places (and compares) it as the slow
// device it is.
//
// Pure Linux file parsing plus sched_getaffinity: no LibTorch here. Every
// file is read below an injectable root so tests run on sample trees; the
// Parse* functions are pure and exposed for the same reason.
//
// Thread safety: all functions are safe to call concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace hpo::worker {

struct CpuInventory {
  // "model name" from /proc/cpuinfo; see ParseCpuinfoModel. Never empty.
  std::string model;
  // Processors the kernel lists in /proc/cpuinfo (online logical CPUs).
  int logical_cpus = 0;
  // CPUs in this process's affinity mask (sched_getaffinity), which also
  // reflects a cpuset cgroup.
  int affinity_cpus = 0;
  // The tightest cgroup CPU quota, in CPUs (quota / period), over the
  // process's cgroup and its ancestors, v1 and v2; nullopt when none is set.
  std::optional<double> quota_cpus;
  // min(affinity_cpus, quota_cpus): what the device is reported with. May be
  // fractional (0.5) and is always > 0.
  double usable_cores = 0;
  // min(MemTotal, memory_limit_bytes).
  int64_t memory_bytes = 0;
  // The tightest cgroup memory limit (v2 memory.max, v1 memory.limit_in_bytes)
  // over the process's cgroup and its ancestors; nullopt when none is set.
  std::optional<int64_t> memory_limit_bytes;
};

// Reads the inventory of the machine whose filesystem is mounted at `root`
// ("/" for this one; tests pass a sample tree). Reads, below root:
//   proc/self/cgroup, proc/cpuinfo, proc/meminfo,
//   sys/fs/cgroup/<path>/{cpu.max,memory.max}                   (cgroup v2)
//   sys/fs/cgroup/{cpu,cpuacct | cpu}/<path>/cpu.cfs_{quota,period}_us (v1)
//   sys/fs/cgroup/memory/<path>/memory.limit_in_bytes           (cgroup v1)
// For each controller the process's own cgroup and every ancestor up to the
// mount are read and the tightest limit wins, because a parent's limit
// applies to its children. When the cgroup path is not found below the
// mount (a container without a cgroup namespace sees its host path but has
// its own cgroup mounted as the root), the mount root's files are read.
// Missing cgroup files and limit files with unreadable content count as
// "no limit": reporting too many cores is recoverable (the benchmark and
// measured speeds show it), refusing to start a worker is not.
//
// `affinity_cpus` replaces the sched_getaffinity count (for tests); nullopt
// asks the kernel about this process, whatever root is.
//
// Errors: NotFound when proc/meminfo cannot be read, InvalidArgument when it
// has no MemTotal, Internal when sched_getaffinity fails. A missing or odd
// proc/cpuinfo is not an error (model "unknown cpu"; logical_cpus falls back
// to the affinity count).
Result<CpuInventory> ReadCpuInventory(const std::string& root = "/",
                                      std::optional<int> affinity_cpus = std::nullopt);

// The class the server groups this device under for placement:
// "cpu:<model>:x<usable cores with one decimal>", e.g. "cpu:AMD EPYC 7B13:x2.0".
// Must stay equal to the server's DeviceClass (server/grpc/worker_service.cc),
// which derives it from the registered name and cores.
std::string CpuDeviceClass(const CpuInventory& inventory);

// min(affinity_cpus, quota_cpus), or affinity_cpus when there is no quota.
double UsableCores(int affinity_cpus, std::optional<double> quota_cpus);

// ---- Pure parsers (exposed for tests) ----

// cgroup v2 cpu.max: "<quota_us> <period_us>" -> quota / period in CPUs
// ("50000 100000" -> 0.5); "max <period>" -> nullopt (no limit). Content that
// is not that (empty, non-numeric, quota or period <= 0) -> nullopt as well:
// see ReadCpuInventory on why an unreadable limit counts as none.
std::optional<double> ParseCpuMax(std::string_view text);

// cgroup v1 cpu.cfs_quota_us and cpu.cfs_period_us -> quota / period in CPUs;
// quota -1 -> nullopt (no limit). Unreadable content -> nullopt, as above.
std::optional<double> ParseCfsQuota(std::string_view quota_text, std::string_view period_text);

// The process's cgroups, from /proc/self/cgroup. A path is nullopt when the
// file has no line for it; "/" is a real path (the root of the hierarchy,
// which a container with a cgroup namespace sees).
struct ProcSelfCgroup {
  std::optional<std::string> v2;         // the "0::<path>" line
  std::optional<std::string> v1_cpu;     // the line whose controllers include "cpu"
  std::optional<std::string> v1_memory;  // the line whose controllers include "memory"
};
// Lines that are not "<id>:<controllers>:<path>" are skipped, never an error.
ProcSelfCgroup ParseProcSelfCgroup(std::string_view text);

// The CPU model from /proc/cpuinfo: the first "model name" (x86, most ARM
// kernels), else "Hardware" (older ARM), else "cpu model" (MIPS), else
// "unknown cpu". Runs of blanks are collapsed to one space so that the same
// CPU always yields the same device class. Never fails, never empty.
std::string ParseCpuinfoModel(std::string_view text);

// The number of "processor" entries in /proc/cpuinfo (0 when none).
int CountCpuinfoProcessors(std::string_view text);

// MemTotal from /proc/meminfo, in bytes ("MemTotal: 16318352 kB").
// InvalidArgument when there is no MemTotal line or its value is not a
// positive number of kB.
Result<int64_t> ParseMeminfoTotal(std::string_view text);

}  // namespace hpo::worker
