// hpctl: the HeteroTune command line. Commands arrive with issue #7.
#include <CLI/CLI.hpp>
#include <cstdio>

int main(int argc, char** argv) {
  CLI::App app{"hpctl: submit and watch HeteroTune experiments"};
  app.set_version_flag("--version", "hpctl 0.1.0");
  app.require_subcommand(0);
  CLI11_PARSE(app, argc, argv);
  std::fprintf(stderr, "hpctl: no commands are available in this build yet (issue #7)\n");
  return 2;
}
