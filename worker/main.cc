// hpo-worker: registers this machine's devices with hpo-server, then leases
// trials and runs them (built-in LibTorch trainers or the user's program),
// reporting every epoch. See worker/client.h for the loop and its retries.
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#ifdef HPO_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

#include "common/cli_env.h"
#include "common/token.h"
#include "proto/mutex_mode.h"
#include "worker/benchmark.h"
#include "worker/builtin_trainer.h"
#include "worker/client.h"
#include "worker/command_executor.h"
#include "worker/id_file.h"
#include "worker/inventory.h"

namespace {

using namespace hpo;
using namespace hpo::worker;

std::atomic<int> g_stop{0};

void OnSignal(int) { g_stop.fetch_add(1); }

int Fail(const std::string& message) {
  std::fprintf(stderr, "hpo-worker: error: %s\n", message.c_str());
  return 1;
}

// A GPU's model and memory from nvidia-smi, for builds without the CUDA
// runtime (Debian's LibTorch): otherwise the device class would follow the
// ordinal ("CUDA device 0") rather than the GPU model. nvidia-smi numbers
// GPUs in PCI bus order, as CUDA does under CUDA_DEVICE_ORDER=PCI_BUS_ID;
// with the default order the two agree whenever the GPUs are one model.
bool NvidiaSmiDevice(int index, std::string& name, int64_t& memory_bytes) {
  const std::string cmd =
      "nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits -i " +
      std::to_string(index) + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return false;
  char buf[512];
  std::string out;
  while (fgets(buf, sizeof buf, p) != nullptr) out += buf;
  if (pclose(p) != 0) return false;
  const auto comma = out.rfind(',');
  if (comma == std::string::npos) return false;
  auto trim = [](std::string t) {
    const auto b = t.find_first_not_of(" \t\r\n");
    const auto e = t.find_last_not_of(" \t\r\n");
    return b == std::string::npos ? std::string() : t.substr(b, e - b + 1);
  };
  const std::string n = trim(out.substr(0, comma));
  char* end = nullptr;
  const std::string mib = trim(out.substr(comma + 1));
  const double m = std::strtod(mib.c_str(), &end);
  if (n.empty() || end == mib.c_str() || !(m > 0)) return false;
  name = n;
  memory_bytes = static_cast<int64_t>(m * 1024 * 1024);
  return true;
}

// The devices to serve: "auto" = the CPU plus every CUDA device LibTorch
// sees; otherwise "cpu" or "cuda:N".
Result<std::vector<DeviceSpec>> Inventory(const std::string& which, int threads,
                                          double bench_seconds) {
  HPO_ASSIGN_OR_RETURN(CpuInventory cpu, ReadCpuInventory("/"));
  std::vector<DeviceSpec> out;
  const bool cuda = torch::cuda::is_available();
  const int gpus = cuda ? static_cast<int>(torch::cuda::device_count()) : 0;
  auto add_cpu = [&] {
    DeviceSpec d;
    d.device = "cpu";
    d.name = cpu.model;
    d.cores = threads > 0 ? std::min<double>(threads, cpu.usable_cores) : cpu.usable_cores;
    d.memory_bytes = cpu.memory_bytes;
    d.host_threads = std::max(1, static_cast<int>(d.cores));
    out.push_back(d);
  };
  auto add_gpu = [&](int i) {
    DeviceSpec d;
    d.device = "cuda:" + std::to_string(i);
    d.name = "CUDA device " + std::to_string(i);
    d.cores = 1;
#ifdef HPO_HAVE_CUDART
    // Built against the CUDA runtime (the CUDA worker image): real name and
    // memory.
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) == cudaSuccess) {
      d.name = prop.name;
      d.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
      d.cores = prop.multiProcessorCount;
    } else
#endif
        if (!NvidiaSmiDevice(i, d.name, d.memory_bytes)) {
      spdlog::warn(
          "cuda:{}: neither the CUDA runtime nor nvidia-smi names this GPU; its device class "
          "follows the ordinal",
          i);
    }
    out.push_back(d);
  };
  if (which == "auto") {
    add_cpu();
    for (int i = 0; i < gpus; ++i) add_gpu(i);
  } else if (which == "cpu") {
    add_cpu();
  } else if (which.rfind("cuda:", 0) == 0) {
    const int i = std::atoi(which.c_str() + 5);
    if (i < 0 || i >= gpus) {
      return Status::InvalidArgument("--device " + which + ": LibTorch sees " +
                                     std::to_string(gpus) + " CUDA device(s)");
    }
    add_gpu(i);
  } else {
    return Status::InvalidArgument("--device '" + which + "': expected auto, cpu or cuda:N");
  }
  // Each device runs a trial at a time, side by side: a GPU trial's host
  // threads are its share of the usable cores.
  const int gpu_share =
      std::max(1, static_cast<int>(cpu.usable_cores / std::max<size_t>(1, out.size())));
  for (auto& d : out) {
    if (d.device != "cpu") d.host_threads = threads > 0 ? threads : gpu_share;
  }
  for (auto& d : out) {
    BenchmarkOptions b;
    b.device = d.device;
    b.threads = d.device == "cpu" ? static_cast<int>(std::max(1.0, d.cores)) : 0;
    b.max_seconds = bench_seconds;
    auto gflops = MeasureGemmGflops(b);
    if (!gflops.ok()) return gflops.status().WithContext("benchmark on " + d.device);
    d.benchmark_gflops = *gflops;
  }
  return out;
}

}  // namespace

