#include "scheduler/offer.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "search/pruner.h"
#include "search/ranking.h"

namespace hpo::scheduler {

namespace {

// What every part of an offer reads of its input.
struct OfferContext {
  explicit OfferContext(const OfferInput& in)
      : in(in), spaces(in.histories ? in.histories->size() : 0) {}

  // A listed trial that exists in its space's history; the others are left out.
  bool Known(const OfferTrial& t) const {
    return t.space < spaces && t.index < (*in.histories)[t.space].trials.size();
  }
  double Share(size_t s) const { return s < in.shares.size() ? in.shares[s] : 1.0; }
  std::string Workload(size_t s) const {
    return s < in.workloads.size() ? in.workloads[s] : std::string();
  }

  const OfferInput& in;
  const size_t spaces;
};

// The paused trials the promotion rule promotes, each a resume item with its
// promotion: the caller's (in.promotable), or the rule's own reading of the
// histories.
void AddPromotions(const OfferContext& c, Offer& out) {
  const OfferInput& in = c.in;
  const auto resume = [&](const OfferTrial& t, size_t s, const search::Promotion& p) {
    WorkItem item;
    item.kind = WorkItem::Kind::kResume;
    item.trial_id = t.id;
    item.space_index = static_cast<int>(s);
    item.space_priority = c.Share(s);
    item.level = p.from_level + 1;
    item.workload = c.Workload(s);
    item.steps = p.to_step - p.from_step;
    item.remaining_steps = in.steps_per_trial - p.from_step;
    item.waiting_s = t.waiting_s;
    item.alike = p.more;
    out.items.push_back(item);
    out.promotions.push_back(p);
  };
  if (in.promotable) {
    // The caller's promotions, of the paused trials it listed.
    std::unordered_map<uint64_t, const OfferTrial*> listed;
    const auto key = [](size_t s, size_t index) {
      return (static_cast<uint64_t>(s) << 40) ^ static_cast<uint64_t>(index);
    };
    for (const auto& t : in.trials) {
      if (c.Known(t) && t.phase == OfferTrial::Phase::kPaused) listed[key(t.space, t.index)] = &t;
    }
    for (size_t s = 0; s < c.spaces && s < in.promotable->size(); ++s) {
      for (const search::Promotion& p : (*in.promotable)[s]) {
        const auto it = listed.find(key(s, p.index));
        if (it != listed.end()) resume(*it->second, s, p);
      }
    }
    return;
  }
  // The paused trials by (space, index in its history), then per space in
  // index order, the order the rule reads them in.
  std::vector<std::vector<const OfferTrial*>> at(c.spaces);
  for (size_t s = 0; s < c.spaces; ++s) at[s].assign((*in.histories)[s].trials.size(), nullptr);
  for (const auto& t : in.trials) {
    if (c.Known(t) && t.phase == OfferTrial::Phase::kPaused) at[t.space][t.index] = &t;
  }
  std::vector<std::vector<search::PausedTrial>> paused(c.spaces);
  for (size_t s = 0; s < c.spaces; ++s) {
    for (size_t i = 0; i < at[s].size(); ++i) {
      if (at[s][i]) paused[s].push_back({i, at[s][i]->level});
    }
  }
  for (size_t s = 0; s < c.spaces; ++s) {
    if (paused[s].empty()) continue;
    for (const search::Promotion& p : in.promotion->Promotable((*in.histories)[s], paused[s]))
      resume(*at[s][p.index], s, p);
  }
}

// Without a promotion rule, a paused trial (one moving to another device)
// resumes to the end of its budget.
void AddMoves(const OfferContext& c, Offer& out) {
  const OfferInput& in = c.in;
  for (const auto& t : in.trials) {
    if (t.phase != OfferTrial::Phase::kPaused || t.space >= c.spaces ||
        t.resume_step >= in.steps_per_trial)
      continue;
    WorkItem item;
    item.kind = WorkItem::Kind::kResume;
    item.trial_id = t.id;
    item.space_index = static_cast<int>(t.space);
    item.space_priority = c.Share(t.space);
    item.level = search::RungsPassed(in.rung_steps, t.resume_step);
    item.workload = c.Workload(t.space);
    item.steps = in.steps_per_trial - t.resume_step;
    item.remaining_steps = item.steps;
    item.waiting_s = t.waiting_s;
    item.moving_to = t.moving_to;
    out.items.push_back(item);
    search::Promotion p;
    p.index = t.index;
    p.from_level = t.level;
    p.from_step = t.resume_step;
    p.to_step = in.steps_per_trial;
    p.to_end = true;
    out.promotions.push_back(p);
  }
}

void AddPending(const OfferContext& c, Offer& out) {
  const OfferInput& in = c.in;
  for (const auto& t : in.trials) {
    if (t.phase != OfferTrial::Phase::kPending || t.space >= c.spaces) continue;
    WorkItem item;
    item.kind = WorkItem::Kind::kPending;
    item.trial_id = t.id;
    item.space_index = static_cast<int>(t.space);
    item.space_priority = c.Share(t.space);
    item.level = t.level;
    item.workload = c.Workload(t.space);
    item.steps = t.stop_step.value_or(in.steps_per_trial) - t.resume_step;
    item.remaining_steps = in.steps_per_trial - t.resume_step;
    item.waiting_s = t.waiting_s;
    out.items.push_back(item);
  }
}

// A new trial of each space still below its share after one more, the
// preferred space's first. `total`: the experiment's trials so far.
void AddNewTrials(const OfferContext& c, int64_t total, Offer& out) {
  const OfferInput& in = c.in;
  const size_t spaces = c.spaces;
  // The preferred space's new trial is listed first: the policies give ties
  // to the item listed first, and new trials of spaces with equal shares
  // always tie (every unexplored space has the top explored priority,
  // search/ranking.h). Listed by index, space 0 won every such tie and a
  // second space never ran under shadho; the ranking's pick (PickSpace: the
  // space furthest below its share) takes turns.
  const size_t first = in.preferred_space >= 0 && static_cast<size_t>(in.preferred_space) < spaces
                           ? static_cast<size_t>(in.preferred_space)
                           : 0;
  std::vector<int64_t> per_space(spaces, 0);
  for (size_t sp = 0; sp < spaces && sp < in.finished_per_space.size(); ++sp) {
    per_space[sp] = in.finished_per_space[sp];
  }
  for (size_t sp = 0; sp < spaces && sp < in.on_device_per_space.size(); ++sp) {
    per_space[sp] += in.on_device_per_space[sp];
  }
  for (size_t sp = 0; sp < spaces && sp < in.paused_per_space.size(); ++sp) {
    per_space[sp] += in.paused_per_space[sp];
  }
  for (const auto& t : in.trials) {
    if (t.space < spaces) ++per_space[t.space];
  }
  for (size_t k = 0; k < spaces; ++k) {
    const size_t s = (first + k) % spaces;
    // Only spaces still below their share after one more trial: matching
    // alone would give the fastest device the top space's new trial every
    // time, and the fast device makes most of the trials.
    if (s != first && !search::BelowShareAfterOneMore(c.Share(s), total, per_space[s])) continue;
    WorkItem item;
    item.kind = WorkItem::Kind::kNew;
    item.space_index = static_cast<int>(s);
    item.space_priority = c.Share(s);
    item.workload = c.Workload(s);
    item.steps = in.promotion ? in.promotion->FirstStop(total) : in.steps_per_trial;
    item.remaining_steps = in.steps_per_trial;
    item.preferred = static_cast<int>(s) == in.preferred_space;
    out.items.push_back(item);
  }
}

}  // namespace

Offer OfferWork(const OfferInput& in) {
  const OfferContext c(in);
  Offer out;
  int64_t total = 0, on_devices = 0;
  for (size_t sp = 0; sp < c.spaces && sp < in.finished_per_space.size(); ++sp)
    total += in.finished_per_space[sp];
  for (size_t sp = 0; sp < c.spaces && sp < in.paused_per_space.size(); ++sp)
    total += in.paused_per_space[sp];
  for (size_t sp = 0; sp < c.spaces && sp < in.on_device_per_space.size(); ++sp) {
    total += in.on_device_per_space[sp];
    on_devices += in.on_device_per_space[sp];
  }
  for (const auto& t : in.trials) {
    if (!c.Known(t)) continue;
    ++total;
    if (t.phase == OfferTrial::Phase::kPending || t.phase == OfferTrial::Phase::kOnDevice)
      ++on_devices;
  }
  const bool room = on_devices < in.max_parallel;
  out.items.reserve(in.trials.size() + c.spaces);
  out.promotions.reserve(in.trials.size() + c.spaces);
  if (room && in.promotion) AddPromotions(c, out);
  if (room && !in.promotion) AddMoves(c, out);
  AddPending(c, out);
  if (room && total < in.max_trials) AddNewTrials(c, total, out);
  // The resume items come first, each with its promotion; the pending and
  // new items after them have none.
  out.promotions.resize(out.items.size());
  return out;
}

}  // namespace hpo::scheduler
