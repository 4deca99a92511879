#include "scheduler/policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace hpo::scheduler {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// What the policy knows about one workload's speeds across the live fleet.
struct WorkloadSpeeds {
  std::optional<SpeedEstimate> asking;  // the asking class's estimate
  double q = 0.5;                       // the asking device's speed percentile (1 = fastest)
  // Per class of the fleet (the asking one included): its estimate and the
  // soonest any of its other devices is free.
  struct ClassSpeed {
    std::string device_class;
    SpeedEstimate estimate;
    double soonest_free_s = kInf;  // over its devices but the asking one
  };
  std::vector<ClassSpeed> classes;
};

using FleetClasses =
    std::vector<FleetSummary::ClassView>;  // by class name, the asking one included

WorkloadSpeeds SpeedsFor(const std::string& workload, const AskingDevice& device,
                         const FleetClasses& fleet, const SpeedModel& speeds) {
  WorkloadSpeeds out;
  out.asking = speeds.Estimate(device.device_class, workload);
  double slower = 0, equal = 0, n = 0;
  for (const auto& c : fleet) {
    const auto e = speeds.Estimate(c.device_class, workload);
    if (!e) continue;
    out.classes.push_back({c.device_class, *e, c.soonest_free_s});
    const double count = c.devices;
    n += count;
    if (!out.asking) continue;
    if (e->samples_per_sec < out.asking->samples_per_sec) slower += count;
    if (e->samples_per_sec == out.asking->samples_per_sec) equal += count;
  }
  if (out.asking) out.q = n > 1 ? (slower + (equal - 1) / 2) / (n - 1) : 1.0;
  // Nobody faster: the top of the fleet, whatever the ties. (Mid-rank would
  // put every device of a fleet of equals in the middle, taking middling
  // work before promotions, which is not what successive halving means.)
  if (out.asking && slower + equal == n) out.q = 1.0;
  return out;
}

// Mid-rank percentiles of `values` (1 = largest), in their order.
// Each value's mid-rank percentile among all of them, value i counted
// weights[i] times (an item and the ones alike it left out).
std::vector<double> Percentiles(const std::vector<double>& values,
                                const std::vector<double>& weights) {
  const size_t n = values.size();
  double total = 0;
  for (double w : weights) total += w;
  std::vector<double> out(n, 1.0);
  if (!(total >= 2)) return out;
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return values[a] < values[b]; });
  double below = 0;  // the weight of the values below this one
  for (size_t lo = 0; lo < n;) {
    size_t hi = lo;
    double w = weights[order[lo]];
    while (hi + 1 < n && values[order[hi + 1]] == values[order[lo]]) w += weights[order[++hi]];
    const double p = (below + (w - 1) / 2.0) / (total - 1);
    for (size_t k = lo; k <= hi; ++k) out[order[k]] = p;
    below += w;
    lo = hi + 1;
  }
  return out;
}

double Weight(const WorkItem& item) {
  return 1 + static_cast<double>(std::max<int64_t>(item.alike, 0));
}

double Seconds(const WorkItem& item, double samples_per_step, double samples_per_sec) {
  if (item.samples_per_step > 0) samples_per_step = item.samples_per_step;
  if (!(samples_per_sec > 0) || !(samples_per_step > 0)) return 0;
  return static_cast<double>(std::max<int64_t>(item.steps, 0)) * samples_per_step / samples_per_sec;
}

// Whether cost-awareness lets the asking class take the item.
bool CostAllows(const WorkItem& item, const AskingDevice& device, const WorkloadSpeeds& ws,
                const PolicyOptions& options) {
  const auto own_price = options.price_per_hour.find(device.device_class);
  if (own_price == options.price_per_hour.end() || !ws.asking) return true;  // cannot compare
  if (!(options.samples_per_step > 0) && !(item.samples_per_step > 0)) return true;
  const auto seconds = [&](double sps) { return Seconds(item, options.samples_per_step, sps); };
  // The trial's whole rest, not this segment alone, must fit before the deadline.
  WorkItem rest = item;
  rest.steps = std::max(item.steps, item.remaining_steps);
  const auto meets = [&](double sps) {
    return options.deadline_s <= 0 ||
           Seconds(rest, options.samples_per_step, sps) <= options.deadline_s;
  };
  bool any_meets = false;
  for (const auto& c : ws.classes) {
    if (options.price_per_hour.count(c.device_class) && meets(c.estimate.samples_per_sec))
      any_meets = true;
  }
  if (any_meets && !meets(ws.asking->samples_per_sec)) return false;
  double cheapest = kInf;
  for (const auto& c : ws.classes) {
    const auto price = options.price_per_hour.find(c.device_class);
    if (price == options.price_per_hour.end()) continue;
    if (any_meets && !meets(c.estimate.samples_per_sec)) continue;
    cheapest = std::min(cheapest, price->second / 3600 * seconds(c.estimate.samples_per_sec));
  }
  return own_price->second / 3600 * seconds(ws.asking->samples_per_sec) <=
         (1 + options.cost_tolerance) * cheapest;
}

