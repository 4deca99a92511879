// bench/fleet_sim: the real search code and placement on a simulated fleet.
//
//   fleet_sim [--workers 10,100,1000,10000] [--spread 10] [--seeds 3] [--budget TRIALS]
//             [--policies ours,fifo,shadho] [--sampler auto|tpe|random] [--failure 0.02]
//             [--target 0.075]
//
// A discrete-event simulation: simulated time advances from event to event
// (a lease ends or fails), never by the wall clock. Every decision is made
// by the real code: search::MakeTpeSampler (or random) suggests, the ASHA
// pruner judges each rung, search::RankSpaces / PickSpace split trials
// between two search spaces, and scheduler::PlaceTrial decides which
// pending trial a device that asks gets.
//
// The world. Devices belong to K = min(workers, 16) classes whose speeds are
// log-uniform between 1x and `spread`x (the extremes pinned, so the spread
// is exact); each device runs within 5% of its class and each lease within
// 5% of the device. The two spaces train different workloads, and each
// class runs the second workload at its own factor (lognormal, sigma 0.3),
// so a class that is fast on one is not exactly as fast on the other.
// Each trial runs 27 steps (epochs of 60,000 samples) with loss
//   loss(step) = a + b * exp(-c * step) + noise(0.004)
// where the floor a is a quadratic bowl over the trial's params (the "good"
// space bottoms out at 0.05, the "bad" one at 0.14, under the target), b =
// 0.9, and the rate c grows with the learning rate. ASHA (min resource 3,
// eta 3, max 27) judges at steps 3 and 9; a trial that survives a rung
// becomes a pending promotion (level + 1) and is leased again, so each
// lease is one rung's segment. A trial fails with probability `failure`
// (spread over its segments); a failed segment is retried up to 3 times.
//
// Policies:
//   ours    RankSpaces shares; PlaceTrial with a SpeedModel primed by a
//           noisy benchmark (each class's speed times lognormal(0.4)) and
//           learning from every finished segment's measured speed.
//   fifo    spaces in turn, no ranking; the oldest pending trial (by the
//           time it became pending) to whichever device asks.
//   shadho  SHADHO's scheme: RankSpaces shares, devices ordered by a class
//           order the user gave, wrong for half of the classes (they are
//           shuffled among themselves), never corrected by measurement;
//           importance is the space's share only (SHADHO knows no rungs).
//
// The sampler: `auto` is TPE up to 1,000 workers and random above. TPE's
// constant liar adds every running trial to the bad set without the
// max_bad_observations cap, so with 10,000 trials running each suggestion
// fits a 10,000-kernel mixture and a run would spend minutes in Suggest;
// at that size nearly every trial of the first wave is suggested before
// TPE's startup trials have results anyway.
//
// Per run: time_to_target_s (simulated time until the best completed
// objective <= target; nan when the budget ran out first), utilization
// (busy device-time / (workers * that time)), decision_us (real wall time
// per placement decision), trials (trials created by then). Then, per
// (workers, policy), the medians over seeds.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <queue>
#include <sstream>
#include <string>
#include <vector>

#include "scheduler/placement.h"
#include "scheduler/speed_model.h"
#include "search/history.h"
#include "search/pruner.h"
#include "search/random.h"
#include "search/ranking.h"
#include "search/sampler.h"
#include "search/space.h"
#include "search/tpe.h"

