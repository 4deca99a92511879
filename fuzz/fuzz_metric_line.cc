// libFuzzer target: the metric-line parser (worker/metric_line.h). Any line
// must give ordinary output, a metric line or an InvalidArgument, and a
// metric line must keep the header's promises.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "worker/metric_line.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "metric line broke its contract: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using hpo::worker::kMaxMetricKeyLength;
  using hpo::worker::kMaxMetricsPerLine;
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  // "lr" and "mode" stand for a trial's own system parameters.
  static const std::set<std::string, std::less<>> kSystemKeys = {"lr", "mode"};
  auto parsed = hpo::worker::ParseMetricLine(line, kSystemKeys);
  if (!parsed.ok()) {
    Check(parsed.status().code() == hpo::StatusCode::kInvalidArgument,
          "error is not InvalidArgument");
    return 0;
  }
  if (!*parsed) return 0;
  const hpo::worker::MetricLine& m = **parsed;
  Check(!m.metrics.empty(), "no metrics");
  Check(m.metrics.size() <= kMaxMetricsPerLine, "too many metrics");
  for (const auto& [key, value] : m.metrics) {
    Check(!key.empty() && key.size() <= kMaxMetricKeyLength, "key length");
    Check(std::isfinite(value), "metric not finite");
    Check(!hpo::worker::IsBuiltinSystemKey(key) && !kSystemKeys.count(key),
          "system key among metrics");
  }
  if (m.step) Check(*m.step >= 0, "negative step");
  if (m.samples_per_sec)
    Check(std::isfinite(*m.samples_per_sec) && *m.samples_per_sec >= 0, "bad speed");
  Check(m.system.is_object(), "system is not an object");
  return 0;
}
