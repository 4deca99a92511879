// Shell completion for hpctl (`hpctl completion bash|zsh`). The scripts are
// written from the CLI11 App itself (its subcommands, their options and
// positionals, their descriptions), so a command or option added to hpctl
// is completed without anyone editing a list. What the App cannot say, the
// values an option takes, each command records where it declares the
// option (Choices, Path).
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cli/common.h"

namespace hpo::cli {

struct CompletionHints {
  std::map<const CLI::Option*, std::vector<std::string>> choices;
  std::set<const CLI::Option*> paths;
};

// `o` takes one of `values` (checked by CLI11 unless `check` is false: the
// server judges those, and the list is for completion only). Returns `o`.
CLI::Option* Choices(CompletionHints& h, CLI::Option* o, const std::vector<std::string>& values,
                     bool check = true);
// `o` takes a file name. Returns `o`.
CLI::Option* Path(CompletionHints& h, CLI::Option* o);

// hpctl completion bash|zsh: the script for `app`, whose options were
// declared with `hints`; both must outlive the returned command, which
// writes what they hold when it runs (after every command was added).
Command AddCompletion(CLI::App& app, CompletionHints& hints);

std::string BashCompletion(const CLI::App& app, const CompletionHints& h);
std::string ZshCompletion(const CLI::App& app, const CompletionHints& h);

}  // namespace hpo::cli
