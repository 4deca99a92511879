// Metric lines: how a user's program, run by the command executor, tells
// hpo-worker one step's metrics. Two forms are recognised on a line of its
// standard output; everything else is ordinary output.
//
//   hpo: step=3 accuracy=0.91 loss=0.2 samples_per_sec=1200 batch_size=128
//   {"step": 3, "accuracy": 0.91, "samples_per_sec": 1200, "batch_size": 128}
//
// Both read the same way:
//   - `step` (optional in the hpo: form, required in the JSON form, which is
//     recognised by it): a non-negative integer.
//   - `samples_per_sec` (optional): a finite number >= 0, the measured speed.
//   - system parameter keys go to MetricLine::system, not to the metrics:
//     batch_size, threads and inter_op_threads (positive integers), device
//     (a string), and any key the caller names (the trial's own system
//     parameters; a number or a string).
//   - every other key is a metric and must have a finite number as its value.
//     In the JSON form fields that are not numbers are skipped, because
//     structured loggers add timestamps and messages; in the hpo: form they
//     are an error.
// Keys are 1 to kMaxMetricKeyLength characters of [A-Za-z0-9_.:/-], each at
// most once per line; a line holds at most kMaxMetricsPerLine metrics and at
// least one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "common/status.h"

namespace hpo::worker {

inline constexpr size_t kMaxMetricsPerLine = 64;
inline constexpr size_t kMaxMetricKeyLength = 128;

struct MetricLine {
  std::optional<int64_t> step;
  std::map<std::string, double> metrics;  // never empty
  std::optional<double> samples_per_sec;
  nlohmann::json system = nlohmann::json::object();  // e.g. {"batch_size": 128}
};

// True for the system parameters every trial may echo: batch_size, threads,
// inter_op_threads, device.
bool IsBuiltinSystemKey(std::string_view key);

// Parses one line of a program's output (without its newline; a trailing
// '\r' is ignored).
//   nullopt: ordinary output (neither form, or a JSON object without "step").
//   a MetricLine: a well-formed metric line.
//   InvalidArgument: a line meant as a metric line but malformed; the message
//     says what is wrong ("accuracy: 'high' is not a number"). The command
//     executor notes it in the trial's log and goes on.
// `system_keys` names further keys that are system parameters (the trial's
// system setting), in addition to the built-in ones.
Result<std::optional<MetricLine>> ParseMetricLine(
    std::string_view line, const std::set<std::string, std::less<>>& system_keys = {});

}  // namespace hpo::worker