// LibTorch's OpenMP threads spin after each parallel region, stealing the
// cores OpenBLAS's own threads need for the next matrix product: on 2 cores
// an MLP epoch ran 7x slower (2,000 vs 15,000 samples/s, measured). libgomp
// reads OMP_WAIT_POLICY once, when it is loaded, so the worker sets it and
// re-executes itself unless the user chose a policy.
static void PreferPassiveOpenMp(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  execv("/proc/self/exe", argv);
  // Not fatal when re-exec is impossible: the worker is only slower.
}

// Removes `name` from this process's environment and overwrites every
// "name=value" string it had. unsetenv alone drops only the pointer to the
// string: the strings the kernel copied in at exec stay where they were, and
// /proc/PID/environ reads that memory, so a program the worker runs (same
// user) could still read the token from /proc/$PPID/environ.
// REQUIRES: the value was copied first (getenv's pointer then points at
// zeros), and no other thread reads the environment meanwhile.
static void EraseFromOwnEnvironment(const char* name) {
  const size_t n = std::strlen(name);
  std::vector<char*> entries;  // all of them: an exec may pass a name twice
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, name, n) == 0 && (*e)[n] == '=') entries.push_back(*e);
  }
  unsetenv(name);
  // glibc never frees a string setenv made, so each pointer is still valid.
  for (char* entry : entries) explicit_bzero(entry, std::strlen(entry));
}

// Overwrites the value of --token in argv, which /proc/PID/cmdline reads
// (for any user): the help prefers HPO_TOKEN and --token-file, but a token
// given this way is then no longer on show for the life of the worker.
// REQUIRES: the command line was parsed already (CLI11 copied the value).
static void MaskTokenArgument(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    char* value = nullptr;
    if (std::strcmp(argv[i], "--token") == 0 && i + 1 < argc) {
      value = argv[++i];
    } else if (std::strncmp(argv[i], "--token=", 8) == 0) {
      value = argv[i] + 8;
    }
    if (value != nullptr) std::memset(value, 'x', std::strlen(value));
  }
}

// --labels k=v,k=v into the worker's labels.
static Status ParseLabels(const std::string& labels, WorkerOptions& options) {
  for (size_t start = 0; start < labels.size();) {
    size_t end = labels.find(',', start);
    if (end == std::string::npos) end = labels.size();
    const std::string kv = labels.substr(start, end - start);
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Status::InvalidArgument("--labels: '" + kv + "' is not key=value");
    }
    options.labels[kv.substr(0, eq)] = kv.substr(eq + 1);
    start = end + 1;
  }
  return Status::OK();
}

