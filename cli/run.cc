#include "cli/run.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "cli/completion.h"
#include "cli/experiments.h"
#include "cli/output.h"
#include "cli/submit.h"
#include "cli/watch.h"
#include "common/server_ports.h"
#include "common/token.h"
#ifdef HPO_HAVE_WORKER_INVENTORY
#include "worker/inventory.h"
#endif

namespace hpo::cli {

namespace {

namespace fs = std::filesystem;

// The embedded server and the local workers: started in order, stopped in reverse.
class Local {
 public:
  ~Local() { Stop(); }
  // `token` reaches the child as HPO_TOKEN: in its environment, which only
  // its user can read, not on its command line, which everyone can.
  pid_t Spawn(const std::vector<std::string>& args, const std::string& log,
              const std::string& token) {
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);  // Ctrl-C reaches hpctl only; it stops the children in order
      // An hpctl that dies without stopping its children (killed, or a
      // crash) takes them with it, rather than leave a server and workers
      // running an experiment nobody watches.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(1);  // it died before the line above
      setenv("HPO_TOKEN", token.c_str(), 1);
      unsetenv("HPO_TOKEN_FILE");
      std::vector<char*> argv;
      std::vector<std::string> copy = args;
      for (auto& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      FILE* f = std::fopen(log.c_str(), "a");
      if (f) {
        dup2(fileno(f), 1);
        dup2(fileno(f), 2);
      }
      execv(argv[0], argv.data());
      std::fprintf(stderr, "cannot run %s\n", argv[0]);
      _exit(127);
    }
    pids_.push_back(pid);
    return pid;
  }
  // `pid` exited and was waited for elsewhere: Stop must not signal it (the
  // number may be another process's by then).
  void Reaped(pid_t pid) { pids_.erase(std::remove(pids_.begin(), pids_.end(), pid), pids_.end()); }
  void Stop() {
    // Workers first (they finish or give back their trials), then the server.
    for (auto it = pids_.rbegin(); it != pids_.rend(); ++it) {
      kill(*it, SIGTERM);
      kill(*it, SIGTERM);  // a second TERM abandons running trials: we are done anyway
      waitpid(*it, nullptr, 0);
    }
    pids_.clear();
  }

 private:
  std::vector<pid_t> pids_;
};

std::string FindBinary(const std::string& name) {
  const fs::path self = fs::read_symlink("/proc/self/exe").parent_path();
  for (const fs::path& p :
       {self / name, self.parent_path() / "server" / name, self.parent_path() / "worker" / name}) {
    if (fs::exists(p)) return p.string();
  }
  Fail(kUsage, "cannot find " + name + " next to hpctl (" + self.string() +
                   "); build it first (scripts/setup)");
}

// The cores this process may use: the count hpo-worker reports for its CPU
// (affinity mask and cgroup CPU quota) where hpctl is built with the worker,
// else the affinity mask's.
double UsableCores() {
#ifdef HPO_HAVE_WORKER_INVENTORY
  if (auto cpu = hpo::worker::ReadCpuInventory("/"); cpu.ok()) return cpu->usable_cores;
#endif
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max(1u, std::thread::hardware_concurrency());
}

// The dashboard's files for the embedded server: `flag` (--web-root or
// HPO_WEB_ROOT) when given, else web/ two levels above this binary
// (build/cli/hpctl in a checkout), else web/ of the source tree it was built
// from. Empty when none holds an index.html.
std::string FindWebRoot(const std::string& flag) {
  if (!flag.empty()) {
    if (!fs::is_regular_file(fs::path(flag) / "index.html")) {
      Fail(kUsage, "--web-root " + flag +
                       ": no index.html there (the dashboard is the repository's web/ folder)");
    }
    return fs::absolute(flag).string();
  }
  const fs::path self = fs::read_symlink("/proc/self/exe").parent_path();
  for (const fs::path& p :
       {self.parent_path().parent_path() / "web", fs::path(HPO_SOURCE_WEB_DIR)}) {
    if (fs::is_regular_file(p / "index.html")) return fs::weakly_canonical(p).string();
  }
  return "";
}

// Replaces `path` with a new file of mode 0600 holding `secret`. The file is
// written under a fresh name in the same directory (mkstemp: O_EXCL, so never
// through a symlink, and 0600 whatever the umask) and renamed over `path`:
// an existing file keeps neither its old mode (0644 from an earlier version,
// say) nor its inode, and a symlink at `path` is replaced, its target untouched.
void WriteSecretFile(const std::string& path, const std::string& secret) {
  std::string temp = path + ".XXXXXX";
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) Fail(kUsage, "cannot write " + path + ": " + std::strerror(errno));
  const bool written =
      ::write(fd, secret.data(), secret.size()) == static_cast<ssize_t>(secret.size());
  int error = written ? 0 : (errno != 0 ? errno : EIO);  // a short write sets no errno
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error == 0 && ::rename(temp.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) {
    ::unlink(temp.c_str());
    Fail(kUsage, "cannot write " + path + ": " + std::strerror(error));
  }
}

