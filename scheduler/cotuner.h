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
//   4. Reuse (PipeTune's second half): a neighbour that earlier trials on
//      the same device class and workload measured slower than this
//      trial's best setting so far, for this trial's searched values, by
//      more than `known_slower` (10%), is not probed again (KnownSpeeds:
//      SpeedModel::PredictAllTunables). So the first trials of a class
//      probe and later ones, which start at the remembered best
//      (SpeedModel::BestTunables), settle at once. Not after a drift: what
//      was measured before no longer says how the machine runs now.
//
// Which parameters are probed: those the spec marks `mutable` and the
// worker's program can change mid-trial (RestrictToDeclared), within what
// the device takes (CapToDevice). docs/system-parameters.md has the whole
// story, with the events that report bad input.
//
// Stateless and pure: the decision is a function of the trial's measured
// epochs, which the server has in its store, so it survives restarts and
// works across server replicas.
#pragma once

#include <map>
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

// When the program running a trial can apply a new value of a system
// parameter, as its worker declares it (worker.proto SystemChange):
// between epochs, only when the program starts (a new lease or a restart),
// or never (it takes the value it has, or does not know the parameter).
enum class SystemChange { kMidTrial, kAtRestart, kFixed };

// The worker's word over the spec's: a parameter is probed within a trial
// only where both allow it - the spec's `mutable` (may_change_mid_trial)
// and a declaration of kMidTrial. `declared` empty: the worker declared
// nothing (an older one, or a command whose program it cannot know), and
// the spec decides alone, as before declarations existed. A parameter a
// non-empty declaration leaves out is one the program does not know: it is
// not probed, and its name is returned (in `dims` order), for the caller
// to say so.
std::vector<std::string> RestrictToDeclared(std::vector<SystemDimension>& dims,
                                            const std::map<std::string, SystemChange>& declared);

// What one device can take: the values of `dim` above `limit` are dropped
// (numbers only; when none is left, `limit` itself is the one value, so a
// range entirely beyond the device still runs at its limit), and a
// numeric `*setting`'s value of this parameter above `limit`, when
// `setting` is given, becomes the largest value left. True when anything
// was dropped or changed. Used for threads: a device with 2 usable cores
// is never asked for 4.
bool CapToDevice(SystemDimension& dim, double limit, nlohmann::json* setting = nullptr);

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
  int max_probes = 4;  // settings tried besides the first, per probing phase
  double drift = 0.2;  // relative speed change that restarts probing
  // A neighbour whose known speed is below the best setting's known speed
  // by more than this fraction is not probed (step 4 above). Larger than
  // the epoch-to-epoch noise of one setting, and than what a trial's own
  // hyperparameters leave in the model's per-setting means.
  double known_slower = 0.1;
};

// What earlier trials measured on this device class and workload, for
// this trial's searched values: predicted samples/s by TunableKey.
using KnownSpeeds = std::map<std::string, double>;

// The key KnownSpeeds is by: SettingKey of `setting`'s values of the
// parameters in `dims` (those it has), which is how SpeedModel keys a
// tunable setting (BestTunables, PredictAllTunables).
std::string TunableKey(const std::vector<SystemDimension>& dims, const nlohmann::json& setting);

struct CoTuneDecision {
  nlohmann::json setting;  // what the next epoch should use
  bool probing = false;    // still exploring
  std::string reason;      // for logs: "probe threads=1", "settled", "drift"
};

// The setting for the next epoch, given this trial's epochs so far (oldest
// first) and what earlier trials measured (`known`, may be empty). With no
// history, `start` is returned unchanged.
CoTuneDecision NextSetting(const std::vector<SystemDimension>& dims,
                           const std::vector<EpochSpeed>& history, const nlohmann::json& start,
                           const CoTuneOptions& options = {}, const KnownSpeeds& known = {});

// An epoch that ran another value than the co-tuner asked for.
struct IgnoredChange {
  size_t epoch = 0;       // index into the history
  std::string parameter;  // the first such parameter, in dims order
  nlohmann::json asked;   // what NextSetting gave for it
  nlohmann::json ran;     // what the epoch reported (null: it reported none)
};

// Whether the program applies what the co-tuner asks: the first of the
// newest `window` epochs (and not the first epoch, whose setting came with
// the lease) that ran, on a parameter probed within trials, another value
// than NextSetting gave for it, or nullopt when they all ran as asked. A
// program that ignores changes (a command that never reads
// HPO_SYSTEM_FILE, a parameter its trainer fixes per process) would
// otherwise be sent the same probe every epoch; the engine stops co-tuning
// such a trial and says so in its events. What was asked is replayed with
// and without `known`, and either counts as asked: `known` is what the
// model says now, and an epoch asked for earlier may have been asked under
// less of it. O(window x history).
std::optional<IgnoredChange> FirstIgnoredChange(const std::vector<SystemDimension>& dims,
                                                const std::vector<EpochSpeed>& history,
                                                const CoTuneOptions& options = {},
                                                size_t window = 64, const KnownSpeeds& known = {});

// Canonical text of a setting (sorted keys), used as a map key.
std::string SettingKey(const nlohmann::json& setting);

}  // namespace hpo::scheduler