// --tls-ca: the PEM CA certificates the server's must chain to; implies TLS.
static Status ReadTlsCa(const std::string& path, WorkerOptions& options) {
  std::ifstream in(path);
  if (!in) {
    return Status::InvalidArgument("--tls-ca: cannot read '" + path + "': " + std::strerror(errno));
  }
  std::ostringstream pem;
  pem << in.rdbuf();
  if (pem.str().find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
    return Status::InvalidArgument("--tls-ca: '" + path + "' holds no PEM certificate");
  }
  options.tls = true;
  options.tls_ca_pem = pem.str();
  return Status::OK();
}

// The fault tests' hold inside each pause's checkpoint save
// (WorkerOptions::test_pause_hold_ms): an environment variable, not a flag,
// as no user has a use for it.
static Status ReadTestPauseHold(WorkerOptions& options) {
  const char* hold = std::getenv("HPO_WORKER_TEST_PAUSE_HOLD_MS");
  if (hold == nullptr || *hold == '\0') return Status::OK();
  char* end = nullptr;
  const long long ms = std::strtoll(hold, &end, 10);
  if (*end != '\0' || ms < 0 || ms > 600'000) {
    return Status::InvalidArgument(
        "HPO_WORKER_TEST_PAUSE_HOLD_MS: must be milliseconds from 0 to 600000, not '" +
        std::string(hold) + "'");
  }
  options.test_pause_hold_ms = ms;
  spdlog::warn(
      "HPO_WORKER_TEST_PAUSE_HOLD_MS={}: every pause's checkpoint save is held (a test hook)", ms);
  return Status::OK();
}

// The built-in trainers' data is loaded before the worker asks for work: at
// its first lease it sat inside the experiment's clock (four times longer on
// a quarter-core worker). Without it the worker still serves command
// experiments; a built-in trial then fails with the same error.
static void LoadTrainerData(const std::string& data_dir) {
  const auto loading = std::chrono::steady_clock::now();
  if (Status loaded = LoadBuiltinData(data_dir); loaded.ok()) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - loading);
    spdlog::info("built-in trainers' data loaded from {} in {} ms", data_dir, ms.count());
  } else {
    spdlog::warn(
        "{}; trials of the built-in trainers will fail on this worker until it can be read "
        "(command trials are not affected)",
        loaded.message());
  }
}

