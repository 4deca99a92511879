// bench/search_bench: sampler quality on the suite, and suggest latency.
//
//   search_bench [--samplers auto,tpe,gp,random] [--tasks a,b] [--families bbob,classic]
//                [--seeds 20] [--first-seed 0] [--trials 100] [--gp-options k=v,...]
//                [--python /usr/bin/python3] [--suite bench/suite/suite.py]
//                [--quality-only | --latency-only]
//
// Quality: the tasks of bench/suite/suite.py, the one definition of every
// function that the peers (bench/peers/suite_peers.py) use too: this program
// runs `suite.py serve` and asks it for the tasks' spaces and for every
// evaluation. Our samplers are called through the library, sequentially (one
// suggestion, one result). Real tasks (family "real") are left out here:
// bench/suite/rest_driver.py runs them through the REST ask/tell API. One line
// per (task, sampler, checkpoint), the same as the peers print:
//   bench=search func=hartmann6 family=classic sampler=gp trials=50 seeds=20
//       median_regret=X q25=A q75=B regrets=r0,r1,...
// Latency: Suggest with 100 / 1,000 / 10,000 completed observations of 8
// parameters, one suggestion and a batch of 16 (median of 11 calls; wall
// time and this thread's CPU time, the steadier figure on a shared machine):
//   bench=suggest sampler=tpe observations=1000 params=8 count=1 ms=X cpu_ms=Y
// `--gp-options` changes GpOptions of the "gp" sampler (and auto's GP) for
// ablations: warp_output=0, startup_trials=5, num_candidates=2000, ...
//
// With --multi-objective: the problems of bench/suite/mo_suite.py instead
// (--problems narrows them), one JSON line of evaluations per problem,
// sampler and seed, which bench/mo_compare.py scores by hypervolume (with
// --fidelity: early stopping on several objectives against full budgets,
// see MultiFidelity); and Suggest's latency at 1,000 results with 2 and 3
// objectives:
//   bench=suggest sampler=tpe observations=1000 params=8 objectives=2 count=1 ms=X cpu_ms=Y
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "search/gp_sampler.h"
#include "search/pruner.h"
#include "search/registry.h"
#include "search/sampler.h"
#include "testing/objectives.h"

using namespace hpo;
using namespace hpo::search;
using nlohmann::json;

namespace {

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Applies "key=value,..." to GpOptions; false on an unknown key.
bool ApplyGpOptions(const std::string& spec, GpOptions* o) {
  for (const std::string& kv : Split(spec)) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) return false;
    const std::string k = kv.substr(0, eq);
    const double v = std::atof(kv.substr(eq + 1).c_str());
    if (k == "startup_trials")
      o->startup_trials = static_cast<int>(v);
    else if (k == "warp_output")
      o->warp_output = v != 0;
    else if (k == "max_observations")
      o->max_observations = static_cast<int>(v);
    else if (k == "max_fit_observations")
      o->max_fit_observations = static_cast<int>(v);
    else if (k == "num_candidates")
      o->num_candidates = static_cast<int>(v);
    else if (k == "num_local")
      o->num_local = static_cast<int>(v);
    else if (k == "local_iterations")
      o->local_iterations = static_cast<int>(v);
    else if (k == "num_restarts")
      o->fit.num_restarts = static_cast<int>(v);
    else if (k == "max_iterations")
      o->fit.max_iterations = static_cast<int>(v);
    else if (k == "num_initial_draws")
      o->fit.num_initial_draws = static_cast<int>(v);
    else if (k == "min_noise")
      o->fit.min_noise = v;
    else if (k == "trust_region_dims")
      o->trust_region_dims = static_cast<int>(v);
    else if (k == "warp_inputs")
      o->warp_inputs = v != 0;
    else if (k == "incumbent_by_mean")
      o->incumbent_by_mean = v != 0;
    else
      return false;
  }
  return true;
}

GpOptions g_gp_options;

std::unique_ptr<Sampler> Make(const std::string& name) {
  // "gp" with --gp-options goes around the registry; everything else is
  // what a spec's algorithm.sampler gets.
  if (name == "gp") return MakeGpSampler(g_gp_options);
  SamplerContext context;
  context.gp = g_gp_options;
  auto made = MakeSampler(name, context, "--samplers");
  if (!made.ok()) return nullptr;
  return std::move(*made);
}

