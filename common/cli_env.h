// Command-line options whose value may also come from the environment:
// variables that were renamed (RenamedVariable), and settings with two
// forms, a value (--token, --instance) or a file that holds it
// (--token-file, --id-file), each with an environment variable. For the
// mains that parse with CLI11; header-only.
//
// CLI11 counts a value taken from an option's envname as given on the
// command line, so `excludes` between the two forms refused HPO_TOKEN set
// beside --token-file (a container's environment beside a pod's argument).
// Instead the options take no envname, keep `excludes` (both forms on the
// command line are still an error), and this fills them from the
// environment afterwards:
//  * either form on the command line wins, and both variables are ignored;
//  * otherwise one variable gives its form; both set (and not empty) is an
//    InvalidArgument naming the two.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/status.h"

namespace hpo {

inline Status FormFromEnvironment(const CLI::Option& value_option, std::string& value,
                                  const char* value_variable, const CLI::Option& file_option,
                                  std::string& file, const char* file_variable) {
  if (value_option.count() > 0 || file_option.count() > 0) return Status::OK();
  auto read = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  const std::string from_value = read(value_variable), from_file = read(file_variable);
  if (!from_value.empty() && !from_file.empty()) {
    return Status::InvalidArgument(std::string(value_variable) + " and " + file_variable +
                                   " are both set in the environment: set one of them (" +
                                   value_option.get_name() + " and " + file_option.get_name() +
                                   " on the command line win over both)");
  }
  if (!from_value.empty()) value = from_value;
  if (!from_file.empty()) file = from_file;
  return Status::OK();
}

// The value of the environment variable `variable`; while it is not set
// (or empty), that of `old_variable`, the name it had before, with a
// one-line warning on stderr that names the new one and why it changed
// (`why`). Empty when neither is set. `program` starts the warning
// ("hpctl: warning: ...").
inline std::string RenamedVariable(const char* program, const char* variable,
                                   const char* old_variable, const char* why) {
  const char* v = std::getenv(variable);
  if (v != nullptr && *v != '\0') return v;
  const char* old = std::getenv(old_variable);
  if (old == nullptr || *old == '\0') return "";
  std::fprintf(stderr, "%s: warning: %s is deprecated (%s): set %s instead\n", program,
               old_variable, why, variable);
  return old;
}

}  // namespace hpo