int main(int argc, char** argv) {
  hpo::TurnOffMutexDeadlockDetection();
  PreferPassiveOpenMp(argv);
  // Not dumpable: processes of the same user, the programs it runs among
  // them, cannot ptrace it or read its /proc/PID/mem and /proc/PID/environ
  // (which become root's), so not its token either. Its own /proc/self files
  // stay readable to it, and an exec makes a program dumpable again. Set
  // after PreferPassiveOpenMp, as an exec resets it.
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  CLI::App app{"hpo-worker: runs HeteroTune trials on this machine's CPUs and GPUs"};
  WorkerOptions options;
  std::string device = "auto", labels, data_dir = BuiltinOptions().data_dir, log_level = "info";
  double bench_seconds = 1.0;
  bool list_devices = false;
  // Its variable is read after parsing: HPO_SERVER, the name it had before,
  // is still read, with a warning.
  auto* server_opt =
      app.add_option("--server", options.server,
                     "hpo-server's gRPC address, HOST:PORT (https://HOST:PORT for TLS) "
                     "(env: HPO_GRPC_SERVER)")
          ->capture_default_str();
  std::string tls_ca;
  app.add_option(
         "--tls-ca", tls_ca,
         "PEM CA certificate(s) that signed the server's; implies TLS (default: the system's CAs)")
      ->envname("HPO_TLS_CA");
  std::string token_file;
  // These four read their environment variables after parsing
  // (common/cli_env.h): the command line wins over the environment.
  auto* token_opt =
      app.add_option("--token", options.token,
                     "bearer token, when the server has one (prefer HPO_TOKEN or --token-file: "
                     "a command line shows in the process list) (env: HPO_TOKEN)");
  auto* token_file_opt =
      app.add_option("--token-file", token_file,
                     "read the bearer token from this file's first line (env: HPO_TOKEN_FILE)")
          ->excludes(token_opt);
  std::string id_file;
  auto* instance_opt =
      app.add_option("--instance", options.instance,
                     "this worker's stable name on its host (e.g. the pod name): registering again "
                     "under it keeps its worker id on the server while this process runs; to keep "
                     "it across restarts use --id-file, which holds the identity secret (env: "
                     "HPO_WORKER_INSTANCE)");
  auto* id_file_opt =
      app.add_option(
             "--id-file", id_file,
             "take --instance from this file's first line, creating it with a random id when "
             "missing; the server's identity secret for it is kept on its second line (env: "
             "HPO_WORKER_ID_FILE)")
          ->excludes(instance_opt);
  app.add_option("--device", device, "auto, cpu or cuda:N")->capture_default_str();
  app.add_option("--threads", options.threads,
                 "intra-op threads per CPU trial (default: usable cores)");
  app.add_option("--labels", labels, "k=v,k=v reported with the worker");
  app.add_option("--data-dir", data_dir, "Fashion-MNIST directory")->capture_default_str();
  app.add_option("--heartbeat-ms", options.heartbeat_ms, "between heartbeats")
      ->capture_default_str();
  app.add_option("--max-trials", options.max_trials, "exit after this many trials (0: never)");
  app.add_option("--scratch-dir", options.scratch_dir,
                 "where a trial's checkpoint directory and its archive are kept while it runs "
                 "(default: $TMPDIR "
                 "or /tmp)")
      ->envname("HPO_SCRATCH_DIR");
  app.add_option("--benchmark-seconds", bench_seconds, "GEMM benchmark time per device")
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->capture_default_str();
  app.add_flag("--list-devices", list_devices, "print the devices and their benchmark, then exit");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(log_level));
  if (server_opt->count() == 0) {
    const std::string from_environment =
        RenamedVariable("hpo-worker", "HPO_GRPC_SERVER", "HPO_SERVER",
                        "hpo-worker reads it as the gRPC address, hpctl as the REST one");
    if (!from_environment.empty()) options.server = from_environment;
  }
  for (Status s : {FormFromEnvironment(*token_opt, options.token, "HPO_TOKEN", *token_file_opt,
                                       token_file, "HPO_TOKEN_FILE"),
                   FormFromEnvironment(*instance_opt, options.instance, "HPO_WORKER_INSTANCE",
                                       *id_file_opt, id_file, "HPO_WORKER_ID_FILE")}) {
    if (!s.ok()) return Fail(s.message());
  }
  // options.token holds its copy now (when the variable gave it).
  EraseFromOwnEnvironment("HPO_TOKEN");
  MaskTokenArgument(argc, argv);
  if (!token_file.empty()) {
    auto t = hpo::ReadTokenFile(token_file);
    if (!t.ok()) return Fail(t.status().message());
    options.token = *t;
  }
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  if (Status hold = ReadTestPauseHold(options); !hold.ok()) return Fail(hold.message());
  if (!id_file.empty()) {
    auto id = ReadOrCreateIdFile(id_file);
    if (!id.ok()) return Fail(id.status().message());
    options.instance = id->instance;
    options.identity_secret = id->identity_secret;
    options.id_file = id_file;
  }

  if (options.server.rfind("https://", 0) == 0) {
    options.server = options.server.substr(8);
    options.tls = true;
  }
  if (!tls_ca.empty()) {
    if (Status ca = ReadTlsCa(tls_ca, options); !ca.ok()) return Fail(ca.message());
  }
  if (Status parsed = ParseLabels(labels, options); !parsed.ok()) return Fail(parsed.message());

  auto devices = Inventory(device, options.threads, bench_seconds);
  if (!devices.ok()) return Fail(devices.status().message());
  for (const auto& d : *devices) {
    std::printf("%s: %s, %.1f usable cores, %.1f GiB, %.1f GFLOP/s\n", d.device.c_str(),
                d.name.c_str(), d.cores, d.memory_bytes / 1073741824.0, d.benchmark_gflops);
  }
  std::fflush(stdout);
  if (list_devices) return 0;
  options.devices = *devices;

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  LoadTrainerData(data_dir);

  Executors executors;
  BuiltinOptions builtin;
  builtin.data_dir = data_dir;
  executors.builtin = MakeBuiltinExecutor(builtin);
  executors.command = std::make_unique<CommandExecutor>();
  WorkerClient client(options, std::move(executors));
  Status s = client.Run(g_stop);
  if (!s.ok()) return Fail(s.message());
  spdlog::info("stopped");
  return 0;
}