namespace {

using hpo::scheduler::Fleet;
using hpo::scheduler::PlacementCandidate;
using hpo::scheduler::SpeedModel;
using hpo::search::Assignment;
using hpo::search::History;
using hpo::search::Observation;
using hpo::search::Param;
using hpo::search::ParamKind;
using hpo::search::Rng;
using hpo::search::SearchSpace;
using hpo::search::TrialStatus;

constexpr int kStepsPerTrial = 27;
constexpr int64_t kRungs[] = {3, 9, kStepsPerTrial};  // segment ends; level = index
constexpr double kSamplesPerStep = 60000;
constexpr double kSlowestSamplesPerSec = 1000;
constexpr int kMaxAttempts = 3;
constexpr int kMaxClasses = 16;

struct Config {
  int workers = 10;
  double spread = 10;
  uint64_t seed = 0;
  std::string policy = "ours";
  int budget = 0;  // trials; 0 = by worker count
  std::string sampler = "auto";
  double failure = 0.02;
  double target = 0.075;
};

struct RunResult {
  double time_to_target_s = std::numeric_limits<double>::quiet_NaN();
  double utilization = 0;
  double decision_us = 0;
  int trials = 0;
};




// Space 0 ("cnn", good): lr, wd, dropout, width, optimizer {adam, sgd} with
// momentum under sgd. Space 1 ("mlp", bad): the same plus depth and an
// activation, a larger space whose best is worse.
std::vector<SearchSpace> Spaces() {
  SearchSpace good;
  good.name = "cnn";
  good.params = {Param::Float("lr", 1e-5, 1, true), Param::Float("wd", 1e-6, 1e-1, true),
                 Param::Float("dropout", 0, 0.9), Param::Int("width", 16, 1024, true),
                 Param::Categorical("optimizer", {"adam", "sgd"})};
  Param momentum = Param::Float("momentum", 0, 0.99);
  momentum.parent = 4;
  momentum.parent_choice = 1;
  good.params.push_back(momentum);
  SearchSpace bad = good;
  bad.name = "mlp";
  bad.params.push_back(Param::Int("depth", 1, 8));
  bad.params.push_back(Param::Categorical("activation", {"relu", "tanh", "sigmoid"}));
  return {good, bad};
}

double Sq(double x) { return x * x; }

// The learning curve's floor a and rate c for an assignment of space s.
void CurveParams(int s, const Assignment& x, double* a, double* c) {
  const double u_lr = std::log10(x[0]) + 2.5;  // decades from 3e-3
  const double u_wd = std::log10(x[1]) + 4;
  const double u_width = std::log2(x[3]) - 8;
  double pen = 0.20 * Sq(u_lr) + 0.06 * Sq(u_wd) + 0.3 * Sq(x[2] - 0.35) + 0.04 * Sq(u_width);
  if (x[4] == 1) pen += 0.02 + 0.1 * Sq(x[5] - 0.9);  // sgd
  if (s == 1) pen += 0.02 * Sq(x[6] - 3) + (x[7] == 0 ? 0 : 0.03);
  *a = (s == 0 ? 0.05 : 0.14) + pen;
  *c = std::clamp(std::sqrt(x[0] / 3e-3), 0.02, 3.0);
}

class Simulation {
 public:
  explicit Simulation(const Config& cfg) : cfg_(cfg), spaces_(Spaces()), rng_(cfg.seed) {
    budget_ = cfg.budget > 0 ? cfg.budget : std::clamp(20 * cfg.workers, 1000, 20000);
    new_pool_min_ = std::max(2, cfg.workers / 10);
    rank_every_ = std::max(20, cfg.workers / 5);
    histories_.resize(spaces_.size());
    created_.assign(spaces_.size(), 0);
    ranks_.assign(spaces_.size(), {});
    for (auto& r : ranks_) r.share = 1.0 / spaces_.size();
    hpo::search::AshaOptions asha;
    asha.min_resource = kRungs[0];
    asha.reduction_factor = 3;
    asha.max_resource = kStepsPerTrial;
    pruner_ = std::move(hpo::search::MakeAshaPruner(asha)).value();
    const bool tpe_sampler = cfg.sampler == "tpe" || (cfg.sampler == "auto" && cfg.workers <= 1000);
    sampler_ = tpe_sampler ? hpo::search::MakeTpeSampler() : hpo::search::MakeRandomSampler();
    BuildFleet();
  }

  RunResult Run();

 private:
  struct Device {
    int cls = 0;
    double factor = 1;  // this device against its class
  };
  struct Trial {
    int space = 0;
    int hist = 0;  // index in histories_[space].trials
    int level = 0;
    int attempts = 0;
    double pending_since = 0;
    int pool_slot = -1;  // index in pool_, or -1
  };
  struct Event {
    double t;
    int64_t seq;
    int device;
    int trial;
    bool failed;
    double sps;      // the lease's measured samples/s
    double started;  // when the lease began
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };

  static std::string ClassName(int k) { return "class" + std::to_string(k); }
  static std::string Workload(int space) { return space == 0 ? "sim/cnn" : "sim/mlp"; }
  double TrueSpeed(int device, int space) const {
    const Device& d = devices_[device];
    return class_speed_[d.cls] * (space == 0 ? 1 : workload_factor_[d.cls]) * d.factor;
  }

