// The engine's side of in-trial co-tuning (scheduler/cotuner.h): the
// system parameters a trial's program may have changed, the setting a
// new lease starts at (what this device class learned), and the next
// setting a report is answered with.
#include <algorithm>

#include "scheduler/cotuner.h"
#include "server/engine/engine_impl.h"

namespace hpo::server {

using nlohmann::json;
using store::Id;

Result<std::vector<scheduler::SystemDimension>> EngineImpl::CoTunedDimensions(
    const ExperimentSpec& spec, const std::map<std::string, scheduler::SystemChange>& declared,
    std::optional<Id> device_id, std::vector<std::string>* unknown) {
  std::vector<scheduler::SystemDimension> all;
  for (const auto& p : spec.system) all.push_back({p.domain.name, {}, p.may_change_mid_trial});
  const std::vector<std::string> missing = scheduler::RestrictToDeclared(all, declared);
  if (unknown) *unknown = missing;
  std::optional<int> max_threads;
  if (device_id) {
    HPO_ASSIGN_OR_RETURN(max_threads, fleet_->ThreadLimit(*device_id));
  }
  std::vector<scheduler::SystemDimension> dims;
  for (size_t i = 0; i < spec.system.size(); ++i) {
    const SystemParam& p = spec.system[i];
    if (p.affects_accuracy) continue;
    scheduler::SystemDimension d = all[i];
    d.values = scheduler::CandidateValues(p.domain);
    if (d.name == "threads" && max_threads) scheduler::CapToDevice(d, *max_threads);
    dims.push_back(std::move(d));
  }
  return dims;
}

Result<ReportReply> EngineImpl::CoTune(const store::TrialRecord& trial, const ExperimentSpec& spec,
                                       const TrialReport& r, bool inserted,
                                       const std::string& workload) {
  ReportReply reply;
  const Id experiment_id = trial.experiment_id;
  std::vector<std::string> unknown;
  HPO_ASSIGN_OR_RETURN(const std::vector<scheduler::SystemDimension> dims,
                       CoTunedDimensions(spec, r.system_changes, r.device_id, &unknown));
  if (!unknown.empty() && inserted) {
    HPO_ASSIGN_OR_RETURN(auto ms, store_.ListMeasurements(r.trial_id));
    const auto this_lease = std::count_if(
        ms.begin(), ms.end(), [&](const auto& m) { return m.step > trial.resume_step; });
    if (this_lease <= 1) {
      // Once per lease, at its first report: the next lease may be on a
      // worker whose program knows them.
      std::string declared;
      for (const auto& [name, change] : r.system_changes)
        declared += (declared.empty() ? "" : ", ") + name;
      for (const auto& name : unknown) {
        Emit("trial.system_unknown",
             {{"experiment_id", experiment_id},
              {"trial_id", r.trial_id},
              {"number", trial.number},
              {"step", r.step},
              {"parameter", name},
              {"reason", "system." + name +
                             std::string(": the program running this trial does not know this "
                                         "parameter (it declares ")
                                 .append(declared)
                                 .append("); it is neither applied nor co-tuned in this trial")}});
      }
    }
  }
  if (dims.empty() || r.samples_per_sec <= 0) return reply;
  HPO_ASSIGN_OR_RETURN(auto ms, store_.ListMeasurements(r.trial_id));
  std::vector<scheduler::EpochSpeed> history;
  for (const auto& m : ms) {
    if (m.samples_per_sec > 0) {
      history.push_back({json::parse(m.system_setting_json, nullptr, false), m.samples_per_sec});
    }
  }
  // What earlier trials measured on this device's class, for this trial's
  // searched values: the neighbours known slower are not probed again.
  scheduler::KnownSpeeds known;
  if (r.device_id && !history.empty()) {
    HPO_ASSIGN_OR_RETURN(
        known, fleet_->PredictAllTunables(*r.device_id, workload, TunableNames(spec), r.system,
                                          kMinObservationsToReuseSetting));
  }
  if (const auto ignored = scheduler::FirstIgnoredChange(dims, history, {}, 64, known)) {
    // Asking again would only get the same answer: the trial runs on as it
    // is. Said once, at the epoch that showed it.
    if (ignored->epoch + 1 == history.size()) {
      std::string why =
          "system." + ignored->parameter + ": step " + std::to_string(r.step) + " ran " +
          (ignored->ran.is_null() ? "no value of it" : ignored->ran.dump()) + ", not " +
          ignored->asked.dump() +
          " as asked; co-tuning stops for this trial (does the program apply "
          "HPO_SYSTEM_FILE, or can this parameter change only at a restart? then say `mutable: "
          "false`)";
      Emit("trial.cotuning_stopped", {{"experiment_id", experiment_id},
                                      {"trial_id", r.trial_id},
                                      {"number", trial.number},
                                      {"step", r.step},
                                      {"parameter", ignored->parameter},
                                      {"reason", why}});
      reply.reason = std::move(why);
    }
    return reply;
  }
  const auto next = scheduler::NextSetting(dims, history, r.system, {}, known);
  if (scheduler::SettingKey(next.setting) != scheduler::SettingKey(r.system)) {
    reply.new_system = next.setting;
    reply.reason = next.reason;
  }
  return reply;
}

Status EngineImpl::StartAtBestSetting(const ExperimentSpec& spec, Id device_id,
                                      std::chrono::steady_clock::time_point asked, Lease& a) {
  // Only the tunable (throughput-only) parameters come from what was
  // learned, chosen for this trial's own searched values (its batch size);
  // the rest are the trial's own.
  json start = json::parse(a.trial.system_params_json, nullptr, false);
  if (!start.is_object()) return Status::OK();
  const std::vector<std::string> tunable = TunableNames(spec);
  std::optional<json> best;
  std::optional<int> max_threads;
  std::string device_class;
  {
    HPO_ASSIGN_OR_RETURN(FleetView::Locked fleet, fleet_->Fresh(device_id, asked));
    auto device = fleet->devices.find(device_id);
    if (device == fleet->devices.end()) return Status::OK();  // not registered
    device_class = device->second.device_class;
    max_threads = device->second.max_threads;
    if (!tunable.empty()) {
      best = fleet->model.BestTunables(device_class, Workload(spec, a.space), tunable, start,
                                       kMinObservationsToReuseSetting);
    }
  }
  if (best) {
    for (const auto& [name, value] : best->items()) start[name] = value;
  }
  // A range beyond the device (threads: 8 on 2 usable cores) is no reason
  // to fail anything: the trial runs within what the device takes, and the
  // co-tuner probes only there (CoTunedDimensions), which this event says.
  for (const auto& p : spec.system) {
    if (p.domain.name != "threads" || !max_threads) continue;
    scheduler::SystemDimension d{p.domain.name, scheduler::CandidateValues(p.domain),
                                 p.may_change_mid_trial};
    const json highest =
        d.values.empty() ? json() : *std::max_element(d.values.begin(), d.values.end());
    const json asked_for = start.value(p.domain.name, json());
    if (!scheduler::CapToDevice(d, *max_threads, &start)) continue;
    std::string why =
        "system.threads: the spec allows up to " + highest.dump() + ", device " +
        std::to_string(device_id) + " (" + device_class + ") has " + std::to_string(*max_threads) +
        " usable core(s); this trial is asked for at most " + std::to_string(*max_threads);
    if (asked_for != start.value(p.domain.name, json())) {
      why += " and starts at " + start[p.domain.name].dump() + " instead of " + asked_for.dump();
    }
    Emit("trial.system_capped", {{"experiment_id", a.trial.experiment_id},
                                 {"trial_id", a.trial.id},
                                 {"number", a.trial.number},
                                 {"device_id", device_id},
                                 {"parameter", "threads"},
                                 {"limit", *max_threads},
                                 {"reason", why}});
  }
  a.trial.system_params_json = start.dump();
  return Status::OK();
}

std::vector<std::string> Engine::TunableNames(const ExperimentSpec& spec) {
  std::vector<std::string> names;
  for (const auto& p : spec.system) {
    if (!p.affects_accuracy) names.push_back(p.domain.name);
  }
  return names;
}

}  // namespace hpo::server
