#include "server/metrics/store_gauges.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace hpo::server {
namespace {

// What one read of the store found; a family is nullopt when its read failed.
struct Snapshot {
  std::optional<metrics::GaugeSamples> experiments, trials, workers, workers_gone, devices, speed;
};

Snapshot ReadStore(store::Store& store, const StoreGaugeOptions& options) {
  using namespace std::chrono;
  const int64_t now =
      options.now_ms ? options.now_ms()
                     : duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  Snapshot s;
  if (auto list = store.ListExperiments(0, 1'000'000); list.ok()) {
    std::map<std::string, double> by_state = {
        {"running", 0}, {"completed", 0}, {"cancelled", 0}, {"failed", 0}};
    store::TrialCounts sum;
    bool counted = true;
    for (const auto& e : *list) {
      by_state[std::string(store::ToString(e.state))] += 1;
      auto n = store.CountTrials(e.id);
      if (!n.ok()) {
        counted = false;
        continue;
      }
      sum.pending += n->pending;
      sum.leased += n->leased;
      sum.running += n->running;
      sum.paused += n->paused;
      sum.completed += n->completed;
      sum.pruned += n->pruned;
      sum.failed += n->failed;
      sum.cancelled += n->cancelled;
    }
    s.experiments.emplace();
    for (const auto& [state, v] : by_state) s.experiments->push_back({{{"state", state}}, v});
    if (counted) {
      s.trials = metrics::GaugeSamples{{{{"state", "pending"}}, double(sum.pending)},
                                       {{{"state", "leased"}}, double(sum.leased)},
                                       {{{"state", "running"}}, double(sum.running)},
                                       {{{"state", "paused"}}, double(sum.paused)},
                                       {{{"state", "completed"}}, double(sum.completed)},
                                       {{{"state", "pruned"}}, double(sum.pruned)},
                                       {{{"state", "failed"}}, double(sum.failed)},
                                       {{{"state", "cancelled"}}, double(sum.cancelled)}};
    }
  }
  if (auto workers = store.ListWorkers(); workers.ok()) {
    // Live as placement counts them (server/engine/fleet_view.cc): a fleet
    // of restarted pods must not read as twice its size.
    double live = 0, gone = 0;
    std::map<std::pair<std::string, std::string>, double> n;
    for (const auto& w : *workers) {
      if (w.gone_ms) ++gone;
      if (w.gone_ms || w.last_seen_ms < now - options.live_for.count()) continue;
      ++live;
      for (const auto& d : w.devices)
        n[{std::string(store::ToString(d.kind)), d.device_class}] += 1;
    }
    s.workers = metrics::GaugeSamples{{{}, live}};
    s.workers_gone = metrics::GaugeSamples{{{}, gone}};
    s.devices.emplace();
    for (const auto& [k, v] : n)
      s.devices->push_back({{{"kind", k.first}, {"device_class", k.second}}, v});
  }
  if (auto obs = store.ListSpeedObservations("", 5000); obs.ok()) {
    std::map<std::pair<std::string, std::string>, std::vector<double>> by;
    // Only what was measured lately: a workload no longer run leaves the
    // metric, so its labels follow what runs, not everything ever run.
    for (const auto& o : *obs) {
      if (o.observed_ms >= now - options.speed_window.count()) {
        by[{o.device_class, o.workload}].push_back(o.samples_per_sec);
      }
    }
    s.speed.emplace();
    for (auto& [key, v] : by) {
      const size_t n = std::min<size_t>(20, v.size());
      double sum = 0;
      for (size_t i = v.size() - n; i < v.size(); ++i) sum += v[i];
      s.speed->push_back({{{"device_class", key.first}, {"workload", key.second}}, sum / n});
    }
  }
  return s;
}

// One store read shared by every family and by scrapes within max_age.
class CachedSnapshot {
 public:
  CachedSnapshot(store::Store& store, StoreGaugeOptions options)
      : store_(store), options_(std::move(options)) {}

  std::shared_ptr<const Snapshot> Get() {
    MutexLock lock(mu_);  // held across the read: concurrent scrapes wait for one read
    const auto now = std::chrono::steady_clock::now();
    if (!snapshot_ || now - read_at_ >= options_.max_age) {
      snapshot_ = std::make_shared<const Snapshot>(ReadStore(store_, options_));
      read_at_ = now;
    }
    return snapshot_;
  }

 private:
  store::Store& store_;
  const StoreGaugeOptions options_;
  Mutex mu_;
  std::shared_ptr<const Snapshot> snapshot_ HPO_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point read_at_ HPO_GUARDED_BY(mu_);
};

}  // namespace

void RegisterStoreGauges(metrics::Registry& registry, store::Store& store,
                         StoreGaugeOptions options) {
  auto cache = std::make_shared<CachedSnapshot>(store, std::move(options));
  auto family = [cache](std::optional<metrics::GaugeSamples> Snapshot::*field) {
    return [cache, field] {
      const auto snapshot = cache->Get();
      return (*snapshot).*field ? *((*snapshot).*field) : metrics::GaugeSamples{};
    };
  };
  registry.gauge_callback("hpo_experiments", "Experiments by state",
                          family(&Snapshot::experiments));
  registry.gauge_callback("hpo_trials", "Trials by state, over all experiments",
                          family(&Snapshot::trials));
  registry.gauge_callback("hpo_devices", "Devices of live workers by kind and class",
                          family(&Snapshot::devices));
  registry.gauge_callback(
      "hpo_device_samples_per_second",
      "Mean measured training speed over the last 20 reports, by device class and workload",
      family(&Snapshot::speed));
  registry.gauge_callback("hpo_workers", "Live workers (seen within the lease timeout)",
                          family(&Snapshot::workers));
  registry.gauge_callback(
      "hpo_workers_gone",
      "Workers gone (left, or unseen for several lease timeouts), not pruned yet",
      family(&Snapshot::workers_gone));
}

}  // namespace hpo::server
