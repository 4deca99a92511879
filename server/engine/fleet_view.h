// The fleet as placement and co-tuning see it: every registered device and
// its class, which devices are live (their worker leased or heartbeated
// within the live window, the lease timeout, and is not gone), how long each is
// still busy by placement's own estimate, the speed model (benchmarks as
// the prior, measured samples/s by setting) and how many samples one step
// of each workload trains. Read from the store and kept current with the
// engine's own reports; reread when older than a bound
// (EngineOptions::fleet_cache) or when a device it does not know asks.
//
// Thread-safe: one lock. Fresh() hands out the locked view; a caller holding
// it must not call the other methods. The store is read without the lock
// held (workers, devices and thousands of observations: tens of
// milliseconds on PostgreSQL, which every lease and report waited for);
// meanwhile a view that knows the asking device serves, and the
// engine's changes made during the read are applied to the new one too.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "scheduler/fleet_summary.h"
#include "scheduler/policy.h"
#include "scheduler/speed_model.h"
#include "scheduler/step_samples.h"
#include "server/store/store.h"

namespace hpo::server {

struct FleetDevice {
  store::Id worker_id = 0;
  std::string device_class;
  std::optional<int> max_threads;             // DeviceThreadLimit
  std::map<std::string, std::string> labels;  // its worker's
  bool live = false;
};

// The newest speed measured on one device for one workload, as GET
// /api/v1/workers lists it.
struct MeasuredSpeed {
  double samples_per_sec = 0;
  nlohmann::json system = nlohmann::json::object();  // the setting it ran
  int64_t observed_ms = 0;
  std::optional<store::Id> trial_id;
};
using MeasuredSpeeds =
    std::map<store::Id, std::map<std::string, MeasuredSpeed>>;  // by device, then workload

struct FleetSnapshot {
  std::map<store::Id, FleetDevice> devices;  // every registered device, by id
  scheduler::SpeedModel model;
  // Of the observations the model was built from and this engine's since.
  MeasuredSpeeds measured;
  // The live devices for the policy (id = the device id as text), free at
  // placement's estimates (FleetView::Seconds of the steady clock); kept as
  // devices become busy or idle, rebuilt only when the view is reread.
  scheduler::FleetSummary live;
  std::chrono::steady_clock::time_point loaded;
};

// Which run of a trial a report comes from, as the store's TrialRecord
// (the report left it) says: its lease's attempt and the step it resumed
// after. A new lease, a resume (on any device) and a restart begin another;
// so does a move to another device, which FleetView::Observe compares too.
struct TrialSegment {
  int attempt = 0;
  int64_t resume_step = 0;
};

// A worker's labels that are strings (the ones prices can name).
std::map<std::string, std::string> WorkerLabels(const store::WorkerRecord& w);

// The most intra-op threads a trial on this device may be asked for: a
// CPU's usable cores, rounded down, at least 1 (a 0.5-core cgroup still
// runs one thread). nullopt when unknown: a CPU that reported no cores, or
// a CUDA device, whose `cores` are its multiprocessors, not host cores (the
// worker gives its GPU trials their share of the CPU itself).
std::optional<int> DeviceThreadLimit(const store::DeviceInfo& d);

class FleetView {
 public:
  using Clock = std::chrono::steady_clock;
  // `store` outlives the view. A worker is live for `live_for` after it was
  // last seen, by `now_ms` (the store's clock: Unix milliseconds). The time
  // between a trial's reports and the busy times are measured on
  // `steady_now` (tests move it; Clock::now when null), which the engine
  // reads the summary's now from too; the view's age (max_age, Fresh's
  // `asked`) is real time, as the store's writes are.
  FleetView(store::Store& store, std::chrono::milliseconds max_age,
            std::chrono::milliseconds live_for, std::function<int64_t()> now_ms,
            std::function<Clock::time_point()> steady_now = nullptr);