bool WellKnown(const std::optional<SpeedEstimate>& e, const PolicyOptions& options) {
  if (!e || e->observations == 0 || !(e->samples_per_sec > 0)) return false;
  return e->observations >= options.explore_min_observations ||
         e->stddev / e->samples_per_sec <= options.explore_relative_stddev;
}

// Seconds until a faster device of another class could finish `item`, if
// one would beat this device by the margin; nullopt otherwise.
std::optional<double> FasterElsewhere(const WorkItem& item, const WorkloadSpeeds& ws,
                                      const PolicyOptions& options) {
  if (item.kind == WorkItem::Kind::kNew ||
      !(options.samples_per_step > 0 || item.samples_per_step > 0) || !ws.asking ||
      ws.asking->observations == 0) {
    return std::nullopt;
  }
  const double here = Seconds(item, options.samples_per_step, ws.asking->samples_per_sec);
  std::optional<double> best;
  for (const auto& c : ws.classes) {
    if (c.estimate.observations == 0 || !(c.estimate.samples_per_sec > ws.asking->samples_per_sec))
      continue;
    if (!std::isfinite(c.soonest_free_s)) continue;  // no other device of the class
    const double there =
        c.soonest_free_s + Seconds(item, options.samples_per_step, c.estimate.samples_per_sec);
    if (there * options.hold_back_margin < here && (!best || c.soonest_free_s < *best))
      best = c.soonest_free_s;
  }
  return best;
}

PolicyDecision Run(size_t i, const WorkItem& item, const WorkloadSpeeds& ws,
                   const PolicyOptions& options, std::string reason) {
  PolicyDecision d;
  d.run = true;
  d.item = i;
  d.estimated_seconds =
      ws.asking ? Seconds(item, options.samples_per_step, ws.asking->samples_per_sec) : 0;
  d.reason = std::move(reason);
  return d;
}

PolicyDecision Nothing(double retry_after_s, std::string reason) {
  PolicyDecision d;
  d.retry_after_s = retry_after_s;
  d.reason = std::move(reason);
  return d;
}

const char* KindWord(WorkItem::Kind k) {
  switch (k) {
    case WorkItem::Kind::kResume:
      return "promotion";
    case WorkItem::Kind::kPending:
      return "pending trial";
    case WorkItem::Kind::kNew:
      return "new trial";
  }
  return "item";
}

PolicyDecision Fifo(const std::vector<WorkItem>& items, const std::vector<WorkloadSpeeds*>& ws,
                    const PolicyOptions& options) {
  std::optional<size_t> oldest, preferred, first_new;
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& it = items[i];
    if (it.kind == WorkItem::Kind::kNew) {
      if (!first_new) first_new = i;
      if (it.preferred && !preferred) preferred = i;
    } else if (!oldest || it.waiting_s > items[*oldest].waiting_s) {
      oldest = i;
    }
  }
  const auto pick = oldest ? oldest : preferred ? preferred : first_new;
  return Run(*pick, items[*pick], *ws[*pick], options,
             std::string("fifo: the oldest ") + KindWord(items[*pick].kind));
}

PolicyDecision Shadho(const AskingDevice& device, const FleetClasses& fleet,
                      const std::vector<WorkItem>& items, const std::vector<WorkloadSpeeds*>& ws,
                      const PolicyOptions& options) {
  const auto strength = [&](const std::string& cls) {
    const auto it = std::find(options.class_order.begin(), options.class_order.end(), cls);
    return it == options.class_order.end() ? 0.0
                                           : static_cast<double>(options.class_order.end() - it);
  };
  const double mine = strength(device.device_class);
  double slower = 0, equal = 0, n = 0;
  for (const auto& c : fleet) {  // the asking device is counted in its class
    const double s = strength(c.device_class);
    const double count = c.devices;
    n += count;
    if (s < mine) slower += count;
    if (s == mine) equal += count;
  }
  const double q = n > 1 ? (slower + (equal - 1) / 2) / (n - 1) : 1.0;
  std::vector<double> importance, weights;
  importance.reserve(items.size());
  weights.reserve(items.size());
  for (const auto& it : items) {
    importance.push_back(std::max(0.0, std::isfinite(it.space_priority) ? it.space_priority : 0));
    weights.push_back(Weight(it));
  }
  const auto p = Percentiles(importance, weights);
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    if (std::abs(p[i] - q) < std::abs(p[best] - q)) best = i;
  }
  return Run(best, items[best], *ws[best], options,
             "shadho: space priority by the user's class order");
}

}  // namespace

