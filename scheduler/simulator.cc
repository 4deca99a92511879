#include "scheduler/simulator.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <tuple>
#include <unordered_set>
#include <utility>

#include "scheduler/offer.h"
#include "scheduler/step_samples.h"
#include "search/history.h"
#include "search/promotion.h"
#include "search/pruner.h"
#include "search/random.h"
#include "search/ranking.h"
#include "search/registry.h"
#include "search/sampler.h"
#include "search/space.h"

namespace hpo::scheduler {
namespace {

using search::Assignment;
using search::Param;
using search::SearchSpace;
using search::TrialStatus;
using Phase = OfferTrial::Phase;

// The world's synthetic objective. Space 0 ("cnn", the good one): lr, wd,
// dropout, width, optimizer {adam, sgd} with momentum under sgd. Space 1
// ("mlp"): the same plus depth and an activation, a larger space whose best
// is worse (0.14 against 0.05), so space ranking has something to find.
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

// loss(step) = a + kCurveB * exp(-c * step) + noise: the floor a is a bowl
// over the parameters, the rate c grows with the learning rate.
constexpr double kCurveB = 0.9;
constexpr double kCurveNoise = 0.004;

void CurveParams(size_t space, const Assignment& x, double bowl_scale, double* a, double* c) {
  const double u_lr = std::log10(x[0]) + 2.5;  // decades from 3e-3
  const double u_wd = std::log10(x[1]) + 4;
  const double u_width = std::log2(x[3]) - 8;
  double pen = 0.20 * Sq(u_lr) + 0.06 * Sq(u_wd) + 0.3 * Sq(x[2] - 0.35) + 0.04 * Sq(u_width);
  if (x[4] == 1) pen += 0.02 + 0.1 * Sq(x[5] - 0.9);  // sgd
  if (space == 1) pen += 0.02 * Sq(x[6] - 3) + (x[7] == 0 ? 0 : 0.03);
  *a = (space == 0 ? 0.05 : 0.14) + bowl_scale * pen;
  *c = std::clamp(std::sqrt(x[0] / 3e-3), 0.02, 3.0);
}

std::string ClassName(int k) { return "class" + std::to_string(k); }
std::string WorkloadOf(const SearchSpace& s) { return "sim/" + s.name; }

uint64_t Fingerprint(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h;
}

}  // namespace

struct Simulator::State {
  struct Device {
    std::string id;
    int cls = 0;
    double speed = 0;       // true samples/s
    double factor = 1;      // traced world: its relative speed (SimTrace::device_speeds)
    double percentile = 0;  // among the fleet's true speeds, 1 = fastest
    bool down = false;
    bool parked = false;   // asked, found no work on offer at all: waits for a change
    bool waiting = false;  // lease_wait_s: in a long poll, until a change or the wait's end
    uint64_t ask_tag = 0;  // an ask scheduled under an older tag is void
    double last_ask = 0;
    // The lease it runs, if any.
    int64_t trial = -1;     // index into trials
    double busy_until = 0;  // the policy's estimate (its free time in the fleet summary)
    double lease_sps = 0;
    double lease_started = 0;
    double step_s = 0;
    int64_t next_step = 0;
    int64_t end_step = 0;
    int64_t fail_step = -1;  // the step during which its worker dies
    double fail_fraction = 0;
  };
  struct Trial {
    int64_t id = 0;
    int64_t number = 0;
    size_t space = 0;
    size_t index = 0;
    Phase phase = Phase::kPending;
    int level = 0;
    int64_t resume_step = 0;
    std::optional<int64_t> stop_step;
    double changed_at = 0;
    int attempts = 0;     // leases of the current segment
    double paused_s = 0;  // before the segment it runs now
    double a = 0, c = 0;
    double moved_from_speed = -1;     // moved: the true speed of the device it left
    int moving_to = -1;               // moved: the class it moves toward, until resumed
    std::vector<int64_t> rungs;       // the promotion rule's, for its number
    std::vector<int32_t> neighbours;  // traced world: its space's traced trials, nearest first
    std::vector<SimResult::Segment> segments;
  };
  enum class EventKind { kAsk, kStep, kDie, kExpire, kReplace };
  struct Event {
    double t = 0;
    int64_t seq = 0;
    EventKind kind = EventKind::kAsk;
    int64_t who = 0;   // device index, or trial index for kExpire
    uint64_t tag = 0;  // kAsk: the device's ask_tag when scheduled
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  struct Ranking {
    uint64_t version = ~0ull;
    std::vector<search::SpaceRank> ranks;
    search::Rng rng{0};  // after the ranking drew from it: the new trial's sampler goes on with it
    int preferred = 0;
  };

  SimulatorOptions o;
  std::vector<SearchSpace> spaces;
  std::vector<std::string> workloads;
  std::unique_ptr<search::Sampler> sampler;
  std::unique_ptr<search::Pruner> pruner;  // stopping type only
  std::optional<search::PromotionRule> promotion;
  // Promotion-type: the rule's results kept as trials change, as the
  // engine's view keeps them, and the trials changed since they were read.
  std::optional<search::RungResults> rung_results;
  std::vector<std::pair<size_t, size_t>> rung_touched;
  search::Rng world{0};

  std::vector<double> class_speed;
  std::vector<std::string> class_names;  // ClassName(k), made once
  std::vector<double> class_benchmark;
  std::vector<Device> devices;
  FleetSummary live;  // the devices not down, for the policy
  SpeedModel speeds;
  StepSamples step_samples;  // what placement knows of samples per step

  std::vector<search::History> histories;
  // What each trial gives the space ranking, kept as the engine's view keeps
  // it, and the observations changed since the ranking last read them.
  search::RankedResults ranked;
  std::vector<std::pair<size_t, size_t>> touched;
  std::vector<Trial> trials;
  std::vector<int> per_space;
  // The trials pending or paused, by index (creation order, as the engine's
  // view lists them by id), and per space how many of them and how many on
  // a device: an offer lists these and only counts the others, as the
  // engine's does.
  std::set<int64_t> waiting;
  std::vector<int64_t> waiting_per_space, on_device_per_space;
  std::set<int64_t> pending;  // of the waiting ones, those pending

  int64_t on_devices = 0;  // pending or on a device

  // Versions: `history` changes with anything the policy or ranking reads,
  // `offer` only with what can change whether anything is offered at all.
  uint64_t history_version = 0, offer_version = 0;
  Ranking ranking;
  uint64_t offer_cached_at = ~0ull;
  Offer offer;
  uint64_t emptiness_at = ~0ull;
  bool offer_empty = true;

