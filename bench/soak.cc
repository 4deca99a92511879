// bench/soak: a chaos soak. Simulated workers (in child
// processes of this program, so that a worker can be killed or stopped)
// and REST clients run against one hpo-server on a private PostgreSQL for
// --minutes, while every 20-40 s one fault is injected at random:
//
//   kill_server       kill -9 of hpo-server, restarted on the same ports
//   kill_worker       kill -9 of one worker process, a new one started
//   restart_postgres  PostgreSQL stopped (fast) for 2 s, then started
//   stop_worker       SIGSTOP of one worker process for its lease timeout
//                     plus 2 s (its leases run out), then SIGCONT
//
// Early stopping is promotion-type ASHA by default (--early-stopping):
// trials pause at their rungs, the workers upload a checkpoint, and a
// promoted trial resumes on whichever worker asks, from that checkpoint.
//
// Each worker process writes every acknowledged report and completion, and
// how each lease's segment of a trial began and ended, to its own file as
// it is answered, so a kill -9 loses none of the record. At the end the
// workers are stopped, leases nobody holds are left to run out (twice the
// lease timeout), and then:
//
//   - every acknowledged completion must have left its trial completed with
//     the loss sent, and every acknowledged report of a segment whose end
//     was acknowledged (paused with its checkpoint, completed, or stopped
//     by the rule) must be stored with its value, unless a later restart of
//     the trial (an unusable checkpoint, acknowledged) dropped it. The
//     reports of a segment whose lease was lost or ran out (its worker
//     killed or stopped) are dropped by the server by contract (the next
//     lease starts over from the last rung); those count as
//     `dropped_reports`, not lost.
//   - no trial may still be leased (`stuck`): every owner is gone by then.
//
// The experiment has a budget of --trials-per-experiment trials (2,000);
// when it ends the next is created, as on a server that runs experiment
// after experiment (0: one experiment that never ends, whose view the
// server keeps growing).
//
// Prints one line per fault (with -v, on stderr) and
//
//   bench=soak minutes=M store=postgresql workers=50 rest_clients=5 early_stopping=promotion
//       trials_per_experiment=N experiments=K pauses=P promotions=Q restarts=0 faults=F
//       kill_server=A kill_worker=B restart_postgres=C stop_worker=D acked_reports=R
//       acked_completions=K dropped_reports=X lost=0 stuck=0 rpc_errors=... rest_errors=N
//       server_rss_mb_start=S server_rss_mb_end=E server_fds_start=P server_fds_end=Q
//
// Then (--disk-seconds, 0 to skip) a separate phase on SQLite in a 32 MiB
// tmpfs (mounting it needs root): the disk is filled while 10 simulated
// workers run, and freed again. Every failed call while it is full must be
// UNAVAILABLE or RESOURCE_EXHAUSTED, a REST write 503 or 507; reports must
// be acknowledged again once space is back; nothing acknowledged is lost:
//
//   bench=soak_disk store=sqlite tmpfs_mb=32 seconds=S workers=10 early_stopping=promotion
//       rpc_errors_while_full=UNAVAILABLE:N refused_late_calls=L unclean_rpc_errors=0
//       rest_write_while_full=503 recovered=1 recovery_ms=X ... lost=0 stuck=0
//
// The disk is kept full for its whole window (the server frees space as
// trials end and their checkpoints go; the filler takes it again). A lease
// that runs out meanwhile (its renewals are writes too) goes to another
// worker once a write gets through, and its first owner's late calls are
// refused (FAILED_PRECONDITION, "not leased to"): `refused_late_calls`,
// by contract, not unclean.
//
// The "start" figures are the highest of the samples (every 10 s) in the
// 5 minutes after the first 5 (a sixth of a shorter run each), the "end"
// ones the highest in the last 5: the plateau of whichever server
// processes ran then (kill_server restarts it, and a new one grows to its
// plateau within a minute or two). Exits 1 when lost or stuck
// is not 0.
#include <fcntl.h>
#include <signal.h>
#include <spdlog/fmt/fmt.h>
#include <sys/mount.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "common/http_client.h"
#include "proto/mutex_mode.h"
#include "testing/harness.h"
#include "testing/process.h"
#include "testing/scenarios.h"
#include "testing/server_process.h"

