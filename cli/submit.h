// hpctl submit (and submit --dry-run): a spec file to the server.
#pragma once

#include <cstdint>
#include <string>

#include "cli/common.h"

namespace hpo::cli {

Command AddSubmit(CLI::App& app, CompletionHints& hints);

// Creates the experiment of the spec in `file` (YAML or JSON) and returns
// its id. Prints "submitted experiment ID (NAME)", or, under --quiet, the id
// alone, so that ID=$(hpctl -q submit FILE) works.
int64_t Submit(const HttpClientOptions& o, const std::string& file);

}  // namespace hpo::cli
