#include "server/metrics/metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iterator>

namespace hpo::metrics {
namespace {

[[noreturn]] void ProgrammingError(const std::string& what) {
  std::fprintf(stderr, "hpo::metrics: programming error: %s\n", what.c_str());
  std::abort();
}

// prometheus-cpp reports what it refuses by throwing; the facade's contract
// is to abort with a message naming the metric. Our own checks run first, so
// this is the backstop for a rule prometheus-cpp has and we do not.
template <typename F>
auto OrAbort(std::string_view metric, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    ProgrammingError("prometheus-cpp refused metric '" + std::string(metric) + "': " + e.what());
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
  if (!IsMetricName(name) || name.rfind("__", 0) == 0) {
    ProgrammingError("invalid metric name '" + std::string(name) +
                     "' (must match [a-zA-Z_:][a-zA-Z0-9_:]* and not start with __)");
  }
}

// Validates the names and sorts by name, so that label order does not matter
// for identity. prometheus-cpp keeps labels in a std::map, which would
// silently merge a name given twice, and accepts "le" on a histogram, which
// would write two le labels on each bucket: both are refused here.
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

prometheus::Labels ToPrometheus(const Labels& labels) { return {labels.begin(), labels.end()}; }

// prometheus-cpp 1.0.1's TextSerializer writes HELP text verbatim, so a
// newline in it would end the line early and Prometheus would reject the
// whole page. Format 0.0.4 escapes backslash and newline there; the help is
// handed to prometheus-cpp escaped. (Label values it escapes itself.)
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

// A gauge family whose samples are read when it is collected (at scrape
// time), registered next to the prometheus::Registry.
class CallbackGauges final : public prometheus::Collectable {
 public:
  CallbackGauges(std::string name, const std::string& help, std::function<GaugeSamples()> callback)
      : name_(std::move(name)), help_(EscapeHelp(help)), callback_(std::move(callback)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    prometheus::MetricFamily family;
    family.name = name_;
    family.help = help_;
    family.type = prometheus::MetricType::Gauge;
    for (auto& [labels, value] : callback_()) {
      prometheus::ClientMetric metric;
      for (auto& [k, v] : Canonical(name_, std::move(labels), /*histogram=*/false)) {
        metric.label.push_back({std::move(k), std::move(v)});
      }
      metric.gauge.value = value;
      family.metric.push_back(std::move(metric));
    }
    return {std::move(family)};
  }

 private:
  const std::string name_;
  const std::string help_;
  const std::function<GaugeSamples()> callback_;
};

}  // namespace

void Counter::Increment(double v) {
  // `!(v > 0)` also rejects NaN, which prometheus-cpp would add (it drops
  // only negatives) and which would poison the counter for good.
  if (!(v > 0)) return;
  impl_.Increment(v);
}

double Counter::Value() const { return impl_.Value(); }

void Gauge::Set(double v) { impl_.Set(v); }
void Gauge::Increment(double v) { impl_.Increment(v); }
double Gauge::Value() const { return impl_.Value(); }

void Histogram::Observe(double v) {
  if (std::isnan(v)) {
    // prometheus-cpp finds the bucket with lower_bound, and NaN compares
    // false with every bound, so it would count NaN in the first bucket:
    // send it to +Inf explicitly (one allocation, on a path that should
    // not happen).
    std::vector<double> increments(bounds_.size() + 1, 0.0);
    increments.back() = 1;
    impl_.ObserveMultiple(increments, v);
    return;
  }
  impl_.Observe(v);
}

uint64_t Histogram::Count() const { return impl_.Collect().histogram.sample_count; }
double Histogram::Sum() const { return impl_.Collect().histogram.sample_sum; }

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
  // help (as given, unescaped), type and buckets never change after creation.
  std::string help;
  Type type;
  std::vector<double> buckets;
  // The prometheus-cpp family of `type` (none for a callback gauge), and our
  // handle on each of its metrics, keyed by canonical labels, so that a
  // lookup returns the same object every time.
  prometheus::Family<prometheus::Counter>* counter_family = nullptr;
  prometheus::Family<prometheus::Gauge>* gauge_family = nullptr;
  prometheus::Family<prometheus::Histogram>* histogram_family = nullptr;
  std::map<Labels, std::unique_ptr<Counter>> counters;
  std::map<Labels, std::unique_ptr<Gauge>> gauges;
  std::map<Labels, std::unique_ptr<Histogram>> histograms;

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

// Throw, not Merge: the facade never registers a name twice, so a second
// registration would be our bug, and it aborts (OrAbort) instead of being
// merged quietly.
Registry::Registry()
    : registry_(
          std::make_shared<prometheus::Registry>(prometheus::Registry::InsertBehavior::Throw)),
      collectables_{registry_} {}
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
    family->help = std::string(help);
    family->type = type;
    family->buckets = buckets;
    const std::string n(name);
    const std::string h = EscapeHelp(help);
    OrAbort(name, [&] {
      switch (type) {
        case Type::kCounter:
          family->counter_family = &prometheus::BuildCounter().Name(n).Help(h).Register(*registry_);
          break;
        case Type::kGauge:
          family->gauge_family = &prometheus::BuildGauge().Name(n).Help(h).Register(*registry_);
          break;
        case Type::kHistogram:
          family->histogram_family =
              &prometheus::BuildHistogram().Name(n).Help(h).Register(*registry_);
          break;
        case Type::kGaugeCallback:
          break;  // the caller adds the Collectable
      }
    });
    it = families_.emplace(n, std::move(family)).first;
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
  MutexLock lock(mu_);
  Family& family = FamilyFor(name, help, Type::kCounter);
  auto& slot = family.counters[key];
  if (slot == nullptr) {
    prometheus::Counter& impl = OrAbort(
        name, [&]() -> auto& { return family.counter_family->Add(ToPrometheus(key)); });
    slot.reset(new Counter(impl));
  }
  return *slot;
}