  // Migration (SimulatorOptions::migrate): the rungs a trial may move at;
  // the trials asked to pause at their next step; per class, the trials its
  // devices run by rungs passed, the least advanced (then the newest) first,
  // for preemption, and each device's key there.
  using RunningKey = std::tuple<int, int64_t, int64_t>;  // rungs, -trial number, device
  std::vector<int64_t> stop_rungs;
  std::unordered_set<int64_t> preempted;  // trial indices
  std::vector<std::set<RunningKey>> running_by_class;
  std::vector<std::optional<RunningKey>> running_key;  // per device
  // Moved trials not yet resumed, by the class they moved toward: a class
  // with as many waiting as it has devices is no target for another.
  std::vector<int> moving_to;
  // MoveNow's last move, for its report's event: the class and the trial it preempts (or -1).
  int moved_to_class = -1;
  int64_t moved_preempts = -1;

  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  int64_t seq = 0;
  double now = 0;
  double busy_s = 0;
  bool done = false;
  SimResult result;

  void Schedule(double t, EventKind kind, int64_t who) { events.push({t, seq++, kind, who, 0}); }
  void ScheduleAsk(double t, int64_t d) {
    events.push({t, seq++, EventKind::kAsk, d, devices[d].ask_tag});
  }
  // SimulatorOptions::on_event, at the current time.
  void Emit(SimEvent e) {
    if (!o.on_event) return;
    e.t = now;
    o.on_event(e);
  }
  void EmitReport(int64_t d, int64_t step, double value, SimEvent::Outcome outcome) {
    if (!o.on_event) return;
    SimEvent e;
    e.kind = SimEvent::Kind::kReport;
    e.device = d;
    e.trial = trials[devices[d].trial].number;
    e.step = step;
    e.value = value;
    e.samples_per_sec = devices[d].lease_sps;
    e.outcome = outcome;
    if (outcome == SimEvent::Outcome::kMoved) {
      e.to_class = ClassName(moved_to_class);
      e.preempts = moved_preempts;
    }
    Emit(std::move(e));
  }
  // A trial's observation, to change it: the ranking reads it again.
  search::Observation& Obs(const Trial& t) {
    touched.emplace_back(t.space, t.index);
    if (rung_results) rung_touched.emplace_back(t.space, t.index);
    return histories[t.space].trials[t.index];
  }
  void Changed(bool offer_too) {
    ++history_version;
    if (offer_too) ++offer_version;
  }
  void SetPhase(Trial& t, Phase p) {
    const bool was = t.phase == Phase::kPending || t.phase == Phase::kOnDevice;
    const bool is = p == Phase::kPending || p == Phase::kOnDevice;
    on_devices += static_cast<int>(is) - static_cast<int>(was);
    result.peak_unfinished = std::max(result.peak_unfinished, on_devices);
    const auto waits = [](Phase x) { return x == Phase::kPending || x == Phase::kPaused; };
    if (waits(t.phase) && !waits(p)) {
      waiting.erase(t.number);
      --waiting_per_space[t.space];
    } else if (!waits(t.phase) && waits(p)) {
      waiting.insert(t.number);
      ++waiting_per_space[t.space];
    }
    on_device_per_space[t.space] +=
        static_cast<int>(p == Phase::kOnDevice) - static_cast<int>(t.phase == Phase::kOnDevice);
    if (p == Phase::kPending) {
      pending.insert(t.number);
    } else {
      pending.erase(t.number);
    }
    if (rung_results) rung_touched.emplace_back(t.space, t.index);
    t.phase = p;
    t.changed_at = now;
    Changed(true);
    // The engine wakes long polls on a trial paused, finished or requeued.
    if (p != Phase::kOnDevice) WakeWaiting();
  }

  double ValueAt(const Trial& t, int64_t step) const {
    if (o.trace) return TracedValue(t, step);
    // Noise fixed per (trial, step): a segment run again reports what it
    // reported before, whichever device runs it.
    search::Rng r(o.seed ^ (static_cast<uint64_t>(t.number) * 0x9E3779B97F4A7C15ull) ^
                  (static_cast<uint64_t>(step) * 0xC2B2AE3D27D4EB4Full));
    return t.a + kCurveB * std::exp(-t.c * static_cast<double>(step)) + kCurveNoise * r.Normal();
  }

  double TracedValue(const Trial& t, int64_t step) const;
  std::vector<int32_t> Neighbours(size_t space, const Assignment& x) const;
  double PauseSeconds() const { return o.trace ? o.trace->pause_s : 0; }

  int64_t waiting_devices = 0;
  void Wait(int64_t d);
  void WakeWaiting();

