#include "worker/metric_line.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>
#include <utility>

namespace hpo::worker {
namespace {

using nlohmann::json;

constexpr std::string_view kPrefix = "hpo:";
// Values quoted in error messages are cut to this many characters, so one bad
// line cannot fill the trial's log tail.
constexpr size_t kQuoteLimit = 40;

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

std::string Quote(std::string_view s) {
  if (s.size() <= kQuoteLimit) return "'" + std::string(s) + "'";
  return "'" + std::string(s.substr(0, kQuoteLimit)) + "...'";
}

bool IsKeyChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == ':' || c == '/' || c == '-';
}

Status CheckKey(std::string_view key) {
  if (key.empty()) return Status::InvalidArgument("a key is empty");
  if (key.size() > kMaxMetricKeyLength) {
    return Status::InvalidArgument("key " + Quote(key) + " is longer than " +
                                   std::to_string(kMaxMetricKeyLength) + " characters");
  }
  for (char c : key) {
    if (!IsKeyChar(c)) {
      return Status::InvalidArgument("key " + Quote(key) +
                                     ": only letters, digits and _.:/- may appear in a key");
    }
  }
  return Status::OK();
}

std::optional<double> ParseFiniteDouble(std::string_view s) {
  // from_chars refuses a leading '+', which some printf formats emit.
  if (s.size() > 1 && s.front() == '+') s.remove_prefix(1);
  double v = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  if (ec != std::errc() || p != end || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<int64_t> ParseInt(std::string_view s) {
  if (s.size() > 1 && s.front() == '+') s.remove_prefix(1);
  int64_t v = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  if (ec != std::errc() || p != end) return std::nullopt;
  return v;
}

// An integer held by a JSON number, also one written as 3.0.
std::optional<int64_t> JsonInt(const json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    // 2^53: beyond it a double no longer holds every integer.
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) <= 9007199254740992.0) {
      return static_cast<int64_t>(d);
    }
  }
  return std::nullopt;
}

enum class KeyKind { kStep, kSpeed, kCountSystem, kDevice, kOtherSystem, kMetric };

KeyKind Classify(std::string_view key, const std::set<std::string, std::less<>>& system_keys) {
  if (key == "step") return KeyKind::kStep;
  if (key == "samples_per_sec") return KeyKind::kSpeed;
  if (key == "device") return KeyKind::kDevice;
  if (IsBuiltinSystemKey(key)) return KeyKind::kCountSystem;
  if (system_keys.count(key)) return KeyKind::kOtherSystem;
  return KeyKind::kMetric;
}

Status TooManyMetrics() {
  return Status::InvalidArgument("more than " + std::to_string(kMaxMetricsPerLine) +
                                 " metrics on one line");
}

Result<std::optional<MetricLine>> ParsePrefixed(
    std::string_view body, const std::set<std::string, std::less<>>& system_keys) {
  MetricLine out;
  std::set<std::string, std::less<>> seen;
  while (true) {
    while (!body.empty() && IsSpace(body.front())) body.remove_prefix(1);
    if (body.empty()) break;
    size_t n = 0;
    while (n < body.size() && !IsSpace(body[n])) ++n;
    const std::string_view token = body.substr(0, n);
    body.remove_prefix(n);

    const size_t eq = token.find('=');
    if (eq == std::string_view::npos || eq + 1 == token.size()) {
      return Status::InvalidArgument("expected key=value, got " + Quote(token));
    }
    const std::string_view key = token.substr(0, eq);
    const std::string_view value = token.substr(eq + 1);
    HPO_RETURN_IF_ERROR(CheckKey(key));
    if (!seen.insert(std::string(key)).second) {
      return Status::InvalidArgument(std::string(key) + ": given twice");
    }
    const std::string k(key);
    switch (Classify(key, system_keys)) {
      case KeyKind::kStep: {
        auto step = ParseInt(value);
        if (!step || *step < 0) {
          return Status::InvalidArgument("step: " + Quote(value) +
                                         " is not a non-negative integer");
        }
        out.step = *step;
        break;
      }
      case KeyKind::kSpeed: {
        auto v = ParseFiniteDouble(value);
        if (!v || *v < 0) {
          return Status::InvalidArgument("samples_per_sec: " + Quote(value) +
                                         " is not a finite number >= 0");
        }
        out.samples_per_sec = *v;
        break;
      }
      case KeyKind::kCountSystem: {
        auto v = ParseInt(value);
        if (!v || *v < 1) {
          return Status::InvalidArgument(k + ": " + Quote(value) + " is not a positive integer");
        }
        out.system[k] = *v;
        break;
      }
      case KeyKind::kDevice:
        out.system[k] = std::string(value);
        break;
      case KeyKind::kOtherSystem:
        // A system parameter may be categorical, so words are values too.
        if (auto i = ParseInt(value)) {
          out.system[k] = *i;
        } else if (auto d = ParseFiniteDouble(value)) {
          out.system[k] = *d;
        } else {
          out.system[k] = std::string(value);
        }
        break;
      case KeyKind::kMetric: {
        auto v = ParseFiniteDouble(value);
        if (!v) return Status::InvalidArgument(k + ": " + Quote(value) + " is not a finite number");
        if (out.metrics.size() == kMaxMetricsPerLine) return TooManyMetrics();
        out.metrics.emplace(k, *v);
        break;
      }
    }
  }
  if (out.metrics.empty()) return Status::InvalidArgument("no metrics on an hpo: line");
  return std::optional<MetricLine>(std::move(out));
}

