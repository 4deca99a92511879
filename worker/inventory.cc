#include "worker/inventory.h"

#include <sched.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <sstream>
#include <system_error>
#include <utility>
#include <vector>

namespace hpo::worker {
namespace {

// cgroup v1 reports "no memory limit" as the largest page-aligned counter
// (9223372036854771712 on x86-64, other values elsewhere); no machine has an
// exbibyte of memory, so anything from here up means "none".
constexpr int64_t kNoMemoryLimitFrom = int64_t{1} << 60;

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsBlank(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsBlank(s.back())) s.remove_suffix(1);
  return s;
}

// Splits on '\n'; the last line need not end with one.
std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    size_t end = text.find('\n');
    if (end == std::string_view::npos) end = text.size();
    lines.push_back(text.substr(0, end));
    text.remove_prefix(std::min(end + 1, text.size()));
  }
  return lines;
}

std::vector<std::string_view> Fields(std::string_view text) {
  std::vector<std::string_view> fields;
  text = Trim(text);
  while (!text.empty()) {
    size_t end = 0;
    while (end < text.size() && !IsBlank(text[end])) ++end;
    fields.push_back(text.substr(0, end));
    text = Trim(text.substr(end));
  }
  return fields;
}

// The whole (trimmed) text as a decimal integer, or nullopt.
std::optional<int64_t> ParseInt64(std::string_view text) {
  text = Trim(text);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

// A limit of `quota_us` CPU time per `period_us`, in CPUs.
std::optional<double> QuotaCpus(std::optional<int64_t> quota_us, std::optional<int64_t> period_us) {
  if (!quota_us || !period_us || *quota_us <= 0 || *period_us <= 0) return std::nullopt;
  return static_cast<double>(*quota_us) / static_cast<double>(*period_us);
}

// memory.max ("max" = none) or memory.limit_in_bytes (huge = none).
std::optional<int64_t> ParseMemoryLimit(std::string_view text) {
  if (Trim(text) == "max") return std::nullopt;
  std::optional<int64_t> bytes = ParseInt64(text);
  if (!bytes || *bytes <= 0 || *bytes >= kNoMemoryLimitFrom) return std::nullopt;
  return bytes;
}

template <typename T>
std::optional<T> Tightest(std::optional<T> a, std::optional<T> b) {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}

std::optional<std::string> ReadFile(const std::string& path) {
  // Not via the file size: /proc and cgroup files report 0 bytes.
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return std::move(out).str();
}

bool IsDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// root + "/" + relative, without doubling the slash for root "/".
std::string Join(const std::string& root, std::string_view relative) {
  while (!relative.empty() && relative.front() == '/') relative.remove_prefix(1);
  std::string path = root;
  if (path.empty() || path.back() != '/') path += '/';
  path += relative;
  return path;
}

// The directories whose limits apply to a process in `cgroup_path` of the
// hierarchy mounted at `mount`: its own and every ancestor up to the mount,
// innermost first. When the path is not below the mount, the process sits in
// a container whose own cgroup is mounted as the root: only the root counts.
std::vector<std::string> CgroupDirs(const std::string& mount, std::string_view cgroup_path) {
  if (!IsDirectory(mount)) return {};
  std::string_view relative = cgroup_path;
  while (!relative.empty() && relative.front() == '/') relative.remove_prefix(1);
  while (!relative.empty() && relative.back() == '/') relative.remove_suffix(1);
  if (!relative.empty() && !IsDirectory(Join(mount, relative))) return {mount};
  std::vector<std::string> dirs;
  while (!relative.empty()) {
    dirs.push_back(Join(mount, relative));
    size_t slash = relative.rfind('/');
    relative = relative.substr(0, slash == std::string_view::npos ? 0 : slash);
  }
  dirs.push_back(mount);
  return dirs;
}

struct CgroupLimits {
  std::optional<double> cpus;
  std::optional<int64_t> memory_bytes;
};

CgroupLimits ReadCgroupLimits(const std::string& root, const ProcSelfCgroup& cgroups) {
  CgroupLimits limits;
  const std::string cgroup_root = Join(root, "sys/fs/cgroup");
  if (cgroups.v2) {
    for (const std::string& dir : CgroupDirs(cgroup_root, *cgroups.v2)) {
      if (auto text = ReadFile(Join(dir, "cpu.max"))) {
        limits.cpus = Tightest(limits.cpus, ParseCpuMax(*text));
      }
      if (auto text = ReadFile(Join(dir, "memory.max"))) {
        limits.memory_bytes = Tightest(limits.memory_bytes, ParseMemoryLimit(*text));
      }
    }
  }
  if (cgroups.v1_cpu) {
    // Distributions mount the cpu controller alone or together with cpuacct,
    // under either name (often one is a symlink to the other).
    for (const char* name : {"cpu,cpuacct", "cpu", "cpuacct,cpu"}) {
      const std::string mount = Join(cgroup_root, name);
      if (!IsDirectory(mount)) continue;
      for (const std::string& dir : CgroupDirs(mount, *cgroups.v1_cpu)) {
        auto quota = ReadFile(Join(dir, "cpu.cfs_quota_us"));
        auto period = ReadFile(Join(dir, "cpu.cfs_period_us"));
        if (quota && period) limits.cpus = Tightest(limits.cpus, ParseCfsQuota(*quota, *period));
      }
      break;
    }
  }
  if (cgroups.v1_memory) {
    for (const std::string& dir : CgroupDirs(Join(cgroup_root, "memory"), *cgroups.v1_memory)) {
      if (auto text = ReadFile(Join(dir, "memory.limit_in_bytes"))) {
        limits.memory_bytes = Tightest(limits.memory_bytes, ParseMemoryLimit(*text));
      }
    }
  }
  return limits;
}

// CPUs in this process's affinity mask. The mask is sized dynamically
// because a fixed cpu_set_t (1024 CPUs) makes the call fail on larger hosts.
Result<int> AffinityCpus() {
  for (int capacity = 1024; capacity <= (1 << 22); capacity *= 2) {
    std::unique_ptr<cpu_set_t, void (*)(cpu_set_t*)> set(CPU_ALLOC(capacity),
                                                         [](cpu_set_t* s) { CPU_FREE(s); });
    if (!set) return Status::Internal("sched_getaffinity: out of memory");
    const size_t size = CPU_ALLOC_SIZE(capacity);
    CPU_ZERO_S(size, set.get());
    if (::sched_getaffinity(0, size, set.get()) == 0) return CPU_COUNT_S(size, set.get());
    if (errno != EINVAL) {
      return Status::Internal(std::string("sched_getaffinity: ") + std::strerror(errno));
    }
  }
  return Status::Internal("sched_getaffinity: affinity mask larger than 4M CPUs");
}

}  // namespace

