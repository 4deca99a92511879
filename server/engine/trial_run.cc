#include "server/engine/trial_run.h"

#include <optional>

#include "search/random.h"

namespace hpo::server {

using nlohmann::json;

namespace {

// The value as a command-line argument: a string as it is (no JSON quotes),
// anything else as JSON prints it (3, 0.01, true).
std::string ArgText(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// Replaces each {name} that `lookup` knows; leaves the others as written.
// One pass, so a value that itself contains braces is never expanded again.
template <typename Lookup>
std::string FillPlaceholders(const std::string& arg, Lookup&& lookup) {
  std::string out;
  size_t pos = 0;
  while (pos < arg.size()) {
    const size_t open = arg.find('{', pos);
    const size_t close = open == std::string::npos ? open : arg.find('}', open + 1);
    if (close == std::string::npos) break;
    out.append(arg, pos, open - pos);
    std::optional<std::string> value = lookup(arg.substr(open + 1, close - open - 1));
    if (value) {
      out += *value;
    } else {
      out.append(arg, open, close - open + 1);
    }
    pos = close + 1;
  }
  if (pos < arg.size()) out.append(arg, pos, std::string::npos);
  return out;
}

}  // namespace

int64_t TrialSeed(const ExperimentSpec& spec, int64_t trial_number) {
  // Shifted to stay non-negative. No attempt in the draw, so a retried
  // trial repeats.
  return static_cast<int64_t>(
      search::Rng(spec.seed).Fork(static_cast<uint64_t>(trial_number)).Next() >> 1);
}

std::vector<std::string> CommandArgv(const ExperimentSpec& spec, store::Id trial_id,
                                     const json& params, const json& system) {
  auto lookup = [&](const std::string& name) -> std::optional<std::string> {
    if (name == "trial_id") return std::to_string(trial_id);
    if (name == "steps") return std::to_string(spec.steps_per_trial);
    if (auto it = params.find(name); it != params.end()) return ArgText(*it);
    if (auto it = system.find(name); it != system.end()) return ArgText(*it);
    return std::nullopt;  // {step}, or a parameter this trial does not have
  };
  std::vector<std::string> out;
  out.reserve(spec.argv.size());
  for (const auto& arg : spec.argv) out.push_back(FillPlaceholders(arg, lookup));
  return out;
}

}  // namespace hpo::server
