// Read models for the web dashboard: the per-experiment views its pages draw
// that the list routes cannot give cheaply (one request instead of one per
// trial). Pure functions over store records - no I/O - so they are tested
// without a server; server/api.cc reads the store and calls them.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "server/store/store.h"

namespace hpo::server::dashboard {

// Learning curves: each trial's `metric` by step, from an experiment's
// measurements ordered by trial, then step (Store::ListExperimentMeasurements).
// Steps without a finite `metric` are skipped. Curves longer than
// max(2, max_points / trials-with-points) are thinned to that many points,
// evenly spaced by index, always keeping the first and the last step, so a
// few thousand points describe 10,000 trials. Answers
//   {"metric": m, "points": n, "downsampled": bool,
//    "trials": [{"trial_id": id, "steps": [...], "values": [...]}, ...]}
// REQUIRES: max_points >= 1.
nlohmann::json LearningCurves(const std::vector<store::MeasurementRecord>& measurements,
                              const std::string& metric, int64_t max_points);

// System-parameter tuning per device class: for each workload (as
// Engine::Workload names them) and each device class that reported it, the
// system settings tried with their mean samples/s and number of
// observations, and the setting later trials on that class start from: the
// fastest one with at least `min_observations` observations, the rule the
// engine applies (SpeedModel::BestSetting), or null while none qualifies.
//   {"workloads": [{"workload": w, "device_classes": [{"device_class": c,
//      "chosen": {...} | null, "settings": [{"setting": {...},
//      "samples_per_sec": mean, "observations": n}, ...]}]}]}
// Settings are sorted by their canonical JSON text.
nlohmann::json SystemTuning(const std::vector<store::SpeedObservationRecord>& observations,
                            const std::vector<std::string>& workloads, int min_observations);

}  // namespace hpo::server::dashboard