std::optional<PolicyKind> ParsePolicyKind(const std::string& name) {
  if (name == "speed") return PolicyKind::kSpeed;
  if (name == "fifo") return PolicyKind::kFifo;
  if (name == "shadho") return PolicyKind::kShadho;
  return std::nullopt;
}

const char* PolicyName(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kSpeed:
      return "speed";
    case PolicyKind::kFifo:
      return "fifo";
    case PolicyKind::kShadho:
      return "shadho";
  }
  return "speed";
}

PolicyDecision Decide(const AskingDevice& device, const std::vector<LiveDevice>& fleet,
                      const std::vector<WorkItem>& items, const SpeedModel& speeds,
                      const PolicyOptions& options) {
  FleetSummary summary;
  for (const auto& d : fleet)
    summary.Set(d.id, d.device_class, d.busy_s);  // free at busy_s after now = 0
  return Decide(device, summary, 0, items, speeds, options);
}

PolicyDecision Decide(const AskingDevice& device, const FleetSummary& fleet, double now_s,
                      const std::vector<WorkItem>& items, const SpeedModel& speeds,
                      const PolicyOptions& options) {
  if (items.empty()) return Nothing(1, "no work on offer");
  // Few workloads, many items: each workload's speeds are looked up once.
  const FleetClasses classes = fleet.ClassesFor(device.id, device.device_class, now_s);
  std::map<std::string, WorkloadSpeeds> by_workload;
  std::vector<WorkloadSpeeds*> ws(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    auto it = by_workload.find(items[i].workload);
    if (it == by_workload.end()) {
      it = by_workload
               .emplace(items[i].workload, SpeedsFor(items[i].workload, device, classes, speeds))
               .first;
    }
    ws[i] = &it->second;
  }
  // 0. Budget: what this device cannot pay for is not on offer here.
  if (options.budget_left < kInf) {
    if (!(options.budget_left > 0)) return Nothing(30, "cost.budget: spent");
    const auto own_price = options.price_per_hour.find(device.device_class);
    std::vector<size_t> affordable;
    for (size_t i = 0; i < items.size(); ++i) {
      const double seconds = ws[i]->asking ? Seconds(items[i], options.samples_per_step,
                                                     ws[i]->asking->samples_per_sec)
                                           : 0;
      const double cost =
          own_price == options.price_per_hour.end() ? 0 : own_price->second / 3600 * seconds;
      if (cost <= options.budget_left) affordable.push_back(i);
    }
    if (affordable.empty())
      return Nothing(30, "cost.budget: what is left pays for no work on offer here");
    if (affordable.size() < items.size()) {
      std::vector<WorkItem> within;
      within.reserve(affordable.size());
      for (size_t i : affordable) within.push_back(items[i]);
      PolicyOptions unbounded = options;
      unbounded.budget_left = kInf;
      PolicyDecision d = Decide(device, fleet, now_s, within, speeds, unbounded);
      if (d.run) d.item = affordable[d.item];
      return d;
    }
  }
  if (options.kind == PolicyKind::kFifo) return Fifo(items, ws, options);
  if (options.kind == PolicyKind::kShadho) return Shadho(device, classes, items, ws, options);

  // 1. Starvation.
  std::optional<size_t> starving;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].waiting_s > options.max_wait_s &&
        (!starving || items[i].waiting_s > items[*starving].waiting_s)) {
      starving = i;
    }
  }
  if (starving) return Run(*starving, items[*starving], *ws[*starving], options, "waited too long");

  // 2. Cost.
  std::vector<size_t> offered;
  const bool cost_aware = !options.price_per_hour.empty();
  for (size_t i = 0; i < items.size(); ++i) {
    if (!cost_aware || CostAllows(items[i], device, *ws[i], options)) offered.push_back(i);
  }
  if (offered.empty())
    return Nothing(5, "cost: cheaper devices meet the deadline for all the work on offer");

  // 2b. Movers bound for this device's class.
  std::optional<size_t> mover;
  for (size_t i : offered) {
    const auto& it = items[i];
    if (it.kind != WorkItem::Kind::kResume || it.moving_to.empty() ||
        it.moving_to != device.device_class) {
      continue;
    }
    // The most advanced first: a mover that preempted a trial here for this
    // device is not then left behind less advanced movers.
    if (!mover || it.level > items[*mover].level ||
        (it.level == items[*mover].level && it.waiting_s > items[*mover].waiting_s))
      mover = i;
  }
  if (mover) {
    return Run(*mover, items[*mover], *ws[*mover], options,
               "a trial moving to this device's class");
  }

  // 3. Exploration of a device the model knows little about.
  std::optional<size_t> explore;
  for (size_t i : offered) {
    const auto& it = items[i];
    if (it.kind != WorkItem::Kind::kNew || WellKnown(ws[i]->asking, options)) continue;
    if (!explore || it.steps < items[*explore].steps ||
        (it.steps == items[*explore].steps && it.space_priority < items[*explore].space_priority)) {
      explore = i;
    }
  }
  if (explore)
    return Run(*explore, items[*explore], *ws[*explore], options,
               "explore: little known about this device");

  // 4. Matching importance to speed.
  std::vector<double> importance, weights;
  for (size_t i : offered) {
    const auto& it = items[i];
    const double priority = std::isfinite(it.space_priority) ? std::max(it.space_priority, 0.0) : 0;
    importance.push_back(priority * (1 + std::max(it.level, 0)));
    weights.push_back(Weight(it));
  }
  const std::vector<double> p = Percentiles(importance, weights);
  std::vector<size_t> order(offered.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::abs(p[a] - ws[offered[a]]->q) < std::abs(p[b] - ws[offered[b]]->q);
  });
  // 5. Hold-back for faster devices.
  std::optional<double> soonest_faster;
  for (size_t k : order) {
    const size_t i = offered[k];
    if (const auto wait = FasterElsewhere(items[i], *ws[i], options)) {
      soonest_faster = soonest_faster ? std::min(*soonest_faster, *wait) : *wait;
      continue;
    }
    return Run(i, items[i], *ws[i], options,
               std::string(KindWord(items[i].kind)) + " matched to this device's speed");
  }
  return Nothing(std::clamp(soonest_faster.value_or(1.0), 0.5, 30.0),
                 "held back: faster devices would finish every item sooner");
}

