// hpctl run: one experiment on this machine, with an embedded hpo-server
// (SQLite store and logs under --data-dir, on loopback with a fresh token)
// and local hpo-workers that share this machine's cores. It watches the
// experiment to its end, prints the best trial, then stops the workers and
// the server; Ctrl-C cancels the experiment first. The exit code is watch's.
#pragma once

#include "cli/common.h"

namespace hpo::cli {

Command AddRun(CLI::App& app, CompletionHints& hints);

}  // namespace hpo::cli
