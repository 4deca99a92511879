// bench/search_bench: sampler quality and suggest latency.
//
//   search_bench [--seeds N] [--trials N] [--samplers random,tpe,gp] [--funcs branin,...]
//                [--latency-only | --quality-only]
//
// Quality: for each function and sampler, N seeds of sequential search;
// prints the median best-so-far regret at 25, 50 and 100 trials:
//   bench=search func=hartmann6 sampler=tpe trials=50 median_regret=X
// Latency: one Suggest call with 100 / 1,000 / 10,000 completed
// observations of 8 parameters (median of 21 calls; wall time and this
// thread's CPU time, the steadier figure on a shared machine):
//   bench=suggest sampler=tpe observations=1000 params=8 ms=X cpu_ms=Y
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <sstream>

#include "bench/objectives.h"
#include "search/sampler.h"
#include "search/tpe.h"
#if __has_include("search/gp_sampler.h")
#include "search/gp_sampler.h"
#define HPO_HAVE_GP 1
#endif

using namespace hpo;
using namespace hpo::search;

namespace {

std::unique_ptr<Sampler> Make(const std::string& name) {
  if (name == "random") return MakeRandomSampler();
  if (name == "tpe") return MakeTpeSampler();
#ifdef HPO_HAVE_GP
  if (name == "gp") return MakeGpSampler();
#endif
  return nullptr;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

// CPU time of this thread: unlike wall time, not inflated by other
// processes on a busy machine.
double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void Quality(const std::vector<std::string>& samplers, const std::vector<std::string>& funcs,
             int seeds, int trials) {
  const std::vector<int> checkpoints = {25, 50, 100};
  for (const auto& obj : bench::AllObjectives()) {
    if (std::find(funcs.begin(), funcs.end(), obj.name) == funcs.end()) continue;
    for (const auto& sname : samplers) {
      std::map<int, std::vector<double>> regret;
      const auto start = std::chrono::steady_clock::now();
      for (int seed = 0; seed < seeds; ++seed) {
        auto sampler = Make(sname);
        Rng rng(seed);
        History h;
        double best = std::numeric_limits<double>::infinity();
        for (int t = 1; t <= trials; ++t) {
          Assignment a = sampler->Suggest(obj.space, h, 1, rng).at(0);
          const double y = obj.f(obj.space.ToJson(a));
          best = std::min(best, y);
          h.trials.push_back({t - 1, TrialStatus::kCompleted, std::move(a), y, {}});
          if (std::count(checkpoints.begin(), checkpoints.end(), t)) {
            regret[t].push_back(best - obj.optimum);
          }
        }
      }
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      for (const auto& [t, r] : regret) {
        std::printf("bench=search func=%s sampler=%s trials=%d seeds=%d median_regret=%.6g\n",
                    obj.name.c_str(), sname.c_str(), t, seeds, Median(r));
      }
      std::fprintf(stderr, "search_bench: %s/%s done in %.1fs\n", obj.name.c_str(), sname.c_str(),
                   secs);
      std::fflush(stdout);
    }
  }
}

void Latency(const std::vector<std::string>& samplers) {
  const auto space = bench::Box("latency", 8, 0, 1);
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
      auto sampler = Make(sname);
      Rng rng(1);
      std::vector<double> ms, cpu_ms;
      for (int rep = 0; rep < 21; ++rep) {
        const double cpu_start = ThreadCpuMs();
        const auto start = std::chrono::steady_clock::now();
        auto out = sampler->Suggest(space, h, 1, rng);
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
        cpu_ms.push_back(ThreadCpuMs() - cpu_start);
      }
      std::printf("bench=suggest sampler=%s observations=%d params=8 ms=%.3f cpu_ms=%.3f\n",
                  sname.c_str(), n, Median(ms), Median(cpu_ms));
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int seeds = 20, trials = 100;
  std::string samplers = "random,tpe", funcs = "branin,hartmann6,rosenbrock4,ackley5,levy5,conditional";
#ifdef HPO_HAVE_GP
  samplers += ",gp";
#endif
  bool quality = true, latency = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--seeds") {
      seeds = std::atoi(next().c_str());
    } else if (a == "--trials") {
      trials = std::atoi(next().c_str());
    } else if (a == "--samplers") {
      samplers = next();
    } else if (a == "--funcs") {
      funcs = next();
    } else if (a == "--latency-only") {
      quality = false;
    } else if (a == "--quality-only") {
      latency = false;
    } else {
      std::fprintf(stderr, "usage: search_bench [--seeds N] [--trials N] [--samplers a,b] "
                           "[--funcs f,g] [--latency-only|--quality-only]\n");
      return 2;
    }
  }
  for (const auto& s : Split(samplers)) {
    if (!Make(s)) {
      std::fprintf(stderr, "search_bench: unknown sampler '%s'\n", s.c_str());
      return 2;
    }
  }
  if (quality) Quality(Split(samplers), Split(funcs), seeds, trials);
  if (latency) Latency(Split(samplers));
  return 0;
}
