// hpctl workers: the fleet as the server sees it.
#pragma once

#include "cli/common.h"

namespace hpo::cli {

Command AddWorkers(CLI::App& app, CompletionHints& hints);

}  // namespace hpo::cli