  void BuildFleet();
  void Refill();
  void Rerank();
  void AddPending(int trial);
  void RemovePending(int trial);
  int Decide(int device);
  void Start(int device, int trial);
  void Finish(const Event& e);
  void Dispatch();

  Config cfg_;
  std::vector<SearchSpace> spaces_;
  Rng rng_;
  int budget_ = 0;
  int new_pool_min_ = 0;
  int rank_every_ = 0;

  std::vector<double> class_speed_, workload_factor_;
  std::vector<Device> devices_;
  Fleet fleet_;
  SpeedModel speeds_;  // ours: learned; shadho: the user's order, fixed

  std::vector<History> histories_;
  std::vector<int> created_;
  std::vector<hpo::search::SpaceRank> ranks_;
  int finished_since_rank_ = 0;
  bool ranked_once_ = false;
  std::unique_ptr<hpo::search::Pruner> pruner_;
  std::unique_ptr<hpo::search::Sampler> sampler_;

  std::vector<Trial> trials_;
  std::vector<PlacementCandidate> pool_;  // pending trials, for PlaceTrial
  std::vector<int> pool_trial_;           // trials_ index of each pool_ entry
  int new_in_pool_ = 0;                   // pending trials at level 0, never leased

  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::deque<int> idle_;
  double now_ = 0;
  int64_t seq_ = 0;
  double busy_s_ = 0;
  double best_ = std::numeric_limits<double>::infinity();
  double decision_s_ = 0;
  int64_t decisions_ = 0;
};

void Simulation::BuildFleet() {
  Rng r = rng_.Fork(1);  // the same fleet for every policy of a seed
  const int k = std::min(cfg_.workers, kMaxClasses);
  for (int i = 0; i < k; ++i) {
    const double u = k == 1 ? 0 : i == 0 ? 0 : i == 1 ? 1 : r.Uniform();
    class_speed_.push_back(kSlowestSamplesPerSec * std::pow(cfg_.spread, u));
    workload_factor_.push_back(std::exp(0.3 * r.Normal()));
  }
  for (int i = 0; i < cfg_.workers; ++i) {
    Device d;
    d.cls = i < k ? i : static_cast<int>(r.Below(k));  // every class present
    d.factor = std::exp(0.05 * r.Normal());
    devices_.push_back(d);
    fleet_.Add(ClassName(d.cls));
  }
  if (cfg_.policy == "ours") {
    for (int i = 0; i < k; ++i) {
      // GEMM GFLOP/s: proportional to speed, but noisy (a benchmark is not
      // the workload).
      speeds_.AddBenchmark(ClassName(i), class_speed_[i] / 50 * std::exp(0.4 * r.Normal()));
    }
  } else if (cfg_.policy == "shadho") {
    std::vector<int> order(k);  // classes, slowest first
    for (int i = 0; i < k; ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return class_speed_[a] < class_speed_[b]; });
    // Half the positions are wrong: shuffle the classes at them.
    std::vector<int> wrong;
    for (int i = 0; i < k; ++i) {
      if (r.Uniform() < 0.5) wrong.push_back(i);
    }
    for (size_t i = wrong.size(); i > 1; --i) {
      std::swap(order[wrong[i - 1]], order[wrong[r.Below(i)]]);
    }
    for (int pos = 0; pos < k; ++pos) speeds_.AddBenchmark(ClassName(order[pos]), pos + 1.0);
  }
}

void Simulation::Rerank() {
  if (cfg_.policy == "fifo") return;  // equal shares: spaces in turn
  if (ranked_once_ && finished_since_rank_ < rank_every_) return;
  Rng r = rng_.Fork(1000 + seq_);
  ranks_ = hpo::search::RankSpaces(spaces_, histories_, {}, r);
  finished_since_rank_ = 0;
  ranked_once_ = true;
  for (auto& c : pool_) c.space_priority = ranks_[c.space_index].share;
}