// CPU time of this thread: unlike wall time, not inflated by other
// processes on a busy machine.
double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// numpy.percentile's default (linear interpolation between order statistics),
// so that these lines and the peers' agree on the same numbers.
double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q / 100 * (v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - lo) * (v[hi] - v[lo]);
}

// The median wall and thread-CPU milliseconds of 11 calls of Suggest(count)
// on a fresh sampler (seed 1).
std::pair<double, double> TimeSuggest(Sampler& sampler, const SearchSpace& space, const History& h,
                                      int count) {
  Rng rng(1);
  std::vector<double> ms, cpu_ms;
  for (int rep = 0; rep < 11; ++rep) {
    const double cpu_start = ThreadCpuMs();
    const auto start = std::chrono::steady_clock::now();
    auto out = sampler.Suggest(space, h, count, rng);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
    cpu_ms.push_back(ThreadCpuMs() - cpu_start);
  }
  return {Percentile(ms, 50), Percentile(cpu_ms, 50)};
}

// `suite.py serve` as a child process: one JSON request per line on its
// stdin, one answer per line on its stdout.
class Suite {
 public:
  Suite(const std::string& python, const std::string& script) {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) std::perror("pipe"), std::exit(1);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      close(to_child[1]);
      close(from_child[0]);
      execl(python.c_str(), python.c_str(), script.c_str(), "serve", static_cast<char*>(nullptr));
      std::perror(("exec " + python).c_str());
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    in_ = fdopen(to_child[1], "w");
    out_ = fdopen(from_child[0], "r");
  }
  ~Suite() {
    std::fclose(in_);
    std::fclose(out_);
    waitpid(pid_, nullptr, 0);
  }

  json Call(const json& request) {
    const std::string line = request.dump() + "\n";
    std::fwrite(line.data(), 1, line.size(), in_);
    std::fflush(in_);
    std::string answer;
    char buf[65536];
    while (std::fgets(buf, sizeof buf, out_)) {
      answer += buf;
      if (!answer.empty() && answer.back() == '\n') break;
    }
    if (answer.empty()) {
      std::fprintf(stderr, "search_bench: the suite process ended (see its error above)\n");
      std::exit(1);
    }
    return json::parse(answer);
  }

 private:
  pid_t pid_;
  FILE* in_;
  FILE* out_;
};

struct Task {
  std::string name, family;
  SearchSpace space;
  double optimum = 0;
};

std::vector<Task> LoadTasks(Suite& suite) {
  std::vector<Task> out;
  for (const json& t : suite.Call({{"cmd", "list"}})) {
    Task task;
    task.name = t.at("name");
    task.family = t.at("family");
    auto space = ParseSearchSpace(t.at("space"), task.name);
    if (!space.ok()) {
      std::fprintf(stderr, "search_bench: task %s: %s\n", task.name.c_str(),
                   space.status().ToString().c_str());
      std::exit(1);
    }
    task.space = std::move(*space);
    task.optimum = t.at("optimum").is_null() ? 0.0 : t.at("optimum").get<double>();
    out.push_back(std::move(task));
  }
  return out;
}