namespace hpo::bench {
namespace {

using namespace hpo::testing;

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

int64_t SteadyMs() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double Curve(const json& params, int64_t step) {
  const double x = params.value("x", 0.5), y = params.value("y", 0.1);
  return (x - 0.3) * (x - 0.3) + 0.1 * std::log10(y + 1) + 1.0 / static_cast<double>(step + 2);
}

// A worker process: `workers` simulated workers until it is killed. Its
// acknowledged calls go to `record` as lines "R segment trial step loss",
// "S segment trial event step time_ms" (SegmentEvent; time_ms on the
// steady clock, which every process shares) and "C trial loss", each
// written (one write(2), O_APPEND) as it is answered: in the kernel's hands
// before the next call, so kill -9 of this process cannot lose a line.
int RunChild(const std::string& address, int workers, int step_ms, int steps,
             const std::string& record) {
  const int fd = ::open(record.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::perror(record.c_str());
    return 2;
  }
  auto write_line = [fd](const std::string& line) {
    // One write per line; O_APPEND keeps the threads' lines whole.
    if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) std::abort();
  };
  const int pid = static_cast<int>(::getpid());
  FleetOptions fo;
  fo.address = address;
  fo.workers = workers;
  fo.steps = steps;
  fo.step_time = milliseconds(step_ms);
  fo.heartbeat = true;
  fo.deadline = milliseconds(10'000);
  // A loss that depends on the parameters and falls with the steps, so that
  // ASHA stops some trials and lets others complete (the default SimLoss
  // grows with the trial id: nearly every later trial would be stopped).
  fo.objective = Curve;
  fo.on_report = [&](int64_t segment, int64_t trial, int64_t step, double loss) {
    write_line(fmt::format("R {}.{} {} {} {:.17g}\n", pid, segment, trial, step, loss));
  };
  fo.on_segment = [&](int64_t segment, int64_t trial, SegmentEvent e, int64_t step) {
    write_line(fmt::format("S {}.{} {} {} {} {}\n", pid, segment, trial, SegmentEventName(e), step,
                           SteadyMs()));
  };
  fo.on_complete = [&](int64_t trial, double loss) {
    write_line(fmt::format("C {} {:.17g}\n", trial, loss));
  };
  SimFleet fleet(fo);
  fleet.Start();
  for (;;) std::this_thread::sleep_for(seconds(3600));  // until killed
}

double ProcStatusMb(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0)
      return std::stod(line.substr(field.size() + 1)) / 1024.0;  // kB
  }
  return 0;
}

int OpenFds(pid_t pid) {
  std::error_code ec;
  int n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

// What the workers' records say, segment by segment.
struct Recorded {
  struct Segment {
    int64_t trial = 0;
    std::vector<std::pair<int64_t, double>> reports;  // acknowledged, since its last restart
    bool acked_end = false;  // paused with its checkpoint, completed or stopped, acknowledged
    int64_t end_ms = 0;
  };
  std::map<std::string, Segment> segments;
  std::map<int64_t, std::vector<int64_t>>
      restarts;  // trial -> when each acknowledged restart returned
  std::map<int64_t, double> completions;
  int64_t report_lines = 0, pauses = 0, promotions = 0, restarted = 0, dropped_by_restart = 0;

  void Report(const std::string& segment, int64_t trial, int64_t step, double loss) {
    Segment& s = segments[segment];
    s.trial = trial;
    s.reports.emplace_back(step, loss);
    ++report_lines;
  }
  Status Event(const std::string& segment, int64_t trial, const std::string& event, int64_t step,
               int64_t ms) {
    Segment& s = segments[segment];
    s.trial = trial;
    if (event == "leased") {
      promotions += step > 0;
    } else if (event == "restarted") {
      // The server dropped every step of the trial, this segment's so far too.
      dropped_by_restart += static_cast<int64_t>(s.reports.size());
      s.reports.clear();
      restarts[trial].push_back(ms);
      ++restarted;
    } else if (event == "paused" || event == "completed" || event == "stopped") {
      s.acked_end = true;
      s.end_ms = ms;
      pauses += event == "paused";
    } else if (event == "paused_bare") {
      ++pauses;  // without a checkpoint its promotion starts over: nothing of it need stay
    } else {
      return Status::DataLoss("an unknown segment event: " + event);
    }
    return Status::OK();
  }
};

Status ReadRecord(const std::string& path, Recorded& into) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream ss(line);
    std::string kind;
    ss >> kind;
    if (kind == "R") {
      std::string segment;
      int64_t trial = 0, step = 0;
      double loss = 0;
      ss >> segment >> trial >> step >> loss;
      if (!ss) return Status::DataLoss(path + ": a report line that does not parse: " + line);
      into.Report(segment, trial, step, loss);
    } else if (kind == "S") {
      std::string segment, event;
      int64_t trial = 0, step = 0, ms = 0;
      ss >> segment >> trial >> event >> step >> ms;
      if (!ss) return Status::DataLoss(path + ": a segment line that does not parse: " + line);
      HPO_RETURN_IF_ERROR(into.Event(segment, trial, event, step, ms));
    } else if (kind == "C") {
      int64_t trial = 0;
      double loss = 0;
      ss >> trial >> loss;
      if (!ss) return Status::DataLoss(path + ": a completion line that does not parse: " + line);
      into.completions[trial] = loss;
    } else if (!line.empty()) {
      return Status::DataLoss(path + ": an unknown line: " + line);
    }
  }
  return Status::OK();
}

