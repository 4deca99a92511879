// Placement: on each lease, which pending trial goes to the device asking.
// Pure (no I/O, no clock) and deterministic: the same arguments give the
// same answer; the server passes in how long each candidate has waited.
//
// The rule, for the asking device d of class c_d:
//   speed        s(k, w) = SpeedModel::Estimate(k, w).samples_per_sec for
//                each class k of the fleet and each candidate's workload w
//   q_w          d's speed percentile for workload w among the fleet's
//                devices (weighted by how many devices each class has):
//                q = (slower + (equal - 1) / 2) / (n - 1), n devices with a
//                known speed, `equal` counting d itself; 1 = fastest,
//                0 = slowest; 1 when n == 1; 0.5 when d's speed is unknown
//   importance   i_t = space_priority_t * (1 + level_t)
//   p_t          t's importance percentile among all candidates, the same
//                mid-rank formula (1 = most important; 1 when alone)
//   pick         argmin_t |p_t - q_{w_t}|, ties to the lowest trial id.
// So fast devices take the most important work and promotions, slow devices
// take exploration and low rungs, and nobody idles while work is pending.
//
// No starvation: a candidate with waiting_s > max_wait_s is taken first by
// whoever asks (the longest-waiting one; ties to the lowest trial id),
// regardless of speed or cost.
//
// Cost-aware mode (price_per_hour not empty). For a candidate t and a
// class k of the fleet with a price and a known speed:
//   seconds(t, k) = steps_remaining * samples_per_step / s(k, w_t)
//   cost(t, k)    = price_per_hour[k] / 3600 * seconds(t, k)
// The eligible classes are those with seconds <= deadline_s (all of them
// when deadline_s == 0 or when none meets it). The asking device may take t
// only if its class is eligible and cost(t, c_d) <= (1 + cost_tolerance) *
// min over eligible k of cost(t, k). A device whose class has no price or
// no speed estimate is not held back (its cost cannot be compared). The
// rule above then picks among the candidates it may take; p_t is still
// computed over all candidates. When it may take none, the answer is
// nullopt and the device should ask again later.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/speed_model.h"

namespace hpo::scheduler {

struct AskingDevice {
  std::string id;
  std::string device_class;
};

// The registered devices, as a count per class: all placement needs, and
// cheap to keep up to date as workers come and go.
struct Fleet {
  std::map<std::string, int> devices_per_class;

  void Add(const std::string& device_class, int count = 1) {
    devices_per_class[device_class] += count;
  }
};

struct PlacementCandidate {
  int64_t trial_id = 0;
  int space_index = 0;        // for the caller; placement does not read it
  double space_priority = 1;  // SpaceRank::share of the trial's space
  int level = 0;              // rung / promotion level, higher = further along
  std::string workload;       // SpeedModel key
  int64_t steps_remaining = 0;
  double samples_per_step = 0;  // 0: unknown (no time or cost estimate)
  double waiting_s = 0;         // how long it has been pending
};

struct PlacementOptions {
  // After this long pending, a candidate goes to the next device that asks.
  double max_wait_s = 600;
  // Per device class; empty turns the cost-aware mode off.
  std::map<std::string, double> price_per_hour;
  // Seconds from now by which a candidate should be done; 0 = no deadline.
  double deadline_s = 0;
  // How much dearer than the cheapest eligible class the asking one may be.
  double cost_tolerance = 0.10;
};

struct PlacementDecision {
  int64_t trial_id = 0;
  // steps_remaining * samples_per_step / the asking class's speed; 0 when
  // either is unknown.
  double estimated_seconds = 0;
};

// The candidate `device` should run next, or nullopt when there is none it
// may take (no candidates, or cost-aware mode holds it back).
// The asking device's class counts once in the fleet even if `fleet` omits
// it. Cost: O(C log C + W * K) for C candidates, W workloads and K classes,
// plus O(C * K) in cost-aware mode.
std::optional<PlacementDecision> PlaceTrial(const AskingDevice& device, const Fleet& fleet,
                                            const std::vector<PlacementCandidate>& candidates,
                                            const SpeedModel& speeds,
                                            const PlacementOptions& options = {});

}  // namespace hpo::scheduler