void Quality(Suite& suite, const std::vector<std::string>& samplers, const std::string& tasks,
             const std::string& families, int first_seed, int seeds, int trials) {
  const std::vector<std::string> names = Split(tasks), fams = Split(families);
  std::vector<int> checkpoints;
  for (int c : {25, 50, 100}) {
    if (c <= trials) checkpoints.push_back(c);
  }
  for (const Task& task : LoadTasks(suite)) {
    if (!names.empty() && std::find(names.begin(), names.end(), task.name) == names.end()) continue;
    if (!fams.empty() && std::find(fams.begin(), fams.end(), task.family) == fams.end()) continue;
    if (task.family == "real") {
      std::fprintf(stderr, "search_bench: %s is a real task: bench/suite/rest_driver.py runs it\n",
                   task.name.c_str());
      continue;
    }
    for (const std::string& sname : samplers) {
      std::map<int, std::vector<double>> regret;
      const auto start = std::chrono::steady_clock::now();
      for (int seed = first_seed; seed < first_seed + seeds; ++seed) {
        auto sampler = Make(sname);
        Rng rng(seed);
        History h;
        double best_seen = INFINITY, best_f = INFINITY;
        for (int t = 0; t < trials; ++t) {
          Assignment a = sampler->Suggest(task.space, h, 1, rng).at(0);
          const json r = suite.Call({{"cmd", "eval"},
                                     {"task", task.name},
                                     {"params", task.space.ToJson(a)},
                                     {"seed", seed},
                                     {"trial", t}});
          const double y = r.at("y"), f = r.at("f");
          if (y < best_seen) best_seen = y, best_f = f;
          h.trials.push_back({t, TrialStatus::kCompleted, std::move(a), y, {}});
          if (std::count(checkpoints.begin(), checkpoints.end(), t + 1)) {
            regret[t + 1].push_back(best_f - task.optimum);
          }
        }
      }
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      for (const auto& [t, r] : regret) {
        std::string all;
        char buf[64];
        for (double v : r) {
          std::snprintf(buf, sizeof buf, "%s%.6g", all.empty() ? "" : ",", v);
          all += buf;
        }
        std::printf(
            "bench=search func=%s family=%s sampler=%s trials=%d seeds=%zu median_regret=%.6g "
            "q25=%.6g q75=%.6g regrets=%s\n",
            task.name.c_str(), task.family.c_str(), sname.c_str(), t, r.size(), Percentile(r, 50),
            Percentile(r, 25), Percentile(r, 75), all.c_str());
      }
      std::fflush(stdout);
      std::fprintf(stderr, "bench: %s/%s %d seeds in %.1fs\n", task.name.c_str(), sname.c_str(),
                   seeds, secs);
    }
  }
}

// Several objectives: the problems of bench/suite/mo_suite.py, each sampler
// run sequentially for `trials` trials per seed, every trial completed with
// all its objectives (and its constraint violation). One JSON line per
// (problem, sampler, seed), the evaluations in trial order, as
// bench/peers/mo_peers.py prints them; bench/mo_compare.py turns them into
// hypervolumes.
void MultiObjective(Suite& suite, const std::vector<std::string>& samplers,
                    const std::string& problems, int first_seed, int seeds, int trials) {
  const std::vector<std::string> names = Split(problems);
  for (const json& p : suite.Call({{"cmd", "list"}})) {
    const std::string name = p.at("name");
    if (!names.empty() && std::find(names.begin(), names.end(), name) == names.end()) continue;
    auto space = ParseSearchSpace(p.at("space"), name);
    if (!space.ok()) {
      std::fprintf(stderr, "search_bench: problem %s: %s\n", name.c_str(),
                   space.status().ToString().c_str());
      std::exit(1);
    }
    const bool constrained = p.at("constrained");
    for (const std::string& sname : samplers) {
      const auto start = std::chrono::steady_clock::now();
      for (int seed = first_seed; seed < first_seed + seeds; ++seed) {
        auto sampler = Make(sname);
        Rng rng(seed);
        History h;
        json trace = json::array();
        for (int t = 0; t < trials; ++t) {
          Assignment a = sampler->Suggest(*space, h, 1, rng).at(0);
          const json r =
              suite.Call({{"cmd", "eval"}, {"problem", name}, {"params", space->ToJson(a)}});
          Observation o;
          o.number = t;
          o.status = TrialStatus::kCompleted;
          o.params = std::move(a);
          o.values = r.at("values").get<std::vector<double>>();
          o.value = o.values.at(0);
          if (constrained) o.violation = r.at("violation").get<double>();
          h.trials.push_back(std::move(o));
          trace.push_back({{"values", r.at("values")}, {"violation", r.at("violation")}});
        }
        std::printf("%s\n",
                    json{{"problem", name}, {"sampler", sname}, {"seed", seed}, {"trace", trace}}
                        .dump()
                        .c_str());
        std::fflush(stdout);
      }
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(stderr, "bench: %s/%s %d seeds in %.1fs\n", name.c_str(), sname.c_str(), seeds,
                   secs);
    }
  }
}

