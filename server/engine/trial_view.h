// The trials of one experiment as search/ and the placement policy read
// them: one search::History per space (in spec order) and, per trial, its
// state, rung level and place. Read from the store and kept current with the
// engine's own changes; reread when older than a bound, so another
// replica's changes count within it (EngineOptions::history_cache).
//
// A reread reads only what changed since the view's cursor (trials and
// measurements written since, whole curves of trials some of whose
// measurements were deleted; see store::ReadCursor), so its cost follows the
// rate of change, not the experiment's size (at 10,000 trials a
// whole read every second took tens of milliseconds and megabytes). The
// view is read whole the first time, after Forget(), and when the store's
// identity changes.
//
// Thread-safe: one lock per view. Fresh() hands out the locked view; every
// other call takes the lock for itself. A caller holding Fresh()'s lock must
// not call the other methods (the lock is not reentrant). The store is read
// without the lock held: at 10,000 trials a reread takes tens of
// milliseconds, and reports, completions and leases would all queue behind
// it. Meanwhile the view being replaced serves them, and the
// changes they make are applied to both.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "search/history.h"
#include "search/promotion.h"
#include "search/pruner.h"
#include "search/ranking.h"
#include "search/space.h"
#include "server/engine/objectives.h"
#include "server/spec/spec.h"
#include "server/store/store.h"

namespace hpo::server {

// The objective of a trial's metrics (JSON text), minimized; nullopt when
// missing or not finite.
std::optional<double> ObjectiveOf(const ExperimentSpec& spec, const std::string& metrics_json);

// How search/ sees a store state: a paused trial stopped early with what it
// reached (as a pruned one), and so does a pending or leased one until it
// reports (as running).
search::TrialStatus SearchStatus(store::TrialState s);

struct TrialEntry {
  size_t space = 0;  // index into the histories
  size_t index = 0;  // into histories[space].trials
  int64_t number = 0;
  store::TrialState state = store::TrialState::kPending;
  int level = 0;
  int64_t resume_step = 0;
  std::optional<int64_t> stop_step;
  store::TimeMs updated_ms = 0;  // when it last changed state (the store's clock)
};

struct TrialsSnapshot {
  // One per space, in spec order. Changed only by TrialView, which counts
  // every change of an observation in `changed`.
  std::vector<search::History> histories;
  std::map<store::Id, TrialEntry> trials;   // by trial id, trials of the spec's spaces only
  std::map<store::Id, size_t> space_index;  // space id -> index
  std::chrono::steady_clock::time_point loaded;
  store::ReadCursor cursor;  // a reread asks for what changed from here on
  uint64_t generation = 0;   // which whole read of its TrialView this is (from 1)
  uint64_t revision = 0;     // changes to the histories so far
  // Per space and trial, parallel to `histories`: the revision of the
  // observation's last change.
  std::vector<std::vector<uint64_t>> changed;
  // The trials waiting for a device (pending or paused), by id, and per
  // space the ones on a device (leased or running) and the finished ones
  // counted: what a lease's offer lists and counts (server/engine/lease.cc),
  // kept as the states change, so that a lease walks neither every trial
  // (at 10,000 trials that walk was a quarter of a lease's CPU in
  // bench/server_bench) nor every running one (at 10,000 workers, most of
  // an offer's time in bench/fleet_sim's steady state).
  std::set<store::Id> waiting;
  std::vector<int64_t> on_device_per_space;
  std::vector<int64_t> finished_per_space;
  std::vector<int64_t> paused_per_space;
  // The space ranking of `histories`, kept by SpaceRanking() with what
  // each trial gave it (search::RankedResults), so that a change costs
  // O(log n).
  struct Ranking {
    bool made = false;
    search::RankedResults results;
    std::vector<search::SpaceRank> ranks;
    // The observations changed since the ranking last read them (space,
    // index), so that it does not walk every trial on each lease; when
    // they are too many to list, `all_stale` says to read every one.
    std::vector<std::pair<size_t, size_t>> stale;
    bool all_stale = false;
  };
  Ranking ranking;
  // Promotion-type early stopping: what its rule reads, kept as trials
  // change (search::RungResults), so that a lease lists only the paused
  // trials it may promote, not every one (at 10,000 simulated workers with
  // 27,000 paused trials, the walk and the rule over all of them were most
  // of a lease). Stale as `ranking` is; made by Promotable().
  struct Promotions {
    std::optional<search::RungResults> results;
    std::vector<std::pair<size_t, size_t>> stale;
    bool all_stale = false;
  };
  Promotions promotions;
  // Per space, by index into its history: the trial's id.
  std::vector<std::vector<store::Id>> ids;
  // Of the waiting trials, the pending ones.
  std::set<store::Id> pending;
};

// search::RankSpaces of the view's histories (default options): made again
// only when a trial's ranked value changed since it was last made, which
// the trials changed since then (TrialsSnapshot::Ranking::stale) tell. A
// report of a running trial changes none. Call with the view's lock held.
const std::vector<search::SpaceRank>& SpaceRanking(TrialsSnapshot& view,
                                                   const std::vector<search::SearchSpace>& spaces);

// search::PromotionRule::Promotable of the view's histories and paused
// trials, per space: kept by TrialsSnapshot::promotions, brought up to date
// with the trials changed since the last call. Call with the view's lock
// held, always with the same rule.
// `per_rung` as search::RungResults::Promotable's.
std::vector<std::vector<search::Promotion>> Promotable(
    TrialsSnapshot& view, const search::PromotionRule& rule,
    size_t per_rung = std::numeric_limits<size_t>::max());

// Whether a trial in this state is still to run or running (IsOpen), or
// has finished.
bool IsOpen(store::TrialState s);

// A view's histories as one caller copies them to read without the view's
// lock (sampling, the space ranking), kept between its calls. Update()
// copies only the observations that changed since the last one, so its
// cost follows the rate of change, not the experiment's size (at 10,000
// trials a whole copy per suggestion was a fifth of its CPU).
struct HistoriesCopy {
  std::vector<search::History> histories;
  uint64_t generation = 0;  // of the view it copies; 0: none yet
  uint64_t revision = 0;    // that view's revision it holds

