// The placement policy: when a device asks for work, what it runs next.
// Pure (no I/O, no clock, no threads) and deterministic: the engine builds
// the snapshot and applies the answer (server/engine/engine.cc), and the fleet
// simulator drives this same function (scheduler/simulator.h).
//
// The snapshot. The work on offer, as WorkItems of three kinds:
//   resume   a paused trial that may be promoted (search/promotion.h),
//            resuming at its checkpoint and running to its next rung;
//   pending  a trial that waits for a device (requeued after its lease
//            expired, or created ahead of time);
//   new      a new trial in a search space, created for this device; the
//            engine offers one per space while the budget and max_parallel
//            allow.
// The live fleet (devices that reported or heartbeated within the lease
// timeout) as a FleetSummary (fleet_summary.h): per class, how many devices
// and when each is free, kept by the caller; the speed model (measured
// samples/s per device class and workload, with its uncertainty); and the
// asking device.
//
// The answer: run item i (with the estimated seconds it takes here), or
// nothing for now (retry after retry_after_s).
//
// Policy "speed" (ours), in order:
//  1. No starvation: an item available for longer than max_wait_s goes to
//     whoever asks first, the longest-waiting one first.
//  0. Budget (every kind): with PolicyOptions::budget_left, an item this
//     device could not pay for out of what is left is not on offer here;
//     with none left, nothing is.
//  2. Cost: with prices, an item whose cost here exceeds (1 + tolerance)
//     times its cheapest cost on a class that meets the deadline is not
//     offered to this device (PlacementOptions). A class meets the
//     deadline when it would train the trial's remaining steps (all of
//     them, not only this lease's segment) before it.
//  2b. Movers: a resume item moving to the asking device's class (its
//     trial paused to move there, DecideMove) goes to the first device of
//     the class that asks (the most advanced, then the longest-waiting one
//     first: one that preempted a trial here gets the device it freed),
//     before exploration, matching and hold-back. DecideMove counted on
//     that class's next free device; without this the device took a new
//     trial by matching (a mid-speed class matches the least important
//     items), hold-back left the mover for a faster class busy with other
//     promotions, and a device freed by preempting a trial for the mover
//     took a new trial instead, so a mover waited far longer than the
//     move's estimate.
//  3. Exploration: when the model knows little about this device for an
//     item's workload (no observation, or fewer than
//     explore_min_observations with a relative stddev above
//     explore_relative_stddev), the device gets the cheapest new trial (the
//     fewest steps, then the lowest importance): a rung-0 segment measures
//     it at the least cost before promotions depend on it. Past
//     explore_min_observations the device counts as known however wide its
//     estimate: what is left of the stddev is then the spread between the
//     workload's configurations (width, batch size), which more exploring
//     does not narrow. (Found by bench/hetero: without the bound the fastest
//     worker kept starting new trials to "explore" while the best trial
//     waited 15 s for its promotion.)
//  4. Matching: importance i = space_priority * (1 + level), so promotions
//     (more work still to do, and the trials most likely to win) outrank
//     rung-0 trials of the same space. With p the item's importance
//     percentile among the offered items and q the device's speed
//     percentile among the live fleet's devices for the item's workload
//     (mid-rank, 1 = fastest, and 1 for every device when none is faster
//     than it; 0.5 when its speed is unknown), the device
//     takes argmin |p - q|: fast devices take promotions, slow ones
//     exploration.
//  5. Hold-back: a resume or pending item that a faster live device would
//     finish sooner even after finishing what it runs now (busy_s +
//     seconds there, times hold_back_margin, below the seconds here; known
//     speeds only) is left for it; the device takes the next match, or
//     nothing when every item is left for someone faster. A new trial is
//     never held back: nobody else is owed it.
// Ties go to the item listed first.
//
// Policy "fifo" (the baseline): the oldest resume or pending item (by
// waiting_s) to whoever asks; without one, the new trial the engine marked
// `preferred` (the space ranking's pick), else the first new item. No
// speeds, no cost, no hold-back.
//
// Policy "shadho" (SHADHO's rule, the baseline): device strength is the
// position of its class in the user's class_order (first = strongest; an
// unlisted class is weakest), never measured; importance is the space's
// priority alone (SHADHO knows no rungs); the device takes argmin |p - q|
// with those, q over the live fleet. No cost, no hold-back, no exploration.
//
// Cost: O(I log I + W * C) for I items, W workloads among them and C device
// classes in the fleet, whatever the number of devices: nothing in the
// rules above needs a device beyond its class's count and soonest free time,
// which the caller's FleetSummary keeps as devices change.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/fleet_summary.h"
#include "scheduler/speed_model.h"