// Every trial of `experiment`, by id, a page at a time.
Result<std::map<int64_t, json>> AllTrials(uint16_t port, int64_t experiment) {
  std::map<int64_t, json> trials;
  for (int64_t offset = 0;; offset += 1000) {
    HPO_ASSIGN_OR_RETURN(json page,
                         RestCall(port, "GET",
                                  fmt::format("/api/v1/experiments/{}/trials?limit=1000&offset={}",
                                              experiment, offset)));
    for (const auto& t : page["trials"]) trials[t["id"].get<int64_t>()] = t;
    if (page["trials"].size() < 1000) return trials;
  }
}

// Trials still leased: with every worker gone for twice the lease timeout,
// none should be.
int64_t Stuck(const std::map<int64_t, json>& trials) {
  int64_t stuck = 0;
  for (const auto& [id, t] : trials) {
    const std::string state = t.value("state", "");
    stuck += state == "leased" || state == "running";
  }
  return stuck;
}

// The reports the store must hold: those of segments whose end was
// acknowledged, unless a restart of their trial acknowledged after that end
// dropped them. The rest went with a lease that was lost or ran out: the
// server drops such a segment's steps by contract (`dropped`).
std::map<int64_t, std::map<int64_t, double>> Expected(const Recorded& rec, int64_t& dropped) {
  std::map<int64_t, std::map<int64_t, double>> expected;
  dropped = rec.dropped_by_restart;
  for (const auto& [key, s] : rec.segments) {
    bool kept = s.acked_end;
    if (auto it = rec.restarts.find(s.trial); kept && it != rec.restarts.end()) {
      for (int64_t ms : it->second) kept = kept && ms <= s.end_ms;
    }
    if (!kept) {
      dropped += static_cast<int64_t>(s.reports.size());
      continue;
    }
    for (const auto& [step, loss] : s.reports) expected[s.trial][step] = loss;
  }
  return expected;
}

json SoakSpec(int workers, int steps, const std::string& early_stopping,
              int64_t max_trials = 10'000'000) {
  return {
      {"name", "soak"},
      {"objective", {{"metric", "loss"}}},
      {"spaces",
       {{{"name", "s"},
         {"params",
          {{"x", {{"type", "float"}, {"low", 0}, {"high", 1}}},
           {"y", {{"type", "float"}, {"low", 1e-4}, {"high", 1}, {"log", true}}}}}}}},
      {"algorithm", {{"sampler", "random"}, {"seed", 1}}},
      {"early_stopping",
       {{"rule", "asha"}, {"type", early_stopping}, {"min_resource", 1}, {"reduction_factor", 3}}},
      {"budget",
       {{"max_trials", max_trials}, {"max_parallel", workers}, {"steps_per_trial", steps}}},
      {"executor", {{"builtin", {{"trainer", "fashion-mnist-mlp"}}}}}};
}