  // Brings the copy to what `view` holds; returns the observations copied.
  size_t Update(const TrialsSnapshot& view);
};

class TrialView {
 public:
  // `spec` and `store` outlive the view.
  TrialView(store::Store& store, store::Id experiment_id,
            std::shared_ptr<const ExperimentSpec> spec, std::chrono::milliseconds max_age);

  // The view with its lock held.
  using Locked = LockedPtr<TrialsSnapshot>;
  // The view, read first when there is none or it is older than max_age.
  // One caller rereads, without the lock; while it does, the others get
  // the view it replaces (at most max_age plus one read old), or, when
  // there is none or max_age is zero (every decision reads), wait for it.
  Result<Locked> Fresh() HPO_EXCLUDES(mu_);
  // Everything read from the store now, not kept (tests, the dashboard).
  Result<TrialsSnapshot> ReadNow() const;

  // This engine's changes, applied to the view when there is one (none: the
  // next Fresh() reads them). A trial the view does not hold is added.
  void Apply(const store::TrialRecord& trial) HPO_EXCLUDES(mu_);
  // A trial's end (or pause) and its final value, if the view holds it.
  // (`final`: PointOf its final metrics; none when it did not complete.)
  void SetOutcome(store::Id trial_id, store::TrialState state,
                  const std::optional<ObjectiveReading>& final) HPO_EXCLUDES(mu_);
  // Puts a report into the view (PointOf its metrics; `inserted`: new to
  // the store) and, with `judge`, asks it whether the trial should stop now
  // (reading the view first if it is too old). Without `judge` and without
  // a view it does nothing.
  Result<bool> ApplyReport(const store::TrialRecord& trial, int64_t step,
                           const ObjectiveReading& point, bool inserted,
                           const search::Pruner* judge) HPO_EXCLUDES(mu_);
  // The store deleted a trial's steps after `step` (a restart: 0).
  void DropCurveAfter(store::Id trial_id, int64_t step) HPO_EXCLUDES(mu_);
  // Drops the view (a requeue deleted a curve; the experiment ended).
  void Forget() HPO_EXCLUDES(mu_);
  // The trials the view holds now (0 when there is none).
  size_t Kept() HPO_EXCLUDES(mu_);
  // A trial as the view holds it, if it does.
  std::optional<TrialEntry> Find(store::Id trial_id) HPO_EXCLUDES(mu_);
  // Apply() for a caller that holds the view from Fresh().
  void Add(TrialsSnapshot& locked_view, const store::TrialRecord& trial) const;

 private:
  // ApplyReport's work on the view, held one way or the other.
  bool ApplyReportTo(TrialsSnapshot& view, const store::TrialRecord& trial, int64_t step,
                     const ObjectiveReading& point, bool inserted,
                     const search::Pruner* judge) const;

  store::Store& store_;
  const store::Id experiment_id_;
  const std::shared_ptr<const ExperimentSpec> spec_;
  const std::chrono::milliseconds max_age_;
  // A change this engine made to the view while a reread was in flight:
  // the read may have missed it, so it is applied to the new view too.
  // Each is idempotent, as the read may also have seen it.
  using Change = std::function<void(TrialsSnapshot&)>;
  void Missed(Change change) HPO_REQUIRES(mu_);
  // What changed in the store since a cursor's revision (everything
  // when none), read in that order.
  struct Changes {
    std::chrono::steady_clock::time_point read;  // what is read is at least this fresh
    store::ReadCursor cursor;                    // taken before the reads
    std::vector<store::TrialRecord> trials;
    std::vector<store::MeasurementRecord> measurements;
    // The whole curve of each trial some of whose measurements were deleted.
    std::map<store::Id, std::vector<store::MeasurementRecord>> curves;
  };
  Result<Changes> ReadChanges(std::optional<int64_t> since) const;
  // Brings `view` to what a whole read at `changes` would give (trial
  // order aside: a trial new to the view goes last in its space).
  void ApplyChanges(TrialsSnapshot& view, const Changes& changes) const;
  // A whole new view (no cursor), or the changes since it, read with mu_
  // released and held again after.
  struct Reread {
    std::optional<TrialsSnapshot> whole;
    Changes changes;
  };
  Result<Reread> ReadReleasing(const std::optional<store::ReadCursor>& since) HPO_REQUIRES(mu_);

  Mutex mu_;
  CondVar read_done_;  // signalled when a reread ends
  std::optional<TrialsSnapshot> view_ HPO_GUARDED_BY(mu_);
  uint64_t generations_ HPO_GUARDED_BY(mu_) = 0;  // whole reads kept so far
  bool reading_ HPO_GUARDED_BY(mu_) = false;      // a caller of Fresh() reads the store now
  bool read_void_ HPO_GUARDED_BY(mu_) = false;    // Forget() since that read began: it is not kept
  std::vector<Change> missed_ HPO_GUARDED_BY(mu_);  // changes made since that read began
};

}  // namespace hpo::server
