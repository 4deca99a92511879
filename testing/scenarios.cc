#include "testing/scenarios.h"

#include <signal.h>
#include <spdlog/fmt/fmt.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include "common/sha256.h"
#include "server/store/artifact_store.h"
#include "testing/harness.h"

namespace hpo::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

void Progress(const Setup& setup, const std::string& line) {
  if (setup.verbose) std::fprintf(stderr, "bench: %s\n", line.c_str());
}

std::string StoreUrl(const Setup& setup) {
  return setup.store_url.empty() ? "sqlite://" + setup.dir + "/hpo.db" : setup.store_url;
}

// A command experiment: each trial runs /bin/sh printing one metric line
// per step after sleeping `step_seconds`.
std::string CommandSpec(const std::string& name, int max_trials, int max_parallel, int steps,
                        double step_seconds) {
  const std::string script =
      fmt::format("for s in $(seq 1 {}); do sleep {}; echo \"hpo: step=$s loss={{x}}\"; done",
                  steps, step_seconds);
  json spec = {
      {"name", name},
      {"objective", {{"metric", "loss"}}},
      {"spaces",
       {{{"name", "s"}, {"params", {{"x", {{"type", "float"}, {"low", 0}, {"high", 1}}}}}}}},
      {"algorithm", {{"sampler", "random"}, {"seed", 1}}},
      {"early_stopping", {{"rule", "none"}}},  // every trial runs to its end
      {"budget",
       {{"max_trials", max_trials}, {"max_parallel", max_parallel}, {"steps_per_trial", steps}}},
      {"executor", {{"command", {{"argv", {"/bin/sh", "-c", script}}, {"timeout_s", 600}}}}}};
  return spec.dump();
}

// An experiment for simulated workers (they ignore the executor).
std::string SimSpec(const std::string& name, int max_trials, int max_parallel, int steps,
                    const std::string& sampler, const std::string& early_stopping) {
  json spec = {
      {"name", name},
      {"objective", {{"metric", "loss"}}},
      {"spaces",
       {{{"name", "s"},
         {"params",
          {{"x", {{"type", "float"}, {"low", 0}, {"high", 1}}},
           {"y", {{"type", "float"}, {"low", 1e-4}, {"high", 1}, {"log", true}}},
           {"k", {{"type", "int"}, {"low", 1}, {"high", 8}}}}}}}},
      {"algorithm", {{"sampler", sampler}, {"seed", 1}}},
      {"early_stopping", {{"rule", early_stopping}}},
      {"budget",
       {{"max_trials", max_trials}, {"max_parallel", max_parallel}, {"steps_per_trial", steps}}},
      {"executor", {{"builtin", {{"trainer", "fashion-mnist-mlp"}}}}}};
  return spec.dump();
}

// An hpo-worker labelled slot=`label`, logging to worker-<label>.log; in
// `cgroup` when given, with `env` ("NAME=value") set when not empty.
pid_t StartWorker(const Setup& setup, const std::string& grpc, const std::string& label,
                  int heartbeat_ms, const CpuCgroup* cgroup = nullptr,
                  const std::string& env = "") {
  std::vector<std::string> argv;
  if (!env.empty()) argv = {"/usr/bin/env", env};
  argv.insert(argv.end(), {setup.worker_bin, "--server", grpc, "--device", "cpu", "--threads", "1",
                           "--benchmark-seconds", "0.05", "--heartbeat-ms",
                           std::to_string(heartbeat_ms), "--labels", "slot=" + label});
  std::function<bool()> in_child;
  if (cgroup != nullptr) in_child = [cgroup] { return cgroup->Enter(); };
  return Spawn(argv, setup.dir + "/worker-" + label + ".log", in_child);
}

Result<json> GetTrial(uint16_t port, int64_t id) {
  return RestCall(port, "GET", "/api/v1/trials/" + std::to_string(id));
}

Result<std::string> ExperimentState(uint16_t port, int64_t id) {
  HPO_ASSIGN_OR_RETURN(json e, RestCall(port, "GET", "/api/v1/experiments/" + std::to_string(id)));
  return e.value("state", "");
}

// Waits up to `timeout` for the experiment to leave "running".
Result<std::string> WaitForEnd(uint16_t port, int64_t id, milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  for (;;) {
    HPO_ASSIGN_OR_RETURN(std::string state, ExperimentState(port, id));
    if (state != "running" || Clock::now() >= until) return state;
    std::this_thread::sleep_for(milliseconds(100));
  }
}

Result<json> Trials(uint16_t port, int64_t experiment, const std::string& query = "") {
  HPO_ASSIGN_OR_RETURN(json j, RestCall(port, "GET",
                                        "/api/v1/experiments/" + std::to_string(experiment) +
                                            "/trials?limit=10000" + query));
  return j["trials"];
}

}  // namespace

Result<AckCheck> CheckAcknowledged(uint16_t port,
                                   const std::map<int64_t, std::map<int64_t, double>>& reports,
                                   const std::map<int64_t, double>& completions) {
  AckCheck r;
  auto same = [](double stored, double sent) {
    return std::abs(stored - sent) <= 1e-9 * std::max(1.0, std::abs(sent));
  };
  std::set<int64_t> trials;
  for (const auto& [trial, steps] : reports) trials.insert(trial);
  for (const auto& [trial, loss] : completions) trials.insert(trial);
  for (const int64_t trial : trials) {
    HPO_ASSIGN_OR_RETURN(json t, GetTrial(port, trial));
    if (auto it = reports.find(trial); it != reports.end()) {
      std::map<int64_t, double> stored;
      for (const auto& m : t["measurements"]) {
        if (m["metrics"].contains("loss"))
          stored[m["step"].get<int64_t>()] = m["metrics"]["loss"].get<double>();
      }
      for (const auto& [step, loss] : it->second) {
        auto at = stored.find(step);
        if (at != stored.end() && same(at->second, loss)) continue;
        ++r.lost_reports;
        if (r.samples.size() < 5) {
          r.samples.push_back(fmt::format(
              "trial {} step {}: sent {}, stored {}", trial, step, loss,
              at == stored.end() ? std::string("nothing") : std::to_string(at->second)));
        }
      }
    }
    if (auto it = completions.find(trial); it != completions.end()) {
      const json& final_metrics = t["final_metrics"];
      const bool kept = t.value("state", "") == "completed" && final_metrics.is_object() &&
                        final_metrics.contains("loss") &&
                        same(final_metrics["loss"].get<double>(), it->second);
      if (kept) continue;
      ++r.lost_completions;
      if (r.samples.size() < 5) {
        r.samples.push_back(fmt::format("trial {}: completed with {}, stored {} {}", trial,
                                        it->second, t.value("state", ""), final_metrics.dump()));
      }
    }
  }
  return r;
}

// (a) -------------------------------------------------------------------------------