struct SoakOptions {
  int minutes = 30;
  int workers = 50;
  int workers_per_process = 5;
  int rest_clients = 5;
  int fault_min_s = 20, fault_max_s = 40;
  int lease_timeout_s = 4;
  int steps = 10;
  int step_ms = 500;
  int disk_seconds = 60;  // the full-disk phase on SQLite; 0: none
  // Each experiment's trial budget; when one ends the next is created, as
  // on a server that runs experiment after experiment. 0: one experiment
  // that never ends.
  int64_t trials_per_experiment = 2000;
  std::string early_stopping = "promotion";  // ASHA's type: promotion or stop
  std::string dir;
  std::string server_bin;
  bool verbose = false;
};

Status Soak(const SoakOptions& o, const std::string& self) {
  HPO_ASSIGN_OR_RETURN(auto pg, PostgresInstance::Create());
  HPO_RETURN_IF_ERROR(pg->CreateDatabase("soak"));
  ServerProcess server(
      o.server_bin, o.dir + "/server",
      {"--store", pg->Url("soak"), "--lease-timeout", std::to_string(o.lease_timeout_s)});
  HPO_RETURN_IF_ERROR(server.Start());
  const std::string spec =
      SoakSpec(o.workers, o.steps, o.early_stopping,
               o.trials_per_experiment > 0 ? o.trials_per_experiment : 10'000'000)
          .dump();
  HPO_ASSIGN_OR_RETURN(int64_t experiment, CreateExperiment(server.http_port(), spec));
  int experiments = 1;

  // Worker processes; each started one gets a record file of its own.
  std::vector<pid_t> children;
  std::vector<std::string> records;
  auto spawn = [&](size_t slot) {
    const std::string record = o.dir + "/acked-" + std::to_string(records.size()) + ".txt";
    records.push_back(record);
    const int n =
        std::min(o.workers_per_process, o.workers - static_cast<int>(slot) * o.workers_per_process);
    children[slot] = Spawn({self, "--child", "--address", server.grpc_address(), "--workers",
                            std::to_string(n), "--steps", std::to_string(o.steps), "--step-ms",
                            std::to_string(o.step_ms), "--record", record},
                           o.dir + "/worker-" + std::to_string(records.size() - 1) + ".log");
  };
  children.resize(
      static_cast<size_t>((o.workers + o.workers_per_process - 1) / o.workers_per_process));
  for (size_t i = 0; i < children.size(); ++i) spawn(i);
  struct Reaper {
    std::vector<pid_t>& pids;
    ~Reaper() {
      for (pid_t pid : pids) {
        ::kill(pid, SIGCONT);
        KillAndReap(pid);
      }
    }
  } reaper{children};

  RestLoadOptions ro;
  ro.port = server.http_port();
  ro.clients = o.rest_clients;
  ro.pause = milliseconds(200);
  RestLoad rest(ro);
  rest.Start();

  std::mt19937 rng(21);
  std::map<std::string, int> faults;
  const auto start = Clock::now();
  const auto end = start + std::chrono::minutes(o.minutes);
  // The RSS and descriptor figures: the highest of the samples (every 10
  // s) in a window after the first 5 minutes, and in the last window of
  // the run, each window 5 minutes long (a sixth of a shorter run). A
  // server restarted by kill_server starts small and grows to its plateau
  // (pool, caches, malloc's arenas) in a minute or two, so one sample would
  // compare a young process with an old one; the highest of a window is
  // the plateau of whichever processes ran in it, and a leak shows as a
  // later plateau higher than the earlier one.
  const auto window = std::min<Clock::duration>(std::chrono::minutes(5), (end - start) / 6);
  const auto warm = start + window;
  double rss_start = 0, rss_end = 0;
  int fds_start = 0, fds_end = 0;
  auto next_sample = warm;
  auto next_fault =
      start + seconds(std::uniform_int_distribution<int>(o.fault_min_s, o.fault_max_s)(rng));
  auto log = [&](const std::string& line) {
    if (o.verbose)
      std::fprintf(stderr, "soak %6.0f s: %s\n", MsSince(start) / 1000.0, line.c_str());
  };
  auto next_check = start;
  while (Clock::now() < end) {
    std::this_thread::sleep_for(milliseconds(200));
    if (o.trials_per_experiment > 0 && Clock::now() >= next_check) {
      // The next experiment once this one has ended. A call that meets a
      // fault is tried again at the next check; one whose answer a fault
      // lost leaves an experiment more, which the checks read all the same.
      next_check = Clock::now() + seconds(2);
      auto e =
          RestCall(server.http_port(), "GET", "/api/v1/experiments/" + std::to_string(experiment));
      if (e.ok() && e->value("state", "") != "running") {
        auto next = CreateExperiment(server.http_port(), spec);
        if (next.ok()) {
          experiment = *next;
          log(fmt::format("experiment {} created ({} so far)", experiment, ++experiments));
        }
      }
    }
    if (Clock::now() >= next_sample) {
      next_sample = Clock::now() + seconds(10);
      const double rss = ProcStatusMb(server.pid(), "VmRSS");
      const int fds = OpenFds(server.pid());
      if (Clock::now() < warm + window) {
        rss_start = std::max(rss_start, rss);
        fds_start = std::max(fds_start, fds);
      }
      if (Clock::now() >= end - window) {
        rss_end = std::max(rss_end, rss);
        fds_end = std::max(fds_end, fds);
      }
      log(fmt::format("server rss {:.1f} MiB, {} open descriptors", rss, fds));
    }
    if (Clock::now() < next_fault) continue;
    static const char* kKinds[] = {"kill_server", "kill_worker", "restart_postgres", "stop_worker"};
    const std::string kind = kKinds[rng() % 4];
    ++faults[kind];
    const size_t slot = rng() % children.size();
    if (kind == "kill_server") {
      server.Stop(SIGKILL);
      HPO_RETURN_IF_ERROR(server.Start());
      log("kill -9 of the server; listening again");
    } else if (kind == "kill_worker") {
      KillAndReap(children[slot]);
      spawn(slot);
      log(fmt::format("kill -9 of worker process {}; a new one started", slot));
    } else if (kind == "restart_postgres") {
      HPO_RETURN_IF_ERROR(pg->Stop());
      std::this_thread::sleep_for(seconds(2));
      HPO_RETURN_IF_ERROR(pg->Start());
      log("PostgreSQL stopped for 2 s and started");
    } else {
      ::kill(children[slot], SIGSTOP);
      std::this_thread::sleep_for(seconds(o.lease_timeout_s + 2));
      ::kill(children[slot], SIGCONT);
      log(fmt::format("worker process {} stopped for {} s, past its lease", slot,
                      o.lease_timeout_s + 2));
    }
    next_fault = Clock::now() +
                 seconds(std::uniform_int_distribution<int>(o.fault_min_s, o.fault_max_s)(rng));
  }
  for (pid_t& pid : children) {
    KillAndReap(pid);
    pid = -1;
  }
  rest.Stop();
  log("workers stopped; waiting for the leases nobody holds to run out");
  std::this_thread::sleep_for(seconds(2 * o.lease_timeout_s + 2));

  Recorded rec;
  for (const auto& path : records) HPO_RETURN_IF_ERROR(ReadRecord(path, rec));
  // Every experiment's trials, also those of one created by a call whose
  // answer was lost.
  std::map<int64_t, json> trials;
  HPO_ASSIGN_OR_RETURN(json listed,
                       RestCall(server.http_port(), "GET", "/api/v1/experiments?limit=1000"));
  for (const auto& e : listed["experiments"]) {
    HPO_ASSIGN_OR_RETURN(auto of, AllTrials(server.http_port(), e["id"].get<int64_t>()));
    trials.merge(of);
  }
  const int64_t stuck = Stuck(trials);
  int64_t dropped = 0;
  const auto expected = Expected(rec, dropped);
  log(fmt::format("checking {} reports of {} segments and {} completions against the store",
                  rec.report_lines, rec.segments.size(), rec.completions.size()));
  HPO_ASSIGN_OR_RETURN(AckCheck check,
                       CheckAcknowledged(server.http_port(), expected, rec.completions));
  for (const auto& s : check.samples) std::fprintf(stderr, "soak: lost: %s\n", s.c_str());
  const RestStats rs = rest.Snapshot();
  int total = 0;
  for (const auto& [k, n] : faults) total += n;
  const int64_t lost = check.lost_reports + check.lost_completions;
  std::printf(
      "bench=soak minutes=%d store=postgresql workers=%d rest_clients=%d early_stopping=%s "
      "trials_per_experiment=%" PRId64 " experiments=%zu pauses=%" PRId64 " promotions=%" PRId64
      " restarts=%" PRId64
      " faults=%d kill_server=%d kill_worker=%d "
      "restart_postgres=%d stop_worker=%d acked_reports=%" PRId64
      " acked_completions=%zu dropped_reports=%" PRId64 " lost=%" PRId64 " stuck=%" PRId64
      " rest_calls=%" PRId64 " rest_errors=%" PRId64
      " server_rss_mb_start=%.1f server_rss_mb_end=%.1f server_fds_start=%d server_fds_end=%d\n",
      o.minutes, o.workers, o.rest_clients, o.early_stopping.c_str(), o.trials_per_experiment,
      listed["experiments"].size(), rec.pauses, rec.promotions, rec.restarted, total,
      faults["kill_server"], faults["kill_worker"], faults["restart_postgres"],
      faults["stop_worker"], rec.report_lines, rec.completions.size(), dropped, lost, stuck,
      rs.calls, rs.errors_total, rss_start, rss_end, fds_start, fds_end);
  std::fflush(stdout);
  if (lost != 0 || stuck != 0) return Status::Internal("lost or stuck work; logs in " + o.dir);
  return Status::OK();
}