std::optional<double> ParseCpuMax(std::string_view text) {
  std::vector<std::string_view> fields = Fields(text);
  if (fields.size() != 2 || fields[0] == "max") return std::nullopt;
  return QuotaCpus(ParseInt64(fields[0]), ParseInt64(fields[1]));
}

std::optional<double> ParseCfsQuota(std::string_view quota_text, std::string_view period_text) {
  // -1 (no limit) falls out of QuotaCpus's "quota <= 0" like bad content does.
  return QuotaCpus(ParseInt64(quota_text), ParseInt64(period_text));
}

ProcSelfCgroup ParseProcSelfCgroup(std::string_view text) {
  ProcSelfCgroup cgroups;
  for (std::string_view line : Lines(text)) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    // "<hierarchy id>:<controllers>:<path>"; the path itself may hold ':'.
    const size_t first = line.find(':');
    if (first == std::string_view::npos) continue;
    const size_t second = line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    const std::string_view id = line.substr(0, first);
    const std::string_view controllers = line.substr(first + 1, second - first - 1);
    const std::string_view path = line.substr(second + 1);
    if (id.empty() || path.empty()) continue;
    if (id == "0" && controllers.empty()) {
      if (!cgroups.v2) cgroups.v2 = std::string(path);
      continue;
    }
    std::string_view rest = controllers;
    while (!rest.empty()) {
      size_t comma = rest.find(',');
      const std::string_view controller = rest.substr(0, comma);
      rest.remove_prefix(comma == std::string_view::npos ? rest.size() : comma + 1);
      if (controller == "cpu" && !cgroups.v1_cpu) cgroups.v1_cpu = std::string(path);
      if (controller == "memory" && !cgroups.v1_memory) cgroups.v1_memory = std::string(path);
    }
  }
  return cgroups;
}

