// bench/fleet_sim: the product's search and placement on a simulated fleet,
// a thin driver of scheduler::Simulator (scheduler/simulator.h says what is
// simulated and what decides).
//
//   fleet_sim [--workers 100,1000] [--spread 10] [--seeds 5] [--policies speed,fifo,shadho]
//             [--sampler auto] [--failure 0.02] [--target 0.075] [--budget TRIALS]
//             [--min-resource 3] [--steps 27] [--reduction-factor 3] [--type promotion|stop]
//             [--migrate 1|0] [--timing-skip ASKS] [--timing-sampler random]
//             [--timing-workers 10000] [--timing-decisions 5000] [-v]
//
// Policies, all with the same sampler, the same ASHA (promotion-type, or
// with --type stop the stopping rule, where speed also migrates trials
// unless --migrate 0) and the same space ranking (they differ only in
// scheduler::Decide's kind):
//   speed   ours (PolicyKind::kSpeed);
//   fifo    the oldest resume or pending item to whoever asks, else the
//           ranking's new trial (PolicyKind::kFifo);
//   shadho  SHADHO's rule (PolicyKind::kShadho) with the correct class order,
//           strongest first from the true speeds, never measured.
//
// Per run: time_to_target_s (simulated seconds until the best completed
// value is at or below the target; nan when the budget ran out first),
// utilization, decision_us (real time in Decide per decision: the one clock
// read, here, around the simulator's decision hook), trials (created by
// then); per (workers, policy) the medians over seeds. Then, at
// --timing-workers, the time per decision alone over the first
// --timing-decisions decisions (mean and 99th percentile), and the time per
// whole ask (offer plus decision) in steady state: after --timing-skip asks,
// with a budget the timed asks cannot exhaust and --timing-sampler's
// suggestions (random by default: the sampler is not what is timed).
// Diagnostics (where promotions ran, what the policy said, and the run's
// decision fingerprint, SimResult::trace, to compare two builds) go to stderr.
//
//   fleet_sim --trace TRACE.json [--reps 5] [-v]
//
// predicts bench/hetero's medians from its own traces (bench/hetero.py
// --predict writes TRACE.json and runs this): the experiment's spaces,
// fleet and settings, and every HeteroTune trial it ran, with its curve and
// cost per step (scheduler/simulator.h, SimTrace). Each policy's runs are
// simulated seed by seed, --reps times each, with the server's long poll,
// in two worlds: `others`, made from the other seeds' trials only (a seed
// never sees its own; the sampler draws), and `replay`, every seed's trials
// with the run's own configurations created in the run's order
// (SimTrace::replay: only placement and timing are simulated). Per policy
// and world one line,
//   bench=fleet_predict fleet=F workload=W policy=P world=others|replay seeds=N reps=R
//         predicted_s=X measured_s=Y measured_lo=L measured_hi=H ratio=X/Y reached=K/M
// the median simulated time to the target beside bench/hetero's measured
// median and that median's 90% bootstrap interval over its seeds (how far
// one run of as many seeds could have put it).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/policy.h"
#include "scheduler/simulator.h"
#include "search/history.h"
#include "search/space.h"