// The full-disk phase: hpo-server on SQLite in a small tmpfs, 10
// simulated workers in this process. After a third of the phase the tmpfs
// is filled to the last byte; a third later the filler goes. While it is
// full, every failed call must be UNAVAILABLE or RESOURCE_EXHAUSTED (gRPC)
// and a REST write 503 or 507; once space is back, reports must be
// acknowledged again, and nothing acknowledged may be lost.
Status DiskPhase(const SoakOptions& o) {
  const std::string disk = o.dir + "/disk";
  std::filesystem::create_directories(disk);
  if (::mount("tmpfs", disk.c_str(), "tmpfs", 0, "size=32m") != 0) {
    std::printf("bench=soak_disk skipped=\"cannot mount a tmpfs (%s); run as root\"\n",
                std::strerror(errno));
    return Status::OK();
  }
  struct Unmount {
    std::string dir;
    ~Unmount() { ::umount2(dir.c_str(), MNT_DETACH); }
  } unmount{disk};
  const int workers = 10;
  int64_t experiment = 0;
  Recorded rec;
  std::mutex rec_mu;
  FleetStats before, full;
  int rest_status_full = 0;
  std::string rest_body_full;
  bool recovered = false;
  double recovery_ms = 0;
  {
    ServerProcess server(o.server_bin, o.dir + "/disk-server",
                         {"--store", "sqlite://" + disk + "/hpo.db", "--lease-timeout",
                          std::to_string(o.lease_timeout_s)});
    HPO_RETURN_IF_ERROR(server.Start());
    HPO_ASSIGN_OR_RETURN(
        experiment,
        CreateExperiment(server.http_port(), SoakSpec(workers, o.steps, o.early_stopping).dump()));
    FleetOptions fo;
    fo.address = server.grpc_address();
    fo.workers = workers;
    fo.steps = o.steps;
    fo.step_time = milliseconds(o.step_ms);
    fo.heartbeat = true;
    fo.objective = Curve;
    fo.on_report = [&](int64_t segment, int64_t trial, int64_t step, double loss) {
      std::lock_guard lock(rec_mu);
      rec.Report(std::to_string(segment), trial, step, loss);
    };
    fo.on_segment = [&](int64_t segment, int64_t trial, SegmentEvent e, int64_t step) {
      std::lock_guard lock(rec_mu);
      (void)rec.Event(std::to_string(segment), trial, SegmentEventName(e), step, SteadyMs());
    };
    fo.on_complete = [&](int64_t trial, double loss) {
      std::lock_guard lock(rec_mu);
      rec.completions[trial] = loss;
    };
    SimFleet fleet(fo);
    fleet.Start();
    const auto third = milliseconds(o.disk_seconds * 1000 / 3);
    std::this_thread::sleep_for(third);
    before = fleet.Snapshot();
    {
      // Fill the tmpfs: 1 MiB writes, then smaller ones, until none fits;
      // and keep it full: the server frees space as it goes (the
      // checkpoints of trials that end are deleted), which the filler takes
      // again every 20 ms, so that the disk stays full for the whole window.
      const std::string filler = disk + "/filler";
      const int fd =
          ::open(filler.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
      if (fd < 0) return Status::Internal(filler + ": " + std::strerror(errno));
      const std::string block(size_t{1} << 20, 'x');
      auto fill = [&] {
        for (size_t n = block.size(); n > 0;) {
          if (::write(fd, block.data(), n) < 0) n /= 2;
        }
      };
      fill();
      std::atomic<bool> keep_full{true};
      std::thread refill([&] {
        while (keep_full) {
          std::this_thread::sleep_for(milliseconds(20));
          fill();
        }
      });
      struct Join {
        std::atomic<bool>& flag;
        std::thread& t;
        int fd;
        void operator()() {
          flag = false;
          if (t.joinable()) t.join();
        }
        ~Join() {
          (*this)();
          ::close(fd);
        }
      } stop_filling{keep_full, refill, fd};
      std::this_thread::sleep_for(third / 2);
      // A REST write while the disk is full.
      HttpClientOptions ho;
      ho.port = server.http_port();
      auto r = HttpRequestOnce(ho, "POST", "/api/v1/experiments",
                               SoakSpec(workers, o.steps, o.early_stopping).dump());
      if (r.ok()) {
        rest_status_full = r->status;
        rest_body_full = r->body.substr(0, 200);
      }
      std::this_thread::sleep_for(third / 2);
      full = fleet.Snapshot();
      stop_filling();
      std::filesystem::remove(filler);
    }
    const auto freed = Clock::now();
    recovered = fleet.WaitForReportAfter(freed, seconds(30));
    recovery_ms = MsSince(freed);
    std::this_thread::sleep_for(third);
    fleet.Stop();
    std::this_thread::sleep_for(seconds(2 * o.lease_timeout_s + 2));
    HPO_ASSIGN_OR_RETURN(const auto trials, AllTrials(server.http_port(), experiment));
    int64_t dropped = 0;
    const auto expected = Expected(rec, dropped);
    HPO_ASSIGN_OR_RETURN(AckCheck check,
                         CheckAcknowledged(server.http_port(), expected, rec.completions));
    for (const auto& s : check.samples)
      std::fprintf(stderr, "soak: disk phase: lost: %s\n", s.c_str());
    std::map<std::string, int64_t> errors_full;
    int64_t unclean = 0;
    // A lease that ran out while the disk was full (its renewals failed
    // too) passes to another worker once a write gets through; the late
    // calls of its first owner are then refused by contract, as after a
    // stopped worker in the main phase, and its segment's reports count as
    // dropped. They are counted apart, not as unclean.
    const int64_t refused_late = full.refused_not_leased - before.refused_not_leased;
    for (const auto& [code, n] : full.errors) {
      int64_t during = n - (before.errors.count(code) ? before.errors.at(code) : 0);
      if (code == "FAILED_PRECONDITION") during -= refused_late;
      if (during <= 0) continue;
      errors_full[code] = during;
      if (code != "UNAVAILABLE" && code != "RESOURCE_EXHAUSTED") {
        unclean += during;
        std::fprintf(stderr,
                     "soak: disk phase: %" PRId64
                     " calls failed %s while the disk was full; the first: %s\n",
                     during, code.c_str(), full.first_error[code].c_str());
      }
    }
    std::string codes;
    for (const auto& [code, n] : errors_full)
      codes += (codes.empty() ? "" : ",") + code + ":" + std::to_string(n);
    const bool rest_clean = rest_status_full == 503 || rest_status_full == 507;
    const int64_t lost = check.lost_reports + check.lost_completions;
    const int64_t stuck = Stuck(trials);
    std::printf(
        "bench=soak_disk store=sqlite tmpfs_mb=32 seconds=%d workers=%d early_stopping=%s "
        "rpc_errors_while_full=%s "
        "refused_late_calls=%" PRId64 " unclean_rpc_errors=%" PRId64
        " rest_write_while_full=%d recovered=%d recovery_ms=%.0f acked_reports=%" PRId64
        " acked_completions=%zu "
        "dropped_reports=%" PRId64 " lost=%" PRId64 " stuck=%" PRId64 "\n",
        o.disk_seconds, workers, o.early_stopping.c_str(), codes.empty() ? "none" : codes.c_str(),
        refused_late, unclean, rest_status_full, recovered ? 1 : 0, recovery_ms, rec.report_lines,
        rec.completions.size(), dropped, lost, stuck);
    if (!rest_clean)
      std::fprintf(stderr, "soak: disk phase: REST write while full: %d %s\n", rest_status_full,
                   rest_body_full.c_str());
    std::fflush(stdout);
    server.Stop(SIGTERM);
    if (lost != 0 || stuck != 0 || unclean != 0 || !rest_clean || !recovered) {
      return Status::Internal("the full-disk phase failed its checks; logs in " + o.dir);
    }
  }
  return Status::OK();
}

}  // namespace
}  // namespace hpo::bench

