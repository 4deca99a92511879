// bench/server_bench: trials per second through the real hpo-server (issue
// #19 item 1), the whole trial lifecycle as a user's fleet runs it: a trial
// is suggested (TPE over 8 parameters), leased, reported 3 times and
// completed. The clients are simulated gRPC workers (testing/harness.h's
// SimFleet: Register, then Lease, 3 x Report, Complete, no pause between)
// and REST ask/tell clients (suggest, 3 x measurements, :complete), in this
// process, on a SQLite file and on PostgreSQL, one fresh database per line.
//
//   server_bench [--stores sqlite,postgresql] [--workers 1,4,16,64] [--rest-clients 1,16]
//                [--seconds 10] [--existing-trials 10000] [--with-peers] ...
//
// Each measurement runs a warm-up, then counts the trials completed in a
// window of --seconds and the calls that returned in it, and reads the
// server's CPU time (/proc/PID/stat) at both ends. Prints one line each:
//
//   bench=server store=postgresql workers=64 sampler=tpe trials_per_s=N lease_p99_ms=X
//   report_p99_ms=Y
//       cpu_ms_per_trial=Z lease_p50_ms=... report_p50_ms=... complete_p50_ms=...
//       complete_p99_ms=... pg_cpu_ms_per_trial=... client_cpu_ms_per_trial=... trials=...
//       seconds=... errors=... acked_completed=... store_completed=...
//   bench=server store=sqlite rest_clients=16 sampler=tpe trials_per_s=N suggest_p99_ms=X
//   report_p99_ms=Y
//       cpu_ms_per_trial=Z suggest_p50_ms=... report_p50_ms=... complete_p50_ms=... ...
//   bench=server store=postgresql workers=16 sampler=tpe existing_trials=10000 trials_per_s=N ...
//   bench=server store=postgresql rest_clients=1 sampler=tpe existing_trials=10000 trials_per_s=N
//   ...
//
// and, with --with-peers, bench/peers/optuna_rdb.py's lines on the same
// PostgreSQL (peer=optuna-3.1). bench/README.md explains every field.
// Exit status 1 when a call failed or the store disagrees with what the
// clients were told; 2 when the bench could not run.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <sstream>

#include "proto/mutex_mode.h"
#include "server/store/store.h"
#include "testing/harness.h"

