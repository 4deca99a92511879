#include "server/metrics.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace hpo::metrics {
namespace {

[[noreturn]] void ProgrammingError(const std::string& what) {
  std::fprintf(stderr, "hpo::metrics: programming error: %s\n", what.c_str());
  std::abort();
}

// std::atomic<double>::fetch_add is C++20; a CAS loop is the C++17 way.
void AtomicAdd(std::atomic<double>& a, double v) {
  double old = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(old, old + v, std::memory_order_relaxed)) {
  }
}

bool IsMetricName(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
                    (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

bool IsLabelName(std::string_view s) {
  return IsMetricName(s) && s.find(':') == std::string_view::npos;
}

void CheckMetricName(std::string_view name) {
  if (!IsMetricName(name)) {
    ProgrammingError("invalid metric name '" + std::string(name) +
                     "' (must match [a-zA-Z_:][a-zA-Z0-9_:]*)");
  }
}

// Validates the names and sorts by name, so that label order does not matter
// for identity and Render's output is deterministic.
Labels Canonical(std::string_view metric, Labels labels, bool histogram) {
  for (const auto& [name, value] : labels) {
    if (!IsLabelName(name) || name.rfind("__", 0) == 0 || (histogram && name == "le")) {
      ProgrammingError("invalid label name '" + name + "' on metric '" + std::string(metric) +
                       "' (must match [a-zA-Z_][a-zA-Z0-9_]*, not start with __, and not be "
                       "'le' on a histogram)");
    }
  }
  std::sort(labels.begin(), labels.end());
  for (size_t i = 1; i < labels.size(); ++i) {
    if (labels[i].first == labels[i - 1].first) {
      ProgrammingError("label '" + labels[i].first + "' given twice on metric '" +
                       std::string(metric) + "'");
    }
  }
  return labels;
}

// Prometheus reads numbers with Go's ParseFloat and spells the specials
// NaN, +Inf and -Inf. Integers print without an exponent (1000000, not
// 1e+06); everything else in the shortest form that reads back exactly.
std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // Below 2^53 every integer is exact, so the integer form loses nothing.
  if (v == std::trunc(v) && std::fabs(v) < 9007199254740992.0) {
    return std::to_string(static_cast<int64_t>(v));
  }
  char buf[32];
  const auto result = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, result.ptr);
}

// HELP text escapes only backslash and newline (format 0.0.4).
std::string EscapeHelp(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// Label values also escape the double quote that delimits them.
void AppendLabelValue(std::string* out, std::string_view s) {
  for (const char c : s) {
    if (c == '\\') {
      *out += "\\\\";
    } else if (c == '"') {
      *out += "\\\"";
    } else if (c == '\n') {
      *out += "\\n";
    } else {
      *out += c;
    }
  }
}

// `name{k="v",...,le="<le>"} value\n`; braces only when there are labels.
void AppendSample(std::string* out, std::string_view name, const Labels& labels,
                  const std::string* le, double value) {
  *out += name;
  if (!labels.empty() || le != nullptr) {
    *out += '{';
    bool first = true;
    for (const auto& [k, v] : labels) {
      if (!first) *out += ',';
      first = false;
      *out += k;
      *out += "=\"";
      AppendLabelValue(out, v);
      *out += '"';
    }
    if (le != nullptr) {
      if (!first) *out += ',';
      *out += "le=\"";
      *out += *le;
      *out += '"';
    }
    *out += '}';
  }
  *out += ' ';
  *out += FormatValue(value);
  *out += '\n';
}

}  // namespace

void Counter::Increment(double v) {
  // `!(v > 0)` also rejects NaN, which would poison the counter for good.
  if (!(v > 0)) return;
  AtomicAdd(value_, v);
}

void Gauge::Increment(double v) { AtomicAdd(value_, v); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double v) {
  // Bucket i holds v <= bounds_[i]; NaN compares false with everything, so it
  // is sent to +Inf explicitly rather than wherever lower_bound lands.
  size_t i = bounds_.size();
  if (!std::isnan(v)) i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, v);
}