int main(int argc, char** argv) {
  hpo::TurnOffMutexDeadlockDetection();  // as hpo-worker does
  using namespace hpo::bench;
  CLI::App app{
      "bench/soak: faults at random under load, then a check that nothing acknowledged was lost"};
  SoakOptions o;
  o.server_bin = HPO_SERVER_BIN;
  bool child = false;
  std::string address, record;
  app.add_option("--minutes", o.minutes, "the soak on PostgreSQL; 0: only the full-disk phase")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--workers", o.workers, "simulated workers")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--workers-per-process", o.workers_per_process,
                 "simulated workers per process (a kill or stop takes one process)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--rest-clients", o.rest_clients)->capture_default_str();
  app.add_option("--fault-min-s", o.fault_min_s, "shortest time between faults")
      ->capture_default_str();
  app.add_option("--fault-max-s", o.fault_max_s, "longest time between faults")
      ->capture_default_str();
  app.add_option("--lease-timeout", o.lease_timeout_s, "seconds")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--steps", o.steps, "reports per trial")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--step-ms", o.step_ms, "time a simulated step takes")->capture_default_str();
  app.add_option("--trials-per-experiment", o.trials_per_experiment,
                 "each experiment's trial budget; the next starts when one ends (0: one endless "
                 "experiment)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--early-stopping", o.early_stopping, "ASHA's type")
      ->capture_default_str()
      ->check(CLI::IsMember({"promotion", "stop"}));
  app.add_option("--disk-seconds", o.disk_seconds,
                 "the full-disk phase on SQLite after the soak; 0: none")
      ->capture_default_str();
  app.add_option("--dir", o.dir,
                 "scratch directory (default: a new one under /tmp, removed on success)");
  app.add_option("--server-bin", o.server_bin)->capture_default_str();
  app.add_flag("-v,--verbose", o.verbose, "one line per fault on stderr");
  // The worker processes this program starts run it again with these.
  app.add_flag("--child", child)->group("");
  app.add_option("--address", address)->group("");
  app.add_option("--record", record)->group("");
  CLI11_PARSE(app, argc, argv);
  if (child) return RunChild(address, o.workers, o.step_ms, o.steps, record);
  if (o.fault_min_s < 1 || o.fault_max_s < o.fault_min_s) {
    std::fprintf(stderr, "soak: --fault-min-s must be at least 1 and at most --fault-max-s\n");
    return 2;
  }
  const bool own_dir = o.dir.empty();
  if (own_dir) {
    char tmpl[] = "/tmp/hpo-soak-XXXXXX";
    o.dir = mkdtemp(tmpl);
  }
  std::filesystem::create_directories(o.dir);
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  hpo::Status s = o.minutes > 0 ? Soak(o, self) : hpo::Status::OK();
  if (s.ok() && o.disk_seconds > 0) s = DiskPhase(o);
  if (!s.ok()) {
    std::fprintf(stderr, "soak: %s\n", s.ToString().c_str());
    return 1;
  }
  if (own_dir) std::filesystem::remove_all(o.dir);
  return 0;
}