MoveDecision DecideMove(const std::string& device_class, const WorkItem& rest,
                        const std::vector<MoveTarget>& targets, const SpeedModel& speeds,
                        const PolicyOptions& options) {
  MoveDecision d;
  if (options.kind != PolicyKind::kSpeed || rest.steps <= 0) {
    d.reason = "stays: only the speed policy moves trials, and only with steps left";
    return d;
  }
  const auto here = speeds.Estimate(device_class, rest.workload);
  if (!here || here->observations == 0 || !(here->samples_per_sec > 0)) {
    d.reason = "stays: this device's speed is not known";
    return d;
  }
  d.seconds_here = Seconds(rest, options.samples_per_step, here->samples_per_sec);
  if (!(d.seconds_here > 0)) {
    d.reason = "stays: samples per step not known";
    return d;
  }
  std::optional<double> best;
  for (size_t i = 0; i < targets.size(); ++i) {
    const MoveTarget& t = targets[i];
    const auto there = speeds.Estimate(t.device_class, rest.workload);
    if (!there || there->observations == 0 || !(there->samples_per_sec > here->samples_per_sec))
      continue;
    const bool preempt = t.preemptible && t.preempt_in_s < t.free_in_s;
    const double wait = std::max(0.0, preempt ? t.preempt_in_s : t.free_in_s);
    if (!std::isfinite(wait)) continue;
    const double total = wait + std::max(0.0, options.move_overhead_s) +
                         Seconds(rest, options.samples_per_step, there->samples_per_sec);
    if (total * options.hold_back_margin < d.seconds_here && (!best || total < *best)) {
      best = total;
      d.target = i;
      d.preempt = preempt;
    }
  }
  if (!best) {
    d.reason = "stays: no faster device would finish it sooner";
    return d;
  }
  d.move = true;
  d.seconds_there = *best;
  d.reason = std::string("moves to ") + targets[d.target].device_class +
             (d.preempt ? ", preempting a less advanced trial there" : "") + ": about " +
             std::to_string(static_cast<int>(std::lround(d.seconds_there))) + " s there against " +
             std::to_string(static_cast<int>(std::lround(d.seconds_here))) + " s here";
  return d;
}

}  // namespace hpo::scheduler
