// Metrics for the server's /metrics endpoint: a thin facade over
// prometheus-cpp (core library only). prometheus-cpp's Registry, families,
// counters, gauges and histograms hold the values; its TextSerializer writes
// the text exposition format 0.0.4. The page is served by our own Beast
// server (server/http/api.cc); no prometheus::Exposer, no second HTTP port.
//
// A Registry owns metric families. Each family has one name, one help text
// and one type; within it, each distinct label set is one metric object:
//
//   metrics::Registry registry;
//   metrics::Counter& asks = registry.counter(
//       "hpo_ask_requests_total", "Ask requests received.", {{"experiment", "mnist"}});
//   asks.Increment();
//   std::string body = registry.Render();  // serve as text/plain; version=0.0.4
//
// What the facade adds to prometheus-cpp, and why callers use it rather than
// prometheus-cpp directly: one call that finds or creates a metric by (name,
// help, labels); gauges whose values are read at scrape time (a
// prometheus::Collectable next to the registry); programming errors that
// abort with a message naming the metric instead of exceptions; a page
// sorted by family name and label set, so it diffs and tests well; and the
// fixes listed in Registry::Render and Histogram::Observe for what
// prometheus-cpp 1.0.1 gets wrong.
//
// Thread safety: every method of Registry, Counter, Gauge and Histogram may be
// called from any number of threads at once. Counter and Gauge updates take
// no lock (prometheus-cpp keeps them in a std::atomic<double>). A Histogram
// update takes that histogram's own mutex inside prometheus-cpp, held for a
// bucket and a sum increment, so that a scrape sees buckets, _sum and _count
// of one moment; histograms of different label sets never contend. Look a
// metric up once, keep the reference, and update it on the hot path; the
// Registry lookups take a lock.
//
// Programming errors abort the process with a message on stderr, in every
// build type, because a registry that accepted them would render a /metrics
// page that Prometheus rejects as a whole. They happen at registration time
// (for a gauge callback's label names: at the first Render), so a test that
// registers the server's metrics and renders once catches them:
//  * a metric name not matching [a-zA-Z_:][a-zA-Z0-9_:]* (or starting with
//    "__", which prometheus-cpp refuses), or a label name not matching
//    [a-zA-Z_][a-zA-Z0-9_]* or starting with "__" (reserved), or the label
//    name "le" on a histogram (the serializer adds it), or one label name
//    twice;
//  * a name registered again with another type, another help text or (for a
//    histogram) other buckets;
//  * histogram buckets that are not finite and strictly increasing.
// Counter names should end in "_total" (promtool's lint insists); only debug
// builds assert it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace prometheus {
class Collectable;
class Counter;
class Gauge;
class Histogram;
class Registry;
}  // namespace prometheus

namespace hpo::metrics {

// Label (name, value) pairs. Order does not matter: {a,b} and {b,a} name the
// same metric. Values are arbitrary UTF-8 and are escaped by Render.
using Labels = std::vector<std::pair<std::string, std::string>>;

// A value that only goes up (requests served, trials finished).
class Counter {
 public:
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  // Adds `v`. Negative and NaN increments are ignored, so the counter stays
  // monotonic (Prometheus would read a decrease as a process restart).
  void Increment(double v = 1.0);
  double Value() const;

 private:
  friend class Registry;
  explicit Counter(prometheus::Counter& impl) : impl_(impl) {}

  prometheus::Counter& impl_;  // owned by the registry's prometheus::Family
};

// A value that goes up and down (leases held, queue length).
class Gauge {
 public:
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double v);
  void Increment(double v = 1.0);
  void Decrement(double v = 1.0) { Increment(-v); }
  double Value() const;

 private:
  friend class Registry;
  explicit Gauge(prometheus::Gauge& impl) : impl_(impl) {}

  prometheus::Gauge& impl_;  // owned by the registry's prometheus::Family
};

// Counts observations (latencies, sizes) into buckets with fixed upper bounds
// plus an implied +Inf bucket, and keeps their sum.
class Histogram {
 public:
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // NaN lands in the +Inf bucket and makes the sum NaN (as the Go client
  // does); -Inf lands in the first bucket, +Inf in the last.
  void Observe(double v);

