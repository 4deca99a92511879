// The commands on experiments by id: list, status, watch, best and cancel.
#pragma once

#include "cli/common.h"

namespace hpo::cli {

Command AddList(CLI::App& app);
Command AddStatus(CLI::App& app, CompletionHints& hints);
Command AddWatch(CLI::App& app);
Command AddBest(CLI::App& app, CompletionHints& hints);
Command AddCancel(CLI::App& app);

}  // namespace hpo::cli