  void BuildWorld();
  void SetBusyUntil(int64_t d, double t);
  const Ranking& Rank();
  const Offer& CurrentOffer();
  bool OfferEmpty();
  void Ask(int64_t d);
  void Apply(int64_t d, const WorkItem& item, const PolicyDecision& decision);
  void StartLease(int64_t d, int64_t ti);
  void ScheduleNext(int64_t d, double extra_s = 0);
  void Step(int64_t d);
  void EndSegment(int64_t d, double then_s = 0);
  void Die(int64_t d);
  void Expire(int64_t ti);
  int RungsPassed(int64_t step) const { return search::RungsPassed(stop_rungs, step); }
  void NoteRunning(int64_t d, int rungs);
  void NoteStopped(int64_t d);
  bool MoveNow(int64_t d, int64_t step);
  void PauseAfter(int64_t d, int64_t step);
  void Park(int64_t d);
  void WakeParked();
};

void Simulator::State::BuildWorld() {
  search::Rng r = search::Rng(o.seed).Fork(1);  // the same fleet for every policy of a seed
  if (o.trace) {
    // A class per distinct speed, each device exactly its speed (a CPU
    // quota); its samples/s those of a trial of the median cost.
    std::vector<double> step_s;
    for (const auto& t : o.trace->trials) step_s.push_back(t.step_s);
    std::nth_element(step_s.begin(), step_s.begin() + step_s.size() / 2, step_s.end());
    const double nominal = o.samples_per_step / step_s[step_s.size() / 2];
    std::vector<double> factors;
    for (size_t i = 0; i < o.trace->device_speeds.size(); ++i) {
      const double f = o.trace->device_speeds[i];
      const auto known = std::find(factors.begin(), factors.end(), f);
      Device d;
      d.id = "dev" + std::to_string(i);
      d.cls = static_cast<int>(known - factors.begin());
      if (known == factors.end()) {
        factors.push_back(f);
        class_speed.push_back(f * nominal);
      }
      d.factor = f;
      d.speed = f * nominal;
      devices.push_back(std::move(d));
    }
  } else {
    const int k = std::min(o.workers, o.max_device_classes);
    for (int i = 0; i < k; ++i) {
      const double u = k == 1 ? 0 : i == 0 ? 0 : i == 1 ? 1 : r.Uniform();
      class_speed.push_back(o.slowest_samples_per_sec * std::pow(o.spread, u));
    }
    for (int i = 0; i < o.workers; ++i) {
      Device d;
      d.id = "dev" + std::to_string(i);
      d.cls =
          i < k ? i : static_cast<int>(r.Below(static_cast<uint64_t>(k)));  // every class present
      d.speed = class_speed[d.cls] * std::exp(o.device_sigma * r.Normal());
      devices.push_back(std::move(d));
    }
  }
  const int k = static_cast<int>(class_speed.size());
  for (int i = 0; i < k; ++i) class_names.push_back(ClassName(i));
  // A class's benchmark (GFLOP/s-like): proportional to its speed, but noisy.
  for (int i = 0; i < k; ++i) {
    class_benchmark.push_back(class_speed[i] / 50 * std::exp(o.benchmark_sigma * r.Normal()));
    speeds.AddBenchmark(ClassName(i), class_benchmark.back());
  }
  std::vector<size_t> order(devices.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return devices[a].speed < devices[b].speed; });
  for (size_t rank = 0; rank < order.size(); ++rank) {
    devices[order[rank]].percentile =
        order.size() > 1 ? static_cast<double>(rank) / (order.size() - 1) : 1.0;
  }
  for (const Device& dev : devices) live.Set(dev.id, ClassName(dev.cls), dev.busy_until);
  running_by_class.resize(class_speed.size());
  running_key.resize(devices.size());
  moving_to.assign(class_speed.size(), 0);
  world = search::Rng(o.seed).Fork(2);
}

// The nearest traced trial's value. Past the end of its curve (it was
// stopped there), the median change from that step to this one of the
// kExtendFrom traced trials of its space that got this far and were
// closest to its value at that step: learning curves that start alike go
// on alike, whatever the parameters.
constexpr size_t kExtendFrom = 5;

double Simulator::State::TracedValue(const Trial& t, int64_t step) const {
  const auto& traced = o.trace->trials;
  const TracedTrial& nearest = traced[t.neighbours.front()];
  const std::vector<double>& near = nearest.values;
  const auto n = static_cast<int64_t>(near.size());
  if (step <= n) return near[step - 1];
  // The farthest step any traced trial of the space reached bounds it.
  int64_t reach = n;
  for (const int32_t i : t.neighbours)
    reach = std::max(reach, static_cast<int64_t>(traced[i].values.size()));
  const int64_t k = std::min(step, reach);
  if (k == n) return near.back();
  std::vector<std::pair<double, double>> alike;  // (distance at step n, change from n to k)
  for (const int32_t i : t.neighbours) {
    const std::vector<double>& v = traced[i].values;
    if (static_cast<int64_t>(v.size()) < k) continue;
    alike.emplace_back(std::abs(v[n - 1] - near.back()), v[k - 1] - v[n - 1]);
  }
  const size_t use = std::min(kExtendFrom, alike.size());
  std::partial_sort(alike.begin(), alike.begin() + static_cast<std::ptrdiff_t>(use), alike.end());
  std::vector<double> changes;
  for (size_t i = 0; i < use; ++i) changes.push_back(alike[i].second);
  std::sort(changes.begin(), changes.end());
  const double change =
      use % 2 ? changes[use / 2] : 0.5 * (changes[use / 2 - 1] + changes[use / 2]);
  return near.back() + change;
}

// The traced trials of `space`, nearest to `x` first (ties: trace order).
std::vector<int32_t> Simulator::State::Neighbours(size_t space, const Assignment& x) const {
  const SearchSpace& sp = spaces[space];
  std::vector<std::pair<double, int32_t>> by_distance;
  const auto& traced = o.trace->trials;
  for (size_t i = 0; i < traced.size(); ++i) {
    if (traced[i].space != space) continue;
    double d = 0;
    for (int p = 0; p < sp.size(); ++p) {
      const double a = x[p];
      const double b = traced[i].params[p];
      if (search::IsInactive(a) || search::IsInactive(b)) {
        d += search::IsInactive(a) == search::IsInactive(b) ? 0 : 1;
      } else if (sp.params[p].kind == search::ParamKind::kCategorical) {
        d += a == b ? 0 : 1;
      } else {
        d += Sq(sp.params[p].ToUnit(a) - sp.params[p].ToUnit(b));
      }
    }
    by_distance.emplace_back(d, static_cast<int32_t>(i));
  }
  std::stable_sort(by_distance.begin(), by_distance.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<int32_t> out;
  out.reserve(by_distance.size());
  for (const auto& [d, i] : by_distance) out.push_back(i);
  return out;
}

// The server's long poll: the device waits for a change that may give it
// work, or for the wait's end, and then asks again.
void Simulator::State::Wait(int64_t d) {
  Device& dev = devices[d];
  dev.waiting = true;
  ++waiting_devices;
  ++dev.ask_tag;
  ScheduleAsk(now + o.lease_wait_s + o.long_poll_retry_s, d);
}

void Simulator::State::WakeWaiting() {
  if (waiting_devices == 0) return;
  for (size_t i = 0; i < devices.size(); ++i) {
    Device& dev = devices[i];
    if (!dev.waiting) continue;
    dev.waiting = false;
    ++dev.ask_tag;
    ScheduleAsk(now, static_cast<int64_t>(i));
  }
  waiting_devices = 0;
}

// A down device keeps its (stale) estimate, and is back in the summary
// with it when it returns, as a worker's device in the engine's fleet view.
void Simulator::State::SetBusyUntil(int64_t d, double t) {
  devices[d].busy_until = t;
  live.SetFreeAt(devices[d].id, t);
}

// RankSpaces and PickSpace as the engine calls them on a lease, with the
// generator the engine seeds from the number of trials so far; kept while
// nothing they read changed (the same inputs give the same ranking).
const Simulator::State::Ranking& Simulator::State::Rank() {
  if (ranking.version == history_version) return ranking;
  ranking.version = history_version;
  ranking.rng = search::Rng(o.seed).Fork(0x5EED0000ull + trials.size());
  bool changed = ranking.ranks.empty();
  for (const auto& [s, i] : touched)
    changed |= ranked.Set(s, i, search::RankedValue(histories[s].trials[i]));
  touched.clear();
  if (changed) ranking.ranks = search::RankSpaces(spaces, ranked.Results(spaces.size()));
  ranking.preferred = search::PickSpace(ranking.ranks, per_space);
  return ranking;
}

const Offer& Simulator::State::CurrentOffer() {
  if (offer_cached_at != history_version) {
    const Ranking& r = Rank();
    OfferInput in;
    in.histories = &histories;
    const auto list = [&](const Trial& t) {
      in.trials.push_back({t.id, t.space, t.index, t.phase, t.level, t.resume_step, t.stop_step, 0,
                           t.moving_to >= 0 ? class_names[t.moving_to] : std::string()});
    };
    if (rung_results) {
      // The pending trials and the promotable paused ones listed; the
      // other paused ones only counted.
      for (const auto& [s, i] : rung_touched) {
        const Trial& t = trials[histories[s].trials[i].number];
        rung_results->Set(s, i, histories[s].trials[i],
                          t.phase == Phase::kPaused ? std::optional<int>(t.level) : std::nullopt);
      }
      rung_touched.clear();
      in.paused_per_space = waiting_per_space;  // less the pending ones and those listed
      for (const int64_t i : pending) {
        list(trials[i]);
        --in.paused_per_space[trials[i].space];
      }
      in.promotable.emplace(spaces.size());
      for (size_t s = 0; s < spaces.size(); ++s) {
        (*in.promotable)[s] = rung_results->Promotable(s, kMaxPromotionsPerRung);
        for (const auto& p : (*in.promotable)[s]) list(trials[histories[s].trials[p.index].number]);
        in.paused_per_space[s] -= static_cast<int64_t>((*in.promotable)[s].size());
      }
    } else {
      in.trials.reserve(waiting.size());
      for (const int64_t i : waiting) list(trials[i]);
    }
    in.on_device_per_space = on_device_per_space;
    in.finished_per_space.resize(spaces.size());
    for (size_t s = 0; s < spaces.size(); ++s) {
      in.finished_per_space[s] = per_space[s] - waiting_per_space[s] - on_device_per_space[s];
    }
    for (const auto& rank : r.ranks) in.shares.push_back(rank.share);
    in.workloads = workloads;
    in.preferred_space = r.preferred;
    in.max_trials = o.max_trials;
    in.max_parallel = o.max_parallel;
    in.steps_per_trial = o.steps_per_trial;
    in.promotion = promotion ? &*promotion : nullptr;
    in.rung_steps = stop_rungs;
    offer = OfferWork(in);
    offer_cached_at = history_version;
    emptiness_at = offer_version;
    offer_empty = offer.items.empty();
  }
  // The waiting times move with the clock, and samples per step with the
  // reports (the engine reads both on every lease).
  // Per workload, not per item, as the engine reads them.
  std::vector<double> per_step(workloads.size());
  for (size_t s = 0; s < workloads.size(); ++s)
    per_step[s] = step_samples.SamplesPerStep(workloads[s]);
  for (auto& item : offer.items) {
    if (item.kind != WorkItem::Kind::kNew)
      item.waiting_s = now - trials[item.trial_id - 1].changed_at;
    item.samples_per_step = per_step[static_cast<size_t>(item.space_index)];
  }
  return offer;
}

bool Simulator::State::OfferEmpty() {
  if (emptiness_at != offer_version) CurrentOffer();
  return offer_empty;
}

void Simulator::State::Park(int64_t d) {
  devices[d].parked = true;
  if (on_devices == 0) done = true;  // nothing runs, nothing is offered: nothing can change
}

void Simulator::State::WakeParked() {
  bool any = false;
  for (const Device& dev : devices) any = any || dev.parked;
  if (!any || OfferEmpty()) return;
  for (size_t i = 0; i < devices.size(); ++i) {
    Device& dev = devices[i];
    if (!dev.parked) continue;
    dev.parked = false;
    // Its next poll: the first one (every 1 s after its last) from now on.
    const double polls = std::ceil(std::max(0.0, now - dev.last_ask));
    ScheduleAsk(dev.last_ask + std::max(polls, 1.0), static_cast<int64_t>(i));
  }
}

void Simulator::State::Ask(int64_t d) {
  Device& dev = devices[d];
  if (dev.waiting) {  // its wait ended
    dev.waiting = false;
    --waiting_devices;
  }
  if (done || dev.down || dev.trial >= 0) return;
  dev.last_ask = now;
  if (o.ask_probe) o.ask_probe(true);
  if (OfferEmpty()) {
    if (o.ask_probe) o.ask_probe(false);
    SimEvent e;
    e.kind = SimEvent::Kind::kAsk;
    e.device = d;
    Emit(std::move(e));
    if (o.lease_wait_s > 0) {
      if (on_devices == 0) done = true;  // as Park: nothing can change
      return Wait(d);
    }
    return Park(d);
  }
  const Offer& off = CurrentOffer();
  const AskingDevice asking{dev.id, ClassName(dev.cls)};
  const PolicyDecision decision = o.decide
                                      ? o.decide(asking, live, now, off.items, speeds, o.policy)
                                      : Decide(asking, live, now, off.items, speeds, o.policy);
  if (o.ask_probe) o.ask_probe(false);
  ++result.decisions;
  ++result.reasons[decision.reason];
  if (!decision.run || decision.item >= off.items.size()) {
    ++result.idle_answers;
    SimEvent e;
    e.kind = SimEvent::Kind::kAsk;
    e.device = d;
    e.offered = true;
    e.reason = decision.reason;
    Emit(std::move(e));
    // The server's long poll takes the place of the answer's retry-after.
    if (o.lease_wait_s > 0) {
      Wait(d);
    } else {
      ScheduleAsk(now + std::max(decision.retry_after_s, 1e-3), d);
    }
  } else {
    const WorkItem item = off.items[decision.item];
    Apply(d, item, decision);
  }
  if (o.max_decisions > 0 && result.decisions >= o.max_decisions) done = true;
}

void Simulator::State::Apply(int64_t d, const WorkItem& item, const PolicyDecision& decision) {
  int64_t ti = -1;
  bool created = false;
  switch (item.kind) {
    case WorkItem::Kind::kResume: {
      // The store's ResumeTrial: paused -> leased, level + 1, to the next rung.
      const search::Promotion p = offer.promotions.at(decision.item);
      ti = item.trial_id - 1;
      Trial& t = trials[ti];
      t.paused_s = now - t.changed_at;
      t.level += 1;
      t.attempts += 1;
      t.stop_step = p.to_end ? std::nullopt : std::optional<int64_t>(p.to_step);
      if (t.moved_from_speed >= 0) {
        ++result.moves_resumed;
        result.moves_resumed_faster += devices[d].speed > t.moved_from_speed;
        t.moved_from_speed = -1;
      }
      if (t.moving_to >= 0) --moving_to[std::exchange(t.moving_to, -1)];
      Obs(t).status = TrialStatus::kRunning;
      SetPhase(t, Phase::kOnDevice);
      ++result.promotions;
      break;
    }
    case WorkItem::Kind::kPending: {
      ti = item.trial_id - 1;
      Trial& t = trials[ti];
      t.paused_s = now - t.changed_at;
      t.attempts += 1;
      SetPhase(t, Phase::kOnDevice);
      break;
    }
    case WorkItem::Kind::kNew: {
      // The engine's CreateSuggestions for this device: the ranking's
      // generator goes on into the sampler.
      search::Rng rng = Rank().rng;
      const size_t s = static_cast<size_t>(item.space_index);
      const size_t k = histories[s].trials.size();
      const bool replayed = o.trace && s < o.trace->replay.size() && k < o.trace->replay[s].size();
      auto params = replayed ? std::vector<Assignment>{o.trace->replay[s][k]}
                             : sampler->Suggest(spaces[s], histories[s], 1, rng);
      Trial t;
      t.number = static_cast<int64_t>(trials.size());
      t.id = t.number + 1;
      t.space = s;
      t.index = histories[s].trials.size();
      t.phase = Phase::kFinished;  // SetPhase counts it in
      t.attempts = 1;
      if (promotion) {
        t.rungs = promotion->Rungs(t.number);
        if (item.steps < o.steps_per_trial) t.stop_step = item.steps;
      }
      search::Observation obs;
      obs.number = t.number;
      obs.status = TrialStatus::kRunning;
      obs.params = std::move(params.front());
      if (o.trace) {
        t.neighbours = Neighbours(s, obs.params);
      } else {
        CurveParams(s, obs.params, o.bowl_scale, &t.a, &t.c);
      }
      histories[s].trials.push_back(std::move(obs));
      ++per_space[s];
      trials.push_back(std::move(t));
      ti = static_cast<int64_t>(trials.size()) - 1;
      SetPhase(trials[ti], Phase::kOnDevice);
      created = true;
      break;
    }
  }
  result.max_level = std::max(result.max_level, trials[ti].level);
  result.trace = Fingerprint(result.trace, static_cast<uint64_t>(d));
  result.trace = Fingerprint(result.trace, static_cast<uint64_t>(trials[ti].id));
  result.trace = Fingerprint(result.trace, static_cast<uint64_t>(std::llround(now * 1000)));
  SetBusyUntil(d, now + decision.estimated_seconds);
  devices[d].trial = ti;
  if (o.on_event) {
    const Trial& t = trials[ti];
    SimEvent e;
    e.kind = SimEvent::Kind::kAsk;
    e.device = d;
    e.offered = true;
    e.ran = true;
    e.item = item.kind;
    e.space = static_cast<int>(t.space);
    e.level = t.level;
    e.from_step = t.resume_step;
    e.stop_step = t.stop_step;
    e.reason = decision.reason;
    e.trial = t.number;
    if (created) e.params = histories[t.space].trials[t.index].params;
    Emit(std::move(e));
  }
  StartLease(d, ti);
  if (created) WakeWaiting();  // the engine's trial.created
}

void Simulator::State::StartLease(int64_t d, int64_t ti) {
  Device& dev = devices[d];
  const Trial& t = trials[ti];
  if (o.trace) {
    // Each configuration its own cost: its nearest traced trial's.
    dev.step_s = o.trace->trials[t.neighbours.front()].step_s / dev.factor *
                 std::exp(o.lease_sigma * world.Normal());
    dev.lease_sps = o.samples_per_step / dev.step_s;
  } else {
    dev.lease_sps = dev.speed * std::exp(o.lease_sigma * world.Normal());
    dev.step_s = o.samples_per_step / dev.lease_sps;
  }
  dev.lease_started = now;
  dev.next_step = t.resume_step + 1;
  dev.end_step = t.stop_step.value_or(o.steps_per_trial);
  if (o.migrate) NoteRunning(d, RungsPassed(t.resume_step));
  const int64_t steps = dev.end_step - t.resume_step;
  // The trial's chance to lose its worker, spread over its segments by length.
  const double p_fail = 1 - std::pow(1 - o.failure, static_cast<double>(steps) /
                                                        static_cast<double>(o.steps_per_trial));
  dev.fail_step = -1;
  if (world.Uniform() < p_fail) {
    dev.fail_step =
        dev.next_step +
        static_cast<int64_t>(world.Below(static_cast<uint64_t>(std::max<int64_t>(steps, 1))));
    dev.fail_fraction = world.Uniform();
  }
  ScheduleNext(d, o.trace ? o.trace->segment_start_s : 0);
}

void Simulator::State::ScheduleNext(int64_t d, double extra_s) {
  const Device& dev = devices[d];
  if (dev.next_step == dev.fail_step) {
    Schedule(now + extra_s + dev.fail_fraction * dev.step_s, EventKind::kDie, d);
  } else {
    Schedule(now + extra_s + dev.step_s, EventKind::kStep, d);
  }
}

// One report: the step goes into the curve; the stopping-type rule judges
// it; at the lease's stop step the trial pauses, at the budget it completes.
void Simulator::State::Step(int64_t d) {
  Device& dev = devices[d];
  Trial& t = trials[dev.trial];
  search::Observation& obs = Obs(t);
  const int64_t step = dev.next_step;
  const double value = ValueAt(t, step);
  obs.curve.emplace_back(step, value);
  obs.status = TrialStatus::kRunning;
  // Every report carries the worker's measured speed, and the engine feeds
  // each one to the model (Engine::Report, FleetView::Observe).
  speeds.Observe(ClassName(dev.cls), workloads[t.space], "", dev.lease_sps);
  // And the time since the trial's last report in this segment, how many
  // samples a step trains (FleetView::Observe): placement knows no more of
  // samples_per_step than the engine would.
  step_samples.Observe(workloads[t.space],
                       {t.number, d, t.attempts, t.resume_step, step, now, dev.lease_sps});
  const double per_step = step_samples.SamplesPerStep(workloads[t.space]);
  // The target is bench/hetero's: the first report at or below it, whatever
  // becomes of the trial.
  if (value <= o.target && std::isnan(result.time_to_target_s)) {
    result.time_to_target_s = now;
    result.winner = t.segments;
    result.winner.push_back({t.level, dev.percentile, t.paused_s, now - dev.lease_started});
    done = true;
  }
  // And the device's free time from what is left of the lease at that
  // speed (Engine::Report's SetBusy).
  if (per_step > 0 && dev.end_step > step) {
    SetBusyUntil(d, now + static_cast<double>(dev.end_step - step) * per_step / dev.lease_sps);
  }
  // A report at a rung may make paused trials promotable; others cannot
  // (curves are contiguous from the checkpoint on).
  const bool at_rung = std::binary_search(t.rungs.begin(), t.rungs.end(), step);
  Changed(at_rung);
  if (at_rung) WakeParked();
  if (pruner && pruner->ShouldPrune(histories[t.space], obs)) {
    obs.status = TrialStatus::kPruned;
    SetPhase(t, Phase::kFinished);
    ++result.pruned;
    EmitReport(d, step, value, SimEvent::Outcome::kPruned);
    return EndSegment(d);
  }
  if (o.migrate && step < o.steps_per_trial) {
    if (preempted.erase(dev.trial) > 0) {
      ++result.preemptions;
      EmitReport(d, step, value, SimEvent::Outcome::kPreempted);
      return PauseAfter(d, step);
    }
    if (std::binary_search(stop_rungs.begin(), stop_rungs.end(), step)) {
      NoteRunning(d, RungsPassed(step));
      if (MoveNow(d, step)) {
        ++result.moves;
        t.moved_from_speed = dev.speed;
        EmitReport(d, step, value, SimEvent::Outcome::kMoved);
        return PauseAfter(d, step);
      }
    }
  }
  if (step >= dev.end_step) {
    const bool completed = step >= o.steps_per_trial;
    EmitReport(d, step, value,
               completed ? SimEvent::Outcome::kCompleted : SimEvent::Outcome::kPaused);
    if (step >= o.steps_per_trial) {
      obs.status = TrialStatus::kCompleted;
      obs.value = value;
      SetPhase(t, Phase::kFinished);
      ++result.completed;
      if (value < result.best) result.best = value;
    } else {
      // The worker checkpoints and pauses; the checkpoint resumes at `step`.
      obs.status = TrialStatus::kPruned;  // as search/ sees a paused trial
      t.resume_step = step;
      t.attempts = 0;
      SetPhase(t, Phase::kPaused);
    }
    EndSegment(d, completed ? 0 : PauseSeconds());
    return;
  }
  EmitReport(d, step, value, SimEvent::Outcome::kContinue);
  ++dev.next_step;
  ScheduleNext(d);
}

void Simulator::State::NoteRunning(int64_t d, int rungs) {
  NoteStopped(d);
  const Device& dev = devices[d];
  const RunningKey key{rungs, -trials[dev.trial].number, d};
  running_by_class[dev.cls].insert(key);
  running_key[d] = key;
}

void Simulator::State::NoteStopped(int64_t d) {
  if (!o.migrate || !running_key[d]) return;
  running_by_class[devices[d].cls].erase(*running_key[d]);
  running_key[d].reset();
}

// The engine's MaybeMove: targets by class from the live summary, the
// class's least advanced running trial as the one to preempt.
bool Simulator::State::MoveNow(int64_t d, int64_t step) {
  const Device& dev = devices[d];
  const Trial& t = trials[dev.trial];
  const int rungs = RungsPassed(step);
  WorkItem rest;
  rest.kind = WorkItem::Kind::kResume;
  rest.trial_id = t.id;
  rest.level = rungs;
  rest.workload = workloads[t.space];
  rest.steps = o.steps_per_trial - step;
  rest.samples_per_step = step_samples.SamplesPerStep(rest.workload);
  const std::string here = ClassName(dev.cls);
  std::vector<MoveTarget> targets;
  std::vector<std::optional<RunningKey>> victims;
  std::vector<int> target_class;  // per target: its class index
  for (const auto& cls : live.ClassesFor(dev.id, here, now)) {
    if (cls.device_class == here) continue;
    const int k = std::stoi(cls.device_class.substr(5));  // "classK"
    if (moving_to[k] >= cls.devices) continue;  // as many on their way there as it has devices
    MoveTarget target;
    target.device_class = cls.device_class;
    // Movers go to the class's devices first come first served (policy.h,
    // rule 2b): the ones already on their way take its soonest free devices.
    target.free_in_s =
        moving_to[k] > 0 ? live.FreeIn(cls.device_class, moving_to[k], now) : cls.soonest_free_s;
    std::optional<RunningKey> victim;
    const auto& running = running_by_class[k];
    if (!running.empty() && std::get<0>(*running.begin()) < rungs) {
      const auto speed = speeds.Estimate(cls.device_class, rest.workload);
      if (speed && speed->samples_per_sec > 0 && rest.samples_per_step > 0) {
        victim = *running.begin();
        target.preemptible = true;
        target.preempt_in_s = rest.samples_per_step / speed->samples_per_sec;
      }
    }
    targets.push_back(std::move(target));
    victims.push_back(victim);
    target_class.push_back(k);
  }
  PolicyOptions options = o.policy;
  const MoveDecision m = DecideMove(here, rest, targets, speeds, options);
  if (!m.move) return false;
  trials[dev.trial].moving_to = target_class[m.target];
  ++moving_to[trials[dev.trial].moving_to];
  moved_to_class = target_class[m.target];
  moved_preempts = -1;
  if (m.preempt && victims[m.target]) {
    const int64_t v = std::get<2>(*victims[m.target]);
    moved_preempts = trials[devices[v].trial].number;
    preempted.insert(devices[v].trial);
    NoteStopped(v);
    SetBusyUntil(v, now + targets[m.target].preempt_in_s);
  }
  result.trace = Fingerprint(result.trace, 0x4D4F5645ull ^ static_cast<uint64_t>(t.id));  // "MOVE"
  return true;
}

// The worker checkpoints after `step` and pauses the trial (a move or a
// preemption): it is offered again, to its end.
void Simulator::State::PauseAfter(int64_t d, int64_t step) {
  Trial& t = trials[devices[d].trial];
  Obs(t).status = TrialStatus::kPruned;  // as search/ sees a paused trial
  t.resume_step = step;
  t.attempts = 0;
  SetPhase(t, Phase::kPaused);
  EndSegment(d, PauseSeconds());
}

// `then_s`: the worker's own work after the segment (a checkpoint) before it asks again.
void Simulator::State::EndSegment(int64_t d, double then_s) {
  Device& dev = devices[d];
  NoteStopped(d);
  Trial& t = trials[dev.trial];
  const double seconds = now - dev.lease_started;
  busy_s += seconds;
  if (result.levels.size() <= static_cast<size_t>(t.level)) result.levels.resize(t.level + 1);
  SimLevelStats& ls = result.levels[t.level];
  ++ls.segments;
  ls.device_s += seconds;
  ls.speed_percentile_sum += dev.percentile;
  if (t.level > 0) ls.paused_s += t.paused_s;
  t.segments.push_back({t.level, dev.percentile, t.paused_s, seconds});
  dev.trial = -1;
  SetBusyUntil(d, now);
  WakeParked();
  ScheduleAsk(now + then_s, d);
}

// The worker dies: the store still holds the lease until it expires.
void Simulator::State::Die(int64_t d) {
  Device& dev = devices[d];
  SimEvent e;
  e.kind = SimEvent::Kind::kLost;
  e.device = d;
  e.trial = trials[dev.trial].number;
  Emit(std::move(e));
  NoteStopped(d);
  preempted.erase(dev.trial);
  busy_s += now - dev.lease_started;
  Schedule(now + o.lease_timeout_s, EventKind::kExpire, dev.trial);
  Schedule(now + o.replace_after_s, EventKind::kReplace, d);
  dev.trial = -1;
  dev.down = true;
  dev.parked = false;
  if (std::exchange(dev.waiting, false)) --waiting_devices;
  ++dev.ask_tag;
  live.Remove(dev.id);
}

// ReclaimExpiredLeases: failed after max_attempts leases of the segment;
// else a resumed segment back to paused at its rung, a first one back to
// pending, the dead attempt's steps after the checkpoint deleted.
void Simulator::State::Expire(int64_t ti) {
  Trial& t = trials[ti];
  SimEvent e;
  e.kind = SimEvent::Kind::kExpired;
  e.trial = t.number;
  Emit(std::move(e));
  search::Observation& obs = Obs(t);
  if (t.attempts >= o.max_attempts) {
    obs.status = TrialStatus::kFailed;
    SetPhase(t, Phase::kFinished);
    ++result.failed;
  } else {
    auto& curve = obs.curve;
    curve.erase(std::upper_bound(curve.begin(), curve.end(), t.resume_step,
                                 [](int64_t s, const auto& point) { return s < point.first; }),
                curve.end());
    if (t.level > 0) {
      t.level -= 1;
      obs.status = TrialStatus::kPruned;
      SetPhase(t, Phase::kPaused);
    } else {
      SetPhase(t, Phase::kPending);
    }
  }
  WakeParked();
}

Simulator::Simulator(SimulatorOptions options, std::unique_ptr<State> state)
    : options_(std::move(options)), state_(std::move(state)) {}

Simulator::~Simulator() = default;

namespace {

// A configuration of `space`, named `at` in the error.
Status CheckParams(const SearchSpace& space, const Assignment& params, const std::string& at) {
  if (params.size() != space.params.size())
    return Status::InvalidArgument(at + ": not one value per parameter of its space");
  return space.Validate(params).WithContext(at);
}

Status CheckTrace(const SimTrace& trace) {
  if (trace.spaces.empty()) return Status::InvalidArgument("trace.spaces: none");
  if (trace.device_speeds.empty()) return Status::InvalidArgument("trace.device_speeds: none");
  for (const double f : trace.device_speeds) {
    if (!(f > 0) || !std::isfinite(f))
      return Status::InvalidArgument("trace.device_speeds: each must be a positive number");
  }
  if (!(trace.segment_start_s >= 0) || !(trace.pause_s >= 0) ||
      !std::isfinite(trace.segment_start_s + trace.pause_s)) {
    return Status::InvalidArgument("trace.segment_start_s, trace.pause_s: must be >= 0");
  }
  std::vector<int> per_space(trace.spaces.size(), 0);
  for (size_t i = 0; i < trace.trials.size(); ++i) {
    const TracedTrial& t = trace.trials[i];
    const std::string at = "trace.trials[" + std::to_string(i) + "]";
    if (t.space >= trace.spaces.size())
      return Status::InvalidArgument(at + ".space: no such space");
    HPO_RETURN_IF_ERROR(CheckParams(trace.spaces[t.space], t.params, at + ".params"));
    if (t.values.empty()) return Status::InvalidArgument(at + ".values: none");
    for (const double v : t.values) {
      if (!std::isfinite(v)) return Status::InvalidArgument(at + ".values: not all finite");
    }
    if (!(t.step_s > 0) || !std::isfinite(t.step_s))
      return Status::InvalidArgument(at + ".step_s: must be a positive number");
    ++per_space[t.space];
  }
  for (size_t s = 0; s < per_space.size(); ++s) {
    if (per_space[s] == 0) {
      return Status::InvalidArgument("trace: no traced trial in space " + trace.spaces[s].name);
    }
  }
  if (trace.replay.size() > trace.spaces.size())
    return Status::InvalidArgument("trace.replay: more lists than spaces");
  for (size_t s = 0; s < trace.replay.size(); ++s) {
    for (size_t k = 0; k < trace.replay[s].size(); ++k) {
      HPO_RETURN_IF_ERROR(
          CheckParams(trace.spaces[s], trace.replay[s][k],
                      "trace.replay[" + std::to_string(s) + "][" + std::to_string(k) + "]"));
    }
  }
  return Status::OK();
}

}  // namespace

Result<std::unique_ptr<Simulator>> Simulator::Create(SimulatorOptions o) {
  if (o.trace) {
    HPO_RETURN_IF_ERROR(CheckTrace(*o.trace));
    o.workers = static_cast<int>(o.trace->device_speeds.size());
  }
  if (!(o.lease_wait_s >= 0) || !(o.long_poll_retry_s > 0) ||
      !std::isfinite(o.lease_wait_s + o.long_poll_retry_s)) {
    return Status::InvalidArgument("lease_wait_s: must be >= 0; long_poll_retry_s: must be > 0");
  }
  if (o.workers < 1) return Status::InvalidArgument("workers: must be at least 1");
  if (!(o.spread >= 1) || !std::isfinite(o.spread))
    return Status::InvalidArgument("spread: must be a number >= 1");
  if (o.max_device_classes < 1)
    return Status::InvalidArgument("max_device_classes: must be at least 1");
  if (o.steps_per_trial < 1) return Status::InvalidArgument("steps_per_trial: must be at least 1");
  if (!(o.bowl_scale > 0)) return Status::InvalidArgument("bowl_scale: must be positive");
  if (o.max_attempts < 1) return Status::InvalidArgument("max_attempts: must be at least 1");
  if (!(o.samples_per_step > 0) || !(o.slowest_samples_per_sec > 0)) {
    return Status::InvalidArgument("samples_per_step, slowest_samples_per_sec: must be positive");
  }
  if (!(o.failure >= 0 && o.failure < 1))
    return Status::InvalidArgument("failure: must be in [0, 1)");
  if (o.max_trials <= 0)
    o.max_trials = std::clamp<int64_t>(20 * static_cast<int64_t>(o.workers), 1000, 20000);
  if (o.max_parallel <= 0) o.max_parallel = o.workers;

  auto st = std::make_unique<State>();
  st->o = o;
  HPO_ASSIGN_OR_RETURN(st->sampler, search::MakeSampler(o.sampler, {}, "sampler"));
  // As the engine makes them from a spec (search/registry.h).
  HPO_ASSIGN_OR_RETURN(const search::StoppingRule* rule,
                       search::FindStoppingRule(o.early_stopping, "early_stopping"));
  const bool rung_rule = rule->rungs;
  if (o.promotion && !rung_rule) {
    return Status::InvalidArgument("promotion: needs early_stopping asha or hyperband, not " +
                                   o.early_stopping);
  }
  search::StoppingOptions stopping;
  if (rung_rule) {
    stopping["min_resource"] = static_cast<double>(o.min_resource);
    stopping["reduction_factor"] = o.reduction_factor;
  }
  if (o.promotion) {
    auto r = search::MakePromotionRule(o.early_stopping, stopping, o.steps_per_trial,
                                       search::PromotionCriterion::kTopFraction);
    if (!r.ok()) return r.status().WithContext("early_stopping");
    st->promotion = std::move(r).value();
    st->rung_results.emplace(*st->promotion);
  } else if (o.early_stopping != "none") {
    auto p = search::MakeStoppingPruner(o.early_stopping, stopping, o.steps_per_trial);
    if (!p.ok()) return p.status().WithContext("early_stopping");
    st->pruner = std::move(p).value();
  }
  if (o.migrate) {
    if (!rung_rule || o.promotion || o.policy.kind != PolicyKind::kSpeed) {
      return Status::InvalidArgument(
          "migrate: needs stop-type asha or hyperband (promotion false) and the speed policy");
    }
    // The engine's MigrationRungSteps: the rule's rungs (hyperband: its first bracket's) below the
    // budget.
    st->stop_rungs =
        search::RungStepsBelow(o.min_resource, o.reduction_factor, 0, o.steps_per_trial);
  }
  st->spaces = o.trace ? o.trace->spaces : Spaces();
  for (const auto& s : st->spaces) st->workloads.push_back(WorkloadOf(s));
  st->histories.resize(st->spaces.size());
  st->per_space.assign(st->spaces.size(), 0);
  st->waiting_per_space.assign(st->spaces.size(), 0);
  st->on_device_per_space.assign(st->spaces.size(), 0);
  st->BuildWorld();
  auto sim = std::unique_ptr<Simulator>(new Simulator(o, std::move(st)));
  if (o.policy.kind == PolicyKind::kShadho && o.policy.class_order.empty()) {
    sim->options_.policy.class_order = sim->ClassesStrongestFirst();
    sim->state_->o.policy.class_order = sim->options_.policy.class_order;
  }
  return sim;
}

std::vector<std::string> Simulator::ClassesStrongestFirst() const {
  std::vector<int> order(state_->class_speed.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return state_->class_speed[a] > state_->class_speed[b]; });
  std::vector<std::string> out;
  out.reserve(order.size());
  for (int k : order) out.push_back(ClassName(k));
  return out;
}

const std::vector<search::SearchSpace>& Simulator::spaces() const { return state_->spaces; }

SimResult Simulator::Run() {
  State& s = *state_;
  s.result.max_parallel = s.o.max_parallel;
  for (size_t i = 0; i < s.devices.size(); ++i) {
    SimEvent e;
    e.kind = SimEvent::Kind::kDevice;
    e.device = static_cast<int64_t>(i);
    e.device_id = s.devices[i].id;
    e.device_class = ClassName(s.devices[i].cls);
    e.benchmark = s.class_benchmark[s.devices[i].cls];
    s.Emit(std::move(e));
  }
  for (size_t i = 0; i < s.devices.size(); ++i)
    s.Schedule(0, State::EventKind::kAsk, static_cast<int64_t>(i));
  while (!s.events.empty() && !s.done) {
    const State::Event e = s.events.top();
    if (e.t > s.o.max_sim_s) {
      s.now = s.o.max_sim_s;
      break;
    }
    s.events.pop();
    s.now = e.t;
    switch (e.kind) {
      case State::EventKind::kAsk:
        if (e.tag == s.devices[e.who].ask_tag) s.Ask(e.who);
        break;
      case State::EventKind::kStep:
        s.Step(e.who);
        break;
      case State::EventKind::kDie:
        s.Die(e.who);
        break;
      case State::EventKind::kExpire:
        s.Expire(e.who);
        break;
      case State::EventKind::kReplace: {
        SimEvent back;
        back.kind = SimEvent::Kind::kBack;
        back.device = e.who;
        s.Emit(std::move(back));
        s.devices[e.who].down = false;
        s.live.Set(s.devices[e.who].id, ClassName(s.devices[e.who].cls),
                   s.devices[e.who].busy_until);
        s.Ask(e.who);
        break;
      }
    }
  }
  SimResult r = s.result;
  // Leases still running count up to the end.
  for (const auto& d : s.devices) {
    if (d.trial >= 0) s.busy_s += s.now - d.lease_started;
  }
  r.end_s = s.now;
  r.utilization = s.now > 0 ? s.busy_s / (static_cast<double>(s.devices.size()) * s.now) : 0;
  r.trials = static_cast<int64_t>(s.trials.size());
  r.trials_per_space.assign(s.per_space.begin(), s.per_space.end());
  for (const auto& t : s.trials) {
    if (t.phase == Phase::kPaused) ++r.paused;
    if (t.phase == Phase::kPending || t.phase == Phase::kOnDevice) ++r.unfinished;
  }
  return r;
}

}  // namespace hpo::scheduler