namespace hpo::bench {
namespace {
using namespace ::hpo::testing;

using nlohmann::json;
namespace fs = std::filesystem;

constexpr int kSteps = 3;  // reports per trial, as in Optuna's reference run

struct Options {
  std::string server_bin = HPO_SERVER_BIN;
  std::string peer_script = HPO_SOURCE_DIR "/bench/peers/optuna_rdb.py";
  std::string python = "/usr/bin/python3";  // Debian's, which has python3-optuna
  std::vector<std::string> stores = {"sqlite", "postgresql"};
  std::vector<int> workers = {1, 4, 16, 64};
  std::vector<int> rest_clients = {1, 16};
  std::string sampler = "tpe";
  bool group_commit = true;  // hpo-server --group-commit
  double seconds = 10, warmup_seconds = 2;
  int64_t min_trials = 1;  // a window lasts until it holds this many trials (at most 120 s more)
  int64_t existing_trials = 10'000;
  int existing_workers = 16;
  int existing_rest_clients =
      1;  // suggest's own latency at that size, apart from a fleet's queueing
  std::vector<std::string> existing_stores = {"postgresql"};
  bool with_peers = false;
  double peer_seconds = 20;
  int peer_processes = 4;
  std::string
      pg_admin;  // a PostgreSQL server's admin URL; empty: HPO_TEST_PG_*, else a private one
  std::string dir;
};

// The experiment every line runs: one space of 8 parameters (floats, a log
// float, an int, two categoricals) and no early stopping, so each trial
// runs its 3 steps. A budget no run reaches.
json BenchSpec(const std::string& sampler, int clients, bool client_executor) {
  json params = {{"lr", {{"type", "float"}, {"low", 1e-5}, {"high", 1}, {"log", true}}},
                 {"layers", {{"type", "int"}, {"low", 1}, {"high", 8}}},
                 {"optimizer", {{"type", "categorical"}, {"choices", {"sgd", "adam", "rmsprop"}}}},
                 {"activation", {{"type", "categorical"}, {"choices", {"relu", "tanh", "gelu"}}}}};
  for (int i = 0; i < 4; ++i)
    params["x" + std::to_string(i)] = {{"type", "float"}, {"low", -5}, {"high", 5}};
  return {
      {"name", "server-bench"},
      {"objective", {{"metric", "loss"}, {"direction", "minimize"}}},
      {"spaces", {{{"name", "main"}, {"params", params}}}},
      {"algorithm", {{"sampler", sampler}, {"seed", 1}}},
      {"early_stopping", {{"rule", "none"}}},
      {"budget",
       {{"max_trials", 100'000'000}, {"max_parallel", clients + 8}, {"steps_per_trial", kSteps}}},
      {"executor", client_executor ? json{{"client", json::object()}}
                                   : json{{"builtin", {{"trainer", "fashion-mnist-mlp"}}}}}};
}

// What the clients report: a smooth function of the parameters (its
// minimum at x = 1, lr = 1e-3, 4 layers, adam, relu), so TPE has a real
// model to fit, falling with the step as a training loss does.
double BenchLoss(const json& p, int64_t step) {
  double loss = 1.0 / static_cast<double>(step + 1);
  for (int i = 0; i < 4; ++i) loss += std::pow(p.value("x" + std::to_string(i), 0.0) - 1, 2);
  loss += std::pow(std::log10(p.value("lr", 1e-3)) + 3, 2) + std::abs(p.value("layers", 4) - 4);
  loss += p.value("optimizer", "") == "adam" ? 0 : 1;
  loss += p.value("activation", "") == "relu" ? 0 : 0.5;
  return loss;
}

// Parameters drawn uniformly over the space, as stored (the JSON form a
// trial's params_json has).
json RandomParams(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  const char* optimizers[] = {"sgd", "adam", "rmsprop"};
  const char* activations[] = {"relu", "tanh", "gelu"};
  json p = {{"lr", std::pow(10.0, -5 + 5 * u(rng))},
            {"layers", 1 + static_cast<int>(rng() % 8)},
            {"optimizer", optimizers[rng() % 3]},
            {"activation", activations[rng() % 3]}};
  for (int i = 0; i < 4; ++i) p["x" + std::to_string(i)] = -5 + 10 * u(rng);
  return p;
}

void Progress(const std::string& line) { std::fprintf(stderr, "server_bench: %s\n", line.c_str()); }

// Adds 10,000 (say) finished trials to the experiment straight through the
// store, each with a full lifecycle (lease, 3 reports, complete), from 8
// threads: what a long-running experiment holds when the server restarts.
Status SeedTrials(const std::string& url, int64_t experiment_id, int64_t count) {
  store::StoreOptions so;
  so.pool_size = 8;
  HPO_ASSIGN_OR_RETURN(auto st, store::OpenStore(url, so));
  HPO_ASSIGN_OR_RETURN(store::ExperimentRecord e, st->GetExperiment(experiment_id));
  if (e.spaces.empty())
    return Status::Internal("experiment " + std::to_string(experiment_id) + " has no space");
  std::mt19937_64 rng(42);
  for (int64_t done = 0; done < count;) {
    std::vector<store::NewTrial> batch(static_cast<size_t>(std::min<int64_t>(1000, count - done)));
    for (auto& t : batch) {
      t.space_id = e.spaces[0].id;
      t.params_json = RandomParams(rng).dump();
      t.system_params_json = "{}";
    }
    HPO_RETURN_IF_ERROR(st->CreateTrials(experiment_id, batch).status());
    done += static_cast<int64_t>(batch.size());
  }
  std::atomic<int64_t> finished{0};
  std::mutex mu;
  Status first_error;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      const std::string owner = "seed/" + std::to_string(t);
      auto fail = [&](const Status& s) {
        std::lock_guard lock(mu);
        if (first_error.ok()) first_error = s;
      };
      for (;;) {
        auto leased = st->LeaseNextTrial({owner, 600'000, experiment_id, std::nullopt});
        if (!leased.ok()) return fail(leased.status());
        if (!leased->has_value()) return;
        const store::TrialRecord& trial = **leased;
        const json params = json::parse(trial.params_json);
        for (int step = 0; step < kSteps; ++step) {
          store::Measurement m;
          m.step = step;
          m.metrics_json = json{{"loss", BenchLoss(params, step)}}.dump();
          auto r = st->ReportMeasurement(trial.id, owner, m, std::nullopt);
          if (!r.ok()) return fail(r.status());
        }
        const json final_metrics = {{"loss", BenchLoss(params, kSteps - 1)}};
        auto f = st->FinishTrial(trial.id, owner,
                                 {store::TrialState::kCompleted, final_metrics.dump(), ""});
        if (!f.ok()) return fail(f.status());
        if (++finished % 2000 == 0)
          Progress("seeded " + std::to_string(finished.load()) + " trials");
      }
    });
  }
  for (auto& t : threads) t.join();
  return first_error;
}

struct Window {
  std::map<std::string, std::vector<double>> call_ms;
  int64_t completed = 0, errors = 0, calls = 0;
};

// The latencies of calls that returned between two snapshots: each
// vector only grows, in the order calls returned.
std::map<std::string, std::vector<double>> Between(
    const std::map<std::string, std::vector<double>>& before,
    const std::map<std::string, std::vector<double>>& after) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& [what, v] : after) {
    auto it = before.find(what);
    const size_t from = it == before.end() ? 0 : it->second.size();
    out[what].assign(v.begin() + static_cast<std::ptrdiff_t>(std::min(from, v.size())), v.end());
  }
  return out;
}

