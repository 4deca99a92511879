#include "scheduler/placement.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace hpo::scheduler {
namespace {

// What placement knows about one workload's speeds across the fleet.
struct WorkloadSpeeds {
  // (class, samples/s) of the fleet's classes with an estimate.
  std::vector<std::pair<std::string, double>> known;
  std::optional<double> asking;  // the asking class's samples/s
  double q = 0.5;                // the asking device's speed percentile
};

WorkloadSpeeds SpeedsFor(const std::string& workload, const AskingDevice& device,
                         const Fleet& fleet, const SpeedModel& speeds) {
  WorkloadSpeeds out;
  if (const auto e = speeds.Estimate(device.device_class, workload)) {
    out.asking = e->samples_per_sec;
  }
  bool asking_listed = false;
  double slower = 0, equal = 0, n = 0;
  for (const auto& [cls, count] : fleet.devices_per_class) {
    if (count <= 0) continue;
    const auto e = speeds.Estimate(cls, workload);
    if (!e) continue;
    out.known.emplace_back(cls, e->samples_per_sec);
    if (cls == device.device_class) asking_listed = true;
    n += count;
    if (!out.asking) continue;
    if (e->samples_per_sec < *out.asking) slower += count;
    if (e->samples_per_sec == *out.asking) equal += count;
  }
  if (!out.asking) return out;  // q stays 0.5: no basis to call it fast or slow
  if (!asking_listed) {
    out.known.emplace_back(device.device_class, *out.asking);
    n += 1;
    equal += 1;
  }
  out.q = n > 1 ? (slower + (equal - 1) / 2) / (n - 1) : 1.0;
  return out;
}

// Mid-rank percentiles of `values` (1 = largest), in their order.
std::vector<double> Percentiles(const std::vector<double>& values) {
  const size_t n = values.size();
  std::vector<double> out(n, 1.0);
  if (n < 2) return out;
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values[a] < values[b]; });
  for (size_t lo = 0; lo < n;) {
    size_t hi = lo;
    while (hi + 1 < n && values[order[hi + 1]] == values[order[lo]]) ++hi;
    // Positions lo..hi share one value: `lo` candidates are below it and
    // hi - lo others equal it.
    const double p = (lo + (hi - lo) / 2.0) / (n - 1);
    for (size_t k = lo; k <= hi; ++k) out[order[k]] = p;
    lo = hi + 1;
  }
  return out;
}

double Seconds(const PlacementCandidate& c, double samples_per_sec) {
  if (!(samples_per_sec > 0) || !(c.samples_per_step > 0)) return 0;
  return static_cast<double>(std::max<int64_t>(c.steps_remaining, 0)) * c.samples_per_step /
         samples_per_sec;
}

// Whether cost-aware mode lets the asking class take `c` (see the header).
bool CostAllows(const PlacementCandidate& c, const AskingDevice& device, const WorkloadSpeeds& ws,
                const PlacementOptions& options) {
  const auto own_price = options.price_per_hour.find(device.device_class);
  if (own_price == options.price_per_hour.end() || !ws.asking) return true;
  if (!(c.samples_per_step > 0)) return true;  // no way to compare work
  const auto cost = [&](double price, double sps) { return price / 3600 * Seconds(c, sps); };
  const auto meets = [&](double sps) {
    return options.deadline_s <= 0 || Seconds(c, sps) <= options.deadline_s;
  };
  bool any_meets = false;
  for (const auto& [cls, sps] : ws.known) {
    if (options.price_per_hour.count(cls) && meets(sps)) any_meets = true;
  }
  if (any_meets && !meets(*ws.asking)) return false;
  double cheapest = std::numeric_limits<double>::infinity();
  for (const auto& [cls, sps] : ws.known) {
    const auto price = options.price_per_hour.find(cls);
    if (price == options.price_per_hour.end()) continue;
    if (any_meets && !meets(sps)) continue;
    cheapest = std::min(cheapest, cost(price->second, sps));
  }
  return cost(own_price->second, *ws.asking) <= (1 + options.cost_tolerance) * cheapest;
}

}  // namespace

std::optional<PlacementDecision> PlaceTrial(const AskingDevice& device, const Fleet& fleet,
                                            const std::vector<PlacementCandidate>& candidates,
                                            const SpeedModel& speeds,
                                            const PlacementOptions& options) {
  if (candidates.empty()) return std::nullopt;

  // Few workloads, many candidates: look each workload's speeds up once.
  std::map<std::string, WorkloadSpeeds> by_workload;
  for (const auto& c : candidates) {
    if (!by_workload.count(c.workload)) {
      by_workload.emplace(c.workload, SpeedsFor(c.workload, device, fleet, speeds));
    }
  }
  const auto decide = [&](const PlacementCandidate& c) {
    const auto& ws = by_workload.at(c.workload);
    return PlacementDecision{c.trial_id, ws.asking ? Seconds(c, *ws.asking) : 0};
  };

  // Starving candidates first, cost and speed notwithstanding.
  const PlacementCandidate* starving = nullptr;
  for (const auto& c : candidates) {
    if (!(c.waiting_s > options.max_wait_s)) continue;
    if (starving == nullptr || c.waiting_s > starving->waiting_s ||
        (c.waiting_s == starving->waiting_s && c.trial_id < starving->trial_id)) {
      starving = &c;
    }
  }
  if (starving != nullptr) return decide(*starving);

  std::vector<double> importance(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    const auto& c = candidates[i];
    // A NaN would break the sort's ordering; a broken priority means "unknown".
    const double priority = std::isfinite(c.space_priority) ? std::max(c.space_priority, 0.0) : 0;
    importance[i] = priority * (1 + std::max(c.level, 0));
  }
  const std::vector<double> p = Percentiles(importance);

  const bool cost_aware = !options.price_per_hour.empty();
  const PlacementCandidate* best = nullptr;
  double best_gap = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < candidates.size(); ++i) {
    const auto& c = candidates[i];
    const auto& ws = by_workload.at(c.workload);
    if (cost_aware && !CostAllows(c, device, ws, options)) continue;
    const double gap = std::abs(p[i] - ws.q);
    if (best == nullptr || gap < best_gap || (gap == best_gap && c.trial_id < best->trial_id)) {
      best = &c;
      best_gap = gap;
    }
  }
  if (best == nullptr) return std::nullopt;
  return decide(*best);
}

}  // namespace hpo::scheduler