std::string ParseCpuinfoModel(std::string_view text) {
  // In order of preference; the first occurrence of each key counts.
  constexpr std::string_view kKeys[] = {"model name", "Hardware", "cpu model"};
  std::optional<std::string> found[std::size(kKeys)];
  for (std::string_view line : Lines(text)) {
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = Trim(line.substr(0, colon));
    for (size_t i = 0; i < std::size(kKeys); ++i) {
      if (key != kKeys[i] || found[i]) continue;
      std::string value;
      for (std::string_view word : Fields(line.substr(colon + 1))) {
        if (!value.empty()) value += ' ';
        value += word;
      }
      if (!value.empty()) found[i] = std::move(value);
    }
  }
  for (auto& model : found) {
    if (model) return std::move(*model);
  }
  return "unknown cpu";
}

int CountCpuinfoProcessors(std::string_view text) {
  int count = 0;
  for (std::string_view line : Lines(text)) {
    const size_t colon = line.find(':');
    if (colon != std::string_view::npos && Trim(line.substr(0, colon)) == "processor") ++count;
  }
  return count;
}

Result<int64_t> ParseMeminfoTotal(std::string_view text) {
  for (std::string_view line : Lines(text)) {
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || Trim(line.substr(0, colon)) != "MemTotal") continue;
    std::vector<std::string_view> fields = Fields(line.substr(colon + 1));
    std::optional<int64_t> kib =
        fields.size() == 2 && fields[1] == "kB" ? ParseInt64(fields[0]) : std::nullopt;
    if (!kib || *kib <= 0 || *kib > std::numeric_limits<int64_t>::max() / 1024) {
      return Status::InvalidArgument("MemTotal: expected a positive number of kB, got \"" +
                                     std::string(Trim(line.substr(colon + 1))) + "\"");
    }
    return *kib * 1024;
  }
  return Status::InvalidArgument("no MemTotal line");
}

double UsableCores(int affinity_cpus, std::optional<double> quota_cpus) {
  const double cpus = static_cast<double>(affinity_cpus);
  return quota_cpus && *quota_cpus < cpus ? *quota_cpus : cpus;
}

Result<CpuInventory> ReadCpuInventory(const std::string& root, std::optional<int> affinity_cpus) {
  CpuInventory inventory;
  if (affinity_cpus) {
    if (*affinity_cpus < 1) return Status::InvalidArgument("affinity_cpus: must be >= 1");
    inventory.affinity_cpus = *affinity_cpus;
  } else {
    HPO_ASSIGN_OR_RETURN(inventory.affinity_cpus, AffinityCpus());
  }

  const std::string cpuinfo = ReadFile(Join(root, "proc/cpuinfo")).value_or("");
  inventory.model = ParseCpuinfoModel(cpuinfo);
  inventory.logical_cpus = CountCpuinfoProcessors(cpuinfo);
  if (inventory.logical_cpus == 0) inventory.logical_cpus = inventory.affinity_cpus;

  const std::string meminfo_path = Join(root, "proc/meminfo");
  std::optional<std::string> meminfo = ReadFile(meminfo_path);
  if (!meminfo) return Status::NotFound("cannot read " + meminfo_path);
  Result<int64_t> mem_total = ParseMeminfoTotal(*meminfo);
  if (!mem_total.ok()) return mem_total.status().WithContext(meminfo_path);

  // No /proc/self/cgroup (not Linux, or /proc hidden): no limits to find.
  const ProcSelfCgroup cgroups =
      ParseProcSelfCgroup(ReadFile(Join(root, "proc/self/cgroup")).value_or(""));
  const CgroupLimits limits = ReadCgroupLimits(root, cgroups);

  inventory.quota_cpus = limits.cpus;
  inventory.usable_cores = UsableCores(inventory.affinity_cpus, limits.cpus);
  inventory.memory_limit_bytes = limits.memory_bytes;
  inventory.memory_bytes =
      limits.memory_bytes ? std::min(*mem_total, *limits.memory_bytes) : *mem_total;
  return inventory;
}

std::string CpuDeviceClass(const CpuInventory& inventory) {
  // Formatted like the server's DeviceClass: to_chars, so the locale cannot
  // turn "2.0" into "2,0" and split one class in two.
  char buf[400];  // enough for any finite double in fixed notation
  auto [end, ec] =
      std::to_chars(buf, buf + sizeof(buf), inventory.usable_cores, std::chars_format::fixed, 1);
  const std::string cores = ec == std::errc() ? std::string(buf, end) : "?";
  return "cpu:" + inventory.model + ":x" + cores;
}

}  // namespace hpo::worker