Result<WorkerKillResult> KillWorkers(const Setup& setup, const WorkerKillOptions& o) {
  if (setup.worker_bin.empty()) return Status::FailedPrecondition("KillWorkers needs hpo-worker");
  ServerProcess server(
      setup.server_bin, setup.dir + "/server",
      {"--store", StoreUrl(setup), "--lease-timeout", std::to_string(o.lease_timeout_s)});
  HPO_RETURN_IF_ERROR(server.Start());
  const uint16_t port = server.http_port();
  // Enough trials for the kills to find running ones until the last; each
  // trial takes at most 3 kills (max attempts) before it fails.
  HPO_ASSIGN_OR_RETURN(const int64_t id,
                       CreateExperiment(port, CommandSpec("kill-workers", o.kills + 2 * o.workers,
                                                          o.workers, o.steps, o.step_ms / 1000.0)));

  // Worker processes by slot label; whatever is left is killed on return.
  struct Alive : std::map<std::string, pid_t> {
    ~Alive() {
      for (auto& [slot, pid] : *this) KillAndReap(pid);
    }
  } alive;
  int next_slot = 0;
  auto spawn = [&] {
    const std::string slot = std::to_string(next_slot++);
    alive[slot] = StartWorker(setup, server.grpc_address(), slot, 500);
  };
  for (int i = 0; i < o.workers; ++i) spawn();

  struct Killed {
    int64_t trial;
    int attempt;
    Clock::time_point at;
    bool requeued = false;
  };
  std::vector<Killed> outstanding;
  WorkerKillResult r;
  std::mt19937 rng(7);
  const milliseconds trial_time(int64_t{o.steps} * o.step_ms);
  const milliseconds give_up(int64_t{o.lease_timeout_s} * 3000 + 10'000);
  auto next_kill = Clock::now();
  const auto deadline = Clock::now() + seconds(60) + (trial_time + seconds(5)) * o.kills;
  while ((r.kills < o.kills || !outstanding.empty()) && Clock::now() < deadline) {
    // Follow the killed trials until their next lease.
    for (auto it = outstanding.begin(); it != outstanding.end();) {
      HPO_ASSIGN_OR_RETURN(json t, GetTrial(port, it->trial));
      const std::string state = t.value("state", "");
      const int attempt = t.value("attempt", 0);
      const double ms = MsSince(it->at);
      if (!it->requeued && (state == "pending" || state == "failed" || attempt > it->attempt)) {
        it->requeued = true;
        r.requeue_ms.push_back(ms);
      }
      if (attempt > it->attempt || state == "failed") {
        if (attempt > it->attempt) r.release_ms.push_back(ms);
        it = outstanding.erase(it);
      } else if (Clock::now() - it->at > give_up) {
        ++r.not_requeued;
        it = outstanding.erase(it);
      } else {
        ++it;
      }
    }
    if (r.kills < o.kills && Clock::now() >= next_kill) {
      HPO_ASSIGN_OR_RETURN(json workers, RestCall(port, "GET", "/api/v1/workers"));
      std::vector<std::pair<std::string, json>>
          candidates;  // (slot, trial) in the middle of a trial
      for (const auto& w : workers["workers"]) {
        const std::string slot = w["labels"].value("slot", "");
        if (!alive.count(slot)) continue;
        for (const auto& t : w["current_trials"]) {
          const int64_t trial = t["trial_id"];
          const bool followed = std::any_of(outstanding.begin(), outstanding.end(),
                                            [&](const Killed& k) { return k.trial == trial; });
          if (t.value("state", "") == "running" && !followed) candidates.emplace_back(slot, t);
        }
      }
      if (!candidates.empty()) {
        const auto& [slot, t] = candidates[rng() % candidates.size()];
        HPO_ASSIGN_OR_RETURN(json trial, GetTrial(port, t["trial_id"].get<int64_t>()));
        KillAndReap(alive[slot]);
        outstanding.push_back(
            {trial["id"].get<int64_t>(), trial.value("attempt", 0), Clock::now()});
        alive.erase(slot);
        ++r.kills;
        Progress(setup, fmt::format("killed worker {} in trial {} (attempt {})", slot,
                                    outstanding.back().trial, outstanding.back().attempt));
        spawn();
        // The next kill lands at another point of some trial.
        next_kill = Clock::now() + milliseconds(rng() % (trial_time.count() / 2 + 1));
      } else {
        HPO_ASSIGN_OR_RETURN(std::string state, ExperimentState(port, id));
        if (state != "running") break;  // out of trials before the last kill
      }
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  r.not_requeued += static_cast<int>(outstanding.size());

  HPO_ASSIGN_OR_RETURN(
      r.experiment_state,
      WaitForEnd(port, id, (trial_time + seconds(o.lease_timeout_s)) * (o.kills + 2)));
  HPO_ASSIGN_OR_RETURN(json trials, Trials(port, id));
  for (const auto& t : trials) {
    ++r.trials;
    const std::string state = t.value("state", "");
    if (state == "completed") {
      ++r.completed;
    } else if (state == "failed") {
      ++r.failed;
    } else {
      ++r.unfinished;
    }
    r.max_attempt = std::max(r.max_attempt, t.value("attempt", 0));
  }
  return r;
}

// (b) -------------------------------------------------------------------------------

Result<ServerKillResult> KillServer(const Setup& setup, const ServerKillOptions& o) {
  // A long lease: the restarts must not cost a worker its lease, so every
  // acknowledged report stays (an expired lease drops its attempt's steps).
  ServerProcess server(setup.server_bin, setup.dir + "/server",
                       {"--store", StoreUrl(setup), "--lease-timeout", "600"});
  HPO_RETURN_IF_ERROR(server.Start());
  // Room for leases the kills orphan (granted, but the answer was lost).
  HPO_RETURN_IF_ERROR(CreateExperiment(server.http_port(),
                                       SimSpec("kill-server", 1'000'000,
                                               4 * o.workers + 4 * o.kills, 5, "random", "none"))
                          .status());
  FleetOptions fo;
  fo.address = server.grpc_address();
  fo.workers = o.workers;
  fo.deadline = milliseconds(5000);
  SimFleet fleet(fo);
  fleet.Start();

  ServerKillResult r;
  std::mt19937 rng(11);
  auto restarted = Clock::now();
  auto kill_and_restart = [&]() -> Status {
    const auto killed = Clock::now();
    server.Stop(SIGKILL);
    HPO_RETURN_IF_ERROR(server.Start());
    r.restart_ms.push_back(MsSince(killed));
    restarted = Clock::now();
    if (fleet.WaitForReportAfter(killed, seconds(30))) r.recovery_ms.push_back(MsSince(killed));
    return Status::OK();
  };
  for (int k = 0; k < o.kills; ++k) {
    // Let reports flow after the restart, then kill at a random moment.
    if (!fleet.WaitForReportAfter(restarted, seconds(30))) {
      return Status::DeadlineExceeded("no report was acknowledged within 30 s of a restart; see " +
                                      server.log_path());
    }
    const auto uptime =
        std::uniform_int_distribution<int64_t>(o.min_uptime.count(), o.max_uptime.count())(rng);
    std::this_thread::sleep_for(milliseconds(uptime));
    HPO_RETURN_IF_ERROR(kill_and_restart());
    ++r.kills;
    Progress(setup, fmt::format("server kill {}: back in {:.0f} ms", r.kills, r.restart_ms.back()));
  }
  std::this_thread::sleep_for(o.min_uptime);
  fleet.Stop();
  // The reports acknowledged last must survive a crash too.
  server.Stop(SIGKILL);
  HPO_RETURN_IF_ERROR(server.Start());

  const FleetStats stats = fleet.Snapshot();
  r.acked_reports = stats.acked_reports;
  r.trials_completed = stats.trials_completed;
  r.rpc_errors = stats.errors;
  HPO_ASSIGN_OR_RETURN(AckCheck lost, CheckAcknowledged(server.http_port(), stats.acked));
  r.lost_reports = lost.lost_reports;
  r.lost_samples = lost.samples;
  return r;
}

// (b') ------------------------------------------------------------------------------

Result<ServerKillWorkersResult> KillServerWorkers(const Setup& setup,
                                                  const ServerKillWorkersOptions& o) {
  if (setup.worker_bin.empty())
    return Status::FailedPrecondition("KillServerWorkers needs hpo-worker");
  // A long lease, as in KillServer: a restart must not cost a worker its
  // lease, so the trials it runs through the kills complete.
  ServerProcess server(setup.server_bin, setup.dir + "/server",
                       {"--store", StoreUrl(setup), "--lease-timeout", "600"});
  HPO_RETURN_IF_ERROR(server.Start());
  HPO_ASSIGN_OR_RETURN(
      const int64_t id,
      CreateExperiment(server.http_port(), CommandSpec("kill-server-workers", 1'000'000, o.workers,
                                                       o.steps, o.step_ms / 1000.0)));
  struct Alive : std::vector<pid_t> {
    ~Alive() {
      for (pid_t pid : *this) KillAndReap(pid);
    }
  } workers;
  for (int i = 0; i < o.workers; ++i) {
    workers.push_back(StartWorker(setup, server.grpc_address(), std::to_string(i), 500));
  }
  auto epoch_ms = [] {
    return std::chrono::duration_cast<milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  // By lease owner: the first report the store holds made at or after
  // `since_ms` (by the server's clock, the same machine's).
  auto first_reports = [&](int64_t since_ms) -> Result<std::map<std::string, int64_t>> {
    HPO_ASSIGN_OR_RETURN(json trials, Trials(server.http_port(), id));
    std::map<std::string, int64_t> first;
    for (const auto& t : trials) {
      const bool finished_since =
          t["finished_ms"].is_number() && t["finished_ms"].get<int64_t>() >= since_ms;
      const bool current = t.value("state", "") == "running" || finished_since;
      if (!current || !t["lease_owner"].is_string()) continue;
      HPO_ASSIGN_OR_RETURN(json full, GetTrial(server.http_port(), t["id"].get<int64_t>()));
      const std::string owner = t["lease_owner"].get<std::string>();
      for (const auto& m : full["measurements"]) {
        const int64_t at = m["created_ms"].is_number() ? m["created_ms"].get<int64_t>() : 0;
        if (at < since_ms) continue;
        auto [it, fresh] = first.emplace(owner, at);
        if (!fresh) it->second = std::min(it->second, at);
      }
    }
    return first;
  };
  // Waits until every worker has a report stored since `since_ms`; the
  // times by owner, or fewer than o.workers entries after `timeout`.
  auto wait_for_all = [&](int64_t since_ms,
                          milliseconds timeout) -> Result<std::map<std::string, int64_t>> {
    const auto until = Clock::now() + timeout;
    for (;;) {
      HPO_ASSIGN_OR_RETURN(auto first, first_reports(since_ms));
      if (static_cast<int>(first.size()) >= o.workers || Clock::now() >= until) return first;
      std::this_thread::sleep_for(milliseconds(20));
    }
  };

  ServerKillWorkersResult r;
  HPO_ASSIGN_OR_RETURN(auto started, wait_for_all(epoch_ms(), seconds(60)));
  if (static_cast<int>(started.size()) < o.workers) {
    return Status::DeadlineExceeded("not every worker reported within 60 s of the start; see " +
                                    setup.dir);
  }
  std::mt19937 rng(13);
  for (int k = 0; k < o.kills; ++k) {
    std::this_thread::sleep_for(milliseconds(
        std::uniform_int_distribution<int64_t>(o.min_uptime.count(), o.max_uptime.count())(rng)));
    const auto killed = Clock::now();
    const int64_t killed_ms = epoch_ms();
    server.Stop(SIGKILL);
    HPO_RETURN_IF_ERROR(server.Start());
    r.restart_ms.push_back(MsSince(killed));
    ++r.kills;
    HPO_ASSIGN_OR_RETURN(auto first, wait_for_all(killed_ms, seconds(30)));
    double slowest = 0;
    for (const auto& [owner, at] : first) {
      r.worker_recovery_ms.push_back(static_cast<double>(at - killed_ms));
      slowest = std::max(slowest, r.worker_recovery_ms.back());
    }
    if (static_cast<int>(first.size()) < o.workers) {
      ++r.not_recovered;
    } else {
      r.fleet_recovery_ms.push_back(slowest);
    }
    Progress(
        setup,
        fmt::format("server kill {}: listening in {:.0f} ms, {} of {} workers reporting, the last "
                    "after {:.0f} ms",
                    r.kills, r.restart_ms.back(), first.size(), o.workers, slowest));
  }
  for (pid_t& pid : workers) {
    KillAndReap(pid);
  }
  workers.clear();
  HPO_ASSIGN_OR_RETURN(json trials, Trials(server.http_port(), id));
  for (const auto& t : trials) {
    const std::string state = t.value("state", "");
    r.trials_completed += state == "completed";
    r.trials_failed += state == "failed";
  }
  return r;
}

// (c) -------------------------------------------------------------------------------

Result<PostgresRestartResult> RestartPostgres(const Setup& setup, const PostgresRestartOptions& o) {
  HPO_ASSIGN_OR_RETURN(auto pg, PostgresInstance::Create());
  ServerProcess server(setup.server_bin, setup.dir + "/server",
                       {"--store", pg->Url(), "--lease-timeout", "600"});
  HPO_RETURN_IF_ERROR(server.Start());
  HPO_RETURN_IF_ERROR(
      CreateExperiment(server.http_port(),
                       SimSpec("restart-postgres", 1'000'000, 4 * o.workers, 5, "random", "none"))
          .status());
  FleetOptions fo;
  fo.address = server.grpc_address();
  fo.workers = o.workers;
  fo.deadline = o.bound;
  fo.heartbeat = true;
  SimFleet fleet(fo);
  RestLoadOptions ro;
  ro.port = server.http_port();
  ro.clients = o.rest_clients;
  ro.timeout = o.bound;
  ro.pause = milliseconds(50);
  RestLoad rest(ro);
  fleet.Start();
  rest.Start();

  PostgresRestartResult r;
  if (!fleet.WaitForReportAfter(Clock::now(), seconds(30))) {
    return Status::DeadlineExceeded("no report acknowledged before the first restart; see " +
                                    server.log_path());
  }
  for (int k = 0; k < o.restarts; ++k) {
    std::this_thread::sleep_for(o.up);
    HPO_RETURN_IF_ERROR(pg->Stop());
    std::this_thread::sleep_for(o.down);
    HPO_RETURN_IF_ERROR(pg->Start());
    const auto back = Clock::now();
    ++r.restarts;
    if (fleet.WaitForReportAfter(back, o.bound + o.up)) {
      ++r.recovered;
      r.recovery_ms.push_back(MsSince(back));
    }
    Progress(setup, fmt::format("postgres restart {}: reports again after {:.0f} ms", r.restarts,
                                r.recovery_ms.empty() ? -1.0 : r.recovery_ms.back()));
  }
  std::this_thread::sleep_for(o.up);
  fleet.Stop();
  rest.Stop();
  r.server_survived = !WaitExit(server.pid(), milliseconds(0)).has_value();

  const FleetStats fs = fleet.Snapshot();
  const RestStats rs = rest.Snapshot();
  r.rpcs = fs.rpcs;
  r.rest_calls = rs.calls;
  r.rpc_errors = fs.errors;
  r.rest_errors = rs.errors;
  r.error_samples = rs.error_samples;
  for (const auto& [code, n] : fs.errors) {
    if (code == "DEADLINE_EXCEEDED") {
      r.hung += n;
    } else if (code != "UNAVAILABLE") {
      r.unclean_errors += n;
    }
  }
  for (const auto& [kind, n] : rs.errors) {
    if (kind == "DeadlineExceeded") {
      r.hung += n;
    } else if (kind != "503") {
      r.unclean_errors += n;
    }
  }
  for (double ms : fs.latency_ms) r.max_rpc_ms = std::max(r.max_rpc_ms, ms);
  for (double ms : rs.latency_ms) r.max_rest_ms = std::max(r.max_rest_ms, ms);
  r.acked_reports = fs.acked_reports;
  if (r.server_survived) {
    HPO_ASSIGN_OR_RETURN(AckCheck lost, CheckAcknowledged(server.http_port(), fs.acked));
    r.lost_reports = lost.lost_reports;
  }
  return r;
}

// (d) -------------------------------------------------------------------------------

Result<SlowWorkerResult> SlowWorker(const Setup& setup, const SlowWorkerOptions& o) {
  if (setup.worker_bin.empty()) return Status::FailedPrecondition("SlowWorker needs hpo-worker");
  ServerProcess server(
      setup.server_bin, setup.dir + "/server",
      {"--store", StoreUrl(setup), "--lease-timeout", std::to_string(o.lease_timeout_s)});
  HPO_RETURN_IF_ERROR(server.Start());
  const uint16_t port = server.http_port();
  const milliseconds lease(int64_t{o.lease_timeout_s} * 1000);
  const pid_t worker = StartWorker(setup, server.grpc_address(), "slow", o.heartbeat_ms);
  struct Reap {
    pid_t pid;
    ~Reap() {
      ::kill(pid, SIGCONT);
      KillAndReap(pid);
    }
  } reap{worker};
  SlowWorkerResult r;

  // One step three lease timeouts long: only heartbeats keep the lease.
  {
    json spec = json::parse(CommandSpec("long-step", 1, 1, 2, 0));
    spec["executor"]["command"]["argv"][2] =
        fmt::format("sleep {}; echo 'hpo: step=1 loss={{x}}'; echo 'hpo: step=2 loss={{x}}'",
                    3 * o.lease_timeout_s);
    HPO_ASSIGN_OR_RETURN(const int64_t id, CreateExperiment(port, spec.dump()));
    const auto start = Clock::now();
    HPO_RETURN_IF_ERROR(WaitForEnd(port, id, 6 * lease + seconds(30)).status());
    r.long_step_s = MsSince(start) / 1000;
    HPO_ASSIGN_OR_RETURN(json trials, Trials(port, id));
    if (trials.size() == 1) {
      r.long_step_state = trials[0].value("state", "");
      r.long_step_attempts = trials[0].value("attempt", 0);
    }
    Progress(setup, fmt::format("long step: trial {} after {:.1f} s, attempt {}", r.long_step_state,
                                r.long_step_s, r.long_step_attempts));
  }

  // Paused for less than the lease, once per trial, in the middle of it.
  // The lease was renewed at most one heartbeat before the SIGSTOP.
  const milliseconds pause = lease - 2 * milliseconds(o.heartbeat_ms);
  r.pause_ms = static_cast<double>(pause.count());
  if (o.pauses > 0) {
    HPO_ASSIGN_OR_RETURN(const int64_t id,
                         CreateExperiment(port, CommandSpec("paused", o.pauses, 1, 4, 0.5)));
    std::set<int64_t> paused;
    const auto until = Clock::now() + (pause + seconds(10)) * o.pauses;
    while (static_cast<int>(paused.size()) < o.pauses && Clock::now() < until) {
      HPO_ASSIGN_OR_RETURN(json running, Trials(port, id, "&state=running"));
      if (!running.empty() && !paused.count(running[0]["id"].get<int64_t>())) {
        paused.insert(running[0]["id"].get<int64_t>());
        ::kill(worker, SIGSTOP);
        std::this_thread::sleep_for(pause);
        ::kill(worker, SIGCONT);
        ++r.pauses;
      }
      std::this_thread::sleep_for(milliseconds(50));
    }
    HPO_RETURN_IF_ERROR(WaitForEnd(port, id, seconds(60)).status());
    HPO_ASSIGN_OR_RETURN(json trials, Trials(port, id));
    for (const auto& t : trials) {
      ++r.paused_trials;
      if (t.value("state", "") == "completed") ++r.paused_completed;
      r.paused_max_attempt = std::max(r.paused_max_attempt, t.value("attempt", 0));
    }
    Progress(setup,
             fmt::format("{} pauses of {} ms: {}/{} trials completed, max attempt {}", r.pauses,
                         pause.count(), r.paused_completed, r.paused_trials, r.paused_max_attempt));
  }

  // The control: stopped until its lease expired and the trial went back
  // to pending; after SIGCONT the worker learns it lost the lease, and the
  // trial runs again (attempt 2) to completion.
  if (o.control) {
    HPO_ASSIGN_OR_RETURN(const int64_t id,
                         CreateExperiment(port, CommandSpec("control", 1, 1, 4, 0.5)));
    int64_t trial = 0;
    for (auto until = Clock::now() + seconds(30); trial == 0 && Clock::now() < until;) {
      HPO_ASSIGN_OR_RETURN(json running, Trials(port, id, "&state=running"));
      if (!running.empty()) trial = running[0]["id"];
      std::this_thread::sleep_for(milliseconds(50));
    }
    if (trial != 0) {
      ::kill(worker, SIGSTOP);
      for (auto until = Clock::now() + 2 * lease + seconds(10); Clock::now() < until;) {
        HPO_ASSIGN_OR_RETURN(json t, GetTrial(port, trial));
        if (t.value("state", "") == "pending") break;
        std::this_thread::sleep_for(milliseconds(100));
      }
      ::kill(worker, SIGCONT);
    }
    HPO_RETURN_IF_ERROR(WaitForEnd(port, id, seconds(60)).status());
    HPO_ASSIGN_OR_RETURN(json trials, Trials(port, id));
    if (trials.size() == 1) {
      r.control_state = trials[0].value("state", "");
      r.control_attempts = trials[0].value("attempt", 0);
    }
    Progress(setup, fmt::format("control: trial {} with {} attempts", r.control_state,
                                r.control_attempts));
  }
  return r;
}

// (e) -------------------------------------------------------------------------------

namespace {

// The checkpoint a simulated worker saves of (trial, step): bytes that only
// this pair gives, so a resumed trial can tell its own state from anything
// else (another trial's, another step's, a torn file).
std::string CheckpointBytes(int64_t trial, int64_t step, int64_t size) {
  std::string s = fmt::format("trial={} step={};", trial, step);
  std::mt19937_64 rng(static_cast<uint64_t>(trial) * 1'000'003u + static_cast<uint64_t>(step));
  while (static_cast<int64_t>(s.size()) < size) {
    const uint64_t v = rng();
    s.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  s.resize(static_cast<size_t>(size));
  return s;
}

// What is wrong with the trial's checkpoint in the artifact store, read the
// way the server reads it (the reader verifies size and checksum), if it is
// not the one uploaded for `step`; empty when it is.
std::string CheckStoredCheckpoint(store::ArtifactStore& artifacts, int64_t trial, int64_t step,
                                  int64_t size) {
  auto info = artifacts.Stat(trial);
  if (!info.ok()) return "stat: " + info.status().ToString();
  if (!*info) return "no checkpoint";
  if ((*info)->step != step)
    return fmt::format("a checkpoint of step {}, not {}", (*info)->step, step);
  auto reader = artifacts.Open(trial);
  if (!reader.ok()) return "open: " + reader.status().ToString();
  std::string data;
  for (;;) {
    auto piece = (*reader)->Read(size_t{1} << 20);
    if (!piece.ok()) return "read: " + piece.status().ToString();
    if (piece->empty()) break;
    data += *piece;
  }
  if (data != CheckpointBytes(trial, step, size))
    return fmt::format("{} bytes, not the ones uploaded", data.size());
  if ((*info)->sha256 != Sha256Hex(data)) return "its recorded sha256 does not match its bytes";
  return "";
}

// The simulated fleet of the promotion scenario: threads, each a worker that
// leases, reports, pauses with a checkpoint and resumes promoted trials.
class PromotionFleet {
 public:
  PromotionFleet(const Setup& setup, const PromotionOptions& o, std::string address,
                 store::ArtifactStore& artifacts)
      : setup_(setup), o_(o), address_(std::move(address)), artifacts_(artifacts) {}
  ~PromotionFleet() { Stop(); }

  void Start() {
    for (int i = 0; i < o_.workers; ++i) threads_.emplace_back([this, i] { Run(i); });
  }
  // No new leases; each worker ends the segment it is in (a pause or a
  // completion), so nothing it was acknowledged is left to a lease expiry.
  void Stop() {
    stop_ = true;
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  // The next worker that resumed a trial and reaches its next rung dies in
  // the middle of that checkpoint's upload.
  void AllowCut() { ++cuts_allowed_; }
  int cuts() const { return cuts_done_; }
  // Cut trials not leased again since their cut.
  int cuts_not_leased_again() const {
    std::lock_guard lock(mu_);
    return static_cast<int>(cut_from_.size());
  }
  Clock::time_point last_cut() const {
    std::lock_guard lock(mu_);
    return last_cut_;
  }
  bool WaitForReportAfter(Clock::time_point since, milliseconds timeout) const {
    for (const auto until = Clock::now() + timeout; Clock::now() < until;) {
      {
        std::lock_guard lock(mu_);
        if (last_ok_ > since) return true;
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    return false;
  }

  // Read after Stop().
  std::map<int64_t, std::map<int64_t, std::pair<double, int>>>
      acked_;  // trial -> step -> (loss, lease)
  std::set<int64_t> completed_, trials_;
  std::map<int64_t, int64_t>
      last_pause_;  // trial -> the step its last acknowledged Pause was after
  PromotionResult r_;

 private:
  void Sample(const std::string& what) {
    if (r_.samples.size() < 8) r_.samples.push_back(what);
  }
  // Calls `rpc` until it returns something IsRetryable refuses (the server
  // may be restarting), as hpo-worker does, for at most a minute.
  grpc::Status Call(const char* what, const std::function<grpc::Status()>& rpc) {
    const auto until = Clock::now() + seconds(60);
    for (int aborted = 0;;) {
      grpc::Status s = rpc();
      if (s.ok()) return s;
      {
        std::lock_guard lock(mu_);
        ++r_.rpc_errors[CodeName(s.error_code())];
      }
      const Status status = FromGrpcStatus(s);
      const bool retry =
          IsRetryable(status) && !(status.IsAborted() && ++aborted >= kMaxAbortedAttempts);
      if (!retry || Clock::now() >= until) {
        std::lock_guard lock(mu_);
        Sample(fmt::format("{}: {}: {}", what, CodeName(s.error_code()), s.error_message()));
        return s;
      }
      std::this_thread::sleep_for(milliseconds(100));
    }
  }
  // The lease of `trial`'s segment that resumed after `resume` ended
  // without its worker: the server keeps nothing reported after `resume`.
  // `lease` is the segment's number among the trial's leases: a later
  // segment (the trial promoted again meanwhile) keeps what it reported.
  void Dropped(int64_t trial, int64_t resume, int lease) {  // REQUIRES: mu_ held
    auto& steps = acked_[trial];
    for (auto it = steps.upper_bound(resume); it != steps.end();) {
      if (it->second.second != lease) {
        ++it;
        continue;
      }
      ++r_.dropped_reports;
      it = steps.erase(it);
    }
    // It goes back to paused there, with that step's checkpoint, unless it
    // was already handed out again.
    if (resume > 0 && leases_[trial] == lease) last_pause_[trial] = uploaded_[trial] = resume;
  }

  void Run(int index) {
    int lives = 0;
    auto w = std::make_unique<SimWorker>(address_, milliseconds(5000));
    auto enroll = [&] {
      return Call("register", [&] { return w->Register(fmt::format("sim-{}-{}", index, lives)); })
          .ok();
    };
    if (!enroll()) return;
    std::mt19937 rng(static_cast<unsigned>(index));
    while (!stop_) {
      v1::LeaseResponse leased;
      if (!Call("lease", [&] { return w->Lease(&leased); }).ok()) {
        std::this_thread::sleep_for(milliseconds(100));
        continue;
      }
      if (!leased.has_trial()) {
        std::this_thread::sleep_for(
            milliseconds(std::clamp<int64_t>(leased.retry_after_ms(), 20, 500)));
        continue;
      }
      const v1::Trial& t = leased.trial();
      const int64_t trial = t.trial_id();
      int64_t resume = t.resume_step();
      const json params = json::parse(t.params_json(), nullptr, false);
      const double x = params.is_object() ? params.value("x", 0.5) : 0.5;
      int lease = 0;  // this one's number among the trial's leases
      {
        std::lock_guard lock(mu_);
        trials_.insert(trial);
        if (resume > 0) ++r_.promotions;
        auto cut = cut_from_.find(trial);
        if (cut != cut_from_.end()) {
          if (resume == cut->second) {
            ++r_.cut_resumed;
          } else {
            ++r_.cut_wrong_resumes;
            Sample(fmt::format("trial {}, cut while uploading after step {}, resumed after step {}",
                               trial, cut->second, resume));
          }
          cut_from_.erase(cut);
        }
        r_.max_resume_step = std::max(r_.max_resume_step, resume);
        // The checkpoint it must resume from: the last one acknowledged. (An
        // acknowledged Pause may come back after the trial was promoted; the
        // upload always comes back before.)
        auto uploaded = uploaded_.find(trial);
        if (uploaded != uploaded_.end() && resume == 0) {
          ++r_.restarted;
          Sample(
              fmt::format("trial {} paused with a checkpoint of step {} was handed out from step 0",
                          trial, uploaded->second));
        } else if (uploaded != uploaded_.end() && resume != uploaded->second) {
          ++r_.bad_resumes;
          Sample(fmt::format("trial {} resumed after step {}, but its checkpoint is of step {}",
                             trial, resume, uploaded->second));
        }
        if (uploaded != uploaded_.end()) uploaded_.erase(uploaded);
        last_pause_.erase(trial);
        lease = ++leases_[trial];
      }

      if (resume > 0) {
        std::string data, sha;
        int64_t step = -1;
        grpc::Status s =
            Call("download", [&] { return w->DownloadCheckpoint(trial, &data, &step, &sha); });
        std::string wrong;
        if (!s.ok()) {
          wrong = CodeName(s.error_code()) + ": " + s.error_message();
        } else if (step != resume) {
          wrong = fmt::format("a checkpoint of step {}", step);
        } else if (data != CheckpointBytes(trial, resume, o_.checkpoint_bytes) ||
                   sha != Sha256Hex(data)) {
          wrong = fmt::format("{} bytes that are not the ones uploaded", data.size());
        }
        if (!wrong.empty()) {
          {
            std::lock_guard lock(mu_);
            ++r_.bad_resumes;
            Sample(fmt::format("trial {} resumed after step {}: {}", trial, resume, wrong));
          }
          // What a worker does with a checkpoint it cannot use (worker.proto).
          if (!Call("restart", [&] { return w->Restart(trial, wrong); }).ok()) continue;
          std::lock_guard lock(mu_);
          // Restarted: the server dropped all of its steps, every segment's.
          r_.dropped_reports += static_cast<int64_t>(acked_[trial].size());
          acked_.erase(trial);
          resume = 0;
        }
      }

      // One segment: from resume + 1 to the rung it pauses at, or the end.
      int64_t paused_at = 0;
      bool lost_lease = false;
      int64_t step = resume + 1;
      for (; step <= t.max_steps(); ++step) {
        std::this_thread::sleep_for(o_.step_time);
        const double loss = x + 1.0 / static_cast<double>(step + 1);
        v1::ReportResponse res;
        if (!Call("report", [&] { return w->Report(trial, step, loss, &res); }).ok()) {
          lost_lease = true;
          break;
        }
        {
          std::lock_guard lock(mu_);
          acked_[trial][step] = {loss, lease};
          ++r_.acked_reports;
          last_ok_ = Clock::now();
        }
        if (res.decision() == v1::DECISION_PAUSE) {
          paused_at = step;
          break;
        }
        if (res.decision() == v1::DECISION_PRUNE || res.decision() == v1::DECISION_CANCEL) break;
      }
      if (lost_lease) {
        std::lock_guard lock(mu_);
        ++r_.expired_segments;
        Dropped(trial, resume, lease);
        continue;
      }
      if (paused_at == 0) {
        if (step > t.max_steps() && Call("complete", [&] {
                                      return w->Complete(trial, x + 1.0 / (t.max_steps() + 1.0));
                                    }).ok()) {
          std::lock_guard lock(mu_);
          completed_.insert(trial);
          ++r_.acked_completions;
        }
        continue;
      }

      const std::string checkpoint = CheckpointBytes(trial, paused_at, o_.checkpoint_bytes);
      if (resume > 0 && cuts_allowed_ > 0 && cuts_allowed_.fetch_sub(1) > 0) {
        // Dies after some of the chunks. Its lease expires, the trial goes
        // back to paused after `resume`, and the checkpoint of `resume` must
        // still be its own: nothing else may take its place meanwhile (the
        // lease is the dead worker's), so it is checked now.
        const int chunks =
            static_cast<int>((o_.checkpoint_bytes + o_.chunk_bytes - 1) / o_.chunk_bytes);
        const int cut_after = 1 + static_cast<int>(rng() % std::max(1, chunks - 1));
        (void)w->UploadCheckpoint(trial, paused_at, checkpoint, o_.chunk_bytes, cut_after);
        const std::string wrong =
            CheckStoredCheckpoint(artifacts_, trial, resume, o_.checkpoint_bytes);
        {
          std::lock_guard lock(mu_);
          if (wrong.empty()) {
            ++r_.cut_previous_intact;
          } else {
            Sample(
                fmt::format("trial {}: after an upload of step {} cut after {} chunks, its "
                            "checkpoint of step {} "
                            "is {}",
                            trial, paused_at, cut_after, resume, wrong));
          }
          Dropped(trial, resume, lease);
          cut_from_[trial] = resume;
          last_cut_ = Clock::now();
        }
        ++cuts_done_;
        Progress(setup_, fmt::format("worker {} died uploading trial {} step {} after {} chunks",
                                     index, trial, paused_at, cut_after));
        // A new worker takes its place.
        ++lives;
        w = std::make_unique<SimWorker>(address_, milliseconds(5000));
        if (!enroll()) return;
        continue;
      }
      const bool uploaded =
          Call("upload", [&] {
            return w->UploadCheckpoint(trial, paused_at, checkpoint, o_.chunk_bytes);
          }).ok();
      if (uploaded) {
        std::lock_guard lock(mu_);
        ++r_.uploads;
        if (leases_[trial] == lease) uploaded_[trial] = paused_at;
      }
      const grpc::Status paused =
          Call("pause", [&] { return w->Pause(trial, paused_at, uploaded); });
      // The rung's checkpoint paused the trial as it committed (worker.proto),
      // and the Pause is acknowledged even after a promotion; refused after
      // it, the trial has moved on since (its checkpoint replaced or gone).
      if (!paused.ok() &&
          !(uploaded && paused.error_code() == grpc::StatusCode::FAILED_PRECONDITION)) {
        std::lock_guard lock(mu_);
        ++r_.expired_segments;
        uploaded_.erase(trial);
        Dropped(trial, resume, lease);
        continue;
      }
      std::lock_guard lock(mu_);
      ++r_.pauses;
      // Unless it was promoted before the answer came back.
      if (leases_[trial] == lease) last_pause_[trial] = paused_at;
    }
  }

  const Setup& setup_;
  const PromotionOptions& o_;
  const std::string address_;
  store::ArtifactStore& artifacts_;
  std::atomic<bool> stop_{false};
  std::atomic<int> cuts_allowed_{0}, cuts_done_{0};
  std::vector<std::thread> threads_;
  mutable std::mutex mu_;  // guards the results above and last_ok_
  Clock::time_point last_ok_{}, last_cut_{};
  std::map<int64_t, int64_t> cut_from_;  // a cut trial -> the step it must be promoted from again
  std::map<int64_t, int64_t>
      uploaded_;  // trial -> the step of its last acknowledged checkpoint, until leased
  std::map<int64_t, int> leases_;  // trial -> how many times it was leased
};

}  // namespace

Result<PromotionResult> Promotion(const Setup& setup, const PromotionOptions& o) {
  if (o.steps < 3)
    return Status::InvalidArgument(
        "steps: at least 3, for a rung to resume from and one to pause at");
  ServerProcess server(
      setup.server_bin, setup.dir + "/server",
      {"--store", StoreUrl(setup), "--lease-timeout", std::to_string(o.lease_timeout_s)});
  HPO_RETURN_IF_ERROR(server.Start());
  const uint16_t port = server.http_port();
  // A budget no run reaches, so trials stay paused at the end to be checked;
  // max_parallel bounds how many (and so the checkpoints kept).
  json spec =
      json::parse(SimSpec("promotion", 1'000'000, 4 * o.workers, o.steps, "random", "asha"));
  spec["early_stopping"] = {
      {"rule", "asha"}, {"type", "promotion"}, {"min_resource", 1}, {"reduction_factor", 3}};
  HPO_ASSIGN_OR_RETURN(const int64_t id, CreateExperiment(port, spec.dump()));
  // The server's own artifact store, opened the way it opens it: the bench
  // reads checkpoints with the product's verifying reader.
  HPO_ASSIGN_OR_RETURN(auto artifacts, store::OpenArtifactStore("", StoreUrl(setup)));

  PromotionFleet fleet(setup, o, server.grpc_address(), *artifacts);
  fleet.Start();
  const auto start = Clock::now();
  if (!fleet.WaitForReportAfter(start, seconds(30))) {
    return Status::DeadlineExceeded("no report was acknowledged within 30 s; see " +
                                    server.log_path());
  }
  PromotionResult& r = fleet.r_;
  const auto kill_every = o.duration / (o.server_kills + 1);
  const auto cut_every = o.duration / (o.upload_cuts + 1);
  auto next_kill = start + kill_every, next_cut = start + cut_every / 2;
  int cuts_allowed = 0;
  std::mt19937 rng(5);
  // Until every fault was injected (a cut needs a promoted trial at its next
  // rung), for at most three times the duration.
  while (Clock::now() - start < 3 * o.duration) {
    const auto now = Clock::now();
    // The last cut trial needs its dead worker's lease to run out before it
    // can be promoted again.
    if (now - start >= o.duration && r.server_kills >= o.server_kills &&
        fleet.cuts() >= o.upload_cuts &&
        now - fleet.last_cut() >= seconds(2 * o.lease_timeout_s + 2)) {
      break;
    }
    if (r.server_kills < o.server_kills && now >= next_kill) {
      const auto killed = Clock::now();
      server.Stop(SIGKILL);
      HPO_RETURN_IF_ERROR(server.Start());
      ++r.server_kills;
      Progress(setup,
               fmt::format("server kill {}: back in {:.0f} ms", r.server_kills, MsSince(killed)));
      if (!fleet.WaitForReportAfter(killed, seconds(30))) {
        return Status::DeadlineExceeded(
            "no report was acknowledged within 30 s of a restart; see " + server.log_path());
      }
      next_kill = Clock::now() + kill_every / 2 + milliseconds(rng() % (kill_every.count() + 1));
    }
    if (cuts_allowed < o.upload_cuts && now >= next_cut) {
      fleet.AllowCut();
      ++cuts_allowed;
      next_cut = now + cut_every;
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  fleet.Stop();
  r.upload_cuts = fleet.cuts();
  r.cut_not_leased_again = fleet.cuts_not_leased_again();
  // What was acknowledged last must survive a crash too.
  server.Stop(SIGKILL);
  HPO_RETURN_IF_ERROR(server.Start());
  r.duration_s = MsSince(start) / 1000;

  // Leases nobody holds any more (a dead worker's; a lease whose answer a
  // kill cut off) run out; a trial still leased after that is stuck.
  HPO_ASSIGN_OR_RETURN(json trials, Trials(port, id));
  for (const auto until = Clock::now() + seconds(2 * o.lease_timeout_s + 2);
       Clock::now() < until;) {
    r.stuck = 0;
    for (const auto& t : trials) {
      const std::string state = t.value("state", "");
      if (state == "leased" || state == "running") ++r.stuck;
    }
    if (r.stuck == 0) break;
    std::this_thread::sleep_for(milliseconds(200));
    HPO_ASSIGN_OR_RETURN(trials, Trials(port, id));
  }
  for (const auto& t : trials) {
    const std::string state = t.value("state", "");
    if ((state == "leased" || state == "running") && r.samples.size() < 8) {
      r.samples.push_back(fmt::format("trial {} is still {} by '{}'", t.value("id", int64_t{0}),
                                      state, t.value("lease_owner", "")));
    }
  }
  r.trials = static_cast<int64_t>(fleet.trials_.size());

  std::map<int64_t, std::map<int64_t, double>> acked;
  for (const auto& [trial, steps] : fleet.acked_) {
    for (const auto& [step, sent] : steps) acked[trial][step] = sent.first;
  }
  HPO_ASSIGN_OR_RETURN(AckCheck lost, CheckAcknowledged(port, acked));
  r.lost_reports = lost.lost_reports;
  for (auto& s : lost.samples) {
    if (r.samples.size() < 8) r.samples.push_back(s);
  }
  std::map<int64_t, json> by_id;
  for (const auto& t : trials) by_id[t["id"].get<int64_t>()] = t;
  for (const int64_t trial : fleet.completed_) {
    if (by_id[trial].value("state", "") == "completed") continue;
    ++r.lost_completions;
    if (r.samples.size() < 8) {
      r.samples.push_back(
          fmt::format("trial {}: completed, stored as {}", trial, by_id[trial].dump()));
    }
  }
  for (const auto& [trial, step] : fleet.last_pause_) {
    const json& t = by_id[trial];
    if (t.value("state", "") == "paused" && t.value("resume_step", int64_t{-1}) == step) continue;
    ++r.lost_pauses;
    if (r.samples.size() < 8) {
      r.samples.push_back(
          fmt::format("trial {}: paused after step {}, stored as {}", trial, step, t.dump()));
    }
  }
  for (const auto& t : trials) {
    if (t.value("state", "") != "paused") continue;
    ++r.paused_at_end;
    const int64_t trial = t["id"].get<int64_t>();
    const std::string wrong = CheckStoredCheckpoint(
        *artifacts, trial, t.value("resume_step", int64_t{0}), o.checkpoint_bytes);
    if (wrong.empty()) {
      ++r.checkpoints_intact;
    } else if (r.samples.size() < 8) {
      r.samples.push_back(fmt::format("trial {} paused after step {}: its checkpoint is {}", trial,
                                      t.value("resume_step", int64_t{0}), wrong));
    }
  }
  return r;
}

// (f) -------------------------------------------------------------------------------

namespace {

// Where hpo-worker reads Fashion-MNIST by default (worker/builtin_trainer.h).
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// The server's event stream, read on a thread of its own and kept. The
// destructor stops the server (which ends the stream) and joins.
class EventRecorder {
 public:
  struct Event {
    std::string type;
    json data;
  };
  EventRecorder(ServerProcess& server, milliseconds timeout) : server_(server) {
    thread_ = std::thread([this, port = server.http_port(), timeout] {
      HttpClientOptions o;
      o.port = port;
      o.timeout = timeout;
      (void)ReadEventStream(o, "/api/v1/events",
                            [this](const std::string& type, const std::string& data) {
                              std::lock_guard lock(mu_);
                              events_.push_back({type, json::parse(data, nullptr, false)});
                              return !stop_;
                            });
    });
  }
  ~EventRecorder() {
    stop_ = true;
    server_.Stop(SIGKILL);
    thread_.join();
  }
  // The events from index `from` on, oldest first.
  std::vector<Event> Since(size_t from) const {
    std::lock_guard lock(mu_);
    if (from >= events_.size()) return {};
    return {events_.begin() + static_cast<std::ptrdiff_t>(from), events_.end()};
  }
  size_t size() const {
    std::lock_guard lock(mu_);
    return events_.size();
  }

 private:
  ServerProcess& server_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::vector<Event> events_;  // GUARDED_BY(mu_)
  std::thread thread_;         // last: it uses the members above
};

// What is wrong with the trial's checkpoint in the artifact store if it is
// not a whole one of `step` (read the way the server reads it: the reader
// verifies size and checksum); empty when it is.
std::string CheckCheckpointOfStep(store::ArtifactStore& artifacts, int64_t trial, int64_t step) {
  auto info = artifacts.Stat(trial);
  if (!info.ok()) return "stat: " + info.status().ToString();
  if (!*info) return "no checkpoint";
  if ((*info)->step != step)
    return fmt::format("a checkpoint of step {}, not {}", (*info)->step, step);
  auto reader = artifacts.Open(trial);
  if (!reader.ok()) return "open: " + reader.status().ToString();
  int64_t bytes = 0;
  for (;;) {
    auto piece = (*reader)->Read(size_t{1} << 20);
    if (!piece.ok()) return "read: " + piece.status().ToString();
    if (piece->empty()) break;
    bytes += static_cast<int64_t>(piece->size());
  }
  if (bytes != (*info)->size_bytes)
    return fmt::format("{} bytes read of {}", bytes, (*info)->size_bytes);
  return "";
}

// The steps the store holds for a trial, in order.
Result<std::vector<int64_t>> StoredSteps(uint16_t port, int64_t trial) {
  HPO_ASSIGN_OR_RETURN(json t, GetTrial(port, trial));
  std::vector<int64_t> steps;
  for (const auto& m : t["measurements"]) steps.push_back(m["step"].get<int64_t>());
  return steps;
}

// Whether `steps` are 1..steps.size(), each once.
bool Contiguous(const std::vector<int64_t>& steps) {
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i] != static_cast<int64_t>(i) + 1) return false;
  }
  return true;
}

bool Active(const json& trial) {
  const std::string state = trial.value("state", "");
  return state == "leased" || state == "running";
}

}  // namespace

Result<MigrationResult> Migration(const Setup& setup, const MigrationOptions& o) {
  if (setup.worker_bin.empty()) return Status::FailedPrecondition("Migration needs hpo-worker");
  if (!std::filesystem::exists(std::string(kFashionMnistDir) + "/train-images-idx3-ubyte.gz")) {
    return Status::FailedPrecondition(
        std::string("Migration trains on Fashion-MNIST, which is not in ") + kFashionMnistDir +
        " (Debian package dataset-fashion-mnist)");
  }
  if (o.kills < 1 || o.slow_workers < 1 || o.steps < 4) {
    return Status::InvalidArgument(
        "kills and slow_workers: at least 1; steps: at least 4 (rungs 1, 2 and 4)");
  }
  // Cgroups before the workers in them (destroyed after: a cgroup with a
  // process left in it cannot be removed). [0] is the fast device's.
  static std::atomic<int> runs{0};
  const std::string tag = fmt::format("{}-{}", getpid(), runs++);
  std::vector<std::unique_ptr<CpuCgroup>> groups;
  groups.push_back(std::make_unique<CpuCgroup>("hpo-migration-fast-" + tag, o.fast_cpus));
  for (int i = 0; i < o.slow_workers; ++i) {
    groups.push_back(
        std::make_unique<CpuCgroup>(fmt::format("hpo-migration-slow{}-{}", i, tag), o.slow_cpus));
  }
  for (const auto& g : groups) {
    if (g->path().empty()) {
      return Status::FailedPrecondition(
          "no writable CPU cgroup here (needs root and cgroup v1 cpu or v2 cpu.max)");
    }
  }
  ServerProcess server(
      setup.server_bin, setup.dir + "/server",
      {"--store", StoreUrl(setup), "--lease-timeout", std::to_string(o.lease_timeout_s)});
  HPO_RETURN_IF_ERROR(server.Start());
  const uint16_t port = server.http_port();
  const auto start = Clock::now();
  const auto deadline = start + o.timeout;
  EventRecorder events(server, o.timeout + seconds(60));
  HPO_ASSIGN_OR_RETURN(auto artifacts, store::OpenArtifactStore("", StoreUrl(setup)));
  // Stop-type ASHA on the built-in trainer: placement.migrate is the
  // default; said here, so that a server that would not migrate refuses it.
  json spec = {
      {"name", "migration"},
      {"objective", {{"metric", "loss"}}},
      {"spaces",
       {{{"name", "mlp"},
         {"params",
          {{"lr", {{"type", "float"}, {"low", 1e-3}, {"high", 1e-2}, {"log", true}}},
           {"width", {{"type", "int"}, {"low", 32}, {"high", 256}}}}}}}},
      {"algorithm", {{"sampler", "random"}, {"seed", 1}}},
      {"early_stopping",
       {{"rule", "asha"},
        {"type", "stop"},
        {"min_resource", 1},
        {"reduction_factor", 2},
        {"bootstrap_count", o.max_trials + 1}}},  // more than ever reach a rung: none pruned
      {"placement", {{"policy", "speed"}, {"migrate", true}}},
      {"budget",
       {{"max_trials", o.max_trials},
        {"max_parallel", o.slow_workers + 1},
        {"steps_per_trial", o.steps}}},
      {"executor",
       {{"builtin",
         {{"trainer", "fashion-mnist-mlp"}, {"args", {{"max_train_samples", o.train_samples}}}}}}}};
  HPO_ASSIGN_OR_RETURN(const int64_t id, CreateExperiment(port, spec.dump()));

  // Workers by slot label: the pid and the cgroup it runs in.
  struct Alive : std::map<std::string, std::pair<pid_t, size_t>> {
    ~Alive() {
      for (auto& [slot, w] : *this) KillAndReap(w.first);
    }
  } alive;
  const std::string hold_env = fmt::format("HPO_WORKER_TEST_PAUSE_HOLD_MS={}", o.hold.count());
  int next_slot = 0;
  auto spawn = [&](size_t group) {
    const std::string slot = std::to_string(next_slot++);
    alive[slot] = {
        StartWorker(setup, server.grpc_address(), slot, 500, groups[group].get(), hold_env), group};
  };
  for (size_t g = 0; g < groups.size(); ++g) spawn(g);
  auto log_of = [&](const std::string& slot) {
    return ReadFile(setup.dir + "/worker-" + slot + ".log");
  };
  // The slot of the worker whose lease owner name is `owner`, if alive.
  auto slot_of = [&](const std::string& owner) -> Result<std::string> {
    HPO_ASSIGN_OR_RETURN(json workers, RestCall(port, "GET", "/api/v1/workers"));
    for (const auto& w : workers["workers"]) {
      const std::string slot = w["labels"].value("slot", "");
      if ("worker/" + std::to_string(w["id"].get<int64_t>()) == owner && alive.count(slot))
        return slot;
    }
    return std::string();
  };

  MigrationResult r;
  auto sample = [&](const std::string& what) {
    Progress(setup, what);
    if (r.samples.size() < 8) r.samples.push_back(what);
  };
  std::mt19937 rng(17);
  size_t seen = 0;  // events looked at
  auto count = [&](const EventRecorder::Event& e) {
    r.moves += e.type == "trial.moving";
    r.preemptions += e.type == "trial.preempted";
  };
  bool skip = false;  // the pauses announced while a killed trial was followed: over by now
  while (r.kills < o.kills && Clock::now() < deadline) {
    HPO_ASSIGN_OR_RETURN(std::string state, ExperimentState(port, id));
    if (state != "running") break;  // out of budget before the last kill
    if (std::exchange(skip, false)) {
      for (const auto& e : events.Since(seen)) {
        ++seen;
        count(e);
      }
    }
    // The next pause: the trial, the step its checkpoint is of, its state.
    // Once only the kills reserved for resumed segments are left, a pause
    // of a first segment is let go.
    const bool resumed_only = r.kills >= o.kills - o.resumed_kills;
    std::optional<std::pair<int64_t, int64_t>> pausing;
    json before;
    for (const auto& e : events.Since(seen)) {
      ++seen;
      count(e);
      if (pausing || (e.type != "trial.moving" && e.type != "trial.preempted")) continue;
      const int64_t trial = e.data["trial_id"].get<int64_t>();
      HPO_ASSIGN_OR_RETURN(before, GetTrial(port, trial));
      if (!Active(before) || (resumed_only && before.value("resume_step", int64_t{0}) == 0)) {
        continue;
      }
      pausing = {{trial, e.data["step"].get<int64_t>()}};
    }
    if (!pausing) {
      std::this_thread::sleep_for(milliseconds(20));
      continue;
    }
    const auto [trial, step] = *pausing;
    const int64_t previous = before.value("resume_step", int64_t{0});
    HPO_ASSIGN_OR_RETURN(const std::string slot, slot_of(before.value("lease_owner", "")));
    if (slot.empty()) continue;
    // Into the hold before the commit or the one after it: the latter
    // always for a segment that resumed from a checkpoint, whose previous
    // checkpoint is what the new one replaces.
    const bool after_commit = previous > 0 || r.kills % 2 == 1;
    // The worker names a trial "trial N of experiment E (id X)".
    const std::string half =
        fmt::format("(id {}) checkpoint of step {} half uploaded", trial, step);
    const std::string whole = fmt::format("(id {}) checkpoint of step {} uploaded", trial, step);
    const std::string paused = fmt::format("(id {}) paused after step {}", trial, step);
    bool held = false;
    for (const auto until = Clock::now() + 2 * o.hold + seconds(10);
         !held && Clock::now() < until;) {
      held = log_of(slot).find(after_commit ? whole : half) != std::string::npos;
      if (!held) std::this_thread::sleep_for(milliseconds(10));
    }
    if (!held) {
      sample(fmt::format("trial {}: its worker {} never held the checkpoint of step {}", trial,
                         slot, step));
      continue;
    }
    std::this_thread::sleep_for(
        milliseconds(o.hold.count() / 10 + rng() % (o.hold.count() / 2 + 1)));
    const auto [pid, group] = alive[slot];
    KillAndReap(pid);
    alive.erase(slot);
    ++r.kills;
    skip = true;
    spawn(group);
    // Landed inside the save when the worker had not logged its Pause.
    const std::string log = log_of(slot);
    if (log.find(paused) != std::string::npos) {
      sample(fmt::format("kill {} of worker {} came after trial {} paused", r.kills, slot, trial));
      continue;
    }
    ++r.kills_in_checkpoint;
    // Whether the new checkpoint was committed is the store's to say, once
    // the cut stream has reached the server.
    std::this_thread::sleep_for(milliseconds(300));
    HPO_ASSIGN_OR_RETURN(const auto info, artifacts->Stat(trial));
    const bool committed = info && info->step == step;
    ++(committed ? r.kills_after_commit : r.kills_mid_upload);
    if (previous > 0) ++r.kills_of_resumed;
    // The point it must go back to: that of the newest whole checkpoint.
    const int64_t point = committed ? step : previous;
    Progress(setup,
             fmt::format(
                 "kill {}: worker {} in trial {}'s checkpoint of step {} ({}; it resumed after "
                 "step {})",
                 r.kills, slot, trial, step, committed ? "committed" : "not committed", previous));

    // Back with the server: its lease ended (or the commit paused it).
    const std::string owner = before.value("lease_owner", "");
    json t;
    for (const auto until = Clock::now() + seconds(2 * o.lease_timeout_s + 10);;) {
      HPO_ASSIGN_OR_RETURN(t, GetTrial(port, trial));
      if (!(Active(t) && t.value("lease_owner", "") == owner) || Clock::now() >= until) break;
      std::this_thread::sleep_for(milliseconds(50));
    }
    const std::string back_state = t.value("state", "");
    if (Active(t) && t.value("lease_owner", "") == owner) {
      ++r.not_followed;
      sample(fmt::format("trial {}: still leased to the killed worker", trial));
      continue;
    }
    bool lost = false;
    if (back_state == "paused" || back_state == "pending") {
      const int64_t back_to = back_state == "paused" ? t.value("resume_step", int64_t{0}) : 0;
      if (back_to != point) {
        lost = true;
        sample(fmt::format(
            "trial {}: killed in its checkpoint of step {} ({}), went back to step {}, not {}",
            trial, step, committed ? "committed" : "not committed", back_to, point));
      }
      if (back_to > 0) {
        if (const std::string wrong = CheckCheckpointOfStep(*artifacts, trial, back_to);
            !wrong.empty()) {
          ++r.corrupt;
          sample(fmt::format("trial {}, back to step {}: its checkpoint is {}", trial, back_to,
                             wrong));
        }
      }
      HPO_ASSIGN_OR_RETURN(const auto steps, StoredSteps(port, trial));
      if (!Contiguous(steps) || static_cast<int64_t>(steps.size()) != back_to) {
        ++r.curve_gaps;
        sample(fmt::format("trial {}, back to step {}: {} steps stored, to step {}", trial, back_to,
                           steps.size(), steps.empty() ? 0 : steps.back()));
      }
    }

    // Running again: from where, and whether it had to start over.
    const size_t since = events.size();
    int64_t from = -1;
    for (const auto until = std::min(deadline, Clock::now() + seconds(120));
         Clock::now() < until;) {
      HPO_ASSIGN_OR_RETURN(t, GetTrial(port, trial));
      if (Active(t) && t.value("lease_owner", "") != owner) {
        from = t.value("resume_step", int64_t{0});
        break;
      }
      if (t["finished_ms"].is_number()) break;
      std::this_thread::sleep_for(milliseconds(100));
    }
    if (from < 0) {
      r.lost += lost;
      if (!t["finished_ms"].is_number()) {
        ++r.not_followed;
        sample(
            fmt::format("trial {}: not run again within 120 s ({})", trial, t.value("state", "")));
      }
      continue;
    }
    // A restart comes with the lease (the server found no usable
    // checkpoint) or after the download (the worker could not restore it):
    // wait for its first new step.
    for (const auto until = Clock::now() + seconds(60); Clock::now() < until;) {
      HPO_ASSIGN_OR_RETURN(const auto steps, StoredSteps(port, trial));
      HPO_ASSIGN_OR_RETURN(t, GetTrial(port, trial));
      if ((!steps.empty() && steps.back() > from) || !Active(t)) break;
      std::this_thread::sleep_for(milliseconds(100));
    }
    ++r.resumed;
    bool restarted = false;
    for (const auto& e : events.Since(since)) {
      if (e.type != "trial.restarted" || e.data.value("trial_id", int64_t{0}) != trial) continue;
      restarted = true;
      if (e.data.value("by", "") == "worker") {
        ++r.corrupt;
        sample(fmt::format("trial {}: its worker could not restore it: {}", trial,
                           e.data.value("reason", "")));
      } else if (from > 0) {
        sample(fmt::format("trial {}: restarted by the server: {}", trial,
                           e.data.value("reason", "")));
      }
    }
    if (from < point || (restarted && from > 0)) {
      lost = true;
      sample(fmt::format("trial {}: ran again from step {}, not {}", trial, restarted ? 0 : from,
                         point));
    }
    if (lost) {
      ++r.lost;
    } else if (from == point) {
      ++(point == previous ? r.resumed_from_previous : r.resumed_from_new);
    }
  }

  // The experiment ends once every trial has: none may be left paused.
  HPO_ASSIGN_OR_RETURN(
      r.experiment_state,
      WaitForEnd(port, id,
                 std::chrono::duration_cast<milliseconds>(
                     std::max(deadline - Clock::now(), Clock::duration(0)) + seconds(120))));
  for (const auto& e : events.Since(seen)) count(e);
  HPO_ASSIGN_OR_RETURN(json trials, Trials(port, id));
  for (const auto& t : trials) {
    ++r.trials;
    const std::string state = t.value("state", "");
    const int64_t trial = t["id"].get<int64_t>();
    r.completed += state == "completed";
    r.pruned += state == "pruned";
    r.failed += state == "failed";
    if (!t["finished_ms"].is_number()) {
      ++r.stuck;
      sample(fmt::format("trial {} is still {} (resume_step {})", trial, state,
                         t.value("resume_step", int64_t{0})));
      continue;
    }
    HPO_ASSIGN_OR_RETURN(const auto steps, StoredSteps(port, trial));
    if (!Contiguous(steps) ||
        (state == "completed" && static_cast<int64_t>(steps.size()) != o.steps)) {
      ++r.curve_gaps;
      sample(fmt::format("trial {} ({}): {} steps stored, the last {}", trial, state, steps.size(),
                         steps.empty() ? 0 : steps.back()));
    }
  }
  r.duration_s = MsSince(start) / 1000;
  return r;
}

// Load --------------------------------------------------------------------------------

Result<LoadResult> RunLoad(const Setup& setup, const LoadOptions& o) {
  std::vector<std::string> args = {"--store", StoreUrl(setup)};
  args.insert(args.end(), o.server_args.begin(), o.server_args.end());
  ServerProcess server(setup.server_bin, setup.dir + "/server", args);
  HPO_RETURN_IF_ERROR(server.Start());
  // Budgets no run reaches: every experiment runs for the whole duration.
  for (int i = 0; i < o.experiments; ++i) {
    HPO_RETURN_IF_ERROR(CreateExperiment(server.http_port(),
                                         SimSpec("load-" + std::to_string(i), 1'000'000,
                                                 o.workers / o.experiments + 8, o.steps,
                                                 i % 2 == 0 ? "tpe" : "random", o.early_stopping))
                            .status());
  }
  FleetOptions fo;
  fo.address = server.grpc_address();
  fo.workers = o.workers;
  fo.steps = o.steps;
  fo.step_time = o.step_time;
  fo.heartbeat = true;
  fo.deadline = o.deadline;
  SimFleet fleet(fo);
  RestLoadOptions ro;
  ro.port = server.http_port();
  ro.clients = o.rest_clients;
  ro.timeout = o.deadline;
  RestLoad rest(ro);
  fleet.Start();
  rest.Start();
  const auto start = Clock::now();
  while (Clock::now() - start < o.duration) {
    std::this_thread::sleep_for(seconds(1));
    if (setup.verbose &&
        std::chrono::duration_cast<seconds>(Clock::now() - start).count() % 30 == 0) {
      const FleetStats f = fleet.Snapshot();
      Progress(setup,
               fmt::format("load: {:.0f} s, {} rpcs ({} errors), rss {:.0f} MiB",
                           MsSince(start) / 1000, f.rpcs, f.errors_total, PeakRssMb(server.pid())));
    }
  }
  fleet.Stop();
  rest.Stop();
  LoadResult r;
  r.server_peak_rss_mb = PeakRssMb(server.pid());
  const FleetStats fs = fleet.Snapshot();
  const RestStats rs = rest.Snapshot();
  r.rpcs = fs.rpcs;
  r.rpc_errors = fs.errors_total;
  r.rpc_error_codes = fs.errors;
  r.rpc_error_samples = fs.error_samples;
  r.rpc_p50_ms = Quantile(fs.latency_ms, 0.5);
  r.rpc_p99_ms = Quantile(fs.latency_ms, 0.99);
  r.rpc_max_ms = Quantile(fs.latency_ms, 1.0);
  for (const auto& [call, ms] : fs.call_ms) r.call_p99_ms[call] = Quantile(ms, 0.99);
  r.rest_calls = rs.calls;
  r.rest_errors = rs.errors_total;
  r.rest_error_samples = rs.error_samples;
  r.rest_p50_ms = Quantile(rs.latency_ms, 0.5);
  r.rest_p99_ms = Quantile(rs.latency_ms, 0.99);
  r.rest_max_ms = Quantile(rs.latency_ms, 1.0);
  r.reports = fs.acked_reports;
  r.trials_completed = fs.trials_completed;
  return r;
}

}  // namespace hpo::testing