std::vector<uint64_t> Histogram::CumulativeCounts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    total += counts_[i].load(std::memory_order_relaxed);
    out[i] = total;
  }
  return out;
}

uint64_t Histogram::Count() const { return CumulativeCounts().back(); }

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  if (!(start > 0) || !(factor > 1) || count < 1 || !std::isfinite(start) ||
      !std::isfinite(factor)) {
    ProgrammingError("ExponentialBuckets needs start > 0, factor > 1 and count >= 1");
  }
  std::vector<double> out;
  out.reserve(count);
  double v = start;
  for (int i = 0; i < count; ++i) {
    // Rounding to 15 significant digits drops the multiplication noise, so
    // 0.001 * 10 is exposed as le="0.01", not le="0.010000000000000002".
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.15g", v);
    out.push_back(std::strtod(buf, nullptr));
    v *= factor;
  }
  return out;
}

ScopedTimer::~ScopedTimer() {
  histogram_.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
}

struct Registry::Family {
  // name, help, type and buckets never change after creation.
  std::string name;
  std::string help;
  Type type;
  std::vector<double> buckets;
  // Keyed by canonical labels; the one of these that matches `type` is used.
  std::map<Labels, std::unique_ptr<Counter>> counters;
  std::map<Labels, std::unique_ptr<Gauge>> gauges;
  std::map<Labels, std::unique_ptr<Histogram>> histograms;
  std::function<GaugeSamples()> callback;

  // As the # TYPE line spells it: a callback gauge is a gauge to Prometheus.
  static const char* TypeName(Type t) {
    switch (t) {
      case Type::kCounter:
        return "counter";
      case Type::kHistogram:
        return "histogram";
      case Type::kGauge:
      case Type::kGaugeCallback:
        break;
    }
    return "gauge";
  }
};

Registry::Registry() = default;
Registry::~Registry() = default;

Registry::Family& Registry::FamilyFor(std::string_view name, std::string_view help, Type type,
                                      const std::vector<double>& buckets) {
  auto it = families_.find(name);
  if (it == families_.end()) {
    CheckMetricName(name);
    if (type == Type::kHistogram) {
      for (size_t i = 0; i < buckets.size(); ++i) {
        if (!std::isfinite(buckets[i]) || (i > 0 && !(buckets[i] > buckets[i - 1]))) {
          ProgrammingError("buckets of histogram '" + std::string(name) +
                           "' must be finite and strictly increasing (+Inf is implied)");
        }
      }
    }
    auto family = std::make_unique<Family>();
    family->name = std::string(name);
    family->help = std::string(help);
    family->type = type;
    family->buckets = buckets;
    it = families_.emplace(family->name, std::move(family)).first;
    return *it->second;
  }
  Family& family = *it->second;
  if (family.type != type || type == Type::kGaugeCallback) {
    ProgrammingError("metric '" + std::string(name) + "' is already registered as a " +
                     (family.type == Type::kGaugeCallback ? "callback " : "") +
                     Family::TypeName(family.type) + "; now requested as a " +
                     (type == Type::kGaugeCallback ? "callback " : "") + Family::TypeName(type));
  }
  if (family.help != help) {
    ProgrammingError("metric '" + std::string(name) + "' registered with help '" + family.help +
                     "' and again with help '" + std::string(help) + "'");
  }
  if (type == Type::kHistogram && family.buckets != buckets) {
    ProgrammingError("histogram '" + std::string(name) + "' registered again with other buckets");
  }
  return family;
}

Counter& Registry::counter(std::string_view name, std::string_view help, const Labels& labels) {
  assert(name.size() >= 6 && name.substr(name.size() - 6) == "_total" &&
         "counter names should end in _total");
  Labels key = Canonical(name, labels, /*histogram=*/false);
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = FamilyFor(name, help, Type::kCounter).counters[std::move(key)];
  if (slot == nullptr) slot.reset(new Counter());
  return *slot;
}

