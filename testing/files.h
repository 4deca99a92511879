// Reading a whole file, as tests, benches and fuzzers check logs and outputs.
#pragma once

#include <filesystem>
#include <string>

namespace hpo::testing {

// The whole content of `path`; empty when it cannot be read (a log not yet
// written reads as empty, which is what a check polling it wants).
std::string ReadFile(const std::filesystem::path& path);

}  // namespace hpo::testing