  // The bucket upper bounds, without the implied +Inf.
  const std::vector<double>& buckets() const { return bounds_; }
  // Observations so far, and their sum. Each is read under the histogram's
  // lock, but the two calls are separate: read while other threads observe,
  // they may disagree by the observations in between. Render's _count always
  // equals its +Inf bucket.
  uint64_t Count() const;
  double Sum() const;

 private:
  friend class Registry;
  Histogram(prometheus::Histogram& impl, const std::vector<double>& bounds)
      : impl_(impl), bounds_(bounds) {}

  prometheus::Histogram& impl_;        // owned by the registry's prometheus::Family
  const std::vector<double>& bounds_;  // the family's; never changes
};

// `count` bucket bounds start, start*factor, start*factor^2, ...
// REQUIRES: start > 0, factor > 1, count >= 1 (aborts otherwise).
std::vector<double> ExponentialBuckets(double start, double factor, int count);

// Observes the seconds between its construction and its destruction into a
// histogram (a steady clock, so wall-clock jumps do not distort it):
//
//   { metrics::ScopedTimer timer(ask_latency_seconds); HandleAsk(...); }
class ScopedTimer {
 public:
  // REQUIRES: `histogram` outlives the timer.
  explicit ScopedTimer(Histogram& histogram)
      : histogram_(histogram), start_(std::chrono::steady_clock::now()) {}
  ~ScopedTimer();
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  Histogram& histogram_;
  const std::chrono::steady_clock::time_point start_;
};

// One sample per label set, produced at scrape time.
using GaugeSamples = std::vector<std::pair<Labels, double>>;

// Owns the metric families. References it returns stay valid for its
// lifetime; nothing is ever unregistered.
class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The metric named `name` with `labels`, created at zero on first use; the
  // same (name, labels) returns the same object. See the file comment for
  // what aborts.
  Counter& counter(std::string_view name, std::string_view help, const Labels& labels = {});
  Gauge& gauge(std::string_view name, std::string_view help, const Labels& labels = {});
  // `buckets`: finite, strictly increasing upper bounds; +Inf is implied.
  // Every label set of one name shares the buckets of its first registration.
  Histogram& histogram(std::string_view name, std::string_view help,
                       const std::vector<double>& buckets, const Labels& labels = {});

  // A gauge family whose samples `callback` returns when Render runs, for
  // values that live elsewhere (trials by state, workers by device, read
  // from the store). It is a prometheus::Collectable of its own, collected
  // after the registry. The callback runs without any lock of this registry
  // or of prometheus-cpp held, and may run on several threads at once if
  // scrapes overlap; it must return distinct label sets and stay callable
  // for the registry's lifetime. Registering a name that already exists (of
  // any type) aborts.
  void gauge_callback(std::string_view name, std::string_view help,
                      std::function<GaugeSamples()> callback);

  // The text exposition format 0.0.4, as prometheus-cpp's TextSerializer
  // writes it: families sorted by name, each with # HELP and # TYPE lines
  // and its samples sorted by labels. A family with no samples (a callback
  // that returned none) is left out, as the Go client does.
  std::string Render() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram, kGaugeCallback };
  struct Family;

  // Finds or creates the family, aborting on a type, help or bucket clash.
  // `buckets` is used by histograms only.
  Family& FamilyFor(std::string_view name, std::string_view help, Type type,
                    const std::vector<double>& buckets = {}) HPO_REQUIRES(mu_);

  // Holds the counters, gauges and histograms. Its own locks are taken
  // inside mu_ (registration) or without it (Render), never the other way.
  const std::shared_ptr<prometheus::Registry> registry_;
  mutable Mutex mu_;
  std::map<std::string, std::unique_ptr<Family>, std::less<>> families_ HPO_GUARDED_BY(mu_);
  // What Render collects: registry_ first, then one per gauge callback.
  std::vector<std::shared_ptr<const prometheus::Collectable>> collectables_ HPO_GUARDED_BY(mu_);
};

}  // namespace hpo::metrics