namespace {

using hpo::scheduler::PolicyKind;
using hpo::scheduler::SimResult;
using hpo::scheduler::Simulator;
using hpo::scheduler::SimulatorOptions;

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

double Median(std::vector<double> v) {
  // NaN (target not reached) sorts last: a median of "never" stays never.
  std::sort(v.begin(), v.end(), [](double a, double b) {
    return std::isnan(b) ? !std::isnan(a) : (!std::isnan(a) && a < b);
  });
  const size_t n = v.size();
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  if (n % 2) return v[n / 2];
  return 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The 90% bootstrap interval of the median of `v` (resampled with
// replacement, fixed seed): where another run of as many seeds could put its
// median. NaN (never) sorts last, as in Median.
std::pair<double, double> MedianInterval(const std::vector<double>& v) {
  constexpr int kResamples = 4000;
  if (v.empty()) return {std::nan(""), std::nan("")};
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<size_t> pick(0, v.size() - 1);
  std::vector<double> medians, sample(v.size());
  medians.reserve(kResamples);
  for (int i = 0; i < kResamples; ++i) {
    for (double& x : sample) x = v[pick(rng)];
    medians.push_back(Median(sample));
  }
  std::sort(medians.begin(), medians.end(), [](double a, double b) {
    return std::isnan(b) ? !std::isnan(a) : (!std::isnan(a) && a < b);
  });
  return {medians[kResamples / 20], medians[kResamples - 1 - kResamples / 20]};
}

struct Timed {
  SimResult result;
  std::vector<double> decision_us;
  double MeanUs() const {
    double sum = 0;
    for (double x : decision_us) sum += x;
    return decision_us.empty() ? 0 : sum / decision_us.size();
  }
  double QuantileUs(double q) const {
    if (decision_us.empty()) return 0;
    std::vector<double> v = decision_us;
    const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * v.size()));
    std::nth_element(v.begin(), v.begin() + k, v.end());
    return v[k];
  }
};

// Runs one simulation with Decide timed: the only wall-clock read.
bool RunTimed(SimulatorOptions o, Timed* out) {
  out->decision_us.clear();
  std::vector<double>* samples = &out->decision_us;
  o.decide = [samples](const auto& device, const auto& fleet, double now_s, const auto& items,
                       const auto& speeds, const auto& options) {
    const auto start = std::chrono::steady_clock::now();
    auto d = hpo::scheduler::Decide(device, fleet, now_s, items, speeds, options);
    samples->push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
    return d;
  };
  auto sim = Simulator::Create(std::move(o));
  if (!sim.ok()) {
    std::fprintf(stderr, "fleet_sim: %s\n", sim.status().message().c_str());
    return false;
  }
  out->result = (*sim)->Run();
  return true;
}

void Diagnose(const SimulatorOptions& o, const SimResult& r, bool verbose) {
  std::fprintf(
      stderr,
      "diag workers=%d policy=%s seed=%llu end_s=%.0f best=%.4f decisions=%lld idle=%lld "
      "promotions=%lld "
      "moves=%lld preemptions=%lld completed=%lld failed=%lld max_level=%d "
      "peak_unfinished=%lld/%lld "
      "trace=%016llx\n",
      o.workers, hpo::scheduler::PolicyName(o.policy.kind), static_cast<unsigned long long>(o.seed),
      r.end_s, r.best, static_cast<long long>(r.decisions), static_cast<long long>(r.idle_answers),
      static_cast<long long>(r.promotions), static_cast<long long>(r.moves),
      static_cast<long long>(r.preemptions), static_cast<long long>(r.completed),
      static_cast<long long>(r.failed), r.max_level, static_cast<long long>(r.peak_unfinished),
      static_cast<long long>(r.max_parallel), static_cast<unsigned long long>(r.trace));
  std::fprintf(stderr, "diag   trials_per_space=");
  for (size_t i = 0; i < r.trials_per_space.size(); ++i) {
    std::fprintf(stderr, "%s%lld", i ? "," : "", static_cast<long long>(r.trials_per_space[i]));
  }
  std::fprintf(stderr, "\n");
  for (size_t l = 0; l < r.levels.size(); ++l) {
    const auto& s = r.levels[l];
    std::fprintf(
        stderr,
        "diag   level=%zu segments=%lld speed_pct=%.2f device_s_mean=%.0f paused_s_mean=%.0f\n", l,
        static_cast<long long>(s.segments), s.MeanSpeedPercentile(),
        s.segments ? s.device_s / s.segments : 0, s.segments ? s.paused_s / s.segments : 0);
  }
  if (!r.winner.empty()) {
    std::fprintf(stderr, "diag   winner:");
    for (const auto& seg : r.winner) {
      std::fprintf(stderr, " [level %d pct %.2f waited %.0f ran %.0f]", seg.level,
                   seg.speed_percentile, seg.waited_s, seg.seconds);
    }
    std::fprintf(stderr, "\n");
  }
  if (verbose) {
    for (const auto& [reason, n] : r.reasons)
      std::fprintf(stderr, "diag   reason \"%s\": %lld\n", reason.c_str(),
                   static_cast<long long>(n));
  }
}

// --- Prediction from bench/hetero's traces -----------------------------------

struct TracedRun {
  int seed = 0;
  std::string policy;
  double measured_s = std::numeric_limits<double>::quiet_NaN();  // NaN: not reached
  std::vector<hpo::scheduler::TracedTrial> trials;
};

struct Trace {
  std::string fleet, workload;
  hpo::scheduler::SimTrace world;  // the spaces, devices and overheads; trials per seed below
  SimulatorOptions options;        // the experiment's settings
  double cap_s = 0;
  std::vector<TracedRun> runs;
};

// Reads bench/hetero.py's trace file; the error names the field.
hpo::Result<Trace> ReadTrace(const std::string& path) {
  using hpo::Status;
  std::ifstream in(path);
  if (!in) return Status::InvalidArgument("cannot read " + path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(path + ": not JSON: " + e.what());
  }
  Trace t;
  try {
    t.fleet = j.at("fleet").get<std::string>();
    t.workload = j.at("workload").get<std::string>();
    HPO_ASSIGN_OR_RETURN(t.world.spaces, hpo::search::ParseSearchSpaces(j.at("spaces")));
    t.world.device_speeds = j.at("device_speeds").get<std::vector<double>>();
    t.world.segment_start_s = j.at("segment_start_s").get<double>();
    t.world.pause_s = j.at("pause_s").get<double>();
    const auto direction = j.at("direction").get<std::string>() == "maximize"
                               ? hpo::search::Direction::kMaximize
                               : hpo::search::Direction::kMinimize;
    SimulatorOptions& o = t.options;
    o.samples_per_step = j.at("samples_per_step").get<double>();
    o.steps_per_trial = j.at("steps_per_trial").get<int64_t>();
    o.target = hpo::search::Minimized(direction, j.at("target").get<double>());
    o.sampler = j.at("sampler").get<std::string>();
    const auto& es = j.at("early_stopping");
    o.early_stopping = es.at("rule").get<std::string>();
    o.promotion = es.at("type").get<std::string>() == "promotion";
    o.min_resource = es.at("min_resource").get<int64_t>();
    o.reduction_factor = es.at("reduction_factor").get<double>();
    o.max_trials = j.at("max_trials").get<int64_t>();
    o.max_parallel = j.at("max_parallel").get<int64_t>();
    o.lease_wait_s = j.at("lease_wait_s").get<double>();
    o.failure = 0;  // bench/hetero's workers do not die
    o.benchmark_sigma = j.at("benchmark_sigma").get<double>();
    t.cap_s = j.at("cap_s").get<double>();
    std::map<std::string, size_t> space_index;
    for (size_t i = 0; i < t.world.spaces.size(); ++i) space_index[t.world.spaces[i].name] = i;
    for (const auto& r : j.at("runs")) {
      TracedRun run;
      run.seed = r.at("seed").get<int>();
      run.policy = r.at("policy").get<std::string>();
      if (!r.at("time_to_target_s").is_null())
        run.measured_s = r.at("time_to_target_s").get<double>();
      for (const auto& tr : r.at("trials")) {
        hpo::scheduler::TracedTrial trial;
        const auto name = tr.at("space").get<std::string>();
        const auto it = space_index.find(name);
        if (it == space_index.end())
          return Status::InvalidArgument(path + ": runs[].trials[].space: no space " + name);
        trial.space = it->second;
        HPO_ASSIGN_OR_RETURN(trial.params, t.world.spaces[trial.space].FromJson(tr.at("params")));
        for (const auto& v : tr.at("values"))
          trial.values.push_back(hpo::search::Minimized(direction, v.get<double>()));
        trial.step_s = tr.at("step_s").get<double>();
        run.trials.push_back(std::move(trial));
      }
      t.runs.push_back(std::move(run));
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(path + ": " + e.what());
  }
  if (t.runs.empty()) return Status::InvalidArgument(path + ": runs: none");
  return t;
}

// bench/hetero's policies as the simulator's: default is the speed policy
// with the spec's defaults (as speed and fifo, only placement differs).
std::optional<PolicyKind> SimPolicy(const std::string& hetero_policy) {
  if (hetero_policy == "default") return PolicyKind::kSpeed;
  return hpo::scheduler::ParsePolicyKind(hetero_policy);
}

int Predict(const std::string& path, int reps, bool verbose) {
  auto read = ReadTrace(path);
  if (!read.ok()) {
    std::fprintf(stderr, "fleet_sim: %s\n", read.status().message().c_str());
    return 2;
  }
  const Trace& trace = *read;
  std::vector<std::string> policies;  // as the trace lists them
  std::set<int> seeds;
  for (const auto& r : trace.runs) {
    if (std::find(policies.begin(), policies.end(), r.policy) == policies.end())
      policies.push_back(r.policy);
    seeds.insert(r.seed);
  }
  // Two worlds per run. others: every other seed's trials, whichever policy
  // ran them, and the sampler draws (a prediction of a run not yet made).
  // replay: every seed's trials, and the run's own configurations replayed
  // in the order the run created them (SimTrace::replay), so that only the
  // placement and timing are simulated.
  for (const auto& policy : policies) {
    const auto kind = SimPolicy(policy);
    if (!kind) continue;  // optuna: not ours to simulate
    for (const bool replay : {false, true}) {
      const char* world_name = replay ? "replay" : "others";
      std::vector<double> predicted, measured;
      for (const auto& run : trace.runs) {
        if (run.policy != policy) continue;
        measured.push_back(run.measured_s);
        auto world = std::make_shared<hpo::scheduler::SimTrace>(trace.world);
        for (const auto& other : trace.runs) {
          if (other.seed == run.seed && !replay) continue;
          world->trials.insert(world->trials.end(), other.trials.begin(), other.trials.end());
        }
        if (replay) {
          world->replay.resize(world->spaces.size());
          for (const auto& t : run.trials) world->replay[t.space].push_back(t.params);
        }
        for (int rep = 0; rep < reps; ++rep) {
          SimulatorOptions o = trace.options;
          o.trace = world;
          o.workers = static_cast<int>(world->device_speeds.size());
          o.policy.kind = *kind;
          o.migrate = !o.promotion && *kind == PolicyKind::kSpeed &&
                      (o.early_stopping == "asha" || o.early_stopping == "hyperband");
          o.seed = static_cast<uint64_t>(run.seed) * 1000 + static_cast<uint64_t>(rep);
          o.max_sim_s = trace.cap_s;
          auto sim = Simulator::Create(o);
          if (!sim.ok()) {
            std::fprintf(stderr, "fleet_sim: %s\n", sim.status().message().c_str());
            return 2;
          }
          const SimResult r = (*sim)->Run();
          predicted.push_back(r.time_to_target_s);
          std::fprintf(
              stderr, "diag policy=%s world=%s seed=%d rep=%d predicted_s=%.1f measured_s=%.1f\n",
              policy.c_str(), world_name, run.seed, rep, r.time_to_target_s, run.measured_s);
          if (verbose) Diagnose(o, r, verbose);
        }
      }
      const auto reached = std::count_if(predicted.begin(), predicted.end(),
                                         [](double x) { return !std::isnan(x); });
      const double p = Median(predicted), m = Median(measured);
      const auto [lo, hi] = MedianInterval(measured);
      std::printf(
          "bench=fleet_predict fleet=%s workload=%s policy=%s world=%s seeds=%zu reps=%d "
          "predicted_s=%.1f measured_s=%.1f measured_lo=%.1f measured_hi=%.1f ratio=%.2f "
          "reached=%lld/%zu\n",
          trace.fleet.c_str(), trace.workload.c_str(), policy.c_str(), world_name, measured.size(),
          reps, p, m, lo, hi, p / m, static_cast<long long>(reached), predicted.size());
      std::fflush(stdout);
    }
  }
  return 0;
}

int Usage(const char* argv0) {
  std::fprintf(
      stderr,
      "usage: %s [--workers 100,1000] [--spread 10] [--seeds 5] [--policies speed,fifo,shadho]\n"
      "          [--sampler auto|tpe|gp|random] [--failure 0.02] [--target 0.075] [--budget "
      "TRIALS]\n"
      "          [--min-resource 3] [--steps 27] [--reduction-factor 3] [--type promotion|stop]\n"
      "          [--migrate 1|0] [--timing-skip ASKS] [--timing-sampler random]\n"
      "          [--timing-workers 10000] [--timing-decisions 5000] [-v]\n"
      "       %s --trace TRACE.json [--reps 5] [-v]\n",
      argv0, argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> workers = {100, 1000};
  std::vector<std::string> policies = {"speed", "fifo", "shadho"};
  int seeds = 5;
  int timing_workers = 10000;
  int64_t timing_decisions = 5000;
  bool verbose = false;
  bool migrate = true;       // where it applies, as the spec's default
  int64_t timing_skip = -1;  // steady-state timing: asks skipped first (-1: one per worker)
  // The steady-state timing's sampler: what it times is the offer and the
  // policy, and the GP's suggestions for 10,000 workers' first wave (each
  // fantasizing the running trials) would take the run's minutes before the
  // first timed ask.
  std::string timing_sampler = "random";
  std::string trace_path;
  int reps = 5;
  SimulatorOptions base;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-v") {
      verbose = true;
      continue;
    }
    if (i + 1 >= argc) return Usage(argv[0]);
    const std::string value = argv[++i];
    if (flag == "--workers") {
      workers.clear();
      for (const auto& w : Split(value)) workers.push_back(std::atoi(w.c_str()));
    } else if (flag == "--spread") {
      base.spread = std::atof(value.c_str());
    } else if (flag == "--seeds") {
      seeds = std::atoi(value.c_str());
    } else if (flag == "--budget") {
      base.max_trials = std::atoll(value.c_str());
    } else if (flag == "--policies") {
      policies = Split(value);
    } else if (flag == "--sampler") {
      base.sampler = value;
    } else if (flag == "--failure") {
      base.failure = std::atof(value.c_str());
    } else if (flag == "--bowl") {
      base.bowl_scale = std::atof(value.c_str());
    } else if (flag == "--target") {
      base.target = std::atof(value.c_str());
    } else if (flag == "--min-resource") {
      base.min_resource = std::atoll(value.c_str());
    } else if (flag == "--steps") {
      base.steps_per_trial = std::atoll(value.c_str());
    } else if (flag == "--reduction-factor") {
      base.reduction_factor = std::atof(value.c_str());
    } else if (flag == "--type") {
      if (value != "promotion" && value != "stop") return Usage(argv[0]);
      base.promotion = value == "promotion";
    } else if (flag == "--migrate") {
      if (value != "0" && value != "1") return Usage(argv[0]);
      migrate = value == "1";
    } else if (flag == "--timing-workers") {
      timing_workers = std::atoi(value.c_str());
    } else if (flag == "--timing-skip") {
      timing_skip = std::atoll(value.c_str());
    } else if (flag == "--timing-sampler") {
      timing_sampler = value;
    } else if (flag == "--timing-decisions") {
      timing_decisions = std::atoll(value.c_str());
    } else if (flag == "--trace") {
      trace_path = value;
    } else if (flag == "--reps") {
      reps = std::atoi(value.c_str());
    } else {
      return Usage(argv[0]);
    }
  }
  if (!trace_path.empty()) return reps >= 1 ? Predict(trace_path, reps, verbose) : Usage(argv[0]);
  std::vector<PolicyKind> kinds;
  for (const auto& p : policies) {
    const auto k = hpo::scheduler::ParsePolicyKind(p);
    if (!k) return Usage(argv[0]);
    kinds.push_back(*k);
  }
  if (seeds < 1) return Usage(argv[0]);

  for (int w : workers) {
    for (PolicyKind kind : kinds) {
      std::vector<double> ttt, util, dec, trials;
      for (int seed = 0; seed < seeds; ++seed) {
        SimulatorOptions o = base;
        o.workers = w;
        o.policy.kind = kind;
        o.seed = static_cast<uint64_t>(seed);
        o.migrate = migrate && !o.promotion && kind == PolicyKind::kSpeed &&
                    (o.early_stopping == "asha" || o.early_stopping == "hyperband");
        Timed t;
        if (!RunTimed(o, &t)) return 2;
        const SimResult& r = t.result;
        std::printf(
            "bench=fleet workers=%d spread=%g policy=%s seed=%d time_to_target_s=%.1f "
            "utilization=%.3f "
            "decision_us=%.2f trials=%lld\n",
            w, o.spread, hpo::scheduler::PolicyName(kind), seed, r.time_to_target_s, r.utilization,
            t.MeanUs(), static_cast<long long>(r.trials));
        std::fflush(stdout);
        Diagnose(o, r, verbose);
        ttt.push_back(r.time_to_target_s);
        util.push_back(r.utilization);
        dec.push_back(t.MeanUs());
        trials.push_back(static_cast<double>(r.trials));
      }
      std::printf(
          "bench=fleet_median workers=%d spread=%g policy=%s seeds=%d time_to_target_s=%.1f "
          "utilization=%.3f "
          "decision_us=%.2f trials=%.0f\n",
          w, base.spread, hpo::scheduler::PolicyName(kind), seeds, Median(ttt), Median(util),
          Median(dec), Median(trials));
      std::fflush(stdout);
    }
  }
  if (timing_workers > 0 && timing_decisions > 0) {
    for (PolicyKind kind : kinds) {
      SimulatorOptions o = base;
      o.workers = timing_workers;
      o.policy.kind = kind;
      o.max_decisions = timing_decisions;
      Timed t;
      if (!RunTimed(o, &t)) return 2;
      std::printf(
          "bench=fleet_decisions workers=%d spread=%g policy=%s decisions=%zu decision_us=%.2f "
          "decision_us_p99=%.2f\n",
          timing_workers, o.spread, hpo::scheduler::PolicyName(kind), t.decision_us.size(),
          t.MeanUs(), t.QuantileUs(0.99));
      std::fflush(stdout);
      Diagnose(o, t.result, verbose);
    }
    // Steady state: past the first wave (--timing-skip asks, one per worker
    // by default), with trials
    // paused, promotions on offer and the fleet partly busy, each ask timed
    // whole: the offer built from the trials (again whenever they changed,
    // as the engine builds one per lease) plus the decision.
    for (PolicyKind kind : kinds) {
      SimulatorOptions o = base;
      o.workers = timing_workers;
      o.policy.kind = kind;
      o.migrate = migrate && !o.promotion && kind == PolicyKind::kSpeed &&
                  (o.early_stopping == "asha" || o.early_stopping == "hyperband");
      const int64_t skip = timing_skip >= 0 ? timing_skip : static_cast<int64_t>(timing_workers);
      o.max_decisions = skip + timing_decisions;
      o.sampler = timing_sampler;
      // A budget the timed asks cannot exhaust (unless --budget says
      // otherwise): past it every ask finds nothing to run, which is idle,
      // not steady state.
      if (base.max_trials <= 0) o.max_trials = o.max_decisions + timing_workers;
      Timed t;
      int64_t asks = 0;
      std::chrono::steady_clock::time_point began;
      o.ask_probe = [&](bool begin) {
        if (begin) {
          began = std::chrono::steady_clock::now();
          return;
        }
        if (++asks > skip) {
          t.decision_us.push_back(
              std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - began)
                  .count());
        }
      };
      auto sim = Simulator::Create(o);
      if (!sim.ok()) {
        std::fprintf(stderr, "fleet_sim: %s\n", sim.status().message().c_str());
        return 2;
      }
      t.result = (*sim)->Run();
      std::printf(
          "bench=fleet_asks workers=%d spread=%g policy=%s type=%s sampler=%s asks=%zu "
          "skipped=%lld "
          "ask_us=%.2f ask_us_p99=%.2f on_devices=%lld paused=%lld sim_s=%.0f\n",
          timing_workers, o.spread, hpo::scheduler::PolicyName(kind),
          o.promotion ? "promotion" : "stop", o.sampler.c_str(), t.decision_us.size(),
          static_cast<long long>(skip), t.MeanUs(), t.QuantileUs(0.99),
          static_cast<long long>(t.result.unfinished), static_cast<long long>(t.result.paused),
          t.result.end_s);
      std::fflush(stdout);
    }
  }
  return 0;
}
