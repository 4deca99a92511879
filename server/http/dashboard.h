// Read models for the web dashboard: the per-experiment views its pages draw
// that the list routes cannot give cheaply (one request instead of one per
// trial). Pure functions over store records - no I/O - so they are tested
// without a server; server/http/api.cc reads the store and calls them.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
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

// System-parameter co-tuning, as the engine applies it: for each workload
// (Engine::Workload names them) and each device class that reported it, the
// measured samples/s against the tunable parameters' values (`tunable`,
// Engine::TunableNames), one line per bucket of the searched batch size (a
// power-of-two range [lo, 2 lo); one bucket, "batch_size": null, when the
// batch size is not searched), and in each bucket the tunable values a
// trial with that batch size starts from (SpeedModel::BestTunables at the
// bucket's geometric middle, at least `min_observations` observations), or
// null while none qualifies.
//   {"workloads": [{"workload": w, "tunable": [names], "device_classes": [{"device_class": c,
//      "buckets": [{"batch_size": lo | null, "chosen": {...} | null,
//        "points": [{"tunables": {...}, "samples_per_sec": mean, "observations": n}, ...]}]}]}]}
// Buckets are sorted by batch size, points by the tunables' canonical JSON text.
nlohmann::json SystemTuning(const std::vector<store::SpeedObservationRecord>& observations,
                            const std::vector<std::string>& workloads,
                            const std::vector<std::string>& tunable, int min_observations);

}  // namespace hpo::server::dashboard
