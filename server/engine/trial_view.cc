#include "server/engine/trial_view.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <set>

#include "server/engine/space_map.h"

namespace hpo::server {

using nlohmann::json;
using store::Id;
using store::TrialState;

std::optional<double> ObjectiveOf(const ExperimentSpec& spec, const std::string& metrics_json) {
  const json m = json::parse(metrics_json, nullptr, false);
  if (m.is_discarded() || !m.is_object()) return std::nullopt;
  auto it = m.find(spec.metric);
  if (it == m.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  if (!std::isfinite(v)) return std::nullopt;
  return search::Minimized(spec.direction, v);
}

search::TrialStatus SearchStatus(TrialState s) {
  switch (s) {
    case TrialState::kCompleted:
      return search::TrialStatus::kCompleted;
    case TrialState::kPruned:
    case TrialState::kPaused:
      return search::TrialStatus::kPruned;
    case TrialState::kFailed:
    case TrialState::kCancelled:
      return search::TrialStatus::kFailed;
    default:
      return search::TrialStatus::kRunning;
  }
}

namespace {
// Lists (space, index) as changed for a kept reader of the trials (the
// ranking, the promotions) that has been made and is not stale whole.
template <typename Kept>
void NoteStale(bool made, Kept& kept, size_t space, size_t index) {
  if (!made || kept.all_stale) return;  // its next use reads every trial
  // Past this many the next use reads every trial: about what a list of
  // them would cost it.
  constexpr size_t kMaxStale = 65'536;
  if (kept.stale.size() >= kMaxStale) {
    kept.stale.clear();
    kept.all_stale = true;
    return;
  }
  kept.stale.emplace_back(space, index);
}

// Counts the observation at (space, index) as changed: every change to a
// view's histories goes through here.
void NoteChanged(TrialsSnapshot& view, size_t space, size_t index) {
  if (index < view.changed[space].size()) {
    view.changed[space][index] = ++view.revision;
  } else {
    view.changed[space].push_back(++view.revision);  // appended
  }
  NoteStale(view.ranking.made, view.ranking, space, index);
  NoteStale(view.promotions.results.has_value(), view.promotions, space, index);
}

// The observation at (space, index), counted as changed.
search::Observation& Changing(TrialsSnapshot& view, size_t space, size_t index) {
  NoteChanged(view, space, index);
  return view.histories[space].trials[index];
}

// A completed trial's final reading (none: not completed, or no final
// value; FallBackToCurve may give it one).
void SetFinal(search::Observation& o, const std::optional<ObjectiveReading>& p) {
  o.value = p ? std::optional<double>(p->value) : std::nullopt;
  o.values = p ? p->values : std::vector<double>();
  o.violation = p ? p->violation : std::nullopt;
}

// A completed trial that reported steps but no final value counts with its
// last one (each objective with its last point that has them all).
void FallBackToCurve(search::Observation& o) {
  if (o.status != search::TrialStatus::kCompleted) return;
  if (!o.value && !o.curve.empty()) o.value = o.curve.back().second;
  if (o.values.empty() && !o.curve_values.empty()) o.values = o.curve_values.back().second;
}

template <typename Curve>
typename Curve::iterator FirstAtOrAfter(Curve& curve, int64_t step) {
  return std::lower_bound(curve.begin(), curve.end(), step,
                          [](const auto& point, int64_t s) { return point.first < s; });
}

// Puts a point of `step` into the curves, replacing one of that step; with
// `newest`, what they hold after it goes (an earlier attempt's steps).
void PutPoint(search::Observation& o, int64_t step, const ObjectiveReading& p, bool newest) {
  const auto put = [&](auto& curve, const auto& v) {
    auto at = FirstAtOrAfter(curve, step);
    if (newest) {
      curve.erase(at, curve.end());
      curve.emplace_back(step, v);
    } else if (at != curve.end() && at->first == step) {
      at->second = v;
    } else {
      curve.insert(at, {step, v});
    }
  };
  put(o.curve, p.value);
  if (!p.values.empty()) {
    put(o.curve_values, p.values);
  } else if (newest) {
    o.curve_values.erase(FirstAtOrAfter(o.curve_values, step), o.curve_values.end());
  }
  if (o.curve.back().first == step) o.known_violation = p.known_violation;
}

// Drops the curves' points after `step`.
void DropPointsAfter(search::Observation& o, int64_t step) {
  o.curve.erase(FirstAtOrAfter(o.curve, step + 1), o.curve.end());
  o.curve_values.erase(FirstAtOrAfter(o.curve_values, step + 1), o.curve_values.end());
}

bool SameReading(const search::Observation& a, const search::Observation& b) {
  return a.status == b.status && a.value == b.value && a.curve == b.curve && a.values == b.values &&
         a.curve_values == b.curve_values && a.violation == b.violation &&
         a.known_violation == b.known_violation;
}

}  // namespace

const std::vector<search::SpaceRank>& SpaceRanking(TrialsSnapshot& view,
                                                   const std::vector<search::SearchSpace>& spaces) {
  TrialsSnapshot::Ranking& r = view.ranking;
  bool changed = false;
  if (!r.made || r.all_stale) {
    r.results.Clear();
    for (size_t s = 0; s < view.histories.size(); ++s) {
      const auto& trials = view.histories[s].trials;
      for (size_t i = 0; i < trials.size(); ++i)
        r.results.Set(s, i, search::RankedValue(trials[i]));
    }
    changed = true;
  } else {
    for (const auto& [s, i] : r.stale) {
      changed |= r.results.Set(s, i, search::RankedValue(view.histories[s].trials[i]));
    }
  }
  r.stale.clear();
  r.all_stale = false;
  r.made = true;
  if (changed) r.ranks = search::RankSpaces(spaces, r.results.Results(view.histories.size()));
  return r.ranks;
}

std::vector<std::vector<search::Promotion>> Promotable(TrialsSnapshot& view,
                                                       const search::PromotionRule& rule,
                                                       size_t per_rung) {
  TrialsSnapshot::Promotions& p = view.promotions;
  const auto set = [&](size_t s, size_t i) {
    if (s >= view.ids.size() || i >= view.ids[s].size()) return;
    const auto it = view.trials.find(view.ids[s][i]);
    if (it == view.trials.end()) return;
    const TrialEntry& e = it->second;
    p.results->Set(s, i, view.histories[s].trials[i],
                   e.state == TrialState::kPaused ? std::optional<int>(e.level) : std::nullopt);
  };
  if (!p.results || p.all_stale) {
    p.results.emplace(rule);
    for (size_t s = 0; s < view.histories.size(); ++s) {
      for (size_t i = 0; i < view.histories[s].trials.size(); ++i) set(s, i);
    }
  } else {
    for (const auto& [s, i] : p.stale) set(s, i);
  }
  p.stale.clear();
  p.all_stale = false;
  std::vector<std::vector<search::Promotion>> out(view.histories.size());
  for (size_t s = 0; s < out.size(); ++s) out[s] = p.results->Promotable(s, per_rung);
  return out;
}

size_t HistoriesCopy::Update(const TrialsSnapshot& view) {
  bool whole = view.generation == 0 || generation != view.generation ||
               histories.size() != view.histories.size();
  for (size_t s = 0; !whole && s < histories.size(); ++s) {
    whole = histories[s].trials.size() > view.histories[s].trials.size();
  }
  size_t copied = 0;
  if (whole) {
    histories = view.histories;
    for (const auto& h : histories) copied += h.trials.size();
  } else if (revision != view.revision) {
    for (size_t s = 0; s < histories.size(); ++s) {
      const auto& from = view.histories[s].trials;
      const auto& changed = view.changed[s];
      auto& to = histories[s].trials;
      for (size_t i = 0; i < to.size(); ++i) {
        if (changed[i] <= revision) continue;
        to[i] = from[i];  // reuses the copy's storage for params and curve
        ++copied;
      }
      copied += from.size() - to.size();
      to.insert(to.end(), from.begin() + static_cast<std::ptrdiff_t>(to.size()), from.end());
    }
  }
  generation = view.generation;
  revision = view.revision;
  return copied;
}

bool IsOpen(TrialState s) {
  return s == TrialState::kPending || s == TrialState::kLeased || s == TrialState::kRunning ||
         s == TrialState::kPaused;
}

namespace {
// Every change of a trial's state in a view goes through here (`added`: the
// trial is new to the view), so that `waiting`, `pending` and the counts
// per space stay what the states say. Each caller also counts the trial's
// observation as changed (NoteChanged), which lists it for the kept
// promotions: they read its state and level with it.
void SetState(TrialsSnapshot& view, Id trial_id, TrialEntry& e, TrialState state, bool added) {
  if (view.finished_per_space.size() < view.histories.size())
    view.finished_per_space.resize(view.histories.size(), 0);
  if (view.on_device_per_space.size() < view.histories.size()) {
    view.on_device_per_space.resize(view.histories.size(), 0);
  }
  if (view.paused_per_space.size() < view.histories.size())
    view.paused_per_space.resize(view.histories.size(), 0);
  const auto waits = [](TrialState s) {
    return s == TrialState::kPending || s == TrialState::kPaused;
  };
  const auto on_device = [](TrialState s) {
    return s == TrialState::kLeased || s == TrialState::kRunning;
  };
  if (!added) {
    if (e.state == TrialState::kPending) view.pending.erase(trial_id);
    if (e.state == TrialState::kPaused) --view.paused_per_space[e.space];
    if (waits(e.state)) view.waiting.erase(trial_id);
    if (on_device(e.state)) --view.on_device_per_space[e.space];
    if (!IsOpen(e.state)) --view.finished_per_space[e.space];
  }
  e.state = state;
  if (state == TrialState::kPending) view.pending.insert(trial_id);
  if (state == TrialState::kPaused) ++view.paused_per_space[e.space];
  if (waits(state)) view.waiting.insert(trial_id);
  if (on_device(state)) ++view.on_device_per_space[e.space];
  if (!IsOpen(state)) ++view.finished_per_space[e.space];
}
}  // namespace

TrialView::TrialView(store::Store& store, Id experiment_id,
                     std::shared_ptr<const ExperimentSpec> spec, std::chrono::milliseconds max_age)
    : store_(store), experiment_id_(experiment_id), spec_(std::move(spec)), max_age_(max_age) {}

void TrialView::Add(TrialsSnapshot& view, const store::TrialRecord& trial) const {
  auto known = view.trials.find(trial.id);
  if (known != view.trials.end()) {
    TrialEntry& e = known->second;
    SetState(view, trial.id, e, trial.state, /*added=*/false);
    e.level = trial.level;
    e.resume_step = trial.resume_step;
    e.stop_step = trial.stop_step;
    e.updated_ms = trial.updated_ms;
    search::Observation& o = Changing(view, e.space, e.index);
    o.status = SearchStatus(trial.state);
    if (trial.state == TrialState::kCompleted) {
      SetFinal(o, PointOf(*spec_, trial.final_metrics_json));
      FallBackToCurve(o);
    }
    return;
  }
  auto si = trial.space_id ? view.space_index.find(*trial.space_id) : view.space_index.end();
  if (si == view.space_index.end()) return;
  auto params = spec_->spaces[si->second].FromJson(json::parse(trial.params_json, nullptr, false));
  if (!params.ok()) return;  // not this space's shape: it says nothing about it
  search::Observation o;
  o.number = trial.number;
  o.status = SearchStatus(trial.state);
  o.params = std::move(params).value();
  if (trial.state == TrialState::kCompleted) SetFinal(o, PointOf(*spec_, trial.final_metrics_json));
  auto& trials = view.histories[si->second].trials;
  TrialEntry e;
  e.space = si->second;
  e.index = trials.size();
  e.number = trial.number;
  e.level = trial.level;
  e.resume_step = trial.resume_step;
  e.stop_step = trial.stop_step;
  e.updated_ms = trial.updated_ms;
  SetState(view, trial.id, view.trials.emplace(trial.id, e).first->second, trial.state,
           /*added=*/true);
  trials.push_back(std::move(o));
  if (view.ids.size() < view.histories.size()) view.ids.resize(view.histories.size());
  view.ids[si->second].push_back(trial.id);
  NoteChanged(view, si->second, e.index);
}

Result<TrialsSnapshot> TrialView::ReadNow() const {
  TrialsSnapshot view;
  HPO_ASSIGN_OR_RETURN(store::ExperimentRecord rec, store_.GetExperiment(experiment_id_));
  view.space_index = SpaceMap(*spec_, rec.spaces).IndexById();
  view.histories.resize(spec_->spaces.size());
  view.changed.resize(spec_->spaces.size());
  HPO_ASSIGN_OR_RETURN(const Changes everything, ReadChanges(std::nullopt));
  ApplyChanges(view, everything);
  return view;
}

Result<TrialView::Changes> TrialView::ReadChanges(std::optional<int64_t> since) const {
  Changes changes;
  changes.read = std::chrono::steady_clock::now();
  HPO_ASSIGN_OR_RETURN(changes.cursor, store_.ReadHorizon());
  store::TrialFilter page;
  page.limit = 10'000;
  page.since_revision = since;
  for (;;) {
    HPO_ASSIGN_OR_RETURN(auto trials, store_.ListTrials(experiment_id_, page));
    const bool last = trials.size() < static_cast<size_t>(page.limit);
    if (!trials.empty()) page.after_number = trials.back().number;
    std::move(trials.begin(), trials.end(), std::back_inserter(changes.trials));
    if (last) break;
  }
  if (!since) {
    HPO_ASSIGN_OR_RETURN(changes.measurements, store_.ListExperimentMeasurements(experiment_id_));
    return changes;
  }
  HPO_ASSIGN_OR_RETURN(changes.measurements,
                       store_.ListExperimentMeasurementsSince(experiment_id_, *since));
  for (const auto& t : changes.trials) {
    // Points the view holds may be gone (a reclaimed or restarted attempt).
    if (t.curve_reset_revision >= *since) {
      HPO_ASSIGN_OR_RETURN(changes.curves[t.id], store_.ListMeasurements(t.id));
    }
  }
  return changes;
}

void TrialView::ApplyChanges(TrialsSnapshot& view, const Changes& changes) const {
  auto observation = [&view](Id trial_id) -> search::Observation* {
    auto it = view.trials.find(trial_id);
    if (it == view.trials.end()) return nullptr;  // not of a space in the spec
    return &Changing(view, it->second.space, it->second.index);
  };
  // What each known trial's observation was before, so that a row read
  // again unchanged does not count as a change for the copies
  // (HistoriesCopy): a cursor may repeat rows, and on PostgreSQL an open
  // transaction anywhere in the cluster makes it repeat many.
  struct Before {
    size_t space, index;
    uint64_t changed;
    search::Observation observation;
  };
  std::map<Id, Before> before;
  auto remember = [&view, &before](Id trial_id) {
    auto it = view.trials.find(trial_id);
    if (it == view.trials.end() || before.count(trial_id)) return;
    const TrialEntry& e = it->second;
    before.emplace(trial_id, Before{e.space, e.index, view.changed[e.space][e.index],
                                    view.histories[e.space].trials[e.index]});
  };
  for (const auto& t : changes.trials) remember(t.id);
  for (const auto& c : changes.curves) remember(c.first);
  for (const auto& m : changes.measurements) remember(m.trial_id);
  std::set<Id> touched;
  for (const auto& t : changes.trials) {
    Add(view, t);
    search::Observation* o = observation(t.id);
    if (!o) continue;
    // As a whole read: only a completed trial has a value (its final one,
    // else its curve's last, set below once the curve is current).
    SetFinal(*o, t.state == TrialState::kCompleted ? PointOf(*spec_, t.final_metrics_json)
                                                   : std::nullopt);
    touched.insert(t.id);
  }
  for (const auto& [trial_id, measurements] : changes.curves) {
    search::Observation* o = observation(trial_id);
    if (!o) continue;
    o->curve.clear();
    o->curve_values.clear();
    o->known_violation.reset();
    for (const auto& m : measurements) {
      if (auto p = PointOf(*spec_, m.metrics_json)) PutPoint(*o, m.step, *p, /*newest=*/false);
    }
    touched.insert(trial_id);
  }
  for (const auto& m : changes.measurements) {
    if (changes.curves.count(m.trial_id)) continue;  // read whole above
    search::Observation* o = observation(m.trial_id);
    const std::optional<ObjectiveReading> p = o ? PointOf(*spec_, m.metrics_json) : std::nullopt;
    if (!p) continue;
    // A row read again (a cursor may repeat one) replaces itself.
    PutPoint(*o, m.step, *p, /*newest=*/false);
    touched.insert(m.trial_id);
  }
  for (const Id id : touched) FallBackToCurve(*observation(id));
  for (const auto& [id, b] : before) {
    const search::Observation& now = view.histories[b.space].trials[b.index];
    const search::Observation& was = b.observation;
    if (SameReading(now, was)) {
      view.changed[b.space][b.index] = b.changed;  // read again, not changed
    }
  }
  view.loaded = changes.read;
  view.cursor = changes.cursor;
}

Result<TrialView::Locked> TrialView::Fresh() {
  Locked locked(mu_);  // held until the caller drops it
  mu_.AssertHeld();
  for (;;) {
    if (view_ && std::chrono::steady_clock::now() - view_->loaded < max_age_) break;
    if (reading_) {
      // Another call rereads it. A view that is there serves until then,
      // unless every decision must read (max_age zero): then this call
      // waits, and reads again, since that read may have begun before the
      // change this call must see.
      if (view_ && max_age_.count() > 0) break;
      read_done_.Wait(mu_);
      continue;
    }
    reading_ = true;
    read_void_ = false;
    missed_.clear();
    std::optional<store::ReadCursor> since;
    if (view_) since = view_->cursor;
    Result<Reread> reread = ReadReleasing(since);
    reading_ = false;
    read_done_.NotifyAll();
    std::vector<Change> missed = std::move(missed_);
    missed_.clear();
    if (!reread.ok()) return reread.status();  // the old view, if any, serves on
    if (read_void_) continue;                  // forgotten meanwhile: read again
    if (reread->whole) {
      view_ = std::move(*reread->whole);
      view_->generation = ++generations_;
    } else {
      // Only Forget() drops the view, and then read_void_ is set.
      ApplyChanges(*view_, reread->changes);
    }
    // What this engine changed while the store was read: the read may be older.
    for (const Change& change : missed) change(*view_);
    break;
  }
  locked.Reset(&*view_);
  return locked;
}

Result<TrialView::Reread> TrialView::ReadReleasing(const std::optional<store::ReadCursor>& since) {
  mu_.Unlock();
  Result<Reread> reread = [&]() -> Result<Reread> {
    Reread r;
    if (since) {
      HPO_ASSIGN_OR_RETURN(r.changes, ReadChanges(since->revision));
      if (r.changes.cursor.store_id == since->store_id) return r;
      // Another database than the view was read from: its revisions say
      // nothing about this one.
    }
    HPO_ASSIGN_OR_RETURN(r.whole, ReadNow());
    return r;
  }();
  mu_.Lock();
  return reread;
}

void TrialView::Missed(Change change) {
  if (reading_) missed_.push_back(std::move(change));
}

void TrialView::Apply(const store::TrialRecord& trial) {
  MutexLock lock(mu_);
  if (view_) Add(*view_, trial);
  Missed([this, trial](TrialsSnapshot& view) { Add(view, trial); });
}

namespace {
void SetOutcomeIn(TrialsSnapshot& view, Id trial_id, TrialState state,
                  const std::optional<ObjectiveReading>& final) {
  auto it = view.trials.find(trial_id);
  if (it == view.trials.end()) return;
  SetState(view, trial_id, it->second, state, /*added=*/false);
  search::Observation& o = Changing(view, it->second.space, it->second.index);
  o.status = SearchStatus(state);
  SetFinal(o, final);
  FallBackToCurve(o);  // as ReadNow
}

void DropCurveIn(TrialsSnapshot& view, Id trial_id, int64_t step) {
  auto it = view.trials.find(trial_id);
  if (it == view.trials.end()) return;
  DropPointsAfter(Changing(view, it->second.space, it->second.index), step);
}
}  // namespace

void TrialView::SetOutcome(Id trial_id, TrialState state,
                           const std::optional<ObjectiveReading>& final) {
  MutexLock lock(mu_);
  if (view_) SetOutcomeIn(*view_, trial_id, state, final);
  Missed([=](TrialsSnapshot& view) { SetOutcomeIn(view, trial_id, state, final); });
}

Result<bool> TrialView::ApplyReport(const store::TrialRecord& trial, int64_t step,
                                    const ObjectiveReading& point, bool inserted,
                                    const search::Pruner* judge) {
  auto missed = [this, trial, step, point, inserted](TrialsSnapshot& view) {
    ApplyReportTo(view, trial, step, point, inserted, nullptr);
  };
  if (judge) {
    HPO_ASSIGN_OR_RETURN(Locked view, Fresh());
    mu_.AssertHeld();  // by `view`
    const bool prune = ApplyReportTo(*view, trial, step, point, inserted, judge);
    Missed(missed);
    return prune;
  }
  MutexLock lock(mu_);
  Missed(missed);
  if (!view_) return false;  // nothing to keep current, nothing to decide
  return ApplyReportTo(*view_, trial, step, point, inserted, judge);
}

bool TrialView::ApplyReportTo(TrialsSnapshot& view, const store::TrialRecord& trial, int64_t step,
                              const ObjectiveReading& point, bool inserted,
                              const search::Pruner* judge) const {
  // Created since the view was read (by another replica); a trial the view
  // holds keeps what the view knows (the record may be older).
  if (!view.trials.count(trial.id)) Add(view, trial);
  auto w = view.trials.find(trial.id);
  if (w == view.trials.end()) return false;  // not of a space in the spec
  const search::History& h = view.histories[w->second.space];
  search::Observation& o = Changing(view, w->second.space, w->second.index);
  o.status = search::TrialStatus::kRunning;
  SetState(view, trial.id, w->second, TrialState::kRunning, /*added=*/false);
  if (inserted || o.curve.empty()) {
    // The report is the newest point: whatever the view holds from this
    // step on belongs to an earlier attempt (requeued). A step sent again
    // (not inserted) leaves the stored curve as it is, and so the view.
    PutPoint(o, step, point, /*newest=*/true);
  }
  return judge && judge->ShouldPrune(h, o);
}

void TrialView::DropCurveAfter(Id trial_id, int64_t step) {
  MutexLock lock(mu_);
  if (view_) DropCurveIn(*view_, trial_id, step);
  Missed([=](TrialsSnapshot& view) { DropCurveIn(view, trial_id, step); });
}

void TrialView::Forget() {
  MutexLock lock(mu_);
  view_.reset();
  // A read in flight may hold what was forgotten (a curve a requeue
  // deleted): it is not kept either.
  if (reading_) read_void_ = true;
  missed_.clear();
}

std::optional<TrialEntry> TrialView::Find(store::Id trial_id) {
  MutexLock lock(mu_);
  if (!view_) return std::nullopt;
  const auto it = view_->trials.find(trial_id);
  if (it == view_->trials.end()) return std::nullopt;
  return it->second;
}

size_t TrialView::Kept() {
  MutexLock lock(mu_);
  return view_ ? view_->trials.size() : 0;
}

}  // namespace hpo::server
