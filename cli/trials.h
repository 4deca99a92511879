// The commands on trials: trials (an experiment's, as a table, CSV or
// JSON), export (every trial with its params and metrics, as CSV or JSON)
// and logs (one trial's measurements and reason).
#pragma once

#include "cli/common.h"

namespace hpo::cli {

Command AddTrials(CLI::App& app, CompletionHints& hints);
Command AddExport(CLI::App& app, CompletionHints& hints);
Command AddLogs(CLI::App& app);

}  // namespace hpo::cli