struct RunOptions {
  std::string file;
  int workers = 2;
  std::string data_dir = "./hpo-data";
  std::string web_root;
};

// Where the embedded server listens: its REST API (with the token) for
// hpctl, its gRPC address for the workers.
struct EmbeddedServer {
  HttpClientOptions rest;
  std::string grpc;
};

// The embedded hpo-server, on loopback with free ports (written to
// DATA_DIR/ports.json) and the SQLite store in DATA_DIR.
EmbeddedServer StartServer(Local& local, const RunOptions& r, const std::string& web_root,
                           const std::string& token) {
  const std::string ports = r.data_dir + "/ports.json";
  fs::remove(ports);
  const std::string binary = FindBinary("hpo-server");
  const std::string store = "sqlite://" + fs::absolute(r.data_dir).string() + "/hpo.db";
  std::vector<std::string> server = {binary,        "--store",     store,
                                     "--http",      "127.0.0.1:0", "--grpc",
                                     "127.0.0.1:0", "--port-file", ports};
  if (!web_root.empty()) server.insert(server.end(), {"--web-root", web_root});
  const pid_t server_pid = local.Spawn(server, r.data_dir + "/server.log", token);
  auto listening = hpo::WaitForServerPorts(ports, server_pid, std::chrono::seconds(10));
  if (listening.status().code() == hpo::StatusCode::kUnavailable) local.Reaped(server_pid);
  if (!listening.ok()) {
    Fail(kUnreachable, "the embedded hpo-server did not start; see " + r.data_dir + "/server.log");
  }
  EmbeddedServer started;
  started.rest.port = listening->http;
  started.rest.token = token;
  started.grpc = "127.0.0.1:" + std::to_string(listening->grpc);
  return started;
}

// Each worker would take every usable core for its CPU trials, so N of
// them would run N trials at full width side by side: each gets its share
// (hpo-worker --threads caps the cores it reports, and the server keeps a
// trial's `threads` within them).
void StartWorkers(Local& local, const RunOptions& r, const std::string& grpc,
                  const std::string& token) {
  const int workers = r.workers;
  const double cores = UsableCores();
  const int threads = std::max(1, static_cast<int>(cores / workers));
  for (int i = 0; i < workers; ++i) {
    local.Spawn({FindBinary("hpo-worker"), "--server", grpc, "--threads", std::to_string(threads)},
                r.data_dir + "/worker-" + std::to_string(i) + ".log", token);
  }
  char usable[32];
  std::snprintf(usable, sizeof usable, "%g", cores);
  Info() << workers << (workers == 1 ? " worker" : " workers") << " on " << usable
         << " usable cores: " << threads << (threads == 1 ? " thread" : " threads")
         << (workers == 1 ? "" : " each") << " for CPU trials (hpo-worker --threads " << threads
         << ")"
         << (workers > 1 && threads * workers > cores
                 ? "; more workers than cores, so they share them"
                 : "")
         << "\n";
}

