#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>

#include "scheduler/speed_model.h"
#include "search/pareto.h"
#include "search/ranking.h"
#include "search/registry.h"
#include "server/engine/engine_impl.h"
#include "server/engine/objectives.h"
#include "server/engine/report_check.h"

namespace hpo::server {

using nlohmann::json;
using store::Id;
using store::TrialState;

std::string_view ToString(Decision d) {
  switch (d) {
    case Decision::kContinue:
      return "continue";
    case Decision::kPrune:
      return "prune";
    case Decision::kStop:
      return "stop";
    case Decision::kPause:
      return "pause";
  }
  return "continue";
}

size_t MaxLength(FreeText field) {
  switch (field) {
    case FreeText::kFailureReason:
      return kMaxReasonLength;
    case FreeText::kLogTail:
      return kMaxLogTailLength;
    case FreeText::kCancelReason:
      return kMaxCancelReasonLength;
  }
  return kMaxReasonLength;
}

std::string CapText(FreeText field, std::string_view text) {
  const size_t limit = MaxLength(field);
  if (text.size() <= limit) return std::string(text);
  auto continuation = [&](size_t i) {
    return (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80;
  };
  if (field == FreeText::kLogTail) {
    // The end of a program's output says why it failed (the traceback, the
    // last error), so that is the part kept.
    constexpr std::string_view kNote = "(cut) ...";
    size_t from = text.size() - (limit - kNote.size());
    while (from < text.size() && continuation(from)) ++from;
    return std::string(kNote) + std::string(text.substr(from));
  }
  constexpr std::string_view kNote = "... (cut)";
  size_t end = limit - kNote.size();
  while (end > 0 && continuation(end)) --end;
  return std::string(text.substr(0, end)) + std::string(kNote);
}

namespace {

// The spec's numeric early-stopping options (its `type` and `promotion`
// are read by the parser), as search/registry.h takes them.
search::StoppingOptions StoppingOptionsOf(const ExperimentSpec& spec) {
  search::StoppingOptions out;
  for (const auto& [name, value] : spec.early_stopping_options.items()) {
    if (value.is_number()) out[name] = value.get<double>();
  }
  return out;
}

Result<std::unique_ptr<search::Pruner>> MakePruner(const ExperimentSpec& spec) {
  return search::MakeStoppingPruner(spec.early_stopping, StoppingOptionsOf(spec),
                                    spec.steps_per_trial);
}

Result<search::PromotionRule> MakePromotionRule(const ExperimentSpec& spec) {
  return search::MakePromotionRule(spec.early_stopping, StoppingOptionsOf(spec),
                                   spec.steps_per_trial, spec.promotion_criterion);
}

// Where a trial of each system parameter starts until the scheduler knows
// better: the middle of its domain (geometric middle for log domains).
json InitialSystem(const ExperimentSpec& spec) {
  json out = json::object();
  for (const auto& p : spec.system) out[p.domain.name] = p.domain.ToJson(p.domain.FromUnit(0.5));
  return out;
}

}  // namespace

EngineImpl::EngineImpl(store::Store& store, EngineOptions options)
    : store_(store),
      options_(std::move(options)),
      fleet_(std::make_unique<FleetView>(
          store_, options_.fleet_cache, std::chrono::milliseconds(options_.worker_lease_ms),
          [this] { return NowMs(); }, options_.steady_clock)) {
  if (auto* m = options_.metrics) {
    const auto buckets = metrics::ExponentialBuckets(0.0005, 2, 16);
    suggest_seconds_ = &m->histogram("hpo_suggest_duration_seconds",
                                     "Time to choose and store a batch of new trials", buckets);
    report_seconds_ = &m->histogram("hpo_report_duration_seconds",
                                    "Time to record a step and decide on early stopping", buckets);
    lease_seconds_ =
        &m->histogram("hpo_lease_duration_seconds", "Time to answer a worker's lease", buckets);
    leases_granted_ =
        &m->counter("hpo_leases_total", "Worker lease requests by outcome", {{"outcome", "trial"}});
    leases_empty_ =
        &m->counter("hpo_leases_total", "Worker lease requests by outcome", {{"outcome", "none"}});
    workers_gone_ = &m->counter("hpo_workers_gone_total",
                                "Workers this server marked gone (left, or unseen for several "
                                "lease timeouts)");
    kept_trials_ =
        &m->gauge("hpo_engine_kept_trials",
                  "Trials kept in memory for search and placement (the experiments' views and "
                  "their samplers' copies, a trial once per copy)");
  }
}

namespace {
// Where a trial of a stop-type asha or hyperband experiment may move
// (placement.migrate): the rungs of the rule (hyperband: of its first
// bracket) below the trial's budget.
std::vector<int64_t> MigrationRungSteps(const ExperimentSpec& spec) {
  const json& o = spec.early_stopping_options;
  const int64_t min_resource = o.value("min_resource", int64_t{1});
  const double eta = o.value("reduction_factor", 3.0);
  const int64_t skip =
      spec.early_stopping == "asha" ? o.value("min_early_stopping_rate", int64_t{0}) : 0;
  int64_t end = spec.steps_per_trial;
  if (const int64_t max = o.value("max_resource", int64_t{0}); max > 0) end = std::min(end, max);
  return search::RungStepsBelow(min_resource, eta, skip, end);
}

// Observes the enclosing call's duration when metrics are on.
std::optional<metrics::ScopedTimer> TimeIf(metrics::Histogram* h) {
  if (!h) return std::nullopt;
  return std::optional<metrics::ScopedTimer>(std::in_place, *h);
}

}  // namespace

Result<EngineImpl::Cached*> EngineImpl::Load(Id experiment_id) {
  if (Cached* c = Find(experiment_id)) return c;
  HPO_ASSIGN_OR_RETURN(store::ExperimentRecord rec, store_.GetExperiment(experiment_id));
  auto parsed = ParseStoredExperimentSpec(rec.spec_json);
  if (!parsed.ok()) {
    return Status::DataLoss(
        "experiment " + std::to_string(experiment_id) +
        " has a stored spec this server cannot read: " + parsed.status().message());
  }
  auto c = std::make_unique<Cached>();
  c->spec = std::make_shared<const ExperimentSpec>(std::move(parsed).value());
  c->spaces = SpaceMap(*c->spec, rec.spaces);
  HPO_ASSIGN_OR_RETURN(c->pruner, MakePruner(*c->spec));
  if (c->spec->early_stopping_type == ExperimentSpec::StoppingType::kPromotion) {
    HPO_ASSIGN_OR_RETURN(c->promotion, MakePromotionRule(*c->spec));
  }
  if (c->spec->placement_migrate) c->rung_steps = MigrationRungSteps(*c->spec);
  if (c->spec->budget) {
    HPO_ASSIGN_OR_RETURN(const store::Usage used, store_.ExperimentUsage(experiment_id));
    MutexLock lock(c->usage_mu);
    c->used = used;
  }
  c->trials = std::make_unique<TrialView>(store_, experiment_id, c->spec, options_.history_cache);
  Batcher<NewTrialRequest>::Options batches;
  batches.max_batch = kMaxNewTrialsPerBatch;
  c->new_trials = std::make_unique<Batcher<NewTrialRequest>>(
      batches, [this, experiment_id, cached = c.get()](const std::vector<NewTrialRequest*>& batch) {
        return MakeNewTrials(experiment_id, *cached, batch);
      });
  MutexLock lock(mu_);
  auto [it, inserted] = cache_.emplace(experiment_id, std::move(c));
  return it->second.get();
}

Result<EngineImpl::Cached*> EngineImpl::LoadUnlessUnreadable(Id experiment_id) {
  {
    // A stored spec never changes, so one that could not be read is not
    // read again on every lease.
    MutexLock lock(mu_);
    if (unreadable_.count(experiment_id)) return nullptr;
  }
  Result<Cached*> loaded = Load(experiment_id);
  if (loaded.ok() || loaded.status().code() != StatusCode::kDataLoss) return loaded;
  {
    MutexLock lock(mu_);
    if (!unreadable_.insert(experiment_id).second) return nullptr;
  }
  spdlog::warn("leases and ticks skip experiment {}: {}", experiment_id,
               loaded.status().ToString());
  return nullptr;
}

Result<std::shared_ptr<const ExperimentSpec>> EngineImpl::Spec(Id experiment_id) {
  HPO_ASSIGN_OR_RETURN(Cached * c, Load(experiment_id));
  return c->spec;
}

Result<ExperimentSpec> EngineImpl::ValidateExperiment(const std::string& spec_text) {
  HPO_ASSIGN_OR_RETURN(ExperimentSpec spec, ParseExperimentSpec(spec_text));
  // Options the spec parser cannot judge alone (e.g. ASHA's eta) are
  // checked here, before anything is written.
  auto pruner = MakePruner(spec);
  if (!pruner.ok()) return pruner.status().WithContext("early_stopping");
  if (spec.early_stopping_type == ExperimentSpec::StoppingType::kPromotion) {
    auto rule = MakePromotionRule(spec);
    if (!rule.ok()) return rule.status().WithContext("early_stopping");
  }
  HPO_RETURN_IF_ERROR(CheckCost(spec));
  return spec;
}

Result<store::ExperimentRecord> EngineImpl::CreateExperiment(const std::string& spec_text) {
  // One validation for both, so a dry run can never pass a spec that
  // creating it would refuse.
  HPO_ASSIGN_OR_RETURN(ExperimentSpec spec, ValidateExperiment(spec_text));
  store::NewExperiment e;
  e.name = spec.name;
  e.spec_json = spec.source.dump();
  for (const auto& s : spec.spaces) {
    json params = spec.source["spaces"][e.spaces.size()];
    e.spaces.push_back({s.name, params.dump()});
  }
  HPO_ASSIGN_OR_RETURN(store::ExperimentRecord rec, store_.CreateExperiment(e));
  ExperimentsChanged();
  // A worker experiment's trials are made when devices ask for work, each
  // for the device that asked (server/engine/lease.cc).
  Emit("experiment.created", {{"experiment_id", rec.id}, {"name", rec.name}});
  return rec;
}

Status EngineImpl::CancelExperiment(Id id, std::string_view reason) {
  const std::string why = CapText(FreeText::kCancelReason, reason);
  HPO_RETURN_IF_ERROR(store_.FinishExperiment(id, store::ExperimentState::kCancelled, why));
  ExperimentsChanged();
  Emit("experiment.finished", {{"experiment_id", id}, {"state", "cancelled"}, {"reason", why}});
  return Status::OK();
}

EngineImpl::Cached* EngineImpl::Find(Id experiment_id) {
  MutexLock lock(mu_);
  auto it = cache_.find(experiment_id);
  return it == cache_.end() ? nullptr : it->second.get();
}

void EngineImpl::ForgetHistory(Id experiment_id) {
  if (Cached* c = Find(experiment_id)) c->trials->Forget();
}

void EngineImpl::ForgetEnded(Id experiment_id) {
  Cached* c = Find(experiment_id);
  if (!c) return;
  c->trials->Forget();
  // Checked first, so that Tick waits for a batch of suggestions holding
  // replenish_mu only when there is a copy to drop.
  if (c->sampling_trials.load() == 0) return;
  MutexLock lock(c->replenish_mu);
  c->sampling = HistoriesCopy{};
  c->sampling_trials.store(0);
}

size_t EngineImpl::KeptTrials() {
  std::vector<Cached*> cached;
  {
    MutexLock lock(mu_);
    for (auto& [id, c] : cache_) cached.push_back(c.get());
  }
  size_t kept = 0;
  for (Cached* c : cached) kept += c->trials->Kept() + c->sampling_trials.load();
  return kept;
}

size_t EngineImpl::NewTrialsWaiting(Id experiment_id) {
  Cached* c = Find(experiment_id);
  return c ? c->new_trials->Queued() : 0;
}

Status EngineImpl::CheckStore() { return store_.SchemaVersion().status(); }
Result<store::ExperimentRecord> EngineImpl::GetExperiment(Id id) {
  return store_.GetExperiment(id);
}
Result<EngineImpl::ExperimentList> EngineImpl::RunningExperiments() {
  MutexLock lock(experiments_mu_);
  const auto now = std::chrono::steady_clock::now();
  if (running_experiments_ && now - running_experiments_read_ < options_.history_cache)
    return running_experiments_;
  HPO_ASSIGN_OR_RETURN(auto all, store_.ListExperiments(0, 10'000));
  std::vector<store::ExperimentRecord> running;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {  // oldest first
    if (it->state == store::ExperimentState::kRunning) running.push_back(std::move(*it));
  }
  running_experiments_ =
      std::make_shared<const std::vector<store::ExperimentRecord>>(std::move(running));
  running_experiments_read_ = now;
  return running_experiments_;
}

void EngineImpl::ExperimentsChanged() {
  MutexLock lock(experiments_mu_);
  running_experiments_.reset();
}

Result<std::vector<store::ExperimentRecord>> EngineImpl::ListExperiments(int64_t offset,
                                                                         int64_t limit) {
  return store_.ListExperiments(offset, limit);
}
Result<store::TrialCounts> EngineImpl::CountTrials(Id experiment_id) {
  return store_.CountTrials(experiment_id);
}
Result<std::vector<store::TrialEventRecord>> EngineImpl::ListTrialEvents(Id trial_id,
                                                                         int64_t limit) {
  return store_.ListTrialEvents(trial_id, limit);
}

void EngineImpl::KeepTrialEvent(const std::string& type, const json& data) const {
  static const std::set<std::string, std::less<>> kKept = {
      "trial.paused",        "trial.resumed",        "trial.moving",
      "trial.preempted",     "trial.requeued",       "trial.restarted",
      "trial.system_capped", "trial.system_unknown", "trial.cotuning_stopped"};
  if (!kKept.count(type)) return;
  const auto id = data.find("trial_id");
  if (id == data.end() || !id->is_number_integer()) return;
  json kept = data;  // what the trial's own row does not say
  for (const char* key : {"experiment_id", "trial_id", "number"}) kept.erase(key);
  const Status s = store_.AddTrialEvent(id->get<Id>(), type, kept.dump());
  if (!s.ok()) {
    spdlog::warn("trial id {}: its {} event was not kept: {}", id->get<Id>(), type, s.ToString());
  }
}

Result<store::Usage> EngineImpl::ExperimentUsage(Id experiment_id) {
  return store_.ExperimentUsage(experiment_id);
}

Result<std::map<Id, store::TrialProgress>> EngineImpl::ListTrialProgress(Id experiment_id,
                                                                         int64_t first_number,
                                                                         int64_t last_number) {
  HPO_ASSIGN_OR_RETURN(Cached * c, Load(experiment_id));
  const store::Objective objective{c->spec->metric,
                                   c->spec->direction == search::Direction::kMaximize};
  return store_.ListTrialProgress(experiment_id, first_number, last_number, objective);
}

double EngineImpl::BudgetLeft(Cached& c) {
  if (!c.spec->budget) return std::numeric_limits<double>::infinity();
  MutexLock lock(c.usage_mu);
  return *c.spec->budget - c.used.cost;
}

void EngineImpl::StartCharge(Id trial_id) {
  const int64_t now = NowMs();
  MutexLock lock(charge_mu_);
  if (charged_until_ms_.size() >= kMaxTrialHomes) charged_until_ms_.clear();
  charged_until_ms_[trial_id] = now;
}

int64_t EngineImpl::ChargeDeviceMs(Id trial_id) {
  const int64_t now = NowMs();
  MutexLock lock(charge_mu_);
  if (charged_until_ms_.size() >= kMaxTrialHomes) charged_until_ms_.clear();
  const auto [it, first] = charged_until_ms_.try_emplace(trial_id, now);
  const int64_t since = first ? now : it->second;
  it->second = std::max(it->second, now);
  return std::max<int64_t>(0, now - since);
}
Result<store::TrialRecord> EngineImpl::GetTrial(Id id) { return store_.GetTrial(id); }
Result<std::vector<store::TrialRecord>> EngineImpl::ListTrials(Id experiment_id,
                                                               const store::TrialFilter& filter) {
  return store_.ListTrials(experiment_id, filter);
}
Result<std::vector<store::TrialRecord>> EngineImpl::ListLeasedTrials(int64_t limit) {
  return store_.ListLeasedTrials(limit);
}
Result<std::vector<store::MeasurementRecord>> EngineImpl::ListMeasurements(Id trial_id) {
  return store_.ListMeasurements(trial_id);
}
Result<std::vector<store::MeasurementRecord>> EngineImpl::ListExperimentMeasurements(
    Id experiment_id) {
  return store_.ListExperimentMeasurements(experiment_id);
}
Result<std::vector<store::MeasurementRecord>> EngineImpl::ListExperimentMeasurementsSince(
    Id experiment_id, int64_t since) {
  return store_.ListExperimentMeasurementsSince(experiment_id, since);
}
Result<store::ReadCursor> EngineImpl::ReadHorizon() { return store_.ReadHorizon(); }
Result<std::vector<store::WorkerRecord>> EngineImpl::ListWorkers() { return store_.ListWorkers(); }
Result<MeasuredSpeeds> EngineImpl::Measured() { return fleet_->Measured(FleetView::Clock::now()); }
Result<std::vector<store::SpeedObservationRecord>> EngineImpl::ListSpeedObservations(
    std::string_view workload, int64_t limit) {
  return store_.ListSpeedObservations(workload, limit);
}

search::Rng EngineImpl::ExperimentRng(const ExperimentSpec& spec, Id experiment_id,
                                      size_t trials_so_far) {
  // Deterministic for (seed, experiment, how far it got): a restarted server
  // suggests what the old one would have.
  return search::Rng(spec.seed).Fork(static_cast<uint64_t>(experiment_id)).Fork(trials_so_far);
}

Result<std::vector<store::TrialRecord>> EngineImpl::CreateSuggestions(
    Id experiment_id, Cached& c, const std::vector<NewTrialFor>& wanted,
    std::optional<int64_t> max_unfinished) {
  const auto timer = TimeIf(suggest_seconds_);
  const ExperimentSpec& spec = *c.spec;
  // The cached view, kept current with this engine's changes: the same
  // trials a fresh read would give on one server (another replica's newest
  // count within history_cache).
  // A copy: sampling (a GP fit can take tens of milliseconds) and the
  // store's insert must not hold the lock that reports and leases read the
  // view under. It is this experiment's one copy, brought up to date with
  // what changed since the last batch; the caller's replenish_mu guards it.
  std::vector<search::SpaceRank> ranks;
  {
    HPO_ASSIGN_OR_RETURN(TrialView::Locked view, c.trials->Fresh());
    c.sampling.Update(*view);
    ranks = SpaceRanking(*view, spec.spaces);  // of the same histories, kept with the view
  }
  const std::vector<search::History>& histories = c.sampling.histories;
  size_t total = 0;
  for (const auto& h : histories) total += h.trials.size();
  c.sampling_trials.store(total);
  search::Rng rng = ExperimentRng(spec, experiment_id, total);
  std::vector<int> per_space_so_far;
  per_space_so_far.reserve(histories.size());
  for (const auto& h : histories) per_space_so_far.push_back(static_cast<int>(h.trials.size()));
  // Each wanted trial's space, in order, counting the batch's earlier ones.
  std::vector<size_t> space_of;
  std::vector<int> per_space_wanted(spec.spaces.size(), 0);
  for (const auto& w : wanted) {
    int s = search::PickSpace(ranks, per_space_so_far);
    if (w.space && *w.space >= 0 && static_cast<size_t>(*w.space) < spec.spaces.size()) {
      int64_t so_far = 0;
      for (int n : per_space_so_far) so_far += n;
      if (search::BelowShareAfterOneMore(ranks[*w.space].share, so_far, per_space_so_far[*w.space]))
        s = *w.space;
    }
    ++per_space_so_far[s];
    ++per_space_wanted[s];
    space_of.push_back(static_cast<size_t>(s));
  }
  HPO_ASSIGN_OR_RETURN(auto sampler, search::MakeSampler(spec.sampler, {}, "algorithm.sampler"));
  const json system = InitialSystem(spec);
  // One Suggest per space, for all of its trials; handed out in order.
  std::vector<std::vector<search::Assignment>> suggested(spec.spaces.size());
  std::vector<size_t> next(spec.spaces.size(), 0);
  for (size_t s = 0; s < spec.spaces.size(); ++s) {
    if (per_space_wanted[s] > 0) {
      suggested[s] = sampler->Suggest(spec.spaces[s], histories[s], per_space_wanted[s], rng);
    }
  }
  std::vector<store::NewTrial> trials;
  for (size_t i = 0; i < wanted.size(); ++i) {
    const size_t s = space_of[i];
    if (next[s] >= suggested[s].size()) break;  // a sampler that gave fewer: the rest are not made
    const json params = spec.spaces[s].ToJson(suggested[s][next[s]++]);
    store::NewTrial t;
    t.space_id = c.spaces.IdOf(spec.spaces[s].name).value();
    t.params_json = params.dump();
    // A system parameter searched as a hyperparameter runs as sampled.
    json trial_system = system;
    for (const auto& p : spec.system) {
      if (p.affects_accuracy && params.contains(p.domain.name))
        trial_system[p.domain.name] = params[p.domain.name];
    }
    t.system_params_json = trial_system.dump();
    t.priority = ranks[s].share;  // higher-priority spaces are leased first
    t.lease_owner = wanted[i].owner;
    t.lease_ms = wanted[i].lease_ms;
    if (wanted[i].to_first_rung && c.promotion) {
      // Its number, on one server: the trials so far and the batch's earlier ones.
      const int64_t first = c.promotion->FirstStop(static_cast<int64_t>(total + i));
      if (first < spec.steps_per_trial) t.stop_step = first;
    }
    trials.push_back(std::move(t));
  }
  // The caller emits "trial.created" once it has let go of the view: on
  // PostgreSQL each event is a NOTIFY, a store call of its own.
  HPO_ASSIGN_OR_RETURN(auto created, store_.CreateTrialsUpTo(experiment_id, trials,
                                                             {spec.max_trials, max_unfinished}));
  for (const auto& t : created) c.trials->Apply(t);
  return created;
}

std::vector<Status> EngineImpl::MakeNewTrials(Id experiment_id, Cached& c,
                                              const std::vector<NewTrialRequest*>& batch) {
  std::vector<NewTrialFor> wanted;
  wanted.reserve(batch.size());
  for (const NewTrialRequest* r : batch) wanted.push_back(r->wanted);
  Result<std::vector<store::TrialRecord>> created =
      [&]() -> Result<std::vector<store::TrialRecord>> {
    MutexLock lock(c.replenish_mu);
    return CreateSuggestions(experiment_id, c, wanted, c.spec->max_parallel);
  }();
  if (!created.ok()) return std::vector<Status>(batch.size(), created.status());
  for (size_t i = 0; i < created->size() && i < batch.size(); ++i)
    batch[i]->made = std::move((*created)[i]);
  return std::vector<Status>(batch.size(), Status::OK());
}

void EngineImpl::EmitCreated(Id experiment_id, const Cached& c,
                             const std::vector<store::TrialRecord>& created,
                             const json& placed) const {
  for (const auto& t : created) {
    json space = nullptr;
    if (t.space_id) {
      if (const std::string& name = c.spaces.NameOf(*t.space_id); !name.empty()) space = name;
    }
    json params = json::parse(t.params_json, nullptr, false);
    if (params.is_discarded())
      params = json::object();  // unreadable: not expected of what the engine wrote
    json data = {{"experiment_id", experiment_id},
                 {"trial_id", t.id},
                 {"number", t.number},
                 {"space", std::move(space)},
                 {"params", std::move(params)},
                 {"state", std::string(store::ToString(t.state))},
                 {"level", t.level}};
    if (placed.is_object()) data.update(placed);
    Emit("trial.created", data);
  }
}

Result<std::vector<Lease>> EngineImpl::Suggest(Id experiment_id, int count) {
  if (count < 1 || count > 1000)
    return Status::InvalidArgument("count: must be between 1 and 1000");
  HPO_ASSIGN_OR_RETURN(Cached * c, Load(experiment_id));
  if (c->spec->executor != ExperimentSpec::ExecutorKind::kClient) {
    return Status::FailedPrecondition(
        "experiment " + std::to_string(experiment_id) +
        " runs on workers; only client experiments take suggest calls");
  }
  HPO_ASSIGN_OR_RETURN(const store::ExperimentState state,
                       store_.GetExperimentState(experiment_id));
  if (state != store::ExperimentState::kRunning) {
    return Status::FailedPrecondition("experiment " + std::to_string(experiment_id) +
                                      " has ended (" + std::string(store::ToString(state)) + ")");
  }
  // Created leased to the client: one write per batch, not one per trial
  // more (on SQLite each write is an fsync).
  NewTrialFor client;  // in the space ranking's pick
  client.owner = kClientOwner;
  client.lease_ms = options_.client_lease_ms;
  std::vector<store::TrialRecord> created;
  {
    MutexLock lock(c->replenish_mu);
    HPO_ASSIGN_OR_RETURN(
        created, CreateSuggestions(experiment_id, *c, std::vector<NewTrialFor>(count, client),
                                   std::nullopt));
  }
  EmitCreated(experiment_id, *c, created);
  std::vector<Lease> out;
  for (const auto& t : created) {
    RememberHome(t);
    Lease a{t, c->spec, t.space_id ? c->spaces.NameOf(*t.space_id) : std::string()};
    out.push_back(std::move(a));
  }
  return out;
}

Result<ReportReply> EngineImpl::Report(const WorkerCaller& caller, TrialReport report) {
  HPO_ASSIGN_OR_RETURN(const WorkerAuth auth, Authenticate(caller));
  // A device of another worker (or none) would otherwise be credited with
  // this worker's speed.
  if (report.device_id) HPO_RETURN_IF_ERROR(CheckDevice(caller, auth, *report.device_id));
  report.owner = WorkerOwner(caller.worker_id);
  return Report(report);
}

Result<EngineImpl::TrialHome> EngineImpl::HomeOf(Id trial_id) {
  {
    MutexLock lock(homes_mu_);
    if (const auto it = trial_homes_.find(trial_id); it != trial_homes_.end()) return it->second;
  }
  HPO_ASSIGN_OR_RETURN(const store::TrialRecord trial, store_.GetTrial(trial_id));
  RememberHome(trial);
  return TrialHome{trial.experiment_id, trial.space_id, trial.number};
}

void EngineImpl::RememberHome(const store::TrialRecord& trial) {
  MutexLock lock(homes_mu_);
  if (trial_homes_.size() >= kMaxTrialHomes) trial_homes_.clear();
  trial_homes_[trial.id] = TrialHome{trial.experiment_id, trial.space_id, trial.number};
}

Result<ReportReply> EngineImpl::StopForEndedExperiment(const TrialReport& r, Id experiment_id,
                                                       store::ExperimentState state) {
  // A completed experiment's reason is the server's own, short ("wall-time
  // budget of 840 s reached"), and the trials it cut while running (at most
  // its parallelism) carry it: "experiment completed: wall-time budget ...".
  // A cancel's reason is the user's, kept once on the experiment.
  std::string why = "experiment " + std::string(store::ToString(state));
  if (state == store::ExperimentState::kCompleted) {
    if (auto e = store_.GetExperiment(experiment_id); e.ok() && !e->reason.empty()) {
      why += ": " + CapText(FreeText::kFailureReason, e->reason);
    }
  }
  auto s = store_.FinishTrial(r.trial_id, r.owner, {TrialState::kCancelled, r.metrics.dump(), why});
  // FailedPrecondition: the experiment's end finished it already.
  if (!s.ok() && !s.status().IsFailedPrecondition()) return s.status();
  return ReportReply{Decision::kStop, std::nullopt, "experiment ended"};
}

Result<ReportReply> EngineImpl::Report(const TrialReport& given) {
  const auto timer = TimeIf(report_seconds_);
  HPO_ASSIGN_OR_RETURN(const TrialHome home, HomeOf(given.trial_id));
  HPO_ASSIGN_OR_RETURN(Cached * c, Load(home.experiment_id));
  const ExperimentSpec& spec = *c->spec;
  // Before anything is stored (report_check.h).
  HPO_ASSIGN_OR_RETURN(TrialReport r, CheckedReport(spec, given));
  // Known before anything is written: an unregistered device is an error,
  // not a stored step followed by one.
  std::optional<FleetView::Known> device;
  std::optional<std::string> device_class;
  if (r.device_id) {
    HPO_ASSIGN_OR_RETURN(device, fleet_->Device(*r.device_id));
    device_class = device->device_class;
  }
  // A lease that ends at a rung covers the steps up to its stop_step and no
  // further, which the store's write checks: a later step would carry the
  // trial past the rung before any promotion decided it, and the pause that
  // follows (of that step) would leave the trial a step ahead of its rung,
  // so that its promotion's lease resumes after the step it is told to stop
  // at.
  store::Measurement m;
  m.step = r.step;
  m.metrics_json = r.metrics.dump();
  m.samples_per_sec = r.samples_per_sec;
  m.system_setting_json = r.system.dump();
  if (device) {
    // The device's time on this step, at its price under the spec.
    m.device_ms = ChargeDeviceMs(r.trial_id);
    const std::optional<double> price = PricePerHour(spec, device->device_class, device->labels);
    m.cost = price.value_or(0) * static_cast<double>(m.device_ms) / 3'600'000.0;
    m.device_id = r.device_id;
    m.device_class = device->device_class;
  }
  if (spec.UsesDerivedMetrics()) {
    // The trial's totals so far, this step included, as metrics of the
    // step: what its rungs and its known constraints read.
    HPO_ASSIGN_OR_RETURN(const auto earlier, store_.ListMeasurements(r.trial_id));
    AddDerivedMetrics(spec, earlier, r.step, &m, r.metrics);
    m.metrics_json = r.metrics.dump();
  }
  const int64_t lease =
      r.owner == kClientOwner ? options_.client_lease_ms : options_.worker_lease_ms;
  const std::string space = home.space_id ? c->spaces.NameOf(*home.space_id) : std::string();
  const std::string workload = Workload(spec, space);
  const bool measured = device_class && r.samples_per_sec > 0;
  std::optional<store::SpeedObservation> speed;
  if (measured) {
    speed = store::SpeedObservation{*r.device_id,          *device_class,     workload,
                                    m.system_setting_json, r.samples_per_sec, r.trial_id};
  }
  // The step and its speed in one transaction, which also reads whether the
  // experiment still runs.
  auto report_result = store_.ReportMeasurement(r.trial_id, r.owner, m, lease, speed);
  if (!report_result.ok()) {
    // Ending an experiment cancels its trials: their workers are told to
    // stop, as the report below is, rather than answered an error. A
    // completed experiment leaves them running: one refused for another
    // reason (a step past its stop_step) is cancelled here, as below.
    if (report_result.status().IsFailedPrecondition()) {
      auto state = store_.GetExperimentState(home.experiment_id);
      if (state.ok() && *state != store::ExperimentState::kRunning) {
        return StopForEndedExperiment(r, home.experiment_id, *state);
      }
    }
    return report_result.status();
  }
  const store::ReportResult reported = std::move(report_result).value();
  const store::TrialRecord& trial = reported.trial;  // as the report left it
  if (reported.inserted && spec.budget) {
    MutexLock lock(c->usage_mu);
    c->used.device_ms += m.device_ms;
    c->used.cost += m.cost;
  }
  if (reported.inserted && measured) {
    // Placement sees it on the next lease.
    fleet_->Observe(
        *r.device_id, *device_class, workload, r.step, {trial.attempt, trial.resume_step},
        {r.samples_per_sec, r.system.is_object() ? r.system : json::object(), NowMs(), r.trial_id});
    // The device is busy with what is left of this lease, at the speed it
    // just measured: placement's free time for it (hold-back, migration)
    // follows the trial, rather than the lease's first guess, which is 0
    // on a device not yet measured.
    const int64_t lease_end = trial.stop_step.value_or(spec.steps_per_trial);
    const double per_step = fleet_->SamplesPerStep(workload);
    if (per_step > 0 && lease_end > r.step) {
      fleet_->SetBusy(*r.device_id,
                      static_cast<double>(lease_end - r.step) * per_step / r.samples_per_sec);
    }
  }
  if (reported.inserted) {
    Emit("trial.reported", {{"experiment_id", trial.experiment_id},
                            {"trial_id", r.trial_id},
                            {"number", trial.number},
                            {"step", r.step},
                            {"metrics", r.metrics},
                            {"samples_per_sec", r.samples_per_sec},
                            {"system", r.system}});
  }
  if (reported.experiment_state != store::ExperimentState::kRunning) {
    // The experiment ended while this trial ran: its step is kept, and the
    // trial stops.
    return StopForEndedExperiment(r, home.experiment_id, reported.experiment_state);
  }

  // Stopping-type early stopping on this space's trials, this report
  // included. Without such a rule there is nothing to decide, and no reason
  // to read every trial: the report only goes into the cached view, if
  // there is one (suggestions, placement). Promotion-type rules judge when
  // a device asks for work instead (server/engine/lease.cc).
  const std::optional<ObjectiveReading> point = PointOf(spec, r.metrics);
  if (!point) return Status::Internal("a checked report without its objective");
  const bool judge = spec.early_stopping != "none" &&
                     spec.early_stopping_type == ExperimentSpec::StoppingType::kStop;
  HPO_ASSIGN_OR_RETURN(const bool prune,
                       c->trials->ApplyReport(trial, r.step, *point, reported.inserted,
                                              judge ? c->pruner.get() : nullptr));
  if (!prune) {
    // The lease ends at a rung (promotion-type early stopping): the worker
    // saves and uploads the checkpoint, then pauses the trial.
    if (trial.stop_step && *trial.stop_step < spec.steps_per_trial && r.step >= *trial.stop_step) {
      SegmentEnded(*c, r.trial_id);
      return ReportReply{Decision::kPause, std::nullopt,
                         "pause after step " + std::to_string(*trial.stop_step) + " (rung " +
                             std::to_string(trial.level) + ")"};
    }
    if (spec.placement_migrate && r.device_id && reported.inserted) {
      if (std::optional<ReportReply> moved = MaybeMove(*c, trial, r, workload)) return *moved;
    }
    return CoTune(trial, spec, r, reported.inserted, workload);
  }
  const std::string why = "pruned by " + spec.early_stopping + " at step " + std::to_string(r.step);
  auto finished =
      store_.FinishTrial(r.trial_id, r.owner, {TrialState::kPruned, r.metrics.dump(), why});
  // FailedPrecondition: it ended meanwhile (another of its reports pruned
  // it, or the experiment ended); either way the worker stops, and it was
  // not this call that ended it.
  if (!finished.ok() && !finished.status().IsFailedPrecondition()) return finished.status();
  if (!finished.ok() || *finished == store::FinishResult::kRepeated) {
    return ReportReply{Decision::kPrune, std::nullopt, why};
  }
  c->trials->SetOutcome(r.trial_id, TrialState::kPruned, std::nullopt);
  SegmentEnded(*c, r.trial_id);
  if (r.device_id) fleet_->SetIdle(*r.device_id);
  if (MayHaveCheckpoint(*c, trial.level, trial.resume_step)) DeleteCheckpoint(r.trial_id);
  Emit("trial.finished", {{"experiment_id", trial.experiment_id},
                          {"trial_id", r.trial_id},
                          {"number", trial.number},
                          {"state", "pruned"},
                          {"reason", why},
                          {"metrics", r.metrics}});
  HPO_RETURN_IF_ERROR(MaybeFinish(trial.experiment_id, *c));
  return ReportReply{Decision::kPrune, std::nullopt, why};
}

Status EngineImpl::Complete(Id trial_id, const std::string& owner, bool failed,
                            const json& final_metrics, const std::string& reason) {
  return Finish(trial_id, owner, failed, final_metrics, CapText(FreeText::kFailureReason, reason));
}

Status EngineImpl::Complete(const WorkerCaller& caller, Id trial_id, bool failed,
                            const json& final_metrics, const std::string& reason,
                            const std::string& log_tail) {
  HPO_RETURN_IF_ERROR(Authenticate(caller).status());
  // Each part is cut to its own limit, so a long reason cannot push the
  // output's end (usually the real error) out.
  std::string why = CapText(FreeText::kFailureReason, reason);
  if (failed && !log_tail.empty()) {
    if (!why.empty()) why += "\n";
    why += CapText(FreeText::kLogTail, log_tail);
  }
  return Finish(trial_id, WorkerOwner(caller.worker_id), failed, final_metrics, why);
}

Status EngineImpl::Finish(Id trial_id, const std::string& owner, bool failed,
                          const json& final_metrics, const std::string& why) {
  HPO_ASSIGN_OR_RETURN(const TrialHome home, HomeOf(trial_id));
  HPO_ASSIGN_OR_RETURN(Cached * c, Load(home.experiment_id));
  const ExperimentSpec& spec = *c->spec;
  json metrics = final_metrics.is_object() ? final_metrics : json::object();
  HPO_RETURN_IF_ERROR(CheckMetrics(metrics, "final_metrics"));
  if (!failed) HPO_RETURN_IF_ERROR(CompleteFinalMetrics(spec, trial_id, metrics));
  const store::FinishRequest f{failed ? TrialState::kFailed : TrialState::kCompleted,
                               metrics.dump(), why};
  HPO_ASSIGN_OR_RETURN(const store::FinishResult finished, store_.FinishTrial(trial_id, owner, f));
  // The owner's same finish again (a retried call): acknowledged, and
  // nothing is announced, counted or cached twice.
  if (finished == store::FinishResult::kRepeated) return Status::OK();
  c->trials->SetOutcome(trial_id, failed ? TrialState::kFailed : TrialState::kCompleted,
                        failed ? std::nullopt : PointOf(spec, metrics));
  SegmentEnded(*c, trial_id);
  // As the view knows the trial; one the view does not hold may have one.
  const std::optional<TrialEntry> entry = c->trials->Find(trial_id);
  if (!entry || MayHaveCheckpoint(*c, entry->level, entry->resume_step)) DeleteCheckpoint(trial_id);
  json event = {{"experiment_id", home.experiment_id},
                {"trial_id", trial_id},
                {"number", home.number},
                {"state", failed ? "failed" : "completed"},
                {"metrics", metrics}};
  if (failed) event["reason"] = why;
  Emit("trial.finished", event);
  return MaybeFinish(home.experiment_id, *c);
}

Status EngineImpl::CompleteFinalMetrics(const ExperimentSpec& spec, Id trial_id, json& metrics) {
  // Every objective the trial must report (the derived ones are the
  // server's): a missing one is taken from its last report that has it.
  std::vector<std::string> needed;
  for (const auto& o : spec.objectives) {
    if (!IsDerivedMetric(o.metric) && !metrics.contains(o.metric)) needed.push_back(o.metric);
  }
  std::vector<store::MeasurementRecord> ms;
  if (!needed.empty() || spec.UsesDerivedMetrics()) {
    HPO_ASSIGN_OR_RETURN(ms, store_.ListMeasurements(trial_id));
  }
  for (const std::string& metric : needed) {
    for (auto m = ms.rbegin(); m != ms.rend(); ++m) {
      const json step = json::parse(m->metrics_json, nullptr, false);
      if (step.is_object() && step.contains(metric)) {
        metrics[metric] = step[metric];
        break;
      }
    }
    if (!metrics.contains(metric)) {
      return Status::InvalidArgument(
          "final_metrics." + metric + ": missing, and " +
          (ms.empty() ? std::string("the trial reported no steps to take it from")
                      : "none of the trial's reports has it") +
          (spec.SeveralObjectives() ? " (every objective places a trial on the front)" : ""));
    }
  }
  for (const auto& o : spec.objectives) {
    if (IsDerivedMetric(o.metric)) continue;
    const json& v = metrics[o.metric];
    if (!(v.is_number() && std::isfinite(v.get<double>())))
      return Status::InvalidArgument("final_metrics." + o.metric + ": must be a finite number");
  }
  AddDerivedMetrics(spec, ms, std::nullopt, nullptr, metrics);
  return Status::OK();
}

Status EngineImpl::MaybeFinish(Id experiment_id, Cached& c, bool after_change) {
  const ExperimentSpec& spec = *c.spec;
  if (after_change) {
    const size_t kept = c.trials->Kept();  // 0: no view (forgotten): ask the store
    if (kept > 0 && static_cast<int64_t>(kept) < spec.max_trials) return Status::OK();
  }
  HPO_ASSIGN_OR_RETURN(store::TrialCounts n, store_.CountTrials(experiment_id));
  if (n.total() < spec.max_trials || n.pending + n.leased + n.running > 0) return Status::OK();
  // Stop-type: a paused trial is moving to another device, or was preempted.
  if (n.paused > 0 && !c.promotion) return Status::OK();
  if (n.paused > 0 && c.promotion) {
    // A paused trial that may still be promoted is work to do.
    HPO_ASSIGN_OR_RETURN(TrialView::Locked view, c.trials->Fresh());
    for (size_t s = 0; s < view->histories.size(); ++s) {
      std::vector<search::PausedTrial> paused;
      for (const auto& [id, t] : view->trials) {
        if (t.space == s && t.state == TrialState::kPaused) paused.push_back({t.index, t.level});
      }
      if (!paused.empty() && !c.promotion->Promotable(view->histories[s], paused).empty())
        return Status::OK();
    }
  }
  const std::string why = "all " + std::to_string(spec.max_trials) + " trials finished";
  Status s = store_.FinishExperiment(experiment_id, store::ExperimentState::kCompleted, why);
  if (s.ok()) {
    ExperimentsChanged();
    c.trials->Forget();  // its paused trials were pruned with it
    Emit("experiment.finished",
         {{"experiment_id", experiment_id}, {"state", "completed"}, {"reason", why}});
  }
  return s.IsFailedPrecondition() ? Status::OK() : s;  // another thread or server got there first
}

std::string Engine::Workload(const ExperimentSpec& spec, const std::string& space) {
  for (size_t i = 0; i < spec.spaces.size(); ++i) {
    if (spec.spaces[i].name != space) continue;
    return i < spec.workload_keys.size() ? spec.workload_keys[i] : WorkloadKey(spec, i);
  }
  return spec.workload.empty() ? "unknown/" + space : spec.workload + "/" + space;
}

Status EngineImpl::ForEachCompleted(Id experiment_id,
                                    const std::function<void(store::TrialRecord&)>& visit) {
  store::TrialFilter f;
  f.state = TrialState::kCompleted;
  f.limit = 10'000;
  // Keyset pages (by number): each page reads from the index where the last ended.
  for (;;) {
    HPO_ASSIGN_OR_RETURN(auto page, store_.ListTrials(experiment_id, f));
    if (!page.empty()) f.after_number = page.back().number;
    for (auto& t : page) visit(t);
    if (static_cast<int64_t>(page.size()) < f.limit) return Status::OK();
  }
}

Result<std::vector<RankedTrial>> EngineImpl::RankTrials(Id experiment_id) {
  HPO_ASSIGN_OR_RETURN(Cached * c, Load(experiment_id));
  const ExperimentSpec& spec = *c->spec;
  std::vector<RankedTrial> out;
  std::vector<search::ObjectivePoint> points;  // of the feasible ones, minimized
  std::vector<size_t> feasible;                // their places in `out`
  HPO_RETURN_IF_ERROR(ForEachCompleted(experiment_id, [&](store::TrialRecord& t) {
    const json metrics = json::parse(t.final_metrics_json, nullptr, false);
    RankedTrial r;
    search::ObjectivePoint point;
    for (const auto& o : spec.objectives) {
      const json v = metrics.is_object() ? metrics.value(o.metric, json()) : json();
      if (!v.is_number() || !std::isfinite(v.get<double>())) break;
      r.values.push_back(v.get<double>());
      point.push_back(search::Minimized(o.direction, v.get<double>()));
    }
    if (r.values.size() < spec.objectives.size()) {
      // Stored before its objectives were required (an older server).
      r.feasible = false;
      r.reasons.push_back("an objective is missing from its final metrics");
    } else {
      const Feasibility feasibility = FeasibilityOf(spec, metrics);
      r.feasible = feasibility.feasible;
      r.reasons = feasibility.reasons;
    }
    if (r.feasible) {
      feasible.push_back(out.size());
      points.push_back(std::move(point));
    }
    r.trial = std::move(t);
    out.push_back(std::move(r));
  }));
  std::vector<int> ranks(points.size());
  if (spec.SeveralObjectives()) {
    // Front by front, with no list of who dominates whom (at 10,000
    // trials that list alone would be hundreds of megabytes).
    ranks = search::FirstFronts(points, points.size());
  } else {
    // One objective: the rank of each distinct value, best first.
    std::vector<double> sorted;
    sorted.reserve(points.size());
    for (const auto& p : points) sorted.push_back(p[0]);
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    for (size_t i = 0; i < points.size(); ++i) {
      ranks[i] = static_cast<int>(std::lower_bound(sorted.begin(), sorted.end(), points[i][0]) -
                                  sorted.begin());
    }
  }
  for (size_t i = 0; i < feasible.size(); ++i) out[feasible[i]].rank = ranks[i];
  return out;
}

Result<std::optional<BestTrialResult>> EngineImpl::BestTrial(Id experiment_id) {
  HPO_ASSIGN_OR_RETURN(Cached * c, Load(experiment_id));
  const ExperimentSpec& spec = *c->spec;
  std::optional<BestTrialResult> best;
  double best_value = 0;
  bool any_completed = false;  // (outside the constraints)
  HPO_RETURN_IF_ERROR(ForEachCompleted(experiment_id, [&](store::TrialRecord& t) {
    auto v = ObjectiveOf(spec, t.final_metrics_json);
    // With constraints, the best feasible trial.
    if (v && !spec.constraints.empty() &&
        !FeasibilityOf(spec, json::parse(t.final_metrics_json, nullptr, false)).feasible) {
      any_completed = true;
      return;
    }
    if (v && (!best || *v < best_value)) {
      best_value = *v;
      std::string metrics = t.final_metrics_json;
      best = BestTrialResult{std::move(t), false, spec.steps_per_trial, std::move(metrics),
                             std::nullopt};
    }
  }));
  if (best) return best;
  // Some completed, none within the constraints: no best to name (a
  // report's value would be no better).
  if (any_completed) return best;
  // None completed (e.g. every trial paused at a rung when the budget ran
  // out): what was measured still names a best, marked partial, with its
  // checkpoint if one is kept. Read only in this case, so a finished
  // experiment's answer costs what it did.
  HPO_ASSIGN_OR_RETURN(const auto ms, store_.ListExperimentMeasurements(experiment_id));
  const store::MeasurementRecord* at = nullptr;
  for (const auto& m : ms) {  // by trial, then step: ties go to the earlier of either
    auto v = ObjectiveOf(spec, m.metrics_json);
    if (v && (!at || *v < best_value)) {
      best_value = *v;
      at = &m;
    }
  }
  if (!at) return best;
  HPO_ASSIGN_OR_RETURN(store::TrialRecord t, store_.GetTrial(at->trial_id));
  std::optional<int64_t> checkpoint_step;
  if (options_.artifacts) {
    auto info = options_.artifacts->Stat(t.id);
    if (info.ok() && *info)
      checkpoint_step = (*info)->step;  // an unreadable one is as good as none here
  }
  return std::optional<BestTrialResult>(
      BestTrialResult{std::move(t), true, at->step, at->metrics_json, checkpoint_step});
}

std::vector<std::string> Engine::SpecWarnings(const ExperimentSpec& spec) {
  std::vector<std::string> out;
  if (spec.early_stopping_type == ExperimentSpec::StoppingType::kPromotion &&
      spec.promotion_criterion == search::PromotionCriterion::kTopFraction) {
    auto rule = MakePromotionRule(spec);
    if (!rule.ok()) return out;  // ValidateExperiment refuses it
    const double eta = spec.early_stopping_options.value(
        "reduction_factor", spec.early_stopping == "hyperband"
                                ? search::HyperbandOptions{}.reduction_factor
                                : search::AshaOptions{}.reduction_factor);
    // Each space promotes among its own trials; they share max_trials.
    const auto spaces = static_cast<int64_t>(std::max<size_t>(spec.spaces.size(), 1));
    const int64_t per_space = spec.max_trials / spaces;
    const int64_t need =
        search::TrialsToReachLastRung(*rule, eta, std::max<int64_t>(per_space, 100'000));
    if (need > per_space) {
      const auto rungs = rule->Rungs(0);
      char eta_text[32];
      std::snprintf(eta_text, sizeof eta_text, "%g", eta);
      std::string list;
      for (const int64_t r : rungs) list += (list.empty() ? "" : ", ") + std::to_string(r);
      std::string w = "budget.max_trials: " + std::to_string(spec.max_trials) + " trials";
      if (spaces > 1)
        w += " (about " + std::to_string(per_space) + " per space, over " + std::to_string(spaces) +
             ")";
      w += " cannot bring any trial to the last rung (step " + std::to_string(rungs.back()) +
           " of rungs " + list + "): with " + spec.early_stopping +
           "'s top-fraction promotion a rung keeps floor(n / " + eta_text +
           ") of the n trials that reach it, so about " + std::to_string(need) +
           " trials per space are needed; no trial would complete, and the best would be a partial "
           "one "
           "(paused at a rung). Raise max_trials, lower reduction_factor or raise min_resource";
      out.push_back(std::move(w));
    }
  }
  return out;
}

Status EngineImpl::ReclaimExpiredLeases() { return Reclaim({}); }

Status EngineImpl::Reclaim(const std::vector<Id>& ended, std::string_view why) {
  HPO_ASSIGN_OR_RETURN(const std::vector<Id> reclaimed,
                       store_.ReclaimExpiredLeases(options_.max_attempts));
  for (const Id id : reclaimed) {
    HPO_ASSIGN_OR_RETURN(const store::TrialRecord t, store_.GetTrial(id));
    ForgetHistory(
        t.experiment_id);  // its curve is gone (or it failed): read again on the next report
    if (t.state == TrialState::kFailed) {
      DeleteCheckpoint(id);
      Emit("trial.finished", {{"experiment_id", t.experiment_id},
                              {"trial_id", id},
                              {"number", t.number},
                              {"state", "failed"},
                              {"reason", t.reason}});
    } else {
      // Back to pending, or a promoted segment back to paused at its rung.
      const bool early = std::find(ended.begin(), ended.end(), id) != ended.end();
      Emit("trial.requeued", {{"experiment_id", t.experiment_id},
                              {"trial_id", id},
                              {"number", t.number},
                              {"attempt", t.attempt},
                              {"state", std::string(store::ToString(t.state))},
                              {"level", t.level},
                              {"reason", early ? std::string(why) : "lease expired"}});
    }
  }
  return Status::OK();
}

Status EngineImpl::Tick() {
  HPO_RETURN_IF_ERROR(ReclaimExpiredLeases());
  HPO_RETURN_IF_ERROR(SweepWorkers());
  // Checkpoints of trials that ended on paths that do not delete them
  // (an experiment's end, another replica's finish, a delete that failed).
  bool sweep = false;
  if (options_.artifacts) {
    MutexLock lock(sweep_mu_);
    const auto now = std::chrono::steady_clock::now();
    if (now - last_sweep_ >= options_.checkpoint_sweep) {
      last_sweep_ = now;
      sweep = true;
    }
  }
  if (sweep) HPO_RETURN_IF_ERROR(SweepCheckpoints());
  HPO_ASSIGN_OR_RETURN(auto experiments, store_.ListExperiments(0, 10'000));
  const int64_t now = NowMs();
  for (const auto& e : experiments) {
    if (e.state != store::ExperimentState::kRunning) {
      ForgetEnded(e.id);  // nothing left to judge or sample: free the memory
      continue;
    }
    HPO_ASSIGN_OR_RETURN(Cached * c, LoadUnlessUnreadable(e.id));
    if (!c) continue;
    const ExperimentSpec& spec = *c->spec;
    if (spec.max_wall_time_s && now - e.created_ms > *spec.max_wall_time_s * 1000) {
      const std::string why =
          "wall-time budget of " + std::to_string(*spec.max_wall_time_s) + " s reached";
      Status s = store_.FinishExperiment(e.id, store::ExperimentState::kCompleted, why);
      if (s.ok()) {
        ExperimentsChanged();
        Emit("experiment.finished",
             {{"experiment_id", e.id}, {"state", "completed"}, {"reason", why}});
      }
      if (!s.ok() && !s.IsFailedPrecondition()) return s;
      continue;
    }
    if (spec.budget) {
      // What every replica's reports spent, not only this server's.
      HPO_ASSIGN_OR_RETURN(const store::Usage used, store_.ExperimentUsage(e.id));
      {
        MutexLock lock(c->usage_mu);
        c->used = used;
      }
      if (used.cost >= *spec.budget) {
        char why[128];
        std::snprintf(why, sizeof why,
                      "cost budget of %g reached: its trials' device time cost %.4g", *spec.budget,
                      used.cost);
        Status s = store_.FinishExperiment(e.id, store::ExperimentState::kCompleted, why);
        if (s.ok()) {
          ExperimentsChanged();
          Emit("experiment.finished",
               {{"experiment_id", e.id}, {"state", "completed"}, {"reason", why}});
        }
        if (!s.ok() && !s.IsFailedPrecondition()) return s;
        continue;
      }
    }
    HPO_RETURN_IF_ERROR(MaybeFinish(e.id, *c, /*after_change=*/false));
  }
  if (kept_trials_) kept_trials_->Set(static_cast<double>(KeptTrials()));
  return Status::OK();
}

}  // namespace hpo::server