// Several objectives with early stopping (--fidelity): every problem's
// objectives follow a learning curve over `max_step` steps (mo_suite.py's
// at_step), and one worker runs trials in turn until `budget_trials` full
// trials' worth of steps is spent: `none` runs each trial to its end (MO
// random search with full budgets when the sampler is random), `asha` stops
// trials at rungs by the several-objective rule (ASHA, min_resource 1,
// reduction factor 3, max_resource max_step). One JSON line per (problem,
// sampler, rule, seed): each completed trial's steps spent so far, final
// objectives and violation, in order; bench/mo_compare.py fidelity compares
// the budgets.
// `curve_offset`: how far above its final value a curve starts, as a
// fraction of the reference point (mo_suite.py's at_step; 0: every step is
// the final value, early rungs rank trials exactly).
void MultiFidelity(Suite& suite, const std::vector<std::string>& samplers,
                   const std::string& problems, int first_seed, int seeds, int budget_trials,
                   int max_step, double curve_offset) {
  const std::vector<std::string> names = Split(problems);
  AshaOptions asha;
  asha.max_resource = max_step;
  for (const json& p : suite.Call({{"cmd", "list"}})) {
    const std::string name = p.at("name");
    if (!names.empty() && std::find(names.begin(), names.end(), name) == names.end()) continue;
    auto space = ParseSearchSpace(p.at("space"), name);
    if (!space.ok()) std::exit(1);
    const bool constrained = p.at("constrained");
    for (const std::string& sname : samplers) {
      for (const std::string rule : {"none", "asha"}) {
        for (int seed = first_seed; seed < first_seed + seeds; ++seed) {
          auto sampler = Make(sname);
          auto pruner = rule == "asha" ? std::move(*MakeAshaPruner(asha)) : MakeNopPruner();
          Rng rng(seed);
          History h;
          json completions = json::array();
          int64_t spent = 0;
          const int64_t budget = static_cast<int64_t>(budget_trials) * max_step;
          for (int t = 0; spent < budget; ++t) {
            Observation o(t, TrialStatus::kRunning, sampler->Suggest(*space, h, 1, rng).at(0),
                          std::nullopt, {});
            h.trials.push_back(o);
            const json params = space->ToJson(o.params);
            json r;
            for (int step = 1; step <= max_step && spent < budget; ++step) {
              r = suite.Call({{"cmd", "eval_step"},
                              {"problem", name},
                              {"params", params},
                              {"step", step},
                              {"max_step", max_step},
                              {"offset", curve_offset}});
              ++spent;
              const auto values = r.at("values").get<std::vector<double>>();
              Observation& mine = h.trials.back();
              mine.curve.emplace_back(step, values.at(0));
              mine.curve_values.emplace_back(step, values);
              // mo_suite's constraints depend on the parameters alone:
              // known, and final, from the first step.
              if (constrained) mine.known_violation = r.at("violation").get<double>();
              if (step == max_step) {
                mine.status = TrialStatus::kCompleted;
                mine.values = values;
                mine.value = values.at(0);
                if (constrained) mine.violation = r.at("violation").get<double>();
                completions.push_back(
                    {{"spent", spent}, {"values", values}, {"violation", r.at("violation")}});
              } else if (pruner->ShouldPrune(h, mine)) {
                mine.status = TrialStatus::kPruned;
                break;
              }
            }
            if (h.trials.back().status == TrialStatus::kRunning)
              h.trials.back().status = TrialStatus::kFailed;
          }
          std::printf("%s\n", json{{"problem", name},
                                   {"sampler", sname},
                                   {"rule", rule},
                                   {"seed", seed},
                                   {"budget", budget},
                                   {"completions", completions}}
                                  .dump()
                                  .c_str());
          std::fflush(stdout);
        }
        std::fprintf(stderr, "bench: fidelity %s/%s/%s %d seeds\n", name.c_str(), sname.c_str(),
                     rule.c_str(), seeds);
      }
    }
  }
}

// Suggest with 1,000 completed observations of 8 parameters and 2 and 3
// objectives (median of 11 calls, wall and thread CPU time):
//   bench=suggest sampler=tpe observations=1000 params=8 objectives=2 count=1 ms=X cpu_ms=Y
void LatencyMultiObjective(const std::vector<std::string>& samplers) {
  const auto space = testing::Box("latency", 8, 0, 1);
  for (int objectives : {2, 3}) {
    Rng data(objectives);
    History h;
    for (int i = 0; i < 1000; ++i) {
      Observation o;
      o.number = i;
      o.status = TrialStatus::kCompleted;
      o.params = SampleUniform(space, data);
      for (int m = 0; m < objectives; ++m) {
        double y = 0;
        for (size_t k = 0; k < o.params.size(); ++k) {
          const double target = (m + 1.0) / (objectives + 1.0);
          y += (o.params[k] - target) * (o.params[k] - target);
        }
        o.values.push_back(y);
      }
      o.value = o.values[0];
      h.trials.push_back(std::move(o));
    }
    for (const auto& sname : samplers) {
      const auto [ms, cpu_ms] = TimeSuggest(*Make(sname), space, h, 1);
      std::printf(
          "bench=suggest sampler=%s observations=1000 params=8 objectives=%d count=1 ms=%.3f "
          "cpu_ms=%.3f\n",
          sname.c_str(), objectives, ms, cpu_ms);
      std::fflush(stdout);
    }
  }
}

