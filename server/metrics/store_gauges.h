// Gauges read from the store when /metrics is scraped: experiments and
// trials by state, registered workers and devices, measured speed.
//
// They are the database's values, not this process's, so every hpo-server
// replica on one PostgreSQL reports the same totals, and a restarted server
// reports what was there before it. Counting trials reads every experiment,
// so one read serves every family and every scrape for `max_age`: several
// Prometheus servers, or a replica behind a load balancer scraped often,
// cost the database one read per second at most.
//
// Thread-safe: the callbacks may run on several threads at once; one of
// them reads the store while the others wait for its result.
#pragma once

#include <chrono>
#include <functional>

#include "server/metrics/metrics.h"
#include "server/store/store.h"

namespace hpo::server {

struct StoreGaugeOptions {
  // How long one read of the store answers scrapes. 0: every scrape reads.
  std::chrono::milliseconds max_age{1000};
  // A worker counts as live when seen within this (the lease timeout, as
  // placement reads it) and not gone.
  std::chrono::milliseconds live_for{60'000};
  // hpo_device_samples_per_second counts the speeds observed within this,
  // so a (device class, workload) pair no longer run leaves the metric.
  std::chrono::milliseconds speed_window{3'600'000};
  // Milliseconds since the epoch, the store's clock; the system clock when
  // unset.
  std::function<int64_t()> now_ms;
};

// Registers hpo_experiments{state}, hpo_trials{state}, hpo_workers (the
// live ones), hpo_workers_gone (gone, not pruned yet), hpo_devices{kind,
// device_class} (of live workers) and
// hpo_device_samples_per_second{device_class,workload}. A family whose read
// failed is left out of that scrape (Prometheus marks it stale) rather than
// reported as zero.
// REQUIRES: `store` outlives `registry`'s last Render.
void RegisterStoreGauges(metrics::Registry& registry, store::Store& store,
                         StoreGaugeOptions options = {});

}  // namespace hpo::server