struct Config {
  std::string store;     // "sqlite" or "postgresql"
  int workers = 0;       // gRPC workers, or
  int rest_clients = 0;  // REST ask/tell clients
  int64_t existing_trials = 0;
};

class Bench {
 public:
  explicit Bench(Options o) : o_(std::move(o)) {}

  // 0: every line ran clean; 1: errors or a disagreement; 2: could not run.
  int Main() {
    if (o_.dir.empty()) {
      char tmpl[] = "/tmp/hpo-sbench-XXXXXX";
      if (!mkdtemp(tmpl)) return Fail(Status::Internal("mkdtemp failed"));
      o_.dir = tmpl;
      own_dir_ = true;
    }
    std::vector<Config> configs;
    for (const auto& s : o_.stores) {
      if (s != "sqlite" && s != "postgresql")
        return Fail(Status::InvalidArgument("--stores: unknown store '" + s + "'"));
      for (int w : o_.workers) {
        if (w > 0) configs.push_back({s, w, 0, 0});
      }
      for (int c : o_.rest_clients) {
        if (c > 0) configs.push_back({s, 0, c, 0});
      }
    }
    if (o_.existing_trials > 0) {
      for (const auto& s : o_.existing_stores) {
        if (s != "sqlite" && s != "postgresql") {
          return Fail(Status::InvalidArgument("--existing-stores: unknown store '" + s + "'"));
        }
        if (o_.existing_workers > 0)
          configs.push_back({s, o_.existing_workers, 0, o_.existing_trials});
        if (o_.existing_rest_clients > 0)
          configs.push_back({s, 0, o_.existing_rest_clients, o_.existing_trials});
      }
    }
    const bool needs_pg =
        o_.with_peers || std::any_of(configs.begin(), configs.end(),
                                     [](const Config& c) { return c.store == "postgresql"; });
    if (needs_pg) {
      if (Status s = FindPostgres(); !s.ok()) return Fail(s);
    }
    for (const auto& c : configs) {
      Status s = RunOne(c);
      if (!s.ok()) return Fail(s);
    }
    if (o_.with_peers) {
      for (const std::string sampler : {"random", "tpe"}) {
        Status s = RunPeer(sampler);
        if (!s.ok()) return Fail(s);
      }
    }
    pg_.reset();
    if (own_dir_ && clean_) fs::remove_all(o_.dir);
    if (!clean_) Progress("logs in " + o_.dir);
    return clean_ ? 0 : 1;
  }

 private:
  int Fail(const Status& s) {
    Progress(s.ToString() + " (logs in " + o_.dir + ")");
    return 2;
  }

