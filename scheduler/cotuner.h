// System-parameter co-tuning inside a trial (PipeTune's idea): settings
// such as intra-op threads or a throughput-only batch size change speed,
// not accuracy, so instead of searching them as hyperparameters each trial
// tunes them epoch by epoch while it trains:
//
//   1. The first epoch runs at the starting setting (the best one remembered
//      for this device class and workload, when there is one).
//   2. Coordinate search: each later epoch tries one neighbour of the best
//      setting so far (one parameter one step up or down its value list),
//      until no untried neighbour is left or `max_probes` settings were
//      tried; then the trial settles on the fastest.
//   3. Drift: when a settled epoch's speed differs from what that setting
//      measured before by more than `drift` (20%), probing starts over from
//      that epoch (the machine got busier, or a cgroup limit changed).
//
// Stateless and pure: the decision is a function of the trial's measured
// epochs, which the server has in its store, so it survives restarts and
// works across server replicas.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "search/space.h"

namespace hpo::scheduler {

struct SystemDimension {
  std::string name;
  std::vector<nlohmann::json> values;  // in order; neighbours are adjacent entries
  bool may_change_mid_trial = true;    // only these are probed within a trial
};

// The values a system parameter's domain offers the search: categorical
// choices; ints and stepped floats on their grid (at most `max_values`,
// spread evenly); log domains by doubling from `low`; continuous floats as
// `max_values` evenly spaced points.
std::vector<nlohmann::json> CandidateValues(const search::Param& domain, int max_values = 16);

struct EpochSpeed {
  nlohmann::json setting;  // the system setting the epoch ran with
  double samples_per_sec = 0;
};

struct CoTuneOptions {
  int max_probes = 4;   // settings tried besides the first, per probing phase
  double drift = 0.2;   // relative speed change that restarts probing
};

struct CoTuneDecision {
  nlohmann::json setting;  // what the next epoch should use
  bool probing = false;    // still exploring
  std::string reason;      // for logs: "probe threads=1", "settled", "drift"
};

// The setting for the next epoch, given this trial's epochs so far (oldest
// first). With no history, `start` is returned unchanged.
CoTuneDecision NextSetting(const std::vector<SystemDimension>& dims, const std::vector<EpochSpeed>& history,
                           const nlohmann::json& start, const CoTuneOptions& options = {});

// Whether the program applies what the co-tuner asks: the index of the
// first of the newest `window` epochs (and not the first epoch, whose
// setting came with the lease) that ran, on a parameter probed within
// trials, another value than NextSetting gave for it, or nullopt when they
// all ran as asked. A program that ignores changes (a command that never
// reads HPO_SYSTEM_FILE, a parameter its trainer fixes per process) would
// otherwise be sent the same probe every epoch; the engine stops co-tuning
// such a trial and says so in its events. O(window x history).
std::optional<size_t> FirstIgnoredChange(const std::vector<SystemDimension>& dims,
                                         const std::vector<EpochSpeed>& history, const CoTuneOptions& options = {},
                                         size_t window = 64);

// Canonical text of a setting (sorted keys), used as a map key.
std::string SettingKey(const nlohmann::json& setting);

}  // namespace hpo::scheduler