void Simulation::Refill() {
  const int total = static_cast<int>(trials_.size());
  if (new_in_pool_ >= new_pool_min_ || total >= budget_) return;
  Rerank();
  const int want = std::min(2 * new_pool_min_ - new_in_pool_, budget_ - total);
  std::vector<int> per_space(spaces_.size(), 0);
  for (int i = 0; i < want; ++i) {
    const int s = hpo::search::PickSpace(ranks_, created_);
    ++per_space[s];
    ++created_[s];
  }
  for (size_t s = 0; s < spaces_.size(); ++s) {
    if (per_space[s] == 0) continue;
    auto batch = sampler_->Suggest(spaces_[s], histories_[s], per_space[s], rng_);
    for (auto& a : batch) {
      Trial t;
      t.space = static_cast<int>(s);
      t.hist = static_cast<int>(histories_[s].trials.size());
      t.pending_since = now_;
      Observation o;
      o.number = static_cast<int64_t>(trials_.size());
      o.status = TrialStatus::kRunning;  // pending counts as running
      o.params = std::move(a);
      histories_[s].trials.push_back(std::move(o));
      trials_.push_back(t);
      AddPending(static_cast<int>(trials_.size()) - 1);
    }
  }
}

void Simulation::AddPending(int trial) {
  Trial& t = trials_[trial];
  PlacementCandidate c;
  c.trial_id = trial;
  c.space_index = t.space;
  c.space_priority = ranks_[t.space].share;
  // SHADHO ranks spaces only; it has no notion of a promoted trial.
  c.level = cfg_.policy == "shadho" ? 0 : t.level;
  c.workload = Workload(t.space);
  const int64_t start = t.level == 0 ? 0 : kRungs[t.level - 1];
  c.steps_remaining = kRungs[t.level] - start;
  c.samples_per_step = kSamplesPerStep;
  t.pool_slot = static_cast<int>(pool_.size());
  pool_.push_back(std::move(c));
  pool_trial_.push_back(trial);
  if (t.level == 0 && t.attempts == 0) ++new_in_pool_;
}

void Simulation::RemovePending(int trial) {
  Trial& t = trials_[trial];
  const int slot = t.pool_slot;
  if (t.level == 0 && t.attempts == 0) --new_in_pool_;
  t.pool_slot = -1;
  if (slot != static_cast<int>(pool_.size()) - 1) {
    pool_[slot] = std::move(pool_.back());
    pool_trial_[slot] = pool_trial_.back();
    trials_[pool_trial_[slot]].pool_slot = slot;
  }
  pool_.pop_back();
  pool_trial_.pop_back();
}

int Simulation::Decide(int device) {
  const auto start = std::chrono::steady_clock::now();
  int chosen = -1;
  if (cfg_.policy == "fifo") {
    for (int trial : pool_trial_) {
      if (chosen < 0 || trials_[trial].pending_since < trials_[chosen].pending_since ||
          (trials_[trial].pending_since == trials_[chosen].pending_since && trial < chosen)) {
        chosen = trial;
      }
    }
  } else {
    for (size_t i = 0; i < pool_.size(); ++i) {
      pool_[i].waiting_s = now_ - trials_[pool_trial_[i]].pending_since;
    }
    const auto d = hpo::scheduler::PlaceTrial(
        {std::to_string(device), ClassName(devices_[device].cls)}, fleet_, pool_, speeds_);
    if (d) chosen = static_cast<int>(d->trial_id);
  }
  decision_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++decisions_;
  return chosen;
}

void Simulation::Start(int device, int trial) {
  Trial& t = trials_[trial];
  RemovePending(trial);
  const int64_t from = t.level == 0 ? 0 : kRungs[t.level - 1];
  const double steps = static_cast<double>(kRungs[t.level] - from);
  const double sps = TrueSpeed(device, t.space) * std::exp(0.05 * rng_.Normal());
  double duration = steps * kSamplesPerStep / sps;
  // The trial's failure chance, spread over its segments by length.
  const double p_fail = 1 - std::pow(1 - cfg_.failure, steps / kStepsPerTrial);
  const bool failed = rng_.Uniform() < p_fail;
  if (failed) duration *= rng_.Uniform();
  events_.push({now_ + duration, seq_++, device, trial, failed, sps, now_});
}

void Simulation::Finish(const Event& e) {
  Trial& t = trials_[e.trial];
  Observation& o = histories_[t.space].trials[t.hist];
  if (e.failed) {
    if (++t.attempts >= kMaxAttempts) {
      o.status = TrialStatus::kFailed;
    } else {
      t.pending_since = now_;
      AddPending(e.trial);
    }
    return;
  }
  if (cfg_.policy == "ours") {
    speeds_.Observe(ClassName(devices_[e.device].cls), Workload(t.space), "", e.sps);
  }
  ++finished_since_rank_;
  double a, c;
  CurveParams(t.space, o.params, &a, &c);
  const int64_t step = kRungs[t.level];
  const double loss = a + 0.9 * std::exp(-c * step) + 0.004 * rng_.Normal();
  o.curve.emplace_back(step, loss);
  if (step == kStepsPerTrial) {
    o.status = TrialStatus::kCompleted;
    o.value = loss;
    best_ = std::min(best_, loss);
    return;
  }
  if (pruner_->ShouldPrune(histories_[t.space], o)) {
    o.status = TrialStatus::kPruned;
    return;
  }
  ++t.level;
  t.attempts = 0;
  t.pending_since = now_;
  AddPending(e.trial);
}

