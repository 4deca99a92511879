// What watch and status show of an experiment: its state, its trials
// against the budget, its usage, the best trial so far, elapsed time and
// ETA.
#pragma once

#include <cstdint>
#include <string>

#include "cli/common.h"

namespace hpo::cli {

// hpctl watch: the view until the experiment ends. Redrawn in place on a
// terminal, a new block per change otherwise, nothing under --quiet. The
// exit code says how it ended: kOk with a result, kExperimentFailed failed
// or cancelled, kNoResult completed with no trial that completed or
// reported the objective, kInterrupted on Ctrl-C.
int Watch(const HttpClientOptions& o, int64_t id);

// hpctl status: the view once, and why the experiment ended; or, with
// `format` "json", the server's experiment.
void ShowStatus(const HttpClientOptions& o, int64_t id, const std::string& format);

// A best trial from GET .../best in one line: "trial 3 (mlp): accuracy 0.91",
// or, when no trial completed, "best so far: trial 3 (mlp; paused, best at
// step 3, not trained to its full budget): accuracy 0.916".
std::string BestLine(const json& b, const std::string& metric);

}  // namespace hpo::cli