namespace hpo::scheduler {

struct AskingDevice {
  std::string id;
  std::string device_class;
};

// One device of a fleet given as a list (the second Decide below).
struct LiveDevice {
  std::string id;
  std::string device_class;
  // Estimated seconds until it is free (what it runs now, at its speed);
  // 0 when idle or unknown.
  double busy_s = 0;
};

struct WorkItem {
  enum class Kind { kResume, kPending, kNew };
  Kind kind = Kind::kNew;
  int64_t trial_id = 0;  // resume and pending
  int space_index = 0;
  double space_priority = 1;  // the space's SpaceRank::share
  int level = 0;              // the rung this lease runs toward (0 for a new trial)
  std::string workload;       // SpeedModel key
  int64_t steps = 0;          // steps this lease would run
  // Steps the trial has left to its end (this lease's and any later ones');
  // 0: the same as `steps`. The deadline is weighed against these.
  int64_t remaining_steps = 0;
  double samples_per_step = 0;  // of its workload; 0: PolicyOptions::samples_per_step
  double waiting_s = 0;         // since it became available (0 for new)
  bool preferred = false;       // new: the space ranking's own pick (fifo uses it)
  // resume: the device class the trial paused to move to (DecideMove chose
  // it, and counted on that class's next free device); empty otherwise.
  std::string moving_to;
  // Items like this one (the same kind, space, level and steps) that the
  // offer left out after it (OfferInput::promotable, kMaxPromotionsPerRung):
  // where the policy weighs the offer as a whole (importance percentiles)
  // they count as if listed.
  int64_t alike = 0;
};

enum class PolicyKind { kSpeed, kFifo, kShadho };
// "speed", "fifo", "shadho"; nullopt for another name.
std::optional<PolicyKind> ParsePolicyKind(const std::string& name);
const char* PolicyName(PolicyKind kind);

struct PolicyOptions {
  PolicyKind kind = PolicyKind::kSpeed;
  // After this long available, an item goes to the next device that asks.
  double max_wait_s = 600;
  // Samples one step trains (e.g. an epoch's); 0: unknown, then no time or
  // cost estimates and no hold-back.
  double samples_per_step = 0;
  // Per device class; empty turns cost-awareness off.
  std::map<std::string, double> price_per_hour;
  // Seconds from now by which work should be done; 0 = no deadline.
  double deadline_s = 0;
  // How much dearer than the cheapest eligible class the asking one may be.
  double cost_tolerance = 0.10;
  // Money left of the experiment's cost.budget (infinity: no budget). An
  // item whose segment would cost more here than is left, at this class's
  // price and its measured speed for the item's workload, is not run here;
  // one whose cost here is unknown (no price, no measured speed) may be.
  // Every policy kind keeps it.
  double budget_left = std::numeric_limits<double>::infinity();
  // A speed estimate with less relative certainty than this (stddev / mean)
  // counts as unknown for exploration.
  double explore_relative_stddev = 0.25;
  // With this many observations a device is known for the workload.
  int explore_min_observations = 3;
  // Hold back only when the faster device is sooner by this factor.
  double hold_back_margin = 1.25;
  // shadho: device classes, strongest first.
  std::vector<std::string> class_order;
  // Migration (DecideMove): what moving a trial costs besides its training
  // there - the checkpoint's save, upload, download and restore and a
  // lease - in seconds.
  double move_overhead_s = 1.0;
};

struct PolicyDecision {
  bool run = false;
  size_t item = 0;               // when run: index into the items
  double estimated_seconds = 0;  // steps * samples_per_step / speed here; 0 when unknown
  double retry_after_s = 0;      // when not run
  std::string reason;            // for logs and events: "promotion to the fastest", "explore", ...
};

// The decision at `now_s` (the clock of the summary's free times).
// REQUIRES: the asking device is one of `fleet` (it is counted in if not).
PolicyDecision Decide(const AskingDevice& device, const FleetSummary& fleet, double now_s,
                      const std::vector<WorkItem>& items, const SpeedModel& speeds,
                      const PolicyOptions& options);
// The same, the summary built from a list of devices first (busy_s from now):
// O(D log D) more, for tests and callers that ask once per fleet.
// REQUIRES: device ids are unique.
PolicyDecision Decide(const AskingDevice& device, const std::vector<LiveDevice>& fleet,
                      const std::vector<WorkItem>& items, const SpeedModel& speeds,
                      const PolicyOptions& options);

// Migration: stop-type early stopping (search/pruner.h) never pauses a
// trial for a decision, so a trial that started on a slow device would
// otherwise finish there. When a trial survives a rung, the engine asks
// whether it should pause there, with a checkpoint, and go on on a faster
// device, and offers it the devices of the live fleet by class:
//
// A class is a target when its speed for the trial's workload is known
// (one observation or more) and above the current class's. Its wait is the
// soonest one of its devices is free, or, when one of its devices runs a
// trial less advanced than the mover (fewer rungs survived: `preemptible`),
// until that trial's next step boundary, where it would pause in turn
// (preemption). Not a trial as advanced that did worse at the mover's
// rung: tried, and on bench/hetero values after one epoch were too noisy
// to rank by (the eventual winner was preempted in 2 of 10 seeds). The
// trial moves when, for the best target,
//   (wait + move_overhead_s + rest there) * hold_back_margin < rest here,
// the rest being rest.steps at each class's estimated speed. Only the speed
// policy moves trials (fifo and shadho place each trial once); with
// samples_per_step or a speed unknown nothing moves.
struct MoveTarget {
  std::string device_class;
  double free_in_s = 0;      // the soonest one of its devices is free (0: now)
  bool preemptible = false;  // one of its devices runs a less advanced trial
  double preempt_in_s = 0;   // then: until that trial's next step boundary
};

struct MoveDecision {
  bool move = false;
  size_t target = 0;         // when move: index into the targets
  bool preempt = false;      // when move: the target's less advanced trial pauses for it
  double seconds_here = 0;   // the rest on the current class; 0 when unknown
  double seconds_there = 0;  // when move: wait, overhead and the rest there
  std::string reason;
};

// `rest`: the trial's remaining work as an item (steps, workload,
// samples_per_step). Pure; O(T) for T targets.
MoveDecision DecideMove(const std::string& device_class, const WorkItem& rest,
                        const std::vector<MoveTarget>& targets, const SpeedModel& speeds,
                        const PolicyOptions& options);

}  // namespace hpo::scheduler