void Simulation::Dispatch() {
  while (!idle_.empty()) {
    Refill();
    if (pool_.empty()) return;
    const int device = idle_.front();
    const int trial = Decide(device);
    if (trial < 0) return;  // not with these options: PlaceTrial always gives work
    idle_.pop_front();
    Start(device, trial);
  }
}

RunResult Simulation::Run() {
  for (int i = 0; i < cfg_.workers; ++i) idle_.push_back(i);
  Dispatch();
  while (!events_.empty() && best_ > cfg_.target) {
    const Event e = events_.top();
    events_.pop();
    now_ = e.t;
    busy_s_ += e.t - e.started;
    Finish(e);
    idle_.push_back(e.device);
    Dispatch();
  }
  RunResult r;
  // Leases still running at the end count up to then.
  for (; !events_.empty(); events_.pop()) busy_s_ += now_ - events_.top().started;
  if (best_ <= cfg_.target) r.time_to_target_s = now_;
  r.utilization = now_ > 0 ? busy_s_ / (cfg_.workers * now_) : 0;
  r.decision_us = decisions_ > 0 ? 1e6 * decision_s_ / decisions_ : 0;
  r.trials = static_cast<int>(trials_.size());
  return r;
}

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
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--workers 10,100,1000,10000] [--spread 10] [--seeds 3]\n"
               "          [--budget TRIALS] [--policies ours,fifo,shadho]\n"
               "          [--sampler auto|tpe|random] [--failure 0.02] [--target 0.075]\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> workers = {10, 100, 1000, 10000};
  std::vector<std::string> policies = {"ours", "fifo", "shadho"};
  int seeds = 3;
  Config base;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
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
      base.budget = std::atoi(value.c_str());
    } else if (flag == "--policies") {
      policies = Split(value);
    } else if (flag == "--sampler") {
      base.sampler = value;
    } else if (flag == "--failure") {
      base.failure = std::atof(value.c_str());
    } else if (flag == "--target") {
      base.target = std::atof(value.c_str());
    } else {
      return Usage(argv[0]);
    }
  }
  for (int w : workers) {
    if (w < 1) return Usage(argv[0]);
  }
  for (const auto& p : policies) {
    if (p != "ours" && p != "fifo" && p != "shadho") return Usage(argv[0]);
  }
  if (base.sampler != "auto" && base.sampler != "tpe" && base.sampler != "random") {
    return Usage(argv[0]);
  }
  if (!(base.spread >= 1) || seeds < 1) return Usage(argv[0]);

  for (int w : workers) {
    for (const auto& policy : policies) {
      std::vector<double> ttt, util, dec, trials;
      for (int seed = 0; seed < seeds; ++seed) {
        Config cfg = base;
        cfg.workers = w;
        cfg.policy = policy;
        cfg.seed = static_cast<uint64_t>(seed);
        const RunResult r = Simulation(cfg).Run();
        std::printf(
            "bench=fleet workers=%d spread=%g policy=%s seed=%d time_to_target_s=%.1f "
            "utilization=%.3f decision_us=%.2f trials=%d\n",
            w, cfg.spread, policy.c_str(), seed, r.time_to_target_s, r.utilization, r.decision_us,
            r.trials);
        std::fflush(stdout);
        ttt.push_back(r.time_to_target_s);
        util.push_back(r.utilization);
        dec.push_back(r.decision_us);
        trials.push_back(r.trials);
      }
      std::printf(
          "bench=fleet_median workers=%d spread=%g policy=%s seeds=%d time_to_target_s=%.1f "
          "utilization=%.3f decision_us=%.2f trials=%.0f\n",
          w, base.spread, policy.c_str(), seeds, Median(ttt), Median(util), Median(dec),
          Median(trials));
      std::fflush(stdout);
    }
  }
  return 0;
}
