// The engine as the placement policy's adapter (scheduler/policy.h): when a
// worker's device asks for work, build what each running experiment offers
// it, ask the policy, and apply the answer - resume a paused trial (a
// promotion), lease a pending one, or create a new trial for this device.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "scheduler/offer.h"
#include "search/ranking.h"
#include "server/engine/engine_impl.h"

namespace hpo::server {

using nlohmann::json;
using store::Id;
using store::TrialState;

namespace {

double SecondsSince(int64_t now_ms, int64_t then_ms) {
  return std::max<int64_t>(0, now_ms - then_ms) / 1000.0;
}

Result<std::optional<store::TrialRecord>> NoTrial() { return std::optional<store::TrialRecord>(); }

}  // namespace

// A lease's claim on the paused or pending trial it chose, from its choice
// until its write is in the view (Cached::claimed); a trial another lease
// claimed first is not taken.
class EngineImpl::LeaseClaim {
 public:
  LeaseClaim(Cached& c, Id trial_id) : c_(c), trial_id_(trial_id) {
    MutexLock lock(c_.claims_mu);
    held_ = c_.claimed.insert(trial_id_).second;
  }
  ~LeaseClaim() {
    if (!held_) return;
    MutexLock lock(c_.claims_mu);
    c_.claimed.erase(trial_id_);
  }
  LeaseClaim(const LeaseClaim&) = delete;
  LeaseClaim& operator=(const LeaseClaim&) = delete;
  bool held() const { return held_; }

