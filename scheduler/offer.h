// What an experiment offers a device that asks for work: the WorkItems the
// placement policy (policy.h) chooses among. Pure, and the one place this is
// decided: the engine builds the input from its trial view
// (server/engine/lease.cc) and the fleet simulator from its own (simulator.h).
//
//  * resume   each paused trial the promotion rule lets go on
//             (search/promotion.h), running from its rung to the next;
//             without a promotion rule (stop-type early stopping), every
//             paused trial: it paused to move to a faster device or was
//             preempted (policy.h, DecideMove), and runs to its end, its
//             level the number of `rung_steps` it has passed;
//  * pending  each trial waiting for a device (requeued, or made ahead);
//  * new      one per search space that is still below its share of the
//             trials after one more (share * (trials + 1) > its trials),
//             while the experiment has fewer than max_trials trials; the
//             space ranking's own pick is always offered, marked
//             `preferred` and listed first (the policies give ties to the
//             item listed first), and a new trial's first segment ends at
//             the promotion rule's first rung (or runs the whole budget).
//             The share bound keeps the split between spaces the
//             ranking's (SHADHO's allocation): the policy chooses which
//             device starts which space, not how many trials each gets.
//             (Found by bench/hetero: offered every space, the fastest
//             worker took the top space's new trial every time, and one
//             run made 66 MLP trials to 13 CNNs against shares near 1:1.)
// max_parallel caps the trials on devices or waiting for one: at the cap
// only pending trials are offered (taking one adds nobody).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/policy.h"
#include "search/history.h"
#include "search/promotion.h"

namespace hpo::scheduler {

struct OfferTrial {
  enum class Phase { kPending, kOnDevice, kPaused, kFinished };
  int64_t id = 0;
  size_t space = 0;  // index into the histories
  size_t index = 0;  // into histories[space].trials
  Phase phase = Phase::kPending;
  int level = 0;
  int64_t resume_step = 0;
  std::optional<int64_t> stop_step;
  double waiting_s = 0;  // since it last changed phase
  // Paused to move to a faster class (DecideMove): that class, which its
  // resume item carries (WorkItem::moving_to); empty otherwise.
  std::string moving_to;
};

struct OfferInput {
  const std::vector<search::History>* histories = nullptr;  // one per space
  std::vector<OfferTrial> trials;
  // Finished trials left out of `trials`, per space: they are only counted
  // (toward max_trials and the spaces' shares), so a caller with thousands
  // need not list them on every lease.
  std::vector<int64_t> finished_per_space;
  // Trials on a device (leased or running) left out of `trials`, per space:
  // counted the same way, and toward max_parallel. A caller may list them
  // instead (phase kOnDevice); at 10,000 workers listing them on every lease
  // was most of a lease's time.
  std::vector<int64_t> on_device_per_space;
  std::vector<double> shares;          // per space (search::SpaceRank::share)
  std::vector<std::string> workloads;  // per space
  int preferred_space = 0;             // search::PickSpace's choice
  int64_t max_trials = 0;
  int64_t max_parallel = 0;
  int64_t steps_per_trial = 0;
  const search::PromotionRule* promotion = nullptr;  // null: stopping-type or no early stopping
  // Promotion-type, from a caller that keeps the rule's results as trials
  // change (search::RungResults): per space, what may be promoted now. The
  // caller then lists only the pending trials and these paused ones (and
  // any it claims for another lease, as on a device); the paused trials it
  // leaves out are counted in paused_per_space. Unset: the rule's
  // Promotable over the listed paused trials, which must be all of them.
  std::optional<std::vector<std::vector<search::Promotion>>> promotable;
  std::vector<int64_t> paused_per_space;
  // Stop-type early stopping's rung steps, ascending: a paused trial's level
  // is how many of them it has passed (placement's importance).
  std::vector<int64_t> rung_steps;
};

struct Offer {
  std::vector<WorkItem> items;
  // Parallel to `items`: a resume item's promotion (the others' is unused).
  // Not a map by trial id: at 10,000 workers its inserts were a fifth of a
  // lease's time.
  std::vector<search::Promotion> promotions;
};

Offer OfferWork(const OfferInput& in);

// How many promotions of one rung a caller keeping RungResults lists (the
// best by value; Promotion::more counts the rest, WorkItem::alike carries
// it): items of one rung differ for the policy only in which trial they
// resume, and ASHA resumes the best first, so the rest can wait until they
// are among the best. At 10,000 simulated workers the speed policy held
// back thousands of promotions for faster devices, and listing every one
// on every lease took milliseconds. What is lost: a promotion below the
// best of its rung is not seen by the starvation rule (max_wait_s) or by
// fifo until it rises among them.
inline constexpr size_t kMaxPromotionsPerRung = 8;

}  // namespace hpo::scheduler
