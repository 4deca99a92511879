// hpctl: the HeteroTune command line, over the REST API only (docs/hpctl.md).
// This file declares the commands, in the order --help and the completion
// scripts list them, and runs the one that was parsed; each command lives
// in the file of its group, and cli/common.h has the exit codes and the one
// place an HTTP answer becomes hpctl's.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <vector>

#include "cli/common.h"
#include "cli/completion.h"
#include "cli/experiments.h"
#include "cli/run.h"
#include "cli/submit.h"
#include "cli/trials.h"
#include "cli/workers.h"

namespace {

using namespace hpo::cli;

// The parsed command's exit code; a Failure is printed as one line.
int RunParsed(const std::vector<Command>& commands, const GlobalOptions& globals) {
  try {
    for (const Command& c : commands) {
      if (!c.app->parsed()) continue;
      return c.local ? c.local() : c.remote(ServerOptions(globals));
    }
  } catch (const Failure& f) {
    std::fprintf(stderr, "hpctl: %s\n", f.message.c_str());
    return f.code;
  }
  return kUsage;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hpctl: submit and watch HeteroTune experiments", "hpctl"};
  app.set_version_flag("--version", "hpctl 0.1.0");
  app.require_subcommand(1);
  // Global options may also follow the command (hpctl export 3 -o csv --quiet).
  app.fallthrough();
  CompletionHints hints;
  GlobalOptions globals;
  AddGlobalOptions(app, hints, globals);
  const std::vector<Command> commands = {
      AddSubmit(app, hints), AddList(app),          AddStatus(app, hints),
      AddWatch(app),         AddTrials(app, hints), AddExport(app, hints),
      AddBest(app, hints),   AddCancel(app),        AddWorkers(app, hints),
      AddLogs(app),          AddRun(app, hints),    AddCompletion(app, hints)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kUsage;
  }
  InstallSignalHandlers();
  return RunParsed(commands, globals);
}
