// What a trial runs with, the same however it was handed out (a worker's
// lease over gRPC, an ask/tell client's suggestion over REST): its seed and
// its command line. Pure functions of the spec and the trial.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/spec/spec.h"
#include "server/store/store.h"

namespace hpo::server {

// The seed the trial's program should use: drawn from the spec's seed and
// the trial's number alone (search::Rng::Fork), so nearby numbers get
// unrelated seeds and a retried or resumed trial (a new attempt, the same
// number) repeats the same run. Non-negative: trainers often take a seed as
// a signed or a 32/63-bit value.
int64_t TrialSeed(const ExperimentSpec& spec, int64_t trial_number);

// A command executor's argv for the trial: each {name} in the spec's argv
// replaced by the trial's id ({trial_id}), the spec's steps per trial
// ({steps}), or the trial's parameter or system parameter of that name
// (`params`, then `system`); a string as it is, any other value as JSON
// prints it (3, 0.01, true). Any other {name} ({step}, which the worker
// fills in each step, or a parameter this trial does not have) stays as
// written. One pass, so a value that itself holds braces is never expanded.
std::vector<std::string> CommandArgv(const ExperimentSpec& spec, store::Id trial_id,
                                     const nlohmann::json& params, const nlohmann::json& system);

}  // namespace hpo::server