  // --pg, else the server HPO_TEST_PG_* name (scripts/test's), else one of
  // our own (testing/harness.h's PostgresInstance).
  Status FindPostgres() {
    if (!o_.pg_admin.empty()) return Status::OK();
    auto env = [](const char* name, const char* fallback) {
      const char* v = std::getenv(name);
      return std::string(v && *v ? v : fallback);
    };
    if (std::getenv("HPO_TEST_PG_PORT")) {
      o_.pg_admin = "postgresql://" + env("HPO_TEST_PG_USER", "postgres") + "@" +
                    env("HPO_TEST_PG_HOST", "127.0.0.1") + ":" + env("HPO_TEST_PG_PORT", "5432") +
                    "/postgres";
      return Status::OK();
    }
    Progress("no --pg and no HPO_TEST_PG_PORT: starting a private PostgreSQL");
    HPO_ASSIGN_OR_RETURN(pg_, PostgresInstance::Create());
    o_.pg_admin = pg_->AdminUrl();
    return Status::OK();
  }

  std::string NewDatabaseName() {
    return "hpo_sbench_" + std::to_string(getpid()) + "_" + std::to_string(++dbs_);
  }

  Status RunOne(const Config& c) {
    const bool rest = c.rest_clients > 0;
    const int clients = rest ? c.rest_clients : c.workers;
    const std::string label =
        c.store + (rest ? "-rest" : "-grpc") + std::to_string(clients) +
        (c.existing_trials > 0 ? "-existing" + std::to_string(c.existing_trials) : "");
    const std::string dir = o_.dir + "/" + label;
    fs::create_directories(dir);
    std::string url, db;
    if (c.store == "sqlite") {
      url = "sqlite://" + dir + "/hpo.db";
    } else {
      db = NewDatabaseName();
      HPO_ASSIGN_OR_RETURN(url, CreatePostgresDatabase(o_.pg_admin, db));
    }
    Progress(label + ": starting hpo-server on " + (db.empty() ? url : db));
    ServerProcess server(o_.server_bin, dir + "/server",
                         {"--store", url, "--group-commit", o_.group_commit ? "true" : "false"});
    HPO_RETURN_IF_ERROR(server.Start());
    HPO_ASSIGN_OR_RETURN(
        int64_t experiment,
        CreateExperiment(server.http_port(), BenchSpec(o_.sampler, clients, rest).dump()));
    if (c.existing_trials > 0) {
      // Straight into the store with the server stopped, then a restart: the
      // server reads the experiment as a restarted one would.
      server.Stop(SIGTERM);
      Progress(label + ": seeding " + std::to_string(c.existing_trials) + " finished trials");
      const auto seed_start = Clock::now();
      HPO_RETURN_IF_ERROR(SeedTrials(url, experiment, c.existing_trials));
      Progress(label + ": seeded in " +
               std::to_string(static_cast<int>(MsSince(seed_start) / 1000)) + " s");
      HPO_RETURN_IF_ERROR(server.Start());
    }

    std::unique_ptr<SimFleet> fleet;
    std::unique_ptr<AskTellClients> asktell;
    if (rest) {
      AskTellOptions ao;
      ao.port = server.http_port();
      ao.experiment_id = experiment;
      ao.clients = clients;
      ao.steps = kSteps;
      ao.objective = BenchLoss;
      asktell = std::make_unique<AskTellClients>(ao);
      asktell->Start();
    } else {
      FleetOptions fo;
      fo.address = server.grpc_address();
      fo.workers = clients;
      fo.steps = kSteps;
      fo.step_time =
          std::chrono::milliseconds(0);  // no training: the server's share is all there is
      fo.start_spread = std::chrono::milliseconds(0);
      fo.objective = BenchLoss;
      fleet = std::make_unique<SimFleet>(fo);
      fleet->Start();
    }
    auto snapshot = [&] {
      Window w;
      if (fleet) {
        FleetStats s = fleet->Snapshot();
        w.call_ms = std::move(s.call_ms);
        w.completed = s.trials_completed;
        w.errors = s.errors_total;
        w.calls = s.rpcs;
      } else {
        AskTellStats s = asktell->Snapshot();
        w.call_ms = std::move(s.call_ms);
        w.completed = s.trials_completed;
        w.errors = s.errors_total;
        w.calls = s.calls;
      }
      return w;
    };
    auto sleep_for = [](double s) {
      std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(s * 1e6)));
    };
    sleep_for(o_.warmup_seconds);
    const Window w0 = snapshot();
    const auto pg0 = PostgresCpuByPid();
    const double cpu0 = CpuSeconds(server.pid()), self0 = CpuSeconds(getpid());
    const auto t0 = Clock::now();
    for (double left = o_.seconds; left > 0; left -= 5) {
      sleep_for(std::min(5.0, left));
      if (left > 5) {
        const Window w = snapshot();
        Progress(label + ": " + std::to_string(w.completed - w0.completed) + " trials so far, " +
                 std::to_string(w.errors) + " errors");
      }
    }
    // On a loaded machine a short window may hold no trial: go on (a
    // smoke run's figures must exist, whatever they are).
    while (snapshot().completed - w0.completed < o_.min_trials &&
           MsSince(t0) < (o_.seconds + 120) * 1000) {
      sleep_for(0.05);
    }
    const Window w1 = snapshot();
    const double secs = MsSince(t0) / 1000;
    const auto pg1 = PostgresCpuByPid();
    const double cpu1 = CpuSeconds(server.pid()), self1 = CpuSeconds(getpid());
    if (fleet) fleet->Stop();
    if (asktell) asktell->Stop();
    const Window end = snapshot();
    server.Stop(SIGTERM);

    // What the store holds, read past the server: every completion the
    // clients were told of must be there.
    int64_t store_completed = -1;
    {
      HPO_ASSIGN_OR_RETURN(auto st, store::OpenStore(url));
      HPO_ASSIGN_OR_RETURN(store::TrialCounts counts, st->CountTrials(experiment));
      store_completed = counts.completed - c.existing_trials;
    }
    if (!db.empty()) HPO_RETURN_IF_ERROR(DropPostgresDatabase(o_.pg_admin, db));

    const auto calls = Between(w0.call_ms, w1.call_ms);
    auto q = [&](const char* what, double p) {
      auto it = calls.find(what);
      return it == calls.end() ? 0.0 : Quantile(it->second, p);
    };
    const int64_t trials = w1.completed - w0.completed;
    const double per_trial =
        trials > 0 ? 1000.0 / static_cast<double>(trials) : 0;  // s -> ms per trial
    std::string line = "bench=server store=" + c.store + (rest ? " rest_clients=" : " workers=") +
                       std::to_string(clients) + " sampler=" + o_.sampler;
    if (c.existing_trials > 0) line += " existing_trials=" + std::to_string(c.existing_trials);
    if (!o_.group_commit) line += " group_commit=off";
    const char* first = rest ? "suggest" : "lease";
    char pg_field[64] = "";  // PostgreSQL's processes, where there are some
    if (c.store == "postgresql")
      std::snprintf(pg_field, sizeof pg_field, " pg_cpu_ms_per_trial=%.3f",
                    PostgresCpuBetween(pg0, pg1) * per_trial);
    char buf[1024];
    std::snprintf(
        buf, sizeof buf,
        " trials_per_s=%.1f %s_p99_ms=%.2f report_p99_ms=%.2f cpu_ms_per_trial=%.3f %s_p50_ms=%.2f "
        "report_p50_ms=%.2f complete_p50_ms=%.2f complete_p99_ms=%.2f%s "
        "client_cpu_ms_per_trial=%.3f trials=%lld seconds=%.1f errors=%lld acked_completed=%lld "
        "store_completed=%lld",
        static_cast<double>(trials) / secs, first, q(first, 0.99), q("report", 0.99),
        (cpu1 - cpu0) * per_trial, first, q(first, 0.5), q("report", 0.5), q("complete", 0.5),
        q("complete", 0.99), pg_field, (self1 - self0) * per_trial, static_cast<long long>(trials),
        secs, static_cast<long long>(end.errors), static_cast<long long>(end.completed),
        static_cast<long long>(store_completed));
    std::printf("%s%s\n", line.c_str(), buf);
    std::fflush(stdout);
    if (end.errors > 0) {
      clean_ = false;
      if (fleet) {
        for (const auto& s : fleet->Snapshot().error_samples) Progress(label + ": error: " + s);
      } else {
        for (const auto& s : asktell->Snapshot().error_samples) Progress(label + ": error: " + s);
      }
    }
    if (store_completed != end.completed) {
      clean_ = false;
      Progress(label + ": the clients were told of " + std::to_string(end.completed) +
               " completions, the store has " + std::to_string(store_completed));
    }
    return Status::OK();
  }

  // bench/peers/optuna_rdb.py on the same PostgreSQL; its lines go to our
  // stdout, everything else it says to stderr.
  Status RunPeer(const std::string& sampler) {
    const std::string log = o_.dir + "/optuna-" + sampler + ".log";
    Progress("optuna 3.1, " + sampler + ", " + std::to_string(o_.peer_processes) + " processes");
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", o_.peer_seconds);
    const pid_t pid = Spawn({o_.python, o_.peer_script, "--pg", o_.pg_admin, "--processes",
                             std::to_string(o_.peer_processes), "--sampler", sampler, "--seconds",
                             seconds, "--min-trials", std::to_string(o_.min_trials)},
                            log);
    const auto status =
        WaitExit(pid, std::chrono::seconds(static_cast<int64_t>(o_.peer_seconds) + 300));
    if (!status) KillAndReap(pid);
    std::istringstream in(ReadFile(log));
    bool printed = false;
    for (std::string l; std::getline(in, l);) {
      if (l.rfind("bench=", 0) == 0) {
        std::printf("%s\n", l.c_str());
        printed = true;
      } else {
        std::fprintf(stderr, "%s\n", l.c_str());
      }
    }
    std::fflush(stdout);
    if (!status || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0 || !printed) {
      return Status::Internal("bench/peers/optuna_rdb.py (" + sampler + ") failed; see " + log);
    }
    return Status::OK();
  }

  Options o_;
  bool own_dir_ = false, clean_ = true;
  int dbs_ = 0;
  std::unique_ptr<PostgresInstance> pg_;
};

}  // namespace
}  // namespace hpo::bench

