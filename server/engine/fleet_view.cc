#include "server/engine/fleet_view.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "scheduler/cotuner.h"

namespace hpo::server {

using nlohmann::json;
using store::Id;

namespace {
// The newest observations the speed model starts from.
constexpr int64_t kObservationsRead = 5000;

}  // namespace

std::optional<int> DeviceThreadLimit(const store::DeviceInfo& d) {
  if (d.kind != store::DeviceKind::kCpu || !(d.cores > 0) || !std::isfinite(d.cores))
    return std::nullopt;
  return static_cast<int>(std::max(1.0, std::floor(std::min(d.cores, 1e6))));
}

FleetView::FleetView(store::Store& store, std::chrono::milliseconds max_age,
                     std::chrono::milliseconds live_for, std::function<int64_t()> now_ms,
                     std::function<Clock::time_point()> steady_now)
    : store_(store),
      max_age_(max_age),
      live_for_(live_for),
      now_ms_(std::move(now_ms)),
      steady_now_(steady_now ? std::move(steady_now) : [] { return Clock::now(); }) {}

std::map<std::string, std::string> WorkerLabels(const store::WorkerRecord& w) {
  std::map<std::string, std::string> labels;
  const json parsed = json::parse(w.labels_json, nullptr, false);
  if (parsed.is_object()) {
    for (auto it = parsed.begin(); it != parsed.end(); ++it) {
      if (it->is_string()) labels[it.key()] = it->get<std::string>();
    }
  }
  return labels;
}

Result<FleetSnapshot> FleetView::ReadNow() const {
  FleetSnapshot v;
  v.loaded = Clock::now();  // what is read is at least this fresh
  HPO_ASSIGN_OR_RETURN(auto workers, store_.ListWorkers());
  HPO_ASSIGN_OR_RETURN(auto observations, store_.ListSpeedObservations("", kObservationsRead));
  const int64_t live_since = now_ms_() - live_for_.count();
  for (const auto& w : workers) {
    const std::map<std::string, std::string> labels = WorkerLabels(w);
    for (const auto& d : w.devices) {
      FleetDevice fd;
      fd.worker_id = w.id;
      fd.device_class = d.device_class;
      fd.max_threads = DeviceThreadLimit(d);
      fd.labels = labels;
      fd.live = !w.gone_ms && w.last_seen_ms >= live_since;
      v.devices[d.id] = fd;
      v.model.AddBenchmark(d.device_class, d.benchmark_gflops);
    }
  }
  for (const auto& o : observations) {  // oldest first: the newest per key is kept
    json setting = json::parse(o.system_setting_json, nullptr, false);
    if (setting.is_discarded()) continue;
    v.model.Observe(o.device_class, o.workload, scheduler::SettingKey(setting), o.samples_per_sec);
    if (o.device_id == 0) continue;  // its device was pruned
    if (!setting.is_object()) setting = json::object();
    v.measured[o.device_id][o.workload] = {o.samples_per_sec, std::move(setting), o.observed_ms,
                                           o.trial_id};
  }
  return v;
}

Status FleetView::RereadReleasing() {
  reading_ = true;
  missed_.clear();
  mu_.Unlock();
  Result<FleetSnapshot> read = ReadNow();
  mu_.Lock();
  reading_ = false;
  read_done_.NotifyAll();
  std::vector<Change> missed = std::move(missed_);
  missed_.clear();
  if (!read.ok()) return read.status();  // the old view, if any, serves on
  FleetSnapshot v = std::move(read).value();
  for (const auto& [id, d] : v.devices) known_[id] = {d.device_class, d.max_threads, d.labels};
  // Observations and registrations since the read began (an observation
  // the read saw as well counts twice, among thousands).
  for (const Change& change : missed) change(v);
  for (const auto& [id, d] : v.devices) {
    if (d.live) v.live.Set(std::to_string(id), d.device_class, FreeAtLocked(id));
  }
  view_ = std::move(v);
  return Status::OK();
}

bool FleetView::Current(Clock::time_point asked) const {
  return view_ && view_->loaded + max_age_ >= asked;
}

double FleetView::FreeAtLocked(Id device_id) const {
  const auto b = busy_until_.find(device_id);
  return b == busy_until_.end() ? -std::numeric_limits<double>::infinity() : Seconds(b->second);
}

Result<FleetView::Locked> FleetView::Fresh(Id device_id, Clock::time_point asked) {
  Locked locked(mu_);  // held until the caller drops it
  mu_.AssertHeld();
  for (bool read = false; !read;) {
    const bool knows = view_ && view_->devices.count(device_id);
    if (knows && Current(asked)) break;
    if (reading_) {
      // Another call rereads. A view that knows this device serves until
      // then, unless every lease must read (max_age zero); one that does
      // not know it waits, and reads again if that read did not find it
      // (it may have begun before the device registered).
      if (knows && max_age_.count() > 0) break;
      read_done_.Wait(mu_);
      continue;
    }
    HPO_RETURN_IF_ERROR(RereadReleasing());
    read = true;
  }
  // The asking device is live: it is asking.
  if (auto d = view_->devices.find(device_id); d != view_->devices.end() && !d->second.live) {
    d->second.live = true;
    view_->live.Set(std::to_string(device_id), d->second.device_class, FreeAtLocked(device_id));
  }
  locked.Reset(&*view_);
  return locked;
}

Result<FleetView::Known> FleetView::KnownDevice(Id device_id) {
  MutexLock lock(mu_);
  if (auto it = known_.find(device_id); it != known_.end()) return it->second;
  while (reading_) read_done_.Wait(mu_);
  if (auto it = known_.find(device_id); it != known_.end()) return it->second;
  HPO_RETURN_IF_ERROR(RereadReleasing());
  if (auto it = known_.find(device_id); it != known_.end()) return it->second;
  return Status::NotFound("device " + std::to_string(device_id) + " is not registered");
}

void FleetView::Registered(const store::WorkerRecord& w) {
  MutexLock lock(mu_);
  for (const auto& d : w.devices)
    known_[d.id] = {d.device_class, DeviceThreadLimit(d), WorkerLabels(w)};
  // A new device makes the next Fresh reread (it asks for one it does not
  // know); one registered again is updated here, or it would keep its old
  // class (and thread limit) until the next reread.
  auto update = [devices = w.devices](FleetSnapshot& view) {
    for (const auto& d : devices) {
      if (auto it = view.devices.find(d.id); it != view.devices.end()) {
        it->second.device_class = d.device_class;
        it->second.max_threads = DeviceThreadLimit(d);
        it->second.live = true;
      }
    }
  };
  if (view_) {
    update(*view_);
    for (const auto& d : w.devices) {
      if (view_->devices.count(d.id))
        view_->live.Set(std::to_string(d.id), d.device_class, FreeAtLocked(d.id));
    }
  }
  if (reading_) missed_.push_back(std::move(update));
}

void FleetView::Left(Id worker_id) {
  MutexLock lock(mu_);
  // A reread that began before the store said it is gone may still count
  // it live: this is applied to that view too.
  auto leave = [worker_id](FleetSnapshot& view) {
    for (auto& [id, d] : view.devices) {
      if (d.worker_id != worker_id) continue;
      d.live = false;
      view.live.Remove(std::to_string(id));
    }
  };
  if (view_) {
    for (const auto& [id, d] : view_->devices) {
      if (d.worker_id == worker_id) busy_until_.erase(id);
    }
    leave(*view_);
  }
  if (reading_) missed_.push_back(std::move(leave));
}

Result<MeasuredSpeeds> FleetView::Measured(Clock::time_point asked) {
  MutexLock lock(mu_);
  while (!view_ || !Current(asked)) {
    if (reading_) {
      // Another call rereads: the view serves until then, as for a lease.
      if (view_ && max_age_.count() > 0) break;
      read_done_.Wait(mu_);
      continue;
    }
    HPO_RETURN_IF_ERROR(RereadReleasing());
    break;
  }
  return view_->measured;
}

Result<FleetView::Known> FleetView::Device(Id device_id) { return KnownDevice(device_id); }

Result<std::optional<int>> FleetView::ThreadLimit(Id device_id) {
  HPO_ASSIGN_OR_RETURN(Known k, KnownDevice(device_id));
  return k.max_threads;
}

Result<std::map<std::string, double>> FleetView::PredictAllTunables(
    Id device_id, const std::string& workload, const std::vector<std::string>& tunable,
    const nlohmann::json& given, int min_observations) {
  HPO_ASSIGN_OR_RETURN(Known k, KnownDevice(device_id));
  MutexLock lock(mu_);
  // No view read yet (no lease on this server since it started): nothing
  // known here, which costs only probes.
  if (!view_) return std::map<std::string, double>{};
  return view_->model.PredictAllTunables(k.device_class, workload, tunable, given,
                                         min_observations);
}

void FleetView::Observe(Id device_id, const std::string& device_class, const std::string& workload,
                        int64_t step, const TrialSegment& segment, const MeasuredSpeed& speed) {
  const auto now = steady_now_();
  const std::string setting = scheduler::SettingKey(speed.system);
  const double samples_per_sec = speed.samples_per_sec;
  auto apply = [=](FleetSnapshot& view) {
    view.model.Observe(device_class, workload, setting, samples_per_sec);
    view.measured[device_id][workload] = speed;
  };
  MutexLock lock(mu_);
  if (view_) apply(*view_);
  if (reading_) missed_.push_back(apply);
  step_samples_.Observe(workload, {speed.trial_id.value_or(0), device_id, segment.attempt,
                                   segment.resume_step, step, Seconds(now), samples_per_sec});
}

double FleetView::SamplesPerStep(const std::string& workload) {
  MutexLock lock(mu_);
  return step_samples_.SamplesPerStep(workload);
}

void FleetView::SetBusy(Id device_id, double seconds) {
  MutexLock lock(mu_);
  if (!(seconds > 0) || !std::isfinite(seconds)) {
    busy_until_.erase(device_id);
  } else {
    busy_until_[device_id] =
        steady_now_() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(std::min(seconds, 1e7)));
  }
  if (view_)
    view_->live.SetFreeAt(std::to_string(device_id),
                          FreeAtLocked(device_id));  // a device not live: no-op
}

void FleetView::SetIdle(Id device_id) {
  MutexLock lock(mu_);
  busy_until_.erase(device_id);
  if (view_) view_->live.SetFreeAt(std::to_string(device_id), FreeAtLocked(device_id));
}

}  // namespace hpo::server