Gauge& Registry::gauge(std::string_view name, std::string_view help, const Labels& labels) {
  Labels key = Canonical(name, labels, /*histogram=*/false);
  MutexLock lock(mu_);
  Family& family = FamilyFor(name, help, Type::kGauge);
  auto& slot = family.gauges[key];
  if (slot == nullptr) {
    prometheus::Gauge& impl = OrAbort(
        name, [&]() -> auto& { return family.gauge_family->Add(ToPrometheus(key)); });
    slot.reset(new Gauge(impl));
  }
  return *slot;
}

Histogram& Registry::histogram(std::string_view name, std::string_view help,
                               const std::vector<double>& buckets, const Labels& labels) {
  Labels key = Canonical(name, labels, /*histogram=*/true);
  MutexLock lock(mu_);
  Family& family = FamilyFor(name, help, Type::kHistogram, buckets);
  auto& slot = family.histograms[key];
  if (slot == nullptr) {
    prometheus::Histogram& impl = OrAbort(
        name, [&]() -> auto& {
          return family.histogram_family->Add(
              ToPrometheus(key), prometheus::Histogram::BucketBoundaries(family.buckets));
        });
    slot.reset(new Histogram(impl, family.buckets));
  }
  return *slot;
}

void Registry::gauge_callback(std::string_view name, std::string_view help,
                              std::function<GaugeSamples()> callback) {
  MutexLock lock(mu_);
  FamilyFor(name, help, Type::kGaugeCallback);
  collectables_.push_back(
      std::make_shared<CallbackGauges>(std::string(name), std::string(help), std::move(callback)));
}

std::string Registry::Render() const {
  // Collected without mu_: a callback may read the store, which is slow, or
  // register a metric itself. That is safe because collectables are never
  // removed and each is immutable once registered; prometheus-cpp's registry
  // and families lock themselves.
  std::vector<std::shared_ptr<const prometheus::Collectable>> sources;
  {
    MutexLock lock(mu_);
    sources = collectables_;
  }
  std::vector<prometheus::MetricFamily> families;
  for (const auto& source : sources) {
    std::vector<prometheus::MetricFamily> collected = source->Collect();
    std::move(collected.begin(), collected.end(), std::back_inserter(families));
  }

  // prometheus-cpp collects families grouped by type and each family's
  // metrics in hash order; sorting makes the page the same for the same
  // values. Its labels come sorted by name (a std::map), like ours.
  families.erase(std::remove_if(families.begin(), families.end(),
                                [](const prometheus::MetricFamily& f) { return f.metric.empty(); }),
                 families.end());
  std::sort(families.begin(), families.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  for (auto& family : families) {
    std::sort(family.metric.begin(), family.metric.end(),
              [](const prometheus::ClientMetric& a, const prometheus::ClientMetric& b) {
                return a.label < b.label;
              });
  }
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace hpo::metrics
