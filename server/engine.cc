#include "server/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "search/ranking.h"
#include "search/registry.h"
#include "scheduler/cotuner.h"
#include "scheduler/placement.h"
#include "scheduler/speed_model.h"

namespace hpo::server {

using nlohmann::json;
using store::Id;
using store::TrialState;

std::string_view ToString(Decision d) {
  switch (d) {
    case Decision::kContinue: return "continue";
    case Decision::kPrune: return "prune";
    case Decision::kStop: return "stop";
  }
  return "continue";
}

namespace {

Result<std::unique_ptr<search::Pruner>> MakePruner(const ExperimentSpec& spec) {
  const json& o = spec.early_stopping_options;
  auto num = [&](const char* key, double fallback) { return o.value(key, fallback); };
  if (spec.early_stopping == "median") {
    search::MedianOptions m;
    m.startup_trials = static_cast<int>(num("startup_trials", m.startup_trials));
    m.warmup_steps = static_cast<int64_t>(num("warmup_steps", m.warmup_steps));
    m.interval_steps = static_cast<int64_t>(num("interval_steps", m.interval_steps));
    m.min_trials_at_step = static_cast<int>(num("min_trials_at_step", m.min_trials_at_step));
    return search::MakeMedianPruner(m);
  }
  if (spec.early_stopping == "asha") {
    search::AshaOptions a;
    a.min_resource = static_cast<int64_t>(num("min_resource", a.min_resource));
    a.reduction_factor = num("reduction_factor", a.reduction_factor);
    a.max_resource = static_cast<int64_t>(num("max_resource", spec.steps_per_trial));
    a.min_early_stopping_rate = static_cast<int>(num("min_early_stopping_rate", a.min_early_stopping_rate));
    a.bootstrap_count = static_cast<int>(num("bootstrap_count", a.bootstrap_count));
    return search::MakeAshaPruner(a);
  }
  if (spec.early_stopping == "hyperband") {
    search::HyperbandOptions h;
    h.min_resource = static_cast<int64_t>(num("min_resource", h.min_resource));
    h.max_resource = static_cast<int64_t>(num("max_resource", spec.steps_per_trial));
    h.reduction_factor = num("reduction_factor", h.reduction_factor);
    return search::MakeHyperbandPruner(h);
  }
  return search::MakeNopPruner();
}

// Where a trial of each system parameter starts until the scheduler knows
// better: the middle of its domain (geometric middle for log domains).
json InitialSystem(const ExperimentSpec& spec) {
  json out = json::object();
  for (const auto& p : spec.system) out[p.domain.name] = p.domain.ToJson(p.domain.FromUnit(0.5));
  return out;
}

search::TrialStatus SearchStatus(TrialState s) {
  switch (s) {
    case TrialState::kCompleted: return search::TrialStatus::kCompleted;
    case TrialState::kPruned: return search::TrialStatus::kPruned;
    case TrialState::kFailed:
    case TrialState::kCancelled: return search::TrialStatus::kFailed;
    default: return search::TrialStatus::kRunning;
  }
}

uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t z = a ^ (b + 0x9E3779B97F4A7C15ull + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  return z ^ (z >> 31);
}

}  // namespace

Engine::Engine(store::Store& store, EngineOptions options) : store_(store), options_(options) {
  if (auto* m = options_.metrics) {
    const auto buckets = metrics::ExponentialBuckets(0.0005, 2, 16);
    suggest_seconds_ = &m->histogram("hpo_suggest_duration_seconds",
                                     "Time to choose and store a batch of new trials", buckets);
    report_seconds_ = &m->histogram("hpo_report_duration_seconds",
                                    "Time to record a step and decide on early stopping", buckets);
    lease_seconds_ = &m->histogram("hpo_lease_duration_seconds", "Time to answer a worker's lease",
                                   buckets);
    leases_granted_ = &m->counter("hpo_leases_total", "Worker lease requests by outcome",
                                  {{"outcome", "trial"}});
    leases_empty_ = &m->counter("hpo_leases_total", "Worker lease requests by outcome",
                                {{"outcome", "none"}});
  }
}

namespace {
// `metrics` of a report or a completion: an object of at most
// kMaxMetricsPerReport numbers with names of 1 to kMaxNameLength bytes.
Status CheckMetrics(const json& metrics, const std::string& field) {
  if (!metrics.is_object()) return Status::InvalidArgument(field + ": must be an object");
  if (metrics.size() > kMaxMetricsPerReport) {
    return Status::InvalidArgument(field + ": " + std::to_string(metrics.size()) + " metrics, more than the limit of " +
                                   std::to_string(kMaxMetricsPerReport));
  }
  for (auto it = metrics.begin(); it != metrics.end(); ++it) {
    if (it.key().empty() || it.key().size() > kMaxNameLength) {
      return Status::InvalidArgument(field + ": a metric name must be 1 to " + std::to_string(kMaxNameLength) +
                                     " bytes ('" + it.key().substr(0, 40) + "' is " +
                                     std::to_string(it.key().size()) + ")");
    }
    if (!it->is_number()) return Status::InvalidArgument(field + "." + it.key() + ": must be a number");
  }
  return Status::OK();
}

Status CheckSystem(const json& system) {
  if (system.is_null()) return Status::OK();
  if (!system.is_object()) return Status::InvalidArgument("system: must be an object");
  if (system.size() > kMaxSystemKeys) {
    return Status::InvalidArgument("system: " + std::to_string(system.size()) + " keys, more than the limit of " +
                                   std::to_string(kMaxSystemKeys));
  }
  for (auto it = system.begin(); it != system.end(); ++it) {
    if (it.key().empty() || it.key().size() > kMaxNameLength) {
      return Status::InvalidArgument("system: a key must be 1 to " + std::to_string(kMaxNameLength) + " bytes");
    }
    if (it->dump(-1, ' ', false, json::error_handler_t::replace).size() > kMaxValueLength) {
      return Status::InvalidArgument("system." + it.key() + ": longer than " + std::to_string(kMaxValueLength) +
                                     " bytes");
    }
  }
  return Status::OK();
}

// Observes the enclosing call's duration when metrics are on.
std::optional<metrics::ScopedTimer> TimeIf(metrics::Histogram* h) {
  if (!h) return std::nullopt;
  return std::optional<metrics::ScopedTimer>(std::in_place, *h);
}
}  // namespace

std::string Engine::WorkerOwner(Id worker_id) { return "worker/" + std::to_string(worker_id); }

std::optional<double> Engine::Objective(const ExperimentSpec& spec,
                                        const std::string& metrics_json) const {
  const json m = json::parse(metrics_json, nullptr, false);
  if (m.is_discarded() || !m.is_object()) return std::nullopt;
  auto it = m.find(spec.metric);
  if (it == m.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  if (!std::isfinite(v)) return std::nullopt;
  return search::Minimized(spec.direction, v);
}

Result<Engine::Cached*> Engine::Load(Id experiment_id) {
  {
    std::lock_guard lock(mu_);
    auto it = cache_.find(experiment_id);
    if (it != cache_.end()) return it->second.get();
  }
  HPO_ASSIGN_OR_RETURN(store::ExperimentRecord rec, store_.GetExperiment(experiment_id));
  auto parsed = ParseExperimentSpec(rec.spec_json);
  if (!parsed.ok()) {
    return Status::DataLoss("experiment " + std::to_string(experiment_id) +
                            " has a stored spec this server cannot read: " + parsed.status().message());
  }
  auto c = std::make_unique<Cached>();
  c->spec = std::make_shared<const ExperimentSpec>(std::move(parsed).value());
  for (const auto& s : rec.spaces) c->space_ids[s.name] = s.id;
  HPO_ASSIGN_OR_RETURN(c->pruner, MakePruner(*c->spec));
  std::lock_guard lock(mu_);
  auto [it, inserted] = cache_.emplace(experiment_id, std::move(c));
  return it->second.get();
}

Result<std::shared_ptr<const ExperimentSpec>> Engine::Spec(Id experiment_id) {
  HPO_ASSIGN_OR_RETURN(Cached * c, Load(experiment_id));
  return c->spec;
}

Result<store::ExperimentRecord> Engine::CreateExperiment(const std::string& spec_text) {
  HPO_ASSIGN_OR_RETURN(ExperimentSpec spec, ParseExperimentSpec(spec_text));
  // Options the spec parser cannot judge alone (e.g. ASHA's eta) are
  // checked here, before anything is written.
  auto pruner = MakePruner(spec);
  if (!pruner.ok()) return pruner.status().WithContext("early_stopping");
  store::NewExperiment e;
  e.name = spec.name;
  e.spec_json = spec.source.dump();
  for (const auto& s : spec.spaces) {
    json params = spec.source["spaces"][e.spaces.size()];
    e.spaces.push_back({s.name, params.dump()});
  }
  HPO_ASSIGN_OR_RETURN(store::ExperimentRecord rec, store_.CreateExperiment(e));
  Emit("experiment.created", {{"experiment_id", rec.id}, {"name", rec.name}});
  if (spec.executor != ExperimentSpec::ExecutorKind::kClient) {
    HPO_ASSIGN_OR_RETURN(Cached * c, Load(rec.id));
    HPO_RETURN_IF_ERROR(Replenish(rec.id, *c));
  }
  return rec;
}

Status Engine::CancelExperiment(Id id, std::string_view reason) {
  HPO_RETURN_IF_ERROR(store_.FinishExperiment(id, store::ExperimentState::kCancelled, reason));
  Emit("experiment.finished", {{"experiment_id", id}, {"state", "cancelled"}, {"reason", reason}});
  return Status::OK();
}

Result<std::vector<search::History>> Engine::Histories(Id experiment_id, const ExperimentSpec& spec) {
  HPO_ASSIGN_OR_RETURN(HistoryView view, ReadHistories(experiment_id, spec));
  return std::move(view.histories);
}

Result<Engine::HistoryView> Engine::ReadHistories(Id experiment_id, const ExperimentSpec& spec) {
  HistoryView view;
  view.loaded = std::chrono::steady_clock::now();  // what is read is at least this fresh
  HPO_ASSIGN_OR_RETURN(store::ExperimentRecord rec, store_.GetExperiment(experiment_id));
  for (size_t i = 0; i < spec.spaces.size(); ++i) {
    for (const auto& s : rec.spaces) {
      if (s.name == spec.spaces[i].name) view.space_index[s.id] = i;
    }
  }
  std::vector<search::History>& out = view.histories;
  out.resize(spec.spaces.size());
  const std::map<Id, std::pair<size_t, size_t>>& where = view.where;
  for (int64_t offset = 0;; offset += 10'000) {
    HPO_ASSIGN_OR_RETURN(auto page, store_.ListTrials(experiment_id, {std::nullopt, std::nullopt, offset, 10'000}));
    for (const auto& t : page) AddToHistory(view, spec, t);
    if (page.size() < 10'000) break;
  }
  HPO_ASSIGN_OR_RETURN(auto ms, store_.ListExperimentMeasurements(experiment_id));
  for (const auto& m : ms) {
    auto it = where.find(m.trial_id);
    if (it == where.end()) continue;
    if (auto v = Objective(spec, m.metrics_json)) {
      out[it->second.first].trials[it->second.second].curve.emplace_back(m.step, *v);
    }
  }
  // A completed trial that reported steps but no final value counts with its last one.
  for (auto& h : out) {
    for (auto& o : h.trials) {
      if (o.status == search::TrialStatus::kCompleted && !o.value && !o.curve.empty()) {
        o.value = o.curve.back().second;
      }
    }
  }
  return view;
}

Result<Engine::HistoryView*> Engine::HistoryLocked(Id experiment_id, Cached& c) {
  if (!c.history || std::chrono::steady_clock::now() - c.history->loaded >= options_.history_cache) {
    // One caller rereads while the experiment's others wait for it, rather
    // than each reading everything.
    c.history.reset();
    HPO_ASSIGN_OR_RETURN(HistoryView fresh, ReadHistories(experiment_id, *c.spec));
    c.history = std::move(fresh);
  }
  return &*c.history;
}

void Engine::AddToHistory(HistoryView& view, const ExperimentSpec& spec, const store::TrialRecord& trial) const {
  if (view.where.count(trial.id)) return;
  auto si = trial.space_id ? view.space_index.find(*trial.space_id) : view.space_index.end();
  if (si == view.space_index.end()) return;
  auto params = spec.spaces[si->second].FromJson(json::parse(trial.params_json, nullptr, false));
  if (!params.ok()) return;  // not this space's shape: it says nothing about it
  search::Observation o;
  o.number = trial.number;
  o.status = SearchStatus(trial.state);
  o.params = std::move(params).value();
  if (trial.state == TrialState::kCompleted) o.value = Objective(spec, trial.final_metrics_json);
  auto& trials = view.histories[si->second].trials;
  view.where.emplace(trial.id, std::make_pair(si->second, trials.size()));
  trials.push_back(std::move(o));
}

Result<bool> Engine::ApplyReport(const store::TrialRecord& trial, Cached& c, int64_t step, double value,
                                 bool inserted, bool judge) {
  std::lock_guard lock(c.history_mu);
  if (!judge && !c.history) return false;  // nothing to keep current, nothing to decide
  HistoryView* view = c.history ? &*c.history : nullptr;
  if (judge) {
    HPO_ASSIGN_OR_RETURN(view, HistoryLocked(trial.experiment_id, c));
  }
  AddToHistory(*view, *c.spec, trial);  // created since the view was read (by another replica)
  auto w = view->where.find(trial.id);
  if (w == view->where.end()) return false;  // not of a space in the spec
  const search::History& h = view->histories[w->second.first];
  search::Observation& o = view->histories[w->second.first].trials[w->second.second];
  o.status = search::TrialStatus::kRunning;
  if (inserted || o.curve.empty()) {
    // The report is the newest point: whatever the view holds from this
    // step on belongs to an earlier attempt (requeued). A step sent again
    // (not inserted) leaves the stored curve as it is, and so the view.
    auto first_after = std::lower_bound(o.curve.begin(), o.curve.end(), step,
                                        [](const auto& point, int64_t s) { return point.first < s; });
    o.curve.erase(first_after, o.curve.end());
    o.curve.emplace_back(step, value);
  }
  return judge && c.pruner->ShouldPrune(h, o);
}

void Engine::ForgetHistory(Id experiment_id) {
  Cached* c = nullptr;
  {
    std::lock_guard lock(mu_);
    auto it = cache_.find(experiment_id);
    if (it == cache_.end()) return;
    c = it->second.get();
  }
  std::lock_guard lock(c->history_mu);
  c->history.reset();
}

void Engine::UpdateCachedTrial(Cached& c, Id trial_id, search::TrialStatus status, std::optional<double> value) {
  std::lock_guard lock(c.history_mu);
  if (!c.history) return;
  auto w = c.history->where.find(trial_id);
  if (w == c.history->where.end()) return;
  search::Observation& o = c.history->histories[w->second.first].trials[w->second.second];
  o.status = status;
  o.value = value;
  // As ReadHistories: a completed trial without a final value counts with its last one.
  if (status == search::TrialStatus::kCompleted && !o.value && !o.curve.empty()) o.value = o.curve.back().second;
}

Result<std::vector<store::TrialRecord>> Engine::CreateSuggestions(
    Id experiment_id, Cached& c, int64_t count, std::optional<int64_t> max_unfinished) {
  const auto timer = TimeIf(suggest_seconds_);
  const ExperimentSpec& spec = *c.spec;
  // The cached view, kept current with this engine's changes: the same
  // trials a fresh read would give on one server (another replica's newest
  // count within history_cache).
  std::lock_guard history_lock(c.history_mu);
  HPO_ASSIGN_OR_RETURN(HistoryView * view, HistoryLocked(experiment_id, c));
  const std::vector<search::History>& histories = view->histories;
  size_t total = 0;
  for (const auto& h : histories) total += h.trials.size();
  // Deterministic for (seed, experiment, how far it got): a restarted server
  // suggests what the old one would have.
  search::Rng rng(Mix(Mix(spec.seed, static_cast<uint64_t>(experiment_id)), total));
  std::vector<int> per_space_so_far;
  for (const auto& h : histories) per_space_so_far.push_back(static_cast<int>(h.trials.size()));
  const auto ranks = search::RankSpaces(spec.spaces, histories, {}, rng);
  std::vector<int> wanted(spec.spaces.size(), 0);
  for (int64_t i = 0; i < count; ++i) {
    const int s = search::PickSpace(ranks, per_space_so_far);
    ++per_space_so_far[s];
    ++wanted[s];
  }
  HPO_ASSIGN_OR_RETURN(auto sampler, search::MakeSampler(spec.sampler, {}, "algorithm.sampler"));
  const json system = InitialSystem(spec);
  std::vector<store::NewTrial> trials;
  for (size_t s = 0; s < spec.spaces.size(); ++s) {
    if (wanted[s] == 0) continue;
    for (const auto& a : sampler->Suggest(spec.spaces[s], histories[s], wanted[s], rng)) {
      store::NewTrial t;
      t.space_id = c.space_ids.at(spec.spaces[s].name);
      const json params = spec.spaces[s].ToJson(a);
      t.params_json = params.dump();
      // A system parameter searched as a hyperparameter runs as sampled.
      json trial_system = system;
      for (const auto& p : spec.system) {
        if (p.affects_accuracy && params.contains(p.domain.name)) trial_system[p.domain.name] = params[p.domain.name];
      }
      t.system_params_json = trial_system.dump();
      t.priority = ranks[s].share;  // higher-priority spaces are leased first
      trials.push_back(std::move(t));
    }
  }
  // The caller emits "trial.created" once it has let go of replenish_mu:
  // on PostgreSQL each event is a NOTIFY, a store call of its own.
  HPO_ASSIGN_OR_RETURN(auto created, store_.CreateTrialsUpTo(experiment_id, trials, {spec.max_trials, max_unfinished}));
  for (const auto& t : created) AddToHistory(*view, spec, t);
  return created;
}

void Engine::EmitCreated(Id experiment_id, const std::vector<store::TrialRecord>& created) const {
  for (const auto& t : created) {
    Emit("trial.created", {{"experiment_id", experiment_id}, {"trial_id", t.id}, {"number", t.number}});
  }
}

Status Engine::Replenish(Id experiment_id, Cached& c) {
  // One top-up at a time per experiment, and nobody waits for it: the one
  // under way fills the pool, and the next lease or completion tops up
  // again. (Every lease and completion used to queue here behind a
  // suggestion; with 200 workers they queued past their deadlines.)
  std::unique_lock lock(c.replenish_mu, std::try_to_lock);
  if (!lock.owns_lock()) return Status::OK();
  HPO_ASSIGN_OR_RETURN(store::TrialCounts n, store_.CountTrials(experiment_id));
  const int64_t unfinished = n.pending + n.leased + n.running;
  const int64_t want = std::min(c.spec->max_parallel - unfinished, c.spec->max_trials - n.total());
  if (want <= 0) return Status::OK();
  // The store enforces max_parallel again: another server may be
  // replenishing the same experiment right now.
  HPO_ASSIGN_OR_RETURN(auto created, CreateSuggestions(experiment_id, c, want, c.spec->max_parallel));
  lock.unlock();
  EmitCreated(experiment_id, created);
  return Status::OK();
}

Result<std::optional<Assignment>> Engine::LeaseForWorker(Id worker_id, std::optional<Id> device_id) {
  const auto timer = TimeIf(lease_seconds_);
  HPO_ASSIGN_OR_RETURN(auto experiments, store_.ListExperiments(0, 10'000));
  std::reverse(experiments.begin(), experiments.end());  // oldest first
  const auto asked = std::chrono::steady_clock::now();  // the fleet view may be older by fleet_cache
  for (const auto& e : experiments) {
    if (e.state != store::ExperimentState::kRunning) continue;
    HPO_ASSIGN_OR_RETURN(Cached * c, Load(e.id));
    if (c->spec->executor == ExperimentSpec::ExecutorKind::kClient) continue;
    HPO_RETURN_IF_ERROR(Replenish(e.id, *c));
    std::optional<store::TrialRecord> leased;
    if (device_id) {
      HPO_ASSIGN_OR_RETURN(leased, LeasePlaced(e.id, *c, worker_id, *device_id, asked));
    }
    if (!leased) {
      HPO_ASSIGN_OR_RETURN(leased, store_.LeaseNextTrial({WorkerOwner(worker_id),
                                                          options_.worker_lease_ms, e.id,
                                                          std::nullopt}));
    }
    if (!leased) continue;
    Assignment a{*leased, c->spec, ""};
    for (const auto& [name, id] : c->space_ids) {
      if (leased->space_id == id) a.space = name;
    }
    if (device_id && !c->spec->system.empty()) {
      HPO_RETURN_IF_ERROR(StartAtBestSetting(*c->spec, *device_id, asked, a));
    }
    // Keep the pool full for the next worker.
    HPO_RETURN_IF_ERROR(Replenish(e.id, *c));
    if (leases_granted_) leases_granted_->Increment();
    return std::optional<Assignment>(std::move(a));
  }
  if (leases_empty_) leases_empty_->Increment();
  return std::optional<Assignment>();
}

Result<std::vector<Assignment>> Engine::Suggest(Id experiment_id, int count) {
  if (count < 1 || count > 1000) return Status::InvalidArgument("count: must be between 1 and 1000");
  HPO_ASSIGN_OR_RETURN(Cached * c, Load(experiment_id));
  if (c->spec->executor != ExperimentSpec::ExecutorKind::kClient) {
    return Status::FailedPrecondition("experiment " + std::to_string(experiment_id) +
                                      " runs on workers; only client experiments take suggest calls");
  }
  HPO_ASSIGN_OR_RETURN(store::ExperimentRecord rec, store_.GetExperiment(experiment_id));
  if (rec.state != store::ExperimentState::kRunning) {
    return Status::FailedPrecondition("experiment " + std::to_string(experiment_id) + " has ended (" +
                                      std::string(store::ToString(rec.state)) + ")");
  }
  std::vector<store::TrialRecord> created;
  {
    std::lock_guard lock(c->replenish_mu);
    HPO_ASSIGN_OR_RETURN(created, CreateSuggestions(experiment_id, *c, count, std::nullopt));
  }
  EmitCreated(experiment_id, created);
  std::vector<Assignment> out;
  for (const auto& t : created) {
    HPO_ASSIGN_OR_RETURN(auto leased, store_.LeaseTrial(t.id, kClientOwner, options_.client_lease_ms));
    Assignment a{leased, c->spec, ""};
    for (const auto& [name, id] : c->space_ids) {
      if (leased.space_id == id) a.space = name;
    }
    out.push_back(std::move(a));
  }
  return out;
}

Result<ReportReply> Engine::Report(const TrialReport& r) {
  const auto timer = TimeIf(report_seconds_);
  HPO_ASSIGN_OR_RETURN(store::TrialRecord trial, store_.GetTrial(r.trial_id));
  HPO_ASSIGN_OR_RETURN(Cached * c, Load(trial.experiment_id));
  const ExperimentSpec& spec = *c->spec;
  HPO_RETURN_IF_ERROR(CheckMetrics(r.metrics, "metrics"));
  HPO_RETURN_IF_ERROR(CheckSystem(r.system));
  auto it = r.metrics.find(spec.metric);
  if (it == r.metrics.end() || !it->is_number() || !std::isfinite(it->get<double>())) {
    return Status::InvalidArgument("metrics." + spec.metric +
                                   ": missing or not a finite number (it is the objective)");
  }
  HPO_ASSIGN_OR_RETURN(store::ExperimentRecord exp, store_.GetExperiment(trial.experiment_id));
  if (exp.state != store::ExperimentState::kRunning) {
    // The experiment ended while this trial ran: stop it.
    Status s = store_.FinishTrial(r.trial_id, r.owner, {TrialState::kCancelled, r.metrics.dump(),
                                                        "experiment " + std::string(store::ToString(exp.state))});
    if (!s.ok() && !s.IsFailedPrecondition()) return s;
    return ReportReply{Decision::kStop, std::nullopt, "experiment ended"};
  }
  store::Measurement m;
  m.step = r.step;
  m.metrics_json = r.metrics.dump();
  m.samples_per_sec = r.samples_per_sec;
  m.system_setting_json = r.system.dump();
  const int64_t lease = r.owner == kClientOwner ? options_.client_lease_ms : options_.worker_lease_ms;
  HPO_ASSIGN_OR_RETURN(auto reported, store_.ReportMeasurement(r.trial_id, r.owner, m, lease));
  if (reported.inserted && r.device_id && r.samples_per_sec > 0) {
    HPO_ASSIGN_OR_RETURN(std::string device_class, DeviceClass(*r.device_id));
    std::string space;
    for (const auto& [name, id] : c->space_ids) {
      if (trial.space_id == id) space = name;
    }
    const std::string workload = Workload(spec, space);
    HPO_RETURN_IF_ERROR(store_
                            .AddSpeedObservation({*r.device_id, device_class, workload, r.system.dump(),
                                                  r.samples_per_sec, r.trial_id})
                            .status());
    std::lock_guard lock(fleet_mu_);  // placement sees it on the next lease
    if (fleet_) fleet_->model.Observe(device_class, workload, scheduler::SettingKey(r.system), r.samples_per_sec);
  }
  if (reported.inserted) {
    Emit("trial.reported", {{"experiment_id", trial.experiment_id}, {"trial_id", r.trial_id},
                            {"step", r.step}, {"metrics", r.metrics}, {"samples_per_sec", r.samples_per_sec}});
  }

  // Early stopping on this space's trials, this report included. Without a
  // rule there is nothing to decide, and no reason to read every trial: the
  // report only goes into the cached view, if there is one (suggestions).
  const double value = search::Minimized(spec.direction, it->get<double>());
  HPO_ASSIGN_OR_RETURN(const bool prune, ApplyReport(trial, *c, r.step, value, reported.inserted,
                                                     spec.early_stopping != "none"));
  if (!prune) return CoTune(spec, r);
  const std::string why = "pruned by " + spec.early_stopping + " at step " + std::to_string(r.step);
  HPO_RETURN_IF_ERROR(store_.FinishTrial(r.trial_id, r.owner, {TrialState::kPruned, r.metrics.dump(), why}));
  UpdateCachedTrial(*c, r.trial_id, search::TrialStatus::kPruned, std::nullopt);
  Emit("trial.finished", {{"experiment_id", trial.experiment_id}, {"trial_id", r.trial_id},
                          {"state", "pruned"}, {"reason", why}});
  HPO_RETURN_IF_ERROR(MaybeFinish(trial.experiment_id, spec));
  if (spec.executor != ExperimentSpec::ExecutorKind::kClient) {
    HPO_RETURN_IF_ERROR(Replenish(trial.experiment_id, *c));
  }
  return ReportReply{Decision::kPrune, std::nullopt, why};
}

Result<ReportReply> Engine::CoTune(const ExperimentSpec& spec, const TrialReport& r) {
  ReportReply reply;
  std::vector<scheduler::SystemDimension> dims;
  for (const auto& p : spec.system) {
    if (!p.affects_accuracy) {
      dims.push_back({p.domain.name, scheduler::CandidateValues(p.domain), p.may_change_mid_trial});
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
  const auto next = scheduler::NextSetting(dims, history, r.system);
  if (scheduler::SettingKey(next.setting) != scheduler::SettingKey(r.system)) {
    reply.new_system = next.setting;
    reply.reason = next.reason;
  }
  return reply;
}

Result<Engine::FleetView*> Engine::FleetLocked(Id device_id, std::chrono::steady_clock::time_point asked) {
  if (fleet_ && fleet_->loaded + options_.fleet_cache >= asked && fleet_->device_classes.count(device_id)) {
    return &*fleet_;
  }
  FleetView v;
  v.loaded = std::chrono::steady_clock::now();
  HPO_ASSIGN_OR_RETURN(auto workers, store_.ListWorkers());
  HPO_ASSIGN_OR_RETURN(auto observations, store_.ListSpeedObservations("", 5000));
  for (const auto& w : workers) {
    for (const auto& d : w.devices) {
      v.fleet.Add(d.device_class);
      v.model.AddBenchmark(d.device_class, d.benchmark_gflops);
      v.device_classes[d.id] = d.device_class;
    }
  }
  for (const auto& o : observations) {
    const json setting = json::parse(o.system_setting_json, nullptr, false);
    if (!setting.is_discarded()) {
      v.model.Observe(o.device_class, o.workload, scheduler::SettingKey(setting), o.samples_per_sec);
    }
  }
  fleet_ = std::move(v);
  return &*fleet_;
}

Result<std::optional<store::TrialRecord>> Engine::LeasePlaced(Id experiment_id, Cached& c, Id worker_id,
                                                               Id device_id,
                                                               std::chrono::steady_clock::time_point asked) {
  const ExperimentSpec& spec = *c.spec;
  store::TrialFilter f;
  f.state = TrialState::kPending;
  f.limit = 500;
  HPO_ASSIGN_OR_RETURN(auto pending, store_.ListTrials(experiment_id, f));
  if (pending.size() < 2) return std::optional<store::TrialRecord>();  // nothing to choose
  std::map<Id, std::string> space_names;
  for (const auto& [name, id] : c.space_ids) space_names[id] = name;
  using namespace std::chrono;
  const int64_t now = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  std::vector<scheduler::PlacementCandidate> candidates;
  for (const auto& t : pending) {
    scheduler::PlacementCandidate pc;
    pc.trial_id = t.id;
    pc.space_priority = t.priority;  // the space's share when the trial was created
    pc.level = t.attempt;            // a requeued trial has waited before: favour it
    pc.workload = Workload(spec, t.space_id ? space_names[*t.space_id] : "");
    pc.steps_remaining = spec.steps_per_trial;
    pc.waiting_s = (now - t.created_ms) / 1000.0;
    candidates.push_back(std::move(pc));
  }
  std::optional<scheduler::PlacementDecision> choice;
  {
    std::lock_guard lock(fleet_mu_);
    HPO_ASSIGN_OR_RETURN(const FleetView* fleet, FleetLocked(device_id, asked));
    auto device_class = fleet->device_classes.find(device_id);
    if (device_class == fleet->device_classes.end()) return std::optional<store::TrialRecord>();  // not registered
    choice = scheduler::PlaceTrial({std::to_string(device_id), device_class->second}, fleet->fleet, candidates,
                                   fleet->model);
  }
  if (!choice) return std::optional<store::TrialRecord>();
  auto leased = store_.LeaseTrial(choice->trial_id, WorkerOwner(worker_id), options_.worker_lease_ms);
  // Another worker may have taken it meanwhile; the caller falls back.
  if (!leased.ok()) {
    if (leased.status().IsFailedPrecondition()) return std::optional<store::TrialRecord>();
    return leased.status();
  }
  return std::optional<store::TrialRecord>(std::move(leased).value());
}

Status Engine::StartAtBestSetting(const ExperimentSpec& spec, Id device_id,
                                  std::chrono::steady_clock::time_point asked, Assignment& a) {
  std::optional<std::string> best;
  {
    std::lock_guard lock(fleet_mu_);
    HPO_ASSIGN_OR_RETURN(const FleetView* fleet, FleetLocked(device_id, asked));
    auto device_class = fleet->device_classes.find(device_id);
    if (device_class == fleet->device_classes.end()) return Status::OK();  // not registered
    best = fleet->model.BestSetting(device_class->second, Workload(spec, a.space), kMinObservationsToReuseSetting);
  }
  if (!best) return Status::OK();
  // Only the tunable (throughput-only) parameters come from the remembered
  // best; the rest are the trial's own.
  json start = json::parse(a.trial.system_params_json, nullptr, false);
  const json remembered = json::parse(*best, nullptr, false);
  if (!start.is_object() || !remembered.is_object()) return Status::OK();
  for (const auto& p : spec.system) {
    if (!p.affects_accuracy && remembered.contains(p.domain.name)) start[p.domain.name] = remembered[p.domain.name];
  }
  a.trial.system_params_json = start.dump();
  return Status::OK();
}

Status Engine::Complete(Id trial_id, const std::string& owner, bool failed, const json& final_metrics,
                        const std::string& reason) {
  HPO_ASSIGN_OR_RETURN(store::TrialRecord trial, store_.GetTrial(trial_id));
  HPO_ASSIGN_OR_RETURN(Cached * c, Load(trial.experiment_id));
  const ExperimentSpec& spec = *c->spec;
  json metrics = final_metrics.is_object() ? final_metrics : json::object();
  HPO_RETURN_IF_ERROR(CheckMetrics(metrics, "final_metrics"));
  std::string why = reason;
  if (why.size() > kMaxReasonLength) why = why.substr(0, kMaxReasonLength) + "... (cut)";
  if (!failed && !metrics.contains(spec.metric)) {
    // The last report stands in for a missing final value.
    HPO_ASSIGN_OR_RETURN(auto ms, store_.ListMeasurements(trial_id));
    if (ms.empty()) {
      return Status::InvalidArgument("final_metrics." + spec.metric +
                                     ": missing, and the trial reported no steps to take it from");
    }
    json last = json::parse(ms.back().metrics_json, nullptr, false);
    if (last.is_object() && last.contains(spec.metric)) metrics[spec.metric] = last[spec.metric];
  }
  if (!failed && !(metrics[spec.metric].is_number() && std::isfinite(metrics[spec.metric].get<double>()))) {
    return Status::InvalidArgument("final_metrics." + spec.metric + ": must be a finite number");
  }
  HPO_RETURN_IF_ERROR(store_.FinishTrial(
      trial_id, owner, {failed ? TrialState::kFailed : TrialState::kCompleted, metrics.dump(), why}));
  UpdateCachedTrial(*c, trial_id, failed ? search::TrialStatus::kFailed : search::TrialStatus::kCompleted,
                    failed ? std::nullopt : Objective(spec, metrics.dump()));
  Emit("trial.finished", {{"experiment_id", trial.experiment_id}, {"trial_id", trial_id},
                          {"state", failed ? "failed" : "completed"}, {"metrics", metrics}});
  HPO_RETURN_IF_ERROR(MaybeFinish(trial.experiment_id, spec));
  if (spec.executor != ExperimentSpec::ExecutorKind::kClient) {
    HPO_ASSIGN_OR_RETURN(store::ExperimentRecord exp, store_.GetExperiment(trial.experiment_id));
    if (exp.state == store::ExperimentState::kRunning) return Replenish(trial.experiment_id, *c);
  }
  return Status::OK();
}

Status Engine::MaybeFinish(Id experiment_id, const ExperimentSpec& spec) {
  HPO_ASSIGN_OR_RETURN(store::TrialCounts n, store_.CountTrials(experiment_id));
  if (n.total() < spec.max_trials || n.pending + n.leased + n.running > 0) return Status::OK();
  const std::string why = "all " + std::to_string(spec.max_trials) + " trials finished";
  Status s = store_.FinishExperiment(experiment_id, store::ExperimentState::kCompleted, why);
  if (s.ok()) {
    Emit("experiment.finished", {{"experiment_id", experiment_id}, {"state", "completed"}, {"reason", why}});
  }
  return s.IsFailedPrecondition() ? Status::OK() : s;  // another thread or server got there first
}

std::string Engine::Workload(const ExperimentSpec& spec, const std::string& space) {
  std::string program = "client";
  if (spec.executor == ExperimentSpec::ExecutorKind::kBuiltin) {
    program = spec.trainer;
  } else if (spec.executor == ExperimentSpec::ExecutorKind::kCommand && !spec.argv.empty()) {
    const auto slash = spec.argv[0].rfind('/');
    program = spec.argv[0].substr(slash == std::string::npos ? 0 : slash + 1);
  }
  return program + "/" + space;
}

Result<std::string> Engine::DeviceClass(Id device_id) {
  {
    std::lock_guard lock(mu_);
    auto it = device_classes_.find(device_id);
    if (it != device_classes_.end()) return it->second;
  }
  HPO_ASSIGN_OR_RETURN(auto workers, store_.ListWorkers());
  std::lock_guard lock(mu_);
  for (const auto& w : workers) {
    for (const auto& d : w.devices) device_classes_[d.id] = d.device_class;
  }
  auto it = device_classes_.find(device_id);
  if (it == device_classes_.end()) {
    return Status::NotFound("device " + std::to_string(device_id) + " is not registered");
  }
  return it->second;
}

Result<std::optional<store::TrialRecord>> Engine::BestTrial(Id experiment_id) {
  HPO_ASSIGN_OR_RETURN(Cached * c, Load(experiment_id));
  std::optional<store::TrialRecord> best;
  double best_value = 0;
  store::TrialFilter f;
  f.state = TrialState::kCompleted;
  f.limit = 10'000;
  for (;; f.offset += f.limit) {
    HPO_ASSIGN_OR_RETURN(auto page, store_.ListTrials(experiment_id, f));
    for (auto& t : page) {
      auto v = Objective(*c->spec, t.final_metrics_json);
      if (v && (!best || *v < best_value)) {
        best_value = *v;
        best = std::move(t);
      }
    }
    if (static_cast<int64_t>(page.size()) < f.limit) break;
  }
  return best;
}

Status Engine::ReclaimExpiredLeases() {
  HPO_ASSIGN_OR_RETURN(const std::vector<Id> reclaimed, store_.ReclaimExpiredLeases(options_.max_attempts));
  for (const Id id : reclaimed) {
    HPO_ASSIGN_OR_RETURN(const store::TrialRecord t, store_.GetTrial(id));
    ForgetHistory(t.experiment_id);  // its curve is gone (or it failed): read again on the next report
    if (t.state == TrialState::kFailed) {
      Emit("trial.finished", {{"experiment_id", t.experiment_id}, {"trial_id", id}, {"state", "failed"},
                              {"reason", t.reason}});
    } else {
      Emit("trial.requeued", {{"experiment_id", t.experiment_id}, {"trial_id", id}, {"attempt", t.attempt}});
    }
  }
  return Status::OK();
}

Status Engine::Tick() {
  HPO_RETURN_IF_ERROR(ReclaimExpiredLeases());
  HPO_ASSIGN_OR_RETURN(auto experiments, store_.ListExperiments(0, 10'000));
  using namespace std::chrono;
  const int64_t now = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  for (const auto& e : experiments) {
    if (e.state != store::ExperimentState::kRunning) {
      ForgetHistory(e.id);  // nothing left to judge: free the memory
      continue;
    }
    HPO_ASSIGN_OR_RETURN(Cached * c, Load(e.id));
    const ExperimentSpec& spec = *c->spec;
    if (spec.max_wall_time_s && now - e.created_ms > *spec.max_wall_time_s * 1000) {
      const std::string why =
          "wall-time budget of " + std::to_string(*spec.max_wall_time_s) + " s reached";
      Status s = store_.FinishExperiment(e.id, store::ExperimentState::kCompleted, why);
      if (s.ok()) Emit("experiment.finished", {{"experiment_id", e.id}, {"state", "completed"}, {"reason", why}});
      if (!s.ok() && !s.IsFailedPrecondition()) return s;
      continue;
    }
    HPO_RETURN_IF_ERROR(MaybeFinish(e.id, spec));
  }
  return Status::OK();
}

}  // namespace hpo::server
