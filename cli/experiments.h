// The commands on experiments by id: list, status, watch, best and cancel.
#pragma once

#include "cli/common.h"

namespace hpo::cli {

Command AddList(CLI::App& app);
Command AddStatus(CLI::App& app, CompletionHints& hints);
Command AddWatch(CLI::App& app);
Command AddBest(CLI::App& app, CompletionHints& hints);
Command AddCancel(CLI::App& app);

// The Pareto front of experiment `id` (GET .../pareto): a table of its
// trials and their objective values, or with format "json" the answer.
void PrintFront(const HttpClientOptions& o, int64_t id, const std::string& format);
// Whether experiment `e` (GET .../experiments/{id}) has several objectives.
bool HasSeveralObjectives(const json& e);

}  // namespace hpo::cli