Gauge& Registry::gauge(std::string_view name, std::string_view help, const Labels& labels) {
  Labels key = Canonical(name, labels, /*histogram=*/false);
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = FamilyFor(name, help, Type::kGauge).gauges[std::move(key)];
  if (slot == nullptr) slot.reset(new Gauge());
  return *slot;
}

Histogram& Registry::histogram(std::string_view name, std::string_view help,
                               const std::vector<double>& buckets, const Labels& labels) {
  Labels key = Canonical(name, labels, /*histogram=*/true);
  std::lock_guard<std::mutex> lock(mu_);
  Family& family = FamilyFor(name, help, Type::kHistogram, buckets);
  auto& slot = family.histograms[std::move(key)];
  if (slot == nullptr) slot.reset(new Histogram(family.buckets));
  return *slot;
}

void Registry::gauge_callback(std::string_view name, std::string_view help,
                              std::function<GaugeSamples()> callback) {
  std::lock_guard<std::mutex> lock(mu_);
  FamilyFor(name, help, Type::kGaugeCallback).callback = std::move(callback);
}

std::string Registry::Render() const {
  // Samples of registered metrics are rendered under the lock (a map walk and
  // atomic loads). Callbacks may read the store, which is slow, so they run
  // after the lock is released; that is safe because families are never
  // removed and their name, help and callback never change once registered.
  struct Part {
    const Family* family;
    std::string samples;
  };
  std::vector<Part> parts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    parts.reserve(families_.size());
    for (const auto& [name, family] : families_) {
      Part part{family.get(), {}};
      std::string& out = part.samples;
      switch (family->type) {
        case Type::kCounter:
          for (const auto& [labels, c] : family->counters) {
            AppendSample(&out, name, labels, nullptr, c->Value());
          }
          break;
        case Type::kGauge:
          for (const auto& [labels, g] : family->gauges) {
            AppendSample(&out, name, labels, nullptr, g->Value());
          }
          break;
        case Type::kHistogram: {
          std::vector<std::string> les;
          for (const double b : family->buckets) les.push_back(FormatValue(b));
          les.push_back("+Inf");
          const std::string bucket = name + "_bucket";
          for (const auto& [labels, h] : family->histograms) {
            // _count is the +Inf bucket of the same snapshot, so the two agree
            // even while other threads observe.
            const std::vector<uint64_t> cumulative = h->CumulativeCounts();
            for (size_t i = 0; i < cumulative.size(); ++i) {
              AppendSample(&out, bucket, labels, &les[i], static_cast<double>(cumulative[i]));
            }
            AppendSample(&out, name + "_sum", labels, nullptr, h->Sum());
            AppendSample(&out, name + "_count", labels, nullptr,
                         static_cast<double>(cumulative.back()));
          }
          break;
        }
        case Type::kGaugeCallback:
          break;  // evaluated below, without the lock
      }
      parts.push_back(std::move(part));
    }
  }

  std::string out;
  for (Part& part : parts) {
    const Family& family = *part.family;
    if (family.type == Type::kGaugeCallback && family.callback) {
      std::vector<std::pair<Labels, double>> samples;
      for (auto& [labels, value] : family.callback()) {
        samples.emplace_back(Canonical(family.name, std::move(labels), false), value);
      }
      std::sort(samples.begin(), samples.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      for (const auto& [labels, value] : samples) {
        AppendSample(&part.samples, family.name, labels, nullptr, value);
      }
    }
    if (part.samples.empty()) continue;
    out += "# HELP " + family.name + " " + EscapeHelp(family.help) + "\n";
    out += "# TYPE " + family.name + " " + Family::TypeName(family.type) + "\n";
    out += part.samples;
  }
  return out;
}

}  // namespace hpo::metrics