void Latency(const std::vector<std::string>& samplers) {
  const auto space = testing::Box("latency", 8, 0, 1);
  for (int n : {100, 1000, 10000}) {
    Rng data(n);
    History h;
    for (int i = 0; i < n; ++i) {
      Assignment a = SampleUniform(space, data);
      double y = 0;
      for (double v : a) y += (v - 0.3) * (v - 0.3);
      h.trials.push_back({i, TrialStatus::kCompleted, std::move(a), y, {}});
    }
    for (const auto& sname : samplers) {
      for (int count : {1, 16}) {
        const auto [ms, cpu_ms] = TimeSuggest(*Make(sname), space, h, count);
        std::printf(
            "bench=suggest sampler=%s observations=%d params=8 count=%d ms=%.3f cpu_ms=%.3f\n",
            sname.c_str(), n, count, ms, cpu_ms);
        std::fflush(stdout);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int seeds = 20, first_seed = 0, trials = 100;
  std::string samplers = "auto,tpe,gp,random", tasks, families;
  std::string python = "/usr/bin/python3", script = "bench/suite/suite.py";
  bool quality = true, latency = true, multi_objective = false, fidelity = false;
  int max_step = 27;
  double curve_offset = 0.25;
  std::string problems;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--seeds") {
      seeds = std::atoi(next().c_str());
    } else if (a == "--first-seed") {
      first_seed = std::atoi(next().c_str());
    } else if (a == "--trials") {
      trials = std::atoi(next().c_str());
    } else if (a == "--samplers") {
      samplers = next();
    } else if (a == "--tasks" || a == "--funcs") {
      tasks = next();
    } else if (a == "--families") {
      families = next();
    } else if (a == "--python") {
      python = next();
    } else if (a == "--suite") {
      script = next();
    } else if (a == "--gp-options") {
      if (!ApplyGpOptions(next(), &g_gp_options)) {
        std::fprintf(stderr, "search_bench: bad --gp-options (key=value,... of GpOptions)\n");
        return 2;
      }
    } else if (a == "--multi-objective") {
      multi_objective = true;
    } else if (a == "--problems") {
      problems = next();
    } else if (a == "--fidelity") {
      fidelity = true;
    } else if (a == "--max-step") {
      max_step = std::atoi(next().c_str());
    } else if (a == "--curve-offset") {
      curve_offset = std::atof(next().c_str());
    } else if (a == "--latency-only") {
      quality = false;
    } else if (a == "--quality-only") {
      latency = false;
    } else {
      std::fprintf(
          stderr,
          "usage: search_bench [--samplers a,b] [--tasks t,u] [--families f,g] [--seeds N] "
          "[--first-seed N] [--trials N] [--gp-options k=v,...] [--python PATH] [--suite PATH] "
          "[--latency-only|--quality-only] [--multi-objective [--problems p,q] [--fidelity "
          "[--max-step 27] [--curve-offset 0.25]]]\n");
      return 2;
    }
  }
  for (const auto& s : Split(samplers)) {
    if (!Make(s)) {
      std::fprintf(stderr, "search_bench: unknown sampler '%s'\n", s.c_str());
      return 2;
    }
  }
  if (multi_objective) {
    if (quality) {
      Suite suite(python, script == "bench/suite/suite.py" ? "bench/suite/mo_suite.py" : script);
      if (fidelity) {
        MultiFidelity(suite, Split(samplers), problems, first_seed, seeds, trials, max_step,
                      curve_offset);
      } else {
        MultiObjective(suite, Split(samplers), problems, first_seed, seeds, trials);
      }
    }
    if (latency) LatencyMultiObjective(Split(samplers));
    return 0;
  }
  if (quality) {
    Suite suite(python, script);
    Quality(suite, Split(samplers), tasks, families, first_seed, seeds, trials);
  }
  if (latency) Latency(Split(samplers));
  return 0;
}