// Where to look meanwhile: the dashboard's address (with the token), or,
// without a dashboard, the REST address and the token's file; and the logs.
void PrintWhereToLook(const HttpClientOptions& o, const std::string& web_root,
                      const std::string& data_dir, const std::string& token_file) {
  if (web_root.empty()) {
    Info() << "dashboard: none (no web/ folder found; pass --web-root DIR); REST on "
              "http://127.0.0.1:"
           << o.port << "/api/v1 with the token in " << token_file << "  (logs in " << data_dir
           << ")\n";
    return;
  }
  // The page stores the token and drops it from the address bar (web/js/api.js).
  Info() << "dashboard: http://127.0.0.1:" << o.port << "/?token=" << o.token << "  (logs in "
         << data_dir << ")\n";
  if (!fs::exists(fs::path(web_root) / "node_modules" / "echarts")) {
    Info() << "  its charts need `npm ci` in " << web_root << " (scripts/setup runs it)\n";
  }
}

// The best trial once the experiment ended, if there is one: completed, or
// the best reported so far, said to be partial.
void PrintBest(const HttpClientOptions& o, int64_t id) {
  const Answer e = Ask(o, "GET", ExperimentPath(id));
  if (e.ok() && HasSeveralObjectives(e.body)) {
    std::cout << "the Pareto front:\n";
    PrintFront(o, id, "table");
    return;
  }
  const Answer best = Ask(o, "GET", ExperimentPath(id) + "/best");
  if (!best.ok()) return;
  json b = best.body;
  const bool partial = b.value("partial", false);
  std::cout << (partial ? "best so far: trial " : "best trial ") << Str(b["number"]) << " (space "
            << Str(b["space"])
            << (partial ? "; " + Str(b["state"]) + ", best at step " + Str(b["best_step"]) +
                              ", not trained to its full budget"
                        : "")
            << "): " << Human(b[partial ? "best_metrics" : "final_metrics"]) << "\n  params "
            << Human(b["params"]) << "\n  system " << Human(b["system"]) << "\n";
}

int Run(const RunOptions& r) {
  ReadFile(r.file);  // fail early on a missing file
  const std::string web_root = FindWebRoot(r.web_root);
  fs::create_directories(r.data_dir);
  // The embedded server is on loopback, but any local user, and any web
  // page the user opens, can reach loopback: it gets a fresh token, which
  // hpctl, the workers and the dashboard link carry.
  auto token = hpo::RandomToken();
  if (!token.ok()) Fail(kUsage, token.status().message());
  // For other clients meanwhile: HPO_TOKEN=$(cat DATA_DIR/token) hpctl ...
  const std::string token_file = r.data_dir + "/token";
  WriteSecretFile(token_file, *token);
  Local local;
  const EmbeddedServer server = StartServer(local, r, web_root, *token);
  const HttpClientOptions& o = server.rest;
  const int64_t id = Submit(o, r.file);
  StartWorkers(local, r, server.grpc, *token);
  PrintWhereToLook(o, web_root, r.data_dir, token_file);
  const int rc = Watch(o, id);
  if (rc == kInterrupted) {
    Info() << "\ninterrupted: cancelling experiment " << id << "\n";
    (void)Ask(o, "POST", ExperimentPath(id) + ":cancel", "{}");
  }
  PrintBest(o, id);
  Info() << "stopping workers and server...\n";
  local.Stop();
  return rc;
}

}  // namespace

Command AddRun(CLI::App& app, CompletionHints& hints) {
  auto r = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand(
      "run", "run an experiment on this machine: embedded server, local workers");
  Path(hints, cmd->add_option("file", r->file, "the spec file"))->required();
  cmd->add_option("--workers", r->workers,
                  "local workers; each gets its share of this machine's cores")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  Path(hints, cmd->add_option("--data-dir", r->data_dir, "where the SQLite store and logs go"))
      ->capture_default_str();
  Path(hints, cmd->add_option("--web-root", r->web_root,
                              "the dashboard's files (default: this checkout's web/)"))
      ->envname("HPO_WEB_ROOT");
  return {cmd, [r] { return Run(*r); }, nullptr};
}

}  // namespace hpo::cli