int main(int argc, char** argv) {
  hpo::TurnOffMutexDeadlockDetection();  // as hpo-worker does
  using hpo::bench::Options;
  Options o;
  CLI::App app{"bench/server_bench: trials per second through the real hpo-server"};
  app.add_option("--stores", o.stores, "sqlite and/or postgresql")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--workers", o.workers, "gRPC worker counts, one line each (0: none)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--rest-clients", o.rest_clients,
                 "REST ask/tell client counts, one line each (0: none)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--sampler", o.sampler)->capture_default_str();
  app.add_option("--group-commit", o.group_commit,
                 "the servers' --group-commit (false: the lines say group_commit=off)")
      ->capture_default_str();
  app.add_option("--seconds", o.seconds, "the measured window of each line")->capture_default_str();
  app.add_option("--warmup-seconds", o.warmup_seconds, "before each window")->capture_default_str();
  app.add_option(
         "--min-trials", o.min_trials,
         "a window (and each peer process) goes on past --seconds until it holds this many trials")
      ->capture_default_str();
  app.add_option("--existing-trials", o.existing_trials,
                 "finished trials in the experiment for the extra line (0: no such line)")
      ->capture_default_str();
  app.add_option("--existing-workers", o.existing_workers, "gRPC workers of that line (0: none)")
      ->capture_default_str();
  app.add_option("--existing-rest-clients", o.existing_rest_clients,
                 "REST ask/tell clients of a second such line (0: none)")
      ->capture_default_str();
  app.add_option("--existing-stores", o.existing_stores, "the stores that line runs on")
      ->delimiter(',')
      ->capture_default_str();
  app.add_flag("--with-peers", o.with_peers,
               "also run bench/peers/optuna_rdb.py (random and TPE) on PostgreSQL");
  app.add_option("--peer-seconds", o.peer_seconds)->capture_default_str();
  app.add_option("--peer-processes", o.peer_processes)->capture_default_str();
  app.add_option(
      "--pg", o.pg_admin,
      "admin URL of a PostgreSQL server to create the databases on (default: from HPO_TEST_PG_*, "
      "else a private PostgreSQL started here)");
  app.add_option("--server-bin", o.server_bin)->capture_default_str();
  app.add_option("--peer-script", o.peer_script)->capture_default_str();
  app.add_option("--python", o.python)->capture_default_str();
  app.add_option("--dir", o.dir,
                 "scratch directory (default: a new one under /tmp, removed when clean)");
  CLI11_PARSE(app, argc, argv);
  return hpo::bench::Bench(std::move(o)).Main();
}