Result<std::optional<MetricLine>> ParseJson(std::string_view text,
                                            const std::set<std::string, std::less<>>& system_keys) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() && text.find("\"step\"") != std::string_view::npos) {
    // Most likely Python's json.dumps of a NaN or an infinity, which is not
    // JSON; saying so beats dropping the step in silence.
    return Status::InvalidArgument(
        "a line with \"step\" that is not valid JSON (NaN, Infinity and numbers beyond "
        "1e308 are not JSON)");
  }
  // A program may print JSON of its own; only an object with "step" is ours.
  if (!j.is_object() || !j.contains("step")) return std::optional<MetricLine>();
  MetricLine out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    const KeyKind kind = Classify(key, system_keys);
    if (kind == KeyKind::kMetric && !v.is_number()) continue;  // a logger's own field
    HPO_RETURN_IF_ERROR(CheckKey(key));
    switch (kind) {
      case KeyKind::kStep: {
        auto step = JsonInt(v);
        if (!step || *step < 0) {
          return Status::InvalidArgument("step: " + Quote(v.dump()) +
                                         " is not a non-negative integer");
        }
        out.step = *step;
        break;
      }
      case KeyKind::kSpeed: {
        if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0) {
          return Status::InvalidArgument("samples_per_sec: " + Quote(v.dump()) +
                                         " is not a finite number >= 0");
        }
        out.samples_per_sec = v.get<double>();
        break;
      }
      case KeyKind::kCountSystem: {
        auto n = JsonInt(v);
        if (!n || *n < 1) {
          return Status::InvalidArgument(key + ": " + Quote(v.dump()) +
                                         " is not a positive integer");
        }
        out.system[key] = *n;
        break;
      }
      case KeyKind::kDevice:
        if (!v.is_string()) {
          return Status::InvalidArgument("device: " + Quote(v.dump()) + " is not a string");
        }
        out.system[key] = v;
        break;
      case KeyKind::kOtherSystem:
        if (!v.is_primitive() || v.is_null()) {
          return Status::InvalidArgument(key + ": must be a number, a string or a boolean");
        }
        if (v.is_number_float() && !std::isfinite(v.get<double>())) {
          return Status::InvalidArgument(key + ": " + Quote(v.dump()) + " is not finite");
        }
        out.system[key] = v;
        break;
      case KeyKind::kMetric: {
        const double d = v.get<double>();
        if (!std::isfinite(d)) {  // not from the parser, but cheap to be sure
          return Status::InvalidArgument(key + ": " + Quote(v.dump()) + " is not finite");
        }
        if (out.metrics.size() == kMaxMetricsPerLine) return TooManyMetrics();
        out.metrics.emplace(key, d);
        break;
      }
    }
  }
  if (out.metrics.empty())
    return Status::InvalidArgument("no metrics on a JSON line with \"step\"");
  return std::optional<MetricLine>(std::move(out));
}

}  // namespace

bool IsBuiltinSystemKey(std::string_view key) {
  return key == "batch_size" || key == "threads" || key == "inter_op_threads" || key == "device";
}

Result<std::optional<MetricLine>> ParseMetricLine(
    std::string_view line, const std::set<std::string, std::less<>>& system_keys) {
  const std::string_view text = Trim(line);
  if (text.substr(0, kPrefix.size()) == kPrefix) {
    return ParsePrefixed(text.substr(kPrefix.size()), system_keys);
  }
  if (text.size() >= 2 && text.front() == '{' && text.back() == '}') {
    return ParseJson(text, system_keys);
  }
  return std::optional<MetricLine>();
}

}  // namespace hpo::worker
