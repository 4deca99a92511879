// bench/store_bench: trials per second through the store alone, the way a
// worker uses it: lease + 3 reports + complete, from 1 and 4 threads. Each
// count runs twice: with the trials created before the clock starts (the
// lease takes a pending one), and with each trial's creation timed too
// (created already leased to its thread, as the server answers a device
// that asks for work), which is what Optuna's figure includes.
//
//   store_bench [--sqlite DIR] [--postgresql URL] [--trials N]
//
// Prints one line per measurement:
//   bench=store backend=postgresql threads=4 trials=N seconds=S trials_per_s=X errors=E
//       cpu_ms_per_trial=C [pg_cpu_ms_per_trial=P]
//   bench=store backend=postgresql threads=4 create=1 trials=N seconds=S trials_per_s=X errors=E
//   ...
// cpu_ms_per_trial is this process's CPU over the timed loop (the store's
// client side); pg_cpu_ms_per_trial the PostgreSQL processes' on this
// machine (testing/process.h: a figure, not a proof, if others use it).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "server/store/store.h"
#include "testing/process.h"

using namespace hpo::store;

namespace {

int Fail(const hpo::Status& s) {
  std::fprintf(stderr, "store_bench: %s\n", s.ToString().c_str());
  return 1;
}

// The trial's parameters: 8, as in the Optuna reference run.
constexpr char kParams[] =
    "{\"p0\":0.1,\"p1\":0.2,\"p2\":3,\"p3\":\"adam\",\"p4\":0.5,\"p5\":64,"
    "\"p6\":1e-4,\"p7\":\"relu\"}";

// One line: `threads` threads run `trials` trials through the store at `url`.
// With `create`, each trial is created inside the timed loop, leased to the
// thread that runs it; without, all are created first and leased from the
// pending pool.
int RunOne(const std::string& url, const std::string& backend, int threads, int trials,
           bool create) {
  StoreOptions options;
  options.pool_size = threads;
  auto opened = OpenStore(url, options);
  if (!opened.ok()) return Fail(opened.status());
  Store& store = **opened;
  NewExperiment e{"bench", "{}", {}};
  auto exp = store.CreateExperiment(e);
  if (!exp.ok()) return Fail(exp.status());
  if (!create) {
    std::vector<NewTrial> ts(trials);
    for (NewTrial& t : ts) t.params_json = kParams;
    auto created = store.CreateTrials(exp->id, ts);
    if (!created.ok()) return Fail(created.status());
  }

  std::fprintf(stderr, "store_bench: %s, %d threads, %d trials%s...\n", backend.c_str(), threads,
               trials, create ? ", each created in the loop" : "");
  std::atomic<int> claimed{0}, done{0}, errors{0};
  // The next trial this thread runs: created leased to it, or leased from
  // the pending ones; nullopt when there are no more.
  auto next = [&](const std::string& owner) -> std::optional<Id> {
    for (;;) {
      if (create) {
        if (claimed.fetch_add(1) >= trials) return std::nullopt;
        NewTrial t;
        t.params_json = kParams;
        t.lease_owner = owner;
        t.lease_ms = 60'000;
        auto created = store.CreateTrials(exp->id, {t});
        if (created.ok() && created->size() == 1) return created->front().id;
        ++errors;
        continue;
      }
      auto lease = store.LeaseNextTrial({owner, 60'000, exp->id, std::nullopt});
      if (!lease.ok()) {
        ++errors;
        continue;
      }
      if (!lease->has_value()) return std::nullopt;
      return (*lease)->id;
    }
  };
  const bool pg = backend == "postgresql";
  const auto pg0 = pg ? hpo::testing::PostgresCpuByPid() : std::map<pid_t, double>{};
  const double self0 = hpo::testing::CpuSeconds(getpid());
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const std::string owner = "bench-" + std::to_string(t);
      while (const std::optional<Id> id = next(owner)) {
        for (int step = 0; step < 3; ++step) {
          Measurement m;
          m.step = step;
          m.metrics_json = "{\"loss\":" + std::to_string(1.0 / (step + 1)) + "}";
          m.samples_per_sec = 1000;
          m.system_setting_json = "{\"batch_size\":64,\"threads\":1}";
          if (!store.ReportMeasurement(*id, owner, m, 60'000).ok()) ++errors;
        }
        if (!store.FinishTrial(*id, owner, {TrialState::kCompleted, "{\"loss\":0.33}", ""}).ok()) {
          ++errors;
        }
        ++done;
      }
    });
  }
  for (auto& th : pool) th.join();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double per_trial = done > 0 ? 1000.0 / done : 0;
  const double self_ms = (hpo::testing::CpuSeconds(getpid()) - self0) * per_trial;
  char pg_field[64] = "";
  if (pg) {
    std::snprintf(
        pg_field, sizeof pg_field, " pg_cpu_ms_per_trial=%.3f",
        hpo::testing::PostgresCpuBetween(pg0, hpo::testing::PostgresCpuByPid()) * per_trial);
  }
  std::printf(
      "bench=store backend=%s threads=%d%s trials=%d seconds=%.3f trials_per_s=%.1f "
      "errors=%d cpu_ms_per_trial=%.3f%s\n",
      backend.c_str(), threads, create ? " create=1" : "", done.load(), secs, done / secs,
      errors.load(), self_ms, pg_field);
  std::fflush(stdout);
  return errors == 0 && done == trials ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string sqlite_dir, pg_url;
  int trials = 2000;
  std::vector<int> thread_counts = {1, 4};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--sqlite" && i + 1 < argc) {
      sqlite_dir = argv[++i];
    } else if (a == "--postgresql" && i + 1 < argc) {
      pg_url = argv[++i];
    } else if (a == "--trials" && i + 1 < argc) {
      trials = std::atoi(argv[++i]);
    } else if (a == "--threads" && i + 1 < argc) {
      thread_counts.clear();
      for (const char* p = argv[++i]; *p;) {
        char* end = nullptr;
        const long n = std::strtol(p, &end, 10);
        if (end == p || n < 1 || n > 1024 || (*end != ',' && *end != '\0')) {
          std::fprintf(stderr, "store_bench: --threads: '%s' is not a list of counts 1-1024\n",
                       argv[i]);
          return 2;
        }
        thread_counts.push_back(static_cast<int>(n));
        p = *end == ',' ? end + 1 : end;
      }
    } else {
      std::fprintf(stderr,
                   "usage: store_bench [--sqlite DIR] [--postgresql URL] [--trials N] "
                   "[--threads 1,4]\n");
      return 2;
    }
  }
  if (sqlite_dir.empty() && pg_url.empty()) {
    std::fprintf(stderr, "store_bench: give --sqlite DIR and/or --postgresql URL\n");
    return 2;
  }
  int rc = 0;
  for (bool create : {false, true}) {
    for (int threads : thread_counts) {
      if (!sqlite_dir.empty()) {
        const auto path =
            std::filesystem::path(sqlite_dir) / ("bench-" + std::to_string(threads) + ".db");
        std::filesystem::remove(path);
        rc |= RunOne("sqlite://" + path.string(), "sqlite", threads, trials, create);
      }
      if (!pg_url.empty()) rc |= RunOne(pg_url, "postgresql", threads, trials, create);
    }
  }
  return rc;
}