  using Locked = LockedPtr<FleetSnapshot>;
  // The view, reread unless it was read within max_age before `asked` (a
  // lease's start) and knows `device_id`; the asking device is live.
  Result<Locked> Fresh(store::Id device_id, Clock::time_point asked) HPO_EXCLUDES(mu_);
  // A steady-clock time as the summary's free times count it (seconds).
  static double Seconds(Clock::time_point t) {
    return std::chrono::duration<double>(t.time_since_epoch()).count();
  }
  // What is known of a registered device without reading the view: its
  // class, thread limit and worker's labels. NotFound: not registered.
  struct Known {
    std::string device_class;
    std::optional<int> max_threads;
    std::map<std::string, std::string> labels;
  };
  Result<Known> Device(store::Id device_id) HPO_EXCLUDES(mu_);
  // The worker registered (perhaps again, with its devices' classes
  // changed): its devices are live with these classes from now on.
  void Registered(const store::WorkerRecord& w) HPO_EXCLUDES(mu_);
  // The worker left (Engine::LeaveWorker): its devices are not live and
  // not busy from now on, until one of them asks again (Fresh) or the
  // worker registers again.
  void Left(store::Id worker_id) HPO_EXCLUDES(mu_);
  // A registered device's DeviceThreadLimit. NotFound: not registered.
  Result<std::optional<int>> ThreadLimit(store::Id device_id) HPO_EXCLUDES(mu_);
  // SpeedModel::PredictAllTunables on a registered device's class.
  // NotFound: not registered.
  Result<std::map<std::string, double>> PredictAllTunables(store::Id device_id,
                                                           const std::string& workload,
                                                           const std::vector<std::string>& tunable,
                                                           const nlohmann::json& given,
                                                           int min_observations) HPO_EXCLUDES(mu_);

  // One of this engine's reports (`speed.trial_id`'s step `step` on the
  // device, in `segment`): a speed observation (placement sees it on the
  // next lease, GET /workers at once) and, from the time since this trial's
  // previous report, how many samples one step of the workload trains
  // (scheduler::StepSamples: only a previous report of the same segment on
  // the same device counts).
  void Observe(store::Id device_id, const std::string& device_class, const std::string& workload,
               int64_t step, const TrialSegment& segment, const MeasuredSpeed& speed)
      HPO_EXCLUDES(mu_);
  // The newest speed per device and workload, from a view read within
  // max_age before `asked` (reread otherwise, as Fresh does): GET /workers
  // from memory rather than thousands of observations read per call
  // (with 20 REST clients it took 38% of the server's CPU).
  Result<MeasuredSpeeds> Measured(Clock::time_point asked) HPO_EXCLUDES(mu_);
  // StepSamples::SamplesPerStep: the median of the recent estimates; 0 when none.
  double SamplesPerStep(const std::string& workload) HPO_EXCLUDES(mu_);
  // Placement's estimate: the device is busy for `seconds` from now.
  void SetBusy(store::Id device_id, double seconds) HPO_EXCLUDES(mu_);
  // The device's trial paused or ended: it is free.
  void SetIdle(store::Id device_id) HPO_EXCLUDES(mu_);

 private:
  // The store's workers and observations as a view, without its live
  // summary (the busy times are the lock's); no lock held.
  Result<FleetSnapshot> ReadNow() const;
  // Rereads with mu_ released for the read, held again after it; one
  // caller at a time (the others wait on read_done_).
  Status RereadReleasing() HPO_REQUIRES(mu_);
  // Fresh()'s condition: the view was read within max_age before `asked`.
  bool Current(Clock::time_point asked) const HPO_REQUIRES(mu_);
  // The device's free time for the summary: -infinity when not busy.
  double FreeAtLocked(store::Id device_id) const HPO_REQUIRES(mu_);

  store::Store& store_;
  const std::chrono::milliseconds max_age_;
  const std::chrono::milliseconds live_for_;
  const std::function<int64_t()> now_ms_;
  const std::function<Clock::time_point()> steady_now_;
  Mutex mu_;
  CondVar read_done_;  // signalled when a reread ends
  std::optional<FleetSnapshot> view_ HPO_GUARDED_BY(mu_);
  bool reading_ HPO_GUARDED_BY(mu_) = false;  // a caller rereads the store now
  // Changes made to the view while a reread was in flight: the read may
  // have missed them, so they are applied to the new view too.
  using Change = std::function<void(FleetSnapshot&)>;
  std::vector<Change> missed_ HPO_GUARDED_BY(mu_);
  Result<Known> KnownDevice(store::Id device_id) HPO_EXCLUDES(mu_);
  std::map<store::Id, Known> known_ HPO_GUARDED_BY(mu_);  // outlives rereads
  std::map<store::Id, Clock::time_point> busy_until_ HPO_GUARDED_BY(mu_);
  scheduler::StepSamples step_samples_ HPO_GUARDED_BY(mu_);  // on steady_now_'s seconds
};

}  // namespace hpo::server