 private:
  Cached& c_;
  const Id trial_id_;
  bool held_ = false;
};

int64_t EngineImpl::NowMs() const {
  if (options_.clock) return options_.clock();
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

std::chrono::steady_clock::time_point EngineImpl::SteadyNow() const {
  return options_.steady_clock ? options_.steady_clock() : std::chrono::steady_clock::now();
}

Result<std::optional<Lease>> EngineImpl::LeaseForWorker(
    const WorkerCaller& caller, Id device_id, const std::optional<std::vector<Id>>& held) {
  HPO_ASSIGN_OR_RETURN(const WorkerAuth auth, Authenticate(caller));
  HPO_RETURN_IF_ERROR(CheckDevice(caller, auth, device_id));
  HPO_RETURN_IF_ERROR(TouchWorker(caller.worker_id));
  if (held && held->size() > kMaxTrialsPerHeartbeat) {
    return Status::InvalidArgument("held_trial_ids: at most " +
                                   std::to_string(kMaxTrialsPerHeartbeat) +
                                   " trials, one per device");
  }
  if (held) {
    // Without this a lost answer would hold its trial, and a max_parallel
    // slot, until the lease timeout.
    HPO_ASSIGN_OR_RETURN(const std::vector<Id> lost,
                         store_.ExpireLeasesNotHeld(WorkerOwner(caller.worker_id), *held));
    if (!lost.empty()) HPO_RETURN_IF_ERROR(Reclaim(lost));
  }
  return GrantLease(caller.worker_id, device_id);
}

Result<std::optional<Lease>> EngineImpl::GrantLease(Id worker_id, Id device_id) {
  std::optional<metrics::ScopedTimer> timer;
  if (lease_seconds_) timer.emplace(*lease_seconds_);
  HPO_ASSIGN_OR_RETURN(const ExperimentList experiments, RunningExperiments());
  const auto asked =
      std::chrono::steady_clock::now();  // the fleet view may be older by fleet_cache
  for (const auto& e : *experiments) {
    HPO_ASSIGN_OR_RETURN(Cached * c, LoadUnlessUnreadable(e.id));
    if (!c || c->spec->executor == ExperimentSpec::ExecutorKind::kClient) continue;
    // Another lease may take the chosen work first: then plan again.
    constexpr int kAttempts = 4;
    for (int attempt = 0; attempt < kAttempts; ++attempt) {
      HPO_ASSIGN_OR_RETURN(LeasePlan plan,
                           PlanLease(e, *c, device_id, asked, /*without_new=*/false));
      if (!plan.decision.run) break;
      if (plan.items[plan.decision.item].kind == scheduler::WorkItem::Kind::kNew &&
          c->new_trials->Running()) {
        // A batch of new trials is being made, and this one would wait for
        // the next: other work (a requeued trial, a promotion) goes now if
        // there is some. Leases used to queue behind the trials being made
        // until they ran past their deadlines.
        HPO_ASSIGN_OR_RETURN(LeasePlan other,
                             PlanLease(e, *c, device_id, asked, /*without_new=*/true));
        if (other.decision.run) plan = std::move(other);
      }
      const scheduler::WorkItem& chosen = plan.items[plan.decision.item];
      std::optional<LeaseClaim> claim;
      if (chosen.kind != scheduler::WorkItem::Kind::kNew) {
        claim.emplace(*c, chosen.trial_id);
        if (!claim->held()) continue;  // another lease chose it since this one planned
      }
      HPO_ASSIGN_OR_RETURN(const std::optional<store::TrialRecord> leased,
                           ApplyPlan(e, *c, plan, worker_id, device_id));
      if (!leased) continue;
      StartCharge(leased->id);
      {
        MutexLock lock(leased_on_mu_);
        if (leased_on_.size() >= kMaxTrialHomes) leased_on_.clear();
        leased_on_[leased->id] = device_id;
      }
      fleet_->SetBusy(device_id, plan.decision.estimated_seconds);
      Lease a{*leased, c->spec,
              leased->space_id ? c->spaces.NameOf(*leased->space_id) : std::string()};
      if (!c->spec->system.empty())
        HPO_RETURN_IF_ERROR(StartAtBestSetting(*c->spec, device_id, asked, a));
      if (leases_granted_) leases_granted_->Increment();
      return std::optional<Lease>(std::move(a));
    }
  }
  if (leases_empty_) leases_empty_->Increment();
  return std::optional<Lease>();
}

Result<EngineImpl::LeasePlan> EngineImpl::PlanLease(const store::ExperimentRecord& e, Cached& c,
                                                    Id device_id,
                                                    std::chrono::steady_clock::time_point asked,
                                                    bool without_new) {
  const ExperimentSpec& spec = *c.spec;
  const int64_t now = NowMs();
  LeasePlan plan;
  std::vector<std::string> workloads;
  for (const auto& space : spec.spaces) workloads.push_back(Workload(spec, space.name));
  // Paused trials moving to a faster class (MaybeMove): their resume items
  // say which, and placement gives them to that class's devices first.
  std::unordered_map<Id, std::string> moving_class;
  if (spec.placement_migrate) {
    MutexLock lock(c.moves_mu);
    moving_class = c.moving_class;
  }
  {
    HPO_ASSIGN_OR_RETURN(TrialView::Locked view, c.trials->Fresh());
    scheduler::OfferInput in;
    in.histories = &view->histories;
    in.workloads = workloads;
    in.max_trials = spec.max_trials;
    in.max_parallel = spec.max_parallel;
    in.steps_per_trial = spec.steps_per_trial;
    in.promotion = c.promotion ? &*c.promotion : nullptr;
    in.rung_steps = c.rung_steps;
    // The trials waiting for a device listed, the others only counted (on a
    // device, finished). Few waiting (no promotion): from the view's index
    // of them (TrialsSnapshot::waiting), a lookup each. Many
    // (promotion-type ASHA leaves most trials paused): one walk of all of
    // them, which is cheaper than a lookup each (with the index alone, a
    // 5-minute bench/load run under ASHA was worse: RPC p99 2.4 s against
    // 1.3-1.9 s).
    in.finished_per_space = view->finished_per_space;
    in.finished_per_space.resize(spec.spaces.size(), 0);
    in.on_device_per_space = view->on_device_per_space;
    in.on_device_per_space.resize(spec.spaces.size(), 0);
    std::vector<int> per_space(spec.spaces.size(), 0);
    for (size_t s = 0; s < per_space.size(); ++s) {
      per_space[s] = static_cast<int>(in.finished_per_space[s] + in.on_device_per_space[s]);
    }
    std::unordered_set<Id> claimed;
    {
      MutexLock lock(c.claims_mu);
      claimed = c.claimed;
    }
    const auto list = [&](Id id, const TrialEntry& t) {
      ++per_space[t.space];
      scheduler::OfferTrial o;
      o.phase = t.state == TrialState::kPending ? scheduler::OfferTrial::Phase::kPending
                                                : scheduler::OfferTrial::Phase::kPaused;
      // Another lease is putting it on a device: counted there, not offered.
      if (!claimed.empty() && claimed.count(id)) o.phase = scheduler::OfferTrial::Phase::kOnDevice;
      o.id = id;
      o.space = t.space;
      o.index = t.index;
      o.level = t.level;
      o.resume_step = t.resume_step;
      o.stop_step = t.stop_step;
      o.waiting_s = SecondsSince(now, t.updated_ms);
      if (!moving_class.empty()) {
        if (const auto m = moving_class.find(id); m != moving_class.end()) o.moving_to = m->second;
      }
      in.trials.push_back(o);
    };
    if (c.promotion) {
      // Promotion-type: the pending trials and the paused ones the rule may
      // promote now listed; the other paused ones only counted.
      auto promotable = Promotable(*view, *c.promotion, scheduler::kMaxPromotionsPerRung);
      for (const Id id : view->pending) {
        if (const auto found = view->trials.find(id); found != view->trials.end())
          list(id, found->second);
      }
      in.paused_per_space.assign(spec.spaces.size(), 0);
      for (size_t s = 0; s < promotable.size() && s < spec.spaces.size(); ++s) {
        for (const search::Promotion& p : promotable[s]) {
          const Id id = view->ids[s][p.index];
          list(id, view->trials.at(id));
        }
        in.paused_per_space[s] =
            (s < view->paused_per_space.size() ? view->paused_per_space[s] : 0) -
            static_cast<int64_t>(promotable[s].size());
        per_space[s] += static_cast<int>(in.paused_per_space[s]);
      }
      in.promotable = std::move(promotable);
    } else if (view->waiting.size() * 8 < view->trials.size()) {
      in.trials.reserve(view->waiting.size());
      for (const Id id : view->waiting) {
        if (const auto found = view->trials.find(id); found != view->trials.end())
          list(id, found->second);
      }
    } else {
      for (const auto& [id, t] : view->trials) {
        if (t.state == TrialState::kPending || t.state == TrialState::kPaused) list(id, t);
      }
    }
    const auto& ranks = SpaceRanking(*view, spec.spaces);
    for (const auto& r : ranks) in.shares.push_back(r.share);
    in.preferred_space = search::PickSpace(ranks, per_space);
    scheduler::Offer offer = scheduler::OfferWork(in);
    for (size_t k = 0; k < offer.items.size(); ++k) {
      if (without_new && offer.items[k].kind == scheduler::WorkItem::Kind::kNew) continue;
      plan.items.push_back(std::move(offer.items[k]));
      plan.promotions.push_back(offer.promotions[k]);
    }
  }
  if (plan.items.empty()) {
    plan.decision.retry_after_s = 1;
    plan.decision.reason = "nothing to run";
    return plan;
  }
  // Per workload, not per item: an offer may hold thousands of items of a
  // few workloads, and each read takes the fleet view's lock.
  std::map<std::string, double> per_step;
  for (auto& item : plan.items) {
    auto it = per_step.find(item.workload);
    if (it == per_step.end())
      it = per_step.emplace(item.workload, fleet_->SamplesPerStep(item.workload)).first;
    item.samples_per_step = it->second;
  }
  HPO_ASSIGN_OR_RETURN(FleetView::Locked fleet, fleet_->Fresh(device_id, asked));
  const auto device = fleet->devices.find(device_id);
  if (device == fleet->devices.end()) {
    return Status::NotFound("device " + std::to_string(device_id) + " is not registered");
  }
  const scheduler::PolicyOptions options = PolicyFor(c, *fleet, e, now);
  plan.decision =
      scheduler::Decide({std::to_string(device_id), device->second.device_class}, fleet->live,
                        FleetView::Seconds(SteadyNow()), plan.items, fleet->model, options);
  return plan;
}

scheduler::PolicyOptions EngineImpl::PolicyFor(Cached& c, const FleetSnapshot& fleet,
                                               const store::ExperimentRecord& e, int64_t now_ms) {
  const ExperimentSpec& spec = *c.spec;
  scheduler::PolicyOptions o;
  o.kind =
      scheduler::ParsePolicyKind(spec.placement_policy).value_or(scheduler::PolicyKind::kSpeed);
  o.class_order = spec.placement_class_order;
  o.max_wait_s = spec.placement_max_wait_s;
  if (spec.prices.empty()) return o;
  o.budget_left = BudgetLeft(c);
  // A class's price: the spec's for the class itself, else for a label of
  // one of its devices' workers.
  for (const auto& [id, d] : fleet.devices) {
    if (o.price_per_hour.count(d.device_class)) continue;
    if (const auto price = PricePerHour(spec, d.device_class, d.labels))
      o.price_per_hour[d.device_class] = *price;
  }
  std::optional<int64_t> deadline_ms = spec.deadline_ms;
  if (spec.deadline_s) deadline_ms = e.created_ms + *spec.deadline_s * 1000;
  // A deadline that has passed: nobody meets it, so cost alone decides.
  if (deadline_ms) o.deadline_s = std::max(1e-3, (*deadline_ms - now_ms) / 1000.0);
  return o;
}

Result<std::optional<store::TrialRecord>> EngineImpl::ApplyPlan(const store::ExperimentRecord& e,
                                                                Cached& c, const LeasePlan& plan,
                                                                Id worker_id, Id device_id) {
  const scheduler::WorkItem& item = plan.items[plan.decision.item];
  const std::string owner = WorkerOwner(worker_id);
  const int64_t lease_ms = options_.worker_lease_ms;
  std::optional<store::TrialRecord> leased;
  switch (item.kind) {
    case scheduler::WorkItem::Kind::kPending: {
      auto r = store_.LeaseTrial(item.trial_id, owner, lease_ms);
      if (!r.ok()) {
        if (r.status().IsFailedPrecondition()) return NoTrial();  // taken meanwhile
        return r.status();
      }
      leased = std::move(r).value();
      break;
    }
    case scheduler::WorkItem::Kind::kResume: {
      const search::Promotion& p = plan.promotions.at(plan.decision.item);
      HPO_ASSIGN_OR_RETURN(const store::TrialRecord before, store_.GetTrial(item.trial_id));
      std::string why;
      HPO_ASSIGN_OR_RETURN(const bool usable, CheckpointUsable(before, &why));
      auto r =
          store_.ResumeTrial(item.trial_id, owner, lease_ms,
                             p.to_end ? std::nullopt : std::optional<int64_t>(p.to_step), !usable);
      if (!r.ok()) {
        if (r.status().IsFailedPrecondition()) return NoTrial();
        return r.status();
      }
      leased = std::move(r).value();
      Emit("trial.resumed", {{"experiment_id", e.id},
                             {"trial_id", leased->id},
                             {"number", leased->number},
                             {"level", leased->level},
                             {"from_step", p.from_step},
                             {"to_step", p.to_step},
                             {"device_id", device_id},
                             {"reason", plan.decision.reason}});
      if (!usable)
        AnnounceRestart(*leased, "no usable checkpoint: " + why + "; it trains from step 1");
      break;
    }
    case scheduler::WorkItem::Kind::kNew: {
      // Made with the new trials other devices asked for meanwhile, in one
      // batch (Cached::new_trials).
      NewTrialRequest r;
      r.wanted.space = item.space_index;
      r.wanted.owner = owner;
      r.wanted.lease_ms = lease_ms;
      r.wanted.to_first_rung = c.promotion.has_value();
      const Status made = c.new_trials->Submit(r);
      // The experiment ended meanwhile (the store creates trials only in a
      // running one): no work here, not an error for the device that asked.
      if (made.IsFailedPrecondition()) return NoTrial();
      HPO_RETURN_IF_ERROR(made);
      if (!r.made) return NoTrial();  // the budget or max_parallel filled meanwhile
      EmitCreated(e.id, c, {*r.made}, {{"device_id", device_id}, {"reason", plan.decision.reason}});
      leased = std::move(r.made);
      break;
    }
  }
  c.trials->Apply(*leased);
  RememberHome(*leased);
  if (c.spec->placement_migrate) {
    NoteOnDevice(c, device_id, leased->id, leased->resume_step);
    MutexLock lock(c.moves_mu);
    if (const auto m = c.moving_class.find(leased->id); m != c.moving_class.end()) {
      if (--c.moving_to[m->second] <= 0) c.moving_to.erase(m->second);
      c.moving_class.erase(m);
    }
  }
  return leased;
}

void EngineImpl::SegmentEnded(Cached& c, Id trial_id) {
  std::optional<Id> device;
  {
    MutexLock lock(leased_on_mu_);
    if (const auto it = leased_on_.find(trial_id); it != leased_on_.end()) {
      device = it->second;
      leased_on_.erase(it);
    }
  }
  if (!device) return;
  fleet_->SetIdle(*device);
  MutexLock lock(c.moves_mu);
  if (const auto on = c.on_device.find(*device);
      on != c.on_device.end() && on->second.trial_id == trial_id) {
    c.on_device.erase(on);
  }
}

void EngineImpl::NoteOnDevice(Cached& c, Id device_id, Id trial_id, int64_t step) {
  const int rungs = search::RungsPassed(c.rung_steps, step);
  MutexLock lock(c.moves_mu);
  c.on_device[device_id] = Cached::OnDevice{trial_id, rungs};
}

// Cost: a map lookup on every report; at a rung the trial survived, one pass
// over the experiment's devices per faster class (to find whom to preempt)
// and one DecideMove, O(classes).
std::optional<ReportReply> EngineImpl::MaybeMove(Cached& c, const store::TrialRecord& trial,
                                                 const TrialReport& r,
                                                 const std::string& workload) {
  const ExperimentSpec& spec = *c.spec;
  const Id device_id = *r.device_id;
  const bool last = r.step >= spec.steps_per_trial;
  std::unordered_map<Id, Cached::OnDevice> on_device;
  std::unordered_map<std::string, int> moving_to;
  {
    std::optional<std::string> why;
    {
      MutexLock lock(c.moves_mu);
      if (const auto p = c.preempted.find(trial.id); p != c.preempted.end()) {
        why = std::move(p->second);
        c.preempted.erase(p);
        c.on_device.erase(device_id);
      }
    }
    if (why && !last) {
      // Free as soon as the checkpoint is up: the mover it makes room for
      // is left to this device, not taken by a slower one meanwhile.
      fleet_->SetIdle(device_id);
      Emit("trial.preempted", {{"experiment_id", trial.experiment_id},
                               {"trial_id", trial.id},
                               {"number", trial.number},
                               {"step", r.step},
                               {"device_id", device_id},
                               {"reason", *why}});
      return ReportReply{Decision::kPause, std::nullopt, *why};
    }
  }
  NoteOnDevice(c, device_id, trial.id, r.step);
  if (last || !std::binary_search(c.rung_steps.begin(), c.rung_steps.end(), r.step))
    return std::nullopt;
  {
    MutexLock lock(c.moves_mu);
    on_device = c.on_device;
    moving_to = c.moving_to;
  }
  const int rungs = search::RungsPassed(c.rung_steps, r.step);
  scheduler::WorkItem rest;
  rest.kind = scheduler::WorkItem::Kind::kResume;
  rest.trial_id = trial.id;
  rest.level = rungs;
  rest.workload = workload;
  rest.steps = spec.steps_per_trial - r.step;
  rest.samples_per_step = fleet_->SamplesPerStep(workload);  // before the fleet's lock below
  const auto asked = FleetView::Clock::now();
  scheduler::MoveDecision d;
  std::vector<scheduler::MoveTarget> targets;
  std::vector<std::optional<std::pair<Id, Id>>> victims;  // per target: (device, trial) to preempt
  {
    auto fleet = fleet_->Fresh(device_id, asked);
    if (!fleet.ok()) return std::nullopt;
    FleetView::Locked& f = *fleet;
    const auto mine = f->devices.find(device_id);
    if (mine == f->devices.end()) return std::nullopt;
    const std::string& here = mine->second.device_class;
    const double now_s = FleetView::Seconds(SteadyNow());
    for (const auto& cls : f->live.ClassesFor(std::to_string(device_id), here, now_s)) {
      if (cls.device_class == here) continue;
      // As many trials on their way there as it has devices.
      const auto m = moving_to.find(cls.device_class);
      const int on_their_way = m == moving_to.end() ? 0 : m->second;
      if (on_their_way >= cls.devices) continue;
      scheduler::MoveTarget t;
      t.device_class = cls.device_class;
      // Movers take the class's devices first come first served
      // (scheduler/policy.h, rule 2b): those on their way take the soonest.
      t.free_in_s = on_their_way > 0 ? f->live.FreeIn(cls.device_class, on_their_way, now_s)
                                     : cls.soonest_free_s;
      // The least advanced trial this experiment runs on a live device of
      // the class: it pauses at its next step for the mover.
      std::optional<std::pair<Id, Id>> victim;
      int victim_rungs = rungs;
      for (const auto& [dev, on] : on_device) {
        if (dev == device_id || on.trial_id == trial.id || on.rungs > victim_rungs) continue;
        // Ties: the newer trial, which has the least invested.
        if (on.rungs == victim_rungs && (!victim || on.trial_id < victim->second)) continue;
        const auto there = f->devices.find(dev);
        if (there == f->devices.end() || !there->second.live ||
            there->second.device_class != cls.device_class)
          continue;
        victim = std::make_pair(dev, on.trial_id);
        victim_rungs = on.rungs;
      }
      if (victim) {
        const auto speed = f->model.Estimate(cls.device_class, workload);
        if (speed && speed->samples_per_sec > 0 && rest.samples_per_step > 0) {
          t.preemptible = true;
          t.preempt_in_s =
              rest.samples_per_step / speed->samples_per_sec;  // at most one step of it
        }
      }
      targets.push_back(std::move(t));
      victims.push_back(victim);
    }
    scheduler::PolicyOptions options;  // placement.migrate implies the speed policy
    options.kind = scheduler::PolicyKind::kSpeed;
    d = scheduler::DecideMove(here, rest, targets, f->model, options);
  }
  if (!d.move) {
    spdlog::debug("trial {} of experiment {} (id {}) at step {} stays on device {}: {}",
                  trial.number, trial.experiment_id, trial.id, r.step, device_id, d.reason);
    return std::nullopt;
  }
  std::string why = "moving to a faster device: " + d.reason;
  json event = {{"experiment_id", trial.experiment_id},
                {"trial_id", trial.id},
                {"number", trial.number},
                {"step", r.step},
                {"device_id", device_id},
                {"to_class", targets[d.target].device_class},
                {"reason", why}};
  if (d.preempt && victims[d.target]) {
    const auto [victim_device, victim_trial] = *victims[d.target];
    {
      MutexLock lock(c.moves_mu);
      c.preempted[victim_trial] = "preempted for trial " + std::to_string(trial.id) +
                                  ", which passed more rungs, to take this device";
      c.on_device.erase(victim_device);
    }
    // Free soon, so that slower devices leave the mover to it.
    fleet_->SetBusy(victim_device, targets[d.target].preempt_in_s);
    event["preempts_trial_id"] = victim_trial;
  }
  {
    MutexLock lock(c.moves_mu);
    c.on_device.erase(device_id);
    ++c.moving_to[targets[d.target].device_class];
    c.moving_class[trial.id] = targets[d.target].device_class;
  }
  // Free as soon as the checkpoint is up, as a preempted trial's device is:
  // the report's estimate had it busy with the rest of the trial, and a
  // device that then found nothing to run kept that estimate, so later
  // moves took its class for busy.
  fleet_->SetIdle(device_id);
  Emit("trial.moving", event);
  return ReportReply{Decision::kPause, std::nullopt, why};
}

Status EngineImpl::CheckCost(const ExperimentSpec& spec) {
  if (spec.deadline_ms && *spec.deadline_ms <= NowMs()) {
    return Status::InvalidArgument(
        "cost.deadline: " + spec.source.at("cost").at("deadline").get<std::string>() +
        " has passed");
  }
  if (spec.prices.empty()) return Status::OK();
  HPO_ASSIGN_OR_RETURN(const auto workers, store_.ListWorkers());
  // With no worker yet there is nothing to check against (hpctl run submits
  // before its workers register).
  if (workers.empty()) return Status::OK();
  std::set<std::string> known;
  for (const auto& w : workers) {
    for (const auto& d : w.devices) known.insert(d.device_class);
    const json labels = json::parse(w.labels_json, nullptr, false);
    if (labels.is_object()) {
      for (auto it = labels.begin(); it != labels.end(); ++it) {
        if (it->is_string()) known.insert(it.key() + "=" + it->get<std::string>());
      }
    }
  }
  for (const auto& [key, price] : spec.prices) {
    if (known.count(key)) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    return Status::InvalidArgument("cost.prices." + key +
                                   ": no registered worker has this device class or label (" +
                                   list.append(")"));
  }
  return Status::OK();
}

}  // namespace hpo::server
